"""Tests of netdp_node.privacy.inca_audit (IncA, `shared/papers/inca.md`, "the spec").

Reference values: the closed forms of the spec (Examples 3.1/3.2, Eq. 2-5, Eq. 8-9), an
independent per-party message-passing run of Algorithm 2 written here from the Examples' formulas
(not from the module's U matrices), and the spec's verified accounting cases (§11 item 3).
"""

from __future__ import annotations

import numpy as np
import pytest

from netdp_node.privacy import inca_audit as ia


# ------------------------------------------------------------------ schemes (Def. 3.4, Lemma 3.5)

@pytest.mark.parametrize("name", ["early", "inc"])
@pytest.mark.parametrize("T", [1, 2, 5, 12])
def test_schemes_valid_and_sum_to_u(name, T):
    alpha, U = ia.noise_scheme(name, T)
    assert ia.is_valid_scheme(alpha, U)
    rng = np.random.default_rng(T)
    u, Delta = rng.normal(), rng.normal(size=T)
    z = alpha * u + U @ Delta
    assert abs(z.sum() - u) < 1e-12  # Eq. (2)
    # The Examples' formulas, written out.
    if name == "early":
        expect = np.concatenate([[u + Delta.sum()], -Delta])
    else:
        expect = np.array([Delta[0]] + [u / T - Delta[t - 1] + (Delta[t] if t < T else 0.0)
                                         for t in range(1, T + 1)])
    assert np.allclose(z, expect, atol=1e-12)


def test_valid_conditions_reject():
    alpha, U = ia.noise_scheme("inc", 4)
    assert not ia.is_valid_scheme(alpha * 2, U)  # 1ᵀα ≠ 1
    bad = U.copy()
    bad[0, 0] += 1.0
    assert not ia.is_valid_scheme(alpha, bad)  # 1ᵀU ≠ 0
    low = U.copy()
    low[:, 1] = low[:, 0]  # rank < T (and still 1ᵀU = 0)
    assert not ia.is_valid_scheme(alpha, low)
    # A random Valid U (columns centred, full rank) is accepted.
    R = np.random.default_rng(0).normal(size=(5, 4))
    assert ia.is_valid_scheme(alpha, R - R.mean(axis=0))
    with pytest.raises(ValueError):
        ia.noise_scheme("late", 3)


def test_party_scheme_eq8():
    T = 6
    alpha, U = ia.noise_scheme("inc", T)
    rng = np.random.default_rng(1)
    for d in range(1, T + 1):  # leaves for good at iteration d (online at 0..d-1)
        on = np.arange(T + 1) < d
        a, Ui = ia.party_scheme(alpha, U, on)
        assert abs(a.sum() - (d - 1) / T) < 1e-12  # Eq. (9)
        u, Delta = rng.normal(), rng.normal(size=T)
        z = a * u + Ui @ Delta
        assert np.all(z[d:] == 0)
        # Eq. (8): the uncancelled noise is the one outstanding term Δ_d of D_inc.
        assert abs(z.sum() - ((d - 1) / T * u + Delta[d - 1])) < 1e-12
    # Back online at T: everything injected is cancelled, missed shares are not re-injected.
    on = np.ones(T + 1, bool)
    on[[2, 3]] = False
    a, Ui = ia.party_scheme(alpha, U, on)
    assert np.allclose(Ui.sum(axis=0), 0) and abs(a.sum() - (T - 2) / T) < 1e-12


# ------------------------------------------------------------------ schedule and weights

def test_out_neighbours_deterministic_distinct():
    a = ia.out_neighbours(9, 3, 5, seed=42)
    b = ia.out_neighbours(9, 3, 5, seed=42)
    assert a.shape == (5, 9, 3) and np.array_equal(a, b)
    assert not np.array_equal(a, ia.out_neighbours(9, 3, 5, seed=43))
    for t in range(5):
        for i in range(9):
            assert len(set(a[t, i])) == 3 and i not in a[t, i]
            assert a[t, i].min() >= 0 and a[t, i].max() < 9
    # Fixed order of draws: the first iteration of a longer schedule is the same.
    assert np.array_equal(ia.out_neighbours(9, 3, 7, seed=42)[:5], a)
    with pytest.raises(ValueError):
        ia.out_neighbours(3, 3, 2, seed=0)


def test_effective_weights_by_hand():
    nb = np.array([[1], [2], [0], [0]])  # k = 1: 0→1, 1→2, 2→0, 3→0
    on = np.array([True, True, False, True])
    W = ia.effective_weights(nb, on, counted={(0, 1), (1, 2)})
    expect = np.array([
        [0.5, 0.0, 0.0, 0.0],   # 3→0 not counted: weight back to 3
        [0.5, 0.5, 0.0, 0.0],   # 0→1 counted
        [0.0, 0.0, 1.0, 0.0],   # 2 offline: column e_2; 1→2 to an offline receiver goes back
        [0.0, 0.0, 0.0, 1.0],
    ])
    expect[1, 1] = 1.0
    assert np.allclose(W, expect)
    assert np.allclose(W.sum(axis=0), 1.0)


def test_effective_weights_column_stochastic_random():
    rng = np.random.default_rng(3)
    nb = ia.out_neighbours(20, 3, 4, seed=7)
    for t in range(4):
        on = rng.random(20) < 0.7
        W = ia.effective_weights(nb[t], on)
        assert np.allclose(W.sum(axis=0), 1.0) and W.min() >= 0
        for i in range(20):
            if not on[i]:
                assert W[i, i] == 1.0 and W[:, i].sum() == 1.0 and W[i].sum() == 1.0
            else:
                live = [j for j in nb[t, i] if on[j]]
                assert np.isclose(W[i, i], (1 + 3 - len(live)) / 4)


# ------------------------------------------------------------------ simulation (Alg. 1, 2)

@pytest.mark.parametrize("scheme", ["early", "inc"])
def test_simulate_no_dropouts_is_exact_mean(scheme):
    ex = ia.make_execution(30, 2, 8, seed=5, scheme=scheme)
    rng = np.random.default_rng(11)
    x = rng.random(30)
    r = ia.simulate(ex, x, sigma_eta=0.3, sigma_delta=50.0, rng=rng)
    # Eq. (3)-(5): x̂ = x̄ + η̄ exactly, whatever σ_Δ.
    assert abs(r["estimate"] - (x.mean() + r["eta"].mean())) < 1e-10
    assert np.allclose(r["omega"].sum(axis=1), [ex.alpha[: t + 1].sum() * 30 for t in range(9)])
    # Vectors run coordinate-wise.
    xv = rng.random((30, 3))
    rv = ia.simulate(ex, xv, 0.3, 50.0, rng)
    assert np.allclose(rv["estimate"], xv.mean(0) + rv["eta"].mean(0), atol=1e-10)


def _message_passing(n, k, T, seed, online, x, eta, Delta):
    """Alg. 2 party by party, D_inc from Example 3.2's formulas, permanent dropouts only."""
    nbrs = ia.out_neighbours(n, k, T, seed)
    u = x + eta

    def z(i, t):
        if t == 0:
            return Delta[i, 0]
        if t < T:
            return u[i] / T - Delta[i, t - 1] + Delta[i, t]
        return u[i] / T - Delta[i, T - 1]

    y = np.array([z(i, 0) for i in range(n)])
    w = np.zeros(n)
    for t in range(1, T + 1):
        ny, nw = np.zeros(n), np.zeros(n)
        for i in range(n):
            if not online[t, i]:
                ny[i] += y[i]
                nw[i] += w[i]
                continue
            keep = 1 / (k + 1)
            for j in nbrs[t - 1, i]:
                if online[t, j]:
                    ny[j] += y[i] / (k + 1)
                    nw[j] += w[i] / (k + 1)
                else:
                    keep += 1 / (k + 1)
            ny[i] += keep * y[i] + z(i, t)
            nw[i] += keep * w[i] + 1 / T
        y, w = ny, nw
    return y, w


def test_simulate_matches_message_passing_and_eq8():
    n, k, T = 25, 2, 6
    rng = np.random.default_rng(2)
    online = ia.dropout_history(n, T, rng, permanent=0.3)
    ex = ia.make_execution(n, k, T, seed=9, scheme="inc", online=online)
    x = rng.random(n)
    r = ia.simulate(ex, x, 0.5, 20.0, np.random.default_rng(4))
    y, w = _message_passing(n, k, T, 9, online, x, r["eta"], r["Delta"])
    assert np.allclose(r["y"][T], y, atol=1e-9) and np.allclose(r["omega"][T], w, atol=1e-12)
    # Eq. (8) per party, and Σ_i y^(T) = Σ_i Σ_t z_{i,t} (column stochasticity, Eq. 3).
    u = x + r["eta"]
    for i in range(n):
        d = T + 1 if online[T, i] else int(np.argmin(online[:, i]))
        gamma = (min(d, T + 1) - 1) / T
        assert abs(r["gamma"][i] - gamma) < 1e-12
        out = 0.0 if online[T, i] else r["Delta"][i, d - 1]
        assert abs(r["z"][i].sum() - (gamma * u[i] + out)) < 1e-10
    assert abs(r["y"][T].sum() - r["z"].sum()) < 1e-9
    fin = online[T]
    assert abs(r["estimate"] - r["y"][T, fin].sum() / r["omega"][T, fin].sum()) < 1e-12


def test_temporary_dropouts_gamma_weighted_mean():
    n, T = 20, 8
    rng = np.random.default_rng(8)
    online = ia.dropout_history(n, T, rng, temporary=0.2)
    assert online[T].all() and not online.all()
    ex = ia.make_execution(n, 2, T, seed=1, scheme="inc", online=online)
    x = rng.random(n)
    r = ia.simulate(ex, x, 0.4, 30.0, rng)
    g, u = r["gamma"], x + r["eta"]
    assert abs(r["estimate"] - (g * u).sum() / g.sum()) < 1e-10  # spec §6, utility


# ------------------------------------------------------------------ account (Thm 4.1, §11.3)

def test_account_everything_observed_is_local_dp():
    ex = ia.make_execution(12, 2, 4, seed=3)
    every = [(t, i) for t in range(5) for i in range(12)]
    a = ia.account(ex, observed=every, sigma_eta=0.7, sigma_delta=5.0, delta=1e-5)
    assert np.allclose(a.s * 0.7, 1.0)  # σ_η² s² = Δ_x²: Local DP


def test_account_finals_only_is_central():
    n = 15
    ex = ia.make_execution(n, 2, 5, seed=3)
    a = ia.account(ex, observed=[], sigma_eta=1.0, sigma_delta=1e6, delta=1e-5)
    assert a.rank >= 1 and np.allclose(a.s ** 2, 1.0 / n, rtol=1e-4)
