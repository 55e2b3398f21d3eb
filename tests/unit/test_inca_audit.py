"""Tests of netdp_node.privacy.inca_audit (IncA, Sabater, Ben Mokhtar & Ramon 2025).

Reference values: the paper's closed forms (Examples 3.1/3.2, Eq. 2-5, Eq. 8-9), an
independent per-party message-passing run of Algorithm 2 written here from the Examples' formulas
(not from the module's U matrices), and verified accounting cases of a reference simulation.
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
        expect = np.array(
            [Delta[0]]
            + [u / T - Delta[t - 1] + (Delta[t] if t < T else 0.0) for t in range(1, T + 1)]
        )
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
    expect = np.array(
        [
            [0.5, 0.0, 0.0, 0.0],  # 3→0 not counted: weight back to 3
            [0.5, 0.5, 0.0, 0.0],  # 0→1 counted
            [0.0, 0.0, 1.0, 0.0],  # 2 offline: column e_2; 1→2 to an offline receiver goes back
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
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


def _message_passing(n, k, T, seed, online, x, eta, Delta, full=False):
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
    hist = [y]
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
        hist.append(y)
    return (np.array(hist), w) if full else (y, w)


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
    assert abs(r["estimate"] - (g * u).sum() / g.sum()) < 1e-10  # Algorithm 2, utility


# ------------------------------------------------------------------ account (Thm 4.1)


def test_account_everything_observed_is_local_dp():
    ex = ia.make_execution(12, 2, 4, seed=3)
    every = [(t, i) for t in range(5) for i in range(12)]
    a = ia.account(ex, observed=every, sigma_eta=0.7, sigma_delta=5.0, delta=1e-5)
    assert np.allclose(a.s * 0.7, 1.0)  # σ_η² s² = Δ_x²: Local DP


def test_account_finals_only_is_central():
    n = 15
    ex = ia.make_execution(n, 2, 5, seed=3)
    a = ia.account(ex, observed=[], sigma_eta=1.0, sigma_delta=1e6, delta=1e-5)
    # Exact value 1/n up to the finite σ_Δ's share (< 1e-11 here); the former Cholesky of
    # M = AAᵀ + σ_Δ²BBᵀ was off by 3e-6 to 2.3e-4 depending on the BLAS kernel.
    assert a.rank >= 1 and np.allclose(a.s**2, 1.0 / n, rtol=1e-8)


@pytest.mark.parametrize("sd", [1e3, 1e6, 1e8])
def test_account_stays_accurate_when_sigma_delta_dominates(sd):
    """s_k² against the least-norm solve on the raw rows (Lemma 4.3) when σ_Δ ≫ σ_η, where M is
    badly conditioned (its Δ-free directions sit far below σ_Δ²‖B‖²)."""
    n, k, T, seed = 12, 2, 4, 5
    ex = ia.make_execution(n, k, T, seed=seed)
    obs = ia.sample_observed(ex, 0.3, np.random.default_rng(1))
    a = ia.account(ex, observed=obs, sigma_eta=1.0, sigma_delta=sd, delta=1e-5)
    G = _raw_rows(n, k, T, seed, obs)
    scale = np.concatenate([np.full(n, 1.0), np.full(n * T, sd)])
    for kk in range(n):
        w = np.linalg.lstsq(G * scale, -G[:, kk], rcond=None)[0]
        assert abs(a.s[kk] ** 2 - w @ w) < 1e-8 * w @ w, (kk, a.s[kk] ** 2, w @ w)


def _raw_rows(n, k, T, seed, observed):
    """Coefficient rows of the observed y_i^(t) on (u, Δ), by linearity from the independent
    message-passing run (unit inputs), no dropouts. Finals always included."""
    seen = set(observed) | {(T, i) for i in range(n)}
    cols = n + n * T
    rows = np.zeros((len(seen), cols))
    order = sorted(seen)
    for c in range(cols):
        u = np.zeros(n)
        D = np.zeros((n, T))
        if c < n:
            u[c] = 1.0
        else:
            D[(c - n) // T, (c - n) % T] = 1.0
        hist, _ = _message_passing(n, k, T, seed, np.ones((T + 1, n), bool), u, 0 * u, D, full=True)
        rows[:, c] = [hist[t, i] for t, i in order]
    return rows


def test_account_matches_minimal_shift_lemma43():
    """Theorem 4.1's s_k² equals the minimum of ‖t_η‖²/σ_η² + ‖t_Δ‖²/σ_Δ² over shifts that
    hide x_k → x_k + Δ_x (Lemma 4.3), computed as a least-norm solve on the raw rows."""
    n, k, T, seed = 8, 2, 4, 13
    ex = ia.make_execution(n, k, T, seed=seed)
    obs = ia.sample_observed(ex, 0.5, np.random.default_rng(0))
    se, sd = 0.8, 3.0
    a = ia.account(ex, observed=obs, sigma_eta=se, sigma_delta=sd, delta=1e-5)
    G = _raw_rows(n, k, T, seed, obs)
    scale = np.concatenate([np.full(n, se), np.full(n * T, sd)])
    for kk in range(n):
        w = np.linalg.lstsq(G * scale, -G[:, kk], rcond=None)[0]  # min ‖w‖: G·(scale·w) = −a_k
        assert np.allclose((G * scale) @ w, -G[:, kk], atol=1e-9)
        assert abs(a.s[kk] ** 2 - w @ w) < 1e-8 * max(1.0, w @ w)
    # The fast pencil used by calibration agrees with the Cholesky route.
    v = ia.linear_view(ex, observed=obs)
    assert np.allclose(ia._Pencil.of(v).s2(se, sd), a.s**2, rtol=1e-8)


def test_lemma44_null_direction():
    """An unseen delivered y_j^(t): shifting u by e_j − W̃^{t+1}_{:,j} with compensating Δ leaves
    every observed message unchanged (checked on the independent message-passing run)."""
    n, k, T, seed = 10, 2, 5, 4
    ex = ia.make_execution(n, k, T, seed=seed)
    rng = np.random.default_rng(6)
    obs = ia.sample_observed(ex, 0.5, rng)
    unseen = ia.unseen_delivered(ex, observed=obs)
    assert unseen and all((t, j) not in obs for t, j in unseen)
    alpha, U = ia.noise_scheme("inc", T)
    x, eta, D = rng.random(n), np.zeros(n), rng.normal(size=(n, T))
    base, _ = _message_passing(n, k, T, seed, ex.online, x, eta, D, full=True)
    for t, j in unseen[:6]:
        v = -ex.weights[t][:, j].copy()
        v[j] += 1.0
        want = np.zeros((n, T + 1))  # desired total change of z_{i,s}
        want[j, t] += 1.0
        want[:, t + 1] -= ex.weights[t][:, j]
        tD = np.array([np.linalg.lstsq(U, want[i] - alpha * v[i], rcond=None)[0] for i in range(n)])
        assert np.allclose(U @ tD.T + np.outer(alpha, v), want.T, atol=1e-12)
        shifted, _ = _message_passing(n, k, T, seed, ex.online, x + v, eta, D + tD, full=True)
        diff = np.abs(shifted - base) > 1e-9
        assert diff[t, j] and diff.sum() == 1  # only the unseen y_j^(t) changed
        assert abs(v.sum()) < 1e-12  # γᵀv = 0


def test_colluders_leave_one_honest_is_local_dp():
    n = 9
    ex = ia.make_execution(n, 2, 4, seed=1)
    a = ia.account(ex, corrupted=range(1, n), sigma_eta=0.5, sigma_delta=100.0, delta=1e-5)
    assert np.isnan(a.s[1:]).all() and abs(a.s[0] * 0.5 - 1.0) < 1e-9
    # A colluding party sees every message sent to it: those are unseen by no one.
    c = 3
    seen = {m for m in ia.unseen_delivered(ex, corrupted=[c])}
    for t in range(4):
        for j in range(n):
            if c in ex.out_nbrs[t, j] and j != c:
                assert (t, j) not in seen


def test_eavesdropper_50_percent_spec_11_3():
    """Reference simulation (n = 30, T = 8, k = 2, 50% observed): rank condition with n_H − 1 = 29,
    σ_η²s² decreasing in σ_Δ to 1/n (spec: 0.497 / 0.042 / 0.0334 / 0.0333 on its draw)."""
    n = 30
    ex = ia.make_execution(n, 2, 8, seed=12345)
    obs = ia.sample_observed(ex, 0.5, np.random.default_rng(12345))
    rc = ia.rank_condition(ex, observed=obs)
    assert rc["holds"] and rc["rank"] == n - 1
    v = ia.linear_view(ex, observed=obs)
    assert np.allclose(ia.noise_free_leakage(v), 1 / n, atol=1e-9)
    vals = [
        ia.account(ex, observed=obs, sigma_eta=1.0, sigma_delta=sd, delta=1e-5, view=v).s_max ** 2
        for sd in (1, 10, 100, 1000)
    ]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    assert 0.3 < vals[0] < 0.7 and 0.035 < vals[1] < 0.05 and abs(vals[3] - 1 / n) < 1e-4


def test_analytic_gaussian_against_dp_accounting():
    from dp_accounting.pld import privacy_loss_distribution as pld

    for s in (0.2, 1.0, 3.0):
        ours = ia.gaussian_epsilon(s, 1e-5)
        ref = pld.from_gaussian_mechanism(
            1.0 / s, sensitivity=1.0, value_discretization_interval=1e-4
        )
        assert abs(ours - ref.get_epsilon_for_delta(1e-5)) < 2e-3 * max(1.0, ours)
        assert ours < ia.gaussian_epsilon(s, 1e-5, "paper") or s > 1.0
    assert abs(ia.gaussian_epsilon(ia.target_scale(0.7, 1e-5, "analytic"), 1e-5) - 0.7) < 1e-6


def test_calibrate_is_tight_and_worst_case():
    n, T = 20, 6
    views, exs = [], []
    for seed in range(3):
        ex = ia.make_execution(n, 1, T, seed=seed)
        corr = ia.sample_corrupted(n, 6, np.random.default_rng(seed))
        views.append(ia.linear_view(ex, corrupted=corr))
        exs.append((ex, corr))
    cal = ia.calibrate(views, epsilon=0.5, delta=1e-5, kappa=2.0)
    c = np.sqrt(2 * np.log(1.25 / 1e-5))
    assert abs(cal.sigma_eta**2 - 2 * c**2 / (0.25 * 14)) < 1e-9  # κ·c²/(ε² n_H)
    assert cal.sigma_delta == max(cal.per_sample)
    for (ex, corr), sd in zip(exs, cal.per_sample):
        ok = ia.account(ex, corrupted=corr, sigma_eta=cal.sigma_eta, sigma_delta=sd, delta=1e-5)
        bad = ia.account(
            ex, corrupted=corr, sigma_eta=cal.sigma_eta, sigma_delta=sd * 0.99, delta=1e-5
        )
        assert ok.epsilon_paper_max <= 0.5 * (1 + 1e-6) < bad.epsilon_paper_max
        assert ok.satisfies(0.5 * (1 + 1e-6)) and not bad.satisfies(0.5)
        assert ok.satisfies(0.5, "analytic")  # the exact Gaussian is tighter than c
    with pytest.raises(ValueError, match="increase"):
        ia.calibrate(views, epsilon=0.5, delta=1e-5, kappa=0.5)


def test_rank_condition_k1_is_undirected_connectivity_and_thm48():
    """Theorems 4.5/4.6: for k = 1 the Lemma 4.4 vectors are incidence vectors, so the rank
    condition is the connectivity of the undirected unseen graph; strong connectivity implies it
    (Thm 4.8)."""
    import networkx as nx

    n = 24
    hits = {"rank": 0, "strong": 0}
    for seed in range(6):
        ex = ia.make_execution(n, 1, 6, seed=seed)
        adv = {"corrupted": ia.sample_corrupted(n, 7, np.random.default_rng(seed))}
        G = ia.unseen_graph(ex, **adv)
        rc = ia.rank_condition(ex, **adv)
        assert rc["holds"] == nx.is_connected(G.to_undirected())
        e = ia.explain(ex, **adv)
        if e["strongly_connected"]:
            assert rc["holds"]
        hits["rank"] += rc["holds"]
        hits["strong"] += e["strongly_connected"]
        if rc["holds"]:  # Thm 4.5 ⇒ only the total is noise-free: [Π_K]_kk = 1/n_H
            assert np.allclose(ia.noise_free_leakage(ia.linear_view(ex, **adv)), 1 / 17, atol=1e-8)
    assert hits["rank"] >= hits["strong"]


def test_static_topology_breaks_rank_thm49():
    n, T = 10, 6
    nb = ia.out_neighbours(n, 1, 1, seed=2)[0]
    W = ia.effective_weights(nb, np.ones(n, bool))
    alpha, U = ia.noise_scheme("inc", T)
    ex = ia.IncaExecution(
        n=n,
        T=T,
        alpha=alpha,
        U=U,
        weights=(W,) * T,
        online=np.ones((T + 1, n), bool),
        final=np.ones(n, bool),
        out_nbrs=np.repeat(nb[None], T, axis=0),
    )
    # Two honest parties with every message observed.
    obs = [(t, i) for t in range(T) for i in (0, 1)]
    assert not ia.rank_condition(ex, observed=obs)["holds"]


def test_party_report_and_dropout_terms():
    n, T = 16, 8
    rng = np.random.default_rng(5)
    online = ia.dropout_history(n, T, rng, permanent=0.25)
    ex = ia.make_execution(n, 2, T, seed=21, online=online)
    me = int(np.flatnonzero(online[T])[0])
    r = ia.party_report(
        ex, me, {"colluders": 0.25}, sigma_eta=1.0, sigma_delta=8.0, delta=1e-5, samples=3, seed=21
    )
    again = ia.party_report(
        ex, me, {"colluders": 4}, sigma_eta=1.0, sigma_delta=8.0, delta=1e-5, samples=3, seed=21
    )
    assert r["epsilon"] == again["epsilon"] and r["samples"] == 3
    assert 0 < r["epsilon"] < r["local_dp_epsilon"] and r["epsilon_mean"] <= r["epsilon"]
    with pytest.raises(ValueError):
        ia.party_report(ex, me, {"corrupted": [me]}, sigma_eta=1.0, sigma_delta=8.0, delta=1e-5)
    # Uncancelled noise and lost values, against the simulation (Eq. 8).
    e = ia.estimate_terms(ex)
    x = rng.random(n)
    sim = ia.simulate(ex, x, 0.7, 5.0, np.random.default_rng(0))
    est = (e["c_u"] @ (x + sim["eta"]) + (e["c_delta"] * sim["Delta"]).sum()) / e["omega_total"]
    assert abs(est - sim["estimate"]) < 1e-9
    # Without the leavers' held values the released sum keeps uncancelled Δ of leavers who sent
    # something (their outstanding term went out, Eq. 8) and loses shares of values:
    # Σ c_u < the shares injected.
    leavers = ~online[T] & online[1]  # left after sending at least once (d ≥ 2)
    assert leavers.any() and (np.abs(e["c_delta"][leavers]).sum(axis=1) > 0).all()
    assert e["c_u"].sum() < sim["gamma"].sum() - 1e-6
    assert abs(e["omega_total"] - sim["omega"][T, online[T]].sum()) < 1e-12


def test_dropout_summary():
    n, T = 14, 6
    ex0 = ia.make_execution(n, 2, T, seed=2)
    s0 = ia.dropout_summary(ex0, 5.0)
    assert s0["leavers"] == [] and s0["uncancelled_noise_std"] < 1e-12
    assert abs(s0["value_share_released"] - 1.0) < 1e-12
    online = np.ones((T + 1, n), bool)
    online[3:, 4] = False  # party 4 leaves at iteration 3 (sent y^(0), y^(1))
    ex = ia.make_execution(n, 2, T, seed=2, online=online)
    s = ia.dropout_summary(ex, 5.0)
    assert s["leavers"] == [4] and 4 in s["per_party_uncancelled"]
    assert 0 < s["value_share_released"] < 1
    # Against the simulation: the spread of (estimate − γ-free part) over Δ draws.
    x = np.zeros(n)
    errs = [ia.simulate(ex, x, 0.0, 5.0, np.random.default_rng(r))["estimate"] for r in range(2000)]
    assert abs(np.std(errs) - s["uncancelled_noise_std"]) < 0.06 * s["uncancelled_noise_std"]


def test_make_execution_counted_messages_keep_mass():
    n, k, T = 10, 2, 4
    nb = ia.out_neighbours(n, k, T, seed=3)
    counted = [{(i, int(j)) for i in range(n) for j in nb[t, i] if (i + t) % 3} for t in range(T)]
    ex = ia.make_execution(n, k, T, seed=3, counted=counted)
    for t in range(T):
        for i in range(n):
            for j in nb[t, i]:
                assert (ex.weights[t][j, i] > 0) == ((i, int(j)) in counted[t])
    x = np.random.default_rng(0).random(n)
    r = ia.simulate(ex, x, 0.2, 10.0, np.random.default_rng(1))
    assert abs(r["estimate"] - (x.mean() + r["eta"].mean())) < 1e-10  # mass conserved
    with pytest.raises(ValueError):
        ia.make_execution(n, k, T, seed=3, counted=counted[:2])
