"""Algorithm 1-R (distributed noise) and Algorithm 2 (ring histogram) through the runtime over both
transports, with their noise schedules and accountants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import TRANSPORTS, contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.algorithms.ring.accountant import ring_histogram_loss
from netdp_node.privacy.amplification import fmt_shuffle_epsilon
from netdp_node.privacy.composition import advanced_composition
from netdp_node.privacy.ring import rr_gamma

pytestmark = pytest.mark.timeout(60)


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ring_sum_r_schedule_and_exact_sum(tmp_path, transport):
    n, K = 5, 3
    ids = _ids(n)
    vals = {nid: np.array([0.1 * (i + 1)]) for i, nid in enumerate(ids)}
    params = get_algorithm("ring-sum-r").prepare({"rounds": K, "clip": 1.0, "epsilon": 0.5}, n)
    sigma = params["sigma"]
    net = await make_net(transport, ids, tmp_path, data=vals)
    try:
        await net.run_job(contexts("r", "ring-sum-r", ids, params))
        for i, nid in enumerate(ids):
            recs = [e for e in net.ledger(nid).entries("r") if e.event == "contribute"]
            assert [e.params["round"] for e in recs] == list(range(1, K + 1))
            for e in recs:
                first = i == 0 and e.params["round"] == 1
                last = i == n - 1 and e.params["round"] == K
                want = sigma if first else sigma / math.sqrt(n - 1)
                if last:
                    want = math.sqrt(want**2 + sigma**2)
                assert e.params["sigma"] == pytest.approx(want)  # Remark 1 with E2 + release
        out = net.nodes["n2"].jobs["r"].output
        std = out.info["estimate_std"]
        assert std == pytest.approx(sigma * math.sqrt(2 + (n * K - 1) / (n - 1)) / K)
        truth = sum(v[0] for v in vals.values())
        assert abs(out.value[0] - truth) <= 5 * std
        loss = per_job_losses(
            JobView(
                "r",
                {"algorithm": "ring-sum-r", "participants": ids, "params": params},
                net.ledger("n3").entries("r"),
            ),
            "n3",
        )
        ref = per_job_losses(
            JobView(
                "r",
                {"algorithm": "ring-sum", "participants": ids, "params": params},
                net.ledger("n3").entries("r"),
            ),
            "n3",
        )
        assert loss == ref  # one window of std ≥ σ per contribution, as Theorem 1
    finally:
        await net.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ring_histogram_counts_and_blanket(tmp_path, transport):
    n, K, L = 6, 4, 3
    ids = _ids(n)
    cats = {nid: np.array([float(i % L)]) for i, nid in enumerate(ids)}
    params = get_algorithm("ring-histogram").prepare({"rounds": K, "bins": L, "epsilon0": 2.0}, n)
    gamma = params["gamma"]
    assert gamma == pytest.approx(rr_gamma(L, 2.0))
    blanket = math.ceil(gamma * n)
    net = await make_net(transport, ids, tmp_path, data=cats, seed=9)
    try:
        await net.run_job(contexts("h", "ring-histogram", ids, params))
        out = net.nodes["n4"].jobs["h"].output
        counts = np.array(out.info["counts"])
        assert counts.sum() == n * K + 2 * blanket  # one report per visit + pre- and post-load
        expect = (counts - gamma * n * K / L - 2 * blanket / L) / (1 - gamma)
        np.testing.assert_allclose(out.value, expect)
        assert out.info["blanket"] == blanket
        with pytest.raises(ValueError):
            get_algorithm("ring-histogram").prepare({"bins": 1}, n)
    finally:
        await net.close()


def test_ring_histogram_accountant():
    small = {
        "participants": list(range(10)),
        "params": {"epsilon0": 1.0, "delta": 1e-6, "delta_prime": 1e-6},
    }
    assert ring_histogram_loss(small, 4).epsilon == pytest.approx(4.0)  # no amplification claimed
    big = {"participants": list(range(20000)), "params": small["params"]}
    ew = fmt_shuffle_epsilon(1.0, 19999, 1e-6)
    want = min(advanced_composition(ew, 1e-6, 10, 1e-6)[0], 10 * ew)
    assert ring_histogram_loss(big, 10).epsilon == pytest.approx(want)
    assert ring_histogram_loss(big, 10).epsilon < 10 * 1.0
