"""Network DP of the directed ring: summation (Algorithm 1) and histograms (Algorithm 2).

Cyffers & Bellet, *Privacy Amplification by Decentralization*, AISTATS 2022, Theorems 1 and 2
(App. A, B), with the corrections of docs/errata.md (E1, E3, E4, E6, E22) and netdp's own for the
released result. Ring conventions (the paper's §3.1): users sit at positions 1..n, the token starts
at user 1 and goes round K times; an observer v sees the K token values it receives, and each
inter-visit window holds at most one contribution of every other user and, thanks to the noise
schedule, at least one noise addition by a user other than v.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from netdp_node.lazy import lazy_module
from netdp_node.privacy.amplification import fmt_shuffle_condition, fmt_shuffle_epsilon
from netdp_node.privacy.checks import int_at_least, open_unit, positive
from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    gaussian_rdp,
    rdp_to_dp,
)
from netdp_node.privacy.discrete_gaussian import discrete_gaussian_epsilon

np = lazy_module("numpy")  # lazy: start-up cost


def _check_ring_size(n: int) -> int:
    """Return n as an int; ValueError unless it is an integer ≥ 3 (the schedule needs n−1 ≥ 2)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 3:
        raise ValueError(f"the ring needs n >= 3 users, got n={n!r}")
    return int(n)


def ring_adds_noise(position: int, round_: int, n: int) -> bool:
    """Whether the user at ring position p adds Gaussian noise in round k (Algorithm 1).

    Closed form of Algorithm 1's counter: noise is added at global steps 1, n, 2n−1, ... (once every
    n−1 hops), i.e. user p in round k iff `(p + k − 2) mod (n − 1) == 0` (both 1-indexed). Using n
    instead of n−1 would allow a window whose only noise is the observer's own.

    Raises:
        ValueError: unless n ≥ 3, 1 ≤ position ≤ n and round_ ≥ 1.
    """
    nn = _check_ring_size(n)
    p = int_at_least("position", position, 1)
    if p > nn:
        raise ValueError(f"position must be in 1..n={nn}, got {position!r}")
    k = int_at_least("round_", round_, 1)
    return (p + k - 2) % (nn - 1) == 0


def ring_noise_count(n: int, K: int) -> int:
    """Number of noise additions of Algorithm 1 over K rounds of n users (docs/errata.md E1).

    The noise steps are `{1 + j(n−1)} ∩ [1, Kn]`, hence `⌊(Kn − 1)/(n − 1)⌋ + 1` (the paper's
    `⌊Kn/(n−1)⌋` is off, e.g. n = 5, K = 1 gives 2, not 1). K = 0 gives 0.

    Raises:
        ValueError: unless n ≥ 3 and K ≥ 0.
    """
    nn = _check_ring_size(n)
    kk = int_at_least("K", K, 0)
    if kk == 0:
        return 0
    return (kk * nn - 1) // (nn - 1) + 1


def ring_release_adds_noise(position: int, round_: int, n: int, rounds: int) -> bool:
    """The noise schedule when the final token is released to every participant (netdp's ring).

    Algorithm 1's schedule (`ring_adds_noise`) only protects the windows an observer sees *between*
    receptions. If the final τ is released (docs/errata.md, "The released result leaks the last
    steps"), each observer v < n also sees the steps after its last visit, users v+1..n of round K,
    and these need not hold any noise: with n = 5, K = 2 the release shows observer 4 the round-2
    input of user 5 with no noise but 4's own. So the last step (user n in round K) always adds
    noise too: every such final window then holds noise from a user other than v. This is a
    correction to the paper (found while building netdp); it adds at most one noise addition
    (`ring_release_noise_count`).
    """
    kk = int_at_least("rounds", rounds, 1)
    return ring_adds_noise(position, round_, n) or (position == n and round_ == kk)


def ring_release_noise_count(n: int, K: int) -> int:
    """Noise additions of the released ring sum: Algorithm 1's count, plus one at the last step
    (user n, round K) unless the schedule already puts noise there, i.e. unless (K−1) mod (n−1) = 0.
    """
    base = ring_noise_count(n, K)
    if K == 0:
        return 0
    return base + (0 if (K - 1) % (_check_ring_size(n) - 1) == 0 else 1)


def ring_sum_guarantee(
    epsilon: float, delta: float, K: int, delta_prime: float
) -> tuple[float, float]:
    """Theorem 1 (App. A): network-DP guarantee of ring summation over K windows.

    Each of the K observed windows is an (ε, δ) mechanism (the LDP level of Perturb(·; σ_loc)), and
    advanced composition (Dwork, Rothblum & Vadhan 2010) gives
    `(sqrt(2K ln(1/δ'))·ε + K·ε·(e^ε − 1), K·δ + δ')`. Worked example: K = 10, ε = 0.5,
    δ = δ' = 1e-6 → (11.554897, 1.1e-5).

    Raises:
        ValueError: if K is not a non-negative integer, or as `advanced_composition`.
    """
    kk = int_at_least("K", K, 0)
    return advanced_composition(epsilon, delta, kk, delta_prime)


def ring_sum_loss(
    *,
    sigma: float,
    sensitivity: float,
    windows: int,
    delta: float,
    delta_prime: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> PrivacyLoss:
    """Loss of one node towards one other observer in ring summation (Algorithm 1, Theorem 1).

    `windows` is the number of the observer's inter-visit windows (including its first
    observation) that contained a contribution of the node. Each such window releases the node's
    contribution plus Gaussian noise of std ≥ `sigma` added by a user other than the observer
    (Algorithm 1), so it is a Gaussian mechanism with L2 sensitivity `sensitivity`; the windows
    compose (possibly adaptively). The caller must make sure that premise holds: on Algorithm 1's
    schedule it does for the K receptions of each observer, but NOT automatically for the stretch
    after an observer's last reception if the final τ is released to it (e.g. n = 5, K = 2,
    observer 4: steps 9 and 10 hold only observer 4's own noise).

    Candidates (k = windows, ε_w = `discrete_gaussian_epsilon(sigma/sensitivity, δ)`, the per-window
    ε of the discrete Gaussian actually sampled: ρ-zCDP converted by Canonne–Kamath–Steinke,
    NeurIPS 2020, Theorem 4 and Proposition 12; the classic ε = Δ√(2 ln(1.25/δ))/σ of the
    continuous Gaussian is not proven for it):

    * "theorem1-advanced": Theorem 1 / advanced composition,
      `(sqrt(2k ln(1/δ'))ε_w + kε_w(e^{ε_w}−1), kδ + δ')`;
    * "basic": `(k·ε_w, k·δ)`;
    * "gaussian-rdp": the exact RDP curve of k Gaussian mechanisms with z = sigma/sensitivity,
      `k·α/(2z²)`, converted at δ_tot = kδ + δ' (Mironov 2017).

    ε_w holds for every value (no ε_w < 1 condition), so all three are always valid. The candidate
    with the
    smallest ε is returned with its own δ (ties: smaller δ); every candidate has δ ≤ kδ + δ'. The
    RDP curve is always attached so that jobs compose in RDP (`compose_losses`).

    windows = 0 returns `PrivacyLoss(0.0, 0.0, "no-contribution")` with an all-zero curve.
    sigma = 0 (no noise, e.g. a test job) with windows > 0 is no privacy at all: ε = inf.

    Raises:
        ValueError: unless sigma ≥ 0, sensitivity > 0, windows is an integer ≥ 0, 0 < δ < 1,
            0 < δ' < 1 and kδ + δ' < 1.
    """
    if not (0.0 <= sigma < math.inf):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    if sigma == 0.0 and windows > 0:
        return PrivacyLoss(math.inf, 0.0, "no-noise")
    if not (0.0 < sensitivity < math.inf):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    k = int_at_least("windows", windows, 0)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    if not (0.0 < delta_prime < 1.0):
        raise ValueError(f"delta_prime must satisfy 0 < delta_prime < 1, got {delta_prime!r}")

    if k == 0:
        zeros = tuple(0.0 for _ in orders)
        return PrivacyLoss(0.0, 0.0, "no-contribution", (tuple(float(a) for a in orders), zeros))
    z = sigma / sensitivity
    curve = gaussian_rdp(z, orders, k)
    rdp = (tuple(float(a) for a in orders), tuple(float(x) for x in curve))

    delta_tot = k * delta + delta_prime
    if not delta_tot < 1.0:
        raise ValueError(
            f"windows*delta + delta_prime must be < 1, got {k}*{delta!r} + {delta_prime!r}"
        )
    candidates: list[tuple[float, float, str]] = []
    eps_w = discrete_gaussian_epsilon(z, delta)
    adv_eps, adv_delta = ring_sum_guarantee(eps_w, delta, k, delta_prime)
    candidates.append((adv_eps, adv_delta, "theorem1-advanced"))
    bas_eps, bas_delta = basic_composition(eps_w, delta, k)
    candidates.append((bas_eps, bas_delta, "basic"))
    rdp_eps, _ = rdp_to_dp(rdp[0], rdp[1], delta_tot)
    candidates.append((rdp_eps, delta_tot, "gaussian-rdp"))

    eps, dlt, method = min(candidates, key=lambda c: (c[0], c[1]))
    return PrivacyLoss(eps, dlt, method, rdp)


def ring_sum_std(n: int, K: int, sigma: float) -> float:
    """Std of the final token τ of Algorithm 1: `sqrt(ring_noise_count(n, K))·σ` (E1).

    Raises:
        ValueError: unless n ≥ 3, K ≥ 0 and σ ≥ 0.
    """
    if not (0.0 <= sigma < math.inf):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return math.sqrt(ring_noise_count(n, K)) * sigma


def ldp_sum_std(n: int, K: int, sigma: float) -> float:
    """Std of the local-DP baseline sum: `sqrt(K·n)·σ` (Theorem 1's utility comparison).

    Every one of the K·n contributions is noised with the same σ, which gives the same per-peer
    guarantee as the ring; the ratio to `ring_sum_std` is the O(1/sqrt(n)) gain of Theorem 1.

    Raises:
        ValueError: unless n ≥ 3, K ≥ 0 and σ ≥ 0.
    """
    nn = _check_ring_size(n)
    kk = int_at_least("K", K, 0)
    if not (0.0 <= sigma < math.inf):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return math.sqrt(kk * nn) * sigma


def rr_gamma(L: int, epsilon0: float) -> float:
    """Randomization probability of L-ary randomized response that is ε0-LDP:
    `γ = L/(e^{ε0} + L − 1)`.

    Raises:
        ValueError: unless L ≥ 2 and ε0 ≥ 0.
    """
    LL = int_at_least("L", L, 2)
    if not (0.0 <= epsilon0 < math.inf):
        raise ValueError(f"epsilon0 must be >= 0, got {epsilon0!r}")
    return LL / (math.exp(epsilon0) + LL - 1)


def ring_histogram_local_epsilon(n: int, epsilon: float, delta: float) -> float:
    """Local RR level for a per-round ring-histogram target ε: Theorem 2 corrected (E3/E4).

    Inverting Erlingsson's bound (`erlingsson_shuffle_epsilon`) for n shuffled reports gives `ε0 =
    (ε/12)·sqrt(n/ln(1/δ))`. The paper prints the inverse relation (ε0 = 12ε sqrt(ln(1/δ)/n),
    docs/errata.md E3). The validity conditions are Erlingsson's, on ε0: ε0 < 1/2, δ < 1/100 and n ≥
    1000 (E4). `n` is the number of reports in a window; the safe choice is n−1 (v's own report is
    known to v, E22), see `ring_histogram_loss`. Worked example: n = 10 000, ε = 0.2, δ = 1e-6 →
    0.448400.

    Raises:
        ValueError: with a message naming the failed condition (ε0 ≥ 1/2 means the target ε is
            above `6 sqrt(ln(1/δ)/n)`: use `ring_histogram_local_epsilon_fmt` instead).
    """
    nn = int_at_least("n", n, 1)
    positive("epsilon", epsilon)
    open_unit("delta", delta)
    if nn < 1000:
        raise ValueError(
            f"Theorem 2 (Erlingsson et al. shuffling) needs n >= 1000 reports per window "
            f"(docs/errata.md E4), got n={nn}; use ring_histogram_local_epsilon_fmt"
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
    """Largest local RR level ε0 with `ε_shuff(ε0, n, δ) ≤ ε` by FMT (`fmt_shuffle_epsilon`), by
    bisection.

    The numeric alternative to Theorem 2 suggested by Remark 2: solve
    `fmt_shuffle_epsilon(ε0, n, δ) = ε` for ε0 (ε_shuff is increasing in ε0). Pass n−1 for the ring
    (E22). If even the largest ε0 allowed by FMT's condition, `ln(n/(16 ln(2/δ)))`, gives
    ε_shuff ≤ ε, that largest ε0 is returned (the condition binds; the guarantee is then < ε).

    Raises:
        ValueError: unless ε > 0, 0 < δ < 1 and n is large enough for FMT to allow some ε0 > 0.
    """
    positive("epsilon", epsilon)
    open_unit("delta", delta)
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
    """Theorem 2's γ *as printed* (docs/errata.md E3), for comparison only: returns (ε0, γ) with
    `ε0 = 12ε sqrt(ln(1/δ)/n)` and `γ = L/(e^{ε0} + L − 1)`. It tends to γ = 1 as n grows.
    Example (n = 10 000, L = 10, ε = 0.2, δ = 1e-6): (0.089206, 0.990756)."""
    nn = int_at_least("n", n, 1)
    open_unit("delta", delta)
    eps0 = 12.0 * epsilon * math.sqrt(math.log(1.0 / delta) / nn)
    return eps0, rr_gamma(L, eps0)


@dataclass(frozen=True)
class RingHistogramBound:
    """Theorem 2 (corrected): guarantee of Algorithm 2 and the RR parameters to run it with.

    Attributes:
        epsilon, delta: the network-DP guarantee `(adv(ε, δ', K), Kδ + δ')`.
        epsilon0: local RR level; gamma: `L/(e^{ε0} + L − 1)`.
        reports: number of shuffled reports per window used in the inversion (n or n−1).
        initial_elements: ⌈γn⌉ uniform elements to pre-load the token with (docs/errata.md, E6).
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


def ring_histogram_loss(
    n: int,
    L: int,
    epsilon: float,
    delta: float,
    K: int,
    delta_prime: float,
    *,
    method: Literal["erlingsson", "fmt"] = "erlingsson",
    reports: Literal["n-1", "n"] = "n-1",
) -> RingHistogramBound:
    """Theorem 2 corrected (App. B; docs/errata.md E3, E4, E6, E22): ring histogram.

    Each of the K windows an observer sees is a shuffle of the window's RR reports, (ε, δ)-DP at the
    per-round target ε when the local level is ε0 (Erlingsson inversion, or FMT numerically with
    `method="fmt"`); advanced composition over K windows gives `(adv(ε, δ', K), Kδ + δ')`.
    `reports="n-1"` (default, E22) inverts with the n−1 reports v does not know; `"n"` is the
    paper's count (worked example: n = 10 000, L = 10, ε = 0.2, δ = δ' = 1e-6, K = 5 →
    ε0 = 0.448400, γ = 0.946449, (2.572191, 6e-6), 56 787 expected random responses).

    Raises:
        ValueError: as `ring_histogram_local_epsilon` / `_fmt`, or on bad K, L, δ'.
    """
    nn = int_at_least("n", n, 2)
    kk = int_at_least("K", K, 1)
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
    return RingHistogramBound(
        epsilon=eps_tot,
        delta=delta_tot,
        epsilon0=eps0,
        gamma=gamma,
        reports=m,
        initial_elements=math.ceil(gamma * nn),
        expected_random_responses=gamma * nn * (kk + 1),
        method=f"theorem2-{method}",
    )
