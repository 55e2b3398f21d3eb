"""Vectorised Muffliato for the paper reproductions (NumPy/SciPy; thousands of nodes, many steps).

E. Cyffers, M. Even, A. Bellet, L. Massoulié, *Muffliato*, NeurIPS 2022. The networked engines
(`protocols/muffliato.py`) run one node per state machine; the figures need n = 2000–4000 nodes and
hundreds of gossip rounds, so here a gossip round is one sparse matrix product over all nodes.
Nothing in this module is used by a node; it is the simulation the experiments and the other papers'
comparisons run.

* `er_edges`: G(n, q) by geometric skipping over the n(n−1)/2 pairs (exact Bernoulli(q) per pair,
  O(n q n) work), optionally resampled until connected (what the authors' code does).
* `metropolis_csr`: the Metropolis ("Hamilton") weights `1/(1+max(d_v,d_w))`, as a
  sparse matrix built in NumPy (equal to `gossip.metropolis_weights`, which is dense).
* `gap_2` / `gap_def2`: `1 − λ_2(W)` (the code's gap, used for T) and Definition 2's gap, by
  sparse Lanczos (`eigsh`) instead of a dense eigendecomposition.
* `chebyshev_gossip` / `muffliato_average`: Algorithm 1 (§3.2): noise once, then T rounds,
  `x^1 = W x^0`, `x^{t+1} = γ W x^t + (1−γ) x^{t−1}` (docs/errata.md). `x_minus1_zero=True`
  reproduces the authors' GD gossip bug instead (`x^{−1} = 0`, consensus × 1/(2−γ), docs/errata.md).
* `muffliato_gd`: Algorithm 3 (§4; Fig. 1(c)): logistic regression, local full-batch gradient,
  Gaussian noise, clipping, step, then one Muffliato call on a FRESH Erdős–Rényi graph per step
  (Remark 3); or the "central" baseline (exact average of the same noisy steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import eigsh

from netdp_node.algorithms.walk.engine import logistic_coefficients
from netdp_node.privacy.gossip import chebyshev_gamma

__all__ = [
    "GdResult",
    "chebyshev_gossip",
    "er_edges",
    "gap_2",
    "gap_def2",
    "is_connected",
    "logistic_gradients",
    "metropolis_csr",
    "muffliato_average",
    "muffliato_gd",
    "t_mix",
]


# =============================================================================================
# Graphs and gossip matrices
# =============================================================================================


def er_edges(
    n: int, q: float, rng: np.random.Generator, *, connected: bool = False, max_attempts: int = 1000
) -> np.ndarray:
    """Edges of an Erdős–Rényi graph G(n, q) as an (m, 2) int64 array (a < b), each of the
    n(n−1)/2 pairs present independently with probability q.

    The pairs are enumerated row-major over the upper triangle and the gaps between present pairs
    are geometric (exactly a Bernoulli(q) process), so the cost is O(q n²/2), not O(n²). With
    `connected=True` the graph is redrawn until connected, as the authors' code does (a
    real deployment uses c > 1 instead, connected w.h.p.).

    Raises:
        ValueError: bad n or q, or no connected draw in `max_attempts`.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not (0.0 <= q <= 1.0):
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    n = int(n)
    N = n * (n - 1) // 2
    for _ in range(max_attempts):
        if q == 0.0 or N == 0:
            idx = np.zeros(0, dtype=np.int64)
        elif q == 1.0:
            idx = np.arange(N, dtype=np.int64)
        else:
            chunks, pos = [], -1
            while pos < N:
                k = int(N * q + 6.0 * math.sqrt(N * q) + 16)
                gaps = rng.geometric(q, size=k).astype(np.int64)
                c = pos + np.cumsum(gaps)
                chunks.append(c)
                pos = int(c[-1])
            idx = np.concatenate(chunks)
            idx = idx[idx < N]
        # row i starts at s_i = i(n−1) − i(i−1)/2 and holds pairs (i, i+1..n−1)
        i = np.arange(n, dtype=np.int64)
        starts = i * (n - 1) - i * (i - 1) // 2
        a = np.searchsorted(starts, idx, side="right") - 1
        b = idx - starts[a] + a + 1
        edges = np.stack([a, b], axis=1)
        if not connected or is_connected(n, edges):
            return edges
    raise ValueError(f"G({n}, {q}) was not connected in {max_attempts} draws")


def _adjacency(n: int, edges: np.ndarray) -> sp.csr_array:
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    rows = np.concatenate([e[:, 0], e[:, 1]])
    cols = np.concatenate([e[:, 1], e[:, 0]])
    return sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))


def is_connected(n: int, edges: np.ndarray) -> bool:
    """Whether the undirected graph on 0..n−1 with these edges is connected."""
    if n <= 1:
        return True
    k, _ = connected_components(_adjacency(n, edges), directed=False)
    return bool(k == 1)


def metropolis_csr(n: int, edges: np.ndarray) -> sp.csr_array:
    """Metropolis weights: `W_vw = 1/(1+max(d_v, d_w))` on the edges, `W_vv = 1 − Σ`,
    as a CSR matrix; an isolated node keeps its value (`W_vv = 1`, as in App. H.6). Same matrix as
    `gossip.metropolis_weights` (vectorised, for n in the thousands). Edges must be distinct
    pairs a ≠ b (either orientation)."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if e.size and (np.any(e[:, 0] == e[:, 1]) or e.min() < 0 or e.max() >= n):
        raise ValueError("edges must be pairs of distinct node indices in 0..n-1")
    deg = np.bincount(e.ravel(), minlength=n)
    w = 1.0 / (1.0 + np.maximum(deg[e[:, 0]], deg[e[:, 1]]))
    self_w = (
        1.0
        - np.bincount(e[:, 0], weights=w, minlength=n)
        - np.bincount(e[:, 1], weights=w, minlength=n)
    )
    rows = np.concatenate([e[:, 0], e[:, 1], np.arange(n)])
    cols = np.concatenate([e[:, 1], e[:, 0], np.arange(n)])
    vals = np.concatenate([w, w, self_w])
    W = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    W.sum_duplicates()
    return W


def _top_eigs(W: Any, k: int, which: str) -> np.ndarray:
    n = W.shape[0]
    if n <= 400:
        ev = np.linalg.eigvalsh(W.toarray() if sp.issparse(W) else np.asarray(W))
        return ev[-k:] if which == "LA" else ev[:k]
    v0 = np.ones(n) + np.linspace(0.0, 1.0, n)  # deterministic start vector
    return np.sort(
        eigsh(sp.csr_array(W), k=k, which=which, v0=v0, tol=1e-10, return_eigenvectors=False)
    )


def gap_2(W: Any) -> float:
    """`1 − λ_2(W)`, the authors' spectral gap (their code; ignores negative eigenvalues).
    Used for T (`t_mix`) and γ as the code does. Sparse Lanczos for n > 400."""
    return float(1.0 - _top_eigs(W, 2, "LA")[0])


def gap_def2(W: Any) -> float:
    """Definition 2's gap `min_{λ ≠ 1} (1 − |λ|)` (§2.1), negative eigenvalues included."""
    lam2 = _top_eigs(W, 2, "LA")[0]
    lmin = _top_eigs(W, 1, "SA")[0]
    return float(max(0.0, 1.0 - max(abs(lam2), abs(lmin))))


def t_mix(n: int, sigma: float, gap: float, spread: float = 0.25) -> int:
    """The authors' `T_mix`: `ceil(ln(n/σ² · max(spread, σ²)) / sqrt(gap))`, spread
    being the public data-spread bound (0.25 for data in [0, 1])."""
    return math.ceil(math.log(n / sigma**2 * max(spread, sigma**2)) / math.sqrt(gap))


# =============================================================================================
# Algorithm 1 (synchronous Muffliato), vectorised
# =============================================================================================


def chebyshev_gossip(
    W: Any,
    x0: np.ndarray,
    T: int,
    gamma: float | None = None,
    *,
    x_minus1_zero: bool = False,
    record: bool = False,
) -> Any:
    """T synchronous gossip rounds on all nodes at once (Algorithm 1).

    `gamma=None`: plain gossip `x^{t+1} = W x^t` (Fig. 1(b), dropout). Otherwise Chebyshev:
    `x^1 = W x^0` then `x^{t+1} = γ W x^t + (1−γ) x^{t−1}` (docs/errata.md), so `x^t = P_t(W) x^0`
    and the mean is preserved. `x_minus1_zero=True` is the authors' GD gossip instead: the update
    rule from t = 0 with `x^{−1} = 0`, i.e. `x^1 = γ W x^0`, which multiplies the consensus by
    `1/(2−γ)` (docs/errata.md). x0 has shape (n,) or (n, D).

    Returns x^T, or with `record=True` the list `[x^0, …, x^T]` (the messages of round t are x^t).
    """
    x = np.asarray(x0, dtype=np.float64)
    prev = np.zeros_like(x)  # x^{−1}: read only with x_minus1_zero (otherwise x^1 = W x^0)
    out = [x] if record else None
    for t in range(int(T)):
        wx = W @ x
        if gamma is None:
            nxt = wx
        elif t == 0 and not x_minus1_zero:
            nxt = wx
        else:
            nxt = gamma * wx + (1.0 - gamma) * prev
        prev, x = x, np.asarray(nxt)
        if out is not None:
            out.append(x)
    return out if record else x


def muffliato_average(
    x: np.ndarray,
    W: Any,
    T: int,
    sigma: float,
    rng: np.random.Generator,
    *,
    gamma: float | None = None,
    clip: tuple[float, float] | None = None,
    x_minus1_zero: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 (§3.2) on all nodes: `x^0 = x + η`, `η ~ N(0, σ² I)` once per node, then
    `chebyshev_gossip(W, x^0, T, gamma)`. `clip=(lo, hi)` clips the noisy values (the authors'
    averaging code, post-processing, App. H.6). Returns (x^T, x^0)."""
    x0 = np.asarray(x, dtype=np.float64) + rng.normal(0.0, sigma, size=np.shape(x))
    if clip is not None:
        x0 = np.clip(x0, clip[0], clip[1])
    return chebyshev_gossip(W, x0, T, gamma, x_minus1_zero=x_minus1_zero), x0


# =============================================================================================
# Algorithm 3 (Muffliato-GD) for logistic regression, vectorised
# =============================================================================================


def logistic_gradients(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Every node's full local gradient of `mean_x ln(1 + exp(−y θᵀx))`.

    theta (n, d) (one model per node; (d,) is broadcast), X (n, m, d), y (n, m) in {−1, +1}.
    Returns (n, d)."""
    th = np.broadcast_to(np.asarray(theta, dtype=np.float64), (X.shape[0], X.shape[2]))
    margin = y * np.einsum("nmd,nd->nm", X, th)
    coef = logistic_coefficients(margin, y)
    return np.einsum("nm,nmd->nd", coef, X) / X.shape[1]


def _clip_rows(u: np.ndarray, L: float) -> np.ndarray:
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    return u * np.minimum(1.0, L / np.maximum(norms, 1e-300))


@dataclass
class GdResult:
    """One Muffliato-GD (or central) run.

    Attributes:
        thetas: per evaluation point t = 0..iterations, every node's model (n, d) before step t
            (t = iterations: after the last step).
        gossip_rounds: per step, T_g (0 for the central baseline).
        gaps: per step, `1 − λ_2(W_t)` (code's gap; nan for central).
        gammas: per step, γ used.
        degrees: per step, every node's degree in that step's graph (int32, (n,)); empty for
            central.
        adjacent_to: per step, boolean mask of the neighbours of `watch` in that step's graph.
        scores: per evaluation point, whatever `evaluate(thetas_t)` returned (if given).
    """

    thetas: list[np.ndarray] = field(default_factory=list)
    gossip_rounds: list[int] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    gammas: list[float] = field(default_factory=list)
    degrees: list[np.ndarray] = field(default_factory=list)
    adjacent_to: list[np.ndarray] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)


def muffliato_gd(
    X: np.ndarray,
    y: np.ndarray,
    iterations: int,
    rng: np.random.Generator,
    *,
    mode: Literal["muffliato", "central"] = "muffliato",
    step: float = 0.7,
    noise_std: float = 0.75,
    clip: float = 0.4,
    order: Literal["code", "theorem"] = "code",
    q: float | None = None,
    x_minus1_zero: bool = False,
    gossip_sigma: float = 1.5,
    rounds: int | Callable[[float], int] | None = None,
    watch: int = 0,
    evaluate: Callable[[np.ndarray], Any] | None = None,
    keep_thetas: bool = False,
) -> GdResult:
    """Muffliato-GD (Algorithm 3, §4) with a fresh Erdős–Rényi graph per step (Remark 3,
    App. H.5), logistic regression, θ_v^0 = 0, or the "central" (trusted aggregator) baseline.

    Per step t, every node v:
      1. `g_v` = full local gradient (`logistic_gradients`);
      2. `order="code"` (the authors' gd.py): `u_v = clip_L(g_v + N(0, s²I))`;
         `order="theorem"`: `u_v = clip_L(g_v) + N(0, s²I)` (the order the sensitivity needs); s =
         `noise_std` (the code's 0.5·σ = 0.75);
      3. `θ̂_v = θ_v − step·u_v`;
      4. muffliato: a fresh `G(n, q)` (q = ln n/n by default) resampled until connected, Metropolis
         W_t, `T_g = rounds` (default the code's `t_mix(n, gossip_sigma, 1 − λ_2(W_t))`; a
         callable receives the gap), γ from `1 − λ_2(W_t)`, `θ^{t+1} = P_{T_g}(W_t) θ̂` — the
         gradient noise plays the role of η (no extra gossip noise, as the code);
         central: `θ_v^{t+1} = mean_w θ̂_w` for every v.
    `x_minus1_zero=True` runs the authors' gossip bug (docs/errata.md); the default is Algorithm 1
    as specified (`x^1 = W x^0`). Node 0's privacy bookkeeping (degrees, adjacency to `watch`) is
    recorded for the Theorem-4 accounting of the figure.

    Args:
        X: (n, m, d) features of the n nodes; y: (n, m) labels in {−1, +1}.
        evaluate: called with the (n, d) models before every step and after the last one.
    """
    n, _, d = X.shape
    if mode not in ("muffliato", "central"):
        raise ValueError(f"mode must be 'muffliato' or 'central', got {mode!r}")
    if order not in ("code", "theorem"):
        raise ValueError(f"order must be 'code' or 'theorem', got {order!r}")
    qq = math.log(n) / n if q is None else q
    theta = np.zeros((n, d))
    res = GdResult()

    def record(th: np.ndarray) -> None:
        if keep_thetas:
            res.thetas.append(th.copy())
        if evaluate is not None:
            res.scores.append(evaluate(th))

    for _ in range(int(iterations)):
        record(theta)
        g = logistic_gradients(theta, X, y)
        noise = rng.normal(0.0, noise_std, size=g.shape)
        u = _clip_rows(g + noise, clip) if order == "code" else _clip_rows(g, clip) + noise
        hat = theta - step * u
        if mode == "central":
            theta = np.repeat(hat.mean(axis=0, keepdims=True), n, axis=0)
            continue
        edges = er_edges(n, qq, rng, connected=True)
        W = metropolis_csr(n, edges)
        gap = gap_2(W)
        T = (
            t_mix(n, gossip_sigma, gap)
            if rounds is None
            else rounds(gap)
            if callable(rounds)
            else int(rounds)
        )
        gamma = chebyshev_gamma(min(1.0, gap))
        theta = chebyshev_gossip(W, hat, T, gamma, x_minus1_zero=x_minus1_zero)
        deg = np.bincount(edges.ravel(), minlength=n).astype(np.int32)
        adj = np.zeros(n, dtype=bool)
        adj[edges[edges[:, 0] == watch, 1]] = True
        adj[edges[edges[:, 1] == watch, 0]] = True
        res.gossip_rounds.append(T)
        res.gaps.append(gap)
        res.gammas.append(gamma)
        res.degrees.append(deg)
        res.adjacent_to.append(adj)
    record(theta)
    return res
