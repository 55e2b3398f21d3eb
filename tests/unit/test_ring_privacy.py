"""Tests of netdp_node.privacy.ring (ring summation, Cyffers & Bellet 2022, Thm 1).

Reference values: a worked example of Theorem 1 (docs/errata.md, E1), brute-force simulation of
Algorithm 1's counter, dp-accounting's RDP and PLD accountants, and the closed-form exact Gaussian
tradeoff.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import RdpAccountant
from scipy import optimize, stats

from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    compose_losses,
    gaussian_rdp,
    gaussian_sigma,
    rdp_to_dp,
)
from netdp_node.privacy.ring import (
    ldp_sum_std,
    ring_adds_noise,
    ring_noise_count,
    ring_sum_guarantee,
    ring_sum_loss,
    ring_sum_std,
)

SIGMA_LOC = 10.597605053700947  # Theorem 1: σ_loc(ε=0.5, δ=1e-6, Δ=1)


# --------------------------------------------------------------------------- helpers


def _simulate_algorithm1(n: int, K: int) -> list[tuple[int, bool]]:
    """Algorithm 1 with its explicit counter `a`: [(user, adds_noise)] per step."""
    steps: list[tuple[int, bool]] = []
    a = 0
    for _k in range(1, K + 1):
        for u in range(1, n + 1):
            if a == 0:
                steps.append((u, True))
                a = n - 2
            else:
                steps.append((u, False))
                a -= 1
    return steps


def _observer_windows(n: int, K: int, v: int) -> list[range]:
    """Global-step ranges (1-indexed) that v's K receptions reveal: the first observation shows
    steps 1..v−1; the i-th (i ≥ 2) shows steps r_{i−1}..r_i − 1 where r_i = (i−1)n + v."""
    receptions = [(i - 1) * n + v for i in range(1, K + 1)]
    windows = [range(1, receptions[0])]
    windows += [range(receptions[i - 1], receptions[i]) for i in range(1, K)]
    return windows


def _exact_gaussian_eps(mu: float, delta: float) -> float:
    """Exact ε(δ) of a Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018, Thm 8):
    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)."""

    def excess(eps: float) -> float:
        tail = math.exp(eps + stats.norm.logcdf(-mu / 2 - eps / mu))
        return stats.norm.cdf(mu / 2 - eps / mu) - tail - delta

    if excess(0.0) <= 0:
        return 0.0
    return float(optimize.brentq(excess, 0.0, 200.0, xtol=1e-12))


def _pld_gaussian_eps(z: float, windows: int, delta: float) -> float:
    acc = PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.GaussianDpEvent(z), windows)
    return float(acc.get_epsilon(delta))


def _pld_generic_eps(eps_w: float, delta_w: float, windows: int, delta: float) -> float:
    """Optimal composition (via PLD) of `windows` generic (ε_w, δ_w) mechanisms, evaluated at δ.

    `from_privacy_parameters` rounds ε_w *up* to the grid; we feed it ε_w rounded down by one extra
    grid step so that the result is a lower bound on the optimal composition of (ε_w, δ_w)."""
    h = 1e-4
    eps_lo = (math.floor(eps_w / h) - 1) * h
    pld = pld_lib.from_privacy_parameters(
        pld_common.DifferentialPrivacyParameters(eps_lo, delta_w), value_discretization_interval=h
    )
    return float(pld.self_compose(windows).get_epsilon_for_delta(delta))


# --------------------------------------------------------------------------- Theorem 1 numbers


def test_theorem1_worked_example() -> None:
    eps, dlt = ring_sum_guarantee(0.5, 1e-6, 10, 1e-6)
    assert eps == pytest.approx(11.554897, rel=1e-6)
    assert dlt == pytest.approx(1.1e-5, rel=1e-12)
    assert gaussian_sigma(0.5, 1e-6, 1.0) == pytest.approx(10.597605, rel=1e-6)
    assert ring_sum_guarantee(0.5, 1e-6, 0, 1e-6) == (0.0, 0.0)
    with pytest.raises(ValueError):
        ring_sum_guarantee(0.5, 1e-6, 2.5, 1e-6)  # type: ignore[arg-type]


def test_ring_noise_count_erratum_e1() -> None:
    assert ring_noise_count(5, 1) == 2  # paper's ⌊Kn/(n−1)⌋ gives 1
    assert ring_noise_count(100, 10) == 11  # paper gives 10
    assert ring_noise_count(3, 1) == 2
    assert ring_noise_count(3, 4) == 6  # steps 1,3,5,7,9,11 of 12
    assert ring_noise_count(7, 0) == 0


def test_ring_std() -> None:
    assert ring_sum_std(100, 10, SIGMA_LOC) == pytest.approx(math.sqrt(11) * 10.597605, rel=1e-6)
    assert ring_sum_std(100, 10, SIGMA_LOC) == pytest.approx(35.148279639, rel=1e-9)  # bc -l
    assert ldp_sum_std(100, 10, SIGMA_LOC) == pytest.approx(math.sqrt(1000) * 10.597605, rel=1e-6)
    assert ldp_sum_std(100, 10, 1.0) / ring_sum_std(100, 10, 1.0) == pytest.approx(
        math.sqrt(1000 / 11)
    )


@pytest.mark.parametrize("n", [0, 1, 2, -3])
def test_ring_functions_require_three_users(n: int) -> None:
    with pytest.raises(ValueError, match="n >= 3"):
        ring_adds_noise(1, 1, n)
    with pytest.raises(ValueError, match="n >= 3"):
        ring_noise_count(n, 1)
    with pytest.raises(ValueError, match="n >= 3"):
        ring_sum_std(n, 1, 1.0)
    with pytest.raises(ValueError, match="n >= 3"):
        ldp_sum_std(n, 1, 1.0)


def test_ring_adds_noise_rejects_bad_position_and_round() -> None:
    with pytest.raises(ValueError):
        ring_adds_noise(0, 1, 5)
    with pytest.raises(ValueError):
        ring_adds_noise(6, 1, 5)
    with pytest.raises(ValueError):
        ring_adds_noise(1, 0, 5)


# --------------------------------------------------------------------------- schedule, Algorithm 1


@pytest.mark.parametrize("n", range(3, 30))
def test_schedule_property_brute_force(n: int) -> None:
    for K in range(1, 6):
        steps = _simulate_algorithm1(n, K)
        # closed form == Algorithm 1's counter, and the count matches E1
        closed = [ring_adds_noise(u, (s - 1) // n + 1, n) for s, (u, _) in enumerate(steps, 1)]
        assert closed == [noisy for _, noisy in steps]
        assert sum(closed) == ring_noise_count(n, K)
        assert [s for s, (_, noisy) in enumerate(steps, 1) if noisy] == list(
            range(1, K * n + 1, n - 1)
        )
        for v in range(1, n + 1):
            windows = _observer_windows(n, K, v)
            assert len(windows) == K
            seen = {u: 0 for u in range(1, n + 1) if u != v}
            for w in windows:
                users = [steps[s - 1][0] for s in w]
                others = [u for u in users if u != v]
                assert len(others) == len(set(others))  # ≤ 1 contribution of each user per window
                for u in others:
                    seen[u] += 1
                if others:
                    # every window showing someone's contribution holds noise by a user ≠ v
                    assert any(steps[s - 1][1] and steps[s - 1][0] != v for s in w), (n, K, v, w)
            # the number of v's windows holding u's contributions: K for u < v, K − 1 for u > v
            assert seen == {u: (K if u < v else K - 1) for u in seen}


def test_final_release_tail_window_may_lack_foreign_noise() -> None:
    """Documents why releasing the final τ (App. C) is not just "one
    more window": after v's last reception, the remaining steps need not hold noise from a user ≠ v.
    n = 5, K = 2, v = 4: steps 9 (user 4, noisy) and 10 (user 5, not noisy)."""
    n, K, v = 5, 2, 4
    steps = _simulate_algorithm1(n, K)
    tail = range((K - 1) * n + v, K * n + 1)
    assert [steps[s - 1] for s in tail] == [(4, True), (5, False)]


# --------------------------------------------------------------------------- ring_sum_loss

CASES = [
    # (sigma, windows, delta, delta_prime)
    (SIGMA_LOC, 10, 1e-6, 1e-6),
    (SIGMA_LOC, 1, 1e-6, 1e-6),
    (5.0, 3, 1e-5, 1e-6),
    (20.0, 50, 1e-7, 1e-7),
    (50.0, 2, 1e-6, 1e-6),
    (2.0, 4, 1e-5, 1e-5),  # ε_w = 2.42 ≥ 1: classic candidates invalid
]


def _candidates(
    sigma: float, windows: int, delta: float, delta_prime: float
) -> dict[str, tuple[float, float]]:
    """Independent re-computation of the three candidates (Δ = 1)."""
    eps_w = math.sqrt(2 * math.log(1.25 / delta)) / sigma
    k = windows
    delta_tot = k * delta + delta_prime
    acc = RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(sigma), k)
    out = {"gaussian-rdp": (float(acc.get_epsilon(delta_tot)), delta_tot)}
    if eps_w < 1:
        adv = math.sqrt(2 * k * math.log(1 / delta_prime)) * eps_w + k * eps_w * math.expm1(eps_w)
        out["theorem1-advanced"] = (adv, delta_tot)
        out["basic"] = (k * eps_w, k * delta)
    return out


@pytest.mark.parametrize(("sigma", "windows", "delta", "delta_prime"), CASES)
def test_ring_sum_loss_is_min_of_candidates(
    sigma: float, windows: int, delta: float, delta_prime: float
) -> None:
    loss = ring_sum_loss(
        sigma=sigma, sensitivity=1.0, windows=windows, delta=delta, delta_prime=delta_prime
    )
    cands = _candidates(sigma, windows, delta, delta_prime)
    best = min(cands, key=lambda m: cands[m])
    assert loss.method == best
    assert loss.epsilon == pytest.approx(cands[best][0], rel=1e-6)
    assert loss.delta == pytest.approx(cands[best][1], rel=1e-12)
    assert loss.delta <= windows * delta + delta_prime
    assert loss.rdp is not None
    np.testing.assert_allclose(loss.rdp[1], gaussian_rdp(sigma, count=windows), rtol=1e-12)
    # sensitivity only enters through z = σ/Δ
    scaled = ring_sum_loss(
        sigma=3 * sigma, sensitivity=3.0, windows=windows, delta=delta, delta_prime=delta_prime
    )
    assert scaled.epsilon == pytest.approx(loss.epsilon, rel=1e-9)
    assert scaled.method == loss.method


@pytest.mark.parametrize(("sigma", "windows", "delta", "delta_prime"), CASES)
def test_ring_sum_loss_sanity_floor(
    sigma: float, windows: int, delta: float, delta_prime: float
) -> None:
    loss = ring_sum_loss(
        sigma=sigma, sensitivity=1.0, windows=windows, delta=delta, delta_prime=delta_prime
    )
    # exact ε of `windows` Gaussian(z) windows at the returned δ: PLD and closed form agree
    pld_eps = _pld_gaussian_eps(sigma, windows, loss.delta)
    exact_eps = _exact_gaussian_eps(math.sqrt(windows) / sigma, loss.delta)
    assert pld_eps == pytest.approx(exact_eps, abs=2e-3)
    assert loss.epsilon >= pld_eps
    assert loss.epsilon >= exact_eps
    # Theorem 1 / advanced and basic are valid compositions of generic (ε_w, δ) mechanisms
    eps_w = math.sqrt(2 * math.log(1.25 / delta)) / sigma
    if eps_w < 1:
        delta_tot = windows * delta + delta_prime
        adv_eps, adv_delta = ring_sum_guarantee(eps_w, delta, windows, delta_prime)
        assert adv_delta == pytest.approx(delta_tot)
        assert adv_eps >= _pld_generic_eps(eps_w, delta, windows, delta_tot)
        assert windows * eps_w >= _pld_generic_eps(eps_w, delta, windows, windows * delta)
    else:
        assert loss.method == "gaussian-rdp"


def test_ring_sum_loss_no_contribution() -> None:
    loss = ring_sum_loss(sigma=SIGMA_LOC, sensitivity=1.0, windows=0, delta=1e-6, delta_prime=1e-6)
    assert (loss.epsilon, loss.delta, loss.method) == (0.0, 0.0, "no-contribution")
    assert loss.rdp is not None and loss.rdp[0] == DEFAULT_ORDERS
    assert not any(loss.rdp[1])


def test_ring_sum_loss_validation() -> None:
    ok = dict(sigma=1.0, sensitivity=1.0, windows=2, delta=1e-6, delta_prime=1e-6)
    for key, bad in [
        ("sigma", -1.0),
        ("sensitivity", -1.0),
        ("windows", -1),
        ("delta", 0.0),
        ("delta_prime", 1.0),
    ]:
        with pytest.raises(ValueError, match=key):
            ring_sum_loss(**{**ok, key: bad})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ring_sum_loss(**{**ok, "windows": 10, "delta": 0.2})  # type: ignore[arg-type]


def test_no_noise_is_no_privacy() -> None:
    import math

    assert (
        ring_sum_loss(sigma=0.0, sensitivity=1.0, windows=1, delta=1e-6, delta_prime=1e-6).epsilon
        == math.inf
    )
    assert (
        ring_sum_loss(sigma=0.0, sensitivity=1.0, windows=0, delta=1e-6, delta_prime=1e-6).epsilon
        == 0.0
    )


def test_jobs_compose_in_rdp() -> None:
    """Two ring jobs towards the same observer compose like one run with all their windows."""
    a = ring_sum_loss(sigma=SIGMA_LOC, sensitivity=1.0, windows=10, delta=1e-6, delta_prime=1e-6)
    b = ring_sum_loss(sigma=SIGMA_LOC, sensitivity=1.0, windows=9, delta=1e-6, delta_prime=1e-6)
    out = compose_losses([a, b], 1e-5)
    assert out.method == "rdp"
    expected = rdp_to_dp(DEFAULT_ORDERS, gaussian_rdp(SIGMA_LOC, count=19), 1e-5)[0]
    assert out.epsilon == pytest.approx(expected, rel=1e-12)
    assert out.epsilon < a.epsilon + b.epsilon
    assert out.epsilon >= _pld_gaussian_eps(SIGMA_LOC, 19, 1e-5)
