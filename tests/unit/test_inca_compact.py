"""IncA's compact dissemination records and results (`algorithms.inca.engine`): a history is sent
as its exceptions to the expected one, and a result states the execution as exceptions
(`offline`, `uncounted`).

Oracles: the dense reconstruction of earlier versions (T·n flags per record, every message
examined: `_dense_outcome` below, independent of the compact code), the execution the result of a
run with dropouts states in the dense form of earlier ledgers (built here from the public schedule
and the engines' own histories), and the accountant's audit of both forms.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca.accountant import IncaAccountant
from netdp_node.algorithms.inca.engine import (
    DIGEST,
    EXPECTED,
    MIX,
    RECORDS,
    History,
    Inca,
    decode_history,
    decode_record,
    encode_batch,
    encode_digest,
    encode_history,
    in_neighbours,
    outcome_from_records,
)
from netdp_node.privacy import inca_audit
from netdp_node.privacy.inca_audit import counted_from_exceptions, execution_from_info
from netdp_node.protocols.base import (
    ANY_LENGTH,
    JobContext,
    Message,
    RefusalCode,
    Refused,
    shape_fits,
)
from netdp_node.simulate import Simulator

pytestmark = pytest.mark.timeout(120)


# -- the dense form of earlier versions (the oracle) ---------------------------------------------
def _dense(h: History, x: int, known: int, n: int, k: int, T: int, ins: Any) -> dict[str, Any]:
    """A history as the T·n flags earlier records carried (rows after `known`: all 0)."""
    online = np.zeros(T, dtype=bool)
    out = np.zeros((T, k), dtype=bool)
    inn = np.zeros((T, n), dtype=bool)
    for t in range(1, known + 1):
        online[t - 1] = t not in h.off
        out[t - 1] = [(t, s) not in h.out_miss for s in range(k)]
        for i in ins[t - 1][x]:
            inn[t - 1, i] = (t, i) not in h.in_miss
    return {"online": online, "counted_out": out, "counted_in": inn}


def _dense_outcome(n, k, T, nb, records, proxies, has_final):
    """The reconstruction of earlier versions over dense histories, every party and message
    examined (O(T·n²)): online sets, finals, lost messages, counted messages per iteration."""
    hist = dict(records)
    known = {i: T for i in records}
    for i, (t, h) in proxies.items():
        if i not in records:
            hist[i], known[i] = h, t - 1
    online = np.zeros((T + 1, n), dtype=bool)
    online[0] = True
    for i, r in hist.items():
        online[1 : known[i] + 1, i] = r["online"][: known[i]]
    for t in range(1, T + 1):
        for i in range(n):
            if known.get(i, 0) >= t:
                continue
            for j, r in hist.items():
                if known[j] < t:
                    continue
                if r["counted_in"][t - 1, i] or (
                    i in nb[t - 1, j] and r["counted_out"][t - 1, list(nb[t - 1, j]).index(i)]
                ):
                    online[t, i] = True
    for i in range(n):
        s = int(np.flatnonzero(online[:, i]).max())
        if s < T:
            online[s + 1, i] = True
    lost, counted_all = [], []
    for t in range(1, T + 1):
        counted = set()
        for i in np.flatnonzero(online[t]).tolist():
            for slot, j in enumerate(nb[t - 1, i]):
                j = int(j)
                by_s = hist[i]["counted_out"][t - 1, slot] if known.get(i, 0) >= t else None
                by_r = hist[j]["counted_in"][t - 1, i] if known.get(j, 0) >= t else None
                if by_s and by_r is not None and not by_r:
                    lost.append((t, i, j))
                elif online[t, j] and (
                    by_r if by_r is not None else by_s if by_s is not None else True
                ):
                    counted.add((i, j))
        counted_all.append(counted)
    final = np.zeros(n, dtype=bool)
    for i in records:
        final[i] = has_final[i] and bool(online[T, i])
    return online, final, lost, counted_all


def _random_history(rng, x, upto, k, ins, p_off, p_miss) -> History:
    off = frozenset(t for t in range(1, upto + 1) if rng.random() < p_off)
    out = frozenset((t, s) for t in range(1, upto + 1) for s in range(k) if rng.random() < p_miss)
    inn = frozenset(
        (t, i) for t in range(1, upto + 1) for i in ins[t - 1][x] if rng.random() < p_miss
    )
    return History(off, out, inn) if off or out or inn else EXPECTED


@pytest.mark.parametrize("seed", range(12))
def test_outcome_is_the_dense_reconstruction_of_earlier_versions(seed: int) -> None:
    """Random histories (dropouts, uncounted messages, parties whose record never came, some
    known up to an iteration through a proxy): the compact reconstruction, which looks only at
    the messages an exception touches, gives exactly the dense one's online sets, finals, lost
    messages and counted messages."""
    rng = np.random.default_rng(seed)
    n, k, T = int(rng.integers(5, 14)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    nb = inca_audit.out_neighbours(n, k, T, seed)
    ins = in_neighbours(nb)
    p_off, p_miss = rng.choice([0.0, 0.1, 0.4]), rng.choice([0.0, 0.1, 0.3])
    have = [i for i in range(n) if rng.random() < 0.75]
    records = {i: _random_history(rng, i, T, k, ins, p_off, p_miss) for i in have}
    has_final = {i: T not in records[i].off and rng.random() < 0.9 for i in have}
    proxies = {}
    for i in range(n):
        if i not in records and rng.random() < 0.6:
            t = int(rng.integers(1, T + 1))
            proxies[i] = (t, _random_history(rng, i, t - 1, k, ins, p_off, p_miss))
    online, final, info = outcome_from_records(n, k, T, seed, records, has_final, nb, proxies, ins)
    dense_records = {i: _dense(h, i, T, n, k, T, ins) for i, h in records.items()}
    dense_proxies = {i: (t, _dense(h, i, t - 1, n, k, T, ins)) for i, (t, h) in proxies.items()}
    d_online, d_final, d_lost, d_counted = _dense_outcome(
        n, k, T, nb, dense_records, dense_proxies, has_final
    )
    np.testing.assert_array_equal(online, d_online)
    np.testing.assert_array_equal(final, d_final)
    assert info["lost"] == d_lost
    assert info["missing"] == [i for i in range(n) if i not in records]
    assert counted_from_exceptions(nb, online, info["uncounted"]) == d_counted
    # "uncounted" lists only planned messages of online senders, each once, ascending
    assert info["uncounted"] == sorted(set(info["uncounted"]))
    assert all(online[t, i] and j in nb[t - 1, i] for t, i, j in info["uncounted"])


def _params(n: int, **kw: object) -> dict:
    return get_algorithm("inca").prepare({"T": 5, "k": 2, "round_s": 1.0, "dim": 2, **kw}, n)


def _spec(ids: list[str], p: dict, seed: int) -> dict:
    return {
        "job_id": "sim",
        "algorithm": "inca",
        "participants": ids,
        "params": p,
        "public_seed": seed,
    }


def _run_with_dropouts(n: int, T: int, seed: int, windows: dict[str, tuple[int, int]]):
    ids = [f"n{i}" for i in range(n)]
    p = _params(n, T=T)
    rng = np.random.default_rng(5)
    data = {v: rng.uniform(0, 1, 2) for v in ids}
    sim = Simulator("inca", ids, p, data, seed=seed, public_seed=seed, latency=0.01)

    def down(nid: str, now: float) -> bool:
        w = windows.get(nid)
        return w is not None and w[0] <= sim.engines[nid].cur <= w[1]

    sim.down = down
    return ids, p, sim, sim.run()


def _dense_info(ids, p, seed, engines, info) -> dict[str, Any]:
    """The result in the dense form earlier ledgers hold (`online` matrix, `counted` pairs),
    rebuilt independently: the engines' own histories, dense (`_dense`), through the dense
    reconstruction."""
    n, k, T = len(ids), int(p["k"]), int(p["T"])
    nb = inca_audit.out_neighbours(n, k, T, seed)
    ins = in_neighbours(nb)
    recs, has_final = {}, {}
    for i, e in enumerate(engines):
        if ids[i] in info["missing"]:
            continue
        h = History(frozenset(e.h_off), frozenset(e.h_out), frozenset(e.h_in))
        recs[i] = _dense(h, i, T, n, k, T, ins)
        has_final[i] = bool(e.online[T])
    # the leavers' histories as far as the records of the others show them (their proxies)
    holder = next(e for i, e in enumerate(engines) if ids[i] == info["final"][0])
    proxies = {
        i: (t, _dense(decode_history(raw, i, t - 1, k, ins), i, t - 1, n, k, T, ins))
        for i, (t, raw) in holder.seen.items()
        if i not in recs
    }
    online, _, lost, counted = _dense_outcome(n, k, T, nb, recs, proxies, has_final)
    return {
        **{key: v for key, v in info.items() if key not in ("offline", "uncounted")},
        "online": online.astype(int).tolist(),
        "counted": [sorted([ids[i], ids[j]] for i, j in c) for c in counted],
        "lost": [[t, ids[i], ids[j]] for t, i, j in lost],
    }


def test_result_in_the_dense_form_of_earlier_ledgers_reads_the_same() -> None:
    """A run with two leavers and a party that misses iterations: its result's compact execution
    (`offline`, `uncounted`) and the dense form earlier ledgers hold (`online`, `counted`), built
    independently from the engines' own histories, give the same IncaExecution and the same
    accountant output (the audit of the execution, the losses per peer)."""
    seed, T = 3, 6
    windows = {"n0": (2, 99), "n1": (4, 99), "n2": (2, 3)}
    ids, p, sim, res = _run_with_dropouts(10, T, seed, windows)
    engines = [sim.engines[v] for v in ids]
    spec = _spec(ids, p, seed)
    me = "n5"
    info = res.outputs[me].info
    assert {"n0", "n1"} == set(info["missing"]) and info["offline"]  # dropouts happened
    assert "online" not in info and "counted" not in info  # the compact form
    old = _dense_info(ids, p, seed, engines, info)
    assert old["lost"] == info["lost"]
    new_ex, old_ex = execution_from_info(spec, info), execution_from_info(spec, old)
    np.testing.assert_array_equal(new_ex.online, old_ex.online)
    np.testing.assert_array_equal(new_ex.final, old_ex.final)
    for a, b in zip(new_ex.weights, old_ex.weights):
        np.testing.assert_array_equal(a, b)
    # the dense form is what the dense matrix says, party by party: offline (t, v) iff 0
    dense = np.asarray(old["online"], dtype=bool)
    assert sorted((t, ids.index(v)) for t, v in info["offline"]) == sorted(
        (int(t) + 1, int(i)) for t, i in zip(*np.nonzero(~dense[1:]))
    )
    # the accountant, on this node's ledger entries, with the output in either form
    entries = res.entries[me]
    (out,) = [e for e in entries if e.direction == "local" and e.event == "output"]
    as_old = dataclasses.replace(out, params={**out.params, "info": old})
    old_entries = [as_old if e is out else e for e in entries]
    acc = get_algorithm("inca").accountant
    fresh_new, fresh_old = IncaAccountant(), IncaAccountant()  # no shared audit cache
    loss_new, rep_new = fresh_new.audit_loss(spec, entries, me)
    loss_old, rep_old = fresh_old.audit_loss(spec, old_entries, me)
    assert rep_new is not None and rep_new == rep_old and loss_new == loss_old
    assert acc.losses(spec, entries, me) == acc.losses(spec, old_entries, me)


def test_fault_free_record_and_result_carry_no_exception() -> None:
    """Without dropouts every record is [y, ω, has_final, data, 0, 0, 0] (dim + 6 numbers, not
    T·n flags) and the result states no offline iteration and no uncounted message."""
    ids, p, sim, res = _run_with_dropouts(12, 4, 2, {})
    for v in ids:
        e = sim.engines[v]
        assert e.n_records == len(ids)
        for rec in e.raw_records:
            assert rec is not None and rec.shape == (int(p["dim"]) + 6,)
            assert rec[-3:].tolist() == [0.0, 0.0, 0.0]
        info = res.outputs[v].info
        assert info["offline"] == [] and info["uncounted"] == [] and info["final"] == ids


# -- malformed compact records from a peer: refused, state unchanged --------------------------------
def _engine(n: int = 6, T: int = 3, seed: int = 2) -> tuple[Inca, list[str], np.ndarray, Any]:
    ids = [f"n{i}" for i in range(n)]
    p = _params(n, T=T)
    me = Inca(
        JobContext("j", "inca", ids[0], tuple(ids), p, seed), np.zeros(2), np.random.default_rng(0)
    )
    me.start()
    return me, ids, me.nbrs, me.ins


def test_history_round_trip_and_precise_refusals() -> None:
    n, k, T = 9, 2, 4
    nb = inca_audit.out_neighbours(n, k, T, 1)
    ins = in_neighbours(nb)
    x = 4
    t_in = next(t for t in range(1, T + 1) if ins[t - 1][x])
    s_in = ins[t_in - 1][x][0]
    stranger = next(i for i in range(n) if i != x and i not in ins[t_in - 1][x])
    h = encode_history([2], [(1, 1), (3, 0)], [(t_in, s_in)], n, k)
    got = decode_history(h, x, T, k, ins)
    assert got == History(frozenset({2}), frozenset({(1, 1), (3, 0)}), frozenset({(t_in, s_in)}))
    assert decode_history(encode_history([], [], [], n, k), x, T, k, ins) is EXPECTED
    bad = {
        "does not match its counts": [1, 0, 0],
        "at least 3": [0, 0],
        "must be integers": [1, 0, 0, 1.5],
        "outside 1..4": [1, 0, 0, 5],
        "strictly ascending": [2, 0, 0, 3, 2],
        "not a planned in-neighbour": encode_history([], [], [(t_in, stranger)], n, k),
        "counts must be integers": [float("nan"), 0, 0],
    }
    for why, v in bad.items():
        with pytest.raises(ValueError, match=why):
            decode_history(np.asarray(v, float), x, T, k, ins)
    # a MIX of iteration t carries iterations 1..t − 1 only
    with pytest.raises(ValueError, match="outside 1..2"):
        decode_history(encode_history([3], [], [], n, k), x, 2, k, ins)
    with pytest.raises(ValueError, match="outside 1..2"):
        decode_history(encode_history([], [(3, 0)], [], n, k), x, 2, k, ins)


def _batch(records: dict[int, np.ndarray], dim: int, proxies=(), wants=()) -> np.ndarray:
    """A RECORDS payload of the records given in their wire form (origin -> record), the proxies
    (origin, t, history) and the wanted origins."""
    origins = sorted(records)
    heads = np.asarray([records[o][: dim + 3] for o in origins]).reshape(len(origins), dim + 3)
    hists = [np.asarray(records[o][dim + 3 :], float) for o in origins]
    return encode_batch(
        origins,
        heads,
        [h.shape[0] for h in hists],
        hists,
        [o for o, _, _ in proxies],
        [t for _, t, _ in proxies],
        [np.asarray(h, float) for _, _, h in proxies],
        list(wants),
    )


def test_malformed_batch_digest_and_mix_are_invalid_argument() -> None:
    me, ids, nb, ins = _engine()
    dim, k, T, n = me.dim, me.k, me.T, len(ids)

    def state() -> tuple[Any, ...]:
        return (
            [None if r is None else r.tolist() for r in me.raw_records],
            dict(me.seen),
            me.gossip_t.tolist(),
            dict(me.held),
            me.n_records,
        )

    def refused(sender: str, msg: Message, code: RefusalCode = RefusalCode.INVALID_ARGUMENT) -> str:
        before = state()
        with pytest.raises(Refused) as r:
            me.on_message(sender, msg)
        assert r.value.code == code
        assert state() == before
        return str(r.value)

    ok = np.array([0.1, 0.2, 1.0, 1.0, 1.0, 0, 0, 0])  # y, ω, has_final, data, no exception
    assert ok.shape == (dim + 6,)
    cases = {
        "does not match its counts": np.concatenate([ok[:-3], [1, 0, 0]]),
        "flags must be 0 or 1": np.concatenate([ok[:3], [0.5], ok[4:]]),
        "y = 0, ω = 0": np.concatenate([ok[:3], [0.0], ok[4:]]),
        "online at T": np.concatenate([ok[:-3], [1, 0, 0, T]]),
    }
    for why, v in cases.items():
        # a malformed record refuses its whole batch, the good record beside it too
        assert why in refused("n1", Message(RECORDS, payload=_batch({2: v, 3: ok}, dim), seq=1))
    structural = {
        "must be finite": np.concatenate([[1, 0, 0, 2, 3, np.nan], ok[1:]]),
        "too short": _batch({2: ok}, dim)[:-5],
        "does not match its lengths": np.concatenate([_batch({2: ok}, dim), [0.0]]),
        "record origins must be strictly ascending": np.concatenate(
            [[2, 0, 0, 3, 2, 3, 3], ok[:5], ok[:5], [0] * 6]
        ),
        "record origins must be in": _batch({n: ok}, dim),
        "a record and a proxy of the same party": _batch({2: ok}, dim, [(2, 2, [0, 0, 0])]),
        "proxy iterations must be in": _batch({}, dim, [(3, T + 1, [0, 0, 0])]),
        "must be integers": _batch({}, dim, wants=[1.5]),
        "wanted origins must be in": _batch({}, dim, wants=[n]),
        "a batch has at least 3 numbers": np.zeros(2),
    }
    for why, v in structural.items():
        assert why in refused("n1", Message(RECORDS, payload=v, seq=1)), why
    assert "PROXY" not in refused(
        "n1", Message(RECORDS, payload=_batch({}, dim, [(3, 2, [1.0, 0, 0, 2])]), seq=1)
    )
    assert "itself" in refused("n1", Message(RECORDS, payload=_batch({0: ok}, dim), seq=1))
    # digests: a bitmap of another size, a bit beyond n, a proxy of a record it holds
    held = np.zeros(n, dtype=bool)
    held[1] = True
    digests = {
        "bitmap of 1 numbers, not 2": np.array([2.0, 2.0, 0.0, 0.0]),
        "at least 3 numbers": np.array([1.0, 2.0]),
        "beyond the": np.concatenate([[1, 1 << n, 0]]),
        "whose record it holds": encode_digest(held, [1], [2]),
        "does not match its": np.concatenate([encode_digest(held, [], []), [4.0]]),
        "digest proxy iterations must be in": encode_digest(held, [3], [T + 1]),
        "digest proxy origins must be strictly ascending": encode_digest(held, [4, 3], [1, 1]),
    }
    for why, v in digests.items():
        assert why in refused("n1", Message(DIGEST, payload=v, round=1)), why
    # a planned in-neighbour's MIX whose history names iteration 1 (it sends MIX_1: none yet)
    s = next(i for i in range(1, len(ids)) if 0 in nb[0, i])
    mix = np.concatenate([[0.1, 0.2, 1.0], encode_history([1], [], [], len(ids), k)])
    assert "outside 1..0" in refused(ids[s], Message(MIX, payload=mix, round=1))
    assert "MIX payload" in refused(ids[s], Message(MIX, payload=np.zeros(2), round=1))
    # a well-formed batch is held as received, and a conflicting copy of a held record refused
    me.on_message("n1", Message(RECORDS, payload=_batch({2: ok}, dim), seq=1))
    assert me.raw_records[2] is not None and me.n_records == 1  # its own: not yet
    np.testing.assert_array_equal(me.record(2), ok)
    other = ok.copy()
    other[0] = 0.3
    assert "conflicts" in refused(
        "n3", Message(RECORDS, payload=_batch({2: other}, dim), seq=1), RefusalCode.ALREADY_EXISTS
    )
    me.on_message("n3", Message(RECORDS, payload=_batch({2: ok}, dim), seq=2))  # the same: taken
    assert me.n_records == 1
    rec = decode_record(ok, dim, 2, k, T, ins)
    assert rec["history"] is EXPECTED and rec["has_final"] and rec["omega"] == 1.0


def test_variable_length_payload_shape() -> None:
    """The runtime's receipt check lets an ANY_LENGTH dimension take any length, nothing else."""
    me, *_ = _engine()
    assert me.payload_shape(RECORDS) == (ANY_LENGTH,) and me.payload_shape(DIGEST) == (ANY_LENGTH,)
    assert me.payload_shape("close") is None
    assert shape_fits((7,), (ANY_LENGTH,)) and shape_fits((3,), (ANY_LENGTH,))
    assert not shape_fits((3, 2), (ANY_LENGTH,)) and not shape_fits(None, (ANY_LENGTH,))
    assert shape_fits((4,), (4,)) and not shape_fits((5,), (4,)) and shape_fits(None, None)
    assert not shape_fits((4,), None)
