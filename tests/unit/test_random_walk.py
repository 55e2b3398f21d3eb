"""Random-walk DP-SGD on any graph: the accountant against random-walks.md §4.3–4.12, the star
counterexample of §4.9, and the rw-sgd engine over both transports on a ring."""

from __future__ import annotations

import numpy as np
import pytest
from harness import TRANSPORTS, make_net

from netdp_node.privacy.accountant import ACCOUNTANTS, JobView, per_job_losses
from netdp_node.privacy.random_walk import (
    alpha_max,
    communicability,
    communicability_sparse,
    known_sender,
    ldp_epsilon,
    linear_rdp_to_dp,
    neighbour_lists,
    paper_epsilon,
    transition_matrix,
)
from netdp_node.protocols import get_algorithm
from netdp_node.protocols.base import JobContext
from netdp_node.protocols.walk import TOKEN

RING16 = [(i, (i + 1) % 16) for i in range(16)]


def test_spec_4_12_ring_vectors():
    W = transition_matrix(16, RING16)
    np.testing.assert_allclose(W[0, [15, 0, 1]], [1 / 3] * 3)  # (I + A)/3
    S = communicability(W, 0, 1600)
    exact = [1.082558, 0.584348, 0.420750, 0.341899, 0.298008, 0.272736, 0.259426, 0.255255]
    np.testing.assert_allclose(S[1:9], exact, atol=1e-6)
    np.testing.assert_allclose(communicability_sparse(16, RING16, 0, 1600), S, atol=1e-12)
    ks = known_sender(S, 0, neighbour_lists(16, RING16))
    np.testing.assert_allclose(ks[1:9], [0.584348, 1.082558, 0.584348, 0.420750, 0.341899,
                                         0.298008, 0.272736, 0.259426], atol=1e-6)
    # (ε, δ = 1e-6) of the unclipped ρ, without cap and under the paper's cap α ≤ 4.0707
    rho = 100 * S / 25
    assert linear_rdp_to_dp(rho[8], 1e-6) == pytest.approx(8.5326, abs=1e-4)
    assert alpha_max(5) == pytest.approx(4.0707, abs=1e-4)
    assert linear_rdp_to_dp(rho[8], 1e-6, alpha_max(5)) == pytest.approx(8.6554, abs=1e-4)
    assert linear_rdp_to_dp(rho[4], 1e-6, alpha_max(5)) == pytest.approx(10.0662, abs=1e-4)
    # clipped at the LDP level for d = 1, 2: the LDP conversion 12.5130
    pe = paper_epsilon(S, 100, 5.0, 1e-6, cap="none")
    assert pe[1] == pytest.approx(12.5130, abs=1e-4) and pe[2] == pytest.approx(12.5130, abs=1e-4)
    # complete graph J/16, T = 1000: H_T/n for every pair
    assert communicability(np.full((16, 16), 1 / 16), 0, 1000)[5] == pytest.approx(0.467842,
                                                                                 abs=1e-6)


def test_conversion_vectors_4_7():
    assert linear_rdp_to_dp(0.01, 1e-6) == pytest.approx(0.753384, abs=1e-6)
    assert linear_rdp_to_dp(0.01, 1e-6, alpha_max(10)) == pytest.approx(2.172729, abs=1e-6)
    assert linear_rdp_to_dp(0.01, 1e-6, alpha_max(10, "c1")) == pytest.approx(1.158563, abs=1e-6)
    assert linear_rdp_to_dp(1e-4, 1e-6, alpha_max(20)) == pytest.approx(1.013518, abs=1e-6)


def test_star_counterexample_paper_value_below_the_sound_one():
    """Spec §0 item 3 / §4.9: on a star the centre sees every leaf's update at the LDP level; the
    paper's (anonymous-sender) per-contribution S claims about 4x less at n = 64."""
    # per contribution the centre learns a leaf's update at the LDP level, RDP α/(2σ²) (S = 1/2);
    # the paper's formula claims S_{leaf→centre}: 4.5x less at n = 64, 15x at n = 256 (T = 10n)
    for n, factor in ((64, 4.0), (256, 14.0)):
        star = [(0, i) for i in range(1, n)]
        S = communicability_sparse(n, star, 1, 10 * n, "paper")
        assert 0.5 / S[0] > factor
    # netdp's report is the local-DP bound: the same for the centre as for any other observer
    spec = {"algorithm": "rw-sgd", "participants": [f"p{i}" for i in range(64)],
            "params": get_algorithm("rw-sgd").prepare({}, 64)}
    entries = [type("E", (), {"event": "contribute"})()] * 12
    loss = per_job_losses(JobView("j", spec, entries), "p1")
    assert loss["p0"] == loss["p2"] and loss["p0"].method.startswith("ldp-gaussian-rdp")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_rw_sgd_walks_on_the_graph_and_reports_the_sound_bound(tmp_path, transport):
    ids = [f"n{i}" for i in range(1, 7)]
    edges = tuple((ids[i], ids[(i + 1) % 6]) for i in range(6))  # a ring
    nb = {v: set() for v in ids}
    for a, b in edges:
        nb[a].add(b)
        nb[b].add(a)
    rng = np.random.default_rng(0)
    w_true = np.array([1.0, -1.0])
    data = {}
    for v in ids:
        X = rng.normal(size=(10, 2))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        data[v] = np.hstack([X, np.where(X @ w_true > 0, 1.0, -1.0)[:, None]]).reshape(-1)
    p = get_algorithm("rw-sgd").prepare({"T": 120, "dim": 2, "eta": 0.5, "epsilon": 20.0,
                                         "cap": 40}, 6)
    ctxs = {v: JobContext("rw", "rw-sgd", v, tuple(ids), p, 0, edges) for v in ids}
    net = await make_net(transport, ids, tmp_path, data=data, seed=5)
    try:
        await net.run_job(ctxs)
        for v in ids:
            sent = [e for e in net.ledger(v).entries("rw") if e.kind == TOKEN
                    and e.direction == "sent"]
            assert all(e.peer in nb[v] for e in sent)  # tokens go to graph neighbours only
        assert sum(net.nodes[v].jobs["rw"].engine.holds for v in ids) == 120
        spec = {"job_id": "rw", "algorithm": "rw-sgd", "participants": list(ids), "params": p,
                "edges": [list(e) for e in edges]}
        entries = net.ledger("n1").entries("rw")
        loss = per_job_losses(JobView("rw", spec, entries), "n1")
        count = sum(e.event == "contribute" for e in entries)
        want = ldp_epsilon(count, p["noise_multiplier"], p["delta"])
        assert len(loss) == 5 and all(x.epsilon == pytest.approx(want) for x in loss.values())
        base = ACCOUNTANTS["rw-sgd"].baselines(spec, entries, "n1")
        (paper,) = base.values()
        assert "not a guarantee" in next(iter(base)) and paper.epsilon > 0
    finally:
        await net.close()
