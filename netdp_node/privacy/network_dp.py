"""Network DP accounting for private summation on the directed ring (pure functions).

Cyffers & Bellet, *Privacy Amplification by Decentralization*, AISTATS 2022, Algorithm 1 and
Theorem 1 (App. A), with erratum E1 (docs/errata.md).

Ring conventions (the paper's §3.1): users sit at 1-indexed positions 1..n, the token starts at
user 1 and goes round K times; step `s = (k−1)·n + u` is user u's turn in round k. An observer v
sees the K token values it receives; the difference of two consecutive receptions (an *inter-visit
window*) contains at most one contribution of each other user and, thanks to the noise schedule,
at least one Gaussian noise addition by a user other than v.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    gaussian_rdp,
    rdp_to_dp,
)
from netdp_node.privacy.discrete_gaussian import discrete_gaussian_epsilon

__all__ = [
    "ldp_sum_std",
    "ring_adds_noise",
    "ring_noise_count",
    "ring_release_adds_noise",
    "ring_release_noise_count",
    "ring_sum_loss",
    "ring_sum_std",
    "theorem1",
]


def _check_ring_size(n: int) -> int:
    """Return n as an int; ValueError unless it is an integer ≥ 3 (the schedule needs n−1 ≥ 2)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 3:
        raise ValueError(f"the ring needs n >= 3 users, got n={n!r}")
    return int(n)


def _check_int(name: str, value: int, minimum: int) -> int:
    """Return value as an int, raising ValueError unless it is an integer ≥ minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def ring_adds_noise(position: int, round_: int, n: int) -> bool:
    """Whether the user at ring position p adds Gaussian noise in round k (Algorithm 1).

    Closed form of Algorithm 1's counter: noise is added at global steps 1, n, 2n−1, ... (once every
    n−1 hops), i.e. user p in round k iff `(p + k − 2) mod (n − 1) == 0` (both 1-indexed). Using n
    instead of n−1 would allow a window whose only noise is the observer's own.

    Raises:
        ValueError: unless n ≥ 3, 1 ≤ position ≤ n and round_ ≥ 1.
    """
    nn = _check_ring_size(n)
    p = _check_int("position", position, 1)
    if p > nn:
        raise ValueError(f"position must be in 1..n={nn}, got {position!r}")
    k = _check_int("round_", round_, 1)
    return (p + k - 2) % (nn - 1) == 0


def ring_noise_count(n: int, K: int) -> int:
    """Number of noise additions of Algorithm 1 over K rounds of n users (erratum E1).

    The noise steps are `{1 + j(n−1)} ∩ [1, Kn]`, hence `⌊(Kn − 1)/(n − 1)⌋ + 1` (the paper's
    `⌊Kn/(n−1)⌋` is off, e.g. n = 5, K = 1 gives 2, not 1). K = 0 gives 0.

    Raises:
        ValueError: unless n ≥ 3 and K ≥ 0.
    """
    nn = _check_ring_size(n)
    kk = _check_int("K", K, 0)
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
    kk = _check_int("rounds", rounds, 1)
    return ring_adds_noise(position, round_, n) or (position == n and round_ == kk)


def ring_release_noise_count(n: int, K: int) -> int:
    """Noise additions of the released ring sum: Algorithm 1's count, plus one at the last step
    (user n, round K) unless the schedule already puts noise there, i.e. unless (K−1) mod (n−1) = 0.
    """
    base = ring_noise_count(n, K)
    if K == 0:
        return 0
    return base + (0 if (K - 1) % (_check_ring_size(n) - 1) == 0 else 1)


def theorem1(epsilon: float, delta: float, K: int, delta_prime: float) -> tuple[float, float]:
    """Theorem 1 (App. A): network-DP guarantee of ring summation over K windows.

    Each of the K observed windows is an (ε, δ) mechanism (the LDP level of Perturb(·; σ_loc)), and
    advanced composition (Dwork, Rothblum & Vadhan 2010) gives
    `(sqrt(2K ln(1/δ'))·ε + K·ε·(e^ε − 1), K·δ + δ')`. Worked example: K = 10, ε = 0.5,
    δ = δ' = 1e-6 → (11.554897, 1.1e-5).

    Raises:
        ValueError: if K is not a non-negative integer, or as `advanced_composition`.
    """
    kk = _check_int("K", K, 0)
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
    k = _check_int("windows", windows, 0)
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
    adv_eps, adv_delta = theorem1(eps_w, delta, k, delta_prime)
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
    kk = _check_int("K", K, 0)
    if not (0.0 <= sigma < math.inf):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return math.sqrt(kk * nn) * sigma
