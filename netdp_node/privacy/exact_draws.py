"""Exact coins and choices for the private random decisions that are not noise.

Noise is drawn exactly (`netdp_node.privacy.discrete_gaussian`); so are the other random choices a
privacy guarantee rests on, from uniform integers of the node's private generator (`rng.integers`,
numpy's unbiased bounded integers) and integer arithmetic only, never `rng.random()`:

* L-ary randomized response (the ring and walk histograms, ε0-LDP): `randomized_response` returns
  the true category with probability e^ε0/(e^ε0 + L − 1) and each other one with 1/(e^ε0 + L − 1),
  exactly, for ε0 the exact rational value of the float parameter. By rejection: propose a category
  uniformly; keep the true one, keep another one with probability exp(−ε0), else propose again. The
  kept category has probability ∝ 1 for the true one and ∝ e^(−ε0) for each other, which is the
  distribution above, i.e. the same as "keep the value with probability 1 − γ, else uniform" for
  γ = L/(e^ε0 + L − 1). Bernoulli(exp(−x)) for rational x ≥ 0 is von Neumann's method as in
  Canonne, Kamath & Steinke ("The Discrete Gaussian for Differential Privacy", NeurIPS 2020, §5.1,
  Algorithm 1): exp(−x) = exp(−1)^⌊x⌋·exp(−(x − ⌊x⌋)).
* a coin of rational probability (`bernoulli`): U < a for U uniform on {0, …, b − 1}, p = a/b;
* a choice by rational weights (`weighted_index`: a walk's next hop by the transition row), and a
  uniform one among k (`uniform_below`).

A float comparison `rng.random() < p` has probability ⌈p·2^53⌉/2^53, not p: the guarantees are
stated for p. Integers of any size are drawn (a float's exact value may have a denominator far
above 2^63): 63-bit words concatenated, with rejection above the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Protocol

__all__ = [
    "IntegerRng",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_minus_one",
    "bernoulli_exp_ratio",
    "randomized_response",
    "rr_attempt",
    "uniform_below",
    "weighted_index",
]

_WORD = 63  # bits of one draw of rng.integers(0, 2**63)
_WORD_HIGH = 1 << _WORD


class IntegerRng(Protocol):
    """What the samplers use of a generator: uniform integers only."""

    def integers(self, low: Any, high: Any = ..., size: Any = ...) -> Any: ...


def uniform_below(rng: IntegerRng, high: int) -> int:
    """A uniform integer in {0, …, high − 1}, exactly, for any int `high` ≥ 1."""
    if high < 1:
        raise ValueError(f"uniform_below needs high >= 1, got {high}")
    if high <= _WORD_HIGH:
        return int(rng.integers(0, high))
    bits = (high - 1).bit_length()
    words = -(-bits // _WORD)
    while True:  # rejection: accepts with probability > 1/2
        u = 0
        for _ in range(words):
            u = (u << _WORD) | int(rng.integers(0, _WORD_HIGH))
        u >>= words * _WORD - bits
        if u < high:
            return u


def bernoulli(rng: IntegerRng, p: Fraction) -> bool:
    """True with probability exactly `p` (0 ≤ p ≤ 1)."""
    if not 0 <= p <= 1:
        raise ValueError(f"a probability must lie in [0, 1], got {p}")
    return uniform_below(rng, p.denominator) < p.numerator


def bernoulli_exp_minus_one(rng: IntegerRng) -> bool:
    """Bernoulli(exp(−1)): von Neumann with x = 1 (the first coin always succeeds)."""
    k = 2
    while uniform_below(rng, k) == 0:
        k += 1
    return k % 2 == 1


def bernoulli_exp_ratio(rng: IntegerRng, num: int, den: int) -> bool:
    """True with probability exactly exp(−num/den), for integers num ≥ 0, den ≥ 1 (CKS Algorithm 1:
    for x ≤ 1, K ← 1; while Bernoulli(x/K): K ← K + 1; True iff K is odd; Bernoulli(x/K) is drawn
    as Bernoulli(x)·Bernoulli(1/K), integers only). The discrete Gaussian's scalar sampler uses it
    too (`discrete_gaussian`)."""
    q, r = divmod(num, den)
    k = 1
    while r and uniform_below(rng, den) < r and (k == 1 or uniform_below(rng, k) == 0):
        k += 1
    if k % 2 == 0:
        return False
    return all(bernoulli_exp_minus_one(rng) for _ in range(q))


def bernoulli_exp(rng: IntegerRng, x: Fraction) -> bool:
    """True with probability exactly exp(−x), for rational x ≥ 0 (`bernoulli_exp_ratio`)."""
    if x < 0:
        raise ValueError(f"bernoulli_exp needs x >= 0, got {x}")
    return bernoulli_exp_ratio(rng, x.numerator, x.denominator)


def randomized_response(
    rng: IntegerRng, value: int | None, bins: int, epsilon0: float | Fraction
) -> int:
    """One L-ary randomized response of `value` (in 0..bins−1) at level ε0, exactly (see the module
    doc); `value` None: a uniform category (a report that carries no data)."""
    if bins < 2:
        raise ValueError(f"randomized response needs at least 2 bins, got {bins}")
    if value is None:
        return uniform_below(rng, bins)
    if not 0 <= value < bins:
        raise ValueError(f"category {value} outside 0..{bins - 1}")
    if isinstance(epsilon0, float) and not math.isfinite(epsilon0):
        raise ValueError(f"epsilon0 must be finite, got {epsilon0}")
    e0 = Fraction(epsilon0)
    if e0 < 0:
        raise ValueError(f"epsilon0 must be >= 0, got {epsilon0}")
    while True:  # accepts with probability >= 1/bins
        y = rr_attempt(rng, value, bins, e0)
        if y is not None:
            return y


def rr_attempt(rng: IntegerRng, value: int, bins: int, e0: Fraction) -> int | None:
    """One round of `randomized_response`'s rejection: a uniform category, kept if it is `value`,
    else kept with probability exp(−e0); None if rejected."""
    y = uniform_below(rng, bins)
    return y if y == value or bernoulli_exp(rng, e0) else None


def weighted_index(rng: IntegerRng, weights: Sequence[Fraction]) -> int:
    """An index i with probability weights[i]/Σ weights, exactly (weights ≥ 0, not all 0)."""
    if any(w < 0 for w in weights):
        raise ValueError("weights must be >= 0")
    den = math.lcm(*(w.denominator for w in weights)) if weights else 1
    ints = [w.numerator * (den // w.denominator) for w in weights]
    total = sum(ints)
    if total <= 0:
        raise ValueError("weights must not all be zero")
    u = uniform_below(rng, total)
    for i, w in enumerate(ints):
        if u < w:
            return i
        u -= w
    raise AssertionError("unreachable: u < total")
