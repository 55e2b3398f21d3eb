"""Tests of netdp_node.privacy.composition against hand-computed values and dp-accounting."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    compose_losses,
    gaussian_rdp,
    gaussian_sigma,
    rdp_to_dp,
)


def _rdp_accountant_eps(z: float, count: int, delta: float) -> tuple[float, float]:
    """(ε, order) from dp-accounting's RdpAccountant: `count` Gaussian(z) events, DEFAULT_ORDERS."""
    acc = RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(z), count)
    eps, order = acc.get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)


# --------------------------------------------------------------------------- DEFAULT_ORDERS


def test_default_orders_are_sorted_floats_above_one() -> None:
    assert all(isinstance(a, float) for a in DEFAULT_ORDERS)
    assert list(DEFAULT_ORDERS) == sorted(set(DEFAULT_ORDERS))
    assert DEFAULT_ORDERS[:3] == (1.25, 1.5, 1.75)
    assert {2.0, 64.0, 80.0, 128.0, 256.0, 512.0, 1024.0} <= set(DEFAULT_ORDERS)


# --------------------------------------------------------------------------- gaussian_sigma


def test_gaussian_sigma_worked_example() -> None:
    # Theorem 1: σ_loc(ε=0.5, δ=1e-6, Δ=1) = sqrt(2 ln(1.25e6))/0.5 = 10.597605
    assert gaussian_sigma(0.5, 1e-6, 1.0) == pytest.approx(10.597605, rel=1e-6)
    # linear in Δ, inverse in ε
    assert gaussian_sigma(0.25, 1e-6, 2.0) == pytest.approx(4 * 10.597605, rel=1e-6)


@pytest.mark.parametrize(
    ("epsilon", "delta", "sensitivity", "match"),
    [
        (0.0, 1e-6, 1.0, "epsilon"),
        (1.0, 1e-6, 1.0, "epsilon"),
        (-0.5, 1e-6, 1.0, "epsilon"),
        (float("nan"), 1e-6, 1.0, "epsilon"),
        (0.5, 0.0, 1.0, "delta"),
        (0.5, 1.0, 1.0, "delta"),
        (0.5, 1e-6, 0.0, "sensitivity"),
        (0.5, 1e-6, -1.0, "sensitivity"),
    ],
)
def test_gaussian_sigma_rejects_invalid(
    epsilon: float, delta: float, sensitivity: float, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        gaussian_sigma(epsilon, delta, sensitivity)


# --------------------------------------------------------------------------- basic / advanced


def test_advanced_composition_worked_example() -> None:
    # Theorem 1 worked example (Theorem 1 = B1 over K = 10 windows)
    eps, dlt = advanced_composition(0.5, 1e-6, 10, 1e-6)
    assert eps == pytest.approx(11.554897, rel=1e-6)
    assert dlt == pytest.approx(1.1e-5, rel=1e-12)


def test_advanced_composition_hand_value_and_edge_cases() -> None:
    # k = 4, ε = 0.1, δ = 1e-5, δ' = 1e-6: sqrt(8 ln 1e6)·0.1 + 0.4·(e^0.1 − 1)
    expected = math.sqrt(8 * math.log(1e6)) * 0.1 + 0.4 * (math.exp(0.1) - 1)
    eps, dlt = advanced_composition(0.1, 1e-5, 4, 1e-6)
    assert eps == pytest.approx(expected, rel=1e-12)
    assert eps == pytest.approx(1.093372721181, rel=1e-9)  # bc -l
    assert dlt == pytest.approx(4e-5 + 1e-6, rel=1e-12)
    assert advanced_composition(0.5, 1e-6, 0, 1e-6) == (0.0, 0.0)
    # non-integer k is rounded up (advanced composition)
    assert advanced_composition(0.1, 1e-5, 3.2, 1e-6) == advanced_composition(0.1, 1e-5, 4, 1e-6)
    with pytest.raises(ValueError, match="delta_prime"):
        advanced_composition(0.1, 1e-5, 3, 0.0)
    with pytest.raises(ValueError, match="k"):
        advanced_composition(0.1, 1e-5, -1, 1e-6)


def test_basic_composition() -> None:
    assert basic_composition(0.5, 1e-6, 10) == pytest.approx((5.0, 1e-5))
    assert basic_composition(0.5, 1e-6, 0) == (0.0, 0.0)
    with pytest.raises(ValueError):
        basic_composition(0.5, 1e-6, -1)
    with pytest.raises(ValueError):
        basic_composition(0.5, 1e-6, 1.5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- RDP


def test_gaussian_rdp_formula() -> None:
    curve = gaussian_rdp(2.0, (2.0, 4.0, 10.0), count=3)
    np.testing.assert_allclose(curve, [3 * 2 / 8, 3 * 4 / 8, 3 * 10 / 8], rtol=1e-15)
    assert gaussian_rdp(2.0).shape == (len(DEFAULT_ORDERS),)
    assert not np.any(gaussian_rdp(2.0, count=0))
    with pytest.raises(ValueError):
        gaussian_rdp(0.0)
    with pytest.raises(ValueError):
        gaussian_rdp(1.0, (0.5, 2.0))


@pytest.mark.parametrize(
    ("z", "count", "delta"),
    [(1.0, 1, 1e-5), (10.597605, 10, 1.1e-5), (0.8, 50, 1e-6), (25.0, 3, 1e-7), (3.0, 200, 1e-9)],
)
def test_rdp_to_dp_matches_dp_accounting(z: float, count: int, delta: float) -> None:
    eps, order = rdp_to_dp(DEFAULT_ORDERS, gaussian_rdp(z, DEFAULT_ORDERS, count), delta)
    ref_eps, ref_order = _rdp_accountant_eps(z, count, delta)
    assert eps == pytest.approx(ref_eps, rel=1e-6)
    assert order == ref_order
    # the improved conversion is never worse than the paper's Prop. 3
    alphas = np.asarray(DEFAULT_ORDERS)
    prop3 = np.min(count * alphas / (2 * z * z) + math.log(1 / delta) / (alphas - 1))
    assert eps <= prop3


def test_rdp_to_dp_on_dp_accounting_default_orders() -> None:
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    acc = RdpAccountant()
    acc.compose(dp_event.GaussianDpEvent(4.0), 7)
    eps, _ = rdp_to_dp(DEFAULT_RDP_ORDERS, gaussian_rdp(4.0, DEFAULT_RDP_ORDERS, 7), 1e-6)
    assert eps == pytest.approx(acc.get_epsilon(1e-6), rel=1e-6)


def test_rdp_to_dp_hand_value_and_floor() -> None:
    # single order α = 2, rdp = 1, δ = 1e-5: 1 + ln(1/2) − ln(2e-5)/1
    eps, order = rdp_to_dp([2.0], [1.0], 1e-5)
    assert eps == pytest.approx(1 + math.log(0.5) - math.log(2e-5), rel=1e-12)
    assert order == 2.0
    # never below 0 (tiny divergence: δ² > 1 − e^{−rdp})
    assert rdp_to_dp([2.0, 8.0], [1e-14, 4e-14], 1e-3) == (0.0, 2.0)
    assert rdp_to_dp(DEFAULT_ORDERS, [0.0] * len(DEFAULT_ORDERS), 1e-6)[0] == 0.0
    # orders too close to 1 are not used
    assert rdp_to_dp([1.0], [0.5], 1e-5)[0] == math.inf


@pytest.mark.parametrize(
    ("orders", "rdp", "delta"),
    [([2.0], [1.0], 0.0), ([2.0], [1.0], 1.0), ([2.0, 3.0], [1.0], 1e-5), ([2.0], [-1.0], 1e-5)],
)
def test_rdp_to_dp_rejects_invalid(orders: list[float], rdp: list[float], delta: float) -> None:
    with pytest.raises(ValueError):
        rdp_to_dp(orders, rdp, delta)


# --------------------------------------------------------------------------- PrivacyLoss


def test_privacy_loss_to_dict_is_json_friendly_and_round_trips() -> None:
    plain = PrivacyLoss(1.5, 1e-6, "basic")
    assert plain.to_dict() == {"epsilon": 1.5, "delta": 1e-6, "method": "basic"}
    with_rdp = PrivacyLoss(0.7, 1e-6, "rdp", ((2.0, 3.0), (0.1, 0.15)))
    d = with_rdp.to_dict()
    assert d["rdp"] == {"orders": [2.0, 3.0], "values": [0.1, 0.15]}
    assert PrivacyLoss.from_dict(json.loads(json.dumps(d))) == with_rdp
    assert PrivacyLoss.from_dict(plain.to_dict()) == plain


def test_privacy_loss_validation() -> None:
    with pytest.raises(ValueError):
        PrivacyLoss(-1.0, 0.0, "x")
    with pytest.raises(ValueError):
        PrivacyLoss(1.0, 1.5, "x")
    with pytest.raises(ValueError):
        PrivacyLoss(1.0, 0.0, "x", ((2.0, 3.0), (0.1,)))


# --------------------------------------------------------------------------- compose_losses


def _gauss_loss(z: float, count: int, eps: float, delta: float) -> PrivacyLoss:
    return PrivacyLoss(eps, delta, "test", (DEFAULT_ORDERS, tuple(gaussian_rdp(z, count=count))))


def test_compose_losses_rdp_path_equals_summed_curve() -> None:
    parts = [
        _gauss_loss(5.0, 3, 1.3, 3e-6),
        _gauss_loss(8.0, 10, 1.4, 1e-5),
        _gauss_loss(5.0, 1, 0.9, 2e-6),
    ]
    out = compose_losses(parts, 1e-5)
    summed = gaussian_rdp(5.0, count=3) + gaussian_rdp(8.0, count=10) + gaussian_rdp(5.0, count=1)
    expected, _ = rdp_to_dp(DEFAULT_ORDERS, summed, 1e-5)
    assert out.method == "rdp"
    assert out.delta == 1e-5
    assert out.epsilon == pytest.approx(expected, rel=1e-12)
    assert out.epsilon < 1.3 + 1.4 + 0.9
    assert out.rdp is not None
    np.testing.assert_allclose(out.rdp[1], summed, rtol=1e-12)
    # independent reference: dp-accounting composing the same Gaussian events
    acc = RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(5.0), 4)
    acc.compose(dp_event.GaussianDpEvent(8.0), 10)
    assert out.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)


def test_compose_losses_basic_when_one_part_lacks_rdp() -> None:
    parts = [_gauss_loss(5.0, 3, 1.3, 3e-6), PrivacyLoss(0.4, 1e-6, "external")]
    out = compose_losses(parts, 1e-5)
    assert out.method == "basic"
    assert out.epsilon == pytest.approx(1.7, rel=1e-12)
    assert out.delta == pytest.approx(4e-6, rel=1e-12)
    assert out.rdp is None
    # returned even if Σδ exceeds the target (caller checks δ against its budget)
    over = compose_losses([PrivacyLoss(0.4, 1e-5, "a"), PrivacyLoss(0.4, 1e-5, "b")], 1e-5)
    assert (over.method, over.epsilon, over.delta) == ("basic", 0.8, pytest.approx(2e-5))


def test_compose_losses_prefers_basic_when_smaller_and_delta_fits() -> None:
    # tiny ε but a loose RDP curve: basic wins, and keeps the summed curve for later composition
    parts = [_gauss_loss(1.0, 1, 0.01, 1e-7), _gauss_loss(1.0, 1, 0.02, 1e-7)]
    out = compose_losses(parts, 1e-5)
    assert out.method == "basic"
    assert out.epsilon == pytest.approx(0.03)
    assert out.delta == pytest.approx(2e-7)
    assert out.rdp is not None
    np.testing.assert_allclose(out.rdp[1], gaussian_rdp(1.0, count=2), rtol=1e-12)
    # same parts but basic's Σδ above the target: RDP must be used although its ε is larger
    parts_hi = [_gauss_loss(1.0, 1, 0.01, 1e-5), _gauss_loss(1.0, 1, 0.02, 1e-5)]
    out_hi = compose_losses(parts_hi, 1e-5)
    assert out_hi.method == "rdp"
    expected, _ = rdp_to_dp(DEFAULT_ORDERS, gaussian_rdp(1.0, count=2), 1e-5)
    assert out_hi.epsilon == pytest.approx(expected)


def test_compose_losses_mismatched_orders_fall_back_to_basic() -> None:
    a = PrivacyLoss(1.0, 1e-6, "a", ((2.0, 4.0), (0.1, 0.2)))
    b = PrivacyLoss(1.0, 1e-6, "b", ((2.0, 8.0), (0.1, 0.4)))
    out = compose_losses([a, b], 1e-5)
    assert (out.method, out.epsilon, out.rdp) == ("basic", 2.0, None)


def test_compose_losses_empty_and_validation() -> None:
    out = compose_losses([], 1e-6)
    assert (out.epsilon, out.delta, out.method) == (0.0, 0.0, "none")
    with pytest.raises(ValueError):
        compose_losses([], 0.0)
