"""The IncA engine (netdp_node.algorithms.inca.engine) against the reference `inca_audit.simulate`, over
both transports (runtime harness) and in the discrete-event simulator (dropouts, lost
acknowledgements, lost CLOSE messages); refusals sans-IO.

Oracles: x̄ + η̄ (spec Eq. 3-5, exact cancellation without dropouts), `inca_audit.simulate` run on
the execution the nodes rebuilt from their public records with the engines' own noise (replayed
from the test-only in-memory trace), Eq. (8)-(9) from the party's online history, and the public
ω propagation through the public weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import TRANSPORTS, contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca.engine import CLOSE, DIGEST, MIX, RECORDS, Inca
from netdp_node.privacy import inca_audit
from netdp_node.privacy.inca_audit import execution_from_info
from netdp_node.protocols.base import JobContext, Message, RefusalCode, Refused
from netdp_node.simulate import Simulator

pytestmark = pytest.mark.timeout(120)


class _Replay:
    """An rng stand-in for `inca_audit.simulate`: returns the engines' own draws (η first, then Δ,
    the order simulate draws in), scaled by nothing: the samples are the ones the nodes used."""

    def __init__(self, *draws: np.ndarray) -> None:
        self.draws = list(draws)

    def normal(self, loc: float, scale: float, size: tuple[int, ...]) -> np.ndarray:
        d = self.draws.pop(0)
        assert d.shape == tuple(size)
        return d


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def _params(n: int, **kw: object) -> dict:
    return get_algorithm("inca").prepare({"T": 5, "k": 2, "round_s": 2.0, "dim": 2, **kw}, n)


def _reference(engines: list[Inca], info: dict, spec: dict) -> tuple[dict, object]:
    ex = execution_from_info(spec, info)
    x = np.stack([e.trace_x for e in engines])
    eta = np.stack([e.trace_eta for e in engines])
    Delta = np.stack([e.trace_delta for e in engines])
    ref = inca_audit.simulate(ex, x, 1.0, 1.0, _Replay(eta, Delta))  # type: ignore[arg-type]
    return ref, ex


def _spec(ids: list[str], p: dict, seed: int) -> dict:
    return {
        "job_id": "j",
        "algorithm": "inca",
        "participants": ids,
        "params": p,
        "public_seed": seed,
    }


def _data(ids: list[str], dim: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {nid: rng.uniform(-0.2, 1.2, size=dim) for nid in ids}  # some values get clipped


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_dropout_estimate_is_mean_plus_noise_and_matches_reference(tmp_path, transport):
    ids = _ids(6)
    p = _params(6, scheme="inc" if transport == "grpc" else "early")
    net = await make_net(transport, ids, tmp_path, data=_data(ids), seed=4)
    try:
        await net.run_job(contexts("j", "inca", ids, p, seed=7), timeout=60)
        engines = [net.nodes[n].jobs["j"].engine for n in ids]
        outs = [net.nodes[n].jobs["j"].output for n in ids]
    finally:
        await net.close()
    u = np.stack([e.trace_x + e.trace_eta for e in engines])
    # clipping into the box [lo, hi] happened
    assert np.all(np.stack([e.trace_x for e in engines]) <= 1.0)
    for o in outs:  # everyone released the same x̄ + η̄ (Eq. 3-5: every Δ cancelled)
        assert o.info["final"] == ids and o.info["missing"] == [] and o.info["lost"] == []
        np.testing.assert_allclose(o.value, u.mean(axis=0), atol=1e-9)
        assert o.info["sum_omega"] == pytest.approx(6.0, abs=1e-12)
    ref, ex = _reference(engines, outs[0].info, _spec(ids, p, 7))
    assert ex.online.all()
    np.testing.assert_allclose(outs[0].value, ref["estimate"], atol=1e-12)
    # the ledger never holds a noise sample: no float of the trace appears in any entry
    for e in engines:
        assert np.abs(e.trace_z - (e.trace_x + e.trace_eta)).max() < 1e-9  # Eq. (2)


def _simulate(
    n: int, p: dict, *, seed: int = 3, down=None, lose=None, retransmit_after: float = 0.5
):
    ids = _ids(n)
    sim = Simulator(
        "inca",
        ids,
        p,
        _data(ids),
        seed=seed,
        public_seed=seed,
        latency=0.01,
        lose=lose,
        retransmit_after=retransmit_after,
    )
    if down is not None:  # down(sim, node): a dropout defined by the node's own iteration
        sim.down = lambda nid, now: down(sim, nid)
    res = sim.run()
    assert len(res.outputs) == n
    return ids, sim, res


@pytest.mark.parametrize(
    "windows,lost,seed",
    [
        # n0, n1 leave for good at iterations 2 and 4; n2 misses iterations 2-3; n3 misses 5.
        ({"n0": (2, 99), "n1": (4, 99), "n2": (2, 3), "n3": (5, 5)}, [], 3),
        # n3 misses iteration 5 alone: as over gRPC, the messages to it are retried until it is back,
        # then refused as late (the senders learn it and recover): nothing is lost
        ({"n3": (5, 5)}, [], 3),
        # half the parties leave; their exchanges with each other are known only from the histories
        # their MIX messages carried (without those proxies the rebuilt execution is wrong here)
        ({"n6": (4, 99), "n7": (3, 99), "n4": (3, 99), "n8": (4, 99), "n9": (5, 99)}, None, 4),
    ],
)
def test_dropouts_eq8_and_reference_in_the_simulator(windows, lost, seed):
    n, T = 10, 6
    p = _params(n, T=T, round_s=1.0)
    leavers = {v for v, w in windows.items() if w[1] == 99}

    def down(sim: Simulator, nid: str) -> bool:
        w = windows.get(nid)
        return w is not None and w[0] <= sim.engines[nid].cur <= w[1]

    ids, sim, res = _simulate(n, p, down=down, seed=seed)
    out = res.outputs["n5"]
    info = out.info
    assert set(info["final"]) == set(ids) - leavers
    assert set(info["missing"]) == leavers  # their records never got out
    assert lost is None or info["lost"] == lost
    for nid in set(ids) - leavers:  # every stayer released the same result
        np.testing.assert_array_equal(res.outputs[nid].value, out.value)
    engines = [sim.engines[i] for i in ids]
    ref, ex = _reference(engines, info, _spec(ids, p, seed))
    np.testing.assert_allclose(out.value, ref["estimate"], atol=1e-9)
    if "n3" in windows:  # n3 missed 5 and came back
        assert not ex.online[5, 3] and ex.online[T, 3] and np.isclose(ref["gamma"][3], 5 / T)
    alpha, _ = inca_audit.noise_scheme("inc", T)
    for i, e in enumerate(engines):
        if not ex.final[i]:
            continue
        gamma = float(alpha[ex.online[:, i]].sum())  # Eq. (9)
        assert e.online.tolist() == ex.online[:, i].tolist()  # the public history is its own
        # Eq. (8): a party online at T injected exactly γ_i (x_i + η_i): every Δ cancelled
        np.testing.assert_allclose(e.trace_z, gamma * (e.trace_x + e.trace_eta), atol=1e-9)
        # ... and, on the public side, its ω^(T) is what the public weights and shares give, and
        # the coefficients its ledger shows sum to γ_i (α) and to 0 (every Δ cancelled)
        assert info["omega_final"][ids[i]] == pytest.approx(ref["omega"][T, i], abs=1e-12)
        rows = [en.params for en in res.entries[ids[i]] if "u_row" in en.params]
        assert len(rows) == T + 1
        assert sum(r["alpha"] for r in rows) == pytest.approx(gamma, abs=1e-12)
        assert np.abs(np.sum([r["u_row"] for r in rows], axis=0)).max() < 1e-12
    # the leavers' (or the lost message's) mass is gone: Σω < n
    assert info["sum_omega"] < n - 0.1


def test_lost_acknowledgements_are_reconciled_and_lost_close_is_reported():
    n = 8
    p = _params(n, T=4, round_s=1.0)
    acks_lost = []

    def lose_acks(sender: str, to: str, msg: Message) -> str | None:
        if msg.kind == MIX and (sender, msg.round) in {("n1", 2), ("n4", 3)}:
            acks_lost.append((sender, to, msg.round))
            return "ack"
        return None

    ids, sim, res = _simulate(n, p, lose=lose_acks)
    assert acks_lost
    info = res.outputs["n0"].info
    # The senders never learned of the delivery: they did not count it, told the receivers so
    # (CLOSE 0), and the receivers dropped it: no mass lost or duplicated.
    assert info["lost"] == [] and info["final"] == ids
    counted = inca_audit.outcome_from_info(_spec(ids, p, 3), info)[1]
    for s, r, t in acks_lost:
        assert [t, s, r] in info["uncounted"]
        assert (ids.index(s), ids.index(r)) not in counted[t - 1]
    engines = [sim.engines[i] for i in ids]
    u = np.stack([e.trace_x + e.trace_eta for e in engines])
    np.testing.assert_allclose(res.outputs["n0"].value, u.mean(axis=0), atol=1e-9)
    ref, _ = _reference(engines, info, _spec(ids, p, 3))
    np.testing.assert_allclose(res.outputs["n0"].value, ref["estimate"], atol=1e-12)

    # A CLOSE(1) that never arrives: the receiver does not count the message, the sender did:
    # the one-sided residual, reported as lost (mass lost, never duplicated).
    def lose_close(sender: str, to: str, msg: Message) -> str | None:
        if (
            msg.kind == CLOSE
            and sender == "n2"
            and msg.round == 2
            and msg.scalars["counted"] == 1.0
            and not lost
        ):
            lost.append((2, sender, to))
            return "msg"
        return None

    lost: list = []
    # the link sends the lost CLOSE again 5 s later, after the iteration (1 s) ended: refused as
    # late, so the receiver never counts it
    ids, sim, res = _simulate(n, p, lose=lose_close, retransmit_after=5.0)
    info = res.outputs["n0"].info
    assert [list(x) for x in lost] == info["lost"]
    assert 0 < n - info["sum_omega"] < 1  # a share of n2's ω left and entered nobody


def test_refuses_late_duplicate_foreign_and_unscheduled_messages():
    ids = _ids(5)
    p = _params(5, T=3)
    seed = 2
    nb = inca_audit.out_neighbours(5, 2, 3, seed)
    engines = {
        nid: Inca(
            JobContext("j", "inca", nid, tuple(ids), p, seed),
            np.array([0.5, 0.5]),
            np.random.default_rng(i),
        )
        for i, nid in enumerate(ids)
    }
    for e in engines.values():
        e.start()
    me = engines["n0"]
    sender = next(i for i in range(1, 5) if 0 in nb[0, i])
    stranger = next(i for i in range(1, 5) if 0 not in nb[0, i])
    width = 2 + 1 + 3  # y (2), ω, the sender's history so far (no exception: 3 zero counts)
    mix = Message(MIX, payload=np.zeros(width), round=1)

    def refused(who: int, msg: Message) -> RefusalCode:
        before = (dict(me.held), dict(me.flags), me.mixed)
        with pytest.raises(Refused) as r:
            me.on_message(ids[who], msg)
        assert (dict(me.held), dict(me.flags), me.mixed) == before  # state unchanged
        return r.value.code

    assert refused(stranger, mix) == RefusalCode.PERMISSION_DENIED
    for t in (0, 4):
        assert (
            refused(sender, Message(MIX, payload=np.zeros(3), round=t))
            == RefusalCode.FAILED_PRECONDITION
        )  # foreign iteration
    assert (
        refused(sender, Message(CLOSE, round=1, scalars={"counted": 1.0}))
        == RefusalCode.FAILED_PRECONDITION
    )  # CLOSE(1) without its MIX
    bad = np.zeros(width)
    bad[-1] = 0.5  # a history flag that is not 0/1
    assert refused(sender, Message(MIX, payload=bad, round=1)) == RefusalCode.INVALID_ARGUMENT
    me.on_message(ids[sender], mix)
    assert refused(sender, mix) == RefusalCode.FAILED_PRECONDITION  # duplicate
    assert (
        refused(sender, Message(CLOSE, round=1, scalars={"counted": 0.5}))
        == RefusalCode.INVALID_ARGUMENT
    )
    me.on_timer("mix:1")  # the deadline passed, but it waits for the CLOSE of the MIX it holds
    assert me.mixed == 0
    me.on_timer(f"hold:1:{sender}")  # ... up to round_s after that MIX arrived
    assert me.mixed == 1 and [x for x in me.h_in if x[0] == 1] == [(1, i) for i in me.inn[0]]
    assert (
        refused(sender, Message(CLOSE, round=1, scalars={"counted": 1.0}))
        == RefusalCode.FAILED_PRECONDITION
    )  # late


def test_accountant_reports_the_audited_execution(tmp_path):
    """Each node's report: the audit of the execution its result states (party_report), never
    above the always-valid local-DP level of its η."""
    from cks_reference import cks_epsilon

    from netdp_node.algorithms import get_algorithm
    from netdp_node.algorithms.inca.accountant import INCA, INCA_AUDIT

    inca_audit_loss = INCA.audit_loss
    from netdp_node.privacy.discrete_gaussian import GRID_BITS
    from netdp_node.privacy.inca_audit import party_report

    n = 8
    p = _params(n, T=4, threat="collude:0.25")
    ids, sim, res = _simulate(n, p)
    spec = _spec(ids, p, 3)
    entries = res.entries["n3"]
    loss, rep = inca_audit_loss(spec, entries, "n3")
    ex = execution_from_info(spec, res.outputs["n3"].info)
    direct = party_report(
        ex,
        3,
        {"colluders": 0.25},
        sigma_eta=p["sigma_eta"],
        sigma_delta=p["sigma_delta"],
        delta=p["delta"],
        sensitivity=p["sensitivity"],
        seed=3,
    )
    # the local-DP level of the DISCRETE η: ρ-zCDP for Δ' = Δ + γ√d, converted by CKS Prop. 12
    grid = 2.0 ** (math.ceil(math.log2(p["sigma_eta"])) - GRID_BITS)
    charged = p["sensitivity"] + grid * math.sqrt(p["dim"])
    ldp = cks_epsilon(p["sigma_eta"] / charged, p["delta"])
    assert direct["local_dp_epsilon"] == pytest.approx(ldp, rel=1e-4)
    assert loss.epsilon == pytest.approx(min(direct["epsilon"], ldp), rel=1e-4)
    assert loss.epsilon < ldp  # the correlated noise helps: below local DP
    # ... but it is an audit of sampled placements: shown beside the guarantee, labelled; the
    # guarantee stays the local-DP level of η (C-DP is worst-case over placements)
    shown = get_algorithm("inca").accountant.losses(spec, entries, "n3")
    assert all(v.epsilon == pytest.approx(ldp, rel=1e-4) for v in shown.values())
    base = get_algorithm("inca").accountant.baselines(spec, entries, "n3")
    assert "not proven for discrete noise" in INCA_AUDIT
    assert base[INCA_AUDIT].epsilon == pytest.approx(direct["epsilon"])
    # before a result, only the local-DP level of η
    early = [e for e in entries if e.event != "output"]
    assert inca_audit_loss(spec, early, "n3")[0].epsilon == pytest.approx(ldp, rel=1e-4)
    pros = get_algorithm("inca").accountant.prospective(spec, "n3")
    assert set(pros) == set(ids) - {"n3"} and pros["n0"].epsilon == pytest.approx(ldp, rel=1e-4)


def test_audit_checks_every_stayer_injected_its_share(tmp_path):
    """`netdp audit` over the merged ledgers of a simulated job with dropouts: inca-shares passes
    (Eq. 8 from each stayer's recorded coefficients, ω against the public weights), and fails on a
    ledger whose coefficients do not cancel."""
    import dataclasses

    from netdp_node import audit
    from netdp_node.simulate import write_ledgers

    n = 8
    p = _params(n, T=5, round_s=1.0)
    windows = {"n1": (3, 99), "n4": (2, 2)}
    ids, sim, res = _simulate(
        n,
        p,
        down=lambda s, nid: (
            windows.get(nid, (0, -1))[0] <= s.engines[nid].cur <= windows.get(nid, (0, -1))[1]
        ),
    )
    spec = {**_spec(ids, p, 3), "job_id": "sim"}  # the simulator's job id
    write_ledgers(res, spec, tmp_path)
    report = audit.audit([tmp_path / i for i in ids])
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["inca-shares"]["ok"], checks["inca-shares"]
    assert report["ok"], report["checks"]
    nodes = audit.load([tmp_path / i for i in ids])
    victim = nodes[4]  # n4 missed iteration 2 and stayed: its share is 4/5
    k = next(
        j for j, e in enumerate(victim.entries) if e.params.get("t") == 3 and "u_row" in e.params
    )
    bad = dict(victim.entries[k].params)
    bad["u_row"] = [v + (0.5 if j == 0 else 0.0) for j, v in enumerate(bad["u_row"])]
    victim.entries[k] = dataclasses.replace(victim.entries[k], params=bad)
    failed = audit.check_inca_shares(nodes)
    assert not failed.ok and "n4" in failed.details[0]


def test_netdp_simulate_inca_with_dropouts(capsys):
    """`netdp simulate --algorithm inca --leave --miss`: the estimate, the truth, the finals and
    the noise the leavers left, from the simulated nodes (here checked against the public
    execution: Σ c_u = n − values lost)."""
    import json

    from netdp_node.cli import main

    code = main(
        [
            "simulate",
            "--algorithm",
            "inca",
            "--nodes",
            "8",
            "--param",
            "T=4",
            "--param",
            "k=2",
            "--leave",
            "0.25",
            "--miss",
            "0.25",
            "--seed",
            "2",
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["final"] <= 6 and len(out["missing"]) == 2
    assert out["uncancelled_noise_std"] > 0 and 0 < out["values_lost"] < 8
    assert abs(out["sum_omega"] - (8 - out["values_lost"])) < 1e-9  # Σω = Σ c_u (both public)
    assert out["central_dp_std"] > 0 and out["privacy"]["epsilon_max"] > 0


async def test_a_node_over_budget_declines_and_the_job_completes(tmp_path):
    """The runtime's budget check with the accountant's prospective (the local-DP level of η):
    a node whose budget the job would exceed takes part with x = 0 (its masks still protect the
    others) and the result says so."""
    from netdp_node.runtime import Budget

    ids = _ids(5)
    p = _params(5, T=3)
    net = await make_net(
        "memory",
        ids,
        tmp_path,
        data=_data(ids),
        seed=6,
        budgets={"n2": Budget(0.1, 1e-5), "n3": Budget(1e3, 1e-3)},
    )
    try:
        await net.run_job(contexts("j", "inca", ids, p, seed=5), timeout=60)
        engines = [net.nodes[n].jobs["j"].engine for n in ids]
        out = net.nodes["n0"].jobs["j"].output
        assert not net.nodes["n2"].jobs["j"].contributed and net.nodes["n3"].jobs["j"].contributed
        assert "privacy budget" in net.nodes["n2"].jobs["j"].decline_reason
    finally:
        await net.close()
    assert out.info["declined"] == ["n2"]
    assert not engines[2].trace_x.any()  # no data, but its η and Δ were injected
    u = np.stack([e.trace_x + e.trace_eta for e in engines])
    np.testing.assert_allclose(out.value, u.mean(axis=0), atol=1e-9)


def test_dissemination_messages_without_a_payload_are_invalid_argument():
    """A DIGEST carries its sender's holdings and a RECORDS message its batch as the payload; one
    without a payload is refused as INVALID_ARGUMENT, naming what is missing."""
    ids = _ids(5)
    me = Inca(
        JobContext("j", "inca", "n0", tuple(ids), _params(5, T=3), 2),
        np.array([0.5, 0.5]),
        np.random.default_rng(0),
    )
    me.start()
    for kind, why in ((DIGEST, "digest"), (RECORDS, "batch")):
        with pytest.raises(Refused) as r:
            me.on_message("n1", Message(kind, seq=1, round=1))
        assert r.value.code == RefusalCode.INVALID_ARGUMENT
        assert why in str(r.value)


def test_schedule_inverse_and_round_peers_are_the_brute_force_ones() -> None:
    """The inverse schedule each engine reads (built once per job, O(T·n·k)) is the brute-force
    one, and a dissemination round asks min(fanout, n − 1) distinct peers, never itself, every
    other party with the same chance."""
    from collections import Counter

    from netdp_node.algorithms.inca.engine import in_neighbours

    n = 23
    p = _params(n, k=3)
    k, T = int(p["k"]), int(p["T"])
    nbrs = inca_audit.out_neighbours(n, k, T, 5)
    ins = in_neighbours(nbrs)
    for t in range(T):
        for j in range(n):
            assert ins[t][j] == [i for i in range(n) if j in nbrs[t, i]]
    ids = [f"n{i}" for i in range(n)]
    ctx = JobContext("j", "inca", ids[0], ids, p, 5)
    eng = Inca(ctx, np.zeros(p["dim"]), np.random.default_rng(1))
    assert eng.inn == [ins[t][0] for t in range(T)]
    assert Inca(ctx.for_node(ids[1]), None, np.random.default_rng(2)).nbrs is eng.nbrs  # shared
    seen: Counter[int] = Counter()
    for _ in range(3000):
        pick = eng._peers()
        assert len(pick) == min(eng.fanout, n - 1) and len(set(pick)) == len(pick)
        assert all(1 <= j < n for j in pick)
        seen.update(pick)
    expect = 3000 * min(eng.fanout, n - 1) / (n - 1)
    assert all(abs(seen[j] - expect) < 6 * math.sqrt(expect) for j in range(1, n))
    # with as many peers asked as there are others, every other party is asked
    small = Inca(
        JobContext("j", "inca", "n0", ids[:3], _params(3, fanout=5), 5),
        None,
        np.random.default_rng(3),
    )
    assert sorted(small._peers()) == [1, 2]
