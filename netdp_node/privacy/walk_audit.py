"""Walk-conditional ("empirical") privacy accounting of a complete-graph random walk.

Cyffers & Bellet, AISTATS 2022, §5.1, Fig. 1(b), App. H / Fig. 3: given the realised sequence of
token holders, compute for every ordered pair (observer w, protected u) the privacy loss of u towards
w from what w actually saw, compose it over w's observation cycles with the heterogeneous
composition of Kairouz, Oh & Viswanath (ICML 2015, Theorem 3.5), and compare with the local-DP loss
of the same walk.

**GLOBAL KNOWLEDGE.** Every function here needs the whole walk (who held the token at every step).
No honest participant knows it; this is an audit / simulation tool, never a node's own accountant.
Every result carries `global_knowledge = True` and a `knowledge` note.

Model. The walk is x_0, x_1, ..., x_{T−1} (x_0 is the public starting holder, whose
contribution at time 0 is in the token). At each reception i of w, w sees the token; the *cycle* is
the set of contributions since w's previous reception. w knows who sent it the token (x_{i−1}) and
whom it sent the token to last time: these are *flagged* (App. G's known-sender/receiver regime, so
the accounting is more conservative than Theorem 3's hidden path). Per cycle of m unknown Gaussian
contributions (each (ε0, δ)-LDP), the aggregate is (ε0/√m, δ)-DP for a contribution of u; a
protected user flagged c times costs c·ε0/√m, an unflagged one is subsampled with replacement
(`amplification.subsampled_epsilon`).

Two modes:

* `paper_compatible=True` reproduces the authors' procedure (their code's `fig1/randomWalk.py` +
  `fig1/expe.py`) exactly, quirks included: (i) no fictive cap at n; (ii) m counts w's own
  contribution at the start of the cycle; (iii) on w's first reception vertex 0 is flagged as
  "receiver of w's last send"; (iv) all m slots are treated as uniform draws; (v) an observer with no
  reception gets NaN; the sender and the receiver flags are counted twice when they are the same
  slot; the LDP count omits the starting holder's time-0 contribution. It reproduces the authors'
  test vectors to the printed 6 decimals.
* the default mode fixes (ii): a cycle holds m − 1 contributions unknown to w (w's own is known),
  except w's first cycle when w ≠ x_0 (all m unknown). It also flags the sender slot and the
  last-receiver slot once when they coincide, gives observers without receptions a loss of 0 and
  composes only cycles holding at least one unknown contribution, counts x_0's time-0 contribution in
  the LDP baseline, and flags the public starting holder x_0 (not the literal vertex 0) in w's first
  cycle. Quirks (i) and (iv) are kept: both only make the bound more conservative.

Everything per pair is vectorised with numpy: O(T + n²) time, a few n×n float64 arrays (timings:
docs/performance.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from netdp_node.privacy.composition import advanced_composition

__all__ = [
    "GLOBAL_KNOWLEDGE_NOTE",
    "AuditSummary",
    "WalkAudit",
    "WalkCycles",
    "audit_walk",
    "bennett_delta",
    "bennett_epsilon",
    "erlingsson_epsilon_or_nan",
    "hoeffding_delta",
    "hoeffding_epsilon",
    "kairouz_composition",
    "mass_epsilon",
    "sample_walk",
    "summarize_audits",
    "walk_cycles",
]

GLOBAL_KNOWLEDGE_NOTE = (
    "uses global knowledge: the whole walk (every token holder at every step), which no honest "
    "participant knows; an audit/simulation result, not a node's own accountant (Cyffers & "
    "Bellet, AISTATS 2022, §5.1)"
)

Mode = Literal["gaussian", "histogram"]

# Constants of the privacy-blanket numerics (Balle et al. 2019b code as used by the authors).
_TOL_DELTA = 1e-11  # δ(ε) is floored here and set to it for ε ≥ ε0
_MIN_EPS = 1e-6  # left end of the root-finding bracket


# --------------------------------------------------------------------------- Kairouz et al.


def kairouz_composition(
    epsilons: Sequence[float], delta: float, delta_tilde: float | None = None
) -> tuple[float, float]:
    """Heterogeneous composition (Kairouz–Oh–Viswanath 2015, Thm 3.5 simplified).

    For mechanisms ε_1..ε_k, each with δ_l = `delta`:
    `ε_tot = min{ Σε_l, Σ (e^{ε_l}−1)ε_l/(e^{ε_l}+1) + sqrt(2 Σε_l² ln(min(1/δ̃, e + sqrt(Σε_l²)/δ̃))) }`
    and `δ_tot = 1 − (1 − δ̃) Π_l (1 − δ_l)`. `delta_tilde=None` uses the authors' choice δ̃ = k·δ
    (so δ_tot ≈ 2kδ). An empty list composes nothing: (0.0, 0.0).

    Returns:
        (ε_tot, δ_tot).
    """
    eps = np.asarray(list(epsilons), dtype=np.float64)
    if eps.ndim != 1 or np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ValueError("epsilons must be a 1-D sequence of finite numbers >= 0")
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
    k = eps.size
    if k == 0:
        return 0.0, 0.0
    dt = k * delta if delta_tilde is None else delta_tilde
    if not (0.0 < dt < 1.0):
        raise ValueError(f"delta_tilde must satisfy 0 < delta_tilde < 1, got {dt!r}")
    s1 = float(np.sum(eps))
    s2 = float(np.sum(eps * eps))
    s3 = float(np.sum(eps * np.tanh(eps / 2.0)))
    e_tot = float(_kairouz(np.float64(s1), np.float64(s2), np.float64(s3), np.float64(dt)))
    return e_tot, 1.0 - (1.0 - dt) * (1.0 - delta) ** k


def _kairouz(s1: np.ndarray, s2: np.ndarray, s3: np.ndarray, dt: np.ndarray) -> np.ndarray:
    """Vectorised heterogeneous composition from the sums Σε, Σε², Σ(e^ε−1)ε/(e^ε+1) and δ̃
    (elementwise)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_term = np.log(np.minimum(1.0 / dt, math.e + np.sqrt(s2) / dt))
        total = s3 + np.sqrt(2.0 * s2 * log_term)
    return np.where(total > s1, s1, total)


# --------------------------------------------------------------------------- shuffling numerics


def hoeffding_delta(eps: np.ndarray | float, eps0: float, m: np.ndarray | float) -> np.ndarray:
    """δ(ε) of the Hoeffding privacy-blanket bound for m shuffled ε0-LDP reports.

    Generic randomizer: γ_lb = e^{−ε0}, γ_ub = 1; `a = e^ε − 1`, `b = (e^ε + 1)(e^{ε0} − e^{−ε0})`,
    `δ = (1/(γ_lb m))·(b²/(4a))·(1 − γ_lb(1 − e^{−2a²/b²}))^m`, floored at 1e-11, capped at 1, and
    1e-11 for ε ≥ ε0. Vectorised over ε and m.
    """
    e = np.asarray(eps, dtype=np.float64)
    mm = np.asarray(m, dtype=np.float64)
    g = math.exp(-eps0)
    a = np.expm1(e)
    b = (np.exp(e) + 1.0) * (math.exp(eps0) - math.exp(-eps0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_pow = mm * np.log1p(-g * (-np.expm1(-2.0 * a * a / (b * b))))
        d = (1.0 / (g * mm)) * (b * b / (4.0 * a)) * np.exp(log_pow)
    d = np.minimum(np.maximum(d, _TOL_DELTA), 1.0)
    return np.where(e >= eps0, _TOL_DELTA, d)


def bennett_delta(eps: np.ndarray | float, eps0: float, m: np.ndarray | float) -> np.ndarray:
    """δ(ε) of the Bennett privacy-blanket bound for m shuffled ε0-LDP reports.

    `b⁺ = e^{ε0}(1 − e^{ε−2ε0})`, `c = e^{ε0}(e^{2ε} + 1) − 2γ_lb e^{ε−2ε0}`, `α' = c/b⁺²`,
    `β' = a b⁺/c`, `η' = 1/b⁺`, `φ(x) = (1+x)ln(1+x) − x` (x² if that is < 0 numerically), and
    `δ = (1/(γ_lb m))·E_{M~Bin(m,γ_lb)}[1{M≥1} e^{−Mα'φ(β')}/(η' ln(1+β'))]`; the expectation is the
    closed form `((1 − γ + γe^{−α'φ(β')})^m − (1 − γ)^m)/(η' ln(1+β'))`. Floored and capped as
    Hoeffding. Vectorised over ε and m.
    """
    e = np.asarray(eps, dtype=np.float64)
    mm = np.asarray(m, dtype=np.float64)
    g = math.exp(-eps0)
    a = np.expm1(e)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        b_plus = math.exp(eps0) * (1.0 - np.exp(e - 2.0 * eps0))
        c = math.exp(eps0) * (np.exp(2.0 * e) + 1.0) - 2.0 * g * np.exp(e - 2.0 * eps0)
        alpha = c / (b_plus * b_plus)
        beta = a * b_plus / c
        eta = 1.0 / b_plus
        phi = (1.0 + beta) * np.log1p(beta) - beta
        phi = np.where(phi < 0.0, beta * beta, phi)
        exp_coef = alpha * phi
        div_coef = eta * np.log1p(beta)
        log_q0 = mm * math.log1p(-g)
        log_all = mm * np.log1p(-g * (-np.expm1(-exp_coef)))  # ln E[e^{−M·coef}]
        expectation = (np.exp(log_all) - np.exp(log_q0)) / div_coef
        d = expectation / (g * mm)
    d = np.minimum(np.maximum(d, _TOL_DELTA), 1.0)
    return np.where(e >= eps0, _TOL_DELTA, d)


def _solve_eps(
    delta_fn: Callable[[np.ndarray, float, np.ndarray], np.ndarray],
    eps0: float,
    m: np.ndarray,
    delta: float,
    iters: int = 64,
) -> np.ndarray:
    """Vectorised bisection for the root of δ(ε) = δ on [1e-6, ε0], per m.

    δ(ε) − δ is positive below the root and ≤ 0 at ε0 (δ(ε0) = 1e-11), so the bracket always holds;
    where δ jumps at ε0 (no shuffling gain, e.g. m ≤ 50) the root found is ε0, as the authors'
    `root_scalar` finds. 64 halvings give an error far below the code's xtol = 1e-12.
    """
    lo = np.full(m.shape, _MIN_EPS)
    hi = np.full(m.shape, float(eps0))
    # The authors' code asserts δ(1e-6) ≥ δ; where it does not hold, 1e-6 already suffices.
    done = (delta_fn(lo, eps0, m) - delta) <= 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        above = (delta_fn(mid, eps0, m) - delta) > 0.0
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.where(done, _MIN_EPS, 0.5 * (lo + hi))


def hoeffding_epsilon(eps0: float, m: np.ndarray | float, delta: float) -> np.ndarray | float:
    """ε with Hoeffding δ(ε) = δ for m shuffled ε0-LDP reports, vectorised over m."""
    mm = np.atleast_1d(np.asarray(m, dtype=np.float64))
    out = _solve_eps(hoeffding_delta, eps0, mm, delta)
    return float(out[0]) if np.ndim(m) == 0 else out


def bennett_epsilon(eps0: float, m: np.ndarray | float, delta: float) -> np.ndarray | float:
    """ε with Bennett δ(ε) = δ for m shuffled ε0-LDP reports, vectorised over m."""
    mm = np.atleast_1d(np.asarray(m, dtype=np.float64))
    out = _solve_eps(bennett_delta, eps0, mm, delta)
    return float(out[0]) if np.ndim(m) == 0 else out


def erlingsson_epsilon_or_nan(
    eps0: float, m: np.ndarray | float, delta: float
) -> np.ndarray | float:
    """Erlingsson et al. `12 ε0 sqrt(ln(1/δ)/m)` as the authors' numerics use it: NaN unless ε0 ≤ 0.5,
    m ≥ 1000, δ ≤ 0.01 and the result is ≤ ε0 (the checked version is
    `amplification.erlingsson_shuffle_epsilon`)."""
    mm = np.atleast_1d(np.asarray(m, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = 12.0 * eps0 * np.sqrt(math.log(1.0 / delta) / mm)
    ok = (eps0 <= 0.5) & (mm >= 1000) & (delta <= 0.01) & (e <= eps0)
    out = np.where(ok, e, np.nan)
    return float(out[0]) if np.ndim(m) == 0 else out


def mass_epsilon(eps0: float, m: np.ndarray | float, delta: float) -> np.ndarray | float:
    """Shuffle amplification of one cycle of m ε0-LDP reports in histogram mode:
    `min(Hoeffding, Bennett, Erlingsson)`, a NaN Erlingsson value being ignored. Vectorised over m.
    Example vectors (δ = 1e-7): ε0 = 0.1, m = 200 → 0.068123; ε0 = 0.4, m = 5000 → 0.064690."""
    mm = np.atleast_1d(np.asarray(m, dtype=np.float64))
    h = np.atleast_1d(hoeffding_epsilon(eps0, mm, delta))
    b = np.atleast_1d(bennett_epsilon(eps0, mm, delta))
    e = np.atleast_1d(erlingsson_epsilon_or_nan(eps0, mm, delta))
    out = np.fmin(np.minimum(h, b), e)
    return float(out[0]) if np.ndim(m) == 0 else out


# --------------------------------------------------------------------------- walks and cycles


def sample_walk(n: int, T: int, rng: np.random.Generator, start: int = 0) -> np.ndarray:
    """A uniform complete-graph walk of length T: x_0 = start, then T−1
    i.i.d. uniform holders in {0..n−1} (self-loops allowed). The caller supplies the generator."""
    if not (isinstance(n, (int, np.integer)) and n >= 2):
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if not (isinstance(T, (int, np.integer)) and T >= 1):
        raise ValueError(f"T must be an integer >= 1, got {T!r}")
    walk = np.empty(int(T), dtype=np.int64)
    walk[0] = start
    walk[1:] = rng.integers(0, n, size=int(T) - 1)
    return walk


@dataclass(frozen=True)
class WalkCycles:
    """The observation cycles of every observer along one walk (uses global knowledge).

    One entry per reception i = 1..T−1 (arrays of length T−1, in time order):

    Attributes:
        n: number of users; walk: the holders x_0..x_{T−1}.
        observer: x_i, the user receiving at time i.
        m: the paper's cycle length i − last[x_i].
        m_unknown: contributions in the cycle that the observer does not know: m in paper mode;
            m − 1 when the observer held the token at the start of the cycle, else m (default).
        flag_receiver: the user flagged as the receiver of the observer's previous send (−1: none).
        flag_sender: the sender of this token, x_{i−1} (−1: none).
        same_slot: True when both flags denote the same contribution (default mode counts it once).
        paper_compatible: which convention built it.
        global_knowledge: always True.
    """

    n: int
    walk: np.ndarray
    observer: np.ndarray
    m: np.ndarray
    m_unknown: np.ndarray
    flag_receiver: np.ndarray
    flag_sender: np.ndarray
    same_slot: np.ndarray
    paper_compatible: bool
    global_knowledge: bool = True
    knowledge: str = GLOBAL_KNOWLEDGE_NOTE

    def flag_counts(self) -> list[dict[int, int]]:
        """Per cycle, {flagged user: count} as in the authors' first test table."""
        out: list[dict[int, int]] = []
        for a, b, same in zip(
            self.flag_receiver.tolist(), self.flag_sender.tolist(), self.same_slot.tolist()
        ):
            d: dict[int, int] = {}
            if a >= 0:
                d[a] = d.get(a, 0) + 1
            if b >= 0 and not same:
                d[b] = d.get(b, 0) + 1
            out.append(d)
        return out

    def cycles_of(self, w: int) -> list[tuple[int, dict[int, int]]]:
        """The cycles of observer w as (m_unknown, {flagged user: count}); in paper mode m_unknown is
        the paper's m, so this is exactly the authors' first test table."""
        flags = self.flag_counts()
        idx = np.flatnonzero(self.observer == w)
        return [(int(self.m_unknown[j]), flags[j]) for j in idx]


def walk_cycles(
    walk: Sequence[int] | np.ndarray, n: int, *, paper_compatible: bool = False
) -> WalkCycles:
    """Cut a walk into every observer's cycles with their sender/receiver flags.

    Vectorised equivalent of the authors' loop (`last[w]`, `lastsend[w]`). For reception i of w, with p1
    the latest time < i at which w held the token and p2 the latest such time ≤ i − 2:
    `m = i − max(p1, 0)`; paper mode flags `x_{p2+1}` (0 if p2 does not exist) and `x_{i−1}`. The
    default mode flags the slot after w's last holding (x_{p1+1}; x_0 on w's first cycle) and the
    sender slot i − 1, and sets m_unknown = m − 1 when w's own contribution opens the cycle.
    Uses global knowledge (the whole walk).

    Raises:
        ValueError: unless the walk is a 1-D sequence of at least one integer in [0, n).
    """
    x = np.asarray(walk, dtype=np.int64)
    if x.ndim != 1 or x.size < 1:
        raise ValueError("walk must be a non-empty 1-D sequence of holders")
    if not (isinstance(n, (int, np.integer)) and n >= 2):
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if np.any(x < 0) or np.any(x >= n):
        raise ValueError(f"every holder must be in [0, {n})")
    T = x.size
    order = np.argsort(x, kind="stable")
    prev_occ = np.full(T, -1, dtype=np.int64)
    same = x[order[1:]] == x[order[:-1]]
    prev_occ[order[1:][same]] = order[:-1][same]

    i = np.arange(1, T, dtype=np.int64)
    obs = x[1:]
    p1 = prev_occ[1:]
    m = i - np.maximum(p1, 0)
    sender = x[:-1].copy()
    if paper_compatible:
        p2 = np.where(p1 <= i - 2, p1, np.where(p1 >= 0, prev_occ[np.maximum(p1, 0)], -1))
        receiver = np.where(p2 >= 0, x[np.minimum(p2 + 1, T - 1)], 0)
        m_unknown = m.copy()
        same_slot = np.zeros(T - 1, dtype=bool)
    else:
        known_own = p1 >= 0
        m_unknown = np.where(known_own, m - 1, m)
        r_slot = np.where(known_own, p1 + 1, 0)
        receiver = x[np.minimum(r_slot, T - 1)]
        same_slot = r_slot == i - 1
        empty = m_unknown == 0
        receiver = np.where(empty, -1, receiver)
        sender = np.where(empty, -1, sender)
    return WalkCycles(
        n=int(n),
        walk=x,
        observer=obs,
        m=m,
        m_unknown=m_unknown,
        flag_receiver=receiver,
        flag_sender=sender,
        same_slot=same_slot,
        paper_compatible=paper_compatible,
    )


# --------------------------------------------------------------------------- the audit


@dataclass(frozen=True)
class WalkAudit:
    """Per-pair walk-conditional losses of one walk (uses global knowledge).

    Attributes:
        losses: (n, n) array, `losses[w, u]` = ε of protected u towards observer w; NaN on the
            diagonal (and, in paper mode, for observers without receptions, quirk (v)).
        deltas: (n,) δ of each observer's row: `1 − (1 − δ̃)(1 − δ)^k`, δ̃ = kδ, k its cycles.
        ldp: (n,) local-DP loss of each user, `adv(ε0, δ, contributions, δ' = δ)`.
        contributions: (n,) the contribution counts used by `ldp`.
        epsilon0, delta, mode, paper_compatible: the inputs.
        global_knowledge: always True; knowledge: what that means.
    """

    losses: np.ndarray = field(repr=False)
    deltas: np.ndarray = field(repr=False)
    ldp: np.ndarray = field(repr=False)
    contributions: np.ndarray = field(repr=False)
    epsilon0: float
    delta: float
    mode: str
    paper_compatible: bool
    global_knowledge: bool = True
    knowledge: str = GLOBAL_KNOWLEDGE_NOTE

    def _off_diagonal(self) -> np.ndarray:
        n = self.losses.shape[0]
        return self.losses[~np.eye(n, dtype=bool)]

    @property
    def ndp_mean(self) -> float:
        """Mean loss over all ordered pairs u ≠ w."""
        return float(np.mean(self._off_diagonal()))

    @property
    def ndp_min(self) -> float:
        """Smallest loss over all ordered pairs u ≠ w."""
        return float(np.min(self._off_diagonal()))

    @property
    def ndp_max(self) -> float:
        """Largest loss over all ordered pairs u ≠ w."""
        return float(np.max(self._off_diagonal()))

    @property
    def ldp_mean(self) -> float:
        """Mean local-DP loss over users."""
        return float(np.mean(self.ldp))

    @property
    def ldp_min(self) -> float:
        """Smallest local-DP loss over users."""
        return float(np.min(self.ldp))

    @property
    def ldp_max(self) -> float:
        """Largest local-DP loss over users."""
        return float(np.max(self.ldp))

    def summary(self) -> AuditSummary:
        """The summary statistics of this walk."""
        return summarize_audits([self])


@dataclass(frozen=True)
class AuditSummary:
    """Mean/min/max of the network-DP pair losses and of the LDP losses over one or more walks
    Uses global knowledge."""

    ndp_mean: float
    ndp_min: float
    ndp_max: float
    ldp_mean: float
    ldp_min: float
    ldp_max: float
    runs: int
    global_knowledge: bool = True
    knowledge: str = GLOBAL_KNOWLEDGE_NOTE


def summarize_audits(audits: Sequence[WalkAudit]) -> AuditSummary:
    """Pool several walks (e.g. the paper's 10 runs): statistics over all ordered pairs and runs."""
    if not audits:
        raise ValueError("need at least one audit")
    ndp = np.concatenate([a._off_diagonal() for a in audits])
    ldp = np.concatenate([a.ldp for a in audits])
    return AuditSummary(
        float(np.mean(ndp)),
        float(np.min(ndp)),
        float(np.max(ndp)),
        float(np.mean(ldp)),
        float(np.min(ldp)),
        float(np.max(ldp)),
        len(audits),
    )


def _per_cycle_base(
    m_eff: np.ndarray, n: int, epsilon0: float, delta: float, mode: Mode
) -> np.ndarray:
    """ε_A per cycle: ε0/√m (Gaussian aggregation) or the shuffle numerics (histogram)."""
    uniq, inv = np.unique(m_eff, return_inverse=True)
    pos = uniq > 0
    vals = np.zeros(uniq.shape, dtype=np.float64)
    if mode == "gaussian":
        vals[pos] = epsilon0 / np.sqrt(uniq[pos].astype(np.float64))
    elif mode == "histogram":
        if np.any(pos):
            vals[pos] = np.atleast_1d(mass_epsilon(epsilon0, uniq[pos].astype(np.float64), delta))
    else:
        raise ValueError(f"mode must be 'gaussian' or 'histogram', got {mode!r}")
    return vals[inv]


def _g(e: np.ndarray) -> np.ndarray:
    """(e^ε − 1)ε/(e^ε + 1) = ε·tanh(ε/2), the first-order term of the heterogeneous composition."""
    return e * np.tanh(e / 2.0)


def audit_walk(
    walk: Sequence[int] | np.ndarray,
    n: int,
    epsilon0: float,
    delta: float,
    *,
    mode: Mode = "gaussian",
    paper_compatible: bool = False,
) -> WalkAudit:
    """Walk-conditional network-DP audit of one walk (Fig. 1(b) / Fig. 3).

    USES GLOBAL KNOWLEDGE (the whole walk): an audit/simulation tool, not a node's accountant.

    For every ordered pair (observer w, protected u ≠ w), each cycle of w with m unknown
    contributions costs u, with ε_A = ε0/√m (Gaussian) or `mass_epsilon(ε0, m, δ)` (histogram):
    * `ln(1 + (1 − (1−1/n)^m)(e^{ε_A} − 1))` if u is not flagged (subsampling with replacement);
    * `c·ε_A` if u is flagged c ∈ {1, 2} times (sender of the token / receiver of w's last send);
    and the per-cycle losses compose by `kairouz_composition` with δ̃ = kδ (k = w's cycles). The LDP
    baseline of user v is `adv(ε0, δ, #contributions of v, δ' = δ)`. `paper_compatible=True`
    reproduces the authors' code exactly (module docstring); the default fixes quirk (ii) (m − 1
    unknown contributions).

    Vectorised: per-observer sums of the unflagged values plus sparse corrections for the ≤ 2
    flagged users of each cycle (np.bincount over w·n + u), then the composition elementwise on n×n
    arrays.

    Raises:
        ValueError: on a bad walk, n, ε0 ≤ 0, δ ∉ (0, 1) or unknown mode.
    """
    if not (0.0 < epsilon0 < math.inf):
        raise ValueError(f"epsilon0 must be a finite number > 0, got {epsilon0!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    cyc = walk_cycles(walk, n, paper_compatible=paper_compatible)
    nn = cyc.n

    if paper_compatible:
        use = np.ones(cyc.m.shape, dtype=bool)
    else:
        use = cyc.m_unknown > 0
    obs = cyc.observer[use]
    m_eff = cyc.m_unknown[use]
    e_a = _per_cycle_base(m_eff, nn, epsilon0, delta, mode)
    q = -np.expm1(m_eff.astype(np.float64) * math.log1p(-1.0 / nn))
    e0 = np.log1p(q * np.expm1(e_a))  # unflagged: subsampling

    k_obs = np.bincount(obs, minlength=nn).astype(np.float64)
    s1 = np.bincount(obs, weights=e0, minlength=nn)
    s2 = np.bincount(obs, weights=e0 * e0, minlength=nn)
    s3 = np.bincount(obs, weights=_g(e0), minlength=nn)

    # Flagged users: count per cycle (1 or 2) and the replacement value c·ε_A.
    rec = cyc.flag_receiver[use]
    snd = cyc.flag_sender[use]
    same_slot = cyc.same_slot[use]
    both = (rec == snd) & ~same_slot & (rec >= 0)
    fl_user = np.concatenate([rec, snd[~both & ~same_slot]])
    fl_count = np.concatenate([np.where(both, 2.0, 1.0), np.ones(int(np.sum(~both & ~same_slot)))])
    fl_cycle = np.concatenate([np.arange(rec.size), np.flatnonzero(~both & ~same_slot)])
    keep = fl_user >= 0
    fl_user, fl_count, fl_cycle = fl_user[keep], fl_count[keep], fl_cycle[keep]
    fl_obs = obs[fl_cycle]
    e_c = fl_count * e_a[fl_cycle]
    e_b = e0[fl_cycle]
    flat = fl_obs * nn + fl_user

    size = nn * nn
    d1 = np.bincount(flat, weights=e_c - e_b, minlength=size).reshape(nn, nn)
    d1 += s1[:, None]
    d2 = np.bincount(flat, weights=e_c * e_c - e_b * e_b, minlength=size).reshape(nn, nn)
    d2 += s2[:, None]
    d3 = np.bincount(flat, weights=_g(e_c) - _g(e_b), minlength=size).reshape(nn, nn)
    d3 += s3[:, None]
    dt = (k_obs * delta)[:, None]
    losses = _kairouz(d1, d2, d3, dt)
    del d1, d2, d3
    empty_rows = k_obs == 0
    if np.any(empty_rows):
        losses[empty_rows, :] = np.nan if paper_compatible else 0.0
    np.fill_diagonal(losses, np.nan)
    deltas = np.where(
        empty_rows,
        np.nan if paper_compatible else 0.0,
        1.0 - (1.0 - k_obs * delta) * (1.0 - delta) ** k_obs,
    )

    x = cyc.walk
    if paper_compatible:
        contributions = np.bincount(cyc.observer, minlength=nn)
    else:
        contributions = np.bincount(x, minlength=nn)
    ldp = np.zeros(nn, dtype=np.float64)
    for kv in np.unique(contributions):
        ldp[contributions == kv] = advanced_composition(epsilon0, delta, int(kv), delta)[0]

    return WalkAudit(
        losses=losses,
        deltas=deltas,
        ldp=ldp,
        contributions=contributions,
        epsilon0=float(epsilon0),
        delta=float(delta),
        mode=mode,
        paper_compatible=paper_compatible,
    )
