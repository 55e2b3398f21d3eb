"""IncA (Sabater, Ben Mokhtar, Ramon 2025): reference simulation and exact privacy audit.

Pure functions, no I/O, no global RNG. Implements the computable parts of the paper:

* the noise schemes D_early / D_inc (Def. 3.3, Examples 3.1/3.2) and their Valid conditions
  (Def. 3.4, Lemma 3.5), and the per-party scheme adapted to a dropout history (Algorithm 2, Eq.
  6-9);
* the public schedule: k random out-neighbours per party per iteration from the job's public seed,
  the effective column-stochastic weights W̃^t after dropouts (Alg. 2 lines 10-13);
* a vectorised reference run of Algorithm 2 (`simulate`), used by tests, experiments and as the
  oracle for the networked engine;
* the adversary's linear system (Eq. 10, App. A.2) and the exact covariance condition of
  Theorem 4.1: per honest party k, the privacy loss of the view is Gaussian with scale
  s_k = Δ_x·sqrt(a_kᵀ M⁻¹ a_k), M = σ_η² A Aᵀ + σ_Δ² B Bᵀ (Cholesky + triangular solve).
  This is an analysis of CONTINUOUS Gaussian noise. The networked engine draws η and the Δ terms
  as discrete Gaussians on grids (`discrete_gaussian`); the Δ terms a party injects cancel with
  weights ±1 (integer sums, exact on the grid), but the adversary's views mix η and the Δ terms
  of several parties with the real weights of W̃^t, sums of lattice variables that no theorem we
  know covers (a real-weighted sum of integer draws can be decoded by an observer computing
  exactly). So what this module computes for a view (the audit, `party_report`'s 'epsilon',
  `calibrate`'s σ_Δ) is not proven for the noise sampled: a node's guarantee is the local-DP level
  of its discrete η (`party_report`'s 'local_dp_epsilon', by data processing: every message is a
  function of the releases x + η and of data-independent Δ terms), and the audit is shown beside
  it, labelled.

Conventions (all choices are written down here, in the docstrings and in the tests):

* Parties are 0..n-1; iterations 1..T; y^(t) for t = 0..T. A *message* (t, i) is the value
  y_i^(t) that party i sends in iteration t+1 (t = 0..T-1); (T, i) is i's final value released by
  the dissemination phase. Finals are ALWAYS in the adversary's view (the paper's proofs include
  them because dissemination reveals them).
* Noise columns: Δ of party i is Δ_{i,1..T}, stored at column index l = 0..T-1 (l = t-1).
* Adapted scheme under dropouts (Algorithm 2, our reading): row masking; a party online at T cancels
  every term it injected. The alternative for temporary dropouts (cancel the last outstanding term)
  is not used. Privacy does not depend on that choice being the paper's: the audit is exact for
  whatever (α^(i), U^(i)) the parties actually used, since it is computed from those very rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from netdp_node.privacy.discrete_gaussian import discrete_gaussian_epsilon

__all__ = [
    "Calibration",
    "IncaAudit",
    "LinearView",
    "calibrate",
    "dropout_history",
    "dropout_summary",
    "estimate_terms",
    "expected_mse",
    "explain",
    "lemma44_vectors",
    "linear_view",
    "min_sigma_delta",
    "noise_free_leakage",
    "party_report",
    "rank_condition",
    "sample_corrupted",
    "sample_observed",
    "scales",
    "target_scale",
    "unseen_delivered",
    "unseen_graph",
    "IncaExecution",
    "account",
    "effective_weights",
    "gaussian_epsilon",
    "is_valid_scheme",
    "make_execution",
    "noise_scheme",
    "out_neighbours",
    "party_scheme",
    "simulate",
    "build_execution",
    "execution_from_info",
    "parse_threat",
    "threat_dict",
]


# ---------------------------------------------------------------------------------------------
# Execution record
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IncaExecution:
    """A finished or simulated IncA execution. Everything in it is public (the paper's threat
    model).

    Attributes:
        n: parties 0..n-1 (the job's participant order).
        T: mixing iterations.
        alpha: (T+1,) base α of the noise scheme (Def. 3.3).
        U: (T+1, T) base U.
        weights: T matrices W̃^1..W̃^T, (n, n), column-stochastic effective weights after dropouts
            (a column may sum to less than 1 when a message was lost over a real network,
            see netdp_node.algorithms.inca.engine)
            (Alg. 2 lines 10-12): W̃^t[j, i] is the weight of i's y^(t-1) in j's y^(t); the column
            of an offline i is e_i.
        online: (T+1, n) bool: online[t, i] iff i ∈ O_t; online[0] all True.
        final: (n,) bool: whose (y^(T), ω^(T)) the released result contains.
        out_nbrs: optional (T, n, k) planned out-neighbours (public schedule). When given, a
            colluding party is assumed to see every message PLANNED for it by an online sender,
            even one that did not count (the safe reading over a real network).
    """

    n: int
    T: int
    alpha: np.ndarray
    U: np.ndarray
    weights: tuple[np.ndarray, ...]
    online: np.ndarray
    final: np.ndarray
    out_nbrs: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        n, T = self.n, self.T
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
            raise ValueError(f"n must be an integer >= 2, got {n!r}")
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
            raise ValueError(f"T must be an integer >= 1, got {T!r}")
        if np.shape(self.alpha) != (T + 1,) or np.shape(self.U) != (T + 1, T):
            raise ValueError(
                f"alpha must be ({T + 1},) and U ({T + 1}, {T}), got "
                f"{np.shape(self.alpha)} and {np.shape(self.U)}"
            )
        if len(self.weights) != T:
            raise ValueError(f"need T = {T} weight matrices, got {len(self.weights)}")
        for t, W in enumerate(self.weights, start=1):
            if np.shape(W) != (n, n):
                raise ValueError(f"W̃^{t} must be ({n}, {n}), got {np.shape(W)}")
            # Sub-stochastic columns are allowed: over a real network a message its sender counted
            # can be lost (algorithms.inca.engine, the delivery rule's one-sided residual): that
            # share left the sender and entered nobody.
            if np.any(np.asarray(W) < 0) or np.any(np.sum(W, axis=0) > 1.0 + 1e-12):
                raise ValueError(f"W̃^{t} must be non-negative with column sums <= 1")
        on = np.asarray(self.online)
        if on.shape != (T + 1, n) or on.dtype != bool:
            raise ValueError(f"online must be a ({T + 1}, {n}) bool array")
        if not on[0].all():
            raise ValueError("every party is online at t = 0 (IncA's setting, Sabater et al. 2025)")
        for t, W in enumerate(self.weights, start=1):
            off = np.flatnonzero(~on[t])
            if off.size and not np.allclose(np.asarray(W)[:, off], np.eye(n)[:, off]):
                raise ValueError(f"column of a party offline at t = {t} must be e_i in W̃^{t}")
        fin = np.asarray(self.final)
        if fin.shape != (n,) or fin.dtype != bool:
            raise ValueError(f"final must be a ({n},) bool array")
        if fin.any() and not on[T][fin].all():
            raise ValueError("a final value can only come from a party online at T")

    @property
    def weight_stack(self) -> np.ndarray:
        """The effective weights as one (T, n, n) array."""
        return np.stack([np.asarray(W, dtype=float) for W in self.weights])

    def party_schemes(self) -> tuple[np.ndarray, np.ndarray]:
        """(α^(i), U^(i)) of every party, shapes (n, T+1) and (n, T+1, T) (Algorithm 2)."""
        alphas = np.empty((self.n, self.T + 1))
        Us = np.empty((self.n, self.T + 1, self.T))
        for i in range(self.n):
            alphas[i], Us[i] = party_scheme(self.alpha, self.U, self.online[:, i])
        return alphas, Us

    def sent_messages(self) -> list[tuple[int, int]]:
        """Messages (t, i) actually sent: y_i^(t) by i online at t+1 with some out-neighbour
        (t = 0..T-1). Offline parties send nothing (Alg. 2 line 16)."""
        out = []
        for t in range(self.T):
            for i in np.flatnonzero(self.online[t + 1]):
                out.append((t, int(i)))
        return out


# ---------------------------------------------------------------------------------------------
# Noise schemes (Def. 3.3, 3.4, Examples 3.1, 3.2, Lemma 3.5; Eq. 6-9)
# ---------------------------------------------------------------------------------------------


def noise_scheme(name: str, T: int) -> tuple[np.ndarray, np.ndarray]:
    """(α, U) of 'early' (Example 3.1, D_early) or 'inc' (Example 3.2, D_inc).

    D_early: z_0 = u + Σ_t Δ_t, z_t = −Δ_t (α = e_0, U_0 = 1ᵀ, U_{1:T} = −I).
    D_inc:   z_0 = Δ_1, z_t = u/T − Δ_t + Δ_{t+1} (t < T), z_T = u/T − Δ_T.
    """
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"T must be an integer >= 1, got {T!r}")
    alpha = np.zeros(T + 1)
    U = np.zeros((T + 1, T))
    if name == "early":
        alpha[0] = 1.0
        U[0, :] = 1.0
        U[1:, :] = -np.eye(T)
    elif name == "inc":
        alpha[1:] = 1.0 / T
        U[0, 0] = 1.0
        for t in range(1, T + 1):
            U[t, t - 1] = -1.0
            if t < T:
                U[t, t] = 1.0
    else:
        raise ValueError(f"unknown noise scheme {name!r} (expected 'early' or 'inc')")
    return alpha, U


def is_valid_scheme(alpha: np.ndarray, U: np.ndarray, tol: float = 1e-10) -> bool:
    """Def. 3.4 as we read it (conditions (ii)/(iii) uncertain: the paper's text lost its formulas).

    (i) 1ᵀα = 1 and 1ᵀU = 0 (Eq. 2 for every u and Δ); (ii) U without its first row and
    (iii) U without its last row are invertible. Given (i), (ii) ⇔ (iii) ⇔ rank U = T.
    """
    alpha, U = np.asarray(alpha, float), np.asarray(U, float)
    T = U.shape[1]
    if alpha.shape != (T + 1,) or U.shape != (T + 1, T):
        return False
    if abs(alpha.sum() - 1.0) > tol or np.abs(U.sum(axis=0)).max() > tol:
        return False
    return bool(np.linalg.matrix_rank(U[1:]) == T and np.linalg.matrix_rank(U[:-1]) == T)


def party_scheme(
    alpha: np.ndarray, U: np.ndarray, online_i: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(α^(i), U^(i)) adapted to party i's online history (Algorithm 2, Eq. 6-9).

    With S_i = {t : online_i[t]}: α^(i)_t = α_t·1[t ∈ S_i]; U^(i)_t = U_t for t ∈ S_i, t < T;
    U^(i)_T = −Σ_{s<T} U^(i)_s if T ∈ S_i (the last iteration cancels every term injected);
    rows of iterations the party missed are 0 (nothing injected, missed shares never re-injected).
    Hence Σ_t z_{i,t} = γ_i u_i + 1[T ∉ S_i]·(Σ_{s∈S_i} U_s) Δ_i (Eq. 8), γ_i = Σ_{t∈S_i} α_t.

    Causal: row t < T depends only on online_i[t], and row T on online_i[0..T], so a party can
    draw Δ_i at t = 0 and compute z_{i,t} when iteration t comes (Alg. 2 line 14).
    """
    alpha, U = np.asarray(alpha, float), np.asarray(U, float)
    on = np.asarray(online_i, dtype=bool)
    T = U.shape[1]
    if on.shape != (T + 1,):
        raise ValueError(f"online history must have shape ({T + 1},), got {on.shape}")
    a = np.where(on, alpha, 0.0)
    Ui = np.where(on[:, None], U, 0.0)
    if on[T]:
        Ui[T] = -Ui[:T].sum(axis=0)
    return a, Ui


# ---------------------------------------------------------------------------------------------
# Public schedule and effective weights (Alg. 1 weights, Alg. 2 lines 10-13)
# ---------------------------------------------------------------------------------------------


def out_neighbours(n: int, k: int, T: int, seed: int) -> np.ndarray:
    """(T, n, k) int: k distinct random out-neighbours of each party (never itself) per iteration.

    Drawn from the job's PUBLIC seed with np.random.Generator(np.random.PCG64(seed)) in a fixed
    order: for t = 1..T, for i = 0..n-1, `rng.choice(n - 1, size=k, replace=False)` mapped onto
    P \\ {i} (a draw r ≥ i becomes r + 1). Every node and accountant recomputes the same schedule.
    """
    for name, v, lo in (("n", n, 2), ("k", k, 1), ("T", T, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if k > n - 1:
        raise ValueError(f"k = {k} out-neighbours need n >= k + 1 parties, got n = {n}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    out = np.empty((T, n, k), dtype=np.int64)
    for t in range(T):
        for i in range(n):
            r = rng.choice(n - 1, size=k, replace=False)
            out[t, i] = r + (r >= i)
    return out


def effective_weights(
    out_nbrs_t: np.ndarray, online_t: np.ndarray, counted: set[tuple[int, int]] | None = None
) -> np.ndarray:
    """W̃^t from the planned out-neighbours, the online set and the counted messages.

    Planned weights are even, 1/(k+1) on i and each of its k out-neighbours (Algorithm 1). A message
    from online i to j counts iff j is online and, over a real network, (i, j) ∈ `counted` (both
    ends counted it); None means every message from an online sender to an online
    receiver counted. Uncounted weight goes back to the sender's diagonal (Alg. 2 line 13) so each
    column stays stochastic; the column of an offline sender is e_i (it keeps its mass).
    """
    nb = np.asarray(out_nbrs_t)
    on = np.asarray(online_t, dtype=bool)
    if nb.ndim != 2 or on.shape != (nb.shape[0],):
        raise ValueError(f"out_nbrs_t must be (n, k) and online_t (n,), got {nb.shape}, {on.shape}")
    n, k = nb.shape
    if nb.size and (nb.min() < 0 or nb.max() >= n):
        raise ValueError("out-neighbour index out of range")
    w = 1.0 / (k + 1)
    W = np.zeros((n, n))
    for i in range(n):
        if not on[i]:
            W[i, i] = 1.0
            continue
        if len(set(nb[i].tolist())) != k or i in nb[i]:
            raise ValueError(f"party {i}: out-neighbours must be {k} distinct others")
        W[i, i] = w
        for j in nb[i]:
            j = int(j)
            if on[j] and (counted is None or (i, j) in counted):
                W[j, i] += w
            else:
                W[i, i] += w
    return W


def make_execution(
    n: int,
    k: int,
    T: int,
    seed: int,
    scheme: str = "inc",
    online: np.ndarray | None = None,
    final: np.ndarray | None = None,
    counted: Any = None,
) -> IncaExecution:
    """The execution of an IncA job on the public schedule `out_neighbours(n, k, T, seed)`.

    `online` defaults to everyone online; `final` defaults to online[T] (every party still there
    at T gets its final value disseminated). `counted`, for a run over a real network: a sequence
    of T sets of (sender, receiver) messages both ends counted in iterations 1..T (see
    `effective_weights`); None means every message between online parties counted.
    """
    if counted is not None and len(counted) != T:
        raise ValueError(f"counted must hold one set per iteration ({T}), got {len(counted)}")
    nbrs = out_neighbours(n, k, T, seed)
    on = np.ones((T + 1, n), dtype=bool) if online is None else np.asarray(online, dtype=bool)
    if on.shape != (T + 1, n):
        raise ValueError(f"online must be ({T + 1}, {n}), got {on.shape}")
    fin = on[T].copy() if final is None else np.asarray(final, dtype=bool)
    alpha, U = noise_scheme(scheme, T)
    Ws = tuple(
        effective_weights(nbrs[t - 1], on[t], None if counted is None else set(counted[t - 1]))
        for t in range(1, T + 1)
    )
    return IncaExecution(
        n=n, T=T, alpha=alpha, U=U, weights=Ws, online=on, final=fin, out_nbrs=nbrs
    )


def dropout_history(
    n: int, T: int, rng: np.random.Generator, *, permanent: float = 0.0, temporary: float = 0.0
) -> np.ndarray:
    """(T+1, n) online mask: round(permanent·n) parties leave for good at a uniform iteration
    d ∈ 1..T (offline from d on, as in the paper's Fig. 4); independently every other (t ≥ 1, i) is
    offline with probability `temporary`, except at T where temporary dropouts are back online."""
    if not (0.0 <= permanent <= 1.0 and 0.0 <= temporary < 1.0):
        raise ValueError("permanent must be in [0, 1] and temporary in [0, 1)")
    on = np.ones((T + 1, n), dtype=bool)
    leavers = rng.choice(n, size=int(round(permanent * n)), replace=False)
    for i in leavers:
        on[int(rng.integers(1, T + 1)) :, i] = False
    if temporary > 0:
        miss = rng.random((T - 1, n)) < temporary if T > 1 else np.zeros((0, n), bool)
        on[1:T] &= ~miss
    return on


# ---------------------------------------------------------------------------------------------
# Reference simulation of Algorithm 2
# ---------------------------------------------------------------------------------------------


def simulate(
    ex: IncaExecution, x: np.ndarray, sigma_eta: float, sigma_delta: float, rng: np.random.Generator
) -> dict[str, Any]:
    """Vectorised reference run of Alg. 2 on that execution.

    `x` is (n,) or (n, d) (vectors run coordinate-wise with independent noise). Returns a dict with
    `y` (T+1, n[, d]) and `omega` (T+1, n): y^(t), ω^(t) for every t; `estimate`
    = Σ_{final} y^(T) / Σ_{final} ω^(T) (nan if no final weight); `estimate_over_n`
    = Σ_{final} y^(T) / n; the noise draws `eta` (n[, d]) and `Delta` (n, T[, d]) and the
    injected terms `z` (n, T+1[, d]); `gamma` (n,), the share each party injected (Eq. 9).
    """
    x = np.asarray(x, dtype=float)
    if x.shape[0] != ex.n or x.ndim not in (1, 2):
        raise ValueError(f"x must be ({ex.n},) or ({ex.n}, d), got {x.shape}")
    if not (sigma_eta >= 0 and sigma_delta >= 0):
        raise ValueError("noise standard deviations must be >= 0")
    vec = x.ndim == 2
    X = x if vec else x[:, None]
    n, T, d = ex.n, ex.T, X.shape[1]
    eta = rng.normal(0.0, sigma_eta, size=(n, d)) if sigma_eta > 0 else np.zeros((n, d))
    Delta = rng.normal(0.0, sigma_delta, size=(n, T, d)) if sigma_delta > 0 else np.zeros((n, T, d))
    alphas, Us = ex.party_schemes()
    u = X + eta
    z = alphas[:, :, None] * u[:, None, :] + np.einsum("itl,ild->itd", Us, Delta)
    y = np.empty((T + 1, n, d))
    omega = np.empty((T + 1, n))
    y[0], omega[0] = z[:, 0], alphas[:, 0]
    for t, W in enumerate(ex.weights, start=1):
        y[t] = W @ y[t - 1] + z[:, t]
        omega[t] = W @ omega[t - 1] + alphas[:, t]
    fin = np.asarray(ex.final)
    tot_w = omega[T, fin].sum()
    s = y[T, fin].sum(axis=0)
    est = s / tot_w if tot_w > 0 else np.full(d, np.nan)
    sq = (lambda a: a) if vec else (lambda a: a[..., 0])
    return {
        "y": sq(y),
        "omega": omega,
        "estimate": sq(est),
        "estimate_over_n": sq(s / n),
        "eta": sq(eta),
        "Delta": sq(Delta),
        "z": sq(z),
        "gamma": alphas.sum(axis=1),
    }


# ---------------------------------------------------------------------------------------------
# Audit (Eq. 10, Theorem 4.1)
# ---------------------------------------------------------------------------------------------


def gaussian_epsilon(s: float, delta: float, method: str = "analytic") -> float:
    """ε at δ of a mechanism whose privacy loss is Gaussian with scale s (= Δ/σ of a Gaussian
    mechanism, Theorem 4.1).

    'paper': ε = c·s with c = sqrt(2 ln(1.25/δ)) (Dwork & Roth Thm A.1, Lemma A.1; only VALID
    when the result is < 1; returned regardless, check `< 1` yourself).
    'analytic': the exact ε of Balle & Wang (2018): δ(ε) = Φ(s/2 − ε/s) − e^ε Φ(−s/2 − ε/s),
    solved for ε ≥ 0 by bisection (valid for every ε).
    """
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if not (s >= 0 and math.isfinite(s)):
        raise ValueError(f"s must be a finite number >= 0, got {s!r}")
    if method == "paper":
        return math.sqrt(2.0 * math.log(1.25 / delta)) * s
    if method != "analytic":
        raise ValueError(f"unknown method {method!r} (expected 'paper' or 'analytic')")
    if s == 0.0:
        return 0.0
    from scipy.special import log_ndtr  # lazy: start-up cost

    def dlt(eps: float) -> float:
        a = log_ndtr(s / 2 - eps / s)
        b = eps + log_ndtr(-s / 2 - eps / s)
        return math.exp(a) - math.exp(b) if a > b else 0.0

    if dlt(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while dlt(hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = (lo + hi) / 2
        if dlt(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class LinearView:
    """The adversary's reduced linear system (Eq. 10): obs = A u_H + B Δ_H with [A B] of full row
    rank (rows: an orthonormal-basis recombination of the observed rows, no knowledge lost).

    honest: the honest parties (the order of A's columns); A (r, n_H); B (r, n_H·T), Δ of honest
    party honest[h] at columns h·T .. h·T+T-1; rows_observed: number of raw rows before reduction.
    """

    honest: np.ndarray
    A: np.ndarray
    B: np.ndarray
    rows_observed: int

    @property
    def rank(self) -> int:
        return int(self.A.shape[0])

    @functools.cached_property
    def pencil(self) -> _Pencil:
        """The generalised eigendecomposition used by calibration (computed once per view)."""
        return _Pencil.of(self)


def _coefficient_rows(ex: IncaExecution, wanted: dict[int, list[int]]) -> np.ndarray:
    """Rows of Y^(t) (coefficients of y_i^(t) on (u, Δ)) for the (t, i) in wanted."""
    n, T = ex.n, ex.T
    alphas, Us = ex.party_schemes()
    cols = n + n * T

    def inject(t: int) -> np.ndarray:
        Z = np.zeros((n, cols))
        Z[np.arange(n), np.arange(n)] = alphas[:, t]
        for i in range(n):
            Z[i, n + i * T : n + (i + 1) * T] = Us[i, t]
        return Z

    from scipy.sparse import csr_matrix  # lazy: start-up cost

    Y = inject(0)
    out = [Y[wanted.get(0, [])]]
    for t, W in enumerate(ex.weights, start=1):
        Y = csr_matrix(np.asarray(W)) @ Y + inject(t)  # k+1 non-zeros per column
        if wanted.get(t):
            out.append(Y[wanted[t]])
    return np.vstack(out) if out else np.zeros((0, cols))


def _observed_from(
    ex: IncaExecution, observed: Iterable[tuple[int, int]] | None, corrupted: Iterable[int] | None
) -> tuple[set[tuple[int, int]], np.ndarray]:
    n, T = ex.n, ex.T
    corr = np.zeros(n, dtype=bool)
    if corrupted is not None:
        for c in corrupted:
            c = int(c)
            if not 0 <= c < n:
                raise ValueError(f"corrupted party {c} out of range 0..{n - 1}")
            corr[c] = True
    seen: set[tuple[int, int]] = set()
    for tt, i in observed or ():
        tt, i = int(tt), int(i)
        if not (0 <= tt <= T and 0 <= i < n):
            raise ValueError(f"observed message {(tt, i)} out of range")
        seen.add((tt, i))
    # Finals are always revealed by dissemination (the paper's threat model).
    seen.update((T, int(i)) for i in np.flatnonzero(ex.final))
    if corr.any():
        for t in range(T + 1):  # C's own values at every t.
            seen.update((t, int(c)) for c in np.flatnonzero(corr))
        for t in range(1, T + 1):
            W = np.asarray(ex.weights[t - 1])
            for j in np.flatnonzero(ex.online[t]):
                if ex.out_nbrs is not None:
                    receivers = np.asarray(ex.out_nbrs)[t - 1, j]
                else:
                    receivers = np.flatnonzero(W[:, j] > 0)
                if corr[receivers].any():
                    seen.add((t - 1, int(j)))
    return seen, ~corr


def linear_view(
    ex: IncaExecution,
    *,
    observed: Iterable[tuple[int, int]] | None = None,
    corrupted: Iterable[int] | None = None,
    tol: float = 1e-10,
) -> LinearView:
    """The adversary's linear system (Eq. 10) for an eavesdropper seeing `observed` (messages (t,
    i), value y_i^(t); finals always added) and/or a colluding set `corrupted` (its own values at
    every t, every message sent to it by an online sender, the finals; its u and Δ columns are known
    and removed). Redundant rows are removed by SVD with tolerance tol·σ_max: directions below it
    are taken for rounding noise (the audit's s_k is checked against a least-norm solve on the raw
    rows in the tests).
    """
    seen, honest_mask = _observed_from(ex, observed, corrupted)
    wanted: dict[int, list[int]] = {}
    for t, i in sorted(seen):
        wanted.setdefault(t, []).append(i)
    G = _coefficient_rows(ex, wanted)
    n, T = ex.n, ex.T
    honest = np.flatnonzero(honest_mask)
    dcols = (n + honest[:, None] * T + np.arange(T)[None, :]).ravel()
    G = np.hstack([G[:, honest], G[:, dcols]])
    rows = G.shape[0]
    if rows == 0 or not np.any(G):
        r = np.zeros((0, G.shape[1]))
    else:
        from scipy.linalg import svd  # lazy: start-up cost

        _, S, Vt = svd(G, full_matrices=False, lapack_driver="gesdd")
        keep = S > tol * S[0]
        r = S[keep, None] * Vt[keep]
    nh = honest.size
    return LinearView(honest=honest, A=r[:, :nh], B=r[:, nh:], rows_observed=rows)


@dataclass(frozen=True)
class IncaAudit:
    """Result of `account` (Theorem 4.1 for one execution and one adversary).

    s: (n,) per-party scale s_k = Δ_x·sqrt(a_kᵀ M⁻¹ a_k) of the Gaussian privacy loss, nan for
    corrupted parties. epsilon: (n,) per-party ε at `delta` by the exact analytic Gaussian
    (Balle & Wang 2018) — the figure shown; epsilon_paper: (n,) c·s_k with c = sqrt(2 ln(1.25/δ)),
    the paper's constant (Theorem 4.1), valid only where < 1. The execution's (ε, δ) is the max
    over honest parties (`epsilon_max`, `epsilon_paper_max`).
    """

    s: np.ndarray
    epsilon: np.ndarray
    epsilon_paper: np.ndarray
    delta: float
    sigma_eta: float
    sigma_delta: float
    sensitivity: float
    honest: np.ndarray
    rank: int
    rows_observed: int

    @property
    def s_max(self) -> float:
        return float(np.nanmax(self.s)) if self.honest.size else 0.0

    @property
    def epsilon_max(self) -> float:
        return float(np.nanmax(self.epsilon)) if self.honest.size else 0.0

    @property
    def epsilon_paper_max(self) -> float:
        return float(np.nanmax(self.epsilon_paper)) if self.honest.size else 0.0

    def satisfies(self, epsilon: float, method: str = "paper") -> bool:
        """Theorem 4.1's covariance condition at (ε, δ): Δ_x² a_kᵀM⁻¹a_k ≤ ε²/c² for every honest
        k ('paper'; by `target_scale`, so ε ≥ 1 only where the analytic Gaussian confirms it),
        or the exact analytic-Gaussian ε ≤ ε for every honest k ('analytic')."""
        if not self.honest.size:
            return True
        return bool(self.s_max <= target_scale(epsilon, self.delta, method) * (1 + 1e-12))

    @property
    def paper_constant_valid(self) -> bool:
        """The classic constant c is only a valid (ε, δ) bound for ε < 1 (Dwork & Roth A.1)."""
        return self.epsilon_paper_max < 1.0


def scales(
    view: LinearView, sigma_eta: float, sigma_delta: float, sensitivity: float = 1.0
) -> np.ndarray:
    """s_k for every honest k (view order): Δ_x²·a_kᵀ M⁻¹ a_k with M = σ_η² AAᵀ + σ_Δ² BBᵀ
    (Theorem 4.1).

    M is never formed: with G = [σ_η A, σ_Δ B] (M = GGᵀ) and the QR factorisation Gᵀ = QR,
    M = RᵀR and s_k² = ‖R⁻ᵀ a_k‖². Forming M squares G's condition number, which is large
    when σ_Δ ≫ σ_η (M's spectrum spans σ_Δ²‖B‖² down to the Δ-free directions' σ_η²): its
    Cholesky then lost up to 4 significant digits of s_k², by an amount that changed with the
    BLAS kernel in use.
    """
    if not (sigma_eta > 0 and sigma_delta >= 0):
        raise ValueError("need sigma_eta > 0 and sigma_delta >= 0")
    A, B = view.A, view.B
    r = A.shape[0]
    if r == 0:
        return np.zeros(A.shape[1])
    from scipy.linalg import qr, solve_triangular  # lazy: start-up cost

    G = np.hstack([sigma_eta * A, sigma_delta * B])
    R = qr(G.T, mode="r", overwrite_a=True, check_finite=False)[0][:r]
    X = solve_triangular(R, A, trans="T", lower=False, check_finite=False)
    return sensitivity * np.sqrt(np.einsum("rk,rk->k", X, X))


def account(
    ex: IncaExecution,
    *,
    observed: Iterable[tuple[int, int]] | None = None,
    corrupted: Iterable[int] | None = None,
    sigma_eta: float,
    sigma_delta: float,
    delta: float,
    sensitivity: float = 1.0,
    view: LinearView | None = None,
) -> IncaAudit:
    """(ε, δ) of this execution against an eavesdropper who sees `observed` ((t, i) messages:
    y_i^(t), finals always included) or a colluding set `corrupted` (Eq. 10, Thm 4.1),
    with the per-party s_k. `sensitivity` is Δ_x (the paper's X = [0, 1], Δ_x = 1); for vector
    values run coordinate-wise with independent noise it is the L2 bound on a change of one party's
    vector (the system is the same per coordinate, so s_k² = ‖Δx_k‖²·a_kᵀM⁻¹a_k). A precomputed
    `linear_view` may be passed to skip step 1-2 (used by calibration)."""
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    if view is None:
        view = linear_view(ex, observed=observed, corrupted=corrupted)
    sk = scales(view, sigma_eta, sigma_delta, sensitivity)
    s = np.full(ex.n, np.nan)
    s[view.honest] = sk
    eps = np.full(ex.n, np.nan)
    eps_p = np.full(ex.n, np.nan)
    for h, k in enumerate(view.honest):
        eps[k] = gaussian_epsilon(float(sk[h]), delta, "analytic")
        eps_p[k] = gaussian_epsilon(float(sk[h]), delta, "paper")
    return IncaAudit(
        s=s,
        epsilon=eps,
        epsilon_paper=eps_p,
        delta=delta,
        sigma_eta=sigma_eta,
        sigma_delta=sigma_delta,
        sensitivity=sensitivity,
        honest=view.honest,
        rank=view.rank,
        rows_observed=view.rows_observed,
    )


# ---------------------------------------------------------------------------------------------
# Adversaries: sampled observation sets and colluding sets (the paper's §5)
# ---------------------------------------------------------------------------------------------


def sample_observed(
    ex: IncaExecution, fraction: float, rng: np.random.Generator
) -> set[tuple[int, int]]:
    """An eavesdropper who sees round(fraction·m_t) of the m_t party-messages sent in each
    iteration t, uniformly at random (the paper's Fig. 2: "50% of messages per
    iteration observed at random", read per party-message, not per edge). Finals are added by
    `account`."""
    if not (0.0 <= fraction <= 1.0):
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    seen: set[tuple[int, int]] = set()
    for t in range(ex.T):
        senders = np.flatnonzero(ex.online[t + 1])
        m = int(round(fraction * senders.size))
        seen.update((t, int(i)) for i in rng.choice(senders, size=m, replace=False))
    return seen


def sample_corrupted(
    n: int, size: int, rng: np.random.Generator, exclude: Iterable[int] = ()
) -> np.ndarray:
    """A uniformly random colluding set of `size` parties, never one of `exclude`."""
    pool = np.setdiff1d(np.arange(n), np.asarray(list(exclude), dtype=int))
    if not (0 <= size <= pool.size):
        raise ValueError(f"cannot pick {size} colluders among {pool.size} parties")
    return np.sort(rng.choice(pool, size=size, replace=False))


# ---------------------------------------------------------------------------------------------
# Fast evaluation for calibration: one generalised eigendecomposition per view
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pencil:
    """M(σ_η, σ_Δ)⁻¹ = V diag(1/(σ_η²(1−λ) + σ_Δ²λ)) Vᵀ from Q v = λ (P+Q) v, P = AAᵀ, Q = BBᵀ
    (P + Q ≻ 0 because [A B] has full row rank). C = Vᵀ A, so s_k² = Σ_r C_rk²/(…)."""

    lam: np.ndarray
    C2: np.ndarray

    @classmethod
    def of(cls, view: LinearView) -> _Pencil:
        from scipy.linalg import eigh  # lazy: start-up cost

        if view.rank == 0:
            return cls(np.zeros(0), np.zeros((0, view.A.shape[1])))
        P, Q = view.A @ view.A.T, view.B @ view.B.T
        lam, V = eigh(Q, P + Q)
        return cls(np.clip(lam, 0.0, 1.0), (V.T @ view.A) ** 2)

    def s2(self, sigma_eta: float, sigma_delta: float) -> np.ndarray:
        den = sigma_eta**2 * (1.0 - self.lam) + sigma_delta**2 * self.lam
        return (self.C2 / den[:, None]).sum(axis=0)

    def limit(self, tol: float = 1e-9) -> np.ndarray:
        """σ_η²·s_k² as σ_Δ → ∞ (Δ_x = 1): [Π_K]_kk, the part of u_H seen without Δ noise."""
        return self.C2[self.lam <= tol].sum(axis=0)


def noise_free_leakage(view: LinearView, tol: float = 1e-9) -> np.ndarray:
    """[Π_K]_kk per honest party (view order): lim_{σ_Δ→∞} σ_η² s_k²/Δ_x² (Theorem 4.1, "feasibility
    limit"). Without dropouts and under Theorem 4.5's condition every entry is 1/n_H."""
    return view.pencil.limit(tol)


def target_scale(epsilon: float, delta: float, method: str = "paper") -> float:
    """The largest s with gaussian_epsilon(s, δ, method) ≤ ε.

    'paper': s = ε/c. The classic constant is only proven for ε < 1; for ε ≥ 1 (our
    runs use ε = 1) it is accepted only when the exact analytic Gaussian confirms that s is
    (ε, δ)-DP (it does for ε = 1, δ = 1e-5: the analytic ε at s = 1/c is below 1), else an error.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if method == "paper":
        s = epsilon / math.sqrt(2.0 * math.log(1.25 / delta))
        if epsilon >= 1.0 and gaussian_epsilon(s, delta, "analytic") > epsilon:
            raise ValueError(
                "the paper's constant c = sqrt(2 ln(1.25/δ)) needs ε < 1 and the "
                "exact analytic Gaussian does not confirm it here; use "
                "method='analytic'"
            )
        return s
    lo, hi = 0.0, 1.0
    while gaussian_epsilon(hi, delta, method) <= epsilon:
        lo, hi = hi, 2.0 * hi
    for _ in range(80):
        mid = (lo + hi) / 2
        if gaussian_epsilon(mid, delta, method) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Calibration:
    """Result of `calibrate`. sigma_delta is the worst case over the sampled
    (execution, adversary) pairs; per_sample lists each pair's minimal σ_Δ; sigma_eta_star is
    the lower bound sqrt(c²Δ_x²/(ε² n_H)) (the paper's 'σ_η*')."""

    sigma_eta: float
    sigma_delta: float
    sigma_eta_star: float
    per_sample: tuple[float, ...]
    epsilon: float
    delta: float
    method: str


def min_sigma_delta(
    view: LinearView,
    sigma_eta: float,
    s_target: float,
    sensitivity: float = 1.0,
    lo: float = 1e-6,
    hi: float = 1e8,
    rel: float = 1e-4,
) -> float:
    """Smallest σ_Δ with max_k s_k ≤ s_target at this σ_η (bisection on log σ_Δ; s_k decreases
    in σ_Δ). Returns inf if even σ_Δ → ∞ does not reach the target (σ_η too small for
    this view: σ_η² < Δ_x² max_k Π_kk / s_target²)."""
    pen = view.pencil
    goal = (s_target / sensitivity) ** 2
    if pen.lam.size == 0 or pen.s2(sigma_eta, lo).max() <= goal:
        return 0.0 if pen.lam.size == 0 else lo
    if pen.limit().max() / sigma_eta**2 > goal * (1 - 1e-9) or pen.s2(sigma_eta, hi).max() > goal:
        return math.inf
    a, b = math.log(lo), math.log(hi)
    while b - a > rel:
        m = (a + b) / 2
        if pen.s2(sigma_eta, math.exp(m)).max() <= goal:
            b = m
        else:
            a = m
    return math.exp(b)


def calibrate(
    views: Iterable[LinearView],
    *,
    epsilon: float,
    delta: float,
    kappa: float = 2.0,
    sigma_eta: float | None = None,
    sensitivity: float = 1.0,
    method: str = "paper",
) -> Calibration:
    """σ_η and σ_Δ for a target (ε, δ) by the exact covariance condition (Theorem 4.1).

    σ_η² = κ·c²Δ_x²/(ε² n_H) (the paper's σ_η*² times κ, n_H from the first view) unless
    `sigma_eta` is given; then σ_Δ = the worst case, over the sampled views (executions ×
    adversaries), of the smallest σ_Δ meeting Theorem 4.1 (max_k s_k ≤ s_target; with
    method='paper' s_target = ε/c, with 'analytic' the exact Balle–Wang inversion). Raises
    ValueError when some view cannot reach the target at that σ_η (increase κ)."""
    views = list(views)
    if not views:
        raise ValueError("need at least one sampled execution")
    if not (kappa > 0):
        raise ValueError(f"kappa must be > 0, got {kappa!r}")
    s_target = target_scale(epsilon, delta, method)
    n_h = views[0].honest.size
    star = sensitivity / (s_target * math.sqrt(n_h))
    se = math.sqrt(kappa) * star if sigma_eta is None else float(sigma_eta)
    per = tuple(min_sigma_delta(v, se, s_target, sensitivity) for v in views)
    if any(math.isinf(p) for p in per):
        raise ValueError(
            f"σ_η = {se:.4g} cannot reach ε = {epsilon} on {sum(map(math.isinf, per))}"
            f" of {len(per)} sampled executions whatever σ_Δ (increase κ)"
        )
    return Calibration(
        sigma_eta=se,
        sigma_delta=max(per),
        sigma_eta_star=star,
        per_sample=per,
        epsilon=epsilon,
        delta=delta,
        method=method,
    )


# ---------------------------------------------------------------------------------------------
# Interpretable conditions: Lemma 4.4 vectors, Theorems 4.5/4.6 rank, Theorem 4.8 connectivity
# ---------------------------------------------------------------------------------------------


def unseen_delivered(
    ex: IncaExecution,
    *,
    observed: Iterable[tuple[int, int]] | None = None,
    corrupted: Iterable[int] | None = None,
) -> list[tuple[int, int]]:
    """Messages (t, j) of honest j, not seen by the adversary and effectively delivered (j online
    at t+1 and at least one receiver counted it: W̃^{t+1}_{:,j} ≠ e_j), t = 0..T-1 (Lemma 4.4)."""
    seen, honest = _observed_from(ex, observed, corrupted)
    out = []
    for t in range(ex.T):
        W = np.asarray(ex.weights[t])
        for j in np.flatnonzero(honest & ex.online[t + 1]):
            if (t, int(j)) not in seen and W[int(j), int(j)] < 1.0:
                out.append((t, int(j)))
    return out


def lemma44_vectors(ex: IncaExecution, **adversary: Any) -> tuple[np.ndarray, np.ndarray]:
    """(V, parties): rows v^{(t,j)} = Γ⁻¹(e_j − W̃^{t+1}_{:,j}) restricted to the coalition H'
    (`parties`) for the unseen delivered messages exchanged inside H' (Lemma 4.4, Thm 4.7).

    H' = honest parties with γ_i > 0 that are still online at T (not permanent dropouts;
    Thm 4.7: early leavers are protected by their own uncancelled Δ). A message counts only if all
    its effective receivers are in H' (conservative: a vector with mass outside H' is dropped)."""
    _, honest = _observed_from(ex, adversary.get("observed"), adversary.get("corrupted"))
    alphas, _ = ex.party_schemes()
    gamma = alphas.sum(axis=1)
    inside = honest & ex.online[ex.T] & (gamma > 0)
    parties = np.flatnonzero(inside)
    rows = []
    for t, j in unseen_delivered(ex, **adversary):
        if not inside[j]:
            continue
        col = np.asarray(ex.weights[t])[:, j]
        v = -col.copy()
        v[j] += 1.0
        if np.any(np.abs(v[~inside]) > 0):
            continue
        rows.append(v[parties] / gamma[parties])
    V = np.array(rows) if rows else np.zeros((0, parties.size))
    return V, parties


def rank_condition(ex: IncaExecution, **adversary: Any) -> dict[str, Any]:
    """Theorems 4.5/4.6 (as we reconstruct them): the Lemma 4.4 vectors of the unseen delivered
    messages inside H' span n_{H'} − 1 dimensions. Returns {'holds', 'rank', 'needed',
    'vectors'}. Sufficient, not necessary; the exact statement is the noise-free leakage
    (`noise_free_leakage`, rank(K) = 1)."""
    V, parties = lemma44_vectors(ex, **adversary)
    rank = int(np.linalg.matrix_rank(V)) if V.size else 0
    needed = max(parties.size - 1, 0)
    return {"holds": rank >= needed, "rank": rank, "needed": needed, "vectors": int(V.shape[0])}


def unseen_graph(ex: IncaExecution, **adversary: Any) -> Any:
    """networkx.DiGraph on the coalition H' (see `lemma44_vectors`) with an edge j → k when j's
    unseen message reached k in some iteration (Eq. 15)."""
    import networkx as nx  # lazy: start-up cost

    _, honest = _observed_from(ex, adversary.get("observed"), adversary.get("corrupted"))
    alphas, _ = ex.party_schemes()
    inside = honest & ex.online[ex.T] & (alphas.sum(axis=1) > 0)
    G: nx.DiGraph[int] = nx.DiGraph()
    G.add_nodes_from(int(i) for i in np.flatnonzero(inside))
    for t, j in unseen_delivered(ex, **adversary):
        if not inside[j]:
            continue
        col = np.asarray(ex.weights[t])[:, j]
        for k in np.flatnonzero(col > 0):
            if int(k) != j and inside[k]:
                G.add_edge(j, int(k), t=t + 1)
    return G


def explain(ex: IncaExecution, **adversary: Any) -> dict[str, Any]:
    """What a user reads (Theorem 4.8): whether the graph of unseen delivered messages among the
    honest parties still present is strongly connected (then Theorem 4.6 applies and σ_η close
    to σ_η* suffices), the rank condition of Theorems 4.5/4.6, and a sentence saying so."""
    import networkx as nx  # lazy: start-up cost

    G = unseen_graph(ex, **adversary)
    rc = rank_condition(ex, **adversary)
    strong = G.number_of_nodes() > 0 and nx.is_strongly_connected(G)
    comps = nx.number_strongly_connected_components(G) if G.number_of_nodes() else 0
    weak = G.number_of_nodes() > 0 and nx.is_weakly_connected(G)
    if strong:
        text = (
            f"the {G.number_of_nodes()} honest parties still present form one strongly "
            f"connected graph of unseen messages (Theorem 4.8), so the adversary only learns "
            f"their total beyond the noise: near central-DP protection"
        )
    elif rc["holds"]:
        text = (
            f"the unseen-message graph is not strongly connected ({comps} components) but the "
            f"rank condition of Theorems 4.5/4.6 holds (rank {rc['rank']} of {rc['needed']})"
        )
    else:
        text = (
            f"the unseen messages do not mix the honest parties (rank {rc['rank']} < "
            f"{rc['needed']}): the adversary sees partial sums without Δ noise; protection "
            f"of some parties falls back towards local DP"
        )
    return {
        "strongly_connected": bool(strong),
        "weakly_connected": bool(weak),
        "components": int(comps),
        "edges": G.number_of_edges(),
        "rank_condition": rc,
        "text": text,
    }


# ---------------------------------------------------------------------------------------------
# Utility terms of the released estimate (used by the report and the dropout experiments)
# ---------------------------------------------------------------------------------------------


def estimate_terms(ex: IncaExecution) -> dict[str, Any]:
    """The released estimate is (c_uᵀ(x+η) + Σ c_Δ ∘ Δ)/Σ_{final} ω^(T) with public c_u (n,), c_Δ
    (n, T): the coefficient each party's u and Δ have in Σ_{final} y^(T). Returns those and
    `omega_total`; ‖c_Δ‖² σ_Δ² is the variance of the correlated noise left uncancelled (the
    noise leavers took away from the sum), and Σ c_u the share of values that reached it.

    Computed backwards in O(T n²): b_T = 1_final, b_{t-1} = b_tᵀ W̃^t; the coefficient of z_{i,t}
    in the released sum is b_t[i]."""
    n, T = ex.n, ex.T
    alphas, Us = ex.party_schemes()
    b = np.zeros((T + 1, n))
    b[T] = np.asarray(ex.final, dtype=float)
    for t in range(T, 0, -1):
        b[t - 1] = b[t] @ np.asarray(ex.weights[t - 1])
    c_u = (b.T * alphas).sum(axis=1)
    c_delta = np.einsum("ti,itl->il", b, Us)
    omega_total = float((b.T * alphas).sum())
    return {"c_u": c_u, "c_delta": c_delta, "omega_total": omega_total}


def dropout_summary(ex: IncaExecution, sigma_delta: float) -> dict[str, Any]:
    """What the permanent dropouts cost the released estimate (the correlated noise the
    leavers took with them), from public data only.

    leavers: parties not online at T; uncancelled_noise_std: σ_Δ‖c_Δ‖/Σω, the std of the
    correlated (Δ) noise left in the estimate because messages carrying it were lost or its
    cancelling terms never came; per_party_uncancelled: σ_Δ‖c_Δ,i‖/Σω for each party with a
    non-zero share; value_share_released: Σ c_u / Σ γ, the fraction of the injected values that
    reached the released sum (1 without permanent dropouts)."""
    e = estimate_terms(ex)
    alphas, _ = ex.party_schemes()
    w = e["omega_total"]
    per = (
        np.sqrt((e["c_delta"] ** 2).sum(axis=1)) * sigma_delta / w
        if w > 0
        else np.full(ex.n, np.inf)
    )
    return {
        "leavers": [int(i) for i in np.flatnonzero(~ex.online[ex.T])],
        "uncancelled_noise_std": float(np.sqrt((per**2).sum())),
        "per_party_uncancelled": {int(i): float(per[i]) for i in np.flatnonzero(per > 0)},
        "value_share_released": float(e["c_u"].sum() / alphas.sum()),
        "omega_total": w,
    }


def expected_mse(
    ex: IncaExecution,
    x: np.ndarray,
    sigma_eta: float,
    sigma_delta: float,
    terms: dict[str, Any] | None = None,
) -> float:
    """E[(x̂ − x̄)²] of the weight-tracked estimate on this execution, over η and Δ (exact);
    `terms` = estimate_terms(ex) if already computed."""
    e = estimate_terms(ex) if terms is None else terms
    w = e["omega_total"]
    if w <= 0:
        return math.inf
    x = np.asarray(x, float)
    bias = e["c_u"] @ x / w - x.mean()
    var = sigma_eta**2 * (e["c_u"] ** 2).sum() + sigma_delta**2 * (e["c_delta"] ** 2).sum()
    return float(bias**2 + var / w**2)


# ---------------------------------------------------------------------------------------------
# One party's report under a configured threat model (called by the networked accountant)
# ---------------------------------------------------------------------------------------------


def _threat(threat: Any, n: int) -> tuple[str, Any]:
    if not isinstance(threat, dict) or len(threat) != 1:
        raise ValueError(
            "threat must be one of {'eavesdropper': fraction}, {'colluders': "
            "fraction or count}, {'corrupted': [ids]}, {'observed': [(t, i)]}; got "
            f"{threat!r}"
        )
    ((kind, value),) = threat.items()
    if kind == "eavesdropper":
        if not (0.0 <= float(value) <= 1.0):
            raise ValueError(f"eavesdropper fraction must be in [0, 1], got {value!r}")
        return kind, float(value)
    if kind == "colluders":
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            size = int(value)
        elif isinstance(value, float) and 0.0 <= value < 1.0:
            size = int(round(value * n))
        else:
            raise ValueError(f"colluders must be a count or a fraction in [0, 1), got {value!r}")
        if not (0 <= size <= n - 1):
            raise ValueError(f"colluders = {size} must leave the reporting party honest (< {n})")
        return kind, size
    if kind in ("corrupted", "observed"):
        return kind, list(value)
    raise ValueError(f"unknown threat kind {kind!r}")


def party_report(
    ex: IncaExecution,
    me: int,
    threat: dict[str, Any],
    *,
    sigma_eta: float,
    sigma_delta: float,
    delta: float,
    sensitivity: float = 1.0,
    samples: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """Party `me`'s privacy for this job under a configured threat model.

    threat: {'eavesdropper': f} — a fraction f of the messages of each iteration is seen at random
    (`sample_observed`); {'colluders': m or ρ} — m (or round(ρ·n)) colluding parties, never `me`;
    {'corrupted': [ids]} or {'observed': [(t, i)]} — a specific adversary.

    Choice for a threat that is not a specific adversary (the safe reading: the paper's C-DP and
    E-DP are worst-case notions): `samples` adversaries are drawn from
    np.random.Generator(np.random.PCG64(seed)) — pass the job's public seed so every node and the
    lead compute the same ones — and the report gives the WORST ε over them for `me`
    ('epsilon', the exact analytic Gaussian; 'epsilon_paper', the paper's c·s, valid only < 1);
    the mean is given beside it for information. It is an audit of the sampled placements, not a
    bound over all placements. Finals are always in the adversary's view.
    """
    n = ex.n
    if isinstance(me, bool) or not isinstance(me, (int, np.integer)) or not 0 <= me < n:
        raise ValueError(f"me must be a party index in 0..{n - 1}, got {me!r}")
    me = int(me)
    kind, value = _threat(threat, n)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    adversaries: list[dict[str, Any]] = []
    if kind == "eavesdropper":
        adversaries = [{"observed": sample_observed(ex, value, rng)} for _ in range(samples)]
    elif kind == "colluders":
        adversaries = [
            {"corrupted": sample_corrupted(n, value, rng, exclude=[me])}
            for _ in range(samples if value > 0 else 1)
        ]
    elif kind == "corrupted":
        if me in {int(c) for c in value}:
            raise ValueError(f"party {me} is in the corrupted set: it has no privacy to report")
        adversaries = [{"corrupted": value}]
    else:
        adversaries = [{"observed": value}]
    eps, eps_p, ss, strong, rank_ok = [], [], [], [], []
    worst = None
    for adv in adversaries:
        a = account(
            ex,
            sigma_eta=sigma_eta,
            sigma_delta=sigma_delta,
            delta=delta,
            sensitivity=sensitivity,
            **adv,
        )
        e = explain(ex, **adv)
        eps.append(float(a.epsilon[me]))
        eps_p.append(float(a.epsilon_paper[me]))
        ss.append(float(a.s[me]))
        strong.append(e["strongly_connected"])
        rank_ok.append(e["rank_condition"]["holds"])
        if worst is None or eps[-1] > eps[worst[0]]:
            worst = (len(eps) - 1, e)
    if worst is None:
        raise ValueError("no adversary to sample (samples must be >= 1)")
    w = worst[0]
    return {
        "party": me,
        "threat": {kind: value if kind in ("eavesdropper", "colluders") else "specific"},
        "samples": len(adversaries),
        "delta": delta,
        "epsilon": eps[w],
        "epsilon_paper": eps_p[w],
        "paper_constant_valid": eps_p[w] < 1.0,
        "epsilon_mean": float(np.mean(eps)),
        "s": ss[w],
        # the local-DP level of the discrete η drawn (CKS Thm 4 + Prop. 12, proven for it); the
        # audit's 'epsilon' is a continuous-noise analysis (module docstring)
        "local_dp_epsilon": discrete_gaussian_epsilon(sigma_eta / sensitivity, delta),
        "strongly_connected_fraction": float(np.mean(strong)),
        "rank_condition_fraction": float(np.mean(rank_ok)),
        "explanation": worst[1]["text"],
        "choice": "worst case over sampled adversaries (seeded by the job's public seed)"
        if len(adversaries) > 1 or kind in ("eavesdropper", "colluders")
        else "the given adversary",
        "sigma_eta": sigma_eta,
        "sigma_delta": sigma_delta,
    }


# -- the public execution a job's results state (shared by the engine and the accountant) -----
def build_execution(
    n: int,
    k: int,
    T: int,
    seed: int,
    scheme: str,
    online: np.ndarray,
    counted: Sequence[set[tuple[int, int]]],
    lost: Sequence[tuple[int, int, int]],
    final: np.ndarray,
) -> IncaExecution:
    """The IncaExecution of online sets, counted messages (both ends) and lost messages (sender
    only): `make_execution` returns an uncounted share to its sender's diagonal (line 13), and a
    lost message's share is then taken off it again (it left the sender and entered nobody, so
    that column sums to less than 1)."""
    ex = make_execution(
        n,
        k,
        T,
        seed,
        scheme,
        online=np.asarray(online, dtype=bool),
        final=np.asarray(final, dtype=bool),
        counted=[set(c) for c in counted],
    )
    if not lost:
        return ex
    weights = [np.array(W) for W in ex.weights]
    for t, i, _ in lost:
        weights[t - 1][i, i] -= 1.0 / (k + 1)
    return replace(ex, weights=tuple(weights))


def counted_from_exceptions(
    nbrs: np.ndarray, online: np.ndarray, uncounted: Iterable[Sequence[int]]
) -> list[set[tuple[int, int]]]:
    """The counted messages of every iteration (list of T sets of (sender, receiver)): each planned
    message (`out_neighbours`, (T, n, k)) of a sender online at t, but those in `uncounted`
    ((t, i, j) triples, t from 1)."""
    T, n, k = nbrs.shape
    skip: dict[int, set[tuple[int, int]]] = {}
    for t, i, j in uncounted:
        skip.setdefault(int(t), set()).add((int(i), int(j)))
    out: list[set[tuple[int, int]]] = []
    for t in range(1, T + 1):
        senders = np.flatnonzero(np.asarray(online[t], dtype=bool))
        pairs = zip(np.repeat(senders, k).tolist(), nbrs[t - 1, senders].reshape(-1).tolist())
        drop = skip.get(t, set())
        out.append({p for p in pairs if p not in drop})
    return out


def outcome_from_info(
    spec: Mapping[str, Any], info: Mapping[str, Any]
) -> tuple[np.ndarray, list[set[tuple[int, int]]], list[tuple[int, int, int]], np.ndarray]:
    """The public execution a node's result states (`Output.info`), as (online (T+1, n), counted
    messages per iteration, lost messages, final (n,)), in indices of the participants. Reads both
    forms a ledger may hold: the compact one (`offline`: [t, party] pairs, `uncounted`: [t, sender,
    receiver] planned messages of online senders that did not count: exceptions to "everyone
    online, every planned message counted"), and the dense one of earlier versions (`online`:
    the (T+1) × n 0/1 matrix, `counted`: the [sender, receiver] pairs of every iteration)."""
    p = spec["params"]
    ids = list(spec["participants"])
    index = {v: i for i, v in enumerate(ids)}
    n, T, k = len(ids), int(p["T"]), int(p["k"])
    final = np.zeros(n, dtype=bool)
    final[[index[v] for v in info["final"]]] = True
    lost = [(int(t), index[a], index[b]) for t, a, b in info["lost"]]
    if "online" in info:  # the dense form (ledgers written before the compact one)
        online = np.asarray(info["online"], dtype=bool)
        counted = [{(index[a], index[b]) for a, b in c} for c in info["counted"]]
        return online, counted, lost, final
    online = np.ones((T + 1, n), dtype=bool)
    for t, v in info["offline"]:
        online[int(t), index[v]] = False
    nbrs = out_neighbours(n, k, T, int(spec["public_seed"]))
    counted = counted_from_exceptions(
        nbrs, online, [(t, index[a], index[b]) for t, a, b in info["uncounted"]]
    )
    return online, counted, lost, final


def execution_from_info(spec: Mapping[str, Any], info: Mapping[str, Any]) -> IncaExecution:
    """The public execution a node's result states (`Output.info`: online sets, counted and lost
    messages, finals; either form, `outcome_from_info`), rebuilt for the accountant from the
    node's own ledger."""
    p = spec["params"]
    online, counted, lost, final = outcome_from_info(spec, info)
    return build_execution(
        len(final),
        int(p["k"]),
        int(p["T"]),
        int(spec["public_seed"]),
        str(p["scheme"]),
        online,
        counted,
        lost,
        final,
    )


def parse_threat(threat: str, n: int) -> tuple[str, float]:
    """`eavesdrop:p` (each sent message observed with probability p, as in the paper's Fig. 2) or
    `collude:ρ` (a fraction ρ of the other parties colludes, C-DP)."""
    kind, _, val = str(threat).partition(":")
    try:
        frac = float(val)
    except ValueError:
        raise ValueError(f"threat must be eavesdrop:P or collude:RHO, got {threat!r}") from None
    if kind not in ("eavesdrop", "collude") or not 0.0 <= frac <= 1.0:
        raise ValueError(
            f"threat must be eavesdrop:P or collude:RHO with a fraction in [0, 1], got {threat!r}"
        )
    if kind == "collude" and round(frac * n) >= n - 1:
        raise ValueError(f"threat must leave at least two honest parties, got {threat!r}")
    return kind, frac


def threat_dict(threat: str, n: int) -> dict[str, Any]:
    """The job's `threat` parameter in `party_report`'s form."""
    kind, frac = parse_threat(threat, n)
    return {"eavesdropper": frac} if kind == "eavesdrop" else {"colluders": frac}
