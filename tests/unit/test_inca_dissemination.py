"""IncA's dissemination (`algorithms.inca.engine`): an epidemic of digests and batches of records.

* A round's messages are a node's digest to `fanout` peers, each peer's batch of what the digest
  lacks (with what it lacks itself), and the batch that answers it: the dissemination sends at
  most 3 · fanout · n messages a round, not a message per record and party (n(n − 1) and more).
* A batch over the message limit is split; the result does not change.
* With dropouts (the simulator's dropout plans, a party down during the dissemination, messages
  lost and delayed on the wire), every party that is still there holds every record that got out,
  and its result is Σ y^(T) / Σ ω^(T) over those records of the parties online at T, computed here
  from the engines' own final state (not from any record).
* Each node's ledger names every record it took, once, and from whom; `netdp audit` over the
  nodes' SQLite ledgers finds every batch received as sent and the shares of Eq. (8) injected.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca import engine as inca_engine
from netdp_node.algorithms.inca.engine import (
    CLOSE,
    DIGEST,
    GOSSIP_ROUNDS,
    MIX,
    RECORDS,
    Inca,
    decode_batch,
    encode_digest,
)
from netdp_node.audit import audit
from netdp_node.faults import plan_from_flags
from netdp_node.protocols.base import JobContext, Message, Refused
from netdp_node.simulate import Simulator, dropout_plans, synthetic_data

pytestmark = pytest.mark.timeout(300)


def _params(n: int, **kw: Any) -> dict[str, Any]:
    return get_algorithm("inca").validate({"T": 4, "k": 2, "dim": 2, **kw}, n)


def _sim(n: int, p: dict[str, Any], seed: int = 1, **kw: Any) -> Simulator:
    ids = [f"n{i}" for i in range(n)]
    data, _ = synthetic_data("inca", ids, p, seed)
    return Simulator("inca", ids, p, data, seed=seed, public_seed=seed, **kw)


def _gone(sim: Simulator, nid: str) -> bool:
    """The node left for good (--fault-leave-at-step): it takes no more part."""
    f = sim.runtimes[nid].faults
    return f is not None and f.left


def _check_against_published(sim: Simulator, res: Any) -> int:
    """Every node still there holds every record that got out (that some other node holds), and
    its result is Σ y / Σ ω over the records of the parties online at T, from the engines' own
    state. Returns the number of records that got out."""
    ids, T = sim.ids, int(sim.params["T"])
    engines = {v: sim.engines[v] for v in ids}
    out_ = [
        i for i, v in enumerate(ids) if any(engines[w].record(i) is not None for w in ids if w != v)
    ]
    final = [i for i in out_ if engines[ids[i]].online[T]]
    sum_y = np.sum([engines[ids[i]].y for i in final], axis=0)
    sum_w = float(np.sum([engines[ids[i]].omega for i in final]))
    there = [v for v in ids if not _gone(sim, v)]
    assert there and final
    for v in there:
        e = engines[v]
        assert [i for i in out_ if e.record(i) is None] == [], f"{v} lacks records"
        info = res.outputs[v].info
        assert info["final"] == [ids[i] for i in final]
        assert info["sum_omega"] == pytest.approx(sum_w, abs=1e-9)
        np.testing.assert_allclose(info["sum_y"], sum_y, atol=1e-9)
        np.testing.assert_allclose(res.outputs[v].value, sum_y / sum_w, atol=1e-9)
    return len(out_)


def test_the_dissemination_sends_a_few_messages_a_round_not_one_per_record() -> None:
    n = 64
    p = _params(n)
    kinds: Counter[str] = Counter()
    rounds = [0]

    def watch(sender: str, to: str, msg: Message) -> None:
        kinds[msg.kind] += 1
        if msg.kind == DIGEST:
            rounds[0] = max(rounds[0], msg.round)

    sim = _sim(n, p, lose=watch, record="none")
    res = sim.run()
    assert len(res.outputs) == n
    assert _check_against_published(sim, res) == n
    dissemination = sum(c for k, c in kinds.items() if k not in (MIX, CLOSE))
    assert set(kinds) == {MIX, CLOSE, DIGEST, RECORDS}
    r = rounds[0]
    assert 1 <= r <= GOSSIP_ROUNDS
    # per round and node: fanout digests, a batch answering each, a batch answering that
    assert dissemination <= 3 * int(p["fanout"]) * n * r
    assert dissemination < n * (n - 1) / 2  # (one message per record and party: n(n − 1))


def test_a_batch_over_the_message_limit_is_split_and_the_result_is_the_same(monkeypatch) -> None:
    n = 20
    p = _params(n)
    whole = _sim(n, p, record="none").run()
    limit = 60  # numbers: 5 records of dim 2 (10 numbers each) and the batch's 3 counts
    monkeypatch.setattr(inca_engine, "BATCH_NUMBERS", limit)
    sizes: list[int] = []
    records: list[int] = []

    def watch(sender: str, to: str, msg: Message) -> None:
        if msg.kind == RECORDS:
            assert msg.payload is not None
            sizes.append(msg.payload.shape[0])
            records.append(decode_batch(msg.payload, 2, n, 4).origins.shape[0])
        return None

    sim = _sim(n, p, lose=watch, record="none")
    split = sim.run()
    assert max(sizes) <= limit
    assert max(records) == 5  # full batches of five (the limit's worth), more than one
    assert sum(1 for m in records if m == 5) > 1
    assert _check_against_published(sim, split) == n
    for v, o in whole.outputs.items():
        np.testing.assert_array_equal(split.outputs[v].value, o.value)
        assert split.outputs[v].info == o.info


def _down_during_dissemination(sim: Simulator, who: str, steps: int, hits: list[float]) -> Any:
    """`who` is down from the end of its iteration T for `steps` dissemination rounds' time (the
    times it was found down go to `hits`)."""
    T = int(sim.params["T"])
    wait = float(sim.params["gossip_s"]) / GOSSIP_ROUNDS * steps
    since: dict[str, float] = {}

    def down(nid: str, now: float) -> bool:
        if nid != who or sim.engines[nid].cur <= T:
            return False
        start = since.setdefault(nid, now)
        if now - start < wait:
            hits.append(now)
            return True
        return False

    return down


@pytest.mark.parametrize(
    "case",
    [
        "dropout plans, seed 0",  # `netdp simulate --leave 0.3 --miss 0.2`
        "dropout plans, seed 1",
        "down for 6 rounds of the dissemination",
        "lost and delayed messages",
    ],
)
def test_with_dropouts_every_party_still_there_gets_every_record_that_got_out(case: str) -> None:
    n = 30
    hits: list[float] = []
    if case.startswith("dropout plans"):
        seed = int(case[-1])
        hooks = get_algorithm("inca").hooks
        p = _params(n, T=6, **hooks.sim_param_defaults(0.3, 0.2))
        ids = [f"n{i}" for i in range(n)]
        sim = _sim(n, p, seed=seed, faults=dropout_plans("inca", ids, p, 0.3, 0.2, seed))
    elif case.startswith("down"):
        p = _params(n)
        sim = _sim(n, p, seed=2)
        sim.down = _down_during_dissemination(sim, "n4", 6, hits)
    else:
        p = _params(n)
        flags = ["--fault-drop", "0.3", "--fault-delay-ms", "40"]
        faults = {f"n{i}": plan_from_flags(flags) for i in range(0, n, 3)}
        sim = _sim(n, p, seed=3, faults=faults)
    res = sim.run()
    got_out = _check_against_published(sim, res)
    if case.startswith("dropout plans"):
        assert got_out < n  # the leavers' records never got out
        assert any(res.outputs[v].info["offline"] for v in res.outputs)  # missed iterations
    else:
        assert got_out == n
    if case.startswith("down"):  # it was down while the others disseminated
        assert max(hits) - min(hits) > float(p["gossip_s"]) / 4
    if case.startswith("lost"):  # messages of the dissemination were lost (and sent again)
        drops = [e for v in sim.ids for e in res.entries[v] if e.event == "fault"]
        assert len(drops) > 20 and {e.params["fault"] for e in drops} == {"drop"}


def test_each_node_s_ledger_names_every_record_it_took_once_and_the_audit_passes(
    tmp_path,
) -> None:
    n = 8
    p = _params(n)
    sim = _sim(n, p, ledger_dir=tmp_path)
    res = sim.run()
    assert len(res.outputs) == n
    for v in sim.ids:
        took = [
            (name, e.peer)
            for e in res.entries[v]
            if e.event == "inca-records"
            for name in e.params["records"]
        ]
        assert sorted(name for name, _ in took) == sorted(w for w in sim.ids if w != v)
        assert all(peer in sim.ids and peer != v for _, peer in took)
        received = [e for e in res.entries[v] if e.direction == "received" and e.kind == RECORDS]
        assert {peer for _, peer in took} <= {e.peer for e in received}
    rep = audit([tmp_path / v for v in sim.ids])
    checks = {c["name"]: c for c in rep["checks"]}
    for name in ("tokens-conserved", "received-once", "inca-shares", "privacy-monotone"):
        assert checks[name]["ok"], (name, checks[name]["details"])


def test_a_round_does_not_ask_a_party_that_left_nor_a_peer_given_up_on() -> None:
    """A party that left during the mixing as far as the node knows (its proxy held, no record,
    last MIX of an iteration before T) and a peer a message gave up on are not asked; the latter is
    asked again once it is heard from, the former once its MIX of iteration T is reported."""
    n, T = 8, 4
    ids = [f"n{i}" for i in range(n)]
    p = _params(n, T=T)
    me = Inca(JobContext("j", "inca", "n0", ids, p, 1), np.zeros(2), np.random.default_rng(0))
    me.start()

    def asked(rounds: int = 400) -> set[int]:
        out: set[int] = set()
        for _ in range(rounds):
            out.update(me._peers())
        return out

    assert asked() == set(range(1, n))
    me._see(3, 2, np.zeros(3))  # n3's last MIX reported: iteration 2 of 4
    me._activate(3)
    assert me.on_undeliverable("n5", Message(DIGEST, round=1), "UNAVAILABLE", "gave up") == []
    assert asked() == set(range(1, n)) - {3, 5}
    with pytest.raises(Refused):  # a message refused changes nothing
        me.on_message("n5", Message(DIGEST, round=1))
    assert asked() == set(range(1, n)) - {3, 5}
    held = np.zeros(n, dtype=bool)
    held[5] = True
    me.on_message("n5", Message(DIGEST, payload=encode_digest(held, [], []), round=1))
    assert asked() == set(range(1, n)) - {3}
    me._see(3, T, np.zeros(3))  # its MIX of iteration T was reported: it did not leave then
    assert asked() == set(range(1, n))
