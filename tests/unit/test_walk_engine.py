"""Complete-graph token walks (Algorithms 3, 5, 4) through the runtime over both transports, their
caps, and custody of the token across crashes (memory transport) and re-routes (sans-IO)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from harness import TRANSPORTS, contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import contributions_in_result, real_contributions
from netdp_node.algorithms.walk.engine import (
    HANDOFF,
    TOKEN,
    WALK,
    WalkSum,
    epoch_counter,
    start_holder,
)
from netdp_node.faults import FaultPlan
from netdp_node.protocols.base import (
    Drop,
    JobContext,
    Keep,
    Message,
    Output,
    Record,
    Refused,
    Send,
    SetTimer,
)

pytestmark = pytest.mark.timeout(90)


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def _sum_params(n: int, **kw: object) -> dict:
    p = get_algorithm("walk-sum").prepare({"T": 60, "clip": 1e6, **kw}, n)
    p["sigma"] = 0.0  # exact arithmetic: the result must be Σ_u k_u x_u
    return p


def _truth(net, ids, vals, job="j") -> float:
    return sum(contributions_in_result(net.ledger(n).entries(job)) * vals[n][0] for n in ids)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_walk_sum_is_exact_sum_of_counted_contributions(tmp_path, transport):
    ids = _ids(8)
    vals = {nid: np.array([float(i + 1)]) for i, nid in enumerate(ids)}
    net = await make_net(transport, ids, tmp_path, data=vals, seed=5)
    try:
        await net.run_job(contexts("j", "walk-sum", ids, _sum_params(8)))
        results = [net.nodes[n].jobs["j"].output for n in ids]
        assert all(net.nodes[n].jobs["j"].state == "done" for n in ids)
        assert len({float(r.value[0]) for r in results}) == 1  # everyone got the same release
        assert results[0].value[0] == pytest.approx(_truth(net, ids, vals))
        assert sum(net.nodes[n].jobs["j"].engine.holds for n in ids) == 60  # exactly T steps
        for n in ids:
            entries = net.ledger(n).entries("j")
            assert net.ledger(n).kept("j") == {}  # every custody copy was released
            # the next hop is recorded, the token never carries a path: only (epoch, seq, t)
            for e in entries:
                if e.direction == "sent" and e.kind == TOKEN:
                    assert e.walk == WALK and 1 <= e.round < 60
    finally:
        await net.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_walk_histogram_counts_and_sgd_trains(tmp_path, transport):
    ids = _ids(6)
    cats = {nid: np.array([float(i % 3)]) for i, nid in enumerate(ids)}
    hp = get_algorithm("walk-histogram").prepare({"T": 40, "bins": 3, "edge_cap": 100}, 6)
    # no randomization: counts are exactly Σ_u k_u e_{x_u}. The engine draws its randomized
    # response from ε0 exactly (a report other than the value with probability (L−1)/(e^ε0 + L − 1)
    # each time: below e^(−10^6) here), γ = 0 is the same mechanism for the estimates
    hp["epsilon0"], hp["gamma"] = 1e6, 0.0
    net = await make_net(transport, ids, tmp_path / "h", data=cats, seed=2)
    try:
        await net.run_job(contexts("h", "walk-histogram", ids, hp))
        expect = np.zeros(3)
        for n in ids:
            expect[int(cats[n][0])] += contributions_in_result(net.ledger(n).entries("h"))
        out = net.nodes["n1"].jobs["h"].output
        np.testing.assert_array_equal(out.info["counts"], expect)
    finally:
        await net.close()

    # SGD: separable data, small noise: the released model classifies everyone's data
    rng = np.random.default_rng(0)
    w_true = np.array([1.0, -2.0, 0.5])
    data = {}
    for nid in ids:
        X = rng.normal(size=(20, 3))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        y = np.where(X @ w_true > 0, 1.0, -1.0)
        data[nid] = np.hstack([X, y[:, None]]).reshape(-1)
    sp = get_algorithm("walk-sgd").prepare(
        {"T": 150, "dim": 3, "eta": 0.5, "cap": 100, "epsilon": 50.0}, 6
    )
    sp["sigma"] = 0.01
    net = await make_net(transport, ids, tmp_path / "s", data=data, seed=3)
    try:
        await net.run_job(contexts("s", "walk-sgd", ids, sp), timeout=60)
        w = net.nodes["n2"].jobs["s"].output.value
        allX = np.vstack([data[n].reshape(-1, 4)[:, :3] for n in ids])
        ally = np.hstack([data[n].reshape(-1, 4)[:, 3] for n in ids])
        assert np.mean(np.sign(allX @ w) == ally) > 0.9
        for n in ids:  # no hop counter travels with an SGD token
            assert all(e.round == 0 for e in net.ledger(n).entries("s") if e.kind == TOKEN)
    finally:
        await net.close()


async def test_contribution_cap_and_edge_cap(tmp_path):
    ids = _ids(6)
    vals = {nid: np.array([1.0]) for nid in ids}
    net = await make_net("memory", ids, tmp_path, data=vals, seed=7)
    try:
        await net.run_job(contexts("j", "walk-sum", ids, _sum_params(6, T=120, cap=5, edge_cap=3)))
        for n in ids:
            entries = net.ledger(n).entries("j")
            real = [e for e in entries if e.event == "contribute"]
            assert len(real) <= 5
            noise_only = [e for e in entries if e.event == "noise-only"]
            assert len(real) + len(noise_only) == net.nodes[n].jobs["j"].engine.holds
            for peer in ids:
                if peer != n:  # netdp's edge cap: ≤ B real contributions adjacent to each peer
                    assert sum(peer in (e.params["from"], e.params["to"]) for e in real) <= 3
        total = sum(real_contributions(net.ledger(n).entries("j")) for n in ids)
        assert net.nodes["n1"].jobs["j"].output.value[0] == pytest.approx(total)
        assert total < 120  # the caps turned some steps into noise-only ones
    finally:
        await net.close()


async def test_restarted_holder_resumes_the_walk(tmp_path):
    """A node crashes at its 2nd step (receiving the handoff of the token it forwarded; SIGKILL-like:
    nothing but the ledger survives) and comes back: it resumes from its ledger and its kept copy
    (sent again, recognised as an exact re-send), and the walk finishes with an exact result."""
    ids = _ids(5)
    vals = {nid: np.array([10.0**i]) for i, nid in enumerate(ids)}
    params = _sum_params(5, T=50)
    ctxs = contexts("j", "walk-sum", ids, params)
    victim = [n for n in ids if n != start_holder(ctxs["n1"])][0]
    net = await make_net(
        "memory",
        ids,
        tmp_path,
        data=vals,
        seed=11,
        faults={victim: FaultPlan(crash_at_step=2)},
        give_up_after=30.0,
    )
    try:
        for nid in reversed(ids):
            await net.nodes[nid].add_job(ctxs[nid])
        for _ in range(400):
            if net.crashed:
                break
            await asyncio.sleep(0.01)
        assert set(net.crashed) == {victim}
        await net.restart(victim, ctxs[victim])
        await net.wait_done("j", ids)
        entries = net.ledger(victim).entries("j")
        assert any(e.event == "fault" for e in entries)
        assert [e.params["copies"] for e in entries if e.event == "resume"] == [1]
        value = net.nodes["n1"].jobs["j"].output.value[0]
        assert value == pytest.approx(_truth(net, ids, vals))
        assert sum(net.nodes[n].jobs["j"].engine.holds for n in ids) == 50
        assert all(net.ledger(n).kept("j") == {} for n in ids)
    finally:
        await net.close()


async def test_receiver_that_never_returns_is_routed_around(tmp_path):
    """A node leaves for good at its 2nd step: whoever holds the token for it gives up, re-routes
    its durable copy to another participant (epoch + 1), and the walk finishes; the result holds
    exactly the contributions the ledgers say."""
    ids = _ids(5)
    vals = {nid: np.array([10.0**i]) for i, nid in enumerate(ids)}
    ctxs = contexts("j", "walk-sum", ids, _sum_params(5, T=40))
    victim = [n for n in ids if n != start_holder(ctxs["n1"])][1]
    net = await make_net(
        "memory",
        ids,
        tmp_path,
        data=vals,
        seed=4,
        faults={victim: FaultPlan(leave_at_step=2)},
        give_up_after=0.3,
    )
    live = [n for n in ids if n != victim]
    try:
        for nid in reversed(ids):
            await net.nodes[nid].add_job(ctxs[nid])
        await net.wait_done("j", live)
        reroutes = [e for n in live for e in net.ledger(n).entries("j") if e.event == "reroute"]
        assert reroutes and all(e.peer == victim for e in reroutes)
        value = net.nodes[live[0]].jobs["j"].output.value[0]
        assert value == pytest.approx(_truth(net, ids, vals))
        for n in live:
            info = net.nodes[n].jobs["j"].output.info
            assert info["epoch"] >= 1 and info["excluded"] == [victim]
        # the set of gone participants travels with the token: later holders skip the victim
        assert len(reroutes) <= 2
    finally:
        await net.close()


# -- sans-IO: custody timeout, fencing, refusals ---------------------------------------------------
def _engine(me: str, ids: list[str], seed: int, **kw: object) -> WalkSum:
    p = _sum_params(len(ids), T=30, custody_timeout_s=5.0, **kw)
    ctx = JobContext("j", "walk-sum", me, tuple(ids), p, 0)
    return WalkSum(ctx, np.array([1.0]), np.random.default_rng(seed))


def test_custody_timeout_reroutes_and_stale_branch_is_fenced():
    ids = ["a", "b", "c", "d"]
    a = _engine("a", ids, 1)  # public seed 0: "a" starts
    acts = a.start()
    send = next(x for x in acts if isinstance(x, Send))
    assert any(isinstance(x, Keep) for x in acts) and any(isinstance(x, SetTimer) for x in acts)
    x = send.to
    # x acknowledged but never hands off; a's custody timer fires
    assert a.on_delivered(x, send.msg) == []  # a has no sender to hand off to
    acts2 = a.on_timer(next(t.name for t in acts if isinstance(t, SetTimer)))
    assert any(isinstance(y, Drop) for y in acts2)
    assert any(isinstance(y, Record) and y.event == "reroute" and y.peer == x for y in acts2)
    new_tokens = [y for y in acts2 if isinstance(y, Send) and y.msg.kind == TOKEN]
    fence = [y for y in acts2 if isinstance(y, Send) and y.msg.kind == "fence"]
    assert fence and fence[0].to == x
    assert epoch_counter(a.max_epoch) == 1
    assert new_tokens, "with these seeds the re-route forwards the copy (not a self-loop)"
    assert new_tokens[0].msg.epoch == a.max_epoch and new_tokens[0].to != x
    # The slow node x now hands off: a refuses (stale branch), and x fences its own forward.
    with pytest.raises(Refused, match="stale"):
        a.on_message(x, Message(HANDOFF, walk=WALK, epoch=0, seq=send.msg.seq))
    xe = _engine(x, ids, 2)
    xacts = xe.on_message("a", send.msg)
    fwd = next((y for y in xacts if isinstance(y, Send) and y.msg.kind == TOKEN), None)
    assert fwd is not None, "with these seeds x forwards the token it got"
    out = xe.on_undeliverable(
        "a",
        Message(HANDOFF, walk=WALK, epoch=0, seq=send.msg.seq),
        "FAILED_PRECONDITION",
        "stale branch",
    )
    assert out and any(isinstance(y, Record) and y.event == "fenced" for y in out)
    assert xe.discarded >= 1 and not xe.custody
    # the walk ends on another branch while a still holds the re-routed copy: it records the
    # abandoned copy (the audit accepts that token never arriving)
    done = a.on_message(
        "b", Message("release", payload=np.zeros(1), walk=WALK, epoch=a.max_epoch, seq=1, round=30)
    )
    assert [y.peer for y in done if isinstance(y, Record) and y.event == "abandoned"] == [
        new_tokens[0].to
    ]
    assert not a.custody and any(isinstance(y, Drop) for y in done)
    # a node that has seen epoch 1 refuses an epoch-0 token
    d = _engine("d", ids, 3)
    d.max_epoch = 1
    with pytest.raises(Refused, match="stale"):
        d.on_message("b", Message(TOKEN, payload=np.zeros(1), walk=WALK, epoch=0, seq=7, round=3))


def test_bad_tokens_are_refused_without_state_change():
    e = _engine("b", ["a", "b", "c"], 1)
    for bad in (
        Message(TOKEN, payload=np.array([np.nan]), walk=WALK, seq=3, round=2),
        Message(TOKEN, payload=np.zeros(1), walk=WALK, seq=3, round=0),
        Message(TOKEN, payload=np.zeros(1), walk=WALK, seq=3, round=30),
        Message(TOKEN, payload=np.zeros(1), walk="other", seq=3, round=2),
        Message("bogus", walk=WALK, seq=3),
    ):
        with pytest.raises(Refused):
            e.on_message("a", bad)
    assert e.holds == 0 and e.count == 0 and not e.custody


def test_release_is_output_everywhere_once():
    e = _engine("c", ["a", "b", "c"], 1)
    out = e.on_message(
        "a", Message("release", payload=np.array([4.0]), walk=WALK, epoch=0, seq=1, round=30)
    )
    assert any(isinstance(y, Output) for y in out) and e.done
    assert (
        e.on_message(
            "a", Message("release", payload=np.array([4.0]), walk=WALK, epoch=0, seq=1, round=30)
        )
        == []
    )


def test_local_dp_sgd_forwards_unchanged_past_the_cap():
    """dp=local (the local baseline of §5.2): past its cap a holder passes the model on unchanged
    and adds no noise; the accountant claims local DP only."""
    from netdp_node.algorithms.accounting import JobView
    from netdp_node.algorithms.budget import per_job_losses
    from netdp_node.simulate import Simulator

    ids = [f"u{i}" for i in range(4)]
    rng = np.random.default_rng(0)
    data = {u: np.hstack([rng.normal(size=(5, 2)), np.ones((5, 1))]).reshape(-1) for u in ids}
    p = get_algorithm("walk-sgd").prepare(
        {"T": 60, "dim": 2, "cap": 2, "dp": "local", "stop": "counter", "epsilon": 5.0}, 4
    )
    res = Simulator("walk-sgd", ids, p, data, seed=2, record="full").run()
    assert len(res.holders) == 60
    for u in ids:
        events = [e for e in res.entries[u] if e.direction == "local"]
        assert sum(e.event == "contribute" for e in events) <= 2
        passes = [e for e in events if e.event == "pass"]
        assert passes and all(e.params["sigma"] == 0.0 for e in passes)
        spec = {"algorithm": "walk-sgd", "participants": ids, "params": p}
        loss = per_job_losses(JobView("sim", spec, res.entries[u]), u)
        assert {x.method for x in loss.values()} == {"ldp-gaussian-rdp"}
        assert max(x.epsilon for x in loss.values()) <= 5.0 + 1e-9
