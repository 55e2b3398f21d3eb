"""Closed forms and the paper's accountant against reference vectors (§6.2, App. E):
the corrected ring formula, the hypercube (Krawtchouk), the star by Lemma 2, first-hit sums, the
a worked pipeline table, the mean loss and σ calibration of §7, mixing times."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from netdp_node.privacy.rw_sgd import (
    alpha_max,
    communicability,
    communicability_interval,
    first_hit,
    harmonic,
    hypercube_closed_form,
    known_sender,
    linear_rdp_to_dp,
    mean_pair_s,
    mixing_time,
    neighbour_lists,
    pairwise_matrix,
    ring_closed_form,
    sigma_for_mean_loss,
    star_communicability,
    transition_matrix,
)

RING16 = [(i, (i + 1) % 16) for i in range(16)]


def _lazy_ring(n, kappa):
    P = np.roll(np.eye(n), 1, axis=1)
    return kappa * np.eye(n) + (1 - kappa) * (P + P.T) / 2


def test_ring_closed_form_4_4():
    exact = [1.053194, 0.554985, 0.391387, 0.312535, 0.268645, 0.243372, 0.230063, 0.225892]
    thm3 = [1.017087, 0.518878, 0.355280, 0.276428, 0.232538, 0.207265, 0.193956, 0.189785]
    L = [0.585352, 0.087143, -0.076455, -0.155307, -0.199197, -0.224470, -0.237779, -0.241950]
    first = [0.456793, 0.143610, 0.069939, 0.042210, 0.029359, 0.022866, 0.019725, 0.018780]
    W = transition_matrix(16, RING16)
    S = communicability(W, 0, 1000)
    assert harmonic(1000) / 16 == pytest.approx(0.46784193, abs=1e-8)
    for d in range(1, 9):
        assert ring_closed_form(16, d, 1000) == pytest.approx(exact[d - 1], abs=1e-6)
        assert ring_closed_form(16, d, 1000) == pytest.approx(S[d], abs=1e-10)  # vs power sums
        assert ring_closed_form(16, d, None) == pytest.approx(L[d - 1], abs=1e-6)
        assert math.log(1000) / 16 + ring_closed_form(16, d, None) == pytest.approx(
            thm3[d - 1], abs=1e-6
        )
        assert first_hit(W, 0, [d], 1000) == pytest.approx(first[d - 1], abs=1e-6)
    for kappa in (0.01, 0.5):  # other laziness: the closed form against power sums
        S2 = communicability(_lazy_ring(16, kappa), 0, 1000)
        for d in (1, 3, 8):
            assert ring_closed_form(16, d, 1000, kappa) == pytest.approx(S2[d], abs=1e-10)
    # the paper's Theorem 5 index (u+v−2) gives different values to pairs at the same distance;
    # the corrected form depends on the distance only, and is symmetric
    assert ring_closed_form(16, 3, 1000) == pytest.approx(ring_closed_form(16, 13, 1000))


def test_first_hit_infinite_horizon_and_collusion_2_5():
    W = transition_matrix(16, RING16)
    for d, want in ((1, 0.45679283), (2, 0.14361044), (4, 0.04220991), (8, 0.01878006)):
        assert first_hit(W, 0, [d], 20000) == pytest.approx(want, abs=1e-8)
    # §4.2, App. D: F = {4, 8, 12}, T = 1600: (18) Σ_v S_0v = 0.939053, the first hit of F 0.072131
    S = communicability(W, 0, 1600)
    assert S[[4, 8, 12]].sum() == pytest.approx(0.939053, abs=1e-6)
    assert first_hit(W, 0, [4, 8, 12], 1600) == pytest.approx(0.072131, abs=1e-6)
    # complete graph: S^first(∞) = ln(n)/(n − 1)
    assert first_hit(np.full((16, 16), 1 / 16), 0, [3], 5000) == pytest.approx(
        math.log(16) / 15, abs=1e-9
    )


def test_hypercube_and_complete_and_star_4_4():
    want4 = [0.70563783, 0.63454369, 0.41057376, 0.35989062, 0.33865324]
    g = nx.convert_node_labels_to_integers(nx.hypercube_graph(4), ordering="sorted")
    W = transition_matrix(16, list(g.edges()))
    S = communicability(W, 0, 1000)
    for j in range(5):
        assert hypercube_closed_form(4, j, 1000) == pytest.approx(want4[j], abs=1e-8)
        v = next(x for x in range(16) if bin(x).count("1") == j)
        assert S[v] == pytest.approx(want4[j], abs=1e-8)
    want11 = [
        0.10409297,
        0.01391833,
        0.00512919,
        0.00329745,
        0.00269957,
        0.00243634,
        0.00229414,
        0.00220571,
        0.00214506,
        0.00210043,
        0.00206589,
    ]
    for j in range(1, 12):
        assert hypercube_closed_form(11, j, 1150) == pytest.approx(want11[j - 1], abs=1e-8)
    # the paper-Hamilton Q_4 = A/4 is periodic (λ = −1)
    Sp = communicability(transition_matrix(16, list(g.edges()), "paper"), 0, 1000)
    for j, want in enumerate([0.496472, 0.648459, 0.424551, 0.373806, 0.352631]):
        v = next(x for x in range(16) if bin(x).count("1") == j)
        assert Sp[v] == pytest.approx(want, abs=1e-6)
    # complete: J/n gives H_T/n; the paper-Hamilton K_n (J − I)/(n − 1): L_uv = ln(n/(n−1))/n
    K16 = [(a, b) for a in range(16) for b in range(a + 1, 16)]
    assert communicability(transition_matrix(16, K16), 0, 1000)[1] == pytest.approx(
        0.467842, abs=1e-6
    )
    Sk = communicability(transition_matrix(16, K16, "paper"), 0, 1000)
    assert Sk[1] == pytest.approx(0.471876, abs=1e-6)
    assert Sk[1] - harmonic(1000) / 16 == pytest.approx(math.log(16 / 15) / 16, abs=1e-7)
    assert harmonic(1000) / 2048 == pytest.approx(0.003655, abs=1e-6)
    # star by Lemma 2 (Theorem 4 is not implemented: it bounds nothing Alg. 1 runs)
    assert star_communicability(16, 1000, "paper") == pytest.approx(
        {"leaf->leaf": 0.287036, "centre->leaf": 0.471876, "leaf->centre": 0.471876}, abs=1e-6
    )
    assert star_communicability(16, 1000, "coded") == pytest.approx(
        {"leaf->leaf": 0.283003, "centre->leaf": 0.467842, "leaf->centre": 0.467842}, abs=1e-6
    )


def test_pipeline_4_12():
    """Ring n = 16, (I + A)/3, T = 1600, σ = 5, α = 2, N_u = 100, δ = 1e-6, u = 0."""
    W = transition_matrix(16, RING16)
    S = pairwise_matrix(W, 1600)[0]  # one eigendecomposition
    np.testing.assert_allclose(S, communicability(W, 0, 1600), atol=1e-10)
    exact = [1.082558, 0.584348, 0.420750, 0.341899, 0.298008, 0.272736, 0.259426, 0.255255]
    thm3 = [1.046462, 0.548253, 0.384655, 0.305803, 0.261913, 0.236640, 0.223331, 0.219160]
    rdp = [8.660460, 4.674788, 3.366002, 2.735190, 2.384066, 2.181887, 2.075410, 2.042043]
    nocap = [19.7995, 13.7027, 11.3270, 10.0610, 9.3083, 8.8555, 8.6104, 8.5326]
    papercap = [19.7995, 13.7027, 11.3270, 10.0662, 9.3515, 8.9400, 8.7233, 8.6554]
    ks = known_sender(S, 0, neighbour_lists(16, RING16))
    known = [0.584348, 1.082558, 0.584348, 0.420750, 0.341899, 0.298008, 0.272736, 0.259426]
    assert harmonic(1600) == pytest.approx(7.95528704, abs=1e-8)
    assert alpha_max(5) == pytest.approx(4.0707, abs=1e-4)
    for d in range(1, 9):
        assert S[d] == pytest.approx(exact[d - 1], abs=1e-6)
        assert math.log(1600) / 16 + ring_closed_form(16, d, None) == pytest.approx(
            thm3[d - 1], abs=1e-6
        )
        rho = 100 * S[d] / 25
        assert 2 * rho == pytest.approx(rdp[d - 1], abs=1e-6)
        assert min(2 * rho, 4.0) == pytest.approx(min(rdp[d - 1], 4.0))
        assert linear_rdp_to_dp(rho, 1e-6) == pytest.approx(nocap[d - 1], abs=1e-4)
        assert linear_rdp_to_dp(rho, 1e-6, alpha_max(5)) == pytest.approx(papercap[d - 1], abs=1e-4)
        assert ks[d] == pytest.approx(known[d - 1], abs=1e-6)
    assert linear_rdp_to_dp(100 * 0.5 / 25, 1e-6) == pytest.approx(12.5130, abs=1e-4)
    # σ = 20: ε_RDP(α=2) and (ε, δ) for d = 1, 2, 4, 8
    for d, r, e in (
        (1, 0.541279, 4.1379),
        (2, 0.292174, 2.9874),
        (4, 0.170949, 2.2588),
        (8, 0.127628, 1.9417),
    ):
        rho = 100 * S[d] / 400
        assert 2 * rho == pytest.approx(r, abs=1e-6)
        assert linear_rdp_to_dp(rho, 1e-6) == pytest.approx(e, abs=1e-4)
    assert linear_rdp_to_dp(100 * S[8] / 400, 1e-6, alpha_max(20)) == pytest.approx(
        1.9470, abs=1e-4
    )


def test_mean_loss_and_sigma_calibration_4_11():
    W = transition_matrix(16, RING16)
    m = mean_pair_s(W, 1600)
    assert m == pytest.approx(0.45164708, abs=1e-8)
    S = pairwise_matrix(W, 1600)  # the direct formula agrees with the trace formula
    assert S[~np.eye(16, dtype=bool)].mean() == pytest.approx(m, abs=1e-10)
    assert harmonic(1600) / 15 == pytest.approx(0.53035247, abs=1e-8)
    # complete J/2048, N = 10, T = 10n: the mean S is H_T/n = 0.00512912 (J/n: every λ_i≥2 is 0)
    mean = harmonic(20480) / 2048
    assert mean == pytest.approx(0.00512912, abs=1e-8)
    for eps, none, paper, c1 in (
        (0.5, 3.397, 39.85, 20.03),
        (1.0, 1.714, 20.27, 10.19),
        (2.0, 0.871, 10.47, 5.26),
    ):
        assert sigma_for_mean_loss(mean, 10, eps, 1e-6, "none") == pytest.approx(none, abs=2e-3)
        assert sigma_for_mean_loss(mean, 10, eps, 1e-6, "paper") == pytest.approx(paper, abs=1e-2)
        assert sigma_for_mean_loss(mean, 10, eps, 1e-6, "c1") == pytest.approx(c1, abs=1e-2)
    # LDP: S = 1/2 for every pair
    assert sigma_for_mean_loss(0.5, 10, 1.0, 1e-6, "none") == pytest.approx(16.92, abs=1e-2)


def test_mixing_times_4_12():
    g = nx.convert_node_labels_to_integers(nx.hypercube_graph(4), ordering="sorted")
    assert mixing_time(transition_matrix(16, RING16)) == 18
    assert mixing_time(transition_matrix(16, RING16), 1e-3) == 124
    assert mixing_time(transition_matrix(16, list(g.edges()))) == 3
    assert mixing_time(transition_matrix(16, list(g.edges())), 1e-3) == 14
    assert mixing_time(np.full((16, 16), 1 / 16)) == 1


def test_star_theorem4_erratum_and_lazy_star_4_4():
    """§6.2, App. E star table (n = 16, T = 1000): the κ-lazy simple walk (non-symmetric, Lemma 2)
    gives 0.226076 / 0.272286 / 4.084284; what Theorem 4's proof sums (powers of the
    sub-stochastic A/(n − 1)) gives 0.002300 / 0.068210 / 0.068210 and its closed form (κ → 0)
    0.004600 for leaf→leaf, exactly 2× the sum (Proposition 1 lacks a factor 1/2): values 4× to 60×
    below any genuine star walk, which is why netdp computes the star with Lemma 2."""
    n, k = 16, 0.01
    W = np.zeros((n, n))
    W[0, 1:] = (1 - k) / (n - 1)
    W[1:, 0] = 1 - k
    np.fill_diagonal(W, k)
    leaf, centre = communicability(W, 1, 1000), communicability(W, 0, 1000)
    assert (leaf[2], centre[1], leaf[0]) == pytest.approx((0.226076, 0.272286, 4.084284), abs=1e-6)
    A = np.zeros((n, n))
    A[0, 1:] = A[1:, 0] = 1
    sub_leaf = communicability(A / (n - 1), 1, 1000)
    assert (sub_leaf[2], sub_leaf[0]) == pytest.approx((0.002300, 0.068210), abs=1e-6)
    thm4_leaf = -1 / (n - 1) * math.log(1 - 1 / (n - 1))
    thm4_centre = math.log((math.sqrt(n - 1) + 1) / (math.sqrt(n - 1) - 1)) / (2 * math.sqrt(n - 1))
    assert thm4_leaf == pytest.approx(0.004600, abs=1e-6)
    assert thm4_leaf == pytest.approx(2 * sub_leaf[2], rel=1e-3)
    assert thm4_centre == pytest.approx(0.068210, abs=1e-6)
    assert star_communicability(16, 1000, "paper")["leaf->leaf"] > 60 * thm4_leaf


def test_local_row_with_certified_tail_4_10():
    W = transition_matrix(16, RING16)
    lam = np.linalg.eigvalsh(W)
    lam_star = float(np.max(np.abs(lam[:-1])))
    lo, hi = communicability_interval(W, 0, 1600, 200, lam_star)
    assert (lo[8], hi[8]) == pytest.approx((0.25525291, 0.25525848), abs=1e-8)
    exact = communicability(W, 0, 1600)
    assert exact[8] == pytest.approx(0.25525538, abs=1e-8)
    assert np.all(lo <= exact) and np.all(exact <= hi)
