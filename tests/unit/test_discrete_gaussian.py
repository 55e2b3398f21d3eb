"""The exact discrete Gaussian sampler, its grid and the sensitivity the accountants charge for it
(netdp issue 13, defect 6). Reference values are computed here from the pmf's series, not taken
from the module."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from harness import IntegersOnly
from scipy import stats

from netdp_node.privacy import discrete_gaussian as dg


def pmf(m: int, width: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Support −width·m..width·m and P[Z = z] ∝ exp(−z²/(2m²)) (the rest has mass < e^(−800))."""
    z = np.arange(-width * m, width * m + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2.0 * m * m))
    return z, w / w.sum()


def chi_square_pvalue(samples: np.ndarray, z: np.ndarray, p: np.ndarray) -> float:
    """Pearson's test, cells with expected count < 5 pooled into the two tails."""
    n = samples.size
    counts = np.bincount(samples - z[0], minlength=z.size).astype(float)
    expected = n * p
    keep = expected >= 5
    lo, hi = np.flatnonzero(keep)[[0, -1]]
    obs = np.concatenate([[counts[:lo].sum()], counts[lo : hi + 1], [counts[hi + 1 :].sum()]])
    exp = np.concatenate([[expected[:lo].sum()], expected[lo : hi + 1], [expected[hi + 1 :].sum()]])
    nz = exp > 0
    stat = float(((obs[nz] - exp[nz]) ** 2 / exp[nz]).sum())
    return float(stats.chi2.sf(stat, nz.sum() - 1))


@pytest.mark.parametrize("m", [1, 2, 5, 12])
def test_discrete_gaussian_matches_the_exact_pmf(m: int) -> None:
    n = 60_000
    rng = IntegersOnly(1000 + m)
    x = dg.discrete_gaussian(rng, m, n)
    assert x.dtype == np.int64 and x.shape == (n,)
    z, p = pmf(m)
    assert chi_square_pvalue(x, z, p) > 1e-4
    # total variation against the pmf: E[TV] ≲ Σ √(p/n); a wide margin, fixed seed
    emp = np.bincount(x - z[0], minlength=z.size) / n
    assert 0.5 * np.abs(emp - p).sum() < 2.0 * np.sqrt(p / n).sum() + 1e-3
    # mean 0, variance Σ z² p(z) (< m²): within 5 standard errors
    var = float((z.astype(float) ** 2 * p).sum())
    fourth = float((z.astype(float) ** 4 * p).sum())
    assert abs(x.mean()) < 5.0 * math.sqrt(var / n)
    assert abs(x.var() - var) < 5.0 * math.sqrt((fourth - var * var) / n)
    assert var <= m * m


@pytest.mark.parametrize("m", [1, 4])
def test_one_at_a_time_path_matches_the_exact_pmf(m: int) -> None:
    """Draws of at most SCALAR_MAX values take the Python-integer path: same distribution."""
    rng = IntegersOnly(77 + m)
    x = np.concatenate([dg.discrete_gaussian(rng, m, dg.SCALAR_MAX) for _ in range(4000)])
    z, p = pmf(m)
    assert chi_square_pvalue(x, z, p) > 1e-4
    var = float((z.astype(float) ** 2 * p).sum())
    assert abs(x.var() - var) < 5.0 * math.sqrt(2.0 * var * var / x.size)


def test_variance_series_at_small_scale() -> None:
    """The variance is below m² (CKS: the discrete Gaussian's variance < σ²) and the sampler
    follows the series: the gap is visible only for m ≈ 1 (≈ 2·10⁻⁷ below 1)."""
    z, p = pmf(1, width=60)
    var = float((z.astype(float) ** 2 * p).sum())
    assert 1.0 - 1e-5 < var < 1.0
    x = dg.discrete_gaussian(np.random.default_rng(7), 1, 200_000)
    assert abs(x.var() - var) < 5.0 * math.sqrt(2.0 / 200_000)


def test_large_scale_moments() -> None:
    """At the job's scale (m ≈ 2^GRID_BITS) the pmf is the Gaussian's to double precision: mean 0,
    variance m²; kurtosis 3."""
    m = (1 << dg.GRID_BITS) - 12345
    n = 40_000
    x = dg.discrete_gaussian(np.random.default_rng(3), m, n).astype(float) / m
    assert abs(x.mean()) < 5.0 / math.sqrt(n)
    assert abs(x.var() - 1.0) < 5.0 * math.sqrt(2.0 / n)
    assert stats.kstest(x, "norm").pvalue > 1e-4


@pytest.mark.parametrize("num,den", [(0, 7), (3, 10), (10, 10), (17, 10), (5, 2), (123, 41)])
def test_bernoulli_exp_frequency(num: int, den: int) -> None:
    n = 40_000
    hits = dg.bernoulli_exp(IntegersOnly(num * 31 + den), np.full(n, num), den)
    p = math.exp(-num / den)
    assert abs(hits.mean() - p) < 5.0 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_discrete_laplace_matches_its_pmf() -> None:
    t, n = 3, 60_000
    x = dg.discrete_laplace(IntegersOnly(11), t, n)
    z = np.arange(-40 * t, 40 * t + 1)
    w = np.exp(-np.abs(z) / t)
    assert chi_square_pvalue(x, z, w / w.sum()) > 1e-4


@pytest.mark.parametrize("m", [1, 3, 7])
def test_pooled_draws_match_the_exact_pmf(m: int) -> None:
    """A `GaussianPool` hands out N_Z(0, m²) draws exactly as `discrete_gaussian` does: requests
    of mixed sizes and shapes (a walk's holder asks for d values per holding), chi-square against
    the pmf, moments within 5 standard errors, integers only."""
    rng = IntegersOnly(500 + m)
    pool = dg.GaussianPool(rng)
    sizes = [9, 1, (2, 3), 40, 9, 17, 200] * 120
    parts = [pool.draw(m, s).reshape(-1) for s in sizes]
    for s, part in zip(sizes, parts, strict=True):
        assert part.size == int(np.prod(s)) and part.dtype == np.int64
    x = np.concatenate(parts)
    z, p = pmf(m)
    assert chi_square_pvalue(x, z, p) > 1e-4
    var = float((z.astype(float) ** 2 * p).sum())
    fourth = float((z.astype(float) ** 4 * p).sum())
    assert abs(x.mean()) < 5.0 * math.sqrt(var / x.size)
    assert abs(x.var() - var) < 5.0 * math.sqrt((fourth - var * var) / x.size)


def test_pool_hands_out_its_batches_once_and_in_order() -> None:
    """The seeded sequence: a pool's values are the successive batches `discrete_gaussian` draws
    from the same generator (first the request's own size, then ×GROWTH up to MAX_BATCH), each
    value handed out once; a first request alone is exactly the unpooled draw, so a node that
    draws once gets what it got before pooling."""
    m = (1 << dg.GRID_BITS) - 99
    first = dg.GaussianPool(np.random.default_rng(21)).draw(m, 9)
    assert np.array_equal(first, dg.discrete_gaussian(np.random.default_rng(21), m, 9))
    requests = [9] * 40
    pool = dg.GaussianPool(np.random.default_rng(22))
    got = np.concatenate([pool.draw(m, r) for r in requests])
    ref, rng = [], np.random.default_rng(22)
    batch, drawn = 0, 0
    while drawn < got.size:
        batch = max(9, min(dg.GaussianPool.MAX_BATCH, batch * dg.GaussianPool.GROWTH))
        ref.append(dg.discrete_gaussian(rng, m, batch))
        drawn += batch
    assert np.array_equal(got, np.concatenate(ref)[: got.size])
    assert len(ref) < len(requests) // 4  # far fewer sampler calls than requests
    # two scales keep separate batches; the same seed gives the same values
    a, b = dg.GaussianPool(np.random.default_rng(5)), dg.GaussianPool(np.random.default_rng(5))
    for pool_ in (a, b):
        pool_.draw(m, 3)
    assert np.array_equal(a.draw(m - 1, (2, 2)), b.draw(m - 1, (2, 2)))
    with pytest.raises(ValueError, match="scale"):
        a.draw(0, 4)


def test_pooled_noise_on_the_grid() -> None:
    """`gaussian_on_grid(..., pool=)` releases γ·(round(x/γ) + Z) with Z from the pool."""
    sigma = 0.37
    grid = dg.grid_for(sigma)
    x = np.array([0.3, -1.25, 7.0])
    rng = IntegersOnly(8)
    out = dg.gaussian_on_grid(rng, x, sigma, grid, pool=dg.GaussianPool(rng))
    z = dg.discrete_gaussian(IntegersOnly(8), dg.grid_scale(sigma, grid), 3)
    assert np.array_equal(out, (dg.round_to_grid(x, grid) + z).astype(float) * grid)


def test_the_sampler_draws_no_floats() -> None:
    rng = IntegersOnly(5)
    out = dg.gaussian_on_grid(rng, np.array([0.3, -1.25, 7.0]), 0.5, dg.grid_for(0.5))
    assert rng.calls > 0 and out.shape == (3,)
    with pytest.raises(AssertionError, match="floats are refused"):
        rng.normal(0.0, 1.0)


@pytest.mark.parametrize("sigma", [1e-3, 0.37, 1.0, 3.0, 1234.5])
def test_outputs_lie_on_the_grid(sigma: float) -> None:
    grid = dg.grid_for(sigma)
    assert math.log2(grid) == int(math.log2(grid))  # a power of two
    m = sigma / grid
    assert 2 ** (dg.GRID_BITS - 1) < m <= 2**dg.GRID_BITS
    x = np.random.default_rng(0).uniform(-5, 5, size=64)
    out = dg.gaussian_on_grid(np.random.default_rng(1), x, sigma, grid)
    k = out / grid
    assert np.array_equal(k, np.round(k))  # exact multiples of γ
    assert np.all(np.abs(out - x) < 12 * sigma)
    exact = Fraction(sigma) / Fraction(grid)
    assert dg.grid_scale(sigma, grid) == math.ceil(exact)  # drawn std ≥ σ


def test_noise_that_must_cancel_cancels_exactly() -> None:
    """IncA's Δ terms: z_t carries U_t·Δ; over t the rows of U sum to 0, and on the grid (γ a
    power of two) the float sums are exact, so the noise cancels to the last bit."""
    from netdp_node.privacy.inca_audit import noise_scheme

    T, d, sd = 12, 5, 0.731
    for scheme in ("inc", "early"):
        _, U = noise_scheme(scheme, T)
        D = dg.noise_on_grid(np.random.default_rng(9), sd, dg.grid_for(sd), (T, d))
        acc = np.zeros(d)
        for t in range(T + 1):
            acc = acc + U[t] @ D
        assert np.all(acc == 0.0)


def test_tau_series() -> None:
    # direct sum of the definition at a small scale where it is not negligible
    m, n = 0.6, 9
    direct = 10 * sum(math.exp(-2 * math.pi**2 * m * m * k / (k + 1)) for k in range(1, n))
    assert dg.tau(m, n) == pytest.approx(direct, rel=1e-12)
    assert dg.tau(m, 1) == 0.0
    assert dg.tau(m, 10**6) >= dg.tau(m, 1000) >= dg.tau(m, n)  # grows with the summands
    # at the job's scale it is zero in double precision, for any number of summands
    assert dg.tau(2.0 ** (dg.GRID_BITS - 1), dg.MAX_SUMMANDS) == 0.0


def test_accounted_sensitivity_is_the_documented_correction() -> None:
    for sens, sigma, d in [(2.0, 10.0, 1), (0.2, 3.3, 100), (1.0, 1e-2, 4096)]:
        grid = 2.0 ** (math.ceil(math.log2(sigma)) - dg.GRID_BITS)
        assert dg.accounted_sensitivity(sens, sigma, d) == pytest.approx(
            sens + grid * math.sqrt(d), rel=1e-15
        )
        assert dg.accounted_sensitivity(sens, sigma, d) > sens
    assert dg.accounted_sensitivity(2.0, 0.0, 3) == 2.0  # no noise, no grid
    # where τ is not negligible (a tiny scale: only through the helper's formula), it enters as
    # the Kairouz–Liu–Steinke term folded into the sensitivity
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dg, "GRID_BITS", 0)
        sigma, sens, d, n = 0.9, 1.0, 3, 5
        grid = dg.grid_for(sigma)
        t = dg.tau(sigma / grid, n)
        assert t > 0
        want = math.sqrt((sens + grid * math.sqrt(d)) ** 2 + 2 * n * sigma**2 * t * d)
        assert dg.accounted_sensitivity(sens, sigma, d, summands=n) == pytest.approx(want)


def test_calibration_on_the_grid_meets_the_target() -> None:
    from netdp_node.privacy.composition import gaussian_sigma

    for eps, sens, d in [(0.5, 2.0, 1), (0.9, 0.1, 1000)]:
        s = dg.calibrate_on_grid(lambda x, e=eps: gaussian_sigma(e, 1e-6, x), sens, d)
        charged = dg.accounted_sensitivity(sens, s, d)
        assert gaussian_sigma(eps, 1e-6, charged) <= s  # the target holds for Δ'
        grid = 2.0 ** (math.ceil(math.log2(s)) - dg.GRID_BITS)
        assert s == pytest.approx(gaussian_sigma(eps, 1e-6, sens + grid * math.sqrt(d)), rel=1e-12)
        assert s / gaussian_sigma(eps, 1e-6, sens) - 1.0 < 1e-4  # the correction is small
    with pytest.raises(ValueError, match="grid"):
        dg.calibrate_on_grid(lambda x: x * 2.0**40, 1.0, 1)


def test_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        dg.discrete_gaussian(rng, 0, 3)
    with pytest.raises(ValueError):
        dg.discrete_gaussian(rng, dg.MAX_SCALE + 1, 3)
    with pytest.raises(ValueError):
        dg.grid_for(0.0)
    with pytest.raises(ValueError):
        dg.grid_scale(2.0**40, 1.0)
    with pytest.raises(ValueError):
        dg.gaussian_on_grid(rng, 1.0, 1.0, None)


# -- the accountants charge the correction, and only it -------------------------------------------
def _charged(sens: float, sigma: float, dim: int) -> float:
    """Δ + γ√d with γ = 2^(⌈log₂ σ⌉ − GRID_BITS), computed here from the documented rule."""
    return sens + 2.0 ** (math.ceil(math.log2(sigma)) - dg.GRID_BITS) * math.sqrt(dim)


def _entries(k: int) -> list[Any]:
    from netdp_node.ledger import Entry

    return [Entry(job_id="j", direction="local", event="contribute", params={}) for _ in range(k)]


def test_gaussian_accountants_charge_the_grid_correction() -> None:
    """The local-DP baseline of a ring sum (k Gaussian contributions in RDP) is dp-accounting's
    RDP accountant at noise multiplier σ/(Δ + γ√d); the ring's Theorem 1 loss is privacy.ring's at
    that sensitivity; both exceed the nominal-Δ values by a relative O(γ√d/Δ) only."""
    from dp_accounting import dp_event, rdp

    from netdp_node.algorithms import get_algorithm
    from netdp_node.privacy.composition import DEFAULT_ORDERS
    from netdp_node.privacy.ring import ring_sum_loss

    n, k, dim = 6, 7, 4
    p = prepare_params_ring({"rounds": k, "dim": dim, "clip": 0.5, "epsilon": 0.4}, n)
    spec = {"algorithm": "ring-sum", "participants": [f"p{i}" for i in range(n)], "params": p}
    charged = _charged(p["sensitivity"], p["sigma"], dim)
    base = get_algorithm("ring-sum").accountant.baselines(spec, _entries(k), "p0")["local-dp"]
    acc = rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(p["sigma"] / charged), k)
    assert base.epsilon == pytest.approx(acc.get_epsilon(p["delta"]), rel=1e-9)
    nominal = rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    nominal.compose(dp_event.GaussianDpEvent(p["sigma"] / p["sensitivity"]), k)
    gap = base.epsilon / nominal.get_epsilon(p["delta"]) - 1.0
    assert 0.0 < gap < 1e-5

    loss = get_algorithm("ring-sum").accountant.losses(spec, _entries(k), "p0")["p1"]
    kw = {"sigma": p["sigma"], "windows": k, "delta": p["delta"], "delta_prime": p["delta_prime"]}
    assert loss.epsilon == pytest.approx(
        ring_sum_loss(sensitivity=charged, **kw).epsilon, rel=1e-12
    )
    assert loss.epsilon > ring_sum_loss(sensitivity=p["sensitivity"], **kw).epsilon
    # the calibration meets the job's per-window ε for the charged sensitivity: one window is
    # ρ-zCDP (CKS Thm 4) with ρ = Δ'²/(2σ²), converted by CKS Prop. 12 (computed independently)
    from cks_reference import cks_epsilon

    assert cks_epsilon(p["sigma"] / charged, p["delta"]) <= p["epsilon"] * (1 + 1e-9)


def test_rw_sgd_noise_multiplier_is_charged() -> None:
    from netdp_node.algorithms import get_algorithm

    p = get_algorithm("rw-sgd").prepare({"T": 40, "dim": 5, "epsilon": 4.0}, 4)
    charged = _charged(p["sensitivity"], p["sigma"], 5)
    assert p["noise_multiplier"] == pytest.approx(p["sigma"] / charged, rel=1e-15)
    from netdp_node.privacy.rw_sgd import ldp_noise_multiplier

    assert p["noise_multiplier"] >= ldp_noise_multiplier(p["cap"], p["epsilon"], p["delta"])


def prepare_params_ring(params: dict[str, Any], n: int) -> dict[str, Any]:
    from netdp_node.algorithms import get_algorithm

    return get_algorithm("ring-sum").prepare(params, n)


# -- the (ε, δ) of one release, proven for the discrete noise (CKS Thm 4 + Prop. 12) -------------
def test_release_epsilon_is_the_cks_conversion_of_its_zcdp() -> None:
    """discrete_gaussian_epsilon is CKS Prop. 12 applied to ρ = 1/(2z²) (scipy's continuous
    optimum of α, `cks_reference`), never below it, within 1e-4; and dp-accounting's RDP
    accountant for one GaussianDpEvent (valid for the discrete Gaussian by CKS Thm 4) agrees on
    the same range of orders, and is never below ours on its default (coarser) orders."""
    from cks_reference import cks_epsilon
    from dp_accounting import dp_event, rdp

    from netdp_node.privacy.inca_audit import gaussian_epsilon

    for z in (0.4, 1.0, 3.0, 8.7, 40.0, 500.0):
        for delta in (1e-3, 1e-5, 1e-6, 1e-10):
            ours = dg.discrete_gaussian_epsilon(z, delta)
            ref = cks_epsilon(z, delta)
            assert ref * (1 - 1e-9) <= ours <= ref * (1 + 1e-4) + 1e-12, (z, delta)
            # dp-accounting on orders reaching as far as the optimum (its default stops at 256)
            acc = rdp.RdpAccountant(orders=list(1.0 + np.geomspace(1e-3, 1e6, 3000)))
            acc.compose(dp_event.GaussianDpEvent(z))
            assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-3), (z, delta)
            # the exact profile of the continuous Gaussian (Balle & Wang): a little below ours
            # (5-13% for the usual δ ≤ 1e-5 and 1 ≤ z ≤ 100, the docstring's claim)
            cont = gaussian_epsilon(1.0 / z, delta)
            assert cont <= ours
            if delta <= 1e-5 and 1.0 <= z <= 100.0:
                assert ours <= 1.14 * cont, (z, delta)
            default = rdp.RdpAccountant()
            default.compose(dp_event.GaussianDpEvent(z))
            assert ours <= default.get_epsilon(delta) * (1 + 1e-5)


def test_claimed_delta_covers_the_exact_discrete_profile() -> None:
    """For small discrete Gaussians (σ = 3..20 grid steps, integer shifts Δ = 1..3), the exact
    δ(ε) of CKS Theorem 7 (pmf summed in `cks_reference`) at the ε claimed for δ is at most δ."""
    from cks_reference import exact_discrete_delta

    for sigma in (3, 5, 8, 13, 20):
        for shift in (1, 2, 3):
            for delta in (1e-2, 1e-4, 1e-6, 1e-9):
                eps = dg.discrete_gaussian_epsilon(sigma / shift, delta)
                exact = exact_discrete_delta(sigma, shift, eps)
                assert exact <= delta, (sigma, shift, delta, eps, exact)
                # and the claim is not vacuous: at half that ε the exact δ is above δ
                assert exact_discrete_delta(sigma, shift, 0.5 * eps) > delta


def test_inverse_is_exact_and_monotone() -> None:
    for eps in (0.05, 0.3, 0.5, 1.0, 2.5, 8.0):
        for delta in (1e-5, 1e-6, 1e-9):
            z = dg.discrete_gaussian_multiplier(eps, delta)
            assert dg.discrete_gaussian_epsilon(z, delta) <= eps
            assert dg.discrete_gaussian_epsilon(z * (1 - 1e-6), delta) > eps
            assert dg.discrete_gaussian_sigma(eps, delta, 2.5) == pytest.approx(2.5 * z)
    zs = np.geomspace(0.3, 300, 400)
    es = [dg.discrete_gaussian_epsilon(float(z), 1e-6) for z in zs]
    assert all(a >= b for a, b in itertools.pairwise(es))
    with pytest.raises(ValueError):
        dg.discrete_gaussian_epsilon(1.0, 0.0)
    with pytest.raises(ValueError):
        dg.discrete_gaussian_sigma(0.0, 1e-6, 1.0)


def test_calibration_on_the_grid_with_the_discrete_route() -> None:
    """calibrate_on_grid with discrete_gaussian_sigma meets the target for Δ' (independent CKS
    computation), for targets above 1 too (the classic formula has no valid σ there)."""
    from cks_reference import cks_epsilon

    for eps, sens, d in [(0.5, 2.0, 1), (0.9, 0.1, 1000), (3.0, 1.0, 7)]:
        s = dg.calibrate_on_grid(lambda x, e=eps: dg.discrete_gaussian_sigma(e, 1e-6, x), sens, d)
        charged = dg.accounted_sensitivity(sens, s, d)
        assert charged == pytest.approx(_charged(sens, s, d), rel=1e-15)
        assert cks_epsilon(s / charged, 1e-6) <= eps * (1 + 1e-9)
        assert cks_epsilon(s / charged, 1e-6) == pytest.approx(eps, rel=1e-3)


def _cks_multiplier(eps: float, delta: float) -> float:
    """The smallest z with cks_epsilon(z, δ) ≤ ε, by bisection on the independent reference."""
    from cks_reference import cks_epsilon

    lo, hi = 1e-3, 1e4
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if cks_epsilon(mid, delta) <= eps else (mid, hi)
    return hi


def test_ring_and_walk_sum_use_the_discrete_route() -> None:
    """The ring's σ makes one window's release (ε, δ)-DP for Δ' by the CKS route and no more
    (σ = z(ε, δ)·Δ', z from an independent bisection): not the classic Δ√(2 ln(1.25/δ))/ε, which
    is not proven for discrete noise (and 22% larger here). A per-window ε ≥ 1, for which the
    classic formula has no valid σ, is calibrated too. walk-sum's per-contribution ε0 is the CKS
    ε of its σ on Δ'."""
    from cks_reference import cks_epsilon

    from netdp_node.privacy import walk_accountant as W
    from netdp_node.privacy.ring import ring_sum_loss

    for eps in (0.5, 2.0):
        p = prepare_params_ring({"rounds": 4, "dim": 3, "clip": 0.5, "epsilon": eps}, 5)
        charged = _charged(p["sensitivity"], p["sigma"], 3)
        want = _cks_multiplier(eps, p["delta"]) * charged
        assert want * (1 - 1e-9) <= p["sigma"] <= want * (1 + 1e-4)
        one = ring_sum_loss(
            sigma=p["sigma"],
            sensitivity=charged,
            windows=1,
            delta=p["delta"],
            delta_prime=p["delta_prime"],
        )
        assert one.epsilon <= eps * (1 + 1e-9)  # one window: at most the per-window target
    spec = {
        "algorithm": "walk-sum",
        "participants": [f"p{i}" for i in range(40)],
        "params": {
            "T": 400,
            "epsilon": 1.0,
            "delta": 1e-6,
            "delta_prime": 1e-6,
            "delta_hat": 1e-6,
            "cap": 0,
            "regime": "edge-cap",
            "edge_cap": 2,
            "colluders": 1,
            "stop": "counter",
            "clip": 1.0,
            "dim": 2,
        },
    }
    from netdp_node.algorithms import get_algorithm

    p = get_algorithm("walk-sum").prepare(spec["params"], 40)
    charged = _charged(p["sensitivity"], p["sigma"], 2)
    ref = cks_epsilon(p["sigma"] / charged, p["delta"])
    assert W.sum_eps0(p) == pytest.approx(ref, rel=1e-4)
    assert ref <= p["epsilon0"] * (1 + 1e-9)
