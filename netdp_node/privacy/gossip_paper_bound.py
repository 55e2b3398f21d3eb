"""The Muffliato paper's own pairwise accountant, its corollaries and its calibration.

Cyffers, Even, Bellet & Massoulié, NeurIPS 2022: eq. (6) / eq. (15) (`paper_bound*`), the mean
privacy loss of eq. (7), Corollary 1 (`fixed_graph_pair_bound`), Theorem 4 on Erdős–Rényi graphs
(`er_pair_bound`), the closed-form RDP → DP conversion and the σ calibration of the mean
loss. Eq. (6) sums the Rényi divergences of the messages one by one; it is NOT an upper bound on the
divergence of a node's full view (the messages share the same noise; docs/errata.md): use
`gossip_joint_view` for a guarantee and this module to reproduce the paper. Values are fractions of
`ε_LDP` (`gossip.ldp_level`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from netdp_node.lazy import lazy_module
from netdp_node.privacy.checks import int_at_least, positive, renyi_order
from netdp_node.privacy.gossip import (
    FloatArith,
    GossipSchedule,
    is_fixed,
    message_rows,
    node_index,
    node_set,
)

sp = lazy_module("scipy.sparse")  # lazy: start-up cost


_CONVENTIONS = ("thm1", "code")


def _check_convention(convention: str) -> int:
    if convention not in _CONVENTIONS:
        raise ValueError(f"convention must be 'thm1' or 'code', got {convention!r}")
    return 0 if convention == "thm1" else 1


def paper_bound(
    schedule: GossipSchedule, observers: int | Iterable[int], *, convention: str = "thm1"
) -> np.ndarray:
    """PAPER BOUND, eq. (6) (one observer) / eq. (15) (colluders): NOT a valid
    per-pair guarantee; use `joint_view_leakage` for that.

    `f(u, O)/ε_LDP = Σ_{t} Σ_{w : ∃ v ∈ O, {v,w} ∈ E_t} (W_{0:t})[w,u]² / ||(W_{0:t})[w,:]||²`,
    each message (w, t) counted once (Theorem 12), w ranging over all nodes that talked to an
    observer (including other colluders, as printed). Row w, column u of the plain product
    (docs/errata.md), also for accelerated runs.

    Conventions:
        "thm1": Theorem 1, `t = 0..T−1` with `W_{0:t}`; the t = 0 term is the raw noisy value, so
            every neighbour gets ≥ 1.
        "code": the authors' figure code, `t = 1..T` with `W^t` on a fixed graph. For a
            time-varying schedule it is generalised here as: round t's messages use `W_{0:t+1}`.

    Returns:
        Unclipped fractions of ε_LDP for every u (entry u ∈ O is the formula's value, meaningless
        but useful as a check). Clip with `clip_to_ldp`.
    """
    shift = _check_convention(convention)
    obs = set(node_set("observers", observers, schedule.n))
    req: list[tuple[int, int]] = []
    for t, E in enumerate(schedule.edges):
        ws: set[int] = set()
        for a, b in E:
            if a in obs:
                ws.add(b)
            if b in obs:
                ws.add(a)
        req.extend((t + shift, w) for w in sorted(ws))
    rows = message_rows(schedule, req, FloatArith(schedule), accelerated=False)
    if rows.shape[0] == 0:
        return np.zeros(schedule.n)
    sq = rows**2
    return np.sum(sq / np.sum(sq, axis=1, keepdims=True), axis=0)


def _plain_products(schedule: GossipSchedule, shift: int) -> Iterable[tuple[int, np.ndarray]]:
    """Yield (t, W_{0:t+shift}) for t = 0..T−1 (dense n×n), forward."""
    M = np.eye(schedule.n)
    if shift:
        M = np.asarray(schedule.matrices[0] @ M)
    for t in range(schedule.T):
        yield t, M
        if t + shift < schedule.T:
            M = np.asarray(schedule.matrices[t + shift] @ M)


def _adjacency(schedule: GossipSchedule, t: int) -> Any:
    E = schedule.edges[t]
    n = schedule.n
    if not E:
        return sp.csr_array((n, n))
    a, b = zip(*E)
    rows = list(a) + list(b)
    cols = list(b) + list(a)
    return sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, n))


def paper_bound_matrix(schedule: GossipSchedule, *, convention: str = "thm1") -> np.ndarray:
    """PAPER BOUND eq. (6) for every pair: `F[u, v] = f(u, v)/ε_LDP` (matrix form
    `F = Σ_t (A_t C_t)ᵀ`, `C_t[w,u] = M_t[w,u]²/Σ_z M_t[w,z]²`). Not a valid guarantee.

    Identity: `Σ_u F[u, v] = T_v` ("thm1"). Cost `O(T · nnz · n)` (dense products).
    """
    shift = _check_convention(convention)
    F = np.zeros((schedule.n, schedule.n))
    for t, M in _plain_products(schedule, shift):
        sq = M**2
        C = sq / np.sum(sq, axis=1, keepdims=True)
        F += np.asarray(_adjacency(schedule, t) @ C).T
    return F


def paper_bound_outgoing(
    schedule: GossipSchedule, u: int, *, convention: str = "thm1", method: str = "auto"
) -> np.ndarray:
    """PAPER BOUND eq. (6) from one source u towards every observer v: `F[u, :]`.

    Methods:
        "products": forward products `M_{t+1} = W_t M_t` (sparse × dense, `O(T · nnz · n)`), any
            schedule.
        "eigen": fixed symmetric W only (a `fixed_schedule`): `W = Q Λ Qᵀ`,
            `(W^t)[w,u] = Σ_k Q_wk Q_uk λ_k^t` and `||(W^t)[w,:]||² = Σ_k Q_wk² λ_k^{2t}`,
            `O(n³ + T n²)`.
        "auto": "eigen" for a fixed schedule with `T · nnz(W) > 2n²` (long runs), else "products".
    """
    shift = _check_convention(convention)
    uu = node_index("u", u, schedule.n)
    if method not in ("auto", "eigen", "products"):
        raise ValueError(f"method must be 'auto', 'eigen' or 'products', got {method!r}")
    n = schedule.n
    fixed = is_fixed(schedule)
    if method == "eigen" and not fixed:
        raise ValueError("method 'eigen' needs a fixed schedule (same W and edges every round)")
    if method == "auto":
        method = (
            "eigen" if fixed and schedule.T * schedule.matrices[0].nnz > 2 * n * n else "products"
        )
    if method == "eigen":
        W = schedule.matrices[0].toarray()
        lam, Q = np.linalg.eigh(W)
        ts = np.arange(schedule.T) + shift
        powers = lam[:, None] ** ts[None, :]  # (n_eig, T)
        cols = Q @ (Q[uu][:, None] * powers)  # (n, T): (W^t)[w, u]
        norms = (Q**2) @ (powers**2)  # (n, T): ||(W^t)[w, :]||²
        c = np.sum(cols**2 / norms, axis=1)
        return np.asarray(_adjacency(schedule, 0) @ c)
    out = np.zeros(n)
    for t, M in _plain_products(schedule, shift):
        sq = M**2
        c = sq[:, uu] / np.sum(sq, axis=1)
        out += np.asarray(_adjacency(schedule, t) @ c)
    return out


def mean_privacy_loss(fractions: Any, v: int | Iterable[int]) -> float:
    """Mean privacy loss of eq. (7): `ε_v = (1/n) Σ_{u ∉ O} f(u, O)` (note 1/n,
    not 1/(n−1)), for fractions of ε_LDP over all u. A summary of the gains, not a guarantee.

    For the paper bound, `≤ T_v/n` (`mean_loss_bound`); for the joint view,
    `≤ (rank K_v − |O|)/n ≤ T_v/n`.
    """
    f = np.asarray(fractions, dtype=np.float64)
    obs = node_set("v", v, f.shape[0])
    mask = np.ones(f.shape[0], dtype=bool)
    mask[list(obs)] = False
    return float(np.sum(f[mask]) / f.shape[0])


def mean_loss_bound(schedule: GossipSchedule, v: int) -> float:
    """Right-hand side of eq. (7) in units of ε_LDP: `T_v/n` (`α Δ² T_v/(2nσ²)` once multiplied
    by `ldp_level`). With dropout, T_v is the node's realised count, purely local.
    """
    return schedule.communications(v) / schedule.n


def fixed_graph_pair_bound(W: Any, T: int, u: int, v: int) -> float:
    """Corollary 1, fraction of ε_LDP, fixed symmetric W:
    `n · max_{w~v} W_vw^{−2} · Σ_{t=1}^{T} (W^t)[u, v]²` (a loose bound on eq. (6))."""
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    n = M.shape[0]
    uu, vv = node_index("u", u, n), node_index("v", v, n)
    TT = int_at_least("T", T, 0)
    nb = [M[vv, w] for w in range(n) if w != vv and M[vv, w] > 0]
    if not nb:
        raise ValueError(f"node {vv} has no neighbour in W")
    col = np.zeros(n)
    col[uu] = 1.0
    total = 0.0
    for _ in range(TT):
        col = M @ col  # symmetric: (W^t)[v, u] = (W^t)[u, v]
        total += col[vv] ** 2
    return n / min(nb) ** 2 * total


def er_alpha_cap(sigma: float, sensitivity: float) -> float:
    """Largest α allowed by Theorem 4 / Corollary 5: `σ² ≥ Δ² α(α−1)/2`, i.e.
    `α ≤ (1 + sqrt(1 + 8σ²/Δ²))/2` (σ = Δ → 2)."""
    positive("sigma", sigma)
    positive("sensitivity", sensitivity)
    return (1.0 + math.sqrt(1.0 + 8.0 * sigma**2 / sensitivity**2)) / 2.0


def er_pair_bound(n: int, T: int, degree: int, adjacent: bool) -> float:
    """Theorem 4 on a private Erdős–Rényi graph, fraction of ε_LDP, clipped at 1:
    1 if u ~ v, else `min(1, 2 T d_v/(n − d_v))` (i.e. `α Δ² T d_v/(σ²(n − d_v))`).

    Valid only under its preconditions (`q = c ln n/n`, c > 1; `α ≤ er_alpha_cap`; the graph
    secret beyond each node's neighbourhood). Fully local: v needs only n, T, d_v.
    Example: n = 2048, T = 32, d_v = 8 → 0.2510.
    """
    nn = int_at_least("n", n, 2)
    TT = int_at_least("T", T, 0)
    d = int_at_least("degree", degree, 0)
    if d >= nn:
        raise ValueError(f"degree must be < n, got {degree!r}")
    if adjacent:
        return 1.0
    return min(1.0, 2.0 * TT * d / (nn - d))


def rdp_to_dp_optimal(
    rho: float, delta: float, alpha_max: float | None = None
) -> tuple[float, float]:
    """Closed-form conversion of a linear RDP curve `ε_RDP(α) = α ρ` to (ε, δ)-DP.

    `ε(δ) = min_{1<α≤α_max} [α ρ + ln(1/δ)/(α − 1)]`, attained at `α* = 1 + sqrt(ln(1/δ)/ρ)`,
    where `ε = ρ + 2 sqrt(ρ ln(1/δ))`; with a cap (Theorem 4: `er_alpha_cap`) α* is clipped to
    α_max. ρ is `fraction · Δ²/(2σ²)`. Returns (ε, α). This is the paper's conversion;
    `pair_privacy_loss` uses the tighter one of `composition.rdp_to_dp`.

    Examples (δ = 1e-5): ρ = 0.5 → (5.2985, 5.7985); ρ = 0.035 → (1.3046, 19.137);
    ρ = 0.00473 → (0.4714, 50.336); ρ = 0.5 with α_max = 2 → (12.5129, 2).
    """
    if not (0.0 <= rho < math.inf):
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    if alpha_max is not None and not (1.0 < alpha_max):
        raise ValueError(f"alpha_max must be > 1, got {alpha_max!r}")
    L = math.log(1.0 / delta)
    if rho == 0.0:
        if alpha_max is None:
            return 0.0, math.inf
        return L / (alpha_max - 1.0), float(alpha_max)
    alpha = 1.0 + math.sqrt(L / rho)
    if alpha_max is not None and alpha > alpha_max:
        alpha = float(alpha_max)
    return alpha * rho + L / (alpha - 1.0), alpha


def sigma_for_mean_loss(
    target: float, *, alpha: float, sensitivity: float, n: int, communications: int
) -> float:
    """σ such that the mean privacy loss (eq. 7) is at most `target` (RDP at order α):
    `α Δ² T_v/(2nσ²) ≤ target` ⇔ `σ = Δ sqrt(α T_v/(2 n target))`, with `T_v` the (maximum)
    number of messages a node receives (`d_max · T` for Algorithm 1).

    The mean loss is a summary, not a per-pair guarantee: check pairs with
    `joint_view_leakage`; a pair can still leak the full LDP level `αΔ²/(2σ²)`.
    """
    positive("target", target)
    renyi_order(alpha)
    positive("sensitivity", sensitivity)
    nn = int_at_least("n", n, 1)
    tv = int_at_least("communications", communications, 1)
    return sensitivity * math.sqrt(alpha * tv / (2.0 * nn * target))


def sigma_for_mean_dp(
    epsilon: float,
    delta: float,
    *,
    sensitivity: float,
    n: int,
    communications: int,
    alpha_max: float | None = None,
) -> float:
    """σ such that the mean privacy loss, converted with `rdp_to_dp_optimal`, is (ε, δ).

    The mean loss is `α ρ̄` with `ρ̄ = Δ² T_v/(2nσ²)`; without a cap, `ε = ρ̄ + 2 sqrt(ρ̄ ln(1/δ))`
    inverts to `ρ̄ = (sqrt(ε + L) − sqrt(L))²`, L = ln(1/δ); with α_max and `α* > α_max`,
    `ρ̄ = (ε − L/(α_max − 1))/α_max`. Then `σ = Δ sqrt(T_v/(2 n ρ̄))`. Same caveat as
    `sigma_for_mean_loss`.

    Raises:
        ValueError: if the cap makes ε unreachable (ε ≤ L/(α_max − 1)).
    """
    positive("epsilon", epsilon)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    positive("sensitivity", sensitivity)
    nn = int_at_least("n", n, 1)
    tv = int_at_least("communications", communications, 1)
    L = math.log(1.0 / delta)
    rho = (math.sqrt(epsilon + L) - math.sqrt(L)) ** 2
    if alpha_max is not None:
        if not (alpha_max > 1.0):
            raise ValueError(f"alpha_max must be > 1, got {alpha_max!r}")
        if 1.0 + math.sqrt(L / rho) > alpha_max:
            rho = (epsilon - L / (alpha_max - 1.0)) / alpha_max
            if rho <= 0.0:
                raise ValueError(
                    f"epsilon={epsilon!r} is unreachable with alpha <= {alpha_max!r} at "
                    f"delta={delta!r} (needs epsilon > ln(1/delta)/(alpha_max - 1))"
                )
    return sensitivity * math.sqrt(tv / (2.0 * nn * rho))
