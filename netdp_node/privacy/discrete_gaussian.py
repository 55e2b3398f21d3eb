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
* one discrete Gaussian (CKS Theorem 4, §3: the discrete Gaussian is ½(Δ/σ)²-concentrated DP
  exactly as the continuous one, and, by additivity of Rényi divergence over independent
  coordinates, so is the d-dimensional product):
  D_α(N_Z(μ, m²I) ‖ N_Z(μ', m²I)) ≤ α‖μ − μ'‖²/(2m²) for integer vectors μ, μ';
* a sum of n independent ones, as an observer sees when several holders' noise lies between two of
  its views (Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian Mechanism", ICML 2021,
  Proposition 14): D_α ≤ α‖μ − μ'‖²/(2nm²) + τd with τ = 10·Σ_{k=1}^{n−1} exp(−2π²m²·k/(k+1))
  (for m ≥ 1/2). As α ≥ 1, α·Δ²/(2S²) + τd ≤ α·(Δ² + 2S²τd)/(2S²) for S² = nσ²: charging
  Δ' = √(Δ_γ² + 2nσ²τd) instead of Δ covers it in every Gaussian RDP/zCDP formula. With
  m > 2^(GRID_BITS−1), τ < 10n·exp(−π²·4^(GRID_BITS−1)), zero in double precision for any n:
  the term is accounted, and negligible.

The (ε, δ) of one release (`discrete_gaussian_epsilon`, and its inverse `discrete_gaussian_sigma`
for calibration). The classic calibration σ = Δ√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1) is
a tail bound of the CONTINUOUS Gaussian and is not proven for the noise sampled here, so it is
used nowhere in what a node charges. Instead: the release is (α, αΔ'²/(2σ²))-RDP for every α > 1
(above, CKS Theorem 4 with Δ'), i.e. ρ-zCDP with ρ = Δ'²/(2σ²), and an (α, r)-RDP mechanism is
(ε, δ)-DP for ε = r + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) (CKS Proposition 12, arXiv v4
numbering; Corollary 13 is its ρ-zCDP form δ = e^{(α−1)(αρ−ε)}·(1 − 1/α)^(α−1)/α). Both hold for
any output distribution, discrete ones included, so the pair is a proof for what is sampled. The
α used is the best of a fixed geometric grid (`_orders()`), so ε is exactly monotone in σ/Δ' and the
inverse is exact. For one release it lies 5–13% above the exact continuous profile (Balle & Wang,
ICML 2018; σ/Δ' from 1 to 100, δ from 1e-9 to 1e-5), where the classic formula lies 20–30% above
it, and above the exact discrete profile (CKS Theorem 7), both checked in the tests; unlike the
classic formula it holds for every ε > 0. The theorems that compose or amplify
per-view (ε, δ) guarantees (ring: Cyffers & Bellet, AISTATS 2022, Theorems 1 and 2; walks:
Theorem 3) take this ε as their per-view input.

Not proven for discrete noise, and therefore never what a node enforces or records: amplification
through gossip averaging, whose views are sums of discrete draws with NON-integer weights
(Muffliato: Cyffers, Even, Bellet, Massoulié, NeurIPS 2022; the IncA audit: Sabater, Ben Mokhtar,
Ramon 2025, Theorem 4.1). Kairouz–Liu–Steinke cover integer-weighted sums only; a real-weighted sum
of lattice variables is supported on a lattice of its own, and with generic weights the map from
the integer noise vector to the view can be injective, so an observer computing exactly could
decode each node's noisy value: in general nothing beyond local DP is provable. The proven bound
there is data processing: every message is a function of the nodes' independent releases
x_w + η_w (and of data-independent noise), so the loss towards any observer is at most that of the
node's own releases composed (the local-DP level, computed as above). That is what those
accountants charge; the continuous-noise figure is shown beside it, labelled as not proven for
discrete noise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from netdp_node.lazy import lazy_module
from netdp_node.privacy.exact_draws import (
    bernoulli_exp_minus_one,
    bernoulli_exp_ratio,
    uniform_below,
)

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost


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
        raise ValueError(
            f"noise std {std:g} is {m} steps of the grid {grid:g}; at most "
            f"{MAX_SCALE} are supported (a std ≤ 2^{30 - GRID_BITS}·σ of the job)"
        )
    return max(1, m)


def round_to_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """The integers round(x/γ) (half to even; exact: γ is a power of two)."""
    k = np.rint(np.asarray(x, dtype=np.float64) / grid)
    if not np.all(np.abs(k) < 2.0**62):
        raise ValueError(f"value too large for the noise grid {grid:g}")
    return k.astype(np.int64)


# -- exact sampling (CKS §5), vectorised, integers only ------------------------------------------
_ACCEPT = 0.4  # below the chance that one discrete Laplace round yields a Gaussian draw (≈ 0.48)
_RUN = 8  # Bernoulli(exp(−1)) draws per element and pass of the geometric count


def _uniform_below(rng: IntegerRng, high: np.ndarray | int, size: int | None = None) -> np.ndarray:
    """Uniform integers in [0, high) (elementwise for an array `high` ≥ 1), int64."""
    if size is None:
        return np.asarray(rng.integers(0, high, dtype=np.int64), dtype=np.int64)
    return np.asarray(rng.integers(0, high, size=size, dtype=np.int64), dtype=np.int64)


def _von_neumann(rng: IntegerRng, r: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(−r/den)) for 0 ≤ r ≤ den (von Neumann, CKS §5.1): K ← 1; while
    Bernoulli(r/(den·K)): K ← K + 1; return K odd. Bernoulli(r/(den·K)) is [U < r, U uniform
    below den] and [V = 0, V uniform below K]; the elements still going share K."""
    odd = np.ones(r.shape, dtype=bool)
    live = np.flatnonzero(r > 0)
    k = 1
    while live.size:
        hit = _uniform_below(rng, den, live.size) < r[live]
        if k > 1:
            hit &= _uniform_below(rng, k, live.size) == 0
        live = live[hit]
        odd[live] = k % 2 == 0  # K becomes k + 1
        k += 1
    return odd


def _bernoulli_exp_minus_one(rng: IntegerRng, size: int) -> np.ndarray:
    """`size` draws of Bernoulli(exp(−1)) (von Neumann with γ = 1: the first step always
    succeeds, then Bernoulli(1/K); the elements still going share K)."""
    odd = np.zeros(size, dtype=bool)  # K = 2 after the first step
    live = np.arange(size)
    k = 2
    while live.size:
        live = live[_uniform_below(rng, k, live.size) == 0]
        odd[live] = k % 2 == 0  # K becomes k + 1
        k += 1
    return odd


def bernoulli_exp(rng: IntegerRng, num: np.ndarray, den: int) -> np.ndarray:
    """Independent Bernoulli(exp(−num/den)) draws (num ≥ 0 int64 array, 1 ≤ den < 2^62):
    exp(−q − r/den) for q = ⌊num/den⌋ is the product of q draws of Bernoulli(exp(−1)) and one of
    Bernoulli(exp(−r/den)) (CKS §5.1), all drawn at once."""
    num = np.asarray(num, dtype=np.int64).reshape(-1)
    den = int(den)
    if np.any(num < 0) or not 1 <= den < 1 << 62:
        raise ValueError("bernoulli_exp needs num >= 0 and 1 <= den < 2^62")
    q, r = np.divmod(num, den)
    ok = _von_neumann(rng, r, den)
    q = np.where(ok, q, 0)
    total = int(q.sum())
    if total:
        owner = np.repeat(np.arange(num.size), q)
        failed = owner[~_bernoulli_exp_minus_one(rng, total)]
        ok[failed] = False
    return ok


def _geometric_exp_minus_one(rng: IntegerRng, size: int) -> np.ndarray:
    """The number of successes before the first failure of Bernoulli(exp(−1)) draws, P[V ≥ v] =
    e^(−v): _RUN draws per element per pass, until every element has met a failure."""
    v = np.zeros(size, dtype=np.int64)
    live = np.arange(size)
    while live.size:
        runs = _bernoulli_exp_minus_one(rng, live.size * _RUN).reshape(live.size, _RUN)
        first = np.where(runs.all(axis=1), _RUN, np.argmin(runs, axis=1))
        v[live] += first
        live = live[first == _RUN]
        if np.any(v > (1 << 31)):  # probability e^(−2^31): never; keeps int64 exact
            raise ArithmeticError("geometric draw out of range")
    return v


def discrete_laplace(rng: IntegerRng, t: int, size: int) -> np.ndarray:
    """`size` draws of the discrete Laplace P[Y = y] ∝ exp(−|y|/t), integer t ≥ 1 (CKS Alg. 2:
    U uniform below t kept with probability exp(−U/t), V geometric, X = U + tV, a random sign,
    X = 0 with the minus sign rejected). Candidates are drawn in batches; the first `size` kept
    ones (i.i.d. given acceptance) are returned."""
    if not 1 <= t <= MAX_SCALE:
        raise ValueError(f"discrete Laplace scale must be in 1..{MAX_SCALE}, got {t}")
    out: list[np.ndarray] = []
    need = size
    while need > 0:
        n = int(need / 0.5) + 4
        u = _uniform_below(rng, t, n)
        keep = _von_neumann(rng, u, t)
        idx = np.flatnonzero(keep)
        x = u[idx] + t * _geometric_exp_minus_one(rng, idx.size)
        neg = _uniform_below(rng, 2, idx.size) == 1
        good = ~(neg & (x == 0))
        y = np.where(neg, -x, x)[good][:need]
        out.append(y)
        need -= y.size
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


# the same algorithms one draw at a time, in Python integers (cheaper than the vectorised
# passes for a handful of draws: a token of dimension 1)
SCALAR_MAX = 8


def _s_discrete_laplace(rng: IntegerRng, t: int) -> int:
    while True:
        u = uniform_below(rng, t)
        if not bernoulli_exp_ratio(rng, u, t):
            continue
        v = 0
        while bernoulli_exp_minus_one(rng):
            v += 1
        x = u + t * v
        neg = uniform_below(rng, 2) == 1
        if not (neg and x == 0):
            return -x if neg else x


def _s_discrete_gaussian(rng: IntegerRng, m: int) -> int:
    while True:
        y = _s_discrete_laplace(rng, m)
        a, b = divmod(abs(abs(y) - m), m)
        if (
            bernoulli_exp_ratio(rng, a * a, 2)
            and bernoulli_exp_ratio(rng, a * b, m)
            and bernoulli_exp_ratio(rng, b * b, 2 * m * m)
        ):
            return y


def discrete_gaussian(rng: IntegerRng, m: int, size: int | tuple[int, ...]) -> np.ndarray:
    """Draws of N_Z(0, m²), P[Z = z] ∝ exp(−z²/(2m²)), integer m ≥ 1 (CKS Algorithm 3 with
    t = m, so σ²/t = m: accept a discrete Laplace(m) draw Y with probability
    exp(−(|Y| − m)²/(2m²)) = exp(−a²/2)·exp(−ab/m)·exp(−b²/(2m²)) for ||Y| − m| = am + b,
    0 ≤ b < m: three exact Bernoulli draws with int64 numerators and denominators). Candidates
    are drawn in batches; the first accepted ones (i.i.d. given acceptance) are returned."""
    m = int(m)
    if not 1 <= m <= MAX_SCALE:
        raise ValueError(f"discrete Gaussian scale must be in 1..{MAX_SCALE}, got {m}")
    shape = (size,) if isinstance(size, int) else tuple(size)
    total = int(np.prod(shape, dtype=np.int64))
    if total <= SCALAR_MAX:
        return np.array(
            [_s_discrete_gaussian(rng, m) for _ in range(total)], dtype=np.int64
        ).reshape(shape)
    out: list[np.ndarray] = []
    need = total
    while need > 0:
        n = int(need / _ACCEPT) + 4
        y = discrete_laplace(rng, m, n)
        a, b = np.divmod(np.abs(np.abs(y) - m), m)
        ok = bernoulli_exp(rng, a * a, 2)
        i = np.flatnonzero(ok)
        ok[i] = bernoulli_exp(rng, a[i] * b[i], m)
        i = np.flatnonzero(ok)
        ok[i] = bernoulli_exp(rng, b[i] * b[i], 2 * m * m)
        z = y[ok][:need]
        out.append(z)
        need -= z.size
    flat = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return flat.reshape(shape)


class GaussianPool:
    """Draws of N_Z(0, m²) from one generator, made in batches and handed out in order: for an
    engine that releases noise many times (a walk's holder, once per holding), the vectorised
    sampler's fixed cost per call is paid once per batch instead of once per release.

    The values handed out are i.i.d. N_Z(0, m²), exactly as from `discrete_gaussian` (each batch is
    `discrete_gaussian(rng, m, size)`, whose draws are i.i.d. given acceptance; a value is handed
    out at most once and in no way depends on the values it is added to). Only the order in which
    the generator's integers are used changes. A batch is exactly the first request's size, then
    grows (×`GROWTH`, at most `MAX_BATCH`) for a scale asked for again, so a job that draws once
    costs what it did. Unused draws stay in memory only, like the generator's state, and are
    never released: the ledger and the accountants cover exactly the draws that are released."""

    MAX_BATCH = 1024
    GROWTH = 16

    def __init__(self, rng: IntegerRng) -> None:
        self.rng = rng
        self._left: dict[int, np.ndarray] = {}  # scale m -> draws not handed out yet
        self._batch: dict[int, int] = {}  # scale m -> size of its last batch

    def draw(self, m: int, size: int | tuple[int, ...]) -> np.ndarray:
        """Draws of N_Z(0, m²) of shape `size` (the next ones of this scale's batches)."""
        m = int(m)
        shape = (size,) if isinstance(size, int) else tuple(size)
        total = int(np.prod(shape, dtype=np.int64))
        left = self._left.get(m)
        have = 0 if left is None else left.size
        if have < total:
            last = self._batch.get(m, 0)
            batch = max(total - have, min(self.MAX_BATCH, last * self.GROWTH))
            new = discrete_gaussian(self.rng, m, batch)  # checks m
            self._batch[m] = batch
            left = new if left is None or have == 0 else np.concatenate([left, new])
        assert left is not None
        out, self._left[m] = left[:total], left[total:]
        return out.reshape(shape)


def job_grid(sigma: float) -> float | None:
    """The grid of a job whose noise std is σ (`grid_for`), or None for a job without noise."""
    return grid_for(sigma) if sigma > 0 else None


def on_grid(x: np.ndarray | float, grid: float | None) -> np.ndarray:
    """γ·round(x/γ) as floats (x itself, as floats, without a grid)."""
    xs = np.asarray(x, dtype=np.float64)
    return xs.copy() if grid is None else round_to_grid(xs, grid).astype(np.float64) * grid


def gaussian_on_grid(
    rng: IntegerRng,
    x: np.ndarray | float,
    std: float,
    grid: float | None,
    size: int | tuple[int, ...] | None = None,
    pool: GaussianPool | None = None,
) -> np.ndarray:
    """γ·(round(x/γ) + Z), Z ~ N_Z(0, ⌈std/γ⌉²) per coordinate: the value x released with
    Gaussian noise of std ≥ `std` on the grid γ. std = 0: γ·round(x/γ) (no noise); grid None
    (a job without noise): x unchanged, and std must be 0. With `pool` (a `GaussianPool` over the
    same node's generator) Z comes from its batches: the same distribution, drawn faster."""
    xs = np.asarray(x, dtype=np.float64)
    shape = xs.shape if size is None else ((size,) if isinstance(size, int) else tuple(size))
    if grid is None:
        if std > 0:
            raise ValueError("noise needs a grid (job_grid of the job's sigma)")
        return np.array(np.broadcast_to(xs, shape), dtype=np.float64)
    k = round_to_grid(np.broadcast_to(xs, shape), grid)
    if std > 0:
        m = grid_scale(std, grid)
        k = k + (discrete_gaussian(rng, m, shape) if pool is None else pool.draw(m, shape))
    return k.astype(np.float64) * grid


def noise_on_grid(
    rng: IntegerRng, std: float, grid: float | None, size: int | tuple[int, ...]
) -> np.ndarray:
    """γ·Z, Z ~ N_Z(0, ⌈std/γ⌉²): noise alone on the grid (zeros if std = 0)."""
    return gaussian_on_grid(rng, 0.0, std, grid, size)


# -- what the accountants charge ------------------------------------------------------------------
def tau(m: float, summands: int) -> float:
    """τ = 10·Σ_{k=1}^{n−1} exp(−2π²m²·k/(k+1)) (Kairouz, Liu, Steinke 2021, Prop. 14), m in grid
    steps. Each term is at most exp(−π²m²); the sum is bounded by (n−1) times it past 64 terms."""
    if summands <= 1:
        return 0.0
    c = 2.0 * math.pi**2 * m * m
    head = min(summands - 1, 64)
    s = sum(math.exp(-c * k / (k + 1)) for k in range(1, head + 1))
    if summands - 1 > head:
        s += (summands - 1 - head) * math.exp(-c * (head + 1) / (head + 2))
    return 10.0 * s


def accounted_sensitivity(
    sensitivity: float, sigma: float, dim: int, summands: int = MAX_SUMMANDS
) -> float:
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
    return math.sqrt(rounded**2 + 2.0 * summands * sigma**2 * t * dim)


def calibrate_on_grid(
    sigma_for: Callable[[float], float], sensitivity: float, dim: int, summands: int = MAX_SUMMANDS
) -> float:
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
    raise ValueError(
        f"no noise std meets the target on the grid: the target needs σ > "
        f"2^{GRID_BITS - 1}·Δ/√d (dim {dim}), below the grid's rounding slack"
    )


def charged_sensitivity(
    params: Mapping[str, Any], sensitivity: float | None = None, sigma_key: str = "sigma"
) -> float:
    """`accounted_sensitivity` for a job's public parameters: Δ = params["sensitivity"] (or
    `sensitivity`), σ = params[sigma_key], d = params["dim"] (1 if absent). Every accountant that
    turns a job's σ and Δ into a privacy loss takes Δ from here."""
    sens = float(params["sensitivity"]) if sensitivity is None else float(sensitivity)
    return accounted_sensitivity(sens, float(params[sigma_key]), int(params.get("dim", 1)))


# -- the (ε, δ) of one release (module docstring: CKS Theorem 4 and Proposition 12) ---------------
@functools.cache
def _orders() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Rényi orders α over which the conversion is minimised, α − 1 from 1e-4 to 1e8, ≈0.7%
    apart (a fixed set: ε is then exactly non-increasing in σ/Δ and the inverse below is exact),
    with ln(1 − 1/α) and ln α; computed at the first use, not at import (numpy loads lazily)."""
    alphas = 1.0 + np.geomspace(1e-4, 1e8, 4000)
    return alphas, np.log1p(-1.0 / alphas), np.log(alphas)


def _check_delta(delta: float) -> float:
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    return float(delta)


def discrete_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε such that adding discrete Gaussian noise of std σ per coordinate to a query of (charged)
    L2 sensitivity Δ' with σ/Δ' = `noise_multiplier` = z is (ε, δ)-DP: ρ = 1/(2z²)-zCDP (CKS
    Theorem 4) converted by CKS Proposition 12, ε = min_α αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)
    over `_orders()`; 0 when δ² ≥ 1 − e^(−ρ) (then the total variation is at most δ, by
    Bretagnolle–Huber with KL ≤ ρ). z = inf gives 0. Valid for every ε (no ε < 1 condition)."""
    delta = _check_delta(delta)
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    if math.isinf(noise_multiplier):
        return 0.0
    rho = 0.5 / (float(noise_multiplier) ** 2)
    if delta * delta + math.expm1(-rho) >= 0.0:
        return 0.0
    alphas, log_term, log_alphas = _orders()
    eps = alphas * rho + log_term - (math.log(delta) + log_alphas) / (alphas - 1.0)
    return max(0.0, float(eps.min()))


def discrete_gaussian_rho(epsilon: float, delta: float) -> float:
    """The largest ρ with `discrete_gaussian_epsilon(1/√(2ρ), δ)` ≤ ε (the same orders, solved
    for ρ at each α: ρ ≤ (ε − ln(1 − 1/α) + (ln δ + ln α)/(α − 1))/α)."""
    delta = _check_delta(delta)
    if not (0.0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    alphas, log_term, log_alphas = _orders()
    r = (epsilon - log_term + (math.log(delta) + log_alphas) / (alphas - 1.0)) / alphas
    best = float(r.max())
    if not best > 0:
        raise ValueError(f"no noise reaches epsilon {epsilon:g} at delta {delta:g}")
    return best


def discrete_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """The smallest z = σ/Δ' (up to a relative 1e-12, rounded up) with
    `discrete_gaussian_epsilon(z, δ)` ≤ ε: the inverse used for calibration."""
    return math.sqrt(0.5 / discrete_gaussian_rho(epsilon, delta)) * (1.0 + 1e-12)


def discrete_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = z·Δ with z = `discrete_gaussian_multiplier(ε, δ)`: the noise std that makes one release
    of sensitivity Δ (ε, δ)-DP; pass it to `calibrate_on_grid` so that it holds for Δ'. Replaces the
    classic σ = Δ√(2 ln(1.25/δ))/ε, which is not proven for discrete noise (module docstring)."""
    if not (0.0 < sensitivity < math.inf):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    return discrete_gaussian_multiplier(epsilon, delta) * float(sensitivity)


def release_epsilon(
    params: Mapping[str, Any], sigma_key: str = "sigma", sensitivity: float | None = None
) -> float:
    """`discrete_gaussian_epsilon` of one release of a job: z = σ/Δ' with Δ' =
    `charged_sensitivity(params, sensitivity, sigma_key)`, at δ = params["delta"]."""
    sigma = float(params[sigma_key])
    if sigma <= 0:
        return math.inf
    z = sigma / charged_sensitivity(params, sensitivity=sensitivity, sigma_key=sigma_key)
    return discrete_gaussian_epsilon(z, float(params["delta"]))
