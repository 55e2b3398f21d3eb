"""Network DP of a token walking on the complete graph: sums, histograms and SGD.

Cyffers & Bellet, *Privacy Amplification by Decentralization*, AISTATS 2022: Theorem 3 (sums,
App. D), Theorem 6 (histograms, App. E), Theorem 4 and Lemma 1 (SGD, App. F), Lemma 2 (spotted
contributions when senders and receivers are known, App. G), Proposition 1, the local and central
baselines, and σ calibration; corrections of docs/errata.md (E7–E15).

"ε" of a theorem is the per-contribution local (LDP) level; the result is the total network-DP loss
of one user towards one observer. With c colluders (`colluders=c`, 1 ≤ c < n) every formula uses
`n_eff = n/c`. Composition counts k = N_v + T/n are real high-probability bounds; advanced
composition is increasing in k, so evaluating it at the real k (`k_rounding="real"`) or at the
integer ⌊N_v⌋ + ⌊T/n⌋ (`"floor"`) are both valid. Results are frozen dataclasses with `to_loss()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from netdp_node.privacy.amplification import binomial_quantile, count_bound, subsampled_epsilon
from netdp_node.privacy.checks import int_at_least, open_unit, positive
from netdp_node.privacy.composition import (
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    gaussian_sigma,
)

CycleMode = Literal["closed", "tight"]
CountMode = Literal["chernoff", "exact"]
KRounding = Literal["real", "floor"]


def _n_eff(n: int, colluders: int) -> float:
    """n/c for c colluders among n users; ValueError unless n ≥ 2 and 1 ≤ c < n."""
    nn = int_at_least("n", n, 2)
    c = int_at_least("colluders", colluders, 1)
    if c >= nn:
        raise ValueError(f"colluders must be < n (got colluders={c}, n={nn})")
    return nn / c


def _adv(epsilon: float, delta: float, k: float, delta_prime: float) -> tuple[float, float]:
    """Advanced composition at a possibly non-integer count k ≥ 0.

    Integer k is delegated to `composition.advanced_composition`. For a real k (a high-probability
    bound such as N_v + T/n) the advanced-composition expression is evaluated at k itself, as the
    paper's tables do; this is a valid bound because the realised integer count is ≤ ⌊k⌋ and the
    expression is increasing in k.
    """
    if not (0.0 <= k < math.inf):
        raise ValueError(f"the composition count k must be finite and >= 0, got {k!r}")
    if float(k).is_integer():
        return advanced_composition(epsilon, delta, int(k), delta_prime)
    open_unit("delta_prime", delta_prime)
    eps = math.sqrt(2.0 * k * math.log(1.0 / delta_prime)) * epsilon + k * epsilon * math.expm1(
        epsilon
    )
    return eps, k * delta + delta_prime


def _round_k(k: float, n_visits: float, t_over_n: float, rounding: KRounding) -> float:
    """k = N_v + T/n as a real (the paper's tables) or as the integer ⌊N_v⌋ + ⌊T/n⌋."""
    if rounding == "real":
        return k
    if rounding == "floor":
        return float(math.floor(n_visits + 1e-12) + math.floor(t_over_n + 1e-12))
    raise ValueError(f"k_rounding must be 'real' or 'floor', got {rounding!r}")


@dataclass(frozen=True)
class WalkBound:
    """A complete-graph random-walk guarantee (Theorems 3 and 6) with its intermediates.

    Attributes:
        epsilon, delta: total (ε, δ) = `(adv(ε_cycle, δ', k), kδ + δ' + δ̂)`.
        n_visits: N_v, the bound on the observer's receptions (prob. ≥ 1 − δ̂).
        k: number of composed cycles N_v + T/n_eff (real, or the integer count with floor).
        epsilon_cycle: per-cycle ε.
        m_star: cycle length at which the per-cycle ε is maximal (numeric variants), else None.
        n_eff: n/c.
        method: which variant produced it.
    """

    epsilon: float
    delta: float
    n_visits: float
    k: float
    epsilon_cycle: float
    n_eff: float
    method: str
    m_star: int | None = None

    def to_loss(self) -> PrivacyLoss:
        """The guarantee as a `PrivacyLoss`."""
        return PrivacyLoss(self.epsilon, min(1.0, self.delta), self.method)


def _visits(T: int, n_eff: float, delta_hat: float, counts: CountMode) -> float:
    """N_v for visits ~ Bin(T, 1/n_eff) (Chernoff as in the paper, or exact quantile)."""
    if counts == "chernoff":
        return count_bound(T, 1.0 / n_eff, delta_hat, exact=False)
    if counts == "exact":
        return count_bound(T, 1.0 / n_eff, delta_hat, exact=True)
    raise ValueError(f"counts must be 'chernoff' or 'exact', got {counts!r}")


def max_cycle_epsilon(epsilon: float, n_eff: float) -> tuple[float, int]:
    """Tight per-cycle ε of Theorem 3 (subsampling, exactly):
    `max_{1≤m≤⌊n_eff⌋} ln(1 + (1 − (1 − 1/n_eff)^m)(e^{ε/√m} − 1))`; returns (value, argmax m).
    For n = 1000, ε = 0.5: 0.010026634 at m = 1000 (≈ (1 − 1/e)ε/√n)."""
    mmax = max(1, math.floor(n_eff + 1e-9))
    m = np.arange(1, mmax + 1, dtype=np.float64)
    vals = np.asarray(subsampled_epsilon(epsilon / np.sqrt(m), n_eff, m))
    i = int(np.argmax(vals))
    return float(vals[i]), i + 1


def walk_sum_loss(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    cycle: CycleMode = "closed",
    counts: CountMode = "chernoff",
    colluders: int = 1,
    k_rounding: KRounding = "real",
) -> WalkBound:
    """Theorem 3 with the corrected Appendix D complete formula (docs/errata.md E7, E15).

    Algorithm 3 with Gaussian noise calibrated to (ε, δ)-LDP per contribution (ε < 1) is
    `(adv(ε_c, δ', k), kδ + δ' + δ̂)`-network DP, with k = N_v + T/n cycles (real observations plus
    the ≤ T/n fictive ones) and
    * `cycle="closed"`: ε_c = 3ε/√n (App. D's closed form);
    * `cycle="tight"`: ε_c = max_m ln(1 + (1 − (1−1/n)^m)(e^{ε/√m} − 1)) (subsampling, exactly);
    * `counts="chernoff"`: N_v = T/n + sqrt((3T/n) ln(1/δ̂)) (paper); `"exact"`: binomial quantile.
    The printed formula's second term `sqrt(k)·ε·(e^{3ε/√n} − 1)` is wrong (E7); this is
    `k·ε_c·(e^{ε_c} − 1)`, as in the authors' code. With c colluders every n is n/c.
    Examples (δ = δ' = δ̂ = 1e-7): n = 1000, T = 1e5, ε = 0.5 → N_v = 169.537247,
    k = 269.537247, ε_c = 0.047434, ε = 5.042602, δ = 2.7154e-5; tight 0.961857; tight + exact
    (N_v = 156, k = 256) 0.936716, δ = 2.58e-5; c = 10 → 94.0146.

    Raises:
        ValueError: unless 0 < ε < 1, the δ's are in (0, 1), T ≥ 1, n ≥ 2 and 1 ≤ c < n.
    """
    if not (0.0 < epsilon < 1.0):
        raise ValueError(
            f"Theorem 3 needs 0 < epsilon < 1 (classic Gaussian calibration), got {epsilon!r}"
        )
    open_unit("delta", delta)
    open_unit("delta_prime", delta_prime)
    open_unit("delta_hat", delta_hat)
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    n_v = _visits(TT, ne, delta_hat, counts)
    t_over_n = TT / ne
    k = _round_k(n_v + t_over_n, n_v, t_over_n, k_rounding)
    m_star: int | None = None
    if cycle == "closed":
        eps_c = 3.0 * epsilon / math.sqrt(ne)
    elif cycle == "tight":
        eps_c, m_star = max_cycle_epsilon(epsilon, ne)
    else:
        raise ValueError(f"cycle must be 'closed' or 'tight', got {cycle!r}")
    eps_f, _ = _adv(eps_c, delta, k, delta_prime)
    return WalkBound(
        epsilon=eps_f,
        delta=k * delta + delta_prime + delta_hat,
        n_visits=n_v,
        k=k,
        epsilon_cycle=eps_c,
        n_eff=ne,
        method=f"theorem3-{cycle}-{counts}",
        m_star=m_star,
    )


def walk_sum_loss_as_printed(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    colluders: int = 1,
) -> tuple[float, float]:
    """Appendix D's complete formula *as printed* (docs/errata.md E7), for comparison only:

        ε_f = sqrt((4T/n + 2 sqrt((3T/n) ln(1/δ̂))) ln(1/δ'))·3ε/√n
              + sqrt(2T/n + sqrt((3T/n) ln(1/δ̂)))·ε·(e^{3ε/√n} − 1)
        δ_f = (N_v + T/n)δ + δ' + δ̂

    Examples: 4.820289 (n = 1000, T = 1e5, ε = 0.5, δ's 1e-7), 0.284575, 14.136139. The second term is
    not a bound (it should be k·ε_c·(e^{ε_c} − 1)): use `walk_sum_loss`.
    """
    open_unit("delta", delta)
    open_unit("delta_prime", delta_prime)
    open_unit("delta_hat", delta_hat)
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    r = TT / ne
    s = math.sqrt(3.0 * r * math.log(1.0 / delta_hat))
    ec = 3.0 * epsilon / math.sqrt(ne)
    eps = math.sqrt((4.0 * r + 2.0 * s) * math.log(1.0 / delta_prime)) * ec + math.sqrt(
        2.0 * r + s
    ) * epsilon * math.expm1(ec)
    return eps, (r + s + r) * delta + delta_prime + delta_hat


def histogram_cycle_epsilon(epsilon: float, n_eff: float, delta: float) -> tuple[float, int]:
    """Remark 4's recommended numeric per-cycle ε for histograms:

        ε_cycle* = max_{1≤m≤⌊n_eff⌋} ln(1 + (1 − (1−1/n_eff)^m)(e^{min(ε, ε_FMT(ε, m, δ))} − 1))

    where ε_FMT is `fmt_shuffle_epsilon` with m shuffled reports, replaced by ε where its condition
    `ε ≤ ln(m/(16 ln(2/δ)))` fails. Returns (value, argmax m). Examples: n = 1e4, ε = 0.5, δ = 1e-7 →
    0.0646096 at m = n.
    """
    open_unit("delta", delta)
    mmax = max(1, math.floor(n_eff + 1e-9))
    m = np.arange(1, mmax + 1, dtype=np.float64)
    e = math.exp(epsilon)
    frac = math.tanh(epsilon / 2.0)
    ln4 = math.log(4.0 / delta)
    eps_fmt = np.log1p(frac * (8.0 * np.sqrt(e * ln4) / np.sqrt(m) + 8.0 * e / m))
    applicable = epsilon <= np.log(m / (16.0 * math.log(2.0 / delta)))
    eps_a = np.where(applicable, np.minimum(epsilon, eps_fmt), epsilon)
    vals = np.asarray(subsampled_epsilon(eps_a, n_eff, m))
    i = int(np.argmax(vals))
    return float(vals[i]), i + 1


def walk_histogram_loss(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    cycle: Literal["closed", "numeric"] = "numeric",
    counts: CountMode = "chernoff",
    colluders: int = 1,
    k_rounding: KRounding = "real",
    constant: float = 21.0,
) -> WalkBound:
    """Theorem 6 (App. E; docs/errata.md E7/E8, Remark 4): complete-graph histogram (Alg. 5).

    RR with γ = L/(e^ε + L − 1) per contribution (pure ε-LDP). The guarantee is
    `(adv(ε_c, δ', k), kδ + δ' + δ̂)` with k = N_v + T/n and
    * `cycle="closed"` (corrected form, same E7 fix as Thm 3): ε_c = C·sqrt(ln(4/δ))·ε/√n with
      C = `constant` = 21 (the paper's constant). It needs ε ≤ 1 and n ≥ 14² ln(4/δ).
      Erratum E8 says the paper's own inequalities only give C = 42. C = 21 is nevertheless a valid
      bound, by a tighter chain: with r = m/(n−1), `1 − (1−1/n)^m ≤ 1 − e^{−r}` and
      `e^x − 1 ≤ (e − 1)x` for x ≤ 1. For m ≥ 14² ln(4/δ) (x = 14 sqrt(ln(4/δ)/m)·ε ≤ 1) this gives
      `ε_cycle ≤ (e−1)·14·sqrt(ln(4/δ))·ε·(1 − e^{−r})/sqrt(r(n−1)) ≤ 15.3·sqrt(ln(4/δ)/n)·ε`
      ((1 − e^{−r})/√r is increasing for r ≤ n/(n−1)); for smaller m the subsampling term with ε
      itself is `≤ (e−1)(1 − e^{−r})ε ≤ 1.09·sqrt(14² ln(4/δ)/n)·ε ≤ 15.3·sqrt(ln(4/δ)/n)·ε`. The
      tests check C = 21 against the exact expression on a grid (worst ratio ≈ 10.4). Pass
      constant=42 for the conservative reading.
    * `cycle="numeric"` (Remark 4, recommended): ε_c = `histogram_cycle_epsilon(ε, n, δ)`.
    Examples (δ's 1e-7): n = 1e6, T = 1e8, ε = 0.5 closed → ε_c = 0.043930, ε = 4.626671;
    n = 1e4, T = 1e6 closed → 0.439302, 106.27; numeric → 0.0646096, 7.184820.

    Raises:
        ValueError: on bad parameters, or (closed) if ε > 1 or n_eff < 14² ln(4/δ).
    """
    if not (0.0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    open_unit("delta", delta)
    open_unit("delta_prime", delta_prime)
    open_unit("delta_hat", delta_hat)
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    n_v = _visits(TT, ne, delta_hat, counts)
    t_over_n = TT / ne
    k = _round_k(n_v + t_over_n, n_v, t_over_n, k_rounding)
    m_star: int | None = None
    if cycle == "closed":
        if epsilon > 1.0:
            raise ValueError(f"Theorem 6's closed form needs epsilon <= 1, got {epsilon!r}")
        need = 14.0**2 * math.log(4.0 / delta)
        if ne < need:
            raise ValueError(
                f"Theorem 6's closed form needs n_eff >= 14^2 ln(4/delta) = {need:.2f}, got "
                f"{ne:.2f}; use cycle='numeric' (Remark 4)"
            )
        eps_c = constant * math.sqrt(math.log(4.0 / delta)) * epsilon / math.sqrt(ne)
    elif cycle == "numeric":
        eps_c, m_star = histogram_cycle_epsilon(epsilon, ne, delta)
    else:
        raise ValueError(f"cycle must be 'closed' or 'numeric', got {cycle!r}")
    eps_f, _ = _adv(eps_c, delta, k, delta_prime)
    return WalkBound(
        epsilon=eps_f,
        delta=k * delta + delta_prime + delta_hat,
        n_visits=n_v,
        k=k,
        epsilon_cycle=eps_c,
        n_eff=ne,
        method=f"theorem6-{cycle}-{counts}",
        m_star=m_star,
    )


def walk_histogram_loss_as_printed(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    colluders: int = 1,
) -> tuple[float, float]:
    """Theorem 6 *as printed* (docs/errata.md E8), for comparison only: Theorem 3's printed shape with
    ε_c = 21 sqrt(ln(4/δ))ε/√n, i.e. second term `sqrt(2T/n + sqrt((3T/n) ln(1/δ̂)))·ε·(e^{ε_c} − 1)`.
    """
    open_unit("delta", delta)
    open_unit("delta_prime", delta_prime)
    open_unit("delta_hat", delta_hat)
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    r = TT / ne
    s = math.sqrt(3.0 * r * math.log(1.0 / delta_hat))
    ec = 21.0 * math.sqrt(math.log(4.0 / delta)) * epsilon / math.sqrt(ne)
    eps = math.sqrt((4.0 * r + 2.0 * s) * math.log(1.0 / delta_prime)) * ec + math.sqrt(
        2.0 * r + s
    ) * epsilon * math.expm1(ec)
    return eps, (2.0 * r + s) * delta + delta_prime + delta_hat


def ldp_baseline(
    n_contributions: float,
    epsilon: float,
    delta: float,
    delta_prime: float,
    *,
    naive_min: bool = False,
) -> tuple[float, float]:
    """Local-DP baseline: advanced composition of the N contributions of one user at level ε:
    `(adv(ε, δ', N), Nδ + δ')`.

    With `naive_min=True`, `min(adv, N·ε)` as in the authors' Fig. 1(a) code (the naive candidate
    comes with δ = Nδ). N may be a real high-probability bound (see the module docstring).
    """
    if not (0.0 <= epsilon < math.inf):
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    eps, dlt = _adv(epsilon, delta, n_contributions, delta_prime)
    if naive_min and n_contributions * epsilon < eps:
        return n_contributions * epsilon, n_contributions * delta
    return eps, dlt


def ldp_walk_sum(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    counts: CountMode = "chernoff",
    naive_min: bool = False,
) -> tuple[float, float]:
    """LDP analogue of Theorem 3: the same T-step walk, every contribution visible.

    `ε_LDP = adv(ε, δ', N_v)` with N_v the count bound of Bin(T, 1/n); δ = N_v δ + δ' + δ̂.
    Example (n = 1000, T = 1e5, ε = 0.5, δ's 1e-7): 91.954823; with naive_min 84.768623.
    """
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, 1)
    n_v = _visits(TT, ne, delta_hat, counts)
    eps, dlt = ldp_baseline(n_v, epsilon, delta, delta_prime, naive_min=naive_min)
    return eps, dlt + delta_hat


def bassily_central_sigma(
    n: int, T: int, epsilon: float, delta: float, lipschitz: float = 1.0
) -> float:
    """Central DP-SGD noise std of Bassily et al. 2014 as used for Fig. 2:
    `σ_central = 16 L sqrt(T ln(2/δ) ln(1.25T/(δn)))/(n ε)` (trusted curator, T steps each on one
    uniformly random user's data). Examples: n = 2000, T = 20 000, δ = 1e-6, L = 0.4 → 0.696821 (ε = 10)
    and 6.968208 (ε = 1); L = 1 → 1.742052, 17.420519.
    """
    nn = int_at_least("n", n, 1)
    TT = int_at_least("T", T, 1)
    positive("epsilon", epsilon)
    open_unit("delta", delta)
    positive("lipschitz", lipschitz)
    return (
        16.0
        * lipschitz
        * math.sqrt(TT * math.log(2.0 / delta) * math.log(1.25 * TT / (delta * nn)))
        / (nn * epsilon)
    )


@dataclass(frozen=True)
class CalibratedSigma:
    """A noise std found for a target ε, with the per-contribution ε0 and the achieved guarantee."""

    sigma: float
    epsilon0: float
    epsilon: float
    delta: float
    method: str


def calibrate_local_sgd_sigma(
    K_max: int,
    eps_target: float,
    delta: float,
    *,
    lipschitz: float = 1.0,
    sensitivity_factor: float = 2.0,
    delta_split: Literal["total", "code"] = "total",
) -> CalibratedSigma:
    """Local DP-SGD noise for a total budget (ε, δ) over K_max contributions.

    Solve `sqrt(2K ln(1/δ_))ε0 + Kε0(e^{ε0} − 1) = ε_tot` for ε0 by bisection (advanced composition
    with per-step δ_ and δ' = δ_), then `σ = sqrt(2 ln(1.25/δ_))·Δ/ε0` with Δ =
    sensitivity_factor·L.

    * `sensitivity_factor=2` is Algorithm 4's user-level sensitivity 2L (paper-faithful, default);
      1 reproduces the authors' findSigma.
    * `delta_split="total"` (default) takes δ_ = δ/(K+1), so that the total Kδ_ + δ_ is exactly δ;
      `"code"` takes δ_ = δ/K as findSigma does (total δ(1 + 1/K), slightly above δ).

    Examples (K = 12, δ = 1e-6): findSigma (factor 1, "code") L = 0.4 → 5.871056 (ε0 = 0.39166) at
    ε = 10 and 46.868738 at ε = 1; the "paper-faithful σ_local (sens. 2L)" column, 11.788 / 94.181
    (L = 0.4) and 29.470 / 235.453 (L = 1), is factor 2 with δ_ = δ/(K+1).
    """
    kk = int_at_least("K_max", K_max, 1)
    positive("eps_target", eps_target)
    open_unit("delta", delta)
    if delta_split == "total":
        d_ = delta / (kk + 1)
    elif delta_split == "code":
        d_ = delta / kk
    else:
        raise ValueError(f"delta_split must be 'total' or 'code', got {delta_split!r}")

    def total(e0: float) -> float:
        return advanced_composition(e0, d_, kk, d_)[0]

    lo, hi = 0.0, eps_target / math.sqrt(kk)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if total(mid) <= eps_target:
            lo = mid
        else:
            hi = mid
    eps0 = lo
    sens = sensitivity_factor * positive("lipschitz", lipschitz)
    sigma = gaussian_sigma(eps0, d_, sens)
    eps_tot, delta_tot = advanced_composition(eps0, d_, kk, d_)
    return CalibratedSigma(sigma, eps0, eps_tot, delta_tot, f"local-sgd-advanced-{delta_split}")


@dataclass(frozen=True)
class SgdBound:
    """A Theorem 4 / Lemma 1 guarantee of network DP-SGD on the complete graph.

    Attributes:
        epsilon: ε_c (total, towards any observer).
        delta: δ_c (+ δ̂ when a probabilistic count bound was used).
        alpha: Rényi order used.
        alpha_max: `(1 + sqrt(1 + 2σ²/L²))/2`, the largest order Lemma 1 allows.
        constrained: True if α = α_max (Remark 5), False if the unconstrained optimum was used.
        T_u: contributions per user composed (N_u or K_max).
        sigma_over_L: σ/L.
        q: the closed form's q (closed form only), else None.
        method: "theorem4-closed" or "theorem4-numeric".
    """

    epsilon: float
    delta: float
    alpha: float
    alpha_max: float
    constrained: bool
    T_u: float
    sigma_over_L: float
    method: str
    q: float | None = None

    def to_loss(self) -> PrivacyLoss:
        """The guarantee as a `PrivacyLoss`."""
        return PrivacyLoss(self.epsilon, min(1.0, self.delta), self.method)


def sgd_alpha_max(sigma_over_L: float) -> float:
    """Largest Rényi order allowed by Lemma 1's condition σ ≥ L sqrt(2α(α−1)):
    `α_max = (1 + sqrt(1 + 2σ²/L²))/2`. α_max(10) = 7.588723."""
    s = positive("sigma_over_L", sigma_over_L)
    return (1.0 + math.sqrt(1.0 + 2.0 * s * s)) / 2.0


def _delay_term(n_eff: float, geometric_exact: bool) -> float:
    """E_t~Geom(1/n_eff)[1/t]: ln(n)/n as in the paper, or the exact ln(n)/(n−1) (E10)."""
    return math.log(n_eff) / (n_eff - 1.0 if geometric_exact else n_eff)


def walk_sgd_rdp(
    n: int,
    T_u: float,
    sigma_over_L: float,
    alpha: float,
    *,
    factor: float = 4.0,
    colluders: int = 1,
    geometric_exact: bool = False,
) -> float:
    """Lemma 1 (App. F; docs/errata.md E10, E11): Algorithm 4 is
    `(α, 4 T_u α L² ln n/(σ² n))`-NRDP for 1 < α ≤ α_max(σ/L).

    `factor=4` is Lemma 1 (weak convexity 2 × amplification by iteration 2); `factor=2` is the
    authors' findSigma. `geometric_exact=True` uses the exact `ln n/(n−1)` (E10). With c colluders,
    n → n/c (delay ~ Geom(c/n)). Spot value: σ/L = 10, T_u = 12, n = 2000, α = 5 →
    0.009121083.

    Raises:
        ValueError: if α ≤ 1 or α > α_max (σ < L sqrt(2α(α−1)): weak convexity does not apply).
    """
    ne = _n_eff(n, colluders)
    s = positive("sigma_over_L", sigma_over_L)
    if not (alpha > 1.0):
        raise ValueError(f"alpha must be > 1, got {alpha!r}")
    amax = sgd_alpha_max(s)
    if alpha > amax * (1.0 + 1e-12):
        raise ValueError(
            f"Lemma 1 needs sigma >= L sqrt(2 alpha (alpha-1)), i.e. alpha <= {amax:.6f} for "
            f"sigma/L = {s}, got alpha = {alpha!r}"
        )
    if not (T_u >= 0):
        raise ValueError(f"T_u must be >= 0, got {T_u!r}")
    return factor * T_u * alpha * _delay_term(ne, geometric_exact) / (s * s)


def walk_sgd_loss_numeric(
    n: int,
    T_u: float,
    sigma_over_L: float,
    delta_c: float,
    *,
    factor: float = 4.0,
    colluders: int = 1,
    geometric_exact: bool = False,
) -> SgdBound:
    """Theorem 4 via Lemma 1 + Prop. 3, minimised over 1 < α ≤ α_max (Remark 5).

    `ε_c(α) = aα + ln(1/δ_c)/(α − 1)` with `a = factor·T_u·ln n/(σ²/L²·n)`; the unconstrained optimum
    `α* = 1 + sqrt(ln(1/δ_c)/a)` is used if ≤ α_max, otherwise α_max (where the constraint binds).
    T_u is the deterministic cap K_max (δ = δ_c), or a count bound N_u (then add δ̂ yourself, or
    use `walk_sgd_loss`). Examples (δ_c = 1e-6): n = 1e4, T_u = 164.378981, σ/L = 21.195210 → 0.973971 at
    α_max = 15.4956; n = 1000, T_u = 10 643.79 → 6.669479 at α* = 5.5938; n = 2000, T_u =
    30.358421, σ/L = 10.597605 → 2.003660 at α_max = 8.0103.
    """
    ne = _n_eff(n, colluders)
    s = positive("sigma_over_L", sigma_over_L)
    open_unit("delta_c", delta_c)
    if not (T_u >= 0 and math.isfinite(T_u)):
        raise ValueError(f"T_u must be a finite number >= 0, got {T_u!r}")
    log1d = math.log(1.0 / delta_c)
    amax = sgd_alpha_max(s)
    a = factor * T_u * _delay_term(ne, geometric_exact) / (s * s)
    alpha_star = math.inf if a == 0.0 else 1.0 + math.sqrt(log1d / a)
    constrained = alpha_star > amax
    alpha = amax if constrained else alpha_star
    eps = a * alpha + log1d / (alpha - 1.0)
    return SgdBound(eps, delta_c, alpha, amax, constrained, float(T_u), s, "theorem4-numeric")


def walk_sgd_loss_closed(
    n: int, T_u: float, sigma_over_L: float, delta_c: float, *, colluders: int = 1
) -> SgdBound:
    """Theorem 4's closed form in σ (App. F step 6, Feldman et al. 2018 Thm 32; E12):
    `q = max(2T_u ln n/n, 2 ln(1/δ_c))`, `α = (σ/L) sqrt(ln(1/δ_c)/q)`,
    `ε_c = 4 sqrt(q ln(1/δ_c))/(σ/L)`.

    The derivation needs α > 2 (docs/errata.md E12: holds iff ε_c < 2 ln(1/δ_c)); `constrained` is
    reported False and a ValueError is raised when α ≤ 2 — use `walk_sgd_loss_numeric` then.
    """
    ne = _n_eff(n, colluders)
    s = positive("sigma_over_L", sigma_over_L)
    open_unit("delta_c", delta_c)
    log1d = math.log(1.0 / delta_c)
    q = max(2.0 * T_u * math.log(ne) / ne, 2.0 * log1d)
    alpha = s * math.sqrt(log1d / q)
    eps = 4.0 * math.sqrt(q * log1d) / s
    if alpha <= 2.0:
        raise ValueError(
            f"Theorem 4's closed form needs alpha > 2 (docs/errata.md E12), got alpha = {alpha:.4f} "
            f"(epsilon_c = {eps:.4f} >= 2 ln(1/delta_c)); use walk_sgd_loss_numeric"
        )
    return SgdBound(
        eps, delta_c, alpha, sgd_alpha_max(s), False, float(T_u), s, "theorem4-closed", q
    )


def walk_sgd_loss(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_hat: float,
    *,
    counts: CountMode = "chernoff",
    colluders: int = 1,
    method: Literal["closed", "numeric"] = "closed",
    factor: float = 4.0,
) -> SgdBound:
    """Theorem 4: Algorithm 4 with per-step noise `σ = sqrt(8 ln(1.25/δ)) L/ε` (the paper
    asks ε < 1 and δ < 1/2; only σ matters for the RDP proof, so any ε > 0 is accepted) is
    `(ε', δ + δ̂)`-network DP, with N_u the count bound of Bin(T, 1/n) and
    * `method="closed"`: Eq. 7, `ε' = sqrt(2q ln(1/δ))·ε/sqrt(ln(1.25/δ))`,
      `q = max(2N_u ln n/n, 2 ln(1/δ))`;
    * `method="numeric"`: Lemma 1 + Remark 5 at T_u = N_u (`walk_sgd_loss_numeric`, δ_c = δ).
    Examples (δ = δ̂ = 1e-6): n = 1e4, T = 1e6, ε = 0.5 → N_u = 164.378981, q = 27.631021, closed
    3.687264, numeric 0.973971.
    """
    # Only σ enters the RDP analysis, so ε ≥ 1 (e.g. the paper's ε = 1.0 row) is accepted: ε < 1 is
    # needed only to call each step "(ε, δ)-LDP" under the classic calibration.
    positive("epsilon", epsilon)
    if not (0.0 < delta < 0.5):
        raise ValueError(f"Theorem 4 needs 0 < delta < 1/2, got {delta!r}")
    open_unit("delta_hat", delta_hat)
    TT = int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    n_u = _visits(TT, ne, delta_hat, counts)
    s = math.sqrt(8.0 * math.log(1.25 / delta)) / epsilon
    if method == "closed":
        r = walk_sgd_loss_closed(n, n_u, s, delta, colluders=colluders)
        # Eq. 7 form (identical value): sqrt(2q ln(1/δ))·ε/sqrt(ln(1.25/δ))
        assert r.q is not None
        eps = (
            math.sqrt(2.0 * r.q * math.log(1.0 / delta))
            * epsilon
            / math.sqrt(math.log(1.25 / delta))
        )
        return SgdBound(eps, delta + delta_hat, r.alpha, r.alpha_max, False, n_u, s, r.method, r.q)
    if method == "numeric":
        r = walk_sgd_loss_numeric(n, n_u, s, delta, factor=factor, colluders=colluders)
        return SgdBound(
            r.epsilon, delta + delta_hat, r.alpha, r.alpha_max, r.constrained, n_u, s, r.method
        )
    raise ValueError(f"method must be 'closed' or 'numeric', got {method!r}")


def calibrate_sgd_sigma(
    n: int,
    K_max: int,
    eps_target: float,
    delta_c: float,
    factor: float = 4.0,
    *,
    colluders: int = 1,
    geometric_exact: bool = False,
    tol: float = 1e-12,
) -> float:
    """Minimal σ/L with `walk_sgd_loss_numeric(n, K_max, σ/L, δ_c).epsilon ≤ ε_target` (Remark 5).

    ε_c is decreasing in σ (a ∝ 1/σ² and α_max grows with σ), so bisection is exact; the authors'
    code instead multiplies σ by 1.15 and always takes α = α_max. The cap K_max is deterministic, so
    no δ̂. `factor=4` is Lemma 1, `factor=2` the authors' code. Examples (n = 2000, K_max = 12, δ_c
    = 1e-6): ε = 10 → 2.578620, ε = 1 → 20.361907 (factor 2: 2.571932, 20.297372). Multiply by L for
    σ. Spotted contributions (App. G) are NOT included.
    """
    positive("eps_target", eps_target)
    int_at_least("K_max", K_max, 0)

    def eps_at(s: float) -> float:
        return walk_sgd_loss_numeric(
            n,
            K_max,
            s,
            delta_c,
            factor=factor,
            colluders=colluders,
            geometric_exact=geometric_exact,
        ).epsilon

    lo, hi = 1e-6, 1.0
    while eps_at(hi) > eps_target:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise ValueError("no sigma/L below 1e12 reaches the target epsilon")
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if eps_at(mid) <= eps_target:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class SpottedLoss:
    """Loss from spotted contributions (App. G, Lemma 2 corrected; or the edge-usage cap).

    Attributes:
        n_spotted: N_s, the (high-probability or deterministic) bound on spotted contributions.
        epsilon_simple, delta_simple: `(N_s ε, N_s δ [+ δ̃])`.
        epsilon_advanced, delta_advanced: `(sqrt(2N_s ln(1/δ'))ε + N_s ε(e^ε−1), N_s δ + δ' [+ δ̃])`
            (E14: the paper drops the 2).
        epsilon_advanced_as_printed: the paper's `sqrt(N_s ln(1/δ'))ε + N_s ε(e^ε−1)` (not a bound).
        epsilon, delta: the better (smaller ε) of simple and advanced, with its δ.
        method: "lemma2-simple", "lemma2-advanced", "edge-cap-simple", "edge-cap-advanced".
    """

    n_spotted: float
    epsilon_simple: float
    delta_simple: float
    epsilon_advanced: float
    delta_advanced: float
    epsilon_advanced_as_printed: float
    epsilon: float
    delta: float
    method: str

    def to_loss(self) -> PrivacyLoss:
        """The chosen guarantee as a `PrivacyLoss`."""
        return PrivacyLoss(self.epsilon, min(1.0, self.delta), self.method)


def _spotted(
    n_s: float, epsilon: float, delta: float, delta_prime: float, extra_delta: float, prefix: str
) -> SpottedLoss:
    eps_simple = n_s * epsilon
    d_simple = n_s * delta + extra_delta
    eps_adv, d_adv = _adv(epsilon, delta, n_s, delta_prime)
    d_adv += extra_delta
    printed = math.sqrt(n_s * math.log(1.0 / delta_prime)) * epsilon + n_s * epsilon * math.expm1(
        epsilon
    )
    if eps_simple <= eps_adv:
        eps, dlt, method = eps_simple, d_simple, f"{prefix}-simple"
    else:
        eps, dlt, method = eps_adv, d_adv, f"{prefix}-advanced"
    return SpottedLoss(n_s, eps_simple, d_simple, eps_adv, d_adv, printed, eps, dlt, method)


def spotted_loss(
    N_u: float,
    n: int,
    epsilon: float,
    delta_tilde: float,
    delta_prime: float,
    exact: bool = True,
    *,
    delta: float = 0.0,
    colluders: int = 1,
) -> SpottedLoss:
    """Lemma 2 with the E14 correction (App. G): loss of spotted contributions.

    Each of u's ≤ N_u contributions is spotted by an observer (directly preceded or followed by one
    of its contributions) with probability `1 − (1 − c/n)²` ≤ 2c/n; a spotted contribution costs the
    full local (ε, δ). With probability 1 − δ̃ at most N_s are spotted:
    * `exact=True` (recommended, E15): `N_s = min{N : P(Bin(⌈N_u⌉, 1 − (1−c/n)²) > N) ≤ δ̃}`;
    * `exact=False`: the paper's Chernoff `N_s = 2N_u/n + sqrt((6N_u/n) ln(1/δ̃))` (invalid at
      these tiny means).
    The result (with δ̃ in its δ) is to be ADDED to the Theorem 3/4/6 totals (basic composition).
    `delta` is the local δ of one contribution (0 for pure-ε randomizers such as RR).
    Examples (N_u = 12, n = 2000, ε = 0.5, δ̃ = δ' = 1e-6): Chernoff N_s = 0.717236, simple 0.358618,
    advanced as printed 1.806570, corrected 2.458512; exact N_s = 2, simple 1.0.
    """
    ne = _n_eff(n, colluders)
    if not (0.0 <= N_u < math.inf):
        raise ValueError(f"N_u must be a finite number >= 0, got {N_u!r}")
    if not (0.0 <= epsilon < math.inf):
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    open_unit("delta_tilde", delta_tilde)
    open_unit("delta_prime", delta_prime)
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    if exact:
        p = -math.expm1(2.0 * math.log1p(-1.0 / ne))
        trials = math.ceil(N_u - 1e-12)
        n_s = float(binomial_quantile(trials, p, delta_tilde)) if trials > 0 else 0.0
    else:
        n_s = 2.0 * N_u / ne + math.sqrt((6.0 * N_u / ne) * math.log(1.0 / delta_tilde))
    return _spotted(n_s, epsilon, delta, delta_prime, delta_tilde, "lemma2")


def spotted_loss_capped(B: int, epsilon: float, delta: float, delta_prime: float) -> SpottedLoss:
    """Spotted loss under the edge-usage cap (App. G option (b)): at most B real
    contributions of u are adjacent to any given user, deterministically, so the spotted loss is the
    simple `(Bε, Bδ)` or advanced `(adv(ε, δ', B), Bδ + δ')` composition of B local mechanisms,
    with no δ̃. The smaller ε is returned as (epsilon, delta).
    """
    bb = int_at_least("B", B, 0)
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    open_unit("delta_prime", delta_prime)
    if bb == 0:
        return SpottedLoss(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "edge-cap-none")
    eps_b, d_b = basic_composition(epsilon, delta, bb)
    r = _spotted(float(bb), epsilon, delta, delta_prime, 0.0, "edge-cap")
    assert math.isclose(r.epsilon_simple, eps_b) and math.isclose(r.delta_simple, d_b)
    return r


def calibrate_sum_sigma(
    n: int,
    T: int,
    eps_target: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    sensitivity: float = 1.0,
    cycle: CycleMode = "tight",
    counts: CountMode = "exact",
    colluders: int = 1,
    spotted_delta_tilde: float | None = None,
) -> CalibratedSigma:
    """Noise std for complete-graph summation (Algorithm 3) at a target total ε.

    Finds, by bisection, the largest per-contribution LDP level ε0 ∈ (0, 1) with
    `walk_sum_loss(n, T, ε0, ...).epsilon ≤ ε_target` (Theorem 3's ε is increasing in ε0), and returns
    `σ = Δ sqrt(2 ln(1.25/δ))/ε0` (`gaussian_sigma`). With `spotted_delta_tilde` set, the Lemma 2
    (exact, corrected) loss of spotted contributions, needed when senders and receivers are known
    (App. G), is added to the total (basic composition), using N_u = N_v.
    If even ε0 → 1 meets the target, ε0 = 1 − 1e-9 is used (the classic calibration needs ε0 < 1).

    Raises:
        ValueError: if no ε0 > 1e-9 reaches the target, or on bad parameters.
    """
    positive("eps_target", eps_target)

    def total(e0: float) -> tuple[float, float]:
        b = walk_sum_loss(
            n,
            T,
            e0,
            delta,
            delta_prime,
            delta_hat,
            cycle=cycle,
            counts=counts,
            colluders=colluders,
        )
        eps, dlt = b.epsilon, b.delta
        if spotted_delta_tilde is not None:
            s = spotted_loss(
                b.n_visits,
                n,
                e0,
                spotted_delta_tilde,
                delta_prime,
                True,
                delta=delta,
                colluders=colluders,
            )
            eps, dlt = eps + s.epsilon, dlt + s.delta
        return eps, dlt

    lo, hi = 1e-9, 1.0 - 1e-9
    if total(lo)[0] > eps_target:
        raise ValueError(f"the target epsilon {eps_target!r} is below what any epsilon0 > 0 gives")
    if total(hi)[0] <= eps_target:
        lo = hi
    else:
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if total(mid)[0] <= eps_target:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-13:
                break
    eps, dlt = total(lo)
    method = f"theorem3-{cycle}-{counts}" + ("+lemma2" if spotted_delta_tilde is not None else "")
    return CalibratedSigma(gaussian_sigma(lo, delta, sensitivity), lo, eps, dlt, method)


@dataclass(frozen=True)
class UtilityBound:
    """Proposition 1: `G` and the bound `2DG(2 + ln T)/sqrt(T)` on E[F(τ) − F(w*)]."""

    G: float
    bound: float


def walk_sgd_utility_bound(
    D: float, L: float, d: int, epsilon: float, delta: float, T: int
) -> UtilityBound:
    """Proposition 1 (Shamir & Zhang 2013, Thm 2): with diam(W) ≤ D,
    `G² = L² + 8dL² ln(1.25/δ)/ε²` (= L² + dσ²) and η_t = D/(G√t), the last iterate of Algorithm 4
    satisfies `E[F(τ) − F(w*)] ≤ 2DG(2 + ln T)/sqrt(T)`. Examples: L = 1, d = 8, ε = 1, δ = 1e-6,
    D = 2, T = 20 000 → G = 29.991230, bound 10.097491.
    """
    positive("D", D)
    positive("L", L)
    dd = int_at_least("d", d, 1)
    positive("epsilon", epsilon)
    open_unit("delta", delta)
    TT = int_at_least("T", T, 1)
    G = math.sqrt(L * L + 8.0 * dd * L * L * math.log(1.25 / delta) / (epsilon * epsilon))
    return UtilityBound(G, 2.0 * D * G * (2.0 + math.log(TT)) / math.sqrt(TT))
