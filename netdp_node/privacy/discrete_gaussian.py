"""Gaussian noise on a grid, sampled exactly, and the sensitivity the accountants charge for it.

Why: a floating-point Gaussian sample leaks the value it was added to through its low bits (Mironov,
"On significance of the least significant bits for differential privacy", CCS 2012). Every noisy
value a node releases is therefore γ·(round(x/γ) + Z) with Z ~ N_Z(0, m²) the discrete Gaussian of
Canonne, Kamath and Steinke ("The Discrete Gaussian for Differential Privacy", NeurIPS 2020),
drawn exactly by their §5 algorithm (discrete Laplace proposals, Bernoulli(exp(−a/b)) by von
Neumann's method) from uniform integers of the node's CSPRNG only (`rng.integers`; no float is
ever drawn). Everything else the node does with the released integer (adding it to a received
token, scaling by a step size) is post-processing.

The grid. γ = 2^(⌈log₂ σ⌉ − GRID_BITS) for the job's noise std σ (`grid_for`), a power of two,
so values on the grid are exact floats and noise that must cancel (IncA's Δ terms) cancels
exactly; the drawn scale is m = ⌈std/γ⌉ ∈ (2^(GRID_BITS−1), 2^GRID_BITS] for std = σ, so the noise
drawn has parameter mγ ≥ std (never less noise than accounted).

What the accountants charge (`accounted_sensitivity`, the one place where the correction enters):
* rounding: ‖γ·round(x/γ) − γ·round(x'/γ)‖₂ ≤ ‖x − x'‖₂ + γ√d (each coordinate moves by at most
  γ/2 at each end), so Δ_γ = Δ + γ√d;
* one discrete Gaussian (CKS §3: the discrete Gaussian is ½(Δ/σ)²-concentrated DP exactly as the
  continuous one, and, by additivity of Rényi divergence over independent coordinates, so is
  the d-dimensional product): D_α(N_Z(μ, m²I) ‖ N_Z(μ', m²I)) ≤ α‖μ − μ'‖²/(2m²) for integer
  vectors μ, μ';
* a sum of n independent ones, as an observer sees when several holders' noise lies between two of
  its views (Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian Mechanism", ICML 2021,
  Proposition 14): D_α ≤ α‖μ − μ'‖²/(2nm²) + τd with τ = 10·Σ_{k=1}^{n−1} exp(−2π²m²·k/(k+1))
  (for m ≥ 1/2). As α ≥ 1, α·Δ²/(2S²) + τd ≤ α·(Δ² + 2S²τd)/(2S²) for S² = nσ²: charging
  Δ' = √(Δ_γ² + 2nσ²τd) instead of Δ covers it in every Gaussian RDP/zCDP formula. With
  m > 2^(GRID_BITS−1), τ < 10n·exp(−π²·4^(GRID_BITS−1)), zero in double precision for any n:
  the term is accounted, and negligible.
Not covered by these theorems, and charged the same Δ' with the continuous analysis: sums with
non-integer weights (gossip averaging: Muffliato, IncA), and the classic tail-bound calibration
σ = Δ√(2 ln(1.25/δ))/ε behind Theorems 1 and 3 (ring, walk-sum), whose Gaussian tail the discrete
one matches only up to a relative O(γ/σ) = O(2^−GRID_BITS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

GRID_BITS = 28  # the job's σ is 2^(GRID_BITS−1) to 2^GRID_BITS grid steps
MAX_SCALE = 1 << 30  # largest m: 2m² < 2^62 keeps every draw in int64
MAX_SUMMANDS = 1 << 40  # default bound on the draws summed in one view (τ grows with it)


class IntegerRng(Protocol):
    """What the sampler needs of a generator: uniform integers (numpy's `Generator.integers`)."""

    def integers(self, low: Any, high: Any = ..., size: Any = ..., dtype: Any = ...) -> Any: ...


# -- the grid --------------------------------------------------------------------------------------
def grid_for(sigma: float) -> float:
    """γ = 2^(⌈log₂ σ⌉ − GRID_BITS): the job's grid for noise std σ > 0 (a power of two)."""
    if not (0.0 < sigma < math.inf):
        raise ValueError(f"the noise std must be a finite number > 0, got {sigma!r}")
    mant, exp = math.frexp(sigma)  # sigma = mant·2^exp, mant in [1/2, 1)
    ceil_log2 = exp - 1 if mant == 0.5 else exp
    return math.ldexp(1.0, ceil_log2 - GRID_BITS)


def grid_scale(std: float, grid: float) -> int:
    """m = ⌈std/γ⌉ (exact rational arithmetic): the discrete Gaussian's scale in grid steps."""
    if not (0.0 < std < math.inf and 0.0 < grid < math.inf):
        raise ValueError(f"std and grid must be finite and > 0, got {std!r}, {grid!r}")
    q = Fraction(std) / Fraction(grid)
    m = q.numerator // q.denominator + (q.numerator % q.denominator != 0)
    if m > MAX_SCALE:
        raise ValueError(f"noise std {std:g} is {m} steps of the grid {grid:g}; at most "
                         f"{MAX_SCALE} are supported (a std ≤ 2^{30 - GRID_BITS}·σ of the job)")
    return max(1, m)


def round_to_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """The integers round(x/γ) (half to even; exact: γ is a power of two)."""
    k = np.rint(np.asarray(x, dtype=np.float64) / grid)
    if not np.all(np.abs(k) < 2.0 ** 62):
        raise ValueError(f"value too large for the noise grid {grid:g}")
    return k.astype(np.int64)


# -- exact sampling (CKS §5), vectorised, integers only ------------------------------------------
def _uniform_below(rng: IntegerRng, high: np.ndarray) -> np.ndarray:
    """Uniform integers in [0, high) elementwise (high ≥ 1, int64)."""
    return np.asarray(rng.integers(0, high, dtype=np.int64), dtype=np.int64)


def bernoulli_exp(rng: IntegerRng, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Independent Bernoulli(exp(−num/den)) draws (num ≥ 0, 1 ≤ den < 2^62, int64 arrays).

    exp(−q − r/den) for q = ⌊num/den⌋: q draws of Bernoulli(exp(−1)) and one of
    Bernoulli(exp(−r/den)), all 1 (CKS §5.1). Bernoulli(exp(−γ)), γ ∈ [0, 1]: K ← 1; while
    Bernoulli(γ/K): K ← K + 1; return K odd (von Neumann). Bernoulli(r/(den·K)) is
    [U < r for U uniform below den] and [V = 0 for V uniform below K]."""
    num = np.asarray(num, dtype=np.int64)
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape)
    if np.any(num < 0) or np.any(den < 1) or np.any(den >= 1 << 62):
        raise ValueError("bernoulli_exp needs num >= 0 and 1 <= den < 2^62")
    q, r = np.divmod(num, den)
    ok = np.ones(num.shape, dtype=bool)
    # the fractional part: K odd
    k = np.ones(num.shape, dtype=np.int64)
    live = r > 0
    while np.any(live):
        idx = np.flatnonzero(live)
        hit = _uniform_below(rng, den[idx]) < r[idx]
        kk = k[idx]
        more = kk > 1
        if np.any(more):
            hit[more] &= _uniform_below(rng, kk[more]) == 0
        k[idx[hit]] += 1
        live[idx[~hit]] = False
    ok &= (k % 2) == 1
    # the integer part: q draws of Bernoulli(exp(-1)), stopped at the first failure
    left = np.where(ok, q, 0)
    while np.any(left > 0):
        idx = np.flatnonzero(left > 0)
        kk = np.ones(idx.size, dtype=np.int64)
        going = np.ones(idx.size, dtype=bool)
        while np.any(going):
            g = np.flatnonzero(going)
            hit = _uniform_below(rng, kk[g]) == 0  # Bernoulli(1/K)
            kk[g[hit]] += 1
            going[g[~hit]] = False
        good = (kk % 2) == 1
        ok[idx[~good]] = False
        left[idx[~good]] = 0
        left[idx[good]] -= 1
    return ok


def _bernoulli_exp_minus_one(rng: IntegerRng, size: int) -> np.ndarray:
    return bernoulli_exp(rng, np.ones(size, dtype=np.int64), np.ones(size, dtype=np.int64))


def discrete_laplace(rng: IntegerRng, t: int, size: int) -> np.ndarray:
    """`size` draws of the discrete Laplace P[Y = y] ∝ exp(−|y|/t), integer t ≥ 1 (CKS Alg. 2)."""
    if not 1 <= t <= MAX_SCALE:
        raise ValueError(f"discrete Laplace scale must be in 1..{MAX_SCALE}, got {t}")
    out = np.zeros(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        n = todo.size
        u = _uniform_below(rng, np.full(n, t, dtype=np.int64))
        keep = bernoulli_exp(rng, u, np.full(n, t, dtype=np.int64))
        v = np.zeros(n, dtype=np.int64)
        going = keep.copy()
        while np.any(going):
            g = np.flatnonzero(going)
            hit = _bernoulli_exp_minus_one(rng, g.size)
            v[g[hit]] += 1
            going[g[~hit]] = False
            if np.any(v > (1 << 31)):  # probability e^(−2^31): never; keeps int64 exact
                raise ArithmeticError("discrete Laplace draw out of range")
        x = u + t * v
        neg = _uniform_below(rng, np.full(n, 2, dtype=np.int64)) == 1
        keep &= ~(neg & (x == 0))
        done = np.flatnonzero(keep)
        out[todo[done]] = np.where(neg[done], -x[done], x[done])
        todo = todo[~keep]
    return out


def discrete_gaussian(rng: IntegerRng, m: int, size: int | tuple[int, ...]) -> np.ndarray:
    """Draws of N_Z(0, m²), P[Z = z] ∝ exp(−z²/(2m²)), integer m ≥ 1 (CKS Algorithm 3 with
    t = m, so σ²/t = m: accept a discrete Laplace(m) draw Y with probability
    exp(−(|Y| − m)²/(2m²)) = exp(−a²/2)·exp(−ab/m)·exp(−b²/(2m²)) for |Y| − m = ±(am + b),
    0 ≤ b < m: three exact Bernoulli draws with int64 numerators and denominators)."""
    m = int(m)
    if not 1 <= m <= MAX_SCALE:
        raise ValueError(f"discrete Gaussian scale must be in 1..{MAX_SCALE}, got {m}")
    shape = (size,) if isinstance(size, int) else tuple(size)
    total = int(np.prod(shape, dtype=np.int64))
    out = np.zeros(total, dtype=np.int64)
    todo = np.arange(total)
    while todo.size:
        n = todo.size
        y = discrete_laplace(rng, m, n)
        dev = np.abs(np.abs(y) - m)
        a, b = np.divmod(dev, m)
        ok = bernoulli_exp(rng, a * a, np.full(n, 2, dtype=np.int64))
        i = np.flatnonzero(ok)
        ok[i] = bernoulli_exp(rng, a[i] * b[i], np.full(i.size, m, dtype=np.int64))
        i = np.flatnonzero(ok)
        ok[i] = bernoulli_exp(rng, b[i] * b[i], np.full(i.size, 2 * m * m, dtype=np.int64))
        done = np.flatnonzero(ok)
        out[todo[done]] = y[done]
        todo = todo[~ok]
    return out.reshape(shape)


def job_grid(sigma: float) -> float | None:
    """The grid of a job whose noise std is σ (`grid_for`), or None for a job without noise."""
    return grid_for(sigma) if sigma > 0 else None


def on_grid(x: np.ndarray | float, grid: float | None) -> np.ndarray:
    """γ·round(x/γ) as floats (x itself, as floats, without a grid)."""
    xs = np.asarray(x, dtype=np.float64)
    return xs.copy() if grid is None else round_to_grid(xs, grid).astype(np.float64) * grid


def gaussian_on_grid(rng: IntegerRng, x: np.ndarray | float, std: float, grid: float | None,
                     size: int | tuple[int, ...] | None = None) -> np.ndarray:
    """γ·(round(x/γ) + Z), Z ~ N_Z(0, ⌈std/γ⌉²) per coordinate: the value x released with
    Gaussian noise of std ≥ `std` on the grid γ. std = 0: γ·round(x/γ) (no noise); grid None
    (a job without noise): x unchanged, and std must be 0."""
    xs = np.asarray(x, dtype=np.float64)
    shape = xs.shape if size is None else ((size,) if isinstance(size, int) else tuple(size))
    if grid is None:
        if std > 0:
            raise ValueError("noise needs a grid (job_grid of the job's sigma)")
        return np.array(np.broadcast_to(xs, shape), dtype=np.float64)
    k = round_to_grid(np.broadcast_to(xs, shape), grid)
    if std > 0:
        k = k + discrete_gaussian(rng, grid_scale(std, grid), shape)
    return k.astype(np.float64) * grid


def noise_on_grid(rng: IntegerRng, std: float, grid: float | None,
                  size: int | tuple[int, ...]) -> np.ndarray:
    """γ·Z, Z ~ N_Z(0, ⌈std/γ⌉²): noise alone on the grid (zeros if std = 0)."""
    return gaussian_on_grid(rng, 0.0, std, grid, size)


# -- what the accountants charge ---------------------------------------------------------------------
def tau(m: float, summands: int) -> float:
    """τ = 10·Σ_{k=1}^{n−1} exp(−2π²m²·k/(k+1)) (Kairouz, Liu, Steinke 2021, Prop. 14), m in grid
    steps. Each term is at most exp(−π²m²); the sum is bounded by (n−1) times it past 64 terms."""
    if summands <= 1:
        return 0.0
    c = 2.0 * math.pi ** 2 * m * m
    head = min(summands - 1, 64)
    s = sum(math.exp(-c * k / (k + 1)) for k in range(1, head + 1))
    if summands - 1 > head:
        s += (summands - 1 - head) * math.exp(-c * (head + 1) / (head + 2))
    return 10.0 * s


def accounted_sensitivity(sensitivity: float, sigma: float, dim: int,
                          summands: int = MAX_SUMMANDS) -> float:
    """Δ' = √((Δ + γ√d)² + 2nσ²τd), γ = `grid_for(σ)`: the L2 sensitivity every Gaussian accountant
    charges for a job whose noise std is σ, contributions of dimension d, sensitivity Δ before
    rounding to the grid, and views summing at most n = `summands` independent draws (module
    docstring: CKS Thm 4/14; Kairouz–Liu–Steinke Prop. 14). σ = 0 (no noise): Δ."""
    if not (sensitivity >= 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity must be a finite number >= 0, got {sensitivity!r}")
    if sigma == 0:
        return float(sensitivity)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    g = grid_for(sigma)
    rounded = sensitivity + g * math.sqrt(dim)
    t = tau(sigma / g, summands)
    if t == 0.0:  # the usual case: σ/γ > 2^(GRID_BITS−1) makes τ underflow
        return rounded
    return math.sqrt(rounded ** 2 + 2.0 * summands * sigma ** 2 * t * dim)


def calibrate_on_grid(sigma_for: Callable[[float], float], sensitivity: float, dim: int,
                      summands: int = MAX_SUMMANDS) -> float:
    """The smallest σ found with σ ≥ sigma_for(Δ'(σ)): calibrate noise (σ from a sensitivity, by
    any nondecreasing rule) so that the target holds for the sensitivity actually charged.
    The iterates increase and stop when the grid (a power of two) no longer moves."""
    s = sigma_for(sensitivity)
    for _ in range(64):
        if not math.isfinite(s):
            break
        need = sigma_for(accounted_sensitivity(sensitivity, s, dim, summands))
        if need <= s:
            return s
        s = need
    raise ValueError(f"no noise std meets the target on the grid: the target needs σ > "
                     f"2^{GRID_BITS - 1}·Δ/√d (dim {dim}), below the grid's rounding slack")


def charged_sensitivity(params: Mapping[str, Any], sensitivity: float | None = None,
                        sigma_key: str = "sigma") -> float:
    """`accounted_sensitivity` for a job's public parameters: Δ = params["sensitivity"] (or
    `sensitivity`), σ = params[sigma_key], d = params["dim"] (1 if absent). Every accountant that
    turns a job's σ and Δ into a privacy loss takes Δ from here."""
    sens = float(params["sensitivity"]) if sensitivity is None else float(sensitivity)
    return accounted_sensitivity(sens, float(params[sigma_key]), int(params.get("dim", 1)))
