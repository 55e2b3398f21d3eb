"""Amplification building blocks: count bounds, subsampling and shuffling.

The tools Cyffers & Bellet (*Privacy Amplification by Decentralization*, AISTATS 2022) build their
theorems from: a high-probability bound on a binomial count (App. D, with the exact quantile that
replaces its Chernoff bound, docs/errata.md E15), amplification by subsampling with replacement
(Balle, Barthe & Gaboardi, NeurIPS 2018), and amplification by shuffling (Erlingsson et al., SODA
2019; Feldman, McMillan & Talwar, FOCS 2021). `ln` is the natural logarithm.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from netdp_node.lazy import lazy_module
from netdp_node.privacy.checks import int_at_least, open_unit

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost

stats = lazy_module("scipy.stats")  # lazy: start-up cost


def chernoff_count_bound(T: int, p: float, delta_hat: float) -> float:
    """Chernoff bound on Bin(T, p) (App. D): `Tp + sqrt(3 Tp ln(1/δ̂))`.

    It comes from `P(X ≥ (1+a)Tp) ≤ exp(−a²Tp/3)`, valid for a ≤ 1 only, i.e. when
    `Tp ≥ 3 ln(1/δ̂)` (docs/errata.md E15). The value is returned regardless; use `count_bound(...,
    exact=False, strict=True)` to reject the invalid range, or the exact quantile instead.
    """
    TT = int_at_least("T", T, 0)
    open_unit("p", p)
    open_unit("delta_hat", delta_hat)
    mu = TT * p
    return mu + math.sqrt(3.0 * mu * math.log(1.0 / delta_hat))


def binomial_quantile(T: int, p: float, delta_hat: float) -> int:
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
    """High-probability bound N with `P(Bin(T, p) > N) ≤ δ̂` (docs/errata.md E15).

    * `exact=True` (recommended): the exact binomial quantile
      `min{N : P(Bin(T,p) > N) ≤ δ̂}` (scipy.stats.binom), an integer returned as a float.
      Checks: Bin(20000, 1/2000), δ̂ = 1e-6 → 28; Bin(1e5, 1e-3), δ̂ = 1e-7 → 156;
      Bin(12, 0.001), δ̂ = 1e-6 → 2.
    * `exact=False`: the paper's Chernoff bound `Tp + sqrt(3Tp ln(1/δ̂))` (30.36, 169.54 and 0.717
      on the same checks; the last one is *wrong*, P(X ≥ 2) = 6.6e-5 > δ̂). It is only valid when
      `Tp ≥ 3 ln(1/δ̂)`; with `strict=True` a ValueError is raised outside that range.

    Raises:
        ValueError: unless T is an integer ≥ 0, 0 < p < 1 and 0 < δ̂ < 1 (and, with strict, the
            Chernoff validity condition).
    """
    TT = int_at_least("T", T, 0)
    open_unit("p", p)
    open_unit("delta_hat", delta_hat)
    if exact:
        return float(binomial_quantile(TT, p, delta_hat))
    if strict and TT * p < 3.0 * math.log(1.0 / delta_hat):
        raise ValueError(
            f"the Chernoff bound of Cyffers & Bellet's App. D needs T*p >= 3 ln(1/delta_hat) "
            f"(got T*p = {TT * p:.6g} < {3.0 * math.log(1.0 / delta_hat):.6g}); use exact=True"
        )
    return chernoff_count_bound(TT, p, delta_hat)


def subsampled_epsilon(
    epsilon_a: float | np.ndarray, n: float, m: float | np.ndarray
) -> np.ndarray | float:
    """Subsampling with replacement (Balle–Barthe–Gaboardi 2018, Eq. 10).

    `ε = ln(1 + (1 − (1 − 1/n)^m)(e^{ε_A} − 1))` for a mechanism A that is (ε_A, δ_A)-DP run on m
    users drawn uniformly with replacement among n (δ stays δ_A, as the paper states;
    it does not discuss u drawn more than once).
    Vectorised over ε_A and m; n may be a real n_eff = n/c.
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
    """Erlingsson et al. 2019 shuffling (paper Thm 5 / "Corollary 9").

    Shuffling n ε0-LDP reports is `(12 ε0 sqrt(ln(1/δ)/n), δ)`-DP, for 0 < ε0 < 1/2, δ < 1/100 and
    n ≥ 1000 (docs/errata.md E4: the paper's n ≥ 100 vs n > 1000; the Balle et al. code uses n ≥ 1000).

    Raises:
        ValueError: outside that validity range.
    """
    nn = int_at_least("n", n, 1)
    if not (0.0 < epsilon0 < 0.5):
        raise ValueError(
            f"Erlingsson's shuffling bound needs 0 < epsilon0 < 1/2 (Erlingsson et al., SODA "
            f"2019, Corollary 9), got {epsilon0!r}"
        )
    if not (0.0 < delta < 0.01):
        raise ValueError(f"Erlingsson's shuffling bound needs 0 < delta < 1/100, got {delta!r}")
    if nn < 1000:
        raise ValueError(
            f"Erlingsson's shuffling bound needs n >= 1000 (docs/errata.md E4), got n={nn}"
        )
    return 12.0 * epsilon0 * math.sqrt(math.log(1.0 / delta) / nn)


def fmt_shuffle_condition(n: float, delta: float) -> float:
    """Largest ε0 for which Feldman–McMillan–Talwar applies: `ln(n/(16 ln(2/δ)))`."""
    open_unit("delta", delta)
    arg = n / (16.0 * math.log(2.0 / delta))
    return math.log(arg) if arg > 0 else -math.inf


def fmt_shuffle_epsilon(epsilon0: float, n: float, delta: float, *, check: bool = True) -> float:
    """Feldman–McMillan–Talwar 2020 shuffling, full formula (paper Thm 7).

    For n adaptive ε0-LDP randomizers with `ε0 ≤ ln(n/(16 ln(2/δ)))`, the shuffled output is
    (ε_shuff, δ)-DP with
    `ε_shuff = ln(1 + ((e^{ε0}−1)/(e^{ε0}+1))·(8 sqrt(e^{ε0} ln(4/δ))/sqrt(n) + 8 e^{ε0}/n))`.
    Test vectors: ε0 = 1, n = 1e4, δ = 1e-6 → 0.214026; ε0 = 0.5, n = 1000, δ = 1e-7 →
    0.289746.

    Raises:
        ValueError: if ε0 < 0, n ≤ 0, δ ∉ (0, 1), or (with check=True) the condition fails.
    """
    open_unit("delta", delta)
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
    """FMT simplified bound, paper Eq. 11 (docs/errata.md E9 cosmetic):
    `ε_shuff ≤ 14 sqrt(ln(4/δ)/n)·ε0`, for ε0 ≤ 1 under `fmt_shuffle_condition`. Test vectors: 0.545853
    (ε0 = 1, n = 1e4, δ = 1e-6) and 0.926129 (ε0 = 0.5, n = 1000, δ = 1e-7).

    Raises:
        ValueError: unless 0 ≤ ε0 ≤ 1, n > 0 and 0 < δ < 1.
    """
    open_unit("delta", delta)
    if not (0.0 <= epsilon0 <= 1.0):
        raise ValueError(f"Eq. 11 needs 0 <= epsilon0 <= 1, got {epsilon0!r}")
    if not (n > 0):
        raise ValueError(f"n must be > 0, got {n!r}")
    return 14.0 * math.sqrt(math.log(4.0 / delta) / n) * epsilon0
