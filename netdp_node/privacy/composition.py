"""Generic differential-privacy composition tools (pure functions, no I/O, no global state).

Everything here is a computable form of a building block the papers' accountants use:

* classic Gaussian calibration `σ = Δ·sqrt(2 ln(1.25/δ))/ε` (valid for ε < 1; Dwork & Roth 2014,
  Theorem A.1);
* advanced composition (Dwork, Rothblum & Vadhan, FOCS 2010);
* Rényi DP (Mironov, CSF 2017): composition by addition of curves (Prop. 1) and RDP → (ε,δ)
  conversion (Prop. 3, here in the improved form of Balle et al. 2020 / Canonne–Kamath–Steinke
  2020, the one dp-accounting's `RdpAccountant` uses);
* basic (sequential) composition, and the cross-job composition rule a node applies to the losses it
  has incurred towards one peer (`compose_losses`).

All logarithms are natural logarithms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netdp_node.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost


__all__ = [
    "DEFAULT_ORDERS",
    "PrivacyLoss",
    "advanced_composition",
    "basic_composition",
    "compose_losses",
    "gaussian_rdp",
    "gaussian_sigma",
    "rdp_to_dp",
]

#: Rényi orders α used by default for RDP curves. Dense near 1 and up to 64 (where
#: the optimum lies for the usual δ), sparse above, up to 1024 for very large noise multipliers.
DEFAULT_ORDERS: tuple[float, ...] = (
    (1.25, 1.5, 1.75)
    + tuple(2.0 + 0.5 * i for i in range(17))  # 2.0, 2.5, ..., 10.0
    + tuple(float(a) for a in range(11, 65))  # 11, 12, ..., 64
    + (80.0, 128.0, 256.0, 512.0, 1024.0)
)

# Orders at or below this value are not used for conversion: the improved bound is numerically
# unstable as α → 1 (same threshold as dp-accounting's RdpAccountant).
_MIN_CONVERSION_ORDER = 1.01


def _check_open_unit(name: str, value: float) -> None:
    """Raise ValueError unless 0 < value < 1 (also rejects NaN)."""
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")


def _check_nonneg_count(name: str, value: int) -> int:
    """Return `value` as an int, raising ValueError unless it is a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Noise std of the classic Gaussian mechanism that is (ε, δ)-DP (`σ_loc`).

    Implements `σ = Δ·sqrt(2 ln(1.25/δ))/ε` (Dwork & Roth 2014, Thm A.1), where Δ is the L2
    sensitivity. The classic calibration is only valid for ε < 1 (docs/errata.md), and only for
    the CONTINUOUS Gaussian: it is kept for the papers' reproductions, while everything a node
    charges for its discrete noise uses `discrete_gaussian.discrete_gaussian_sigma` /
    `discrete_gaussian_epsilon` (zCDP, Canonne–Kamath–Steinke 2020 Thm 4 and Prop. 12).

    Raises:
        ValueError: unless 0 < ε < 1, 0 < δ < 1 and Δ > 0.
    """
    if not (0.0 < epsilon < 1.0):
        raise ValueError(
            f"epsilon must satisfy 0 < epsilon < 1 for the classic Gaussian calibration "
            f"(Dwork & Roth 2014, Theorem A.1), got {epsilon!r}"
        )
    _check_open_unit("delta", delta)
    if not (0.0 < sensitivity < math.inf):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def advanced_composition(
    epsilon: float, delta: float, k: float, delta_prime: float
) -> tuple[float, float]:
    """Advanced composition of k (ε, δ)-DP mechanisms (Dwork, Rothblum & Vadhan, FOCS 2010).

    Returns `(sqrt(2k ln(1/δ'))·ε + k·ε·(e^ε − 1), k·δ + δ')`. The mechanisms may be chosen
    adaptively. A non-integer k is rounded up (`ceil(k)`), the guaranteed bound. k = 0
    composes nothing and returns (0.0, 0.0).

    Raises:
        ValueError: if ε < 0, δ ∉ [0, 1), k < 0 or δ' ∉ (0, 1).
    """
    if not (0.0 <= epsilon < math.inf):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    if not (0.0 <= k < math.inf):
        raise ValueError(f"k (number of mechanisms) must be finite and >= 0, got {k!r}")
    _check_open_unit("delta_prime", delta_prime)
    kk = math.ceil(k)
    if kk == 0:
        return 0.0, 0.0
    eps = math.sqrt(2.0 * kk * math.log(1.0 / delta_prime)) * epsilon + kk * epsilon * math.expm1(
        epsilon
    )
    return eps, kk * delta + delta_prime


def basic_composition(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    """Basic (sequential) composition of k (ε, δ)-DP mechanisms: returns `(k·ε, k·δ)`.

    This is the "naive" bound that the authors' Fig. 1(a) script (Cyffers & Bellet 2022) also uses.

    Raises:
        ValueError: if ε < 0, δ ∉ [0, 1] or k is not a non-negative integer.
    """
    if not (0.0 <= epsilon <= math.inf):
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if not (0.0 <= delta <= 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta <= 1, got {delta!r}")
    kk = _check_nonneg_count("k", k)
    if kk == 0:
        return 0.0, 0.0
    return kk * epsilon, kk * delta


def gaussian_rdp(
    noise_multiplier: float, orders: Sequence[float] = DEFAULT_ORDERS, count: int = 1
) -> np.ndarray:
    """RDP curve of `count` composed Gaussian mechanisms, noise multiplier z = σ/Δ (Mironov 2017).

    One Gaussian mechanism with L2 sensitivity Δ and noise std σ is (α, α/(2z²))-RDP for every α > 1
    (Mironov 2017, Prop. 7); RDP composes by addition (Prop. 2), hence `count·α/(2z²)` per order.

    Returns:
        A float64 array aligned with `orders`.

    Raises:
        ValueError: if z ≤ 0, count is not a non-negative integer, or an order is < 1.
    """
    if not (0.0 < noise_multiplier <= math.inf):
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    n = _check_nonneg_count("count", count)
    alphas = _as_orders(orders)
    if math.isinf(noise_multiplier):
        return np.zeros_like(alphas)
    return n * alphas / (2.0 * noise_multiplier**2)


def _as_orders(orders: Sequence[float]) -> np.ndarray:
    """Validate Rényi orders (non-empty, finite, each ≥ 1) and return them as a float64 array."""
    alphas = np.asarray(orders, dtype=np.float64)
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError("orders must be a non-empty 1-D sequence of Rényi orders")
    if not np.all(np.isfinite(alphas)) or np.any(alphas < 1.0):
        raise ValueError(f"every Rényi order must be finite and >= 1, got {list(alphas)!r}")
    return alphas


def rdp_to_dp(
    orders: Sequence[float], rdp: Sequence[float] | np.ndarray, delta: float
) -> tuple[float, float]:
    """Convert an RDP curve to (ε, δ)-DP at the given δ; returns (ε, best order).

    Uses the improved conversion of Canonne–Kamath–Steinke 2020 (arXiv:2004.00010, Proposition 12
    in its v4; also Asoodeh et al., arXiv:2001.05990, Eq. 20), which is never worse than the
    paper's Prop. 3 `ε = rdp + ln(1/δ)/(α−1)`, and holds for any output distribution (the discrete
    Gaussian's included):

        ε(α) = rdp(α) + ln((α−1)/α) − (ln δ + ln α)/(α−1)

    minimised over the orders, and never below 0. As in dp-accounting's `RdpAccountant`
    (`compute_epsilon`), which this reproduces exactly on the same orders:

    * if `δ² > 1 − e^{−rdp(α)}` the result is ε = 0 (total variation ≤ sqrt(1 − e^{−KL}) ≤ δ,
      because D_α is non-decreasing in α so rdp(α) ≥ KL);
    * orders ≤ 1.01 are not used for the bound (numerically unstable), they give ε = +inf.

    Raises:
        ValueError: unless 0 < δ < 1, the lengths match, every order is ≥ 1 and every RDP value is
            a non-negative number (+inf allowed).
    """
    _check_open_unit("delta", delta)
    alphas = _as_orders(orders)
    values = np.asarray(rdp, dtype=np.float64)
    if values.shape != alphas.shape:
        raise ValueError(
            f"orders and rdp must have the same length, got {alphas.size} and {values.size}"
        )
    if np.any(np.isnan(values)) or np.any(values < 0.0):
        raise ValueError("RDP values must be non-negative numbers")
    best_eps = math.inf
    best_order = float(alphas[0])
    for a, r in zip(alphas.tolist(), values.tolist()):
        if delta**2 + math.expm1(-r) > 0.0:
            eps = 0.0
        elif a > _MIN_CONVERSION_ORDER:
            eps = r + math.log1p(-1.0 / a) - math.log(delta * a) / (a - 1.0)
        else:
            eps = math.inf
        if eps < best_eps:
            best_eps, best_order = eps, a
    return max(0.0, best_eps), best_order


@dataclass(frozen=True)
class PrivacyLoss:
    """An (ε, δ) privacy loss, how it was obtained, and optionally the RDP curve behind it.

    Attributes:
        epsilon: ε ≥ 0 (may be +inf).
        delta: δ ∈ [0, 1].
        method: which bound produced (ε, δ), e.g. "rdp", "basic", "theorem1-advanced",
            "gaussian-rdp", "no-contribution", "none".
        rdp: `(orders, values)`: a *pure* RDP guarantee (no additive δ) of the same mechanism, or
            None.
            When present it lets several losses compose in RDP (Mironov 2017, Prop. 1).
    """

    epsilon: float
    delta: float
    method: str
    rdp: tuple[tuple[float, ...], tuple[float, ...]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Validate the fields and normalise them to plain floats / tuples of floats."""
        if not (0.0 <= self.epsilon <= math.inf):
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError(f"delta must satisfy 0 <= delta <= 1, got {self.delta!r}")
        if not isinstance(self.method, str) or not self.method:
            raise ValueError("method must be a non-empty string")
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        if self.rdp is not None:
            orders, values = self.rdp
            o = tuple(float(a) for a in _as_orders(orders))
            v = tuple(float(x) for x in np.asarray(values, dtype=np.float64).ravel())
            if len(o) != len(v):
                raise ValueError("rdp orders and values must have the same length")
            if any(math.isnan(x) or x < 0.0 for x in v):
                raise ValueError("RDP values must be non-negative numbers")
            object.__setattr__(self, "rdp", (o, v))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: `epsilon`, `delta`, `method`, and `rdp` (if any) as
        `{"orders": [...], "values": [...]}`."""
        out: dict[str, Any] = {"epsilon": self.epsilon, "delta": self.delta, "method": self.method}
        if self.rdp is not None:
            out["rdp"] = {"orders": list(self.rdp[0]), "values": list(self.rdp[1])}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyLoss:
        """Inverse of `to_dict`."""
        rdp = data.get("rdp")
        return cls(
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            method=str(data["method"]),
            rdp=None if rdp is None else (tuple(rdp["orders"]), tuple(rdp["values"])),
        )


def compose_losses(losses: Iterable[PrivacyLoss], delta_target: float) -> PrivacyLoss:
    """Compose the losses a node incurred towards ONE peer across jobs (the cross-job rule).

    The rule (documented composition rule of netdp; basic composition, and RDP composition and
    conversion, Mironov 2017, Prop. 1 and 3):

    1. Basic composition is always computed: `(Σ ε_i, Σ δ_i)`, method "basic".
    2. If every loss carries an RDP curve and all curves use the same orders, the curves are summed
       (RDP composition, B7 Prop. 2; valid under adaptive choice of the jobs) and converted at
       `delta_target` with `rdp_to_dp`, method "rdp", δ = delta_target. The summed curve is
       attached.
    3. Among the candidates whose δ ≤ delta_target, the one with the smaller ε is returned (ties go
       to "rdp"). If no candidate qualifies, i.e. RDP is not available and Σδ > delta_target, the
       basic composition is returned anyway (method "basic"): the caller must compare its δ to its
       budget.

    The basic result carries the summed RDP curve as well when one is available, so results of this
    function can be composed again. An empty list gives `PrivacyLoss(0, 0, "none")` with an all-zero
    curve on DEFAULT_ORDERS.

    Raises:
        ValueError: unless 0 < delta_target < 1.
    """
    _check_open_unit("delta_target", delta_target)
    parts = list(losses)
    if not parts:
        return PrivacyLoss(0.0, 0.0, "none", (DEFAULT_ORDERS, tuple(0.0 for _ in DEFAULT_ORDERS)))
    basic_eps = math.fsum(p.epsilon for p in parts)
    basic_delta = min(1.0, math.fsum(p.delta for p in parts))

    summed: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    curves = [p.rdp for p in parts if p.rdp is not None]
    if len(curves) == len(parts) and all(c[0] == curves[0][0] for c in curves):
        total = np.sum([np.asarray(c[1], dtype=np.float64) for c in curves], axis=0)
        summed = (curves[0][0], tuple(float(x) for x in total))

    basic = PrivacyLoss(basic_eps, basic_delta, "basic", summed)
    if summed is None:
        return basic
    rdp_eps, _ = rdp_to_dp(summed[0], summed[1], delta_target)
    rdp_loss = PrivacyLoss(rdp_eps, delta_target, "rdp", summed)
    if basic_delta <= delta_target and basic_eps < rdp_eps:
        return basic
    return rdp_loss


def smallest_scale(
    eps_of: Callable[[float], float], target: float, what: str = "noise scale"
) -> float:
    """The smallest noise scale s > 0 with `eps_of(s) <= target`, for an ε non-increasing in s:
    doubling from 1 until feasible, then 100 geometric bisection steps (float precision); returns
    the feasible end, so the target always holds at the returned scale."""
    lo, hi = 1e-3, 1.0
    while eps_of(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e9:
            raise ValueError(f"no {what} reaches ε = {target:g}")
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_of(mid) <= target else (mid, hi)
    return hi
