"""Accounting of random-walk DP-SGD on any graph (Cyffers, Bellet & Basu 2023 style; spec
`../shared/papers/random-walks.md`, "the spec" below).

Pure functions of the public graph, the walk parameters and a node's contribution count.

* `transition_matrix`: the Hamilton / Metropolis weights with self-loops as the authors' code builds
  them, `W_uv = 1/(max(d_u, d_v) + 1)` (spec §1.1, §0 item 6; the default), or the paper's
  `1/max(d_u, d_v)`.
* `communicability`: the exact non-asymptotic `S_uv(T) = Σ_{t=1..T} (W^t)_uv / t` (spec §4.3) for one
  source u and every v, by row iteration (spec §4.10).
* `paper_epsilon`: the paper's accountant `ε_{u→v}(α) = N_u·(α/σ²)·min(S_uv, 1/2)` (Lemma 2 composed
  over the contributions, clipped at the local-DP level, spec §4.3, §4.8), in the known-sender form
  of App. B.1 (`S̃_uv = max_{w∈N(v)} S_uw` with `S_uu = 1/2`, spec §4.5) by default, converted to
  (ε, δ) with the α cap of spec §4.7. **It is not a guarantee in general** (spec §0 item 3, §4.9:
  the composition over contributions is unsound; on a star the centre sees every leaf at the LDP
  level while the formula claims several times less): netdp shows it labelled, never alone.
* `ldp_epsilon`: the always-valid local-DP bound, N_u Gaussian mechanisms of multiplier σ composed in
  RDP (spec §4.8: `N_u α/(2σ²)`), converted at δ. This is what a node's report uses until the sound
  per-trajectory accountant of spec §4.9 lands.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

from netdp_node.privacy.composition import DEFAULT_ORDERS, gaussian_rdp, rdp_to_dp

WeightRule = Literal["coded", "paper"]


def transition_matrix(n: int, edges: Iterable[tuple[int, int]],
                      rule: WeightRule = "coded") -> np.ndarray:
    """Symmetric doubly-stochastic W on the undirected graph ({0..n−1}, edges): off-diagonal
    1/(max(d_u, d_v) + 1) ("coded", always lazy and aperiodic) or 1/max(d_u, d_v) ("paper"; periodic
    on even rings and hypercubes), diagonal 1 − Σ. Self-loops in `edges` are ignored."""
    adj = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        if a != b:
            adj[a, b] = adj[b, a] = True
    deg = adj.sum(axis=1)
    if np.any(deg == 0):
        raise ValueError("every node needs at least one neighbour")
    bump = 1 if rule == "coded" else 0
    if rule not in ("coded", "paper"):
        raise ValueError("rule must be 'coded' or 'paper'")
    mx = np.maximum.outer(deg, deg) + bump
    W = np.where(adj, 1.0 / mx, 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    if np.any(np.diag(W) < -1e-12):
        raise ValueError("negative self-weight: use the 'coded' rule")
    return W


def communicability(W: np.ndarray, u: int, T: int) -> np.ndarray:
    """S_u·(T) = Σ_{t=1..T} (W^t)_{u,·}/t for every v (spec §4.3 exact form, §4.10 row iteration).
    Spec §4.12: ring n = 16, W = (I + A)/3, T = 1600, u = 0: S_{0,8} = 0.255255, S_{0,1} = 1.082558;
    complete J/16, T = 1000: H_T/16 = 0.467842 for every pair."""
    if T < 1:
        raise ValueError("T must be >= 1")
    Wt = W.T  # dense or scipy.sparse: r_v = (W^t)_{uv}
    r = np.zeros(W.shape[0])
    r[u] = 1.0
    S = np.zeros_like(r)
    for t in range(1, T + 1):
        r = Wt @ r
        S += r / t
    return S


def known_sender(S_u: np.ndarray, u: int, neighbours: Sequence[Sequence[int]]) -> np.ndarray:
    """App. B.1 (spec §2.4, §4.5): an observer v that knows who sent it the token learns at least what
    its most exposed neighbour w would: S̃_uv = max_{w∈N(v)} S_uw, with S_uu := 1/2 (so the
    neighbours of u get the LDP level). `neighbours[v]` lists v's neighbours (self excluded)."""
    S = S_u.copy()
    S[u] = 0.5
    return np.array([max((S[w] for w in neighbours[v]), default=0.0) for v in range(len(S))])


def alpha_max(sigma: float, cap: Literal["paper", "c1", "none"] = "paper") -> float:
    """The largest Rényi order Lemma 1 allows (spec §4.1, §4.7): σ² ≥ 2α(α − 1) ("paper":
    (1 + √(1 + 2σ²))/2), or c ≤ 1 ("c1": (1 + √(1 + 8σ²))/2), or no cap."""
    if cap == "paper":
        return (1.0 + math.sqrt(1.0 + 2.0 * sigma * sigma)) / 2.0
    if cap == "c1":
        return (1.0 + math.sqrt(1.0 + 8.0 * sigma * sigma)) / 2.0
    return math.inf


def linear_rdp_to_dp(rho: float, delta: float, amax: float = math.inf) -> float:
    """min over 1 < α ≤ amax of αρ + ln(1/δ)/(α − 1) (spec §4.7, the paper's conversion): the
    unconstrained optimum α* = 1 + √(ln(1/δ)/ρ) gives ρ + 2√(ρ ln(1/δ)); past the cap, α = amax.
    Spec: ρ = 0.01, σ = 10 → 0.753384 unconstrained, 2.172729 (paper cap), 1.158563 (c ≤ 1)."""
    if rho <= 0:
        return 0.0
    L = math.log(1.0 / delta)
    a = 1.0 + math.sqrt(L / rho)
    if a > amax:
        a = amax
    return a * rho + L / (a - 1.0)


def paper_epsilon(S: np.ndarray, n_u: float, sigma: float, delta: float, *,
                  cap: Literal["paper", "c1", "none"] = "paper") -> np.ndarray:
    """The paper's per-pair (ε, δ)-values: ρ_v = N_u·min(S_v, 1/2)/σ² (RDP ε = αρ), converted with
    the α cap. NOT a guarantee in general (module docstring)."""
    amax = alpha_max(sigma, cap)
    rho = n_u * np.minimum(S, 0.5) / (sigma * sigma)
    return np.array([linear_rdp_to_dp(float(r), delta, amax) for r in rho])


def ldp_epsilon(n_u: int, sigma: float, delta: float) -> float:
    """The always-valid bound: n_u Gaussian mechanisms with noise multiplier σ (noise σΔ for
    sensitivity Δ) composed in RDP, converted at δ (spec §4.8)."""
    if n_u <= 0:
        return 0.0
    curve = gaussian_rdp(sigma, DEFAULT_ORDERS, int(n_u))
    return rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0]


def neighbour_lists(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    nb: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            nb[a].add(b)
            nb[b].add(a)
    return [sorted(x) for x in nb]


def transition_row(n: int, edges: Iterable[tuple[int, int]], u: int,
                   rule: WeightRule = "coded") -> tuple[list[int], list[float]]:
    """Row u of `transition_matrix` without building the matrix: (columns, probabilities), u's
    neighbours in increasing order then u itself (the self-loop)."""
    nb = neighbour_lists(n, edges)
    if not nb[u]:
        raise ValueError(f"node {u} has no neighbour")
    bump = 1 if rule == "coded" else 0
    probs = [1.0 / (max(len(nb[u]), len(nb[w])) + bump) for w in nb[u]]
    self_p = 1.0 - sum(probs)
    if self_p < -1e-12:
        raise ValueError("negative self-weight: use the 'coded' rule")
    return [*nb[u], u], [*probs, max(0.0, self_p)]


def communicability_sparse(n: int, edges: Iterable[tuple[int, int]], u: int, T: int,
                           rule: WeightRule = "coded") -> np.ndarray:
    """`communicability` with a sparse W (cost O(T·|E|)), for large graphs."""
    from scipy import sparse

    es = list(edges)
    rows, cols, vals = [], [], []
    for v in range(n):
        c, p = transition_row(n, es, v, rule)
        rows += [v] * len(c)
        cols += c
        vals += p
    return communicability(sparse.csr_matrix((vals, (rows, cols)), shape=(n, n)), u, T)
