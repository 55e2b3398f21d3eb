"""Muffliato engines (protocols/muffliato.py) through the runtime over both transports, the
acknowledgement-based agreement on realised edges with late and lost messages (sans-IO driver),
refusals, and the ledger accountant against privacy.gossip_joint_view on the same schedule."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math

import numpy as np
import pytest
from harness import TRANSPORTS, contexts, make_net, published_schedules

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import check_budget, total_losses
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.algorithms.muffliato.engine import SCHEDULE, VALUE, MuffliatoSync
from netdp_node.ledger import Entry
from netdp_node.privacy import gossip, gossip_joint_view, gossip_paper_bound
from netdp_node.privacy.discrete_gaussian import GRID_BITS, gaussian_on_grid, grid_for
from netdp_node.privacy.muffliato_accountant import public_graph
from netdp_node.privacy.rw_sgd import ldp_epsilon
from netdp_node.protocols.base import (
    JobContext,
    Message,
    Output,
    Publish,
    Record,
    RefusalCode,
    Refused,
    Send,
    SetTimer,
)
from netdp_node.runtime import Budget

pytestmark = pytest.mark.timeout(90)


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def _charged(p: dict, sigma: float) -> float:
    """The sensitivity the accountants charge on the noise grid: Δ + γ√d,
    γ = 2^(⌈log₂ σ⌉ − GRID_BITS) (discrete_gaussian's documented correction)."""
    grid = 2.0 ** (math.ceil(math.log2(sigma)) - GRID_BITS)
    return float(p["sensitivity"]) + grid * math.sqrt(int(p.get("dim", 1)))


def _ldp(p: dict, sigma: float, count: int = 1) -> float:
    """The local-DP level of `count` discrete-Gaussian releases, computed by dp-accounting's RDP
    accountant (valid for the discrete Gaussian by CKS Thm 4) at multiplier σ/Δ'."""
    from dp_accounting import dp_event, rdp

    from netdp_node.privacy.composition import DEFAULT_ORDERS

    acc = rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(sigma / _charged(p, sigma)), count)
    return acc.get_epsilon(p["delta"])


def _noisy(x, seed: int, i: int, sigma: float) -> np.ndarray:
    """Node i's first noisy value x + η: the harness's generator (default_rng([seed, i])) draws
    η, and value and noise lie on the job's grid (discrete_gaussian)."""
    return gaussian_on_grid(
        np.random.default_rng([seed, i]), np.atleast_1d(x), sigma, grid_for(sigma)
    )


def _ring_edges(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) if i < (i + 1) % n else ((i + 1) % n, i) for i in range(n)]


async def _settle_schedules(net, ids, job="j", timeout=20.0) -> None:
    """Wait (bounded) until every node recorded the published schedules of all the others."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if all(len(published_schedules(net.ledger(v).entries(job))) == len(ids) - 1 for v in ids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("schedules were not published to everyone in time")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_sync_result_is_the_closed_form_and_accountant_matches(tmp_path, transport):
    n, seed, dim = 8, 5, 2
    ids = _ids(n)
    rng = np.random.default_rng(1)
    vals = {v: rng.uniform(0, 0.5, size=dim) for v in ids}
    p = get_algorithm("muffliato").prepare({"graph": "ring", "T": 4, "sigma": 0.5, "dim": dim}, n)
    net = await make_net(transport, ids, tmp_path, data=vals, seed=seed)
    try:
        await net.run_job(contexts("j", "muffliato", ids, p), timeout=60)
        await _settle_schedules(net, ids)
        x0 = np.array([_noisy(vals[v], seed, i, p["sigma"]) for i, v in enumerate(ids)])
        sched = gossip.fixed_schedule(n, _ring_edges(n), 4, gamma=p["gamma"])
        expect = sched.run(x0)[-1]  # x^T = P_T(W)(x + η), Algorithm 1
        out = np.array([net.nodes[v].jobs["j"].output.value for v in ids])
        np.testing.assert_allclose(out, expect, atol=1e-12)
        np.testing.assert_allclose(out.mean(axis=0), x0.mean(axis=0), atol=1e-12)  # x̄ + η̄
        # the guarantee the node enforces and records: the local-DP level of its discrete
        # release (the joint view is a continuous-noise analysis), towards and about every peer
        assert get_algorithm("muffliato").private_output
        F = gossip_joint_view.joint_view_matrix(sched)
        spec = net.ledger("n4").job("j").spec
        acc = get_algorithm("muffliato").accountant
        es = net.ledger("n4").entries("j")
        ldp = _ldp(p, p["sigma"])
        for loss in [*acc.losses(spec, es, "n4").values(), *acc.incoming(spec, es, "n4").values()]:
            assert loss.epsilon == pytest.approx(ldp, rel=1e-9)
            assert "proven for the noise sampled" in loss.method
        total = total_losses([JobView("j", spec, es)], "n4", p["delta"])
        assert set(total) == set(ids) - {"n4"}
        assert all(x.epsilon == pytest.approx(ldp, rel=1e-9) for x in total.values())
        # the joint view (labelled, beside it) == gossip_joint_view on the same (fixed) schedule, both
        # directions; outputs stay on the nodes (Algorithm.private_output): no published views
        kw = {"sigma": p["sigma"], "sensitivity": _charged(p, p["sigma"]), "delta": p["delta"]}
        out, inc = ma.joint_view(spec, es, "n4"), ma.joint_view(spec, es, "n4", outgoing=False)
        for j, v in enumerate(ids):
            if v == "n4":
                continue
            assert out[v].epsilon == pytest.approx(
                gossip.pair_privacy_loss(F[4, j], **kw).epsilon, rel=1e-9
            )
            assert inc[v].epsilon == pytest.approx(
                gossip.pair_privacy_loss(F[j, 4], **kw).epsilon, rel=1e-9
            )
        # docs/errata.md: ring 8, T = 4, node 4 solves its view for node 0's noisy value,
        # while the paper's eq. (6) says 1.4 % of the LDP level
        assert F[0, 4] == 1.0
        assert gossip_paper_bound.paper_bound(sched, 4)[0] == pytest.approx(0.0142, abs=5e-4)
        base = acc.baselines(spec, es, "n4")
        assert ma.PAPER in base and "not proven for discrete noise" in ma.PAPER
        assert base[ma.JOINT_VIEW].epsilon == pytest.approx(max(x.epsilon for x in out.values()))
        mean = gossip_paper_bound.mean_privacy_loss(F[:, 4], 4)  # eq. (7) on the joint view
        assert base[ma.MEAN_LOSS].epsilon == pytest.approx(
            gossip.pair_privacy_loss(mean, **kw).epsilon, rel=1e-9
        )
        # `netdp privacy report` of n4, from its ledger: both directions and the labelled values
        from netdp_node.report import ledger_report, render_text

        rep = ledger_report(tmp_path / "n4", job_id="j")
        job = rep["jobs"][0]
        assert {x["peer"] for x in job["incoming"]} == set(ids) - {"n4"}
        text = render_text(rep)
        assert "incoming: what this node learnt" in text and ma.PAPER in text
        assert ma.JOINT_VIEW in text
    finally:
        await net.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_randomized_conserves_mass_and_accountant_matches(tmp_path, transport):
    n, seed = 6, 2
    ids = _ids(n)
    vals = {v: np.array([0.15 * i]) for i, v in enumerate(ids)}  # inside the clip bound 1
    p = get_algorithm("muffliato-random").prepare(
        {"graph": "ring", "sigma": 0.1, "rate": 20.0, "duration_s": 0.6, "grace_s": 0.3}, n
    )
    net = await make_net(transport, ids, tmp_path, data=vals, seed=seed)
    try:
        await net.run_job(contexts("j", "muffliato-random", ids, p), timeout=60)
        await _settle_schedules(net, ids)
        x0 = np.array([_noisy(vals[v][0], seed, i, 0.1)[0] for i, v in enumerate(ids)])
        out = np.array([net.nodes[v].jobs["j"].output.value[0] for v in ids])
        spec = net.ledger("n0").job("j").spec
        es = net.ledger("n0").entries("j")
        seq = ma.merge_activations(ma._reports(es, "n0"))
        assert seq, "no exchange happened"
        idx = {v: i for i, v in enumerate(ids)}
        committed = [(idx[a], idx[b]) for _, _, a, b, c in seq if c]
        aborted = [s for s in seq if not s[4]]
        assert not aborted  # no fault: every exchange that started committed
        sched = gossip.pairwise_schedule(n, committed)  # Algorithm 2
        np.testing.assert_allclose(out, sched.run(x0)[-1], atol=1e-12)
        assert out.sum() == pytest.approx(x0.sum(), abs=1e-12)  # pairwise averages keep the mass
        F = gossip_joint_view.joint_view_matrix(sched, exact=True)  # exact rationals
        kw = {"sigma": p["sigma"], "sensitivity": _charged(p, p["sigma"]), "delta": p["delta"]}
        inc = ma.joint_view(spec, es, "n0", outgoing=False)
        ldp = _ldp(p, p["sigma"])
        assert all(
            x.epsilon == pytest.approx(ldp, rel=1e-9)
            for x in get_algorithm("muffliato-random").accountant.incoming(spec, es, "n0").values()
        )
        for j, v in enumerate(ids[1:], start=1):
            exact = gossip.pair_privacy_loss(F[j, 0], **kw).epsilon
            # the accountant may add gossip_joint_view's float margin (a fraction of ε_LDP): never
            # below the exact value, and at most 1e-5 of the LDP level above it
            above = gossip.pair_privacy_loss(min(1.0, F[j, 0] + 1e-5), **kw).epsilon
            assert exact * (1 - 1e-12) <= inc[v].epsilon <= above
    finally:
        await net.close()


# -- a sans-IO driver with late and lost messages -------------------------------------------------
class Driver:
    """Delivers messages between engines with a latency; `late(s, r, t)` holds the message
    s → r of round t until the receiver's round-t timer fired (it is then refused as late);
    `gone` nodes answer nothing (undeliverable), from round `leave_round` on."""

    def __init__(self, engines, late=lambda s, r, t: False, gone=(), leave_round=0):
        self.e = engines
        self.late = late
        self.gone = set(gone)
        self.leave_round = leave_round
        self.heap = []
        self.tick = itertools.count()
        self.now = 0.0
        self.outputs = {}
        self.held = {}

    def at(self, d, fn, *args):
        heapq.heappush(self.heap, (self.now + d, next(self.tick), fn, args))

    def apply(self, nid, actions):
        for a in actions:
            if isinstance(a, Send):
                self.at(0.01, self.deliver, nid, a.to, a.msg)
            elif isinstance(a, SetTimer):
                self.at(a.delay, self.timer, nid, a.name)
            elif isinstance(a, Output):
                self.outputs[nid] = a

    def is_gone(self, nid, rnd):
        return nid in self.gone and rnd >= self.leave_round

    def deliver(self, s, r, m):
        if self.is_gone(r, m.round) or self.is_gone(s, m.round):
            if not self.is_gone(s, m.round):
                self.apply(s, self.e[s].on_undeliverable(r, m, "UNAVAILABLE", "gone"))
            return
        if m.kind == VALUE and self.late(s, r, m.round) and (r, m.round) not in self.held:
            self.held.setdefault((r, m.round), []).append((s, m))
            return
        try:
            out = self.e[r].on_message(s, m)
        except Refused:
            self.apply(s, self.e[s].on_undeliverable(r, m, "FAILED_PRECONDITION", "late"))
            return
        self.apply(r, out)
        self.at(0.01, lambda: self.apply(s, self.e[s].on_delivered(r, m)))

    def timer(self, nid, name):
        if self.is_gone(nid, self.e[nid].r):
            return
        self.apply(nid, self.e[nid].on_timer(name))
        if name.startswith("round:"):  # now release what was held back: it arrives late
            for s, m in self.held.pop((nid, int(name[6:])), []):
                self.held[(nid, int(name[6:]))] = []
                self.at(0.001, self.deliver, s, nid, m)

    def run(self):
        for nid, eng in self.e.items():
            self.apply(nid, eng.start())
        while self.heap:
            self.now, _, fn, args = heapq.heappop(self.heap)
            fn(*args)


def _engines(n, params, vals, seed=0):
    ids = _ids(n)
    return {
        v: MuffliatoSync(
            JobContext("j", "muffliato", v, tuple(ids), params, 1),
            vals[v],
            np.random.default_rng([seed, i]),
        )
        for i, v in enumerate(ids)
    }


def _realised(engines):
    return {v: e.realised for v, e in engines.items()}


def test_realised_edges_agree_with_late_and_lost_messages():
    """Both ends of every edge agree on whether it was realised in each round; the run is the
    schedule of the realised edges (public-degree Metropolis weights) applied to
    x + η; a node that leaves takes its mass, the survivors conserve theirs exactly."""
    n, T = 8, 6
    ids = _ids(n)
    p = get_algorithm("muffliato").prepare(
        {"graph": "ring", "T": T, "sigma": 0.3, "accelerated": False, "round_timeout_s": 1.0}, n
    )
    vals = {v: np.array([0.1 * i]) for i, v in enumerate(ids)}  # inside the clip bound 1
    eng = _engines(n, p, vals)
    late = {("n1", "n2", 1), ("n3", "n2", 2), ("n5", "n4", 0), ("n6", "n7", 4)}
    d = Driver(eng, late=lambda s, r, t: (s, r, t) in late, gone={"n0"}, leave_round=3)
    d.run()
    survivors = [v for v in ids if v != "n0"]
    assert set(d.outputs) == set(survivors)
    idx = {v: i for i, v in enumerate(ids)}
    rounds = []
    for t in range(T):
        R = set()
        for v in survivors:
            for w in eng[v].realised[t]:
                assert idx[v] in eng[ids[w]].realised[t] or ids[w] == "n0" and t < 3, (v, w, t)
                R.add((min(idx[v], w), max(idx[v], w)))
        rounds.append(R)
    for s, r, t in late:  # a late message kills its edge for that round, on both ends
        assert (min(idx[s], idx[r]), max(idx[s], idx[r])) not in rounds[t]
    assert all((0, 1) not in R and (0, 7) not in R for R in rounds[3:])
    # independent rebuild of the run: W_t from the realised edges with the public degrees (2)
    x = np.array([_noisy(vals[v][0], 0, i, 0.3)[0] for i, v in enumerate(ids)])
    for R in rounds:
        W = np.eye(n)
        for a, b in R:
            W[a, b] = W[b, a] = 1 / 3
            W[a, a] -= 1 / 3
            W[b, b] -= 1 / 3
        x = W @ x
    out = np.array([d.outputs[v].value[0] for v in survivors])
    np.testing.assert_allclose(out, x[1:], atol=1e-12)
    assert out.sum() == pytest.approx(x[1:].sum(), abs=1e-12)
    missing = d.outputs["n1"].info["missing"]
    assert missing["n0"] == [3, 4, 5] and missing["n2"] == [1]


def test_accountant_rebuilds_the_realised_schedule_with_drops():
    """The joint view rebuilt from the ledger on a run with drops equals gossip_joint_view's on the
    realised schedule built here from the engines' realised edges; without the published
    schedules there is none. The guarantee is the local-DP level either way."""
    n, T = 6, 5
    ids = _ids(n)
    p = get_algorithm("muffliato").prepare(
        {"graph": "ring", "T": T, "sigma": 1.0, "accelerated": False, "round_timeout_s": 1.0}, n
    )
    eng = _engines(n, p, {v: np.array([0.5]) for v in ids})
    d = Driver(eng, late=lambda s, r, t: (s, r, t) in {("n1", "n2", 0), ("n4", "n3", 2)})
    d.run()
    from netdp_node.ledger import Entry

    spec = {
        "job_id": "j",
        "algorithm": "muffliato",
        "participants": ids,
        "params": p,
        "public_seed": 1,
        "edges": [],
    }
    own = [Entry(job_id="j", direction="local", event="contribute")]
    for t, R in enumerate(eng["n2"].realised):
        own.append(
            Entry(
                job_id="j",
                direction="local",
                event="round",
                params={"round": t, "realised": [ids[w] for w in R]},
            )
        )
    acc = get_algorithm("muffliato").accountant
    assert all("local-DP level" in x.method for x in acc.losses(spec, own, "n2").values())
    assert ma.joint_view(spec, own, "n2") is None
    pub = [
        Entry(
            job_id="j",
            direction="local",
            event="schedule",
            peer=v,
            params={
                "realised": {str(t): [ids[w] for w in R] for t, R in enumerate(eng[v].realised)}
            },
        )
        for v in ids
        if v != "n2"
    ]
    edges = [
        {(min(i, w), max(i, w)) for i, v in enumerate(ids) for w in eng[v].realised[t]}
        for t in range(T)
    ]
    assert (1, 2) not in edges[0] and (3, 4) not in edges[2]
    mats = []
    for R in edges:
        W = np.eye(n)
        for a, b in R:
            W[a, b] = W[b, a] = 1 / 3
            W[a, a] -= 1 / 3
            W[b, b] -= 1 / 3
        mats.append(W)
    E = frozenset(_ring_edges(n))  # every message of the public graph counts as seen
    sched = gossip.GossipSchedule(n, (E,) * T, tuple(mats))
    F = gossip_joint_view.joint_view_matrix(sched, published=range(n))
    kw = {"sigma": 1.0, "sensitivity": _charged(p, 1.0), "delta": p["delta"]}
    ldp = _ldp(p, 1.0)
    assert all(
        x.epsilon == pytest.approx(ldp, rel=1e-9)
        for x in [
            *acc.losses(spec, own + pub, "n2").values(),
            *acc.incoming(spec, own + pub, "n2").values(),
        ]
    )
    out = ma.joint_view(spec, own + pub, "n2")
    inc = ma.joint_view(spec, own + pub, "n2", outgoing=False)
    for j, v in enumerate(ids):
        if v != "n2":
            assert out[v].epsilon == pytest.approx(
                gossip.pair_privacy_loss(F[2, j], **kw).epsilon, rel=1e-9
            )
            assert inc[v].epsilon == pytest.approx(
                gossip.pair_privacy_loss(F[j, 2], **kw).epsilon, rel=1e-9
            )
    # two ends that disagree (a one-sided edge) make the schedule unknown: local-DP level
    bad = own + [
        e
        if e.peer != "n3"
        else Entry(
            job_id="j", direction="local", event="schedule", peer="n3", params={"realised": {}}
        )
        for e in pub
    ]
    assert ma.joint_view(spec, bad, "n2") is None
    assert "disagree" in ma.leakage_matrices(spec, bad, "n2")[1]


def test_the_enforced_guarantee_is_the_local_dp_level_not_the_joint_view():
    """Ring of 12, two plain rounds: nothing n0 sent can reach n6, so the continuous-noise joint
    view of n6 is 0; the noise is discrete and that analysis is not proven for it, so what n0
    records (its losses, which the budget checks compose) is the local-DP level of its release
    towards every peer, n6 included; the joint view is among the baselines, labelled."""
    n, T = 12, 2
    ids = _ids(n)
    p = get_algorithm("muffliato").prepare(
        {"graph": "ring", "T": T, "sigma": 1.0, "accelerated": False, "round_timeout_s": 1.0}, n
    )
    eng = _engines(n, p, {v: np.array([0.5]) for v in ids})
    Driver(eng).run()
    from netdp_node.ledger import Entry

    spec = {
        "job_id": "j",
        "algorithm": "muffliato",
        "participants": ids,
        "params": p,
        "public_seed": 1,
        "edges": [],
    }
    es = [Entry(job_id="j", direction="local", event="contribute")]
    es += [
        Entry(
            job_id="j",
            direction="local",
            event="round",
            params={"round": t, "realised": [ids[w] for w in R]},
        )
        for t, R in enumerate(eng["n0"].realised)
    ]
    es += [
        Entry(
            job_id="j",
            direction="local",
            event="schedule",
            peer=v,
            params={
                "realised": {str(t): [ids[w] for w in R] for t, R in enumerate(eng[v].realised)}
            },
        )
        for v in ids
        if v != "n0"
    ]
    jv = ma.joint_view(spec, es, "n0")
    assert jv is not None and jv["n6"].epsilon == 0.0 and jv["n1"].epsilon > 0.0
    ldp = _ldp(p, 1.0)
    losses = get_algorithm("muffliato").accountant.losses(spec, es, "n0")
    assert losses["n6"].epsilon == pytest.approx(ldp, rel=1e-9)
    assert all(x.epsilon == pytest.approx(ldp, rel=1e-9) for x in losses.values())
    total = total_losses([JobView("j", spec, es)], "n0", p["delta"])
    assert total["n6"].epsilon == pytest.approx(ldp, rel=1e-9)
    # a budget below the local-DP level refuses a second such job, whatever the joint view says
    assert not check_budget(
        [JobView("j", spec, es)], {**spec, "job_id": "k"}, "n0", 1.5 * ldp, p["delta"]
    ).ok
    base = get_algorithm("muffliato").accountant.baselines(spec, es, "n0")
    assert base[ma.JOINT_VIEW].epsilon == pytest.approx(max(x.epsilon for x in jv.values()))


def test_published_schedule_names_the_edges_that_did_not_realise():
    """The schedule a node publishes on the job's bulletin (once, `Publish`; no message to any
    peer) lists only its public edges that did NOT realise (empty without drops); a reader
    rebuilds the realised neighbourhoods from the public graph."""
    n = 6
    ids = _ids(n)
    p = get_algorithm("muffliato").prepare({"graph": "ring", "T": 3, "sigma": 1.0}, n)
    eng = _engines(n, p, {v: np.array([0.1]) for v in ids})
    a, b = eng["n0"], eng["n2"]
    a.realised = [[1, 5], [1], []]  # round 1: n5 dropped; round 2: both
    finish = a._finish()
    assert not any(isinstance(x, Send) for x in finish)  # nothing sent to the n - 1 others
    (pub,) = [x for x in finish if isinstance(x, Publish)]
    msg = pub.msg
    assert msg.kind == SCHEDULE and set(msg.scalars) == {"1:5", "2:1", "2:5"}
    rec = b.on_published(SCHEDULE, {"n0": msg})
    # recorded as received (compact), the realised rounds rebuilt by the accountant
    assert [(x.event, x.peer, x.params) for x in rec] == [
        ("schedules", "", {"peers": ["n0"], "missing": {"n0": ((1, "n5"), (2, "n1"), (2, "n5"))}})
    ]
    spec = {"job_id": "j", "algorithm": "muffliato", "participants": ids, "params": p}
    entry = Entry(job_id="j", direction="local", event="schedules", params=rec[0].params)
    reports = ma._reports([entry], "n2")
    ma._realised(spec, reports, [ma._adjacency(n, ma.call_graph(spec, 0))])
    assert reports == {"n0": {0: ["n1", "n5"], 1: ["n1"]}}
    full = eng["n3"]
    a2 = eng["n4"]
    a2.realised = [[3, 5]] * 3
    msg2 = next(x.msg for x in a2._finish() if isinstance(x, Publish))
    assert msg2.scalars == {}  # no drop: an empty schedule
    # an empty schedule: its publisher is named, nothing is held for it
    assert full.on_published(SCHEDULE, {"n4": msg2})[0].params == {"peers": ["n4"], "missing": {}}
    # a malformed entry (n0 and n3 are not neighbours on the ring) is recorded as refused, with
    # the reason, and not as a schedule; the others of the same batch are taken
    got = eng["n1"].on_published(
        SCHEDULE, {"n0": Message(SCHEDULE, scalars={"0:3": 0.0}), "n4": msg2}
    )
    assert [(x.event, x.peer) for x in got] == [("schedules", ""), ("bulletin-refused", "n0")]
    assert got[0].params["peers"] == ["n4"]
    assert "not an edge" in got[1].params["reason"]
    # a second entry of the same participant is refused; another kind is not taken
    again = eng["n1"].on_published(SCHEDULE, {"n4": msg2})
    assert [x.event for x in again] == ["bulletin-refused"]
    assert "second schedule" in again[0].params["reason"]
    assert eng["n1"].on_published("other", {"n2": msg2}) == []
    # a schedule sent over a peer link is refused: schedules come from the bulletin only
    with pytest.raises(Refused) as ex:
        eng["n1"].on_message("n4", msg2)
    assert ex.value.code is RefusalCode.INVALID_ARGUMENT and "bulletin" in ex.value.reason


def test_refuses_late_duplicate_foreign_and_non_neighbour_values():
    n = 6
    ids = _ids(n)
    p = get_algorithm("muffliato").prepare({"graph": "ring", "T": 3, "sigma": 1.0}, n)
    e = _engines(n, p, {v: np.array([0.1]) for v in ids})["n0"]
    acts = e.start()
    sends = [a for a in acts if isinstance(a, Send)]
    assert {a.to for a in sends} == {"n1", "n5"} and all(a.msg.round == 0 for a in sends)
    assert any(isinstance(a, Record) and a.event == "contribute" for a in acts)

    def val(r):
        return Message(VALUE, payload=np.array([1.0]), round=r)

    with pytest.raises(Refused) as ex:
        e.on_message("n1", val(3))  # beyond the job's rounds 0..2
    assert ex.value.code is RefusalCode.FAILED_PRECONDITION and "foreign" in ex.value.reason
    with pytest.raises(Refused) as ex:
        e.on_message("n3", val(0))
    assert ex.value.code is RefusalCode.PERMISSION_DENIED
    with pytest.raises(Refused) as ex:
        e.on_message("n1", Message(VALUE, payload=np.array([np.nan]), round=0))
    assert ex.value.code is RefusalCode.INVALID_ARGUMENT
    e.on_message("n1", val(0))
    with pytest.raises(Refused) as ex:
        e.on_message("n1", val(0))
    assert "duplicate" in ex.value.reason
    e.on_message("n1", val(1))  # early: kept for round 1
    e.on_timer("round:0")  # n5's value never came: round 0 closes
    with pytest.raises(Refused) as ex:
        e.on_message("n5", val(0))
    assert "late" in ex.value.reason
    acts = []
    for s in sends:  # outcomes: n1 took ours, n5's link gave up
        acts += (
            e.on_delivered(s.to, s.msg)
            if s.to == "n1"
            else e.on_undeliverable(s.to, s.msg, "UNAVAILABLE", "x")
        )
    assert e.r == 1 and e.realised == [[1]]
    # n5 is presumed gone for the next rounds: no value sent to it, its values refused
    assert {a.to for a in acts if isinstance(a, Send)} == {"n1"}
    with pytest.raises(Refused) as ex:
        e.on_message("n5", val(1))
    assert "presumed gone" in ex.value.reason
    with pytest.raises(Refused):
        e.on_message("n1", Message(SCHEDULE, scalars={"9:1": 1.0}))


async def test_budget_declines_at_start_and_job_runs_without_its_data(tmp_path):
    n, seed = 6, 3
    ids = _ids(n)
    vals = {v: np.array([0.15 * (i + 1)]) for i, v in enumerate(ids)}
    p = get_algorithm("muffliato").prepare({"graph": "complete", "T": 1, "sigma": 2.0}, n)
    spec = {
        "job_id": "j",
        "algorithm": "muffliato",
        "participants": ids,
        "params": p,
        "public_seed": 1,
        "edges": [],
    }
    ldp = ldp_epsilon(1, p["sigma"] / p["sensitivity"], p["delta"])
    assert not check_budget([], spec, "n0", ldp * 0.9, p["delta"]).ok  # prospective = LDP level
    assert check_budget([], spec, "n0", ldp * 1.1, p["delta"]).ok
    net = await make_net(
        "memory", ids, tmp_path, data=vals, seed=seed, budgets={"n0": Budget(ldp * 0.9, p["delta"])}
    )
    try:
        await net.run_job(contexts("j", "muffliato", ids, p))
        assert any(e.event == "decline" for e in net.ledger("n0").entries("j"))
        assert not any(e.event == "contribute" for e in net.ledger("n0").entries("j"))
        # complete graph, Metropolis 1/n: one round gives the exact mean of x + η, n0's x = 0
        x0 = [_noisy(0.0 if v == "n0" else vals[v][0], seed, i, 2.0)[0] for i, v in enumerate(ids)]
        for v in ids:
            assert net.nodes[v].jobs["j"].output.value[0] == pytest.approx(np.mean(x0), abs=1e-12)
        losses = get_algorithm("muffliato").accountant.losses(
            spec, net.ledger("n0").entries("j"), "n0"
        )
        assert all(x.epsilon == 0.0 for x in losses.values())  # declined: nothing incurred
    finally:
        await net.close()


def test_gd_learns_and_reports_local_dp_composition():
    from netdp_node.algorithms.walk.engine import logistic_accuracy
    from netdp_node.datasets import learning_split
    from netdp_node.simulate import Simulator

    n, steps = 12, 8
    ids = _ids(n)
    split = learning_split(n, 8, 0)
    data = dict(zip(ids, split.per_user(n, 8)))
    p = get_algorithm("muffliato-gd").prepare(
        {
            "graph": "er",
            "p": 0.4,
            "spectral_gap": 0.1,
            "steps": steps,
            "sigma": 0.05,
            "T": 6,
            "lipschitz": 2.0,
        },
        n,
    )
    res = Simulator("muffliato-gd", ids, p, data, seed=1, public_seed=7).run()
    assert len(res.outputs) == n
    acc = np.mean(
        [logistic_accuracy(res.outputs[v].value, split.X_test, split.y_test) for v in ids]
    )
    # validation target: Muffliato-GD ≈ GD with exact averaging (same clipped steps)
    from netdp_node.algorithms.ring.engine import clip_l2
    from netdp_node.algorithms.walk.engine import logistic_gradient

    users = split.user_arrays(n, 8)
    theta = np.zeros(9)
    for _ in range(steps):
        theta = theta - 0.7 * np.mean(
            [clip_l2(logistic_gradient(theta, X, y), 2.0) for X, y in users], axis=0
        )
    central = logistic_accuracy(theta, split.X_test, split.y_test)
    majority = max(np.mean(split.y_test > 0), np.mean(split.y_test < 0))
    assert central > majority + 0.05
    assert abs(acc - central) < 0.05
    # a fresh public ER graph per step (Remark 3): the realised neighbours are those of the call
    for c in range(steps):
        edges = set(public_graph(p, n, 7, c))
        nb = {b if a == 0 else a for a, b in edges if 0 in (a, b)}
        assert set(res.outputs["n0"].info["realised"][c * 6]) == {ids[w] for w in nb}
    spec = {
        "job_id": "sim",
        "algorithm": "muffliato-gd",
        "participants": ids,
        "params": p,
        "public_seed": 7,
        "edges": [],
    }
    accn = get_algorithm("muffliato-gd").accountant
    loss = accn.losses(spec, res.entries["n0"], "n0")["n1"]
    assert loss.epsilon == pytest.approx(
        ldp_epsilon(steps, p["sigma"] / p["sensitivity"], p["delta"]), rel=1e-9
    )
    assert "local-DP composition" in loss.method
    base = accn.baselines(spec, res.entries["n0"], "n0")
    assert ma.PAPER in base
    assert any(
        k.startswith("joint view per call") and "not proven for discrete noise" in k for k in base
    )
    JobView("sim", spec, res.entries["n0"])  # the view type the report builds


def test_randomized_exchange_serialised_and_abort_agreed():
    """Algorithm 2's exchange (sans-IO): a busy node refuses offers; a responder that times out
    refuses the initiator's late value, so neither averages and both record the exchange as
    aborted; the accountant counts it as a round in which the pair saw values, with W = I."""
    from netdp_node.algorithms.muffliato.engine import OFFER, PAIR, REPLY, MuffliatoRandom

    ids = _ids(3)
    p = get_algorithm("muffliato-random").prepare(
        {"graph": "ring", "sigma": 0.5, "rate": 1.0, "duration_s": 1.0}, 3
    )
    e = {
        v: MuffliatoRandom(
            JobContext("j", "muffliato-random", v, tuple(ids), p, 1),
            np.array([0.1 * i]),
            np.random.default_rng([0, i]),
        )
        for i, v in enumerate(ids)
    }
    for v in ids:
        e[v].start()
    x = {v: e[v].x.copy() for v in ids}
    offer = next(a for a in e["n0"].on_timer("tick") if isinstance(a, Send))
    assert offer.msg.kind == OFFER and offer.msg.payload is None  # an offer reveals nothing
    w = offer.to
    other = next(v for v in ids if v not in ("n0", w))
    with pytest.raises(Refused) as ex:  # n0 is busy in its own exchange
        e["n0"].on_message(other, Message(OFFER, seq=1))
    assert "busy" in ex.value.reason
    reply = next(a for a in e[w].on_message("n0", offer.msg) if isinstance(a, Send))
    assert reply.msg.kind == REPLY and np.array_equal(reply.msg.payload, x[w])
    with pytest.raises(Refused):  # the responder is busy too
        e[w].on_message(other, Message(OFFER, seq=1))
    aborted = e[w].on_timer(f"r:0:{offer.msg.seq}")  # n0's value never came in time
    assert [a.params["status"] for a in aborted if isinstance(a, Record)] == ["aborted"]
    pair = next(a for a in e["n0"].on_message(w, reply.msg) if isinstance(a, Send))
    assert pair.msg.kind == PAIR
    with pytest.raises(Refused) as ex:  # late: the responder gave up
        e[w].on_message("n0", pair.msg)
    logged = e["n0"].on_undeliverable(w, pair.msg, "FAILED_PRECONDITION", ex.value.reason)
    assert [a.params["status"] for a in logged if isinstance(a, Record)] == ["aborted"]
    assert np.array_equal(e["n0"].x, x["n0"]) and np.array_equal(e[w].x, x[w])  # no averaging
    assert e["n0"].busy is None and e[w].busy is None
    # the accountant's schedule: one round with the edge, W = I (the pair saw each other's values)
    from netdp_node.ledger import Entry

    def rec(node, a):
        return Entry(
            job_id="j",
            direction="local",
            event="schedule",
            peer=node,
            params={"activations": [[a[0], a[1], a[2], a[3]]]},
        )

    spec = {
        "job_id": "j",
        "algorithm": "muffliato-random",
        "participants": ids,
        "params": p,
        "public_seed": 1,
        "edges": [],
    }
    entries = [
        Entry(
            job_id="j",
            direction="local",
            event="activation",
            peer=w,
            params={"initiator": "n0", "id": offer.msg.seq, "status": "aborted"},
        ),
        Entry(job_id="j", direction="local", event="output"),
        rec(w, ["n0", offer.msg.seq, "n0", False]),
        Entry(
            job_id="j", direction="local", event="schedule", peer=other, params={"activations": []}
        ),
    ]
    (s,), why = ma.random_schedule(spec, entries, "n0")
    assert s.T == 1 and len(s.edges[0]) == 1
    np.testing.assert_array_equal(s.matrices[0].toarray(), np.eye(3))
    # n0 saw w's value: the joint view says n0 learnt w's noisy value exactly
    assert gossip_joint_view.joint_view(s, 0).leakage[ids.index(w)] == 1.0


def test_prepare_chooses_T_from_the_public_bound_and_calibrates_sigma():
    n = 16
    prep = get_algorithm("muffliato").prepare
    p = prep({"graph": "hypercube", "epsilon": 2.0, "delta": 1e-5}, n)
    W = gossip.metropolis_weights(n, public_graph(p, n, 0, 0))
    assert p["spectral_gap_used"] == pytest.approx(gossip.spectral_gap(W)) == pytest.approx(0.4)
    assert p["gamma"] == pytest.approx(gossip.chebyshev_gamma(0.4))
    # T suffices for Theorem 2's public bound (spread ≤ clip² = 1) at the σ the job uses, and is
    # the smallest such T (one round fewer would not)
    assert p["T"] >= gossip.gossip_rounds(0.4, n, p["sigma"], 1.0, dim=1, accelerated=True)
    s1 = gossip_paper_bound.sigma_for_mean_dp(
        2.0, 1e-5, sensitivity=2.0, n=n, communications=4 * (p["T"] - 1)
    )
    assert (
        p["T"] == 1 or gossip.gossip_rounds(0.4, n, s1, 1.0, dim=1, accelerated=True) > p["T"] - 1
    )
    # calibrate=mean: the mean loss of eq. (7) with T_v = d_max·T is ε at δ (a summary)
    assert p["sigma"] == pytest.approx(
        gossip_paper_bound.sigma_for_mean_dp(
            2.0, 1e-5, sensitivity=2.0, n=n, communications=4 * p["T"]
        )
    )
    # calibrate=ldp: the local-DP level, the guarantee every pair has, is ε at δ
    q = prep({"graph": "ring", "epsilon": 2.0, "calibrate": "ldp", "T": 5}, n)
    assert ldp_epsilon(1, q["sigma"] / q["sensitivity"], q["delta"]) == pytest.approx(2.0, rel=1e-6)
    with pytest.raises(ValueError, match="^rounds is not a muffliato parameter"):
        prep({"rounds": 3}, n)
    with pytest.raises(ValueError, match="spectral_gap"):
        prep({"graph": "er"}, n)


async def test_a_node_leaving_through_the_runtime_is_survived_and_audited(tmp_path):
    """The runtime's leave fault (memory transport): the leaver's neighbours see their links give
    up, presume it gone, and finish; the merged-ledger audit finds every realised edge used by both
    ends and every unreceived message refused; the outputs say from when the leaver was missing."""
    from netdp_node.audit import audit
    from netdp_node.faults import FaultPlan

    n, T = 8, 8
    ids = _ids(n)
    vals = {v: np.array([0.1 * i]) for i, v in enumerate(ids)}
    p = get_algorithm("muffliato").prepare(
        {
            "graph": "hypercube",
            "T": T,
            "sigma": 0.1,
            "accelerated": False,
            "round_timeout_s": 0.3,
            "suspend_rounds": 2,
        },
        n,
    )
    net = await make_net(
        "memory",
        ids,
        tmp_path,
        data=vals,
        seed=4,
        give_up_after=0.4,
        faults={"n3": FaultPlan(leave_at_step=8)},
    )
    survivors = [v for v in ids if v != "n3"]
    try:
        for v in reversed(ids):
            await net.nodes[v].add_job(contexts("j", "muffliato", ids, p)[v])
        await net.wait_done("j", survivors, timeout=60)
        assert all(net.nodes[v].jobs["j"].state == "done" for v in survivors)
        neighbours = 0
        for v in survivors:
            miss = net.nodes[v].jobs["j"].output.info["missing"].get("n3")
            if 3 in net.nodes[v].jobs["j"].engine.graph(0)[0]:  # the leaver's neighbours
                neighbours += 1
                assert miss and miss == list(range(miss[0], T)), (v, miss)  # gone to the end
        assert neighbours == 3  # hypercube of 8: degree 3
    finally:
        await net.close()
    rep = audit([tmp_path / v for v in ids])
    checks = {c["name"]: c for c in rep["checks"]}
    for name in ("gossip-mass-conserved", "tokens-conserved", "received-once"):
        assert checks[name]["ok"], checks[name]


async def test_a_partition_healed_after_one_end_gave_up_leaves_no_one_sided_edge(tmp_path):
    """A partition as the network-namespace test makes it: n1's link goes down in the middle of
    round R, after both of its round-R exchanges reached the other end but before either
    acknowledgement came back. n1 (whose own interface is down) gives up on its sends at once and
    finishes the round with no edge; its neighbours' links hang and re-send once the link is back.
    The re-sent values reach n1 after it finished round R without them: they must be refused (the
    senders then leave the edge out as n1 did), not acknowledged as duplicates (the senders would
    average n1's value in while n1 left theirs out: a one-sided edge that no schedule explains)."""
    from netdp_node.audit import audit
    from netdp_node.runtime import spec_dict
    from netdp_node.transport.base import DeliveryError
    from netdp_node.transport.memory import MemoryTransport

    n, T, R, cut_node = 4, 6, 1, "n1"
    ids = _ids(n)
    vals = {v: np.array([0.2 * i]) for i, v in enumerate(ids)}
    p = get_algorithm("muffliato").prepare(
        {
            "graph": "ring",
            "T": T,
            "sigma": 0.1,
            "accelerated": False,
            "round_timeout_s": 0.5,
            "suspend_rounds": 1,
        },
        n,
    )
    net = await make_net("memory", ids, tmp_path, data=vals, seed=5, give_up_after=0.3)
    healed = asyncio.Event()
    lost_acks: list[tuple[str, str]] = []
    answers: list[tuple[str, int, str]] = []  # the re-sends' outcomes once the link is back

    class Partition(MemoryTransport):
        async def send(self, to: str, job_id: str, msg: Message) -> bool:
            crossing = cut_node in (self.me, to) and msg.kind == VALUE and msg.round >= R
            if not crossing or healed.is_set():
                return await super().send(to, job_id, msg)
            if msg.round == R and (self.me, to) not in lost_acks:  # it arrives, its ack does not
                lost_acks.append((self.me, to))
                with contextlib.suppress(Refused):  # its answer is lost all the same
                    await net.nodes[to].handle(self.me, job_id, msg)
            if self.me == cut_node:  # its own link is down: it gives up
                await asyncio.sleep(net.memory.give_up_after)
                raise DeliveryError(to, "UNAVAILABLE", f"gave up on {to}: network unreachable")
            await healed.wait()  # the peer's stream hangs until the link is back, then re-sends
            try:
                dup = await super().send(to, job_id, msg)
            except DeliveryError as e:
                answers.append((self.me, msg.round, e.code))
                raise
            answers.append((self.me, msg.round, "duplicate" if dup else "OK"))
            return dup

    for v in ids:
        net.nodes[v].transport = Partition(net.memory, v)

    async def heal() -> None:  # the link comes back once n1 finished round R (without edges)
        while len(net.nodes[cut_node].jobs["j"].engine.realised) <= R:
            await asyncio.sleep(0.01)
        healed.set()

    ctx = contexts("j", "muffliato", ids, p)
    try:
        for v in reversed(ids):
            await net.nodes[v].add_job(ctx[v])
        healer = asyncio.ensure_future(heal())
        await net.wait_done("j", ids, timeout=30)
        await asyncio.wait_for(healer, 30)
        assert all(net.nodes[v].jobs["j"].state == "done" for v in ids)
        await _settle_schedules(net, ids)
        eng = {v: net.nodes[v].jobs["j"].engine for v in ids}
        # the partition happened as meant: both exchanges of n1 in round R arrived, no ack came
        assert sorted(lost_acks) == [("n0", "n1"), ("n1", "n0"), ("n1", "n2"), ("n2", "n1")]
        assert eng[cut_node].realised[R] == []
        # n1 finished round R without them: the neighbours' re-sent round-R values are refused
        assert sorted(a for a in answers if a[1] == R) == [
            ("n0", R, "FAILED_PRECONDITION"),
            ("n2", R, "FAILED_PRECONDITION"),
        ]
        idx = {v: i for i, v in enumerate(ids)}
        for t in range(T):  # both ends agree on every edge of every round
            for v in ids:
                for w in eng[v].realised[t]:
                    assert idx[v] in eng[ids[w]].realised[t], (v, ids[w], t)
        for v in ("n0", "n2"):
            assert idx[cut_node] not in eng[v].realised[R]
        # the ledgers explain the run: the schedule is rebuilt, mass is conserved
        spec = spec_dict(ctx["n0"])
        for v in ids:
            sched, why = ma.sync_schedules(spec, net.ledger(v).entries("j"), v)
            assert why == "" and sched is not None, (v, why)
    finally:
        await net.close()
    checks = {c["name"]: c for c in audit([tmp_path / v for v in ids])["checks"]}
    assert checks["gossip-mass-conserved"]["ok"], checks["gossip-mass-conserved"]
