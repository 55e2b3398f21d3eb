"""Tests of netdp_node.privacy.token_walk, amplification and the ring histogram of ring (Cyffers &
Bellet, AISTATS 2022, Theorems 2–4, 6, Lemmas 1–2, Proposition 1) against worked numbers, plus
independent derivations: brute-force maxima and minima, binomial tails summed by hand,
dp-accounting's RDP and PLD accountants.

Worked values are compared at the precision they are printed with (`_printed`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from netdp_node.privacy.amplification import (
    chernoff_count_bound,
    count_bound,
    erlingsson_shuffle_epsilon,
    fmt_shuffle_condition,
    fmt_shuffle_epsilon,
    fmt_shuffle_epsilon_simplified,
    subsampled_epsilon,
)
from netdp_node.privacy.composition import (
    advanced_composition,
    gaussian_rdp,
    gaussian_sigma,
    rdp_to_dp,
)
from netdp_node.privacy.ring import (
    ring_histogram_gamma_as_printed,
    ring_histogram_local_epsilon,
    ring_histogram_local_epsilon_fmt,
    ring_histogram_loss,
    rr_gamma,
)
from netdp_node.privacy.token_walk import (
    bassily_central_sigma,
    calibrate_local_sgd_sigma,
    calibrate_sgd_sigma,
    calibrate_sum_sigma,
    histogram_cycle_epsilon,
    ldp_baseline,
    ldp_walk_sum,
    max_cycle_epsilon,
    sgd_alpha_max,
    spotted_loss,
    spotted_loss_capped,
    walk_histogram_loss,
    walk_histogram_loss_as_printed,
    walk_sgd_loss,
    walk_sgd_loss_closed,
    walk_sgd_loss_numeric,
    walk_sgd_rdp,
    walk_sgd_utility_bound,
    walk_sum_loss,
    walk_sum_loss_as_printed,
)

D7 = 1e-7
D6 = 1e-6


def _printed(value: float, printed: str) -> None:
    """Assert `value` rounds to the reference value's printed string (e.g. "5.042602")."""
    mant, _, exp = printed.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    scale = 10.0 ** int(exp) if exp else 1.0
    tol = 0.5 * 10.0**-decimals * scale
    assert abs(value - float(printed)) <= tol * (1 + 1e-9) + 1e-15, (value, printed)


def _binom_upper_tail(T: int, p: float, N: int) -> float:
    """P(Bin(T, p) > N), summed by hand in log space (independent of scipy)."""
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for k in range(N + 1, T + 1):
        term = math.exp(
            math.lgamma(T + 1) - math.lgamma(k + 1) - math.lgamma(T - k + 1) + k * lp + (T - k) * lq
        )
        total += term
        if k > T * p and term < 1e-30 * max(total, 1e-300):
            break
    return total


def test_printed_helper_is_strict() -> None:
    _printed(5.0426024, "5.042602")
    _printed(2.71537e-5, "2.7154e-5")
    with pytest.raises(AssertionError):
        _printed(5.0426026, "5.042602")
    with pytest.raises(AssertionError):
        _printed(2.7156e-5, "2.7154e-5")


# --------------------------------------------------------------------------- B3 count bounds


@pytest.mark.parametrize(
    ("T", "p", "dh", "exact", "chernoff"),
    [
        (20000, 1 / 2000, D6, 28, "30.36"),
        (100000, 1e-3, D7, 156, "169.54"),
        (12, 0.001, D6, 2, "0.717"),
    ],
)
def test_b3_count_checks(T: int, p: float, dh: float, exact: int, chernoff: str) -> None:
    assert count_bound(T, p, dh) == exact
    _printed(count_bound(T, p, dh, exact=False), chernoff)
    _printed(chernoff_count_bound(T, p, dh), chernoff)
    # the quantile is minimal: P(X > N) <= δ̂ < P(X > N − 1), by an independent tail sum
    assert _binom_upper_tail(T, p, exact) <= dh < _binom_upper_tail(T, p, exact - 1)


def test_b3_chernoff_is_wrong_at_tiny_means() -> None:
    # spec B3: Bin(12, 0.001), Chernoff 0.717 but P(X >= 2) = 6.6e-5 > δ̃ = 1e-6
    tail = _binom_upper_tail(12, 0.001, 1)
    _printed(tail, "6.6e-5")
    assert tail > D6 and chernoff_count_bound(12, 0.001, D6) < 1


def test_b3_strict_rejects_invalid_chernoff() -> None:
    # a = sqrt(3 ln(1/δ̂)/(Tp)) = 2.04 > 1 for the SGD setting (T/n = 10)
    with pytest.raises(ValueError, match="Chernoff"):
        count_bound(20000, 1 / 2000, D6, exact=False, strict=True)
    # T = 100n and δ̂ = 1e-7 is in range (T/n = 100 >= 3 ln(1e7) = 48.4)
    assert count_bound(100000, 1e-3, D7, exact=False, strict=True) == pytest.approx(169.537247)
    with pytest.raises(ValueError):
        count_bound(100, 1.5, D6)
    with pytest.raises(ValueError):
        count_bound(100, 0.1, 0.0)


# --------------------------------------------------------------------------- B4–B6


def test_b4_subsampling_formula_and_vectorisation() -> None:
    direct = math.log(1 + (1 - (1 - 1 / 1000) ** 1000) * (math.exp(0.5 / math.sqrt(1000)) - 1))
    assert subsampled_epsilon(0.5 / math.sqrt(1000), 1000, 1000) == pytest.approx(direct, rel=1e-14)
    m = np.arange(1, 50)
    vec = subsampled_epsilon(0.3, 20, m)
    assert np.allclose(vec, [subsampled_epsilon(0.3, 20, int(k)) for k in m], rtol=1e-14)
    assert np.all(np.diff(vec) > 0) and np.all(vec < 0.3)


def test_b5_erlingsson() -> None:
    # histogram numerics (Fig. 3), reference value: ε0 = 0.1, m = 5000, δ = 1e-7 → 0.068132
    _printed(erlingsson_shuffle_epsilon(0.1, 5000, D7), "0.068132")
    with pytest.raises(ValueError, match="1/2"):
        erlingsson_shuffle_epsilon(0.5, 5000, D7)
    with pytest.raises(ValueError, match="1000"):
        erlingsson_shuffle_epsilon(0.1, 999, D7)
    with pytest.raises(ValueError, match="1/100"):
        erlingsson_shuffle_epsilon(0.1, 5000, 0.01)


@pytest.mark.parametrize(
    ("eps0", "n", "delta", "full", "simplified"),
    [(1.0, 10_000, D6, "0.214026", "0.545853"), (0.5, 1000, D7, "0.289746", "0.926129")],
)
def test_b6_fmt_vectors(eps0: float, n: int, delta: float, full: str, simplified: str) -> None:
    _printed(fmt_shuffle_epsilon(eps0, n, delta), full)
    _printed(fmt_shuffle_epsilon_simplified(eps0, n, delta), simplified)
    assert fmt_shuffle_epsilon(eps0, n, delta) <= fmt_shuffle_epsilon_simplified(eps0, n, delta)


def test_b6_condition() -> None:
    cap = fmt_shuffle_condition(1000, D7)
    assert cap == pytest.approx(math.log(1000 / (16 * math.log(2 / D7))))
    fmt_shuffle_epsilon(cap, 1000, D7)
    with pytest.raises(ValueError, match="16 ln"):
        fmt_shuffle_epsilon(cap + 1e-6, 1000, D7)
    assert math.isfinite(fmt_shuffle_epsilon(cap + 1.0, 1000, D7, check=False))


# --------------------------------------------------------------------------- Theorem 2


def test_theorem2_worked_example() -> None:
    # Theorem 2: n = 10 000, L = 10, ε = 0.2, δ = δ' = 1e-6, K = 5 (paper's "n answers")
    eps0_p, gamma_p = ring_histogram_gamma_as_printed(10_000, 10, 0.2, D6)
    _printed(eps0_p, "0.089206")
    _printed(gamma_p, "0.990756")
    r = ring_histogram_loss(10_000, 10, 0.2, D6, 5, D6, reports="n")
    _printed(r.epsilon0, "0.448400")
    _printed(r.gamma, "0.946449")
    _printed(r.epsilon, "2.572191")
    assert r.delta == pytest.approx(6e-6, rel=1e-12)
    assert round(r.expected_random_responses) == 56_787
    assert r.initial_elements == math.ceil(r.gamma * 10_000)
    assert ring_histogram_local_epsilon(10_000, 0.2, D6) == r.epsilon0
    assert r.to_loss().epsilon == r.epsilon


def test_theorem2_rr_gamma_is_eps0_ldp() -> None:
    # RR_γ: P(y = x)/P(y = l ≠ x) = (1 − γ + γ/L)/(γ/L) must be e^{ε0}
    for L, e0 in [(10, 0.4484), (2, 1.0), (1000, 0.1)]:
        g = rr_gamma(L, e0)
        assert (1 - g + g / L) / (g / L) == pytest.approx(math.exp(e0), rel=1e-12)


def test_theorem2_default_uses_n_minus_1_reports() -> None:
    r = ring_histogram_loss(10_000, 10, 0.2, D6, 5, D6)
    assert r.reports == 9_999
    assert r.epsilon0 == pytest.approx((0.2 / 12) * math.sqrt(9_999 / math.log(1e6)), rel=1e-14)
    assert r.epsilon0 < ring_histogram_loss(10_000, 10, 0.2, D6, 5, D6, reports="n").epsilon0


def test_theorem2_validity_conditions() -> None:
    # Theorem 2: with ε = 0.4 the corrected ε0 = 0.897 violates Erlingsson's ε0 < 1/2
    with pytest.raises(ValueError, match=r"0\.89"):
        ring_histogram_loss(10_000, 10, 0.4, D6, 5, D6, reports="n")
    with pytest.raises(ValueError, match="n >= 1000"):
        ring_histogram_local_epsilon(999, 0.01, D6)
    with pytest.raises(ValueError, match="1/100"):
        ring_histogram_local_epsilon(10_000, 0.01, 0.05)


def test_theorem2_fmt_alternative() -> None:
    # Remark 2 numerically: solve ε_shuff(ε0, n − 1, δ) = ε (B6) by bisection
    for eps in (0.2, 0.4):
        e0 = ring_histogram_local_epsilon_fmt(9_999, eps, D6)
        assert fmt_shuffle_epsilon(e0, 9_999, D6) == pytest.approx(eps, rel=1e-9)
        r = ring_histogram_loss(10_000, 10, eps, D6, 5, D6, method="fmt")
        assert r.epsilon0 == e0 and r.method == "theorem2-fmt"
    # here FMT allows a larger local level than Erlingsson (0.4484 at ε = 0.2)
    assert ring_histogram_local_epsilon_fmt(9_999, 0.2, D6) > 0.9
    # when even the largest ε0 allowed by B6's condition suffices, that ε0 is returned
    cap = fmt_shuffle_condition(2000, D6)
    assert ring_histogram_local_epsilon_fmt(2000, 5.0, D6) == cap


# --------------------------------------------------------------------------- Theorem 3


THM3_ROWS = [
    # n, T, ε, δ(all), N_v, k, ε_cycle, corrected, as printed, δ_f
    (
        1000,
        100_000,
        0.5,
        D7,
        "169.537247",
        "269.537247",
        "0.047434",
        "5.042602",
        "4.820289",
        "2.7154e-5",
    ),
    (
        10_000,
        1_000_000,
        0.1,
        D7,
        "169.537247",
        "269.537247",
        "0.003",
        "0.282072",
        "0.284575",
        "2.7154e-5",
    ),
    (
        100,
        10_000,
        0.5,
        D6,
        "164.378981",
        "264.378981",
        "0.15",
        "19.238283",
        "14.136139",
        "2.6638e-4",
    ),
]


@pytest.mark.parametrize(
    ("n", "T", "eps", "d", "nv", "k", "ec", "corr", "printed", "df"), THM3_ROWS
)
def test_theorem3_table(
    n: int, T: int, eps: float, d: float, nv: str, k: str, ec: str, corr: str, printed: str, df: str
) -> None:
    b = walk_sum_loss(n, T, eps, d, d, d)
    _printed(b.n_visits, nv)
    _printed(b.k, k)
    _printed(b.epsilon_cycle, ec)
    _printed(b.epsilon, corr)
    _printed(b.delta, df)
    pe, pd = walk_sum_loss_as_printed(n, T, eps, d, d, d)
    _printed(pe, printed)
    assert pd == pytest.approx(b.delta, rel=1e-12)
    # E7: the printed and corrected first terms agree; only the second term differs
    first = math.sqrt(2 * b.k * math.log(1 / d)) * b.epsilon_cycle
    second_corr = b.k * b.epsilon_cycle * math.expm1(b.epsilon_cycle)
    second_printed = math.sqrt(b.k) * eps * math.expm1(b.epsilon_cycle)
    assert b.epsilon == pytest.approx(first + second_corr, rel=1e-12)
    assert pe == pytest.approx(first + second_printed, rel=1e-12)


def test_theorem3_tight_cycle_and_exact_counts() -> None:
    # Theorem 3, App. D, reference: ε_c* = 0.010026634 at m = 1000 → 0.961857; exact N_v = 156 (k =
    # 256) → 0.936716
    b = walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, cycle="tight")
    _printed(b.epsilon_cycle, "0.010026634")
    assert b.m_star == 1000
    _printed(b.epsilon, "0.961857")
    e = walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, cycle="tight", counts="exact")
    assert e.n_visits == 156 and e.k == 256
    _printed(e.epsilon, "0.936716")
    _printed(e.delta, "2.58e-5")
    # k integer: the composition is exactly composition.advanced_composition
    assert e.epsilon == advanced_composition(e.epsilon_cycle, D7, 256, D7)[0]


def test_max_cycle_epsilon_brute_force() -> None:
    # independent loop over m; ≈ (1 − 1/e)ε/√n; never above the closed form 3ε/√n
    n, eps = 1000, 0.5
    best = max(
        (math.log(1 + (1 - (1 - 1 / n) ** m) * (math.exp(eps / math.sqrt(m)) - 1)), m)
        for m in range(1, n + 1)
    )
    val, m_star = max_cycle_epsilon(eps, n)
    assert val == pytest.approx(best[0], rel=1e-12) and m_star == best[1]
    assert val == pytest.approx((1 - math.exp(-1)) * eps / math.sqrt(n), rel=0.01)
    for nn in (10, 100, 5000):
        for e in (0.05, 0.5, 0.99):
            assert max_cycle_epsilon(e, nn)[0] <= 3 * e / math.sqrt(nn)


def test_theorem3_cycle_gaussian_premise_with_dp_accounting() -> None:
    # A cycle aggregates m Gaussian contributions (std σ_loc each): std √m·σ_loc, i.e. the classic
    # calibration at ε/√m; its exact ε at δ (PLD) must be below ε/√m.
    eps, d = 0.5, D7
    sigma = gaussian_sigma(eps, d, 1.0)
    for m in (1, 4, 100, 1000):
        assert gaussian_sigma(eps / math.sqrt(m), d, 1.0) == pytest.approx(math.sqrt(m) * sigma)
        acc = PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_event.GaussianDpEvent(math.sqrt(m) * sigma))
        assert acc.get_epsilon(d) <= eps / math.sqrt(m)


def test_theorem3_floor_rounding_is_tighter_and_integer() -> None:
    real = walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7)
    floor = walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, k_rounding="floor")
    assert floor.k == 169 + 100
    assert floor.epsilon == advanced_composition(3 * 0.5 / math.sqrt(1000), D7, 269, D7)[0]
    assert floor.epsilon < real.epsilon < advanced_composition(real.epsilon_cycle, D7, 270, D7)[0]


def test_theorem3_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="epsilon < 1"):
        walk_sum_loss(1000, 100_000, 1.0, D7, D7, D7)
    with pytest.raises(ValueError, match="colluders"):
        walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, colluders=1000)
    with pytest.raises(ValueError):
        walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, cycle="loose")  # type: ignore[arg-type]


def test_ldp_analogue() -> None:
    # Theorem 3, App. D: n = 1000, T = 1e5, ε = 0.5: adv 91.954823; min(adv, naive) 84.768623
    eps, dlt = ldp_walk_sum(1000, 100_000, 0.5, D7, D7, D7)
    _printed(eps, "91.954823")
    assert dlt == pytest.approx(169.537247 * D7 + 2 * D7, rel=1e-6)
    _printed(ldp_walk_sum(1000, 100_000, 0.5, D7, D7, D7, naive_min=True)[0], "84.768623")
    assert ldp_baseline(10, 0.5, D7, D7) == advanced_composition(0.5, D7, 10, D7)


def test_collusion_example_and_n_over_c() -> None:
    # Theorem 3, App. D: c = 10 (n_eff = 100): N_v = 1219.896, k = 2219.896, ε_cycle = 0.15, ε =
    # 94.0146
    b = walk_sum_loss(1000, 100_000, 0.5, D7, D7, D7, colluders=10)
    _printed(b.n_visits, "1219.896")
    _printed(b.k, "2219.896")
    _printed(b.epsilon_cycle, "0.15")
    _printed(b.epsilon, "94.0146")
    # §4.3: every complete-graph formula with c colluders is the c = 1 formula at n/c
    for cyc in ("closed", "tight"):
        for counts in ("chernoff", "exact"):
            a = walk_sum_loss(
                1000, 100_000, 0.5, D7, D7, D7, cycle=cyc, counts=counts, colluders=10
            )
            r = walk_sum_loss(100, 100_000, 0.5, D7, D7, D7, cycle=cyc, counts=counts)
            assert (a.epsilon, a.delta, a.k) == pytest.approx((r.epsilon, r.delta, r.k), rel=1e-12)
    a6 = walk_histogram_loss(20_000, 1_000_000, 0.5, D7, D7, D7, colluders=2)
    r6 = walk_histogram_loss(10_000, 1_000_000, 0.5, D7, D7, D7)
    assert a6.epsilon == pytest.approx(r6.epsilon, rel=1e-12)
    assert walk_sgd_loss_numeric(2000, 12, 5.0, D6, colluders=4).epsilon == pytest.approx(
        walk_sgd_loss_numeric(500, 12, 5.0, D6).epsilon, rel=1e-12
    )
    assert walk_sgd_rdp(2000, 12, 10, 5, colluders=4) == pytest.approx(walk_sgd_rdp(500, 12, 10, 5))
    assert (
        spotted_loss(12, 2000, 0.5, D6, D6, colluders=4).n_spotted
        == spotted_loss(12, 500, 0.5, D6, D6).n_spotted
    )


# --------------------------------------------------------------------------- Theorem 6


def test_theorem6_large_n_example() -> None:
    # Theorem 6: n = 1e6, T = 1e8, ε = 0.5 (n >= 3430.86): ε_c = 0.043930, k = 269.537, 4.626671
    assert 14**2 * math.log(4 / D7) == pytest.approx(3430.86, abs=0.005)
    b = walk_histogram_loss(10**6, 10**8, 0.5, D7, D7, D7, cycle="closed")
    _printed(b.epsilon_cycle, "0.043930")
    _printed(b.k, "269.537")
    _printed(b.epsilon, "4.626671")
    _printed(ldp_walk_sum(10**6, 10**8, 0.5, D7, D7, D7)[0], "91.95")


def test_theorem6_closed_and_numeric_at_n_1e4() -> None:
    closed = walk_histogram_loss(10_000, 1_000_000, 0.5, D7, D7, D7, cycle="closed")
    _printed(closed.epsilon_cycle, "0.439302")
    _printed(closed.epsilon, "106.27")
    num = walk_histogram_loss(10_000, 1_000_000, 0.5, D7, D7, D7, cycle="numeric")
    _printed(num.epsilon_cycle, "0.0646096")
    assert num.m_star == 10_000
    _printed(num.epsilon, "7.184820")
    # the printed form has the same first term (E7 applies to Thm 6 as well)
    pe, _ = walk_histogram_loss_as_printed(10_000, 1_000_000, 0.5, D7, D7, D7)
    first = math.sqrt(2 * closed.k * math.log(1 / D7)) * closed.epsilon_cycle
    assert pe == pytest.approx(
        first + math.sqrt(closed.k) * 0.5 * math.expm1(closed.epsilon_cycle), rel=1e-12
    )


def test_theorem6_cycle_epsilon_brute_force() -> None:
    n, eps, d = 3000, 0.7, 1e-5
    best = 0.0
    for m in range(1, n + 1):
        ea = eps
        if eps <= math.log(m / (16 * math.log(2 / d))):
            ea = min(eps, fmt_shuffle_epsilon(eps, m, d))
        best = max(best, float(subsampled_epsilon(ea, n, m)))
    assert histogram_cycle_epsilon(eps, n, d)[0] == pytest.approx(best, rel=1e-12)


def test_theorem6_constant_21_is_a_valid_bound() -> None:
    # Erratum E8 says the paper's own inequalities give 42; the closed form with 21 still bounds
    # the exact per-cycle expression (B4 ∘ Eq. 11) whenever its conditions hold.
    for d in (1e-3, 1e-7):
        lnv = math.log(4 / d)
        nmin = math.ceil(196 * lnv)
        for n in (nmin, 3 * nmin, 20_000):
            m = np.arange(1, n + 1, dtype=float)
            for eps in (0.01, 0.5, 1.0):
                ea = np.minimum(eps, 14 * np.sqrt(lnv / m) * eps)
                exact = float(np.max(subsampled_epsilon(ea, n, m)))
                assert exact <= 21 * math.sqrt(lnv / n) * eps
                assert exact <= 15.3 * math.sqrt(lnv / n) * eps


def test_theorem6_conditions() -> None:
    with pytest.raises(ValueError, match="14"):
        walk_histogram_loss(3000, 300_000, 0.5, D7, D7, D7, cycle="closed")
    with pytest.raises(ValueError, match="epsilon <= 1"):
        walk_histogram_loss(10_000, 1_000_000, 1.5, D7, D7, D7, cycle="closed")
    # the numeric procedure has neither restriction
    assert walk_histogram_loss(3000, 300_000, 1.5, D7, D7, D7).epsilon > 0
    c42 = walk_histogram_loss(10_000, 1_000_000, 0.5, D7, D7, D7, cycle="closed", constant=42)
    assert c42.epsilon_cycle == pytest.approx(2 * 0.439302, rel=1e-5)


# --------------------------------------------------------------------------- Theorem 4 / Lemma 1


THM4_ROWS = [
    # n, T, ε, σ/L, N_u, q, closed, numeric, α used, constrained, LDP
    (
        10_000,
        10**6,
        0.5,
        "21.195210",
        "164.378981",
        "27.631021",
        "3.687264",
        "0.973971",
        "15.4956",
        True,
        "87.0151",
    ),
    (
        1000,
        10**7,
        0.5,
        "21.195210",
        "10643.79",
        "147.049390",
        "8.506234",
        "6.669479",
        "5.5938",
        False,
        "3723.58",
    ),
    (
        2000,
        20_000,
        1.0,
        "10.597605",
        "30.358421",
        "27.631021",
        "7.374527",
        "2.003660",
        "8.0103",
        True,
        "81.1270",
    ),
]


@pytest.mark.parametrize(
    ("n", "T", "eps", "s", "nu", "q", "closed", "numeric", "alpha", "constrained", "ldp"), THM4_ROWS
)
def test_theorem4_table(
    n: int,
    T: int,
    eps: float,
    s: str,
    nu: str,
    q: str,
    closed: str,
    numeric: str,
    alpha: str,
    constrained: bool,
    ldp: str,
) -> None:
    c = walk_sgd_loss(n, T, eps, D6, D6)
    _printed(c.sigma_over_L, s)
    _printed(c.T_u, nu)
    assert c.q is not None
    _printed(c.q, q)
    _printed(c.epsilon, closed)
    assert c.delta == pytest.approx(2 * D6)
    # Eq. 7 in ε and the σ form of App. F step 6 agree
    assert walk_sgd_loss_closed(n, c.T_u, c.sigma_over_L, D6).epsilon == pytest.approx(c.epsilon)
    num = walk_sgd_loss(n, T, eps, D6, D6, method="numeric")
    _printed(num.epsilon, numeric)
    _printed(num.alpha, alpha)
    assert num.constrained is constrained
    assert num.epsilon == walk_sgd_loss_numeric(n, c.T_u, c.sigma_over_L, D6).epsilon
    _printed(ldp_baseline(c.T_u, eps, D6, D6)[0], ldp)


def test_theorem4_numeric_brute_force() -> None:
    # min over 1 < α ≤ α_max of ε_c(α) = aα + ln(1/δ)/(α−1), on a fine grid
    for n, tu, s in [(10_000, 164.378981, 21.19521), (1000, 10643.79, 21.19521), (2000, 12, 2.5)]:
        r = walk_sgd_loss_numeric(n, tu, s, D6)
        a = 4 * tu * math.log(n) / (s * s * n)
        grid = np.linspace(1 + 1e-6, sgd_alpha_max(s), 400_001)
        vals = a * grid + math.log(1 / D6) / (grid - 1)
        assert r.epsilon <= vals.min() + 1e-12
        assert r.epsilon == pytest.approx(vals.min(), rel=1e-6)
        assert r.epsilon == pytest.approx(
            walk_sgd_rdp(n, tu, s, r.alpha) + math.log(1e6) / (r.alpha - 1)
        )


def test_lemma1_spot_value_and_constraint() -> None:
    # Theorem 4, App. F: σ/L = 10, T_u = 12, n = 2000, α = 5 → 0.009121083; α_max(10) = 7.588723
    _printed(walk_sgd_rdp(2000, 12, 10.0, 5.0), "0.009121083")
    _printed(sgd_alpha_max(10.0), "7.588723")
    # σ ≥ L sqrt(2α(α−1)) exactly at α_max
    amax = sgd_alpha_max(10.0)
    assert 10.0 == pytest.approx(math.sqrt(2 * amax * (amax - 1)), rel=1e-12)
    with pytest.raises(ValueError, match="alpha <="):
        walk_sgd_rdp(2000, 12, 10.0, 7.6)
    assert walk_sgd_rdp(2000, 12, 10.0, 5.0, factor=2) == pytest.approx(0.009121083 / 2, rel=1e-8)
    # E10: exact geometric sum ln n/(n−1)
    assert walk_sgd_rdp(2000, 12, 10.0, 5.0, geometric_exact=True) == pytest.approx(
        walk_sgd_rdp(2000, 12, 10.0, 5.0) * 2000 / 1999, rel=1e-12
    )


def test_lemma1_curve_is_a_gaussian_curve_dp_accounting() -> None:
    # Lemma 1's curve aα is the RDP curve of a Gaussian with z = 1/sqrt(2a): dp-accounting's RDP
    # accountant (improved conversion) on orders ≤ α_max must equal composition.rdp_to_dp and be
    # no worse than the Prop. 3 numeric value.
    n, tu, s = 1000, 10643.79, 21.19521
    num = walk_sgd_loss_numeric(n, tu, s, D6)
    a = walk_sgd_rdp(n, tu, s, 2.0) / 2.0
    z = 1.0 / math.sqrt(2.0 * a)
    orders = [float(x) for x in np.linspace(1.1, sgd_alpha_max(s), 300)]
    curve = gaussian_rdp(z, orders)
    assert np.allclose(curve, a * np.asarray(orders), rtol=1e-12)
    acc = RdpAccountant(orders=orders)
    acc.compose(dp_event.GaussianDpEvent(z))
    eps_dpa = acc.get_epsilon(D6)
    assert rdp_to_dp(orders, curve, D6)[0] == pytest.approx(eps_dpa, rel=1e-9)
    assert eps_dpa <= num.epsilon


def test_theorem4_closed_needs_alpha_above_2() -> None:
    # E12: α = (σ/L) sqrt(ln(1/δ)/q) with q = 2 ln(1/δ) is σ/(L√2): σ/L = 2 gives α < 2
    with pytest.raises(ValueError, match="alpha > 2"):
        walk_sgd_loss_closed(2000, 12, 2.0, D6)
    r = walk_sgd_loss_closed(2000, 12, 10.0, D6)
    assert r.alpha == pytest.approx(10 / math.sqrt(2)) and r.epsilon < 2 * math.log(1e6)


@pytest.mark.parametrize(
    ("eps", "factor", "expected"),
    [(10.0, 4, "2.578620"), (1.0, 4, "20.361907"), (10.0, 2, "2.571932"), (1.0, 2, "20.297372")],
)
def test_calibrate_sgd_sigma_fig2(eps: float, factor: int, expected: str) -> None:
    # Theorem 4, App. F: minimal σ/L for n = 2000, K_max = 12, δ_c = 1e-6 (Lemma 1 factor 4; code
    # factor 2)
    s = calibrate_sgd_sigma(2000, 12, eps, D6, factor)
    _printed(s, expected)
    assert walk_sgd_loss_numeric(2000, 12, s, D6, factor=factor).epsilon <= eps
    assert walk_sgd_loss_numeric(2000, 12, s * (1 - 1e-7), D6, factor=factor).epsilon > eps
    # α = α_max binds here (K_max ≪ n ln(1/δ)/ln n); σ/L ≈ √2(1/2 + ln(1/δ)/ε) to within 3.5%
    assert walk_sgd_loss_numeric(2000, 12, s, D6, factor=factor).constrained
    assert s == pytest.approx(math.sqrt(2) * (0.5 + math.log(1e6) / eps), rel=0.035)


def test_sigma_table_section_5_3() -> None:
    # Fig. 2 σ values (n = 2000, T = 20 000, K = 12, δ = 1e-6)
    for L, eps, central, local_code, eps0, faithful_net, faithful_local in [
        (0.4, 10, "0.696821", "5.871056", "0.39166", "1.0314", "11.788"),
        (0.4, 1, "6.968208", "46.868738", "0.04906", "8.1448", "94.181"),
        (1.0, 10, "1.742052", "14.6776", "0.39166", "2.5786", "29.470"),
        (1.0, 1, "17.420519", "117.1718", "0.04906", "20.3619", "235.453"),
    ]:
        _printed(bassily_central_sigma(2000, 20_000, eps, D6, L), central)
        code = calibrate_local_sgd_sigma(
            12, eps, D6, lipschitz=L, sensitivity_factor=1, delta_split="code"
        )
        _printed(code.sigma, local_code)
        _printed(code.epsilon0, eps0)
        assert code.epsilon == pytest.approx(eps, rel=1e-9)
        _printed(L * calibrate_sgd_sigma(2000, 12, eps, D6), faithful_net)
        faithful = calibrate_local_sgd_sigma(12, eps, D6, lipschitz=L)
        _printed(faithful.sigma, faithful_local)
        assert faithful.delta == pytest.approx(D6, rel=1e-12)


def test_prop1_example() -> None:
    r = walk_sgd_utility_bound(2.0, 1.0, 8, 1.0, D6, 20_000)
    _printed(r.G, "29.991230")
    _printed(r.bound, "10.097491")
    sigma = gaussian_sigma(0.5, D6, 2.0)  # Alg. 4's σ at ε = 0.5 (sensitivity 2L)
    g = walk_sgd_utility_bound(1.0, 1.0, 3, 0.5, D6, 100).G
    assert g == pytest.approx(math.sqrt(1 + 3 * sigma**2), rel=1e-12)


# --------------------------------------------------------------------------- Lemma 2 / edge cap


def test_lemma2_table() -> None:
    # Lemma 2, App. G: N_u = 12, n = 2000, ε = 0.5, δ̃ = δ' = 1e-6
    ch = spotted_loss(12, 2000, 0.5, D6, D6, exact=False)
    _printed(ch.n_spotted, "0.717236")
    _printed(ch.epsilon_simple, "0.358618")
    _printed(ch.epsilon_advanced_as_printed, "1.806570")
    _printed(ch.epsilon_advanced, "2.458512")
    ex = spotted_loss(12, 2000, 0.5, D6, D6)
    assert ex.n_spotted == 2
    assert ex.epsilon_simple == 1.0 and ex.epsilon == 1.0 and ex.method == "lemma2-simple"
    # independent: P(Bin(12, 1 − (1 − 1/n)²) > N_s) ≤ δ̃ < P(... > N_s − 1)
    p = 1 - (1 - 1 / 2000) ** 2
    assert _binom_upper_tail(12, p, 2) <= D6 < _binom_upper_tail(12, p, 1)
    # the code's K_s = ceil(Chernoff) = 1 is not a 1 − 1e-6 bound
    assert math.ceil(ch.n_spotted) == 1 and _binom_upper_tail(12, p, 1) > D6


def test_lemma2_delta_bookkeeping() -> None:
    r = spotted_loss(12, 2000, 0.5, D6, D6, delta=1e-7)
    assert r.delta_simple == pytest.approx(2 * 1e-7 + D6)
    assert r.delta_advanced == pytest.approx(2 * 1e-7 + D6 + D6)
    assert r.epsilon_advanced == pytest.approx(advanced_composition(0.5, 1e-7, 2, D6)[0])


def test_edge_cap_variant() -> None:
    r = spotted_loss_capped(2, 0.5, 1e-7, D6)
    assert (r.epsilon, r.delta, r.method) == (1.0, 2e-7, "edge-cap-simple")
    big = spotted_loss_capped(400, 0.01, 1e-9, D6)
    assert big.method == "edge-cap-advanced"
    assert (big.epsilon, big.delta) == advanced_composition(0.01, 1e-9, 400, D6)
    assert spotted_loss_capped(0, 0.5, 1e-7, D6).epsilon == 0.0


# --------------------------------------------------------------------------- sum calibration


def test_calibrate_sum_sigma() -> None:
    c = calibrate_sum_sigma(1000, 100_000, 1.0, D7, D7, D7)
    b = walk_sum_loss(1000, 100_000, c.epsilon0, D7, D7, D7, cycle="tight", counts="exact")
    assert b.epsilon == pytest.approx(1.0, rel=1e-9) and b.epsilon <= 1.0
    assert (
        walk_sum_loss(
            1000, 100_000, c.epsilon0 * (1 + 1e-8), D7, D7, D7, cycle="tight", counts="exact"
        ).epsilon
        > 1.0
    )
    assert c.sigma == gaussian_sigma(c.epsilon0, D7, 1.0)
    # with known senders/receivers the spotted loss is added: less local ε, more noise
    s = calibrate_sum_sigma(1000, 100_000, 3.0, D7, D7, D7, spotted_delta_tilde=D7)
    plain = calibrate_sum_sigma(1000, 100_000, 3.0, D7, D7, D7)
    assert s.epsilon == pytest.approx(3.0, rel=1e-9) and s.sigma > plain.sigma
    # a target above what ε0 → 1 gives: ε0 = 1 − 1e-9
    assert calibrate_sum_sigma(1000, 100_000, 100.0, D7, D7, D7).epsilon0 == pytest.approx(1.0)
    with pytest.raises(ValueError):
        calibrate_sum_sigma(1000, 100_000, 1e-12, D7, D7, D7)
