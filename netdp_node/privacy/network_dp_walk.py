"""Network DP accounting beyond ring summation (pure functions, no I/O, no global state).

Cyffers & Bellet, *Privacy Amplification by Decentralization*, AISTATS 2022, as specified in
`network-dp.md` ("the spec"): the ring histogram (Theorem 2, App. B), the complete-graph random walk
for summation (Theorem 3, App. D), histograms (Theorem 6, App. E) and SGD (Theorem 4, Lemma 1,
App. F), spotted contributions when sender and receiver are known (Lemma 2, App. G, §2.8), the
building blocks B3–B6 of spec §3.0, the local/central baselines and Proposition 1.

Conventions (spec §0):

* `ln` is the natural logarithm everywhere.
* "ε" of a complete-graph theorem is the per-contribution local (LDP) level of the randomizer (the
  figures' ε0); the result is the total network-DP loss of one user towards one observer.
* Collusion (spec §1.3, §2.9): every complete-graph function takes `colluders=c` (an integer
  1 ≤ c < n) and evaluates its formula with `n_eff = n/c` (visits ~ Bin(T, c/n), cycle cap n/c,
  delay ~ Geom(c/n)). c = 1 is Definition 1.
* Real-valued composition counts. The spec's formulas compose k = N_v + T/n cycles where N_v is a
  real high-probability bound. The realised count is an integer ≤ ⌊N_v⌋ + ⌊T/n⌋ ≤ k and the
  advanced-composition bound (B1) is increasing in k, so evaluating B1 at the real k, as the spec's
  tables do, is a valid bound (`k_rounding="real"`, the default); `k_rounding="floor"` uses the
  integer count ⌊N_v⌋ + ⌊T/n⌋, which is tighter and just as valid. (`advanced_composition` of
  `composition.py` rounds a non-integer k *up*, which is valid but never needed here.)

Results are frozen dataclasses carrying the final (ε, δ) and the intermediate quantities; each can be
turned into a `PrivacyLoss` with `to_loss()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from netdp_node.lazy import lazy_module
from netdp_node.privacy.composition import (
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    gaussian_sigma,
)

stats = lazy_module("scipy.stats")  # lazy: start-up cost

__all__ = [
    "CalibratedSigma",
    "SgdBound",
    "SpottedLoss",
    "Theorem2Result",
    "UtilityBound",
    "WalkBound",
    "bassily_central_sigma",
    "calibrate_local_sgd_sigma",
    "calibrate_sgd_sigma",
    "calibrate_sum_sigma",
    "chernoff_count_bound",
    "count_bound",
    "erlingsson_shuffle_epsilon",
    "fmt_shuffle_condition",
    "fmt_shuffle_epsilon",
    "fmt_shuffle_epsilon_simplified",
    "ldp_baseline",
    "ldp_walk_sum",
    "lemma1_nrdp",
    "max_cycle_epsilon",
    "prop1_utility_bound",
    "ring_histogram_gamma_as_printed",
    "ring_histogram_local_epsilon",
    "ring_histogram_local_epsilon_fmt",
    "rr_gamma",
    "sgd_alpha_max",
    "spotted_loss",
    "spotted_loss_capped",
    "subsampled_epsilon",
    "theorem2",
    "theorem3",
    "theorem3_as_printed",
    "theorem4",
    "theorem4_closed",
    "theorem4_numeric",
    "theorem6",
    "theorem6_as_printed",
    "theorem6_cycle_epsilon",
]

CycleMode = Literal["closed", "tight"]
CountMode = Literal["chernoff", "exact"]
KRounding = Literal["real", "floor"]


# --------------------------------------------------------------------------- validation helpers


def _open_unit(name: str, value: float) -> float:
    """Return value as a float; ValueError unless 0 < value < 1 (rejects NaN)."""
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return float(value)


def _positive(name: str, value: float) -> float:
    """Return value as a float; ValueError unless it is finite and > 0."""
    if not (0.0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _int_at_least(name: str, value: int, minimum: int) -> int:
    """Return value as an int; ValueError unless it is an integer ≥ minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _n_eff(n: int, colluders: int) -> float:
    """n/c for c colluders among n users (spec §2.9); ValueError unless n ≥ 2 and 1 ≤ c < n."""
    nn = _int_at_least("n", n, 2)
    c = _int_at_least("colluders", colluders, 1)
    if c >= nn:
        raise ValueError(f"colluders must be < n (got colluders={c}, n={nn})")
    return nn / c


def _adv(epsilon: float, delta: float, k: float, delta_prime: float) -> tuple[float, float]:
    """Advanced composition (spec §3.0 B1) at a possibly non-integer count k ≥ 0.

    Integer k is delegated to `composition.advanced_composition`. For a real k (a high-probability
    bound such as N_v + T/n) the B1 expression is evaluated at k itself, as the spec's tables do; this
    is a valid bound because the realised integer count is ≤ ⌊k⌋ and B1 is increasing in k.
    """
    if not (0.0 <= k < math.inf):
        raise ValueError(f"the composition count k must be finite and >= 0, got {k!r}")
    if float(k).is_integer():
        return advanced_composition(epsilon, delta, int(k), delta_prime)
    _open_unit("delta_prime", delta_prime)
    eps = math.sqrt(2.0 * k * math.log(1.0 / delta_prime)) * epsilon + k * epsilon * math.expm1(
        epsilon
    )
    return eps, k * delta + delta_prime


def _round_k(k: float, n_visits: float, t_over_n: float, rounding: KRounding) -> float:
    """k = N_v + T/n as a real (spec tables) or as the integer ⌊N_v⌋ + ⌊T/n⌋."""
    if rounding == "real":
        return k
    if rounding == "floor":
        return float(math.floor(n_visits + 1e-12) + math.floor(t_over_n + 1e-12))
    raise ValueError(f"k_rounding must be 'real' or 'floor', got {rounding!r}")


# --------------------------------------------------------------------------- B3: count bounds


def chernoff_count_bound(T: int, p: float, delta_hat: float) -> float:
    """Chernoff bound on Bin(T, p) (spec §3.0 B3, App. D): `Tp + sqrt(3 Tp ln(1/δ̂))`.

    It comes from `P(X ≥ (1+a)Tp) ≤ exp(−a²Tp/3)`, valid for a ≤ 1 only, i.e. when
    `Tp ≥ 3 ln(1/δ̂)` (erratum E15). The value is returned regardless; use `count_bound(...,
    exact=False, strict=True)` to reject the invalid range, or the exact quantile instead.
    """
    TT = _int_at_least("T", T, 0)
    _open_unit("p", p)
    _open_unit("delta_hat", delta_hat)
    mu = TT * p
    return mu + math.sqrt(3.0 * mu * math.log(1.0 / delta_hat))


def _binomial_quantile(T: int, p: float, delta_hat: float) -> int:
    """min{N : P(Bin(T, p) > N) ≤ δ̂}, from scipy's survival function (exact up to float error)."""
    guess = stats.binom.isf(delta_hat, T, p)
    N = int(guess) if np.isfinite(guess) else T
    N = min(max(N, 0), T)
    while N > 0 and stats.binom.sf(N - 1, T, p) <= delta_hat:
        N -= 1
    while N < T and stats.binom.sf(N, T, p) > delta_hat:
        N += 1
    return N


def count_bound(
    T: int, p: float, delta_hat: float, exact: bool = True, *, strict: bool = False
) -> float:
    """High-probability bound N with `P(Bin(T, p) > N) ≤ δ̂` (spec §3.0 B3, erratum E15).

    * `exact=True` (recommended by the spec): the exact binomial quantile
      `min{N : P(Bin(T,p) > N) ≤ δ̂}` (scipy.stats.binom), an integer returned as a float.
      Spec checks: Bin(20000, 1/2000), δ̂ = 1e-6 → 28; Bin(1e5, 1e-3), δ̂ = 1e-7 → 156;
      Bin(12, 0.001), δ̂ = 1e-6 → 2.
    * `exact=False`: the paper's Chernoff bound `Tp + sqrt(3Tp ln(1/δ̂))` (30.36, 169.54 and 0.717
      on the same checks; the last one is *wrong*, P(X ≥ 2) = 6.6e-5 > δ̂). It is only valid when
      `Tp ≥ 3 ln(1/δ̂)`; with `strict=True` a ValueError is raised outside that range.

    Raises:
        ValueError: unless T is an integer ≥ 0, 0 < p < 1 and 0 < δ̂ < 1 (and, with strict, the
            Chernoff validity condition).
    """
    TT = _int_at_least("T", T, 0)
    _open_unit("p", p)
    _open_unit("delta_hat", delta_hat)
    if exact:
        return float(_binomial_quantile(TT, p, delta_hat))
    if strict and TT * p < 3.0 * math.log(1.0 / delta_hat):
        raise ValueError(
            f"the Chernoff bound of Cyffers & Bellet's App. D needs T*p >= 3 ln(1/delta_hat) "
            f"(got T*p = {TT * p:.6g} < {3.0 * math.log(1.0 / delta_hat):.6g}); use exact=True"
        )
    return chernoff_count_bound(TT, p, delta_hat)


# --------------------------------------------------------------------------- B4–B6


def subsampled_epsilon(
    epsilon_a: float | np.ndarray, n: float, m: float | np.ndarray
) -> np.ndarray | float:
    """Subsampling with replacement (spec §3.0 B4, Balle–Barthe–Gaboardi 2018, Eq. 10).

    `ε = ln(1 + (1 − (1 − 1/n)^m)(e^{ε_A} − 1))` for a mechanism A that is (ε_A, δ_A)-DP run on m
    users drawn uniformly with replacement among n (δ stays δ_A, as the paper states; ambiguity A4).
    Vectorised over ε_A and m; n may be a real n_eff = n/c (§2.9).
    """
    if not (n > 1.0):
        raise ValueError(f"n must be > 1, got {n!r}")
    ea = np.asarray(epsilon_a, dtype=np.float64)
    mm = np.asarray(m, dtype=np.float64)
    if np.any(ea < 0) or np.any(mm < 0):
        raise ValueError("epsilon_a and m must be >= 0")
    q = -np.expm1(mm * math.log1p(-1.0 / n))  # 1 − (1 − 1/n)^m
    out = np.log1p(q * np.expm1(ea))
    return float(out) if out.ndim == 0 else out


def erlingsson_shuffle_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Erlingsson et al. 2019 shuffling (spec §3.0 B5; paper Thm 5 / "Corollary 9").

    Shuffling n ε0-LDP reports is `(12 ε0 sqrt(ln(1/δ)/n), δ)`-DP, for 0 < ε0 < 1/2, δ < 1/100 and
    n ≥ 1000 (erratum E4: the paper's n ≥ 100 vs n > 1000; the Balle et al. code uses n ≥ 1000).

    Raises:
        ValueError: outside that validity range.
    """
    nn = _int_at_least("n", n, 1)
    if not (0.0 < epsilon0 < 0.5):
        raise ValueError(
            f"Erlingsson's shuffling bound needs 0 < epsilon0 < 1/2 (Erlingsson et al., SODA "
            f"2019, Corollary 9), got {epsilon0!r}"
        )
    if not (0.0 < delta < 0.01):
        raise ValueError(f"Erlingsson's shuffling bound needs 0 < delta < 1/100, got {delta!r}")
    if nn < 1000:
        raise ValueError(f"Erlingsson's shuffling bound needs n >= 1000 (erratum E4), got n={nn}")
    return 12.0 * epsilon0 * math.sqrt(math.log(1.0 / delta) / nn)


def fmt_shuffle_condition(n: float, delta: float) -> float:
    """Largest ε0 for which Feldman–McMillan–Talwar applies: `ln(n/(16 ln(2/δ)))` (spec B6)."""
    _open_unit("delta", delta)
    arg = n / (16.0 * math.log(2.0 / delta))
    return math.log(arg) if arg > 0 else -math.inf


def fmt_shuffle_epsilon(epsilon0: float, n: float, delta: float, *, check: bool = True) -> float:
    """Feldman–McMillan–Talwar 2020 shuffling, full formula (spec §3.0 B6; paper Thm 7).

    For n adaptive ε0-LDP randomizers with `ε0 ≤ ln(n/(16 ln(2/δ)))`, the shuffled output is
    (ε_shuff, δ)-DP with
    `ε_shuff = ln(1 + ((e^{ε0}−1)/(e^{ε0}+1))·(8 sqrt(e^{ε0} ln(4/δ))/sqrt(n) + 8 e^{ε0}/n))`.
    Test vectors (spec): ε0 = 1, n = 1e4, δ = 1e-6 → 0.214026; ε0 = 0.5, n = 1000, δ = 1e-7 →
    0.289746.

    Raises:
        ValueError: if ε0 < 0, n ≤ 0, δ ∉ (0, 1), or (with check=True) the condition fails.
    """
    _open_unit("delta", delta)
    if not (epsilon0 >= 0.0) or not (n > 0):
        raise ValueError(f"need epsilon0 >= 0 and n > 0, got {epsilon0!r}, {n!r}")
    if check and epsilon0 > fmt_shuffle_condition(n, delta):
        raise ValueError(
            f"FMT shuffling needs epsilon0 <= ln(n/(16 ln(2/delta))) = "
            f"{fmt_shuffle_condition(n, delta):.6g} (Feldman, McMillan & Talwar, FOCS 2021, "
            f"Theorem 3.1), got {epsilon0!r}"
        )
    e = math.exp(epsilon0)
    frac = math.tanh(epsilon0 / 2.0)  # (e^x − 1)/(e^x + 1)
    inner = 8.0 * math.sqrt(e * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e / n
    return math.log1p(frac * inner)


def fmt_shuffle_epsilon_simplified(epsilon0: float, n: float, delta: float) -> float:
    """FMT simplified bound, paper Eq. 11 (spec §3.0 B6, erratum E9 cosmetic):
    `ε_shuff ≤ 14 sqrt(ln(4/δ)/n)·ε0`, for ε0 ≤ 1 under B6's condition. Test vectors: 0.545853
    (ε0 = 1, n = 1e4, δ = 1e-6) and 0.926129 (ε0 = 0.5, n = 1000, δ = 1e-7).

    Raises:
        ValueError: unless 0 ≤ ε0 ≤ 1, n > 0 and 0 < δ < 1.
    """
    _open_unit("delta", delta)
    if not (0.0 <= epsilon0 <= 1.0):
        raise ValueError(f"Eq. 11 needs 0 <= epsilon0 <= 1, got {epsilon0!r}")
    if not (n > 0):
        raise ValueError(f"n must be > 0, got {n!r}")
    return 14.0 * math.sqrt(math.log(4.0 / delta) / n) * epsilon0


# --------------------------------------------------------------------------- Theorem 2 (ring histogram)


def rr_gamma(L: int, epsilon0: float) -> float:
    """Randomization probability of L-ary randomized response that is ε0-LDP (spec §2.0):
    `γ = L/(e^{ε0} + L − 1)`.

    Raises:
        ValueError: unless L ≥ 2 and ε0 ≥ 0.
    """
    LL = _int_at_least("L", L, 2)
    if not (0.0 <= epsilon0 < math.inf):
        raise ValueError(f"epsilon0 must be >= 0, got {epsilon0!r}")
    return LL / (math.exp(epsilon0) + LL - 1)


def ring_histogram_local_epsilon(n: int, epsilon: float, delta: float) -> float:
    """Local RR level for a per-round ring-histogram target ε: Theorem 2 corrected (E3/E4).

    Inverting Erlingsson (B5) for n shuffled reports gives `ε0 = (ε/12)·sqrt(n/ln(1/δ))`. The paper
    prints the inverse relation (ε0 = 12ε sqrt(ln(1/δ)/n), erratum E3). The validity conditions are
    Erlingsson's, on ε0: ε0 < 1/2, δ < 1/100 and n ≥ 1000 (E4). `n` is the number of reports in a
    window; the safe choice is n−1 (v's own report is known to v, E22), see `theorem2`.
    Worked example (spec §3.2): n = 10 000, ε = 0.2, δ = 1e-6 → 0.448400.

    Raises:
        ValueError: with a message naming the failed condition (ε0 ≥ 1/2 means the target ε is
            above `6 sqrt(ln(1/δ)/n)`: use `ring_histogram_local_epsilon_fmt` instead).
    """
    nn = _int_at_least("n", n, 1)
    _positive("epsilon", epsilon)
    _open_unit("delta", delta)
    if nn < 1000:
        raise ValueError(
            f"Theorem 2 (Erlingsson et al. shuffling) needs n >= 1000 reports per window "
            f"(erratum E4), got n={nn}; use ring_histogram_local_epsilon_fmt"
        )
    if delta >= 0.01:
        raise ValueError(f"Theorem 2 needs delta < 1/100, got {delta!r}")
    eps0 = (epsilon / 12.0) * math.sqrt(nn / math.log(1.0 / delta))
    if eps0 >= 0.5:
        raise ValueError(
            f"Theorem 2 (corrected, E3): the local level epsilon0 = (eps/12)*sqrt(n/ln(1/delta)) = "
            f"{eps0:.6f} must be < 1/2 for Erlingsson's bound, i.e. eps < "
            f"{6.0 * math.sqrt(math.log(1.0 / delta) / nn):.6f}; use ring_histogram_local_epsilon_fmt "
            f"(Feldman-McMillan-Talwar) for larger eps"
        )
    return eps0


def ring_histogram_local_epsilon_fmt(n: float, epsilon: float, delta: float) -> float:
    """Largest local RR level ε0 with `ε_shuff(ε0, n, δ) ≤ ε` by FMT (B6), by bisection.

    The numeric alternative to Theorem 2 suggested by Remark 2 (spec §3.2 [NOTE]): solve
    `fmt_shuffle_epsilon(ε0, n, δ) = ε` for ε0 (ε_shuff is increasing in ε0). Pass n−1 for the ring
    (E22). If even the largest ε0 allowed by B6's condition, `ln(n/(16 ln(2/δ)))`, gives
    ε_shuff ≤ ε, that largest ε0 is returned (the condition binds; the guarantee is then < ε).

    Raises:
        ValueError: unless ε > 0, 0 < δ < 1 and n is large enough for B6 to allow some ε0 > 0.
    """
    _positive("epsilon", epsilon)
    _open_unit("delta", delta)
    cap = fmt_shuffle_condition(n, delta)
    if not cap > 0.0:
        raise ValueError(
            f"FMT shuffling needs n > 16 ln(2/delta) = {16 * math.log(2 / delta):.1f} reports, got {n}"
        )
    if fmt_shuffle_epsilon(cap, n, delta) <= epsilon:
        return cap
    lo, hi = 0.0, cap
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if fmt_shuffle_epsilon(mid, n, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return lo


def ring_histogram_gamma_as_printed(
    n: int, L: int, epsilon: float, delta: float
) -> tuple[float, float]:
    """Theorem 2's γ *as printed* (erratum E3), for comparison only: returns (ε0, γ) with
    `ε0 = 12ε sqrt(ln(1/δ)/n)` and `γ = L/(e^{ε0} + L − 1)`. It tends to γ = 1 as n grows. Spec
    example (n = 10 000, L = 10, ε = 0.2, δ = 1e-6): (0.089206, 0.990756)."""
    nn = _int_at_least("n", n, 1)
    _open_unit("delta", delta)
    eps0 = 12.0 * epsilon * math.sqrt(math.log(1.0 / delta) / nn)
    return eps0, rr_gamma(L, eps0)


@dataclass(frozen=True)
class Theorem2Result:
    """Theorem 2 (corrected): guarantee of Algorithm 2 and the RR parameters to run it with.

    Attributes:
        epsilon, delta: the network-DP guarantee `(adv(ε, δ', K), Kδ + δ')`.
        epsilon0: local RR level; gamma: `L/(e^{ε0} + L − 1)`.
        reports: number of shuffled reports per window used in the inversion (n or n−1).
        initial_elements: ⌈γn⌉ uniform elements to pre-load the token with (E6, §6 item 2).
        expected_random_responses: γn(K+1).
        method: "theorem2-erlingsson" or "theorem2-fmt".
    """

    epsilon: float
    delta: float
    epsilon0: float
    gamma: float
    reports: int
    initial_elements: int
    expected_random_responses: float
    method: str

    def to_loss(self) -> PrivacyLoss:
        """The guarantee as a `PrivacyLoss`."""
        return PrivacyLoss(self.epsilon, self.delta, self.method)


def theorem2(
    n: int,
    L: int,
    epsilon: float,
    delta: float,
    K: int,
    delta_prime: float,
    *,
    method: Literal["erlingsson", "fmt"] = "erlingsson",
    reports: Literal["n-1", "n"] = "n-1",
) -> Theorem2Result:
    """Theorem 2 corrected (App. B; spec §3.2, errata E3, E4, E6, E22): ring histogram.

    Each of the K windows an observer sees is a shuffle of the window's RR reports, (ε, δ)-DP at the
    per-round target ε when the local level is ε0 (Erlingsson inversion, or FMT numerically with
    `method="fmt"`); advanced composition over K windows gives `(adv(ε, δ', K), Kδ + δ')`.
    `reports="n-1"` (default, E22) inverts with the n−1 reports v does not know; `"n"` is the
    paper's count (the spec's worked example: n = 10 000, L = 10, ε = 0.2, δ = δ' = 1e-6, K = 5 →
    ε0 = 0.448400, γ = 0.946449, (2.572191, 6e-6), 56 787 expected random responses).

    Raises:
        ValueError: as `ring_histogram_local_epsilon` / `_fmt`, or on bad K, L, δ'.
    """
    nn = _int_at_least("n", n, 2)
    kk = _int_at_least("K", K, 1)
    if reports not in ("n-1", "n"):
        raise ValueError(f"reports must be 'n-1' or 'n', got {reports!r}")
    m = nn - 1 if reports == "n-1" else nn
    if method == "erlingsson":
        eps0 = ring_histogram_local_epsilon(m, epsilon, delta)
    elif method == "fmt":
        eps0 = ring_histogram_local_epsilon_fmt(m, epsilon, delta)
    else:
        raise ValueError(f"method must be 'erlingsson' or 'fmt', got {method!r}")
    gamma = rr_gamma(L, eps0)
    eps_tot, delta_tot = advanced_composition(epsilon, delta, kk, delta_prime)
    return Theorem2Result(
        epsilon=eps_tot,
        delta=delta_tot,
        epsilon0=eps0,
        gamma=gamma,
        reports=m,
        initial_elements=math.ceil(gamma * nn),
        expected_random_responses=gamma * nn * (kk + 1),
        method=f"theorem2-{method}",
    )


# --------------------------------------------------------------------------- Theorems 3 and 6


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
    """Tight per-cycle ε of Theorem 3 (spec §3.3 "tighter numeric variant", B4 exactly):
    `max_{1≤m≤⌊n_eff⌋} ln(1 + (1 − (1 − 1/n_eff)^m)(e^{ε/√m} − 1))`; returns (value, argmax m).
    For n = 1000, ε = 0.5: 0.010026634 at m = 1000 (≈ (1 − 1/e)ε/√n)."""
    mmax = max(1, math.floor(n_eff + 1e-9))
    m = np.arange(1, mmax + 1, dtype=np.float64)
    vals = np.asarray(subsampled_epsilon(epsilon / np.sqrt(m), n_eff, m))
    i = int(np.argmax(vals))
    return float(vals[i]), i + 1


def theorem3(
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
    """Theorem 3 with the corrected Appendix D complete formula (spec §3.3, errata E7, E15).

    Algorithm 3 with Gaussian noise calibrated to (ε, δ)-LDP per contribution (ε < 1) is
    `(adv(ε_c, δ', k), kδ + δ' + δ̂)`-network DP, with k = N_v + T/n cycles (real observations plus
    the ≤ T/n fictive ones) and
    * `cycle="closed"`: ε_c = 3ε/√n (App. D's closed form);
    * `cycle="tight"`: ε_c = max_m ln(1 + (1 − (1−1/n)^m)(e^{ε/√m} − 1)) (B4 exactly);
    * `counts="chernoff"`: N_v = T/n + sqrt((3T/n) ln(1/δ̂)) (paper); `"exact"`: binomial quantile.
    The printed formula's second term `sqrt(k)·ε·(e^{3ε/√n} − 1)` is wrong (E7); this is
    `k·ε_c·(e^{ε_c} − 1)`, as in the authors' code. With c colluders every n is n/c (§2.9).
    Spec examples (δ = δ' = δ̂ = 1e-7): n = 1000, T = 1e5, ε = 0.5 → N_v = 169.537247,
    k = 269.537247, ε_c = 0.047434, ε = 5.042602, δ = 2.7154e-5; tight 0.961857; tight + exact
    (N_v = 156, k = 256) 0.936716, δ = 2.58e-5; c = 10 → 94.0146.

    Raises:
        ValueError: unless 0 < ε < 1, the δ's are in (0, 1), T ≥ 1, n ≥ 2 and 1 ≤ c < n.
    """
    if not (0.0 < epsilon < 1.0):
        raise ValueError(
            f"Theorem 3 needs 0 < epsilon < 1 (classic Gaussian calibration), got {epsilon!r}"
        )
    _open_unit("delta", delta)
    _open_unit("delta_prime", delta_prime)
    _open_unit("delta_hat", delta_hat)
    TT = _int_at_least("T", T, 1)
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


def theorem3_as_printed(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    colluders: int = 1,
) -> tuple[float, float]:
    """Appendix D's complete formula *as printed* (erratum E7), for comparison only:

        ε_f = sqrt((4T/n + 2 sqrt((3T/n) ln(1/δ̂))) ln(1/δ'))·3ε/√n
              + sqrt(2T/n + sqrt((3T/n) ln(1/δ̂)))·ε·(e^{3ε/√n} − 1)
        δ_f = (N_v + T/n)δ + δ' + δ̂

    Spec: 4.820289 (n = 1000, T = 1e5, ε = 0.5, δ's 1e-7), 0.284575, 14.136139. The second term is
    not a bound (it should be k·ε_c·(e^{ε_c} − 1)): use `theorem3`.
    """
    _open_unit("delta", delta)
    _open_unit("delta_prime", delta_prime)
    _open_unit("delta_hat", delta_hat)
    TT = _int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    r = TT / ne
    s = math.sqrt(3.0 * r * math.log(1.0 / delta_hat))
    ec = 3.0 * epsilon / math.sqrt(ne)
    eps = math.sqrt((4.0 * r + 2.0 * s) * math.log(1.0 / delta_prime)) * ec + math.sqrt(
        2.0 * r + s
    ) * epsilon * math.expm1(ec)
    return eps, (r + s + r) * delta + delta_prime + delta_hat


def theorem6_cycle_epsilon(epsilon: float, n_eff: float, delta: float) -> tuple[float, int]:
    """Remark 4's recommended numeric per-cycle ε for histograms (spec §3.4 [NOTE]):

        ε_cycle* = max_{1≤m≤⌊n_eff⌋} ln(1 + (1 − (1−1/n_eff)^m)(e^{min(ε, ε_FMT(ε, m, δ))} − 1))

    where ε_FMT is the full B6 bound with m shuffled reports, replaced by ε where B6's condition
    `ε ≤ ln(m/(16 ln(2/δ)))` fails. Returns (value, argmax m). Spec: n = 1e4, ε = 0.5, δ = 1e-7 →
    0.0646096 at m = n.
    """
    _open_unit("delta", delta)
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


def theorem6(
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
    """Theorem 6 (App. E; spec §3.4, errata E7/E8, Remark 4): complete-graph histogram (Alg. 5).

    RR with γ = L/(e^ε + L − 1) per contribution (pure ε-LDP). The guarantee is
    `(adv(ε_c, δ', k), kδ + δ' + δ̂)` with k = N_v + T/n and
    * `cycle="closed"` (corrected form, same E7 fix as Thm 3): ε_c = C·sqrt(ln(4/δ))·ε/√n with
      C = `constant` = 21 (the paper's constant). It needs ε ≤ 1 and n ≥ 14² ln(4/δ).
      Erratum E8 says the paper's own inequalities only give C = 42. C = 21 is nevertheless a valid
      bound, by a tighter chain: with r = m/(n−1), `1 − (1−1/n)^m ≤ 1 − e^{−r}` and
      `e^x − 1 ≤ (e − 1)x` for x ≤ 1. For m ≥ 14² ln(4/δ) (x = 14 sqrt(ln(4/δ)/m)·ε ≤ 1) this gives
      `ε_cycle ≤ (e−1)·14·sqrt(ln(4/δ))·ε·(1 − e^{−r})/sqrt(r(n−1)) ≤ 15.3·sqrt(ln(4/δ)/n)·ε`
      ((1 − e^{−r})/√r is increasing for r ≤ n/(n−1)); for smaller m the B4 term with ε itself is
      `≤ (e−1)(1 − e^{−r})ε ≤ 1.09·sqrt(14² ln(4/δ)/n)·ε ≤ 15.3·sqrt(ln(4/δ)/n)·ε`. The tests check
      C = 21 against the exact expression on a grid (worst ratio ≈ 10.4). Pass constant=42 for the
      spec's conservative reading.
    * `cycle="numeric"` (Remark 4, recommended): ε_c = `theorem6_cycle_epsilon(ε, n, δ)`.
    Spec examples (δ's 1e-7): n = 1e6, T = 1e8, ε = 0.5 closed → ε_c = 0.043930, ε = 4.626671;
    n = 1e4, T = 1e6 closed → 0.439302, 106.27; numeric → 0.0646096, 7.184820.

    Raises:
        ValueError: on bad parameters, or (closed) if ε > 1 or n_eff < 14² ln(4/δ).
    """
    if not (0.0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    _open_unit("delta", delta)
    _open_unit("delta_prime", delta_prime)
    _open_unit("delta_hat", delta_hat)
    TT = _int_at_least("T", T, 1)
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
        eps_c, m_star = theorem6_cycle_epsilon(epsilon, ne, delta)
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


def theorem6_as_printed(
    n: int,
    T: int,
    epsilon: float,
    delta: float,
    delta_prime: float,
    delta_hat: float,
    *,
    colluders: int = 1,
) -> tuple[float, float]:
    """Theorem 6 *as printed* (erratum E8), for comparison only: Theorem 3's printed shape with
    ε_c = 21 sqrt(ln(4/δ))ε/√n, i.e. second term `sqrt(2T/n + sqrt((3T/n) ln(1/δ̂)))·ε·(e^{ε_c} − 1)`.
    """
    _open_unit("delta", delta)
    _open_unit("delta_prime", delta_prime)
    _open_unit("delta_hat", delta_hat)
    TT = _int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    r = TT / ne
    s = math.sqrt(3.0 * r * math.log(1.0 / delta_hat))
    ec = 21.0 * math.sqrt(math.log(4.0 / delta)) * epsilon / math.sqrt(ne)
    eps = math.sqrt((4.0 * r + 2.0 * s) * math.log(1.0 / delta_prime)) * ec + math.sqrt(
        2.0 * r + s
    ) * epsilon * math.expm1(ec)
    return eps, (2.0 * r + s) * delta + delta_prime + delta_hat


# --------------------------------------------------------------------------- baselines (LDP, central)


def ldp_baseline(
    n_contributions: float,
    epsilon: float,
    delta: float,
    delta_prime: float,
    *,
    naive_min: bool = False,
) -> tuple[float, float]:
    """Local-DP baseline: advanced composition of the N contributions of one user at level ε
    (spec §3.3 "LDP analogue", §3.5 "LDP comparison"): `(adv(ε, δ', N), Nδ + δ')`.

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
    """LDP analogue of Theorem 3 (spec §3.3): the same T-step walk, every contribution visible.

    `ε_LDP = adv(ε, δ', N_v)` with N_v the count bound of Bin(T, 1/n); δ = N_v δ + δ' + δ̂. Spec
    example (n = 1000, T = 1e5, ε = 0.5, δ's 1e-7): 91.954823; with naive_min 84.768623.
    """
    TT = _int_at_least("T", T, 1)
    ne = _n_eff(n, 1)
    n_v = _visits(TT, ne, delta_hat, counts)
    eps, dlt = ldp_baseline(n_v, epsilon, delta, delta_prime, naive_min=naive_min)
    return eps, dlt + delta_hat


def bassily_central_sigma(
    n: int, T: int, epsilon: float, delta: float, lipschitz: float = 1.0
) -> float:
    """Central DP-SGD noise std of Bassily et al. 2014 as used for Fig. 2 (spec §5.3):
    `σ_central = 16 L sqrt(T ln(2/δ) ln(1.25T/(δn)))/(n ε)` (trusted curator, T steps each on one
    uniformly random user's data). Spec: n = 2000, T = 20 000, δ = 1e-6, L = 0.4 → 0.696821 (ε = 10)
    and 6.968208 (ε = 1); L = 1 → 1.742052, 17.420519.
    """
    nn = _int_at_least("n", n, 1)
    TT = _int_at_least("T", T, 1)
    _positive("epsilon", epsilon)
    _open_unit("delta", delta)
    _positive("lipschitz", lipschitz)
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
    """Local DP-SGD noise for a total budget (ε, δ) over K_max contributions (spec §5.3).

    Solve `sqrt(2K ln(1/δ_))ε0 + Kε0(e^{ε0} − 1) = ε_tot` for ε0 by bisection (B1 with per-step δ_
    and δ' = δ_), then `σ = sqrt(2 ln(1.25/δ_))·Δ/ε0` with Δ = sensitivity_factor·L.

    * `sensitivity_factor=2` is Algorithm 4's user-level sensitivity 2L (paper-faithful, default);
      1 reproduces the authors' findSigma.
    * `delta_split="total"` (default) takes δ_ = δ/(K+1), so that the total Kδ_ + δ_ is exactly δ;
      `"code"` takes δ_ = δ/K as findSigma does (total δ(1 + 1/K), slightly above δ).

    Spec (K = 12, δ = 1e-6): findSigma (factor 1, "code") L = 0.4 → 5.871056 (ε0 = 0.39166) at
    ε = 10 and 46.868738 at ε = 1; the "paper-faithful σ_local (sens. 2L)" column, 11.788 / 94.181
    (L = 0.4) and 29.470 / 235.453 (L = 1), is factor 2 with δ_ = δ/(K+1).
    """
    kk = _int_at_least("K_max", K_max, 1)
    _positive("eps_target", eps_target)
    _open_unit("delta", delta)
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
    sens = sensitivity_factor * _positive("lipschitz", lipschitz)
    sigma = gaussian_sigma(eps0, d_, sens)
    eps_tot, delta_tot = advanced_composition(eps0, d_, kk, d_)
    return CalibratedSigma(sigma, eps0, eps_tot, delta_tot, f"local-sgd-advanced-{delta_split}")


# --------------------------------------------------------------------------- Theorem 4 / Lemma 1


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
    """Largest Rényi order allowed by Lemma 1's condition σ ≥ L sqrt(2α(α−1)) (spec §3.5 step 5):
    `α_max = (1 + sqrt(1 + 2σ²/L²))/2`. α_max(10) = 7.588723."""
    s = _positive("sigma_over_L", sigma_over_L)
    return (1.0 + math.sqrt(1.0 + 2.0 * s * s)) / 2.0


def _delay_term(n_eff: float, geometric_exact: bool) -> float:
    """E_t~Geom(1/n_eff)[1/t]: ln(n)/n as in the paper, or the exact ln(n)/(n−1) (E10)."""
    return math.log(n_eff) / (n_eff - 1.0 if geometric_exact else n_eff)


def lemma1_nrdp(
    n: int,
    T_u: float,
    sigma_over_L: float,
    alpha: float,
    *,
    factor: float = 4.0,
    colluders: int = 1,
    geometric_exact: bool = False,
) -> float:
    """Lemma 1 (App. F; spec §3.5, errata E10, E11): Algorithm 4 is
    `(α, 4 T_u α L² ln n/(σ² n))`-NRDP for 1 < α ≤ α_max(σ/L).

    `factor=4` is Lemma 1 (weak convexity 2 × amplification by iteration 2); `factor=2` is the
    authors' findSigma. `geometric_exact=True` uses the exact `ln n/(n−1)` (E10). With c colluders,
    n → n/c (delay ~ Geom(c/n), §2.9). Spec spot value: σ/L = 10, T_u = 12, n = 2000, α = 5 →
    0.009121083.

    Raises:
        ValueError: if α ≤ 1 or α > α_max (σ < L sqrt(2α(α−1)): weak convexity does not apply).
    """
    ne = _n_eff(n, colluders)
    s = _positive("sigma_over_L", sigma_over_L)
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


def theorem4_numeric(
    n: int,
    T_u: float,
    sigma_over_L: float,
    delta_c: float,
    *,
    factor: float = 4.0,
    colluders: int = 1,
    geometric_exact: bool = False,
) -> SgdBound:
    """Theorem 4 via Lemma 1 + Prop. 3, minimised over 1 < α ≤ α_max (Remark 5; spec §3.5 step 5).

    `ε_c(α) = aα + ln(1/δ_c)/(α − 1)` with `a = factor·T_u·ln n/(σ²/L²·n)`; the unconstrained optimum
    `α* = 1 + sqrt(ln(1/δ_c)/a)` is used if ≤ α_max, otherwise α_max (where the constraint binds).
    T_u is the deterministic cap K_max (δ = δ_c), or a count bound N_u (then add δ̂ yourself, or
    use `theorem4`). Spec (δ_c = 1e-6): n = 1e4, T_u = 164.378981, σ/L = 21.195210 → 0.973971 at
    α_max = 15.4956; n = 1000, T_u = 10 643.79 → 6.669479 at α* = 5.5938; n = 2000, T_u =
    30.358421, σ/L = 10.597605 → 2.003660 at α_max = 8.0103.
    """
    ne = _n_eff(n, colluders)
    s = _positive("sigma_over_L", sigma_over_L)
    _open_unit("delta_c", delta_c)
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


def theorem4_closed(
    n: int, T_u: float, sigma_over_L: float, delta_c: float, *, colluders: int = 1
) -> SgdBound:
    """Theorem 4's closed form in σ (App. F step 6, Feldman et al. 2018 Thm 32; spec §3.5, E12):
    `q = max(2T_u ln n/n, 2 ln(1/δ_c))`, `α = (σ/L) sqrt(ln(1/δ_c)/q)`,
    `ε_c = 4 sqrt(q ln(1/δ_c))/(σ/L)`.

    The derivation needs α > 2 (erratum E12: holds iff ε_c < 2 ln(1/δ_c)); `constrained` is
    reported False and a ValueError is raised when α ≤ 2 — use `theorem4_numeric` then.
    """
    ne = _n_eff(n, colluders)
    s = _positive("sigma_over_L", sigma_over_L)
    _open_unit("delta_c", delta_c)
    log1d = math.log(1.0 / delta_c)
    q = max(2.0 * T_u * math.log(ne) / ne, 2.0 * log1d)
    alpha = s * math.sqrt(log1d / q)
    eps = 4.0 * math.sqrt(q * log1d) / s
    if alpha <= 2.0:
        raise ValueError(
            f"Theorem 4's closed form needs alpha > 2 (erratum E12), got alpha = {alpha:.4f} "
            f"(epsilon_c = {eps:.4f} >= 2 ln(1/delta_c)); use theorem4_numeric"
        )
    return SgdBound(
        eps, delta_c, alpha, sgd_alpha_max(s), False, float(T_u), s, "theorem4-closed", q
    )


def theorem4(
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
    """Theorem 4 (spec §3.5): Algorithm 4 with per-step noise `σ = sqrt(8 ln(1.25/δ)) L/ε` (the paper
    asks ε < 1 and δ < 1/2; only σ matters for the RDP proof, so any ε > 0 is accepted) is
    `(ε', δ + δ̂)`-network DP, with N_u the count bound of Bin(T, 1/n) and
    * `method="closed"`: Eq. 7, `ε' = sqrt(2q ln(1/δ))·ε/sqrt(ln(1.25/δ))`,
      `q = max(2N_u ln n/n, 2 ln(1/δ))`;
    * `method="numeric"`: Lemma 1 + Remark 5 at T_u = N_u (`theorem4_numeric`, δ_c = δ).
    Spec (δ = δ̂ = 1e-6): n = 1e4, T = 1e6, ε = 0.5 → N_u = 164.378981, q = 27.631021, closed
    3.687264, numeric 0.973971.
    """
    # Only σ enters the RDP analysis, so ε ≥ 1 (e.g. the spec's ε = 1.0 row) is accepted: ε < 1 is
    # needed only to call each step "(ε, δ)-LDP" under the classic calibration.
    _positive("epsilon", epsilon)
    if not (0.0 < delta < 0.5):
        raise ValueError(f"Theorem 4 needs 0 < delta < 1/2, got {delta!r}")
    _open_unit("delta_hat", delta_hat)
    TT = _int_at_least("T", T, 1)
    ne = _n_eff(n, colluders)
    n_u = _visits(TT, ne, delta_hat, counts)
    s = math.sqrt(8.0 * math.log(1.25 / delta)) / epsilon
    if method == "closed":
        r = theorem4_closed(n, n_u, s, delta, colluders=colluders)
        # Eq. 7 form (identical value): sqrt(2q ln(1/δ))·ε/sqrt(ln(1.25/δ))
        assert r.q is not None
        eps = (
            math.sqrt(2.0 * r.q * math.log(1.0 / delta))
            * epsilon
            / math.sqrt(math.log(1.25 / delta))
        )
        return SgdBound(eps, delta + delta_hat, r.alpha, r.alpha_max, False, n_u, s, r.method, r.q)
    if method == "numeric":
        r = theorem4_numeric(n, n_u, s, delta, factor=factor, colluders=colluders)
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
    """Minimal σ/L with `theorem4_numeric(n, K_max, σ/L, δ_c).epsilon ≤ ε_target` (Remark 5).

    ε_c is decreasing in σ (a ∝ 1/σ² and α_max grows with σ), so bisection is exact (spec §3.5
    [NOTE]); the authors' code instead multiplies σ by 1.15 and always takes α = α_max. The cap
    K_max is deterministic, so no δ̂. `factor=4` is Lemma 1, `factor=2` the authors' code.
    Spec (n = 2000, K_max = 12, δ_c = 1e-6): ε = 10 → 2.578620, ε = 1 → 20.361907 (factor 2:
    2.571932, 20.297372). Multiply by L for σ. Spotted contributions (App. G) are NOT included.
    """
    _positive("eps_target", eps_target)
    _int_at_least("K_max", K_max, 0)

    def eps_at(s: float) -> float:
        return theorem4_numeric(
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


# --------------------------------------------------------------------------- Lemma 2 (spotted)


@dataclass(frozen=True)
class SpottedLoss:
    """Loss from spotted contributions (App. G, Lemma 2 corrected; or the §2.8 edge cap).

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
    """Lemma 2 with the E14 correction (App. G; spec §3.6): loss of spotted contributions.

    Each of u's ≤ N_u contributions is spotted by an observer (directly preceded or followed by one
    of its contributions) with probability `1 − (1 − c/n)²` ≤ 2c/n; a spotted contribution costs the
    full local (ε, δ). With probability 1 − δ̃ at most N_s are spotted:
    * `exact=True` (recommended, E15): `N_s = min{N : P(Bin(⌈N_u⌉, 1 − (1−c/n)²) > N) ≤ δ̃}`;
    * `exact=False`: the paper's Chernoff `N_s = 2N_u/n + sqrt((6N_u/n) ln(1/δ̃))` (invalid at
      these tiny means).
    The result (with δ̃ in its δ) is to be ADDED to the Theorem 3/4/6 totals (basic composition).
    `delta` is the local δ of one contribution (0 for pure-ε randomizers such as RR).
    Spec (N_u = 12, n = 2000, ε = 0.5, δ̃ = δ' = 1e-6): Chernoff N_s = 0.717236, simple 0.358618,
    advanced as printed 1.806570, corrected 2.458512; exact N_s = 2, simple 1.0.
    """
    ne = _n_eff(n, colluders)
    if not (0.0 <= N_u < math.inf):
        raise ValueError(f"N_u must be a finite number >= 0, got {N_u!r}")
    if not (0.0 <= epsilon < math.inf):
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    _open_unit("delta_tilde", delta_tilde)
    _open_unit("delta_prime", delta_prime)
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    if exact:
        p = -math.expm1(2.0 * math.log1p(-1.0 / ne))
        trials = math.ceil(N_u - 1e-12)
        n_s = float(_binomial_quantile(trials, p, delta_tilde)) if trials > 0 else 0.0
    else:
        n_s = 2.0 * N_u / ne + math.sqrt((6.0 * N_u / ne) * math.log(1.0 / delta_tilde))
    return _spotted(n_s, epsilon, delta, delta_prime, delta_tilde, "lemma2")


def spotted_loss_capped(B: int, epsilon: float, delta: float, delta_prime: float) -> SpottedLoss:
    """Spotted loss under the edge-usage cap of spec §2.8 (App. G option (b)): at most B real
    contributions of u are adjacent to any given user, deterministically, so the spotted loss is the
    simple `(Bε, Bδ)` or advanced `(adv(ε, δ', B), Bδ + δ')` composition of B local mechanisms,
    with no δ̃. The smaller ε is returned as (epsilon, delta).
    """
    bb = _int_at_least("B", B, 0)
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    _open_unit("delta_prime", delta_prime)
    if bb == 0:
        return SpottedLoss(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "edge-cap-none")
    eps_b, d_b = basic_composition(epsilon, delta, bb)
    r = _spotted(float(bb), epsilon, delta, delta_prime, 0.0, "edge-cap")
    assert math.isclose(r.epsilon_simple, eps_b) and math.isclose(r.delta_simple, d_b)
    return r


# --------------------------------------------------------------------------- sum calibration


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
    """Noise std for complete-graph summation (Algorithm 3) at a target total ε (spec §3.3).

    Finds, by bisection, the largest per-contribution LDP level ε0 ∈ (0, 1) with
    `theorem3(n, T, ε0, ...).epsilon ≤ ε_target` (Theorem 3's ε is increasing in ε0), and returns
    `σ = Δ sqrt(2 ln(1.25/δ))/ε0` (`gaussian_sigma`). With `spotted_delta_tilde` set, the Lemma 2
    (exact, corrected) loss of spotted contributions, needed when senders and receivers are known
    (App. G, §6 item 6), is added to the total (basic composition), using N_u = N_v.
    If even ε0 → 1 meets the target, ε0 = 1 − 1e-9 is used (the classic calibration needs ε0 < 1).

    Raises:
        ValueError: if no ε0 > 1e-9 reaches the target, or on bad parameters.
    """
    _positive("eps_target", eps_target)

    def total(e0: float) -> tuple[float, float]:
        b = theorem3(
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


# --------------------------------------------------------------------------- Proposition 1


@dataclass(frozen=True)
class UtilityBound:
    """Proposition 1: `G` and the bound `2DG(2 + ln T)/sqrt(T)` on E[F(τ) − F(w*)]."""

    G: float
    bound: float


def prop1_utility_bound(
    D: float, L: float, d: int, epsilon: float, delta: float, T: int
) -> UtilityBound:
    """Proposition 1 (spec §3.5; Shamir & Zhang 2013, Thm 2): with diam(W) ≤ D,
    `G² = L² + 8dL² ln(1.25/δ)/ε²` (= L² + dσ²) and η_t = D/(G√t), the last iterate of Algorithm 4
    satisfies `E[F(τ) − F(w*)] ≤ 2DG(2 + ln T)/sqrt(T)`. Spec: L = 1, d = 8, ε = 1, δ = 1e-6,
    D = 2, T = 20 000 → G = 29.991230, bound 10.097491.
    """
    _positive("D", D)
    _positive("L", L)
    dd = _int_at_least("d", d, 1)
    _positive("epsilon", epsilon)
    _open_unit("delta", delta)
    TT = _int_at_least("T", T, 1)
    G = math.sqrt(L * L + 8.0 * dd * L * L * math.log(1.25 / delta) / (epsilon * epsilon))
    return UtilityBound(G, 2.0 * D * G * (2.0 + math.log(TT)) / math.sqrt(TT))
