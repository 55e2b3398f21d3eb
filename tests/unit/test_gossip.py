"""Tests of netdp_node.privacy.gossip, gossip_paper_bound and gossip_joint_view (Muffliato,
Cyffers, Even, Bellet & Massoulié, NeurIPS 2022).

Reference values: worked vectors of the paper's accountants, the Metropolis weight examples, the
ring-of-8 example of the issue, and an independent attack: a
message-passing simulation of the protocol (written here, not using the module) whose observer
solves its received messages for `x_u + η_u` by least squares.
"""

from __future__ import annotations

import math
import random
from itertools import product

import networkx as nx
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from netdp_bootstrap.topology import build
from netdp_node.privacy.composition import DEFAULT_ORDERS, compose_losses
from netdp_node.privacy.gossip import (
    GossipSchedule,
    chebyshev_coefficients,
    chebyshev_gamma,
    chebyshev_polynomial,
    check_gossip_matrix,
    clip_to_ldp,
    edges_from_topology,
    fixed_schedule,
    gossip_rounds,
    knowledge_matrix,
    ldp_level,
    metropolis_weights,
    pair_privacy_loss,
    pairwise_schedule,
    realised_schedule,
    second_eigenvalue_gap,
    spectral_gap,
)
from netdp_node.privacy.gossip_joint_view import (
    group_leakage,
    incoming_leakage,
    joint_view,
    joint_view_leakage,
    joint_view_matrix,
    outgoing_leakage,
)
from netdp_node.privacy.gossip_paper_bound import (
    er_alpha_cap,
    er_pair_bound,
    fixed_graph_pair_bound,
    mean_loss_bound,
    mean_privacy_loss,
    paper_bound,
    paper_bound_matrix,
    paper_bound_outgoing,
    rdp_to_dp_optimal,
    sigma_for_mean_dp,
    sigma_for_mean_loss,
)

A6 = 5e-7  # the reference values have 6 decimals


def ring(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def path(n: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(n - 1)]


def hypercube(m: int) -> list[tuple[int, int]]:
    return [(i, i ^ (1 << k)) for i in range(1 << m) for k in range(m) if i < i ^ (1 << k)]


def popcount(n: int) -> np.ndarray:
    return np.array([i.bit_count() for i in range(n)])


@pytest.fixture(scope="module")
def cube11() -> GossipSchedule:
    """Hypercube m = 11 (n = 2048, the "exponential graph" of Fig. 1a), T = 19 (reference value)."""
    return fixed_schedule(2048, hypercube(11), 19)


@pytest.fixture(scope="module")
def authors_er() -> tuple[nx.Graph, GossipSchedule]:
    """The authors' ER graph of Fig. 1(a) (reference value): python random.seed(0), G(2048, ln n/n)
    resampled until connected (third draw: 7873 edges), T = 32."""
    n = 2048
    state = random.getstate()
    random.seed(0)
    try:
        while True:
            g = nx.gnp_random_graph(n, math.log(n) / n)
            if nx.is_connected(g):
                break
    finally:
        random.setstate(state)
    return g, fixed_schedule(n, list(g.edges()), 32)


# =============================================================================================
# Gossip matrices (§2.1)
# =============================================================================================


def test_metropolis_examples_of_spec_2_2() -> None:
    W = metropolis_weights(8, ring(8))
    assert set(np.round(W[W > 0], 12)) == {round(1 / 3, 12)}
    # star K_{1,3}: centre row (1/4,1/4,1/4,1/4); leaf row 1/4 to the centre, 3/4 to itself
    S = metropolis_weights(4, [(0, 1), (0, 2), (0, 3)])
    assert S[0] == pytest.approx([0.25] * 4)
    assert S[1] == pytest.approx([0.25, 0.75, 0, 0])
    # path P4: off-diagonals 1/3, corner self-weights 2/3
    P = metropolis_weights(4, path(4))
    assert P[0] == pytest.approx([2 / 3, 1 / 3, 0, 0])
    assert P[1] == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0])
    # path P5 rows of the reference values
    P5 = metropolis_weights(5, path(5))
    assert P5[0] == pytest.approx([2 / 3, 1 / 3, 0, 0, 0])
    assert P5[1] == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0, 0])
    for M in (W, S, P, P5):
        check_gossip_matrix(M)


def test_metropolis_hypercube_11_is_all_twelfths(cube11: GossipSchedule) -> None:
    W = cube11.matrices[0]
    assert W.nnz == 2048 * 12
    assert np.allclose(W.data, 1 / 12)


def test_metropolis_isolated_node_keeps_its_value_and_edges_in_any_order() -> None:
    W = metropolis_weights(4, [(1, 0), (0, 1), (2, 1)])  # node 3 isolated, duplicate edge
    assert W[3] == pytest.approx([0, 0, 0, 1])
    assert W[0, 1] == pytest.approx(1 / 3)
    check_gossip_matrix(W, [(0, 1), (1, 2)])


def test_min_rule_of_table_1_is_periodic_on_the_even_ring() -> None:
    # Metropolis weights: W = A/d has eigenvalue −1, so λ_W = 0. The reference lists 9 eigenvalues
    # for n = 8 ("0, 0, 0"); the spectrum is cos(2πk/8): 0 has multiplicity 2, not 3.
    A = nx.to_numpy_array(nx.cycle_graph(8))
    Wmin = A / 2
    ev = np.sort(np.linalg.eigvalsh(Wmin))
    r = math.sqrt(0.5)
    assert ev == pytest.approx([-1, -r, -r, 0, 0, r, r, 1], abs=1e-12)
    assert spectral_gap(Wmin) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("W", "match"),
    [
        (np.array([[0.5, 0.5], [0.4, 0.6]]), "symmetric"),
        (np.array([[1.5, -0.5], [-0.5, 1.5]]), "non-negative"),
        (np.array([[0.5, 0.4], [0.4, 0.5]]), "sum to 1"),
        (np.ones((2, 3)) / 3, "square"),
    ],
)
def test_check_gossip_matrix_rejects(W: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_gossip_matrix(W)


def test_check_gossip_matrix_support() -> None:
    W = metropolis_weights(3, [(0, 1), (1, 2)])
    with pytest.raises(ValueError, match="not an edge"):
        check_gossip_matrix(W, [(0, 1)])


def test_spectra_ring8_and_p5() -> None:
    W = metropolis_weights(8, ring(8))
    ev = np.sort(np.linalg.eigvalsh(W))
    expected = [-1 / 3, -0.138071, -0.138071, 1 / 3, 1 / 3, 0.804738, 0.804738, 1]
    assert ev == pytest.approx(expected, abs=A6)
    assert spectral_gap(W) == pytest.approx(0.195262, abs=A6)
    assert chebyshev_gamma(spectral_gap(W)) == pytest.approx(1.397659, abs=A6)
    P5 = metropolis_weights(5, path(5))
    assert spectral_gap(P5) == pytest.approx(0.127322, abs=A6)
    assert chebyshev_gamma(spectral_gap(P5)) == pytest.approx(1.480278, abs=A6)
    # the code's 1 − λ_2 agrees with Definition 2 on these graphs
    assert second_eigenvalue_gap(W) == pytest.approx(spectral_gap(W), abs=1e-12)
    assert second_eigenvalue_gap(P5) == pytest.approx(spectral_gap(P5), abs=1e-12)


@pytest.mark.parametrize("m", [3, 6, 8])
def test_hypercube_spectrum(m: int) -> None:
    # Metropolis hypercube spectrum 1 − 2k/(m+1), k = 0..m; λ_W = 2/(m+1)
    W = metropolis_weights(1 << m, hypercube(m))
    ev = np.unique(np.round(np.linalg.eigvalsh(W), 9))
    assert ev == pytest.approx(sorted(1 - 2 * k / (m + 1) for k in range(m + 1)), abs=1e-9)
    assert spectral_gap(W) == pytest.approx(2 / (m + 1), abs=1e-12)


def test_chebyshev_gamma_values_and_identity() -> None:
    assert chebyshev_gamma(1.0) == pytest.approx(1.071797, abs=A6)
    assert chebyshev_gamma(0.0) == 2.0
    assert chebyshev_gamma(1e-12) == pytest.approx(2.0, abs=1e-5)
    assert chebyshev_gamma(1 / 6) == pytest.approx(1.428926, abs=A6)  # hypercube m = 11
    assert chebyshev_gamma(0.06030511) == pytest.approx(1.6081, abs=5e-5)  # ER of Fig. 1a
    assert chebyshev_gamma(0.000985) == pytest.approx(1.9391, abs=5e-5)  # grid 45×45
    assert chebyshev_gamma(0.00473) == pytest.approx(1.8714, abs=5e-5)  # RGG
    for lam in np.linspace(0.01, 1, 23):
        mu = 1 - lam / 2
        assert chebyshev_gamma(lam) == pytest.approx(2 / (1 + math.sqrt(1 - mu**2)), rel=1e-12)
    with pytest.raises(ValueError):
        chebyshev_gamma(1.5)


def test_chebyshev_coefficients() -> None:
    g = 1.4
    C = chebyshev_coefficients(g, 6)
    assert C.sum(axis=1) == pytest.approx(np.ones(7))  # P_t(1) = 1
    assert C[1] == pytest.approx([0, 1, 0, 0, 0, 0, 0])  # x^1 = W x^0
    assert C[2] == pytest.approx([1 - g, 0, g, 0, 0, 0, 0])
    assert C[3] == pytest.approx([0, (1 - g) + g * (1 - g), 0, g * g, 0, 0, 0])
    assert np.diag(C)[1:] == pytest.approx([g ** (t - 1) for t in range(1, 7)])
    assert chebyshev_coefficients(1.0, 4) == pytest.approx(np.eye(5))
    W = metropolis_weights(6, ring(6))
    for t in range(7):
        direct = sum(C[t, k] * np.linalg.matrix_power(W, k) for k in range(7))
        assert chebyshev_polynomial(W, g, t) == pytest.approx(direct, abs=1e-12)


def test_chebyshev_run_ring8() -> None:
    # reference value: x^0 = e_0, no noise, T = 10
    W = metropolis_weights(8, ring(8))
    g = chebyshev_gamma(spectral_gap(W))
    X = fixed_schedule(8, ring(8), 10, gamma=g).run(np.eye(8)[0])
    assert X[1] == pytest.approx([1 / 3, 1 / 3, 0, 0, 0, 0, 0, 1 / 3])
    assert X[2] == pytest.approx(
        [0.068227, 0.310591, 0.155295, 0, 0, 0, 0.155295, 0.310591], abs=A6
    )
    assert X[10] == pytest.approx(
        [0.125528, 0.122552, 0.124132, 0.125712, 0.129680, 0.125712, 0.124132, 0.122552], abs=A6
    )
    assert X.sum(axis=1) == pytest.approx(np.ones(11), abs=1e-12)
    plain = fixed_schedule(8, ring(8), 10).run(np.eye(8)[0])
    assert np.linalg.norm(plain[10] - 1 / 8) == pytest.approx(0.05695, abs=5e-6)
    assert np.linalg.norm(X[10] - 1 / 8) == pytest.approx(0.00606, abs=5e-6)
    assert X[10] == pytest.approx(chebyshev_polynomial(W, g, 10)[:, 0], abs=1e-12)


def test_gossip_rounds() -> None:
    # hypercube n = 2048: T_stop = 18.676 → 19 (reference value)
    assert gossip_rounds(1 / 6, 2048, 1.0, 0.25) == 19
    assert math.log(2048) / math.sqrt(1 / 6) == pytest.approx(18.676, abs=5e-4)
    # the authors' T_mix on the ER / grid graphs of Fig. 1a (reference value)
    assert gossip_rounds(0.06030511, 2048, 1.0, 0.25) == 32
    assert gossip_rounds(0.000985116, 2025, 1.0, 0.25) == 243
    assert gossip_rounds(0.00473, 2048, 1.0, 0.25) == 111
    # Fig. 3 hypercubes (reference value): λ = 2/(m+1), T = ceil(ln n/√λ)
    for m, T in [(4, 5), (6, 8), (8, 12), (10, 17), (12, 22)]:
        assert gossip_rounds(2 / (m + 1), 1 << m, 1.0, 0.25) == T
    # spread above Dσ² and the non-accelerated rate 1/λ
    assert gossip_rounds(0.25, 100, 0.1, 1.0) == math.ceil(math.log(100 / 0.01) / 0.5)
    assert gossip_rounds(0.25, 100, 1.0, 0.0, accelerated=False) == math.ceil(math.log(100) / 0.25)
    assert gossip_rounds(0.25, 100, 1.0, 0.0, dim=4) == math.ceil(math.log(100) / 0.5)
    with pytest.raises(ValueError):
        gossip_rounds(0.0, 100, 1.0, 0.25)


# =============================================================================================
# Schedules
# =============================================================================================


def test_schedule_validation() -> None:
    W = metropolis_weights(4, ring(4))
    with pytest.raises(ValueError, match="not an edge"):
        GossipSchedule(4, (frozenset({(0, 1)}),), (W,))
    with pytest.raises(ValueError, match="one entry per round"):
        GossipSchedule(4, (frozenset(),), ())
    with pytest.raises(ValueError, match="self-loop"):
        fixed_schedule(3, [(0, 0)], 2)
    with pytest.raises(ValueError, match="node index"):
        fixed_schedule(3, [(0, 3)], 2)
    with pytest.raises(ValueError, match="symmetric"):
        fixed_schedule(2, [(0, 1)], 1, weights=np.array([[0.5, 0.5], [0.4, 0.6]]))
    s = realised_schedule(4, [ring(4), [], [(0, 2)]])
    assert s.T == 3
    assert s.matrices[1].toarray() == pytest.approx(np.eye(4))  # nobody exchanged: keep values
    assert s.neighbours(0, 2) == (2,)
    assert s.communications(0) == 3


def test_restart_rule_of_accelerated_time_varying_runs() -> None:
    # plain first step, and restart whenever W changes
    s = realised_schedule(5, [ring(5), ring(5), path(5), path(5), path(5)], gamma=1.5)
    assert [s.coefficient(t) for t in range(5)] == [1.0, 1.5, 1.0, 1.5, 1.5]
    x0 = np.arange(5.0)
    X = s.run(x0)
    Wr, Wp = metropolis_weights(5, ring(5)), metropolis_weights(5, path(5))
    x1 = Wr @ x0
    x2 = 1.5 * Wr @ x1 - 0.5 * x0
    x3 = Wp @ x2
    x4 = 1.5 * Wp @ x3 - 0.5 * x2
    assert X[4] == pytest.approx(x4)
    assert X.sum(axis=1) == pytest.approx(np.full(6, 10.0))


def test_edges_from_topology() -> None:
    topo = build("ring", ["a", "b", "c", "d", "e"])  # directed ring → undirected gossip ring
    n, edges = edges_from_topology(topo)
    assert n == 5
    assert edges == frozenset({(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)})
    n, edges = edges_from_topology(build("hypercube", [f"v{i}" for i in range(8)]))
    assert edges == frozenset(hypercube(3))


# =============================================================================================
# The paper's accountant: eq. (6), eq. (7), Corollary 1, Theorem 4
# =============================================================================================

RING8 = {
    1: [0, 1, 0, 0, 0, 0, 0, 1],
    2: [0.666667, 1.333333, 0.333333, 0, 0, 0, 0.333333, 1.333333],
    3: [1.087719, 1.859649, 0.543860, 0.052632, 0, 0.052632, 0.543860, 1.859649],
    4: [1.598358, 2.270997, 0.806271, 0.116461, 0.014184, 0.116461, 0.806271, 2.270997],
    10: [4.028069, 4.442954, 2.302781, 0.951484, 0.577492, 0.951484, 2.302781, 4.442954],
}


@pytest.mark.parametrize("T", sorted(RING8))
def test_paper_bound_ring8(T: int) -> None:
    s = fixed_schedule(8, ring(8), T)
    F = paper_bound_matrix(s)
    assert F[0] == pytest.approx(RING8[T], abs=A6)
    assert paper_bound_outgoing(s, 0) == pytest.approx(RING8[T], abs=A6)
    for v in range(8):  # per-observer computation agrees with the matrix form
        assert paper_bound(s, v) == pytest.approx(F[:, v], abs=1e-12)
    # identity Σ_u f(u, v) = T_v = d_v T (Theorem 1)
    assert F.sum(axis=0) == pytest.approx(np.full(8, 2.0 * T), abs=1e-9)


def test_paper_bound_ring8_code_convention_clipping_and_cumulative() -> None:
    s = fixed_schedule(8, ring(8), 10)
    code = [4.356566, 3.748477, 2.552773, 1.145977, 0.748979, 1.145977, 2.552773, 3.748477]
    assert paper_bound_matrix(s, convention="code")[0] == pytest.approx(code, abs=A6)
    assert paper_bound_outgoing(s, 0, convention="code") == pytest.approx(code, abs=A6)
    assert clip_to_ldp(paper_bound_outgoing(s, 0))[1:] == pytest.approx(
        [1, 1, 0.951484, 0.577492, 0.951484, 1, 1], abs=A6
    )
    cumulative = [paper_bound(fixed_schedule(8, ring(8), T), 4)[0] for T in range(1, 11)]
    assert cumulative == pytest.approx(
        [0, 0, 0, 0.014184, 0.043039, 0.099533, 0.181809, 0.290882, 0.423703, 0.577492], abs=A6
    )
    # eq. (7): mean 1.996491, bound 20/8 = 2.5
    F = paper_bound_matrix(s)
    for v in range(8):
        assert mean_privacy_loss(F[:, v], v) == pytest.approx(1.996491, abs=A6)
        assert mean_loss_bound(s, v) == 2.5
    with pytest.raises(ValueError, match="convention"):
        paper_bound(s, 0, convention="paper")


def test_paper_bound_uses_plain_products_even_for_accelerated_runs() -> None:
    # Theorem 1: P_t(W) rows would give f(0,4) = 1.6508 instead of 0.5775 (ring 8, T = 10)
    W = metropolis_weights(8, ring(8))
    g = chebyshev_gamma(spectral_gap(W))
    acc = fixed_schedule(8, ring(8), 10, gamma=g)
    assert paper_bound(acc, 4)[0] == pytest.approx(0.577492, abs=A6)
    wrong = 0.0
    for t in range(10):
        P = chebyshev_polynomial(W, g, t)
        wrong += sum(P[w, 0] ** 2 / np.sum(P[w] ** 2) for w in (3, 5))
    assert wrong == pytest.approx(1.6508, abs=5e-5)


def test_paper_bound_path5_is_asymmetric() -> None:
    # reference value
    expected = np.array(
        [
            [1.970794, 4.731734, 2.020238, 0.478522, 0.049444],
            [2.699730, 2.610888, 2.925738, 1.245717, 0.226008],
            [1.054025, 2.933139, 2.108049, 2.933139, 1.054025],
            [0.226008, 1.245717, 2.925738, 2.610888, 2.699730],
            [0.049444, 0.478522, 2.020238, 4.731734, 1.970794],
        ]
    )
    s = fixed_schedule(5, path(5), 6)
    F = paper_bound_matrix(s)
    assert F == pytest.approx(expected, abs=A6)
    assert F[0, 1] != pytest.approx(F[1, 0], abs=0.1)
    for u in range(5):
        assert paper_bound_outgoing(s, u) == pytest.approx(expected[u], abs=A6)


RING6_SEQ = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 1), (2, 3), (1, 2), (4, 5)]


def test_randomized_ring6() -> None:
    # reference value
    s = pairwise_schedule(6, RING6_SEQ)
    f = paper_bound(s, 3)
    assert f == pytest.approx([0.212121, 0.212121, 0.848485, 0.727273, 1.0, 0.0], abs=A6)
    assert s.communications(3) == 3
    assert paper_bound_matrix(s)[:, 3] == pytest.approx(f, abs=1e-12)
    X = s.run(np.arange(6.0))
    assert X[-1] == pytest.approx(
        [1.757812, 2.175781, 2.175781, 2.59375, 3.148438, 3.148438], abs=1e-6
    )
    assert X[-1].mean() == pytest.approx(2.5)
    # W_t is the pairwise average I − (e_a − e_b)(e_a − e_b)ᵀ/2 , a projection
    for t, (a, b) in enumerate(RING6_SEQ):
        d = np.zeros(6)
        d[a], d[b] = 1, -1
        Wt = s.matrices[t].toarray()
        assert Wt == pytest.approx(np.eye(6) - np.outer(d, d) / 2)
        assert Wt.T @ Wt == pytest.approx(Wt)
    # the wrong column convention (W_{0:t})[u,w]/||column||... gives other numbers
    M = np.eye(6)
    wrong = np.zeros(6)
    for t, (a, b) in enumerate(RING6_SEQ):
        if 3 in (a, b):
            w = b if a == 3 else a
            wrong += M[:, w] ** 2 / np.sum(M[:, w] ** 2)  # column w, i.e. (W_{0:t})[u, w]
        M = s.matrices[t].toarray() @ M
    assert wrong == pytest.approx([0.3148, 0.8148, 0.7789, 0.0697, 1.0174, 0.0044], abs=5e-5)


def test_paper_bound_hypercube_2048(cube11: GossipSchedule) -> None:
    # reference value: u = 0, the value depends only on the distance k (App. H.2)
    thm1 = [
        1,
        0.63373,
        0.23852,
        0.11808,
        0.069952,
        0.045359,
        0.031721,
        0.022548,
        0.016824,
        0.012320,
        0.0094540,
    ]
    code = [
        1,
        0.64163,
        0.24493,
        0.12463,
        0.075202,
        0.050729,
        0.035969,
        0.026895,
        0.020210,
        0.015787,
        0.012105,
    ]
    dist = popcount(2048)
    for convention, expected in (("thm1", thm1), ("code", code)):
        f = clip_to_ldp(paper_bound(cube11, 0, convention=convention))  # f(u, 0) = f(0, u)
        for k in range(1, 12):
            vals = f[dist == k]
            assert np.ptp(vals) < 1e-12
            assert vals[0] == pytest.approx(expected[k - 1], rel=5e-5, abs=5e-6)
    # eq. (7): actual 0.10083, bound 209/2048 = 0.10205
    f = paper_bound(cube11, 0)
    assert mean_privacy_loss(f, 0) == pytest.approx(0.10083, abs=5e-6)
    assert mean_loss_bound(cube11, 0) == pytest.approx(0.10205, abs=5e-6)


@pytest.mark.parametrize(
    ("m", "expected"),
    [
        (4, [1, 1, 0.693, 0.413]),
        (6, [1, 1, 0.583, 0.321, 0.199, 0.115]),
        (8, [1, 0.952, 0.443, 0.246, 0.155, 0.100, 0.070, 0.0466]),
        (10, [1, 0.740, 0.307, 0.165, 0.103, 0.0708, 0.0505, 0.0379, 0.0283, 0.0221]),
    ],
)
def test_fig3_hypercube_series(m: int, expected: list[float]) -> None:
    # reference value: code convention, clipped, T = ceil(ln n / √λ), λ = 2/(m+1)
    n = 1 << m
    T = gossip_rounds(2 / (m + 1), n, 1.0, 0.25)
    f = clip_to_ldp(paper_bound(fixed_schedule(n, hypercube(m), T), 0, convention="code"))
    dist = popcount(n)
    got = [f[dist == k][0] for k in range(1, m + 1)]
    assert got == pytest.approx(expected, rel=5e-3, abs=5e-4)


def test_authors_er_graph_paper_bound(authors_er: tuple[nx.Graph, GossipSchedule]) -> None:
    g, s = authors_er
    assert g.number_of_edges() == 7873
    assert g.degree(0) == 11
    dist = nx.single_source_shortest_path_length(g, 0)
    d = np.array([dist[i] for i in range(2048)])
    # reference values, paper column: observer v = 0, eq. (6) clipped, mean at distance 2/3/4, and
    # the single distance-6 node (degree 1)
    f = clip_to_ldp(paper_bound(s, 0))
    assert [f[d == k].mean() for k in (2, 3, 4)] == pytest.approx([0.557, 0.167, 0.119], abs=5e-4)
    (far,) = np.flatnonzero(d == 6)
    assert g.degree(int(far)) == 1
    assert f[far] == pytest.approx(0.033, abs=5e-4)
    # reference value: source u = 0, code convention, clipped, mean [min, max] per distance
    out = clip_to_ldp(paper_bound_outgoing(s, 0, convention="code"))
    table = {
        2: (0.261, 0.162, 0.339),
        3: (0.109, 0.0266, 0.257),
        4: (0.0855, 0.0037, 0.214),
        5: (0.0572, 0.0049, 0.148),
        6: (0.0042, 0.0042, 0.0042),
    }
    assert np.all(out[d == 1] == 1.0)
    for k, (mean, lo, hi) in table.items():
        x = out[d == k]
        assert [x.mean(), x.min(), x.max()] == pytest.approx([mean, lo, hi], rel=6e-3, abs=5e-4)


def test_corollary1_ring8() -> None:
    # Corollary 1: ring 8, T = 10, v = 4; Corollary 1 bound vs Theorem 1 value
    W = metropolis_weights(8, ring(8))
    f = paper_bound(fixed_schedule(8, ring(8), 10), 4)
    for u, (bound, thm1) in enumerate(
        [(2.4844, 0.5775), (3.6953, 0.9515), (9.5907, 2.3028), (29.361, 4.4430)]
    ):
        assert fixed_graph_pair_bound(W, 10, u, 4) == pytest.approx(bound, rel=5e-5)
        assert f[u] == pytest.approx(thm1, abs=5e-5)
        assert fixed_graph_pair_bound(W, 10, u, 4) >= f[u]


def test_theorem4() -> None:
    # Theorem 4, reference value: n = 2048, T = 32, d_v = 8, α = 2, σ = Δ = 1 → 0.2510 (ε_LDP = 1)
    assert ldp_level(2.0, 1.0, 1.0) == 1.0
    assert er_pair_bound(2048, 32, 8, adjacent=False) == pytest.approx(0.2510, abs=5e-5)
    assert er_pair_bound(2048, 32, 8, adjacent=True) == 1.0
    assert er_pair_bound(100, 50, 10, adjacent=False) == 1.0  # clipped
    assert er_alpha_cap(1.0, 1.0) == pytest.approx(2.0)
    sigma = 3.0
    cap = er_alpha_cap(sigma, 1.0)
    assert sigma**2 == pytest.approx(cap * (cap - 1) / 2)


# =============================================================================================
# Conversion and calibration (§2.2, Table 1)
# =============================================================================================


@pytest.mark.parametrize(
    ("rho", "alpha_max", "alpha", "eps"),
    [
        (0.5, None, "5.7985", "5.2985"),
        (0.035, None, "19.137", "1.3046"),
        (0.00473, None, "50.336", "0.4714"),
        (0.5, 2.0, "2", "12.5129"),
    ],
)
def test_rdp_to_dp_optimal_vectors(
    rho: float, alpha_max: float | None, alpha: str, eps: str
) -> None:
    # reference values (δ = 1e-5); tolerance: half a unit of the last printed digit
    def half_ulp(text: str) -> float:
        return 0.5 * 10.0 ** -len(text.partition(".")[2]) if "." in text else 1e-12

    e, a = rdp_to_dp_optimal(rho, 1e-5, alpha_max)
    assert a == pytest.approx(float(alpha), abs=half_ulp(alpha))
    assert e == pytest.approx(float(eps), abs=half_ulp(eps))
    assert e == pytest.approx(a * rho + math.log(1e5) / (a - 1))
    if alpha_max is None:
        assert e == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e5)))
        for other in (a * 0.9, a * 1.1):  # α* is optimal
            assert other * rho + math.log(1e5) / (other - 1) > e


def test_pair_privacy_loss_matches_dp_accounting() -> None:
    sigma, delta = 2.0, 1e-6
    for fraction in (1.0, 0.25, 0.0238):
        loss = pair_privacy_loss(fraction, sigma=sigma, sensitivity=1.0, delta=delta)
        acc = RdpAccountant(orders=list(DEFAULT_ORDERS))
        acc.compose(dp_event.GaussianDpEvent(sigma / math.sqrt(fraction)))
        assert loss.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
        assert loss.delta == delta
        # the attached curve is α·fraction·Δ²/(2σ²)
        orders, values = loss.rdp
        assert values == pytest.approx([a * fraction / (2 * sigma**2) for a in orders])
        # never better than the closed-form paper conversion would allow to be worse
        assert loss.epsilon <= rdp_to_dp_optimal(fraction / (2 * sigma**2), delta)[0] + 1e-9
    zero = pair_privacy_loss(0.0, sigma=sigma, sensitivity=1.0, delta=delta)
    assert (zero.epsilon, zero.delta, zero.method) == (0.0, 0.0, "no-contribution")
    # losses compose across jobs in RDP (compose_losses)
    one = pair_privacy_loss(0.5, sigma=sigma, sensitivity=1.0, delta=delta)
    total = compose_losses([one, one], delta)
    assert total.method == "rdp"
    assert total.epsilon == pytest.approx(
        pair_privacy_loss(1.0, sigma=sigma, sensitivity=1.0, delta=delta).epsilon
    )


def test_sigma_calibration_round_trips() -> None:
    n, T, d = 2048, 19, 11
    tv = d * T
    sigma = sigma_for_mean_loss(0.1, alpha=2.0, sensitivity=1.0, n=n, communications=tv)
    assert ldp_level(2.0, sigma, 1.0) * tv / n == pytest.approx(0.1)
    sigma = sigma_for_mean_dp(1.0, 1e-5, sensitivity=1.0, n=n, communications=tv)
    rho = tv / (2 * n * sigma**2)
    assert rdp_to_dp_optimal(rho, 1e-5)[0] == pytest.approx(1.0)
    # with a Theorem-4 cap on α the capped conversion is inverted
    sigma = sigma_for_mean_dp(20.0, 1e-5, sensitivity=1.0, n=n, communications=tv, alpha_max=2.0)
    rho = tv / (2 * n * sigma**2)
    assert rdp_to_dp_optimal(rho, 1e-5, 2.0) == pytest.approx((20.0, 2.0))
    with pytest.raises(ValueError, match="unreachable"):
        sigma_for_mean_dp(5.0, 1e-5, sensitivity=1.0, n=n, communications=tv, alpha_max=2.0)
    # Table 1 derivation: σ² = αΔ² d T_stop/(2nε)
    assert sigma_for_mean_loss(
        0.5, alpha=3.0, sensitivity=2.0, n=100, communications=40
    ) ** 2 == pytest.approx(3 * 4 * 40 / (2 * 100 * 0.5))


# =============================================================================================
# The exact joint-view accountant (docs/errata.md)
# =============================================================================================


def test_issue_ring8_example() -> None:
    """Ring of 8, 4 rounds: node 4 can solve its messages for x_0 + η_0 exactly; eq. (6) says
    1.4% of the LDP loss. The exact accountant reports the full LDP level."""
    s = fixed_schedule(8, ring(8), 4)
    assert paper_bound(s, 4)[0] == pytest.approx(0.014184, abs=A6)
    view = joint_view(s, 4)
    assert view.leakage[0] == 1.0
    assert view.full[0]
    assert view.rank == 8
    # the attack, explicitly: messages of nodes 3 and 5 at t = 0..3 plus node 4's own value
    rng = np.random.default_rng(7)
    z = rng.normal(size=8)  # x + η
    K = knowledge_matrix(s, 4)
    y = K @ z
    c, *_ = np.linalg.lstsq(K.T, np.eye(8)[0], rcond=None)
    assert np.linalg.norm(K.T @ c - np.eye(8)[0]) < 1e-9
    assert c @ y == pytest.approx(z[0], abs=1e-9)
    # and with acceleration (same row space)
    g = chebyshev_gamma(spectral_gap(s.matrices[0]))
    assert joint_view(fixed_schedule(8, ring(8), 4, gamma=g), 4).leakage[0] == 1.0


def test_joint_view_evidence_table() -> None:
    # reference values: ring 8, T = 10, all u: 1 (rank 8); path P5, v = 4, T = 6: 1 for every u
    v10 = joint_view(fixed_schedule(8, ring(8), 10), 4)
    assert v10.rank == 8 and np.all(v10.leakage == 1.0)
    p5 = joint_view(fixed_schedule(5, path(5), 6), 4)
    assert np.all(p5.leakage == 1.0)
    # randomized ring-6 example (c), v = 3: u = 0 → 1/6 and u = 2 → 2/3 (paper: 0.212, 0.848)
    r = pairwise_schedule(6, RING6_SEQ)
    jv = joint_view(r, 3)
    assert jv.leakage[[0, 2]] == pytest.approx([1 / 6, 2 / 3], abs=1e-9)
    ex = joint_view(r, 3, exact=True)
    assert ex.method == "exact"
    assert ex.leakage == pytest.approx([1 / 6, 1 / 6, 2 / 3, 1, 1, 0], abs=1e-15)
    assert jv.leakage == pytest.approx(ex.leakage, abs=1e-9)
    assert np.all(jv.leakage >= ex.leakage)  # the float value is rounded up


def test_joint_view_hypercube_2048(cube11: GossipSchedule) -> None:
    # reference values: v = 0, T = 19: distance 2/5/8 → 0.200/0.0238/0.0667; distance 10 and 11 → 1;
    # rank K = 112 (T_v = 209), Σ_{u≠v} = 111
    view = joint_view(cube11, 0)
    assert view.resolved and view.method == "float"
    assert view.rank == view.numeric_rank == 112
    assert view.rows == 1 + 209
    dist = popcount(2048)
    f = view.leakage
    for k, expected in ((2, 0.200), (5, 0.0238), (8, 0.0667)):
        assert f[dist == k] == pytest.approx(expected, abs=5e-5)
        assert np.ptp(f[dist == k]) < 1e-8
    assert np.all(f[dist >= 10] == 1.0) and np.all(view.full[dist >= 10])
    assert not np.any(view.full[(dist >= 2) & (dist <= 9)])
    assert np.sum(f) - 1 == pytest.approx(111, abs=1e-4)
    # eq. (7) survives (docs/errata.md): mean ≤ T_v/n
    assert mean_privacy_loss(f, 0) <= mean_loss_bound(cube11, 0)
    # the antipode reconstruction, on a simulated accelerated run (docs/errata.md)
    g = chebyshev_gamma(1 / 6)
    acc = fixed_schedule(2048, hypercube(11), 19, gamma=g)
    z = np.random.default_rng(3).normal(size=2048)
    X = acc.run(z)
    nb = acc.neighbours(0, 0)
    y = [z[0]] + [X[t][w] for t in range(19) for w in nb]  # what node 0 holds
    K = knowledge_matrix(acc, 0)
    assert K @ z == pytest.approx(np.array(y), abs=1e-9)
    e = np.zeros(2048)
    e[2047] = 1.0
    c, *_ = np.linalg.lstsq(K.T, e, rcond=None)
    assert np.linalg.norm(K.T @ c - e) < 1e-6
    assert c @ np.array(y) == pytest.approx(z[2047], abs=1e-6)


def test_accelerated_and_plain_have_the_same_joint_view() -> None:
    # identical for accelerated and plain gossip with the same T
    g = nx.random_regular_graph(3, 30, seed=1)
    E = list(g.edges())
    lam = spectral_gap(metropolis_weights(30, E))
    for T in (3, 4):
        plain = fixed_schedule(30, E, T)
        acc = fixed_schedule(30, E, T, gamma=chebyshev_gamma(lam))
        for v in (0, 7):
            a, b = joint_view(plain, v), joint_view(acc, v)
            assert a.rank == b.rank
            assert a.leakage == pytest.approx(b.leakage, abs=1e-9)
            # the accelerated knowledge matrix is different, its row space is not
            Ka, Kb = knowledge_matrix(plain, v), knowledge_matrix(acc, v)
            assert not np.allclose(Ka, Kb)
            assert np.linalg.matrix_rank(np.vstack([Ka, Kb]), tol=1e-9) == a.rank
        assert np.any((a.leakage > 0.01) & (a.leakage < 0.99))  # a non-trivial case


def test_joint_view_trace_identity_and_mean_bound() -> None:
    g = nx.random_regular_graph(3, 24, seed=1)
    s = fixed_schedule(24, list(g.edges()), 3)
    for v in range(0, 24, 5):
        view = joint_view(s, v)
        assert view.resolved
        # Σ_u ||Π e_u||² = rank K_v ≤ 1 + T_v (trace identity)
        assert np.sum(view.leakage) == pytest.approx(view.rank, abs=1e-6)
        assert view.rank <= 1 + s.communications(v)
        assert mean_privacy_loss(view.leakage, v) <= mean_loss_bound(s, v) + 1e-6
        assert np.all(view.leakage[list(s.neighbours(v, 0))] == 1.0)  # neighbours: LDP


def test_incoming_outgoing_and_matrix() -> None:
    g = nx.random_regular_graph(3, 10, seed=0)
    s = fixed_schedule(10, list(g.edges()), 2)
    F = joint_view_matrix(s)
    for v in range(10):
        assert incoming_leakage(s, v) == pytest.approx(F[:, v])
    for u in range(10):
        assert outgoing_leakage(s, u) == pytest.approx(F[u])
    assert np.all(np.diag(F) == 1.0)
    # like eq. (6), the joint view is not symmetric in general
    assert np.max(np.abs(F - F.T)) == pytest.approx(0.5, abs=1e-6)
    # a path is all-or-nothing: every node within reach is solvable (triangular system)
    P = joint_view_matrix(fixed_schedule(7, path(7), 3))
    assert set(np.round(P.ravel(), 9)) == {0.0, 1.0}


def test_published_outputs_add_knowledge() -> None:
    # x^T is not sent; if outputs are published, they are one more linear view
    s = fixed_schedule(9, path(9), 2)
    without = joint_view_leakage(s, 0)
    own = joint_view_leakage(s, 0, published=[0])  # its own output: post-processing
    assert own == pytest.approx(without, abs=1e-9)
    everyone = joint_view(s, 0, published=range(9))
    assert np.all(everyone.leakage >= without - 1e-12)
    assert everyone.rank == 9 and np.all(everyone.leakage == 1.0)


def test_colluders() -> None:
    s = fixed_schedule(10, ring(10), 3)
    a, b = joint_view_leakage(s, 0), joint_view_leakage(s, 5)
    both = joint_view(s, [0, 5])
    assert np.all(both.leakage >= np.maximum(a, b) - 1e-12)
    assert np.all(both.leakage[[0, 5]] == 1.0)
    # eq. (15) counts every message once; eq. (16) mean bound with |N_t(V_c)| = 4
    f15 = paper_bound(s, [0, 5])
    assert np.sum(f15) == pytest.approx(3 * 4, abs=1e-9)
    assert f15 == pytest.approx(paper_bound(s, 0) + paper_bound(s, 5))  # disjoint neighbourhoods
    # colluders with a dominating set learn everything (App. G.1.4)
    dom = joint_view(fixed_schedule(10, ring(10), 1), [0, 3, 6, 8])
    assert np.all(dom.leakage == 1.0)


def test_group_leakage() -> None:
    s = fixed_schedule(8, path(8), 2)
    # single-member group = the joint view
    assert group_leakage(s, [5], 0) == pytest.approx(joint_view_leakage(s, 0)[5], abs=1e-9)
    # brute force over the sign vertices with the exact projector
    view = joint_view(s, 0, exact=True)
    U = [3, 4, 6]
    P = np.array([[float(view._basis.entry(a, b)) for b in U] for a in U])
    brute = max(np.array(sg) @ P @ np.array(sg) for sg in product([-1, 1], repeat=3))
    assert group_leakage(s, U, 0) == pytest.approx(brute, abs=1e-8)
    assert group_leakage(s, U, 0) >= brute
    assert group_leakage(s, U, 0) <= 3 * float(np.max(np.linalg.eigvalsh(P))) + 1e-8
    assert group_leakage(s, U, 0, dim=3) >= group_leakage(s, U, 0) - 1e-12
    # a group containing a neighbour leaks at least the LDP level
    assert group_leakage(s, [1, 7], 0) >= 1.0


def test_joint_view_rejects_bad_input() -> None:
    s = fixed_schedule(4, ring(4), 2)
    with pytest.raises(ValueError, match="node index"):
        joint_view(s, 4)
    with pytest.raises(ValueError, match="at least one"):
        joint_view(s, [])
    with pytest.raises(ValueError, match="rtol"):
        joint_view(s, 0, rtol=0.0)


def test_float_and_exact_agree_and_unresolved_falls_back() -> None:
    # a long run on a small graph: the float part may be unresolved; the result must then be the
    # exact one (n ≤ EXACT_MAX_NODES) and never below it
    s = realised_schedule(
        9, [[(0, 1), (2, 3), (4, 5)], [(1, 2), (5, 6), (7, 8)], [(3, 4), (6, 7)], [(0, 8)]] * 4
    )
    for v in (0, 4):
        auto = joint_view(s, v)
        ex = joint_view(s, v, exact=True)
        assert auto.resolved and auto.method == "float"
        assert ex.method == "exact"
        assert auto.leakage == pytest.approx(ex.leakage, abs=1e-8)
        assert np.all(auto.leakage >= ex.leakage - 1e-15)
        assert np.array_equal(auto.full, ex.full)
        assert np.array_equal(ex.full, ex.leakage == 1.0)
    # force an unresolved float part (a huge rtol drops genuine directions): the default falls back
    # to exact arithmetic on small graphs, exact=False reports the conservative value
    g = fixed_schedule(8, hypercube(3), 3)
    ex = joint_view(g, 0, exact=True)
    coarse = joint_view(g, 0, rtol=0.3)
    assert not coarse.resolved and coarse.numeric_rank < coarse.rank
    assert coarse.method == "exact"
    assert coarse.leakage == pytest.approx(ex.leakage, abs=1e-12)
    cons = joint_view(g, 0, rtol=0.3, exact=False)
    assert cons.method == "conservative"
    assert np.all(cons.leakage == 1.0)  # missing directions: nothing smaller is provable
    assert np.all(cons.estimate <= ex.leakage + 1e-9)  # the float estimate is a lower one


# =============================================================================================
# Independent check: simulate the attack (least squares on the observer's own view)
# =============================================================================================


def _metropolis(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    """Independent Metropolis weights from an edge list."""
    deg = [0] * n
    for a, b in edges:
        deg[a] += 1
        deg[b] += 1
    W = np.zeros((n, n))
    for a, b in edges:
        W[a, b] = W[b, a] = 1.0 / (1 + max(deg[a], deg[b]))
    W += np.diag(1.0 - W.sum(axis=1))
    return W


def _view(
    n: int,
    rounds: list[list[tuple[int, int]]],
    gamma: float | None,
    observers: set[int],
    x0: np.ndarray,
) -> np.ndarray:
    """Message passing, node by node: what the observers hold (own noisy values + every value a
    non-observer sent them). Chebyshev with x^1 = W x^0 and a restart when the edge set changes."""
    cur, prev = x0.copy(), x0.copy()
    seen = [x0[v] for v in sorted(observers)]
    last: frozenset | None = None
    for t, E in enumerate(rounds):
        key = frozenset(tuple(sorted(e)) for e in E)
        W = _metropolis(n, sorted(key))
        nbrs: dict[int, list[int]] = {v: [] for v in range(n)}
        for a, b in key:
            nbrs[a].append(b)
            nbrs[b].append(a)
        for v in sorted(observers):
            for w in sorted(nbrs[v]):
                if w not in observers:
                    seen.append(cur[w])  # the message w sends to v in round t
        plain = gamma is None or t == 0 or key != last
        new = np.empty(n)
        for v in range(n):
            mix = W[v, v] * cur[v] + sum(W[v, w] * cur[w] for w in nbrs[v])
            new[v] = mix if plain else gamma * mix + (1 - gamma) * prev[v]
        prev, cur, last = cur, new, key
    return np.array(seen)


def _attack(
    n: int,
    rounds: list[list[tuple[int, int]]],
    gamma: float | None,
    observers: set[int],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """For every u: can the observers solve their view for x_u + η_u? Also the exact Gaussian
    divergence `e_uᵀ Aᵀ(AAᵀ)⁺A e_u` from the observers' own linear system A (probing the public
    protocol with unit inputs), for comparison with the accountant's values."""
    A = np.stack([_view(n, rounds, gamma, observers, np.eye(n)[z]) for z in range(n)], axis=1)
    z = rng.normal(size=n)  # x + η
    y = _view(n, rounds, gamma, observers, z)
    assert A @ z == pytest.approx(y, abs=1e-10)
    recovered = np.zeros(n, dtype=bool)
    for u in range(n):
        c, *_ = np.linalg.lstsq(A.T, np.eye(n)[u], rcond=None)
        if np.linalg.norm(A.T @ c - np.eye(n)[u]) < 1e-7:
            assert c @ y == pytest.approx(z[u], abs=1e-7)  # the actual reconstruction
            recovered[u] = True
    P = A.T @ np.linalg.pinv(A @ A.T, rcond=1e-13, hermitian=True) @ A
    return recovered, np.diag(P)


def _check_attack(
    n: int,
    rounds: list[list[tuple[int, int]]],
    gamma: float | None,
    observers: list[int],
    seed: int,
) -> int:
    if gamma is None and len({frozenset(map(tuple, map(sorted, E))) for E in rounds}) == 1:
        schedule = fixed_schedule(n, rounds[0], len(rounds))
    else:
        schedule = realised_schedule(n, rounds, gamma=gamma)
    rng = np.random.default_rng(seed)
    partial = 0
    obs_list = [[v] for v in range(n)] + ([observers] if observers else [])
    for obs in obs_list:
        recovered, divergence = _attack(n, rounds, gamma, set(obs), rng)
        view = joint_view(schedule, obs)
        # full LDP exactly when the attack recovers x_u + η_u, strictly less otherwise
        assert np.array_equal(view.leakage == 1.0, recovered), (obs, view.leakage, recovered)
        assert np.array_equal(view.full, recovered)
        assert np.all(view.leakage[~recovered] < 1.0 - 1e-9)
        # and the values are the observers' own Gaussian divergence (rounded up by the margin)
        assert view.leakage == pytest.approx(divergence, abs=1e-6)
        partial += int(np.sum((view.leakage > 1e-6) & (view.leakage < 1 - 1e-6)))
    return partial


def _topology_edges(kind: str, n: int, **params: object) -> list[tuple[int, int]]:
    nodes = [f"n{i}" for i in range(n)]
    _, edges = edges_from_topology(build(kind, nodes, params or None, seed=3))
    return sorted(edges)


TOPOLOGIES = [
    ("ring", 8, {}),
    ("ring", 5, {}),
    ("complete", 5, {}),
    ("star", 6, {}),
    ("grid", 6, {"rows": 1, "cols": 6}),  # path P6
    ("grid", 9, {"rows": 3, "cols": 3}),
    ("hypercube", 8, {}),
    ("exponential", 10, {}),
    ("erdos_renyi", 10, {"p": 0.3}),
]


@pytest.mark.parametrize(
    ("kind", "n", "params"), TOPOLOGIES, ids=[f"{k}{n}" for k, n, _ in TOPOLOGIES]
)
def test_attack_matches_accountant_on_fixed_graphs(kind: str, n: int, params: dict) -> None:
    edges = _topology_edges(kind, n, **params)
    lam = spectral_gap(metropolis_weights(n, edges))
    colluders = [0, n // 2]
    partial = 0
    for T in (1, 2, 3, 4):
        for gamma in (None, chebyshev_gamma(lam)):
            partial += _check_attack(n, [edges] * T, gamma, colluders, seed=T)
    if kind in ("grid", "erdos_renyi") and n == 9 or kind == "erdos_renyi":
        assert partial > 0  # the check also covers pairs strictly between 0 and LDP


def test_attack_matches_accountant_on_a_regular_graph() -> None:
    edges = sorted(tuple(sorted(e)) for e in nx.random_regular_graph(3, 10, seed=2).edges())
    lam = spectral_gap(metropolis_weights(10, edges))
    partial = 0
    for T in (2, 3):
        for gamma in (None, chebyshev_gamma(lam)):
            partial += _check_attack(10, [edges] * T, gamma, [0, 5], seed=T)
    assert partial > 0


def test_attack_matches_accountant_on_time_varying_and_dropout_schedules() -> None:
    rng = np.random.default_rng(11)
    n = 9
    partial = 0
    for trial in range(6):
        rounds = []
        for _ in range(int(rng.integers(2, 6))):
            alive = rng.random(n) > 0.3  # dropout: an unavailable node loses all its edges
            E = [
                (a, b)
                for a in range(n)
                for b in range(a + 1, n)
                if alive[a] and alive[b] and rng.random() < 0.35
            ]
            rounds.append(E)
            if rng.random() < 0.4:
                rounds.append(E)  # same graph again: an accelerated (non-restart) step
        gamma = 1.5 if trial % 2 else None
        partial += _check_attack(n, rounds, gamma, [1, 4], seed=trial)
    # randomized gossip (Algorithm 2): one edge per tick, idle ticks included
    for trial in range(3):
        seq = []
        for _ in range(12):
            a, b = rng.choice(7, size=2, replace=False)
            seq.append([] if rng.random() < 0.2 else [(int(a), int(b))])
        partial += _check_attack(7, seq, None, [2, 3], seed=100 + trial)
    assert partial > 0
