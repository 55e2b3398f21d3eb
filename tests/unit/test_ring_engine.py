"""The ring-sum engine (Algorithm 1) through the runtime, over the in-memory AND the gRPC transport."""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import TRANSPORTS, contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.algorithms.ring.accountant import ring_sum_utility
from netdp_node.algorithms.ring.engine import RingSum
from netdp_node.privacy.ring import ring_release_adds_noise, ring_release_noise_count, ring_sum_loss
from netdp_node.protocols.base import JobContext, Message, RefusalCode, Refused
from netdp_node.runtime import Budget, spec_dict

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("transport", TRANSPORTS)]


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


async def test_exact_sum_without_noise(tmp_path, transport):
    """With σ = 0 the protocol must return exactly Σ clip(x_u): checks the token arithmetic, the
    order of hops and the release to every node."""
    ids = _ids(6)
    vals = {nid: np.array([0.1 * (i + 1), -0.2 * i]) for i, nid in enumerate(ids)}
    vals["n3"] = np.array([30.0, 40.0])  # norm 50, clipped to norm 2 -> (1.2, 1.6)
    params = {
        "rounds": 4,
        "dim": 2,
        "sigma": 0.0,
        "clip": 2.0,
        "sensitivity": 4.0,
        "epsilon": 0.5,
        "delta": 1e-6,
        "delta_prime": 1e-6,
    }
    net = await make_net(transport, ids, tmp_path, data=vals)
    try:
        await net.run_job(contexts("j", "ring-sum", ids, params))
        truth = sum((v if nid != "n3" else np.array([1.2, 1.6])) for nid, v in vals.items())
        for nid in ids:
            r = net.nodes[nid].jobs["j"]
            assert r.state == "done"
            np.testing.assert_allclose(r.output.value, truth, rtol=1e-12, atol=1e-12)
            entries = net.ledger(nid).entries("j")
            assert sum(e.event == "contribute" for e in entries) == 4
            received = [e for e in entries if e.direction == "received"]
            # n1 receives K tokens; every other node K tokens + the release.
            assert len(received) == (4 if nid == "n1" else 5)
    finally:
        await net.close()


async def test_noise_schedule_and_estimate(tmp_path, transport):
    """Noise is added exactly at the scheduled visits (release-corrected Algorithm 1), the ledger
    records its parameters, never the values, and the estimate is within 4 std of the truth."""
    n, K = 5, 6
    ids = _ids(n)
    params = get_algorithm("ring-sum").prepare({"rounds": K, "epsilon": 0.5, "clip": 1.0}, n)
    vals = {nid: np.array([0.5 + 0.01 * i]) for i, nid in enumerate(ids)}
    net = await make_net(transport, ids, tmp_path, data=vals, seed=3)
    try:
        await net.run_job(contexts("j", "ring-sum", ids, params))
        noisy = 0
        for pos, nid in enumerate(ids, start=1):
            visits = [e for e in net.ledger(nid).entries("j") if e.event == "contribute"]
            for e in visits:
                expect = ring_release_adds_noise(pos, e.params["round"], n, K)
                assert (e.params["mechanism"] == "gaussian") == expect
                assert e.params["sigma"] == (params["sigma"] if expect else 0.0)
                noisy += expect
            raw = (tmp_path / nid / "ledger.sqlite").read_bytes()
            assert repr(float(vals[nid][0])).encode() not in raw
        assert noisy == ring_release_noise_count(n, K)
        std = ring_sum_utility({"participants": ids, "params": params})["netdp_std"]
        truth = sum(float(v[0]) for v in vals.values())
        est = float(net.nodes["n1"].jobs["j"].output.value[0])
        assert abs(est - truth) <= 4 * std
    finally:
        await net.close()


async def test_accountant_reads_the_ledger(tmp_path, transport):
    n, K = 4, 3
    ids = _ids(n)
    params = get_algorithm("ring-sum").prepare({"rounds": K}, n)
    net = await make_net(transport, ids, tmp_path, data={i: np.array([0.3]) for i in ids})
    try:
        ctx = contexts("j", "ring-sum", ids, params)
        await net.run_job(ctx)
        expected = ring_sum_loss(
            sigma=params["sigma"],
            sensitivity=params["sensitivity"],
            windows=K,
            delta=params["delta"],
            delta_prime=params["delta_prime"],
        )
        for nid in ids:
            view = JobView("j", spec_dict(ctx[nid]), net.ledger(nid).entries("j"))
            losses = per_job_losses(view, nid)
            assert set(losses) == set(ids) - {nid}
            for loss in losses.values():
                assert loss.epsilon == pytest.approx(expected.epsilon)
                assert math.isfinite(loss.epsilon) and loss.epsilon > 0
    finally:
        await net.close()


async def test_budget_decline_adds_noise_only(tmp_path, transport):
    """A node whose budget the job would exceed still forwards and adds its scheduled noise, but not
    its data; the job completes and its ledger shows no contribution, so no loss."""
    n, K = 5, 4
    ids = _ids(n)
    params = {
        "rounds": K,
        "dim": 1,
        "sigma": 0.0,
        "clip": 1.0,
        "sensitivity": 2.0,
        "epsilon": 0.5,
        "delta": 1e-6,
        "delta_prime": 1e-6,
    }
    # sigma=0 makes the arithmetic exact; the budget check still uses the accountant (σ = 0 means
    # infinite loss), so give the declining node a budget and everyone else none.
    params_noisy = get_algorithm("ring-sum").prepare({"rounds": K}, n)
    vals = {nid: np.array([float(i + 1)]) / 10 for i, nid in enumerate(ids)}
    net = await make_net(
        transport, ids, tmp_path, data=vals, budgets={"n2": Budget(epsilon=0.01, delta=1e-5)}
    )
    try:
        await net.run_job(contexts("exact", "ring-sum", ids, params))
        est = float(net.nodes["n4"].jobs["exact"].output.value[0])
        assert est == pytest.approx(sum(float(v[0]) for k, v in vals.items() if k != "n2"))
        assert not net.nodes["n2"].jobs["exact"].contributed
        ev = [e.event for e in net.ledger("n2").entries("exact")]
        assert "decline" in ev and "contribute" not in ev
        await net.run_job(contexts("noisy", "ring-sum", ids, params_noisy))
        view = JobView(
            "noisy",
            spec_dict(contexts("noisy", "ring-sum", ids, params_noisy)["n2"]),
            net.ledger("n2").entries("noisy"),
        )
        assert all(v.epsilon == 0 for v in per_job_losses(view, "n2").values())
        assert any(e.event == "noise-only" for e in net.ledger("n2").entries("noisy")) or not any(
            ring_release_adds_noise(2, k, n, K) for k in range(1, K + 1)
        )
    finally:
        await net.close()


async def test_refusals_leave_state_unchanged(tmp_path, transport):
    """Through NodeRuntime.handle: a non-participant, a non-predecessor, a wrong shape, a conflict and
    an exact duplicate."""
    ids = _ids(4)
    params = get_algorithm("ring-sum").prepare({"rounds": 50}, 4)
    net = await make_net(transport, ids, tmp_path, data={i: np.array([0.1]) for i in ids})
    try:
        ctx = contexts("j", "ring-sum", ids, params)
        # n3 joins first and waits for n2's token; nobody else is running.
        rt = net.nodes["n3"]
        await rt.add_job(ctx["n3"])
        tok = Message("token", payload=np.array([1.0]), walk="ring", seq=1)
        with pytest.raises(Refused) as e:
            await rt.handle("n1", "j", tok)
        assert e.value.code is RefusalCode.PERMISSION_DENIED
        with pytest.raises(Refused) as e:
            await rt.handle("mallory", "j", tok)
        assert e.value.code is RefusalCode.PERMISSION_DENIED
        with pytest.raises(Refused) as e:
            await rt.handle(
                "n2", "j", Message("token", payload=np.array([1.0, 2.0]), walk="ring", seq=1)
            )
        assert e.value.code is RefusalCode.INVALID_ARGUMENT
        before = len(rt.ledger.entries("j"))
        assert await rt.handle("n2", "j", tok) is False
        after_first = len(rt.ledger.entries("j"))
        assert after_first > before
        assert await rt.handle("n2", "j", tok) is True  # exact duplicate: acknowledged, not applied
        assert len(rt.ledger.entries("j")) == after_first
        with pytest.raises(Refused) as e:
            await rt.handle(
                "n2", "j", Message("token", payload=np.array([2.0]), walk="ring", seq=1)
            )
        assert e.value.code is RefusalCode.ALREADY_EXISTS
        assert len(rt.ledger.entries("j")) == after_first
        assert rt.jobs["j"].engine.received == 1
    finally:
        await net.close()


def test_engine_is_sans_io(transport):
    """The engine alone: actions out, nothing else; position 1 starts with a noised token."""
    ids = _ids(3)
    params = get_algorithm("ring-sum").prepare({"rounds": 2}, 3)
    ctx = JobContext("j", "ring-sum", "n1", tuple(ids), params, 0)
    eng = RingSum(ctx, np.array([0.5]), np.random.default_rng(0))
    acts = eng.start()
    sends = [a for a in acts if type(a).__name__ == "Send"]
    assert len(sends) == 1 and sends[0].to == "n2" and sends[0].msg.seq == 1
    assert (
        RingSum(
            JobContext("j", "ring-sum", "n2", tuple(ids), params, 0), None, np.random.default_rng(0)
        ).start()
        == []
    )
