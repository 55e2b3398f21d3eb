"""Pairwise Network DP of (accelerated) gossip averaging: Muffliato (pure functions, no I/O).

E. Cyffers, M. Even, A. Bellet, L. Massoulié, *Muffliato: Peer-to-Peer Privacy Amplification for
Decentralized Optimization and Averaging*, NeurIPS 2022, as specified in
`shared/papers/muffliato.md` ("the spec"). Section numbers (§) refer to the spec; equation and
theorem numbers are the paper's.

The protocol (spec §0 item 1, §3.1): node v adds `η_v ~ N(0, σ²)` once, `x_v^0 = x_v + η_v`, then
T synchronous rounds: in round t every node sends its current value to its round-t neighbours and
updates `x^{t+1} = W_t x^t` (plain) or, accelerated, `x^1 = W x^0`,
`x^{t+1} = γ W x^t + (1−γ) x^{t−1}`. Everything a node ever sees is a linear function of `x + η`.

Units. Every accountant here returns *fractions of the local-DP level*
`ε_LDP = α Δ²/(2σ²)` (spec §4 convention, `ldp_level`): a fraction ``f`` means the pair is
`(α, f·ε_LDP)`-RDP for every α > 1. Because every bound is linear in α, a fraction is the RDP curve of
one Gaussian mechanism with noise multiplier `(σ/Δ)/sqrt(f)`; `pair_privacy_loss` turns it into a
`PrivacyLoss` (reusing `composition.gaussian_rdp` / `rdp_to_dp`).

Two accountants (spec §0 item 3, §4.11, §7.2):

* **Paper bound** (`paper_bound*`, eq. (6) / eq. (15)). Sums the Rényi divergences of the messages
  one by one. It is what the paper's figures show, but it is NOT an upper bound on the divergence
  of a node's full view: the messages share the same noise. Ring of 8, T = 4: eq. (6) says node 4
  learnt 1.4% of ε_LDP about node 0, but node 4 can solve its messages for `x_0 + η_0` exactly.
  Use it only to reproduce the paper.
* **Exact joint-view accountant** (`joint_view*`, `incoming_leakage`, `outgoing_leakage`,
  `group_leakage`; spec §4.11). The view of an observer set O is `Y = K_O (x + η)`, a Gaussian
  vector, so the Rényi divergence when `x_u` moves by Δ is exactly
  `ε_LDP · ||Π_{rowspace K_O} e_u||²`. This is the per-pair guarantee for CONTINUOUS Gaussian
  noise. netdp's nodes draw discrete Gaussian noise on a grid (`discrete_gaussian`): a view is then
  a non-integer-weighted sum of lattice variables, which neither the zCDP of the discrete Gaussian
  (Canonne, Kamath, Steinke, NeurIPS 2020, Theorem 4) nor the sum bound of Kairouz, Liu, Steinke
  (ICML 2021, Prop. 14, integer sums) covers, and which an observer computing exactly may be able
  to decode. So the node's accountant (`muffliato_accountant`) charges the local-DP level, proven
  by data processing, and shows this value beside it, labelled as not proven for discrete noise.

Schedules. Both accountants take a `GossipSchedule`: for each round t the set E_t of edges that
actually exchanged values and the matrix W_t (Metropolis weights rebuilt from the realised edges by
`realised_schedule`, spec §7.1 item 8), plus γ if the run was accelerated. For a fixed graph use
`fixed_schedule`; for randomized gossip (Algorithm 2) `pairwise_schedule`.

Numerical robustness of the joint-view accountant (spec §4.11 "Computation", §7.1 item 11): see
`joint_view`. In short, whether `e_u` lies in the row space (full LDP leak) and the rank are decided
in exact modular arithmetic; the row space is computed in floating point without the monomial
basis `e_wᵀ W^t` (block Lanczos on a fixed graph), and must reach that exact rank; a perturbation
margin is added on top of the floating-point value; when the exact rank is not reached the value
is computed in exact rational arithmetic (small graphs) or rounded up to the LDP level.

Multi-round use (Alg. 3, repeated averaging): losses compose by adding RDP curves
(`composition.compose_losses`), but neither accountant covers the adaptivity gap of spec §4.6
(later inputs depend on u's data through earlier rounds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from netdp_node.graphs import metropolis_fractions
from netdp_node.lazy import lazy_module
from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    gaussian_rdp,
    rdp_to_dp,
)

sp = lazy_module("scipy.sparse")  # lazy: start-up cost

__all__ = [
    "DEFAULT_RTOL",
    "GossipSchedule",
    "JointView",
    "chebyshev_coefficients",
    "chebyshev_gamma",
    "chebyshev_polynomial",
    "check_gossip_matrix",
    "clip_to_ldp",
    "corollary1_bound",
    "edges_from_topology",
    "er_pair_bound",
    "fixed_schedule",
    "gossip_rounds",
    "group_leakage",
    "incoming_leakage",
    "joint_view",
    "joint_view_leakage",
    "joint_view_matrix",
    "knowledge_matrix",
    "ldp_level",
    "mean_loss_bound",
    "mean_privacy_loss",
    "metropolis_weights",
    "outgoing_leakage",
    "pair_privacy_loss",
    "pairwise_schedule",
    "paper_bound",
    "paper_bound_matrix",
    "paper_bound_outgoing",
    "rdp_to_dp_optimal",
    "realised_schedule",
    "second_eigenvalue_gap",
    "sigma_for_mean_dp",
    "sigma_for_mean_loss",
    "spectral_gap",
    "theorem4_alpha_cap",
]

#: Default tolerance of the joint-view accountant: a new direction of the row space (relative to
#: its block) counts as resolved when it exceeds `DEFAULT_RTOL` (spec §7.1 item 11 recommends 1e-9
#: or below).
DEFAULT_RTOL = 1e-10

#: Graphs up to this many nodes get the exact rational fallback when the floating-point rank is not
#: resolved (`joint_view(exact=None)`).
EXACT_MAX_NODES = 32

# Two fixed primes below 2^25 for the modular rank computations. (p−1)² < 2^50, so a sparse dot
# product of up to 8192 terms fits in int64 before reduction.
_PRIMES = (33554393, 33554383)
_MAX_MOD_TERMS = (1 << 63) // ((_PRIMES[0] - 1) ** 2) - 1

_EPS = float(np.finfo(np.float64).eps)

Edge = tuple[int, int]


# =============================================================================================
# Units and basic checks
# =============================================================================================


def ldp_level(alpha: float, sigma: float, sensitivity: float) -> float:
    """The local-DP level `ε_LDP = α Δ²/(2σ²)` (spec §4 convention, Lemma 1 of §1.1).

    The RDP guarantee of `x_u + η_u` alone; every fraction returned by this module is in this
    unit.

    Raises:
        ValueError: unless α > 1, σ > 0 and Δ > 0 (finite).
    """
    _check_alpha(alpha)
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    return alpha * sensitivity**2 / (2.0 * sigma**2)


def _check_alpha(alpha: float) -> None:
    if not (1.0 < alpha < math.inf):
        raise ValueError(f"the Rényi order alpha must satisfy 1 < alpha < inf, got {alpha!r}")


def _check_positive(name: str, value: float) -> None:
    if not (0.0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_node(name: str, value: Any, n: int) -> int:
    v = _check_int(name, value, 0)
    if v >= n:
        raise ValueError(f"{name} must be a node index in 0..{n - 1}, got {value!r}")
    return v


def _node_set(name: str, nodes: int | Iterable[int], n: int) -> tuple[int, ...]:
    """A non-empty sorted tuple of distinct node indices (a single int is accepted)."""
    items: list[Any] = list(nodes) if isinstance(nodes, Iterable) else [nodes]
    if not items:
        raise ValueError(f"{name} must contain at least one node")
    out = sorted({_check_node(name, x, n) for x in items})
    return tuple(out)


# =============================================================================================
# Gossip matrices (spec §0 items 4-5, §2)
# =============================================================================================


def _undirected_edges(n: int, edges: Iterable[Sequence[int]]) -> frozenset[Edge]:
    """Normalise edges to a frozenset of (a, b) pairs with a < b; an edge listed in both
    directions counts once. Raises ValueError on self-loops or out-of-range endpoints."""
    out: set[Edge] = set()
    for edge in edges:
        if isinstance(edge, (str, bytes)) or len(edge) != 2:
            raise ValueError(f"edge {edge!r} is not a pair of node indices")
        a = _check_node("edge endpoint", edge[0], n)
        b = _check_node("edge endpoint", edge[1], n)
        if a == b:
            raise ValueError(f"self-loop ({a}, {a}) is not an edge (self-weights are implied)")
        out.add((a, b) if a < b else (b, a))
    return frozenset(out)


def edges_from_topology(topology: Any) -> tuple[int, frozenset[Edge]]:
    """`(n, edges)` of a `netdp_bootstrap.topology.TopologyGraph` (or anything with `.nodes` and
    `.edges` of id pairs), node i being `topology.nodes[i]`.

    Gossip is undirected (spec §1.1): a directed edge (e.g. of the `ring` kind) is taken as the
    undirected pair.
    """
    nodes = tuple(topology.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    try:
        pairs = [(index[a], index[b]) for a, b in topology.edges]
    except KeyError as exc:
        raise ValueError(f"topology edge uses an unknown node id {exc.args[0]!r}") from None
    return len(nodes), _undirected_edges(len(nodes), pairs)


def _degrees(n: int, edges: Iterable[Edge]) -> np.ndarray:
    deg = np.zeros(n, dtype=np.int64)
    for a, b in edges:
        deg[a] += 1
        deg[b] += 1
    return deg


def _metropolis_rational(n: int, edges: frozenset[Edge]) -> dict[tuple[int, int], Fraction]:
    """Exact Metropolis weights as {(i, j): Fraction}, both (i, j) and (j, i), plus the diagonal."""
    return metropolis_fractions(n, sorted(edges))


def metropolis_weights(n: int, edges: Iterable[Sequence[int]]) -> np.ndarray:
    """Metropolis–Hastings gossip matrix (spec §0 items 4–5, §2.2, "Hamilton scheme" of the code).

    `W_vw = 1/(1 + max(d_v, d_w))` for every edge {v, w}, `W_vv = 1 − Σ_{w~v} W_vw`; zero
    elsewhere. Symmetric, doubly stochastic, lazy (`W_vv ≥ 1/(1+d_v)`), hence aperiodic. An
    isolated node keeps its value (`W_vv = 1`, spec §3.6). This is the rule to implement; Table 1's
    `min(1/d_v, 1/d_w)` has eigenvalue −1 on bipartite regular graphs (§2.2) and is not provided.

    Examples (spec §2.2): ring → all weights 1/3; hypercube m = 11 → 1/12; star K_{1,3} → centre
    row (1/4, 1/4, 1/4, 1/4), leaf row 1/4 to the centre and 3/4 to itself; path P4 →
    off-diagonals 1/3, corner self-weights 2/3.

    Args:
        n: number of nodes (≥ 1); nodes are 0..n−1.
        edges: undirected edges as index pairs (either orientation, duplicates merged).

    Returns:
        A dense float64 (n, n) array.
    """
    nn = _check_int("n", n, 1)
    rational = _metropolis_rational(nn, _undirected_edges(nn, edges))
    W = np.zeros((nn, nn), dtype=np.float64)
    for (i, j), w in rational.items():
        W[i, j] = float(w)
    return W


def check_gossip_matrix(
    W: Any, edges: Iterable[Sequence[int]] | None = None, *, atol: float = 1e-9
) -> None:
    """Raise ValueError unless W is a gossip matrix (Definition 1, spec §2.1).

    Checks: square, finite, symmetric, non-negative, rows summing to 1 (within `atol`) and, when
    `edges` is given, `W_vw ≠ 0 ⇒ {v, w} ∈ E or v = w`. Dense or scipy sparse.
    """
    M = (
        sp.csr_array(W, dtype=np.float64)
        if sp.issparse(W)
        else sp.csr_array(np.asarray(W, dtype=np.float64))
        if np.ndim(W) == 2
        else None
    )
    if M is None or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"a gossip matrix must be square and non-empty, got shape {np.shape(W)}")
    data = M.data
    if not np.all(np.isfinite(data)):
        raise ValueError("a gossip matrix must be finite")
    asym = abs(M - M.T)
    if asym.nnz and asym.max() > atol:
        raise ValueError("a gossip matrix must be symmetric (Definition 1)")
    if data.size and np.min(data) < -atol:
        raise ValueError("a gossip matrix must be non-negative (Definition 1)")
    if np.max(np.abs(np.asarray(M.sum(axis=1)).ravel() - 1.0)) > atol:
        raise ValueError("the rows of a gossip matrix must sum to 1 (Definition 1)")
    if edges is not None:
        _check_support(M, _undirected_edges(M.shape[0], edges), None)


def spectral_gap(W: Any) -> float:
    """Spectral gap of Definition 2 (spec §2.1): `λ_W = min_{λ ∈ Sp(W)∖{1}} (1 − |λ|)`.

    Includes the negative eigenvalues (unlike the authors' code, `second_eigenvalue_gap`). One
    eigenvalue 1 (the largest) is removed; a disconnected graph (eigenvalue 1 repeated) or a
    periodic matrix (eigenvalue −1) gives 0. W must be symmetric. Examples (spec §4.10): ring 8 →
    0.195262, path P5 → 0.127322, hypercube (Metropolis) → 1/(1+m)·2 = 1/6 for m = 11.
    """
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    ev = np.linalg.eigvalsh(M)
    if ev.size == 1:
        return 1.0
    rest = ev[:-1]  # eigvalsh sorts ascending; the largest is the eigenvalue 1
    return float(max(0.0, 1.0 - np.max(np.abs(rest))))


def second_eigenvalue_gap(W: Any) -> float:
    """`1 − λ_2(W)` as the authors' code computes it (spec §2.1 [CODE]): ignores negative
    eigenvalues. Equal to `spectral_gap` on every graph of spec §4.10; kept to reproduce the
    code's T (`T_mix`), never to choose γ."""
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    ev = np.linalg.eigvalsh(M)
    if ev.size == 1:
        return 1.0
    return float(1.0 - ev[-2])


def chebyshev_gamma(spectral_gap_lower_bound: float) -> float:
    """γ of Algorithm 1 (spec §2.1, §3.1 step 2): `2(1 − sqrt(λ(1 − λ/4)))/(1 − λ/2)²`.

    Equals `2/(1 + sqrt(1 − μ²))` with `μ = 1 − λ/2` (the classical optimal parameter for a
    spectrum in [−μ, μ] ∪ {1}). λ must be a public *lower* bound on λ_W, identical at every node:
    overestimating λ_W can make the iteration diverge. γ ∈ [1.071797, 2): λ = 1 → 1.071797,
    λ → 0 → 2 (λ = 0 returns 2).

    Raises:
        ValueError: unless 0 ≤ λ ≤ 1.
    """
    lam = float(spectral_gap_lower_bound)
    if not (0.0 <= lam <= 1.0):
        raise ValueError(
            f"the spectral gap bound must be in [0, 1], got {spectral_gap_lower_bound!r}"
        )
    return 2.0 * (1.0 - math.sqrt(lam * (1.0 - lam / 4.0))) / (1.0 - lam / 2.0) ** 2


def chebyshev_coefficients(gamma: float, T: int) -> np.ndarray:
    """Monomial coefficients of the re-scaled Chebyshev polynomials (Definition 3, spec §2.1).

    `P_0 = 1`, `P_1(X) = X` (i.e. `x^1 = W x^0`, spec §0 item 5), and for t ≥ 1 (not t ≥ 2, erratum
    §9.3) `P_{t+1}(X) = γ X P_t(X) + (1−γ) P_{t−1}(X)`.

    Returns:
        C of shape (T+1, T+1) with `P_t(X) = Σ_k C[t, k] X^k`. Every row sums to 1 (`P_t(1) = 1`,
        the mean is preserved) and γ = 1 gives `P_t(X) = X^t`.
    """
    TT = _check_int("T", T, 0)
    g = float(gamma)
    C = np.zeros((TT + 1, TT + 1), dtype=np.float64)
    C[0, 0] = 1.0
    if TT >= 1:
        C[1, 1] = 1.0
    for t in range(1, TT):
        C[t + 1, 1:] = g * C[t, :-1]
        C[t + 1, :] += (1.0 - g) * C[t - 1, :]
    return C


def chebyshev_polynomial(W: Any, gamma: float, t: int) -> np.ndarray:
    """`P_t(W)` (Definition 3) by the recursion itself, as dense float64: the matrix mapping `x^0`
    to the accelerated iterate `x^t` of Algorithm 1."""
    tt = _check_int("t", t, 0)
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    prev, cur = np.eye(M.shape[0]), np.eye(M.shape[0])
    for s in range(tt):
        nxt = M @ cur if s == 0 else gamma * (M @ cur) + (1.0 - gamma) * prev
        prev, cur = cur, nxt
    return cur


def gossip_rounds(
    spectral_gap_lower_bound: float,
    n: int,
    sigma: float,
    spread_bound: float,
    *,
    dim: int = 1,
    accelerated: bool = True,
) -> int:
    """Number of rounds T from a public spectral-gap bound (Theorem 2, spec §3.1, §5.1, §8).

    `T = ceil( (1/√λ) · ln( n/(Dσ²) · max(Dσ², B) ) )` for accelerated gossip (`1/λ` instead of
    `1/√λ` for plain gossip, whose rate is `e^{−tλ}`); then the mean squared error is at most
    `3Dσ²/n` (Theorem 2). B must be a PUBLIC upper bound on the data spread
    `(1/n) Σ_v ||x_v − x̄||²` (e.g. `b²/4` for data in [0, b]): a T computed from the data would leak
    (spec §3.1 [NOTE], §7.1 item 7). The authors' `T_mix` is this formula with B = 0.25.

    Examples: hypercube n = 2048, λ = 1/6, σ = 1, B = 0.25 → 18.676 → T = 19 (spec §4.10(d)).

    Raises:
        ValueError: unless 0 < λ ≤ 1, n ≥ 1, σ > 0, B ≥ 0, dim ≥ 1.
    """
    lam = float(spectral_gap_lower_bound)
    if not (0.0 < lam <= 1.0):
        raise ValueError(
            f"the spectral gap bound must be in (0, 1], got {spectral_gap_lower_bound!r}"
        )
    nn = _check_int("n", n, 1)
    _check_positive("sigma", sigma)
    if not (0.0 <= spread_bound < math.inf):
        raise ValueError(f"spread_bound must be a finite number >= 0, got {spread_bound!r}")
    D = _check_int("dim", dim, 1)
    noise = D * sigma**2
    log_term = math.log(nn / noise * max(noise, spread_bound))
    rate = math.sqrt(lam) if accelerated else lam
    return max(0, math.ceil(log_term / rate))


# =============================================================================================
# Schedules (spec §3.1-3.3, §3.6, §7.1 items 2 and 8)
# =============================================================================================


@dataclass(frozen=True, eq=False)
class GossipSchedule:
    """The realised communication schedule of one gossip run: the accountants' only input.

    Round t (0 ≤ t < T): every edge {v, w} ∈ `edges[t]` carries the current values of v and w
    (both directions), then `x^{t+1} = c_t W_t x^t + (1 − c_t) x^{t−1}` with `W_t = matrices[t]`.
    `c_t = 1` (plain step) when `gamma` is None, at t = 0 (`x^1 = W x^0`, spec §0 item 5), and
    whenever W_t differs from W_{t−1} (the recursion restarts when the graph changes, spec §7.1
    item 2); otherwise `c_t = γ`.

    Attributes:
        n: number of nodes, indexed 0..n−1.
        edges: per round, the frozenset of undirected edges (a, b), a < b, that exchanged values.
        matrices: per round, W_t as a scipy CSR array (float64); its support must lie in E_t plus
            the diagonal, and it must be a gossip matrix (Definition 1).
        gamma: the Chebyshev γ (accelerated run) or None (plain gossip).
        rational: per round, exact weights {(i, j): Fraction} (Metropolis schedules are exact
            1/(1+max d)); derived from the float entries when not given. Used by the exact parts of
            the joint-view accountant.

    Prefer the constructors `fixed_schedule`, `realised_schedule` and `pairwise_schedule`.
    """

    n: int
    edges: tuple[frozenset[Edge], ...]
    matrices: tuple[Any, ...]
    gamma: float | None = None
    rational: tuple[Mapping[tuple[int, int], Fraction], ...] | None = field(
        default=None, repr=False
    )

    def __post_init__(self) -> None:
        n = _check_int("n", self.n, 1)
        if len(self.edges) != len(self.matrices):
            raise ValueError(
                f"edges and matrices must have one entry per round, got {len(self.edges)} and "
                f"{len(self.matrices)}"
            )
        if self.gamma is not None and not (0.0 < float(self.gamma) < 2.0):
            raise ValueError(f"gamma must be in (0, 2) or None, got {self.gamma!r}")
        norm_cache: dict[int, frozenset[Edge]] = {}
        edges_list: list[frozenset[Edge]] = []
        for e in self.edges:
            if id(e) not in norm_cache:
                norm_cache[id(e)] = _undirected_edges(n, e)
            edges_list.append(norm_cache[id(e)])
        edges = tuple(edges_list)
        cache: dict[int, Any] = {}
        checked: set[tuple[int, int]] = set()
        mats = []
        for t, (E, W) in enumerate(zip(edges, self.matrices)):
            key = id(W)
            if key not in cache:
                cache[key] = _as_csr(W, n, t)
                check_gossip_matrix(cache[key])
            M = cache[key]
            if (id(M), id(E)) not in checked:
                _check_support(M, E, t)
                checked.add((id(M), id(E)))
            mats.append(M)
        if self.rational is not None:
            if len(self.rational) != len(mats):
                raise ValueError("rational must have one entry per round")
            seen: set[int] = set()
            for t, (M, rat) in enumerate(zip(mats, self.rational)):
                if id(rat) in seen:
                    continue
                seen.add(id(rat))
                R = _csr_of_rational(n, rat)
                diff = abs(R - M)
                if diff.nnz and diff.max() > 1e-12:
                    raise ValueError(f"the exact weights of round {t} do not match W_{t}")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "matrices", tuple(mats))
        if self.gamma is not None:
            object.__setattr__(self, "gamma", float(self.gamma))

    @property
    def T(self) -> int:
        """Number of rounds."""
        return len(self.edges)

    def coefficient(self, t: int) -> float:
        """`c_t`: γ for an accelerated step, 1 for a plain (first or restarted) step."""
        if self.gamma is None or t == 0 or self.restarts(t):
            return 1.0
        return float(self.gamma)

    def restarts(self, t: int) -> bool:
        """Whether round t restarts the Chebyshev recursion (W_t ≠ W_{t−1}; spec §7.1 item 2)."""
        if t == 0:
            return True
        a, b = self.matrices[t], self.matrices[t - 1]
        if a is b:
            return False
        return self.edges[t] != self.edges[t - 1] or (a != b).nnz > 0

    def neighbours(self, v: int, t: int) -> tuple[int, ...]:
        """`N_t(v)`: the nodes that exchanged values with v in round t, sorted."""
        return tuple(sorted(b if a == v else a for a, b in self.edges[t] if v in (a, b)))

    def communications(self, v: int) -> int:
        """`T_v = Σ_t |N_t(v)|`, the number of messages v received (spec §4.2; `d_v T` for a fixed
        graph)."""
        vv = _check_node("v", v, self.n)
        return sum(1 for E in self.edges for a, b in E if vv in (a, b))

    def rational_matrix(self, t: int) -> Mapping[tuple[int, int], Fraction]:
        """Exact weights of round t as {(i, j): Fraction}; from `rational` if given, else the float
        entries converted exactly (`Fraction(float)`)."""
        if self.rational is not None:
            return self.rational[t]
        M = self.matrices[t].tocoo()
        return {(int(i), int(j)): Fraction(float(x)) for i, j, x in zip(M.row, M.col, M.data)}

    def run(self, x0: Any) -> np.ndarray:
        """Simulate the run on `x^0` (shape (n,) or (n, D)): returns all iterates `x^0..x^T`,
        stacked on a new first axis. The messages of round t are `x^t` (spec §3.1 step 4-5)."""
        x = np.asarray(x0, dtype=np.float64)
        if x.shape[:1] != (self.n,):
            raise ValueError(f"x0 must have {self.n} rows, got shape {x.shape}")
        out = [x]
        prev = x
        for t in range(self.T):
            c = self.coefficient(t)
            nxt = self.matrices[t] @ out[-1]
            if c != 1.0:
                nxt = c * nxt + (1.0 - c) * prev
            prev = out[-1]
            out.append(np.asarray(nxt))
        return np.stack(out)


def _as_csr(W: Any, n: int, t: int) -> Any:
    if sp.issparse(W):
        M = sp.csr_array(W, dtype=np.float64)
    else:
        arr = np.asarray(W)
        if arr.dtype == object:
            arr = arr.astype(np.float64)
        M = sp.csr_array(np.asarray(arr, dtype=np.float64))
    if M.shape != (n, n):
        raise ValueError(f"W_{t} must have shape ({n}, {n}), got {M.shape}")
    M.eliminate_zeros()
    M.sort_indices()
    return M


def _check_support(M: Any, E: frozenset[Edge], t: int | None) -> None:
    """Raise ValueError unless every off-diagonal non-zero of M is an edge of E."""
    n = M.shape[0]
    C = M.tocoo()
    off = (C.row != C.col) & (C.data != 0)
    if not np.any(off):
        return
    lo = np.minimum(C.row[off], C.col[off]).astype(np.int64)
    hi = np.maximum(C.row[off], C.col[off]).astype(np.int64)
    code = lo * n + hi
    allowed = np.fromiter((a * n + b for a, b in E), dtype=np.int64, count=len(E))
    bad = ~np.isin(code, allowed)
    if np.any(bad):
        i, j = int(lo[bad][0]), int(hi[bad][0])
        when = "" if t is None else f" in round {t}"
        raise ValueError(
            f"W[{i}, {j}] is non-zero but {{{i}, {j}}} is not an edge that exchanged values{when}"
        )


def fixed_schedule(
    n: int,
    edges: Iterable[Sequence[int]],
    T: int,
    *,
    weights: Any = None,
    gamma: float | None = None,
) -> GossipSchedule:
    """T rounds on a fixed graph (Algorithm 1, spec §3.1).

    Args:
        n: number of nodes.
        edges: the undirected edges (index pairs).
        T: number of rounds (messages `x^0..x^{T−1}` are sent; `x^T` is the output).
        weights: the gossip matrix; default Metropolis (`metropolis_weights`). An object array of
            `Fraction` gives exact weights to the exact parts of the accountant.
        gamma: Chebyshev γ (`chebyshev_gamma` of a public λ lower bound) or None for plain gossip.
    """
    nn = _check_int("n", n, 1)
    TT = _check_int("T", T, 0)
    E = _undirected_edges(nn, edges)
    rational: Mapping[tuple[int, int], Fraction] | None
    if weights is None:
        rational = _metropolis_rational(nn, E)
        W = _csr_of_rational(nn, rational)
    else:
        rational = _rational_of(weights)
        W = weights
    M = _as_csr(W, nn, 0)
    return GossipSchedule(
        nn,
        (E,) * TT,
        (M,) * TT,
        gamma,
        None if rational is None else (rational,) * TT,
    )


def _csr_of_rational(n: int, rational: Mapping[tuple[int, int], Fraction]) -> Any:
    rows = np.fromiter((i for i, _ in rational), dtype=np.int64, count=len(rational))
    cols = np.fromiter((j for _, j in rational), dtype=np.int64, count=len(rational))
    vals = np.fromiter((float(w) for w in rational.values()), dtype=np.float64, count=len(rational))
    M = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    M.eliminate_zeros()
    M.sort_indices()
    return M


def _rational_of(weights: Any) -> Mapping[tuple[int, int], Fraction] | None:
    """Exact entries of an object array of Fractions/ints, else None (derive from floats)."""
    if sp.issparse(weights):
        return None
    arr = np.asarray(weights)
    if arr.dtype != object:
        return None
    out = {}
    for (i, j), x in np.ndenumerate(arr):
        if x != 0:
            out[(int(i), int(j))] = Fraction(x)
    return out


def realised_schedule(
    n: int, edges_per_round: Sequence[Iterable[Sequence[int]]], *, gamma: float | None = None
) -> GossipSchedule:
    """Schedule of a time-varying or dropout run, from the edges that actually exchanged values in
    each round (spec §3.5, §3.6, §7.1 item 8).

    W_t is rebuilt with Metropolis weights on the realised edges and realised degrees; a node with
    no realised edge keeps its value (`W_vv = 1`). With `gamma`, the recursion restarts (plain step)
    whenever the realised graph changes (spec §7.1 item 2).
    """
    nn = _check_int("n", n, 1)
    Es: list[frozenset[Edge]] = []
    mats: list[Any] = []
    rats: list[Mapping[tuple[int, int], Fraction]] = []
    cache: dict[frozenset[Edge], tuple[Any, Mapping[tuple[int, int], Fraction]]] = {}
    for edges in edges_per_round:
        E = _undirected_edges(nn, edges)
        if E not in cache:
            fresh = _metropolis_rational(nn, E)
            cache[E] = (_csr_of_rational(nn, fresh), fresh)
        M, rational = cache[E]
        Es.append(E)
        mats.append(M)
        rats.append(rational)
    return GossipSchedule(nn, tuple(Es), tuple(mats), gamma, tuple(rats))


def pairwise_schedule(n: int, activations: Sequence[Sequence[int] | None]) -> GossipSchedule:
    """Randomized gossip (Algorithm 2, spec §3.2): one activated edge per tick, or None for an idle
    tick. `W_t = I − (e_a − e_b)(e_a − e_b)ᵀ/2`, which is the Metropolis matrix of the single edge.
    """
    return realised_schedule(n, [[] if e is None else [e] for e in activations])


# =============================================================================================
# Message rows: backward block propagation over three arithmetics
# =============================================================================================


class _FloatArith:
    """float64 arithmetic; W_t as CSR."""

    def __init__(self, schedule: GossipSchedule) -> None:
        self.s = schedule
        self._T: dict[int, Any] = {}

    def units(self, nodes: Sequence[int]) -> np.ndarray:
        a = np.zeros((len(nodes), self.s.n))
        a[np.arange(len(nodes)), list(nodes)] = 1.0
        return a

    def zeros(self, k: int) -> np.ndarray:
        return np.zeros((k, self.s.n))

    def vstack(self, a: Any, b: Any) -> Any:
        return np.vstack([a, b])

    def right_mul(self, a: np.ndarray, t: int) -> np.ndarray:
        """`a @ W_t`."""
        M = self.s.matrices[t]
        key = id(M)
        if key not in self._T:
            self._T[key] = sp.csr_array(M.T)
        return np.asarray(self._T[key] @ a.T).T

    def coef(self, t: int) -> float:
        return self.s.coefficient(t)

    def axpy(self, c: Any, a: Any, b: Any) -> Any:
        """`c·a + b` (b may be None)."""
        r = a if c == 1.0 else c * a
        return r if b is None else r + b

    def scale(self, c: Any, a: Any) -> Any:
        return c * a

    def is_zero(self, c: Any) -> bool:
        return c == 0.0


def _mod(x: Fraction, p: int) -> int:
    """x modulo p (ZeroDivisionError if p divides the denominator)."""
    d = x.denominator % p
    if d == 0:
        raise ZeroDivisionError(f"{p} divides the denominator of {x}")
    return (x.numerator % p) * pow(d, p - 2, p) % p


class _ModArith:
    """Arithmetic modulo a prime p < 2^25 (int64 numpy, reduced after every product)."""

    def __init__(self, schedule: GossipSchedule, p: int) -> None:
        self.s = schedule
        self.p = p
        self._T: dict[int, Any] = {}
        self._coefs: dict[int, int] = {}

    def units(self, nodes: Sequence[int]) -> np.ndarray:
        a = np.zeros((len(nodes), self.s.n), dtype=np.int64)
        a[np.arange(len(nodes)), list(nodes)] = 1
        return a

    def zeros(self, k: int) -> np.ndarray:
        return np.zeros((k, self.s.n), dtype=np.int64)

    def vstack(self, a: Any, b: Any) -> Any:
        return np.vstack([a, b])

    def right_mul(self, a: np.ndarray, t: int) -> np.ndarray:
        M = self.s.matrices[t]
        key = id(M)
        if key not in self._T:
            rat = self.s.rational_matrix(t)
            n = self.s.n
            rows = [j for (_i, j) in rat]  # transpose: (j, i)
            cols = [i for (i, _j) in rat]
            memo: dict[Fraction, int] = {}
            vals = [
                memo[w] if w in memo else memo.setdefault(w, _mod(w, self.p)) for w in rat.values()
            ]
            MT = sp.csr_array(
                (np.asarray(vals, dtype=np.int64), (rows, cols)), shape=(n, n), dtype=np.int64
            )
            MT.sum_duplicates()
            if MT.nnz and int(np.max(np.diff(MT.indptr))) > _MAX_MOD_TERMS:
                raise ValueError(
                    "a node with more than 8190 neighbours exceeds the modular arithmetic range"
                )
            self._T[key] = MT
        return np.asarray(self._T[key] @ a.T).T % self.p

    def coef(self, t: int) -> int:
        c = self.s.coefficient(t)
        return 1 if c == 1.0 else _mod(Fraction(c), self.p)

    def axpy(self, c: int, a: Any, b: Any) -> Any:
        r = a if c == 1 else (c * a) % self.p
        return r if b is None else (r + b) % self.p

    def scale(self, c: int, a: Any) -> Any:
        return ((c % self.p) * a) % self.p

    def is_zero(self, c: int) -> bool:
        return c == 0


class _FracArith:
    """Exact rational arithmetic (object arrays of Fraction); small graphs only."""

    def __init__(self, schedule: GossipSchedule) -> None:
        self.s = schedule
        self._dense: dict[int, np.ndarray] = {}

    def units(self, nodes: Sequence[int]) -> np.ndarray:
        a = self.zeros(len(nodes))
        for r, v in enumerate(nodes):
            a[r, v] = Fraction(1)
        return a

    def zeros(self, k: int) -> np.ndarray:
        a = np.empty((k, self.s.n), dtype=object)
        a.fill(Fraction(0))
        return a

    def vstack(self, a: Any, b: Any) -> Any:
        return np.vstack([a, b])

    def right_mul(self, a: np.ndarray, t: int) -> np.ndarray:
        M = self.s.matrices[t]
        key = id(M)
        if key not in self._dense:
            D = np.empty((self.s.n, self.s.n), dtype=object)
            D.fill(Fraction(0))
            for (i, j), w in self.s.rational_matrix(t).items():
                D[i, j] = Fraction(w)
            self._dense[key] = D
        return a.dot(self._dense[key])

    def coef(self, t: int) -> Fraction:
        c = self.s.coefficient(t)
        return Fraction(1) if c == 1.0 else Fraction(c)

    def axpy(self, c: Fraction, a: Any, b: Any) -> Any:
        r = a if c == 1 else a * c
        return r if b is None else r + b

    def scale(self, c: Fraction, a: Any) -> Any:
        return a * c

    def is_zero(self, c: Fraction) -> bool:
        return c == 0


def _message_rows(
    schedule: GossipSchedule,
    requests: Sequence[tuple[int, int]],
    arith: Any,
    *,
    accelerated: bool,
) -> Any:
    """Rows `e_wᵀ M_t` of the message matrices for the requested (t, w), in request order.

    `M_0 = I` and `M_{t+1} = c_t W_t M_t + (1 − c_t) M_{t−1}` (c_t = 1 if not `accelerated`), so
    node w's round-t message is `(M_t (x + η))_w`. Computed backwards with row vectors only
    (`O(T · rows · nnz(W))`, never an n×n product): a block of rows is kept in the form
    `a M_k + b M_{k−1}` and stepped down with `a' = c_{k−1} a W_{k−1} + b`, `b' = (1 − c_{k−1}) a`.
    Requests for time k join the block when k is reached; at k = 0 the rows are `a`.
    """
    if not requests:
        return arith.zeros(0)
    by_t: dict[int, list[tuple[int, int]]] = {}
    for idx, (t, w) in enumerate(requests):
        by_t.setdefault(t, []).append((idx, w))
    kmax = max(by_t)
    a = arith.zeros(0)
    b: Any = None
    order: list[int] = []
    for k in range(kmax, -1, -1):
        new = by_t.get(k)
        if new:
            a = arith.vstack(a, arith.units([w for _, w in new]))
            if b is not None:
                b = arith.vstack(b, arith.zeros(len(new)))
            order.extend(i for i, _ in new)
        if k == 0:
            break
        c = arith.coef(k - 1) if accelerated else arith.coef(0)
        aw = arith.right_mul(a, k - 1)
        new_a = arith.axpy(c, aw, b)
        one_minus = 1 - c
        b = None if arith.is_zero(one_minus) else arith.scale(one_minus, a)
        a = new_a
    # b is None here: the step from k = 1 is always plain (c_0 = 1).
    out = arith.zeros(len(requests))
    out[np.asarray(order, dtype=np.int64)] = a
    return out


def _observer_requests(
    schedule: GossipSchedule, observers: Sequence[int], *, published: Sequence[int] = ()
) -> list[tuple[int, int]]:
    """(t, w) of every row of the knowledge matrix K_O (spec §4.11), each message counted once.

    Rows: `e_v` (time 0, own noisy input) for v ∈ O; for each round t and each edge {v, w} ∈ E_t
    with v ∈ O, w's round-t message (w ∉ O; a colluder's own messages are post-processing of the
    joint view, and v's own are linear in what v received); then the final output `x_w^T` of every
    w in `published` (spec §7.1 item 7: an output made public is one more linear view; an
    observer's own output is post-processing of its view and adds nothing).
    """
    obs = set(observers)
    req: list[tuple[int, int]] = [(0, v) for v in observers]
    seen: dict[int, list[int]] = {}  # per edge-set object (a fixed schedule repeats one)
    for t, E in enumerate(schedule.edges):
        if id(E) not in seen:
            ws: set[int] = set()
            for a, b in E:
                if a in obs and b not in obs:
                    ws.add(b)
                elif b in obs and a not in obs:
                    ws.add(a)
            seen[id(E)] = sorted(ws)
        req.extend((t, w) for w in seen[id(E)])
    req.extend((schedule.T, w) for w in published if w not in obs)
    return req


def knowledge_matrix(
    schedule: GossipSchedule, observers: int | Iterable[int], *, published: Iterable[int] = ()
) -> np.ndarray:
    """The knowledge matrix K_O of an observer set O (spec §4.11), float64, one row per observed
    quantity: `e_v` for v ∈ O, then every message received by O (row w of the actual message matrix
    of round t: `P_t(W)` for accelerated runs, `W_{0:t}` for plain ones), in round order, then
    the published outputs `x_w^T`.

    The view of O is `K_O (x + η)`. The matrix depends only on the public schedule, never on data.
    """
    obs = _node_set("observers", observers, schedule.n)
    pub = _published(published, schedule.n)
    req = _observer_requests(schedule, obs, published=pub)
    return _message_rows(schedule, req, _FloatArith(schedule), accelerated=True)


def _published(published: Iterable[int], n: int) -> tuple[int, ...]:
    items = list(published)
    return _node_set("published", items, n) if items else ()


# =============================================================================================
# The paper's accountant (eq. 6, eq. 15), eq. (7), Corollary 1, Theorem 4
# =============================================================================================

_CONVENTIONS = ("thm1", "code")


def _check_convention(convention: str) -> int:
    if convention not in _CONVENTIONS:
        raise ValueError(f"convention must be 'thm1' or 'code', got {convention!r}")
    return 0 if convention == "thm1" else 1


def paper_bound(
    schedule: GossipSchedule, observers: int | Iterable[int], *, convention: str = "thm1"
) -> np.ndarray:
    """PAPER BOUND, eq. (6) (one observer) / eq. (15) (colluders), spec §4.1, §4.7: NOT a valid
    per-pair guarantee (spec §4.11); use `joint_view_leakage` for that.

    `f(u, O)/ε_LDP = Σ_{t} Σ_{w : ∃ v ∈ O, {v,w} ∈ E_t} (W_{0:t})[w,u]² / ||(W_{0:t})[w,:]||²`,
    each message (w, t) counted once (Theorem 12), w ranging over all nodes that talked to an
    observer (including other colluders, as printed). Row w, column u of the plain product (spec §9
    erratum 2), also for accelerated runs (spec §4.1 "Which matrices").

    Conventions (spec §0 item 6, §4.10):
        "thm1": Theorem 1, `t = 0..T−1` with `W_{0:t}`; the t = 0 term is the raw noisy value, so
            every neighbour gets ≥ 1.
        "code": the authors' figure code, `t = 1..T` with `W^t` on a fixed graph. For a
            time-varying schedule it is generalised here as: round t's messages use `W_{0:t+1}`.

    Returns:
        Unclipped fractions of ε_LDP for every u (entry u ∈ O is the formula's value, meaningless
        but useful as a check, spec §4.10(a)). Clip with `clip_to_ldp`.
    """
    shift = _check_convention(convention)
    obs = set(_node_set("observers", observers, schedule.n))
    req: list[tuple[int, int]] = []
    for t, E in enumerate(schedule.edges):
        ws: set[int] = set()
        for a, b in E:
            if a in obs:
                ws.add(b)
            if b in obs:
                ws.add(a)
        req.extend((t + shift, w) for w in sorted(ws))
    rows = _message_rows(schedule, req, _FloatArith(schedule), accelerated=False)
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
    """PAPER BOUND eq. (6) for every pair: `F[u, v] = f(u, v)/ε_LDP` (spec §4.1 matrix form,
    `F = Σ_t (A_t C_t)ᵀ`, `C_t[w,u] = M_t[w,u]²/Σ_z M_t[w,z]²`). Not a valid guarantee (§4.11).

    Identity (spec §4.1): `Σ_u F[u, v] = T_v` ("thm1"). Cost `O(T · nnz · n)` (dense products).
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
    """PAPER BOUND eq. (6) from one source u towards every observer v: `F[u, :]` (spec §4.1).

    Methods:
        "products": forward products `M_{t+1} = W_t M_t` (sparse × dense, `O(T · nnz · n)`), any
            schedule.
        "eigen": fixed symmetric W only (a `fixed_schedule`): `W = Q Λ Qᵀ`,
            `(W^t)[w,u] = Σ_k Q_wk Q_uk λ_k^t` and `||(W^t)[w,:]||² = Σ_k Q_wk² λ_k^{2t}` (spec §4.1
            "fast"), `O(n³ + T n²)`.
        "auto": "eigen" for a fixed schedule with `T · nnz(W) > 2n²` (long runs), else "products".
    """
    shift = _check_convention(convention)
    uu = _check_node("u", u, schedule.n)
    if method not in ("auto", "eigen", "products"):
        raise ValueError(f"method must be 'auto', 'eigen' or 'products', got {method!r}")
    n = schedule.n
    fixed = _is_fixed(schedule)
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


def clip_to_ldp(values: Any) -> np.ndarray:
    """`min(f, 1)` in units of ε_LDP (spec §4.1 "Clipping"): the whole transcript is a
    post-processing of `x + η`, so no pair leaks more than the local-DP level."""
    return np.minimum(np.asarray(values, dtype=np.float64), 1.0)


def mean_privacy_loss(fractions: Any, v: int | Iterable[int]) -> float:
    """Mean privacy loss of eq. (7) (spec §2.3, §4.2): `ε_v = (1/n) Σ_{u ∉ O} f(u, O)` (note 1/n,
    not 1/(n−1)), for fractions of ε_LDP over all u. A summary of the gains, not a guarantee.

    For the paper bound, `≤ T_v/n` (`mean_loss_bound`); for the joint view,
    `≤ (rank K_v − |O|)/n ≤ T_v/n` (spec §4.11).
    """
    f = np.asarray(fractions, dtype=np.float64)
    obs = _node_set("v", v, f.shape[0])
    mask = np.ones(f.shape[0], dtype=bool)
    mask[list(obs)] = False
    return float(np.sum(f[mask]) / f.shape[0])


def mean_loss_bound(schedule: GossipSchedule, v: int) -> float:
    """Right-hand side of eq. (7) in units of ε_LDP: `T_v/n` (`α Δ² T_v/(2nσ²)` once multiplied
    by `ldp_level`). With dropout, T_v is the node's realised count, purely local (spec §7.1 item 8).
    """
    return schedule.communications(v) / schedule.n


def corollary1_bound(W: Any, T: int, u: int, v: int) -> float:
    """Corollary 1 (spec §4.3), fraction of ε_LDP, fixed symmetric W:
    `n · max_{w~v} W_vw^{−2} · Σ_{t=1}^{T} (W^t)[u, v]²` (a loose bound on eq. (6))."""
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    n = M.shape[0]
    uu, vv = _check_node("u", u, n), _check_node("v", v, n)
    TT = _check_int("T", T, 0)
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


def theorem4_alpha_cap(sigma: float, sensitivity: float) -> float:
    """Largest α allowed by Theorem 4 / Corollary 5 (spec §4.5): `σ² ≥ Δ² α(α−1)/2`, i.e.
    `α ≤ (1 + sqrt(1 + 8σ²/Δ²))/2` (σ = Δ → 2)."""
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    return (1.0 + math.sqrt(1.0 + 8.0 * sigma**2 / sensitivity**2)) / 2.0


def er_pair_bound(n: int, T: int, degree: int, adjacent: bool) -> float:
    """Theorem 4 (spec §4.5) on a private Erdős–Rényi graph, fraction of ε_LDP, clipped at 1:
    1 if u ~ v, else `min(1, 2 T d_v/(n − d_v))` (i.e. `α Δ² T d_v/(σ²(n − d_v))`).

    Valid only under its preconditions (`q = c ln n/n`, c > 1; `α ≤ theorem4_alpha_cap`; the graph
    secret beyond each node's neighbourhood). Fully local: v needs only n, T, d_v.
    Example: n = 2048, T = 32, d_v = 8 → 0.2510.
    """
    nn = _check_int("n", n, 2)
    TT = _check_int("T", T, 0)
    d = _check_int("degree", degree, 0)
    if d >= nn:
        raise ValueError(f"degree must be < n, got {degree!r}")
    if adjacent:
        return 1.0
    return min(1.0, 2.0 * TT * d / (nn - d))


# =============================================================================================
# The exact joint-view accountant (spec §4.11)
# =============================================================================================


@dataclass(frozen=True, eq=False)
class JointView:
    """Result of `joint_view` for an observer set O.

    Attributes:
        observers: O (sorted node indices).
        leakage: for every u, `||Π_{rowspace K_O} e_u||²`, the exact Rényi divergence of O's view
            in units of ε_LDP (1.0 for u ∈ O), rounded UP by `margin` for non-members.
        full: boolean mask, True where `e_u ∈ rowspace(K_O)` (O can solve its view for
            `x_u + η_u`; leakage exactly 1), decided in exact modular arithmetic.
        rank: exact rank of K_O (modular).
        numeric_rank: dimension of the float basis of the row space.
        resolved: whether the exact rank is resolved in double precision (then `leakage` is the
            float value plus `margin`); if not, see `method`.
        method: "float" (resolved), "exact" (rational arithmetic), "nullspace" (fixed schedule,
            float part disagreeing, exact values from a null-space certificate; `joint_view`
            step 5) or "conservative" (unresolved and too large for rational arithmetic; see
            `joint_view` step 4).
        margin: the perturbation margin added to every non-member's float value.
        rows: number of rows of K_O (= |O| + messages received, + outputs if included).
        estimate: the plain floating-point projection `||Q e_u||²` (no margin; a lower estimate
            when the float basis misses directions), for diagnostics.
    """

    observers: tuple[int, ...]
    leakage: np.ndarray
    full: np.ndarray
    rank: int
    numeric_rank: int
    resolved: bool
    method: str
    margin: float
    rows: int
    estimate: np.ndarray = field(repr=False)
    _basis: Any = field(default=None, repr=False, compare=False)


# Exact modular products with float64 BLAS. Operands hold integers in [0, p), p < 2^25. The left
# operand is split as A = 2^13·A_hi + A_lo (A_hi < 2^12, A_lo < 2^13) and the inner dimension cut
# into chunks of 2^15, so every partial sum of the (non-negative) products is below
# 2^15·2^13·2^25 = 2^53: each GEMM is exact in float64 whatever its summation order or FMA use.
_MOD_SPLIT = 8192.0  # 2^13
_MOD_CHUNK = 1 << 15
_MOD_BLOCK = 30  # rows eliminated together by `_ModEchelon.add` (see `_sub_matmul_mod`)


def _reduce_mod(x: np.ndarray, p: int) -> np.ndarray:
    """`x mod p` in [0, p) for a float64 array of integers with |x| ≤ 2^53 − p (new array).

    `q = floor(x·(1/p))` is the true quotient or one off (the rounding error of `x·(1/p)` is far
    below 1 for |x| < 2^53, p ≥ 2), so |q·p| ≤ |x| + p ≤ 2^53 and `x − q·p` are exact integers,
    and one correction by ±p lands in [0, p). Callers stay below 2^53 − 2^40 (`_matmul_mod`),
    2^53 − 2^49 (`_sub_matmul_mod`) and 2^51 (`_rref_small`). (np.fmod is exact too but ~25×
    slower.)"""
    q = x * (1.0 / p)
    np.floor(q, out=q)
    q *= p
    r = x - q
    np.add(r, p, out=r, where=r < 0)
    np.subtract(r, p, out=r, where=r >= p)
    return r


def _matmul_mod(A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """`(A @ B) mod p`, exactly, for float64 arrays of integers in [0, p) with p < 2^25."""
    if p >= 1 << 25:
        raise ValueError("_matmul_mod needs p < 2^25")
    out = np.zeros((A.shape[0], B.shape[1]))
    k = A.shape[1]
    if k == 0 or out.size == 0:
        return out
    hi = np.floor(A / _MOD_SPLIT)
    HL = np.vstack([hi, A - hi * _MOD_SPLIT])  # one GEMM for both halves: B is read once
    m = A.shape[0]
    for s in range(0, k, _MOD_CHUNK):
        P = _reduce_mod(HL[:, s : s + _MOD_CHUNK] @ B[s : s + _MOD_CHUNK], p)
        P[:m] *= _MOD_SPLIT  # < 2^38
        out += P[:m]
        out += P[m:]  # < 2^39 per chunk
    return _reduce_mod(out, p)


def _centred(x: np.ndarray, p: int) -> np.ndarray:
    """Representatives in (−p/2, p/2] of integers in [0, p)."""
    return np.where(x > p // 2, x - p, x)


def _sub_matmul_mod(C: np.ndarray, A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """`(C − A @ B) mod p`, exactly (float64 integers in [0, p), p < 2^25).

    For an inner dimension k ≤ `_MOD_BLOCK` = 30 a single GEMM on centred representatives
    (|a|, |b| ≤ p/2 < 2^24): every partial sum is below k·2^48 ≤ 30·2^48, and with C added below
    2^53, so exact; otherwise through `_matmul_mod`."""
    if A.shape[1] <= _MOD_BLOCK:
        return _reduce_mod(C - _centred(A, p) @ _centred(B, p), p)
    return _reduce_mod(C - _matmul_mod(A, B, p), p)


def _rref_small(Z: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """RREF modulo p of a small block (float64 integers in [0, p)): (independent rows, pivots).

    One Python step per ROW (not per column): a row's first non-zero entry becomes its pivot and
    is eliminated from every other row of the block. Products are < p² < 2^50: exact in float64.
    The rows come out in input order, not sorted by pivot (every pivot column is still a unit
    column of the result)."""
    Z = np.array(Z, dtype=np.float64)
    keep: list[int] = []
    piv: list[int] = []
    for i in range(Z.shape[0]):
        nz = np.flatnonzero(Z[i])
        if nz.size == 0:
            continue
        c = int(nz[0])
        inv = pow(int(Z[i, c]), p - 2, p)
        if inv != 1:
            Z[i] = _reduce_mod(Z[i] * inv, p)
        f = Z[:, c].copy()
        f[i] = 0.0
        idx = np.flatnonzero(f)
        if idx.size:  # |Z − f·Z_i| < 2^50
            Z[idx] = _reduce_mod(Z[idx] - f[idx, None] * Z[i][None, :], p)
        keep.append(i)
        piv.append(c)
    return Z[keep], piv


class _ModEchelon:
    """The row space of a growing set of vectors over F_p (p < 2^25 prime), kept in reduced row
    echelon form: every pivot column is a unit column of the basis. Stored compactly as the basis
    restricted to the non-pivot ("free") columns, `F = basis[:, free]` (the pivot columns are the
    identity), as float64 integers in [0, p); all products are exact (`_sub_matmul_mod`). Adding a
    block of rows costs O(rows · rank · (n − rank)) in BLAS and O(rows · 30 · n) element-wise,
    instead of O(n) Python steps over the whole matrix (the column-by-column reference lives in
    tests/unit/test_pndp_modular.py)."""

    def __init__(self, n: int, p: int) -> None:
        self.n, self.p = n, p
        self.rank = 0
        self._piv: list[int] = []  # pivot column of each basis row
        self._free = np.arange(n)  # non-pivot columns, increasing
        self._F = np.zeros((0, n))  # basis[:, _free]

    @property
    def basis(self) -> np.ndarray:
        """The RREF basis rows (rank × n; pivot rows in the order found)."""
        B = np.zeros((self.rank, self.n))
        if self.rank:
            B[np.arange(self.rank), self._piv] = 1.0
            B[:, self._free] = self._F
        return B

    @property
    def pivots(self) -> list[int]:
        return list(self._piv)

    @property
    def free_columns(self) -> np.ndarray:
        return self._free.copy()

    def free_part(self) -> np.ndarray:
        """`basis[:, free_columns]` (rank × (n − rank))."""
        return self._F

    def add(self, Z: Any) -> np.ndarray:
        """Add the rows of Z (integers; reduced modulo p here). Returns new basis rows (n columns):
        rows that, with the old basis, span old span + rowspace(Z), independent of the old span
        (zero rows if nothing is new)."""
        p = self.p
        Z = np.mod(np.asarray(Z, dtype=np.int64), p).astype(np.float64)
        out: list[np.ndarray] = []
        for s in range(0, Z.shape[0], _MOD_BLOCK):
            Zs = Z[s : s + _MOD_BLOCK]
            Zf = Zs[:, self._free]
            if self.rank:  # Z − Z[:, piv] · basis, on the free columns (zero on the pivots)
                Zf = _sub_matmul_mod(Zf, Zs[:, self._piv], self._F, p)
            N, q = _rref_small(Zf, p)  # q: new pivots, as positions in _free
            if not q:
                continue
            rows = np.zeros((len(q), self.n))
            rows[:, self._free] = N
            out.append(rows)
            F = self._F
            if self.rank:  # clear the new pivot columns in the old rows
                F = _sub_matmul_mod(F, F[:, q], N, p)
            keep = np.ones(len(self._free), dtype=bool)
            keep[q] = False
            self._F = np.vstack([F[:, keep], N[:, keep]])
            self._piv.extend(int(c) for c in self._free[q])
            self._free = self._free[keep]
            self.rank += len(q)
        return np.vstack(out) if out else np.zeros((0, self.n))

    def members(self) -> np.ndarray:
        """`e_u ∈ rowspace` for every u: u is a pivot column whose basis row is e_u (in RREF, the
        coordinates of e_u on the basis are its entries at the pivot columns), i.e. whose row of
        F is zero."""
        full = np.zeros(self.n, dtype=bool)
        if self.rank:
            single = ~np.any(self._F != 0, axis=1)
            full[np.asarray(self._piv)[single]] = True
        return full


def _krylov_echelon(
    schedule: GossipSchedule, obs: Sequence[int], published: Sequence[int], p: int
) -> _ModEchelon | None:
    """rowspace(K_O) modulo p for a FIXED schedule, by an incremental block Krylov basis over F_p.

    The rows of K_O are `e_vᵀ` (v ∈ O), `e_wᵀ M_t` (w ∈ N(O)∖O, t < T) and the published outputs
    `e_wᵀ M_T`, with `M_t` a polynomial in W of degree t whose leading coefficient is
    `∏_{s<t} c_s`. When no `c_s` vanishes mod p the change of basis between `{e_wᵀ M_s : s ≤ t}` and
    `{e_wᵀ W^s : s ≤ t}` is triangular and invertible over F_p, so the message rows span the block
    Krylov space `S_{T−1}`, `S_t = span{e_wᵀ W^s : s ≤ t}`, exactly as K_O mod p does (returns None
    otherwise; the caller then reduces K_O itself). `S_{t+1} = S_0 + S_t W = S_t + (C_t W)` for any
    complement C_t of S_{t−1} in S_t, so W is applied only to the new basis rows of each step, and
    the loop stops once a step adds nothing (then `S_t W ⊆ S_t`). Raises ZeroDivisionError if p
    divides a weight's denominator (as `_ModArith`).
    """
    arith = _ModArith(schedule, p)
    if any(arith.coef(t) % p == 0 for t in range(schedule.T)):
        return None
    n = schedule.n
    obs_set = set(obs)
    nbrs = sorted(
        {b if a in obs_set else a for a, b in schedule.edges[0] if (a in obs_set) != (b in obs_set)}
    )
    ech = _ModEchelon(n, p)
    if schedule.T >= 1 and nbrs:
        V = ech.add(arith.units(nbrs))
        for _t in range(1, schedule.T):
            if V.shape[0] == 0:
                break
            V = ech.add(arith.right_mul(V.astype(np.int64), 0))
    ech.add(arith.units(list(obs)))
    pub = [w for w in published if w not in obs_set]
    if pub:
        ech.add(_message_rows(schedule, [(schedule.T, w) for w in pub], arith, accelerated=True))
    return ech


def _modular_rowspace(
    schedule: GossipSchedule,
    req: Sequence[tuple[int, int]],
    p: int,
    *,
    observers: Sequence[int] | None = None,
    published: Sequence[int] = (),
) -> _ModEchelon | None:
    """rowspace(K) modulo p in RREF (`_ModEchelon`), or None if p divides a weight's denominator.

    For a fixed schedule with `observers` given (K = K_O of `_observer_requests(schedule,
    observers, published=published)`, i.e. `req`), the incremental Krylov basis
    (`_krylov_echelon`); otherwise the rows of K mod p (`_message_rows`) reduced by blocks."""
    try:
        if observers is not None and _is_fixed(schedule) and _same_rational(schedule):
            ech = _krylov_echelon(schedule, observers, published, p)
            if ech is not None:
                return ech
        K = _message_rows(schedule, req, _ModArith(schedule, p), accelerated=True)
    except ZeroDivisionError:
        return None
    ech = _ModEchelon(schedule.n, p)
    ech.add(K)
    return ech


def _rank_and_members(echelons: Sequence[_ModEchelon | None], n: int) -> tuple[int, np.ndarray]:
    """Combine primes: the largest rank is kept, and a node counts as solvable if it is under a
    prime achieving that rank (see `_exact_rank_and_members`)."""
    best_rank = -1
    full = np.zeros(n, dtype=bool)
    for ech in echelons:
        if ech is None:
            continue
        r, mem = ech.rank, ech.members()
        if r > best_rank:
            best_rank, full = r, mem
        elif r == best_rank:
            full = full | mem
    if best_rank < 0:
        raise ValueError("the schedule's weights are not invertible modulo the fixed primes")
    return best_rank, full


def _exact_rank_and_members(
    schedule: GossipSchedule,
    req: Sequence[tuple[int, int]],
    primes: Sequence[int] = _PRIMES,
    *,
    observers: Sequence[int] | None = None,
    published: Sequence[int] = (),
) -> tuple[int, np.ndarray]:
    """Exact rank of K and membership of every e_u (`e_u ∈ rowspace K`), modulo fixed primes.

    Over a prime field, `rank_p ≤ rank_Q`, with equality unless p divides every maximal non-zero
    minor (the entries are rationals whose denominators divide products of the Metropolis
    denominators 1 + max d ≤ n < p and of γ's power-of-two denominator; a prime dividing a custom
    weight's denominator is skipped). When `rank_p = rank_Q`, `e_u ∈ rowspace_Q K` implies
    `e_u ∈ rowspace_p K` (the rank of `[K; e_u]` cannot grow mod p), so no full leak is missed;
    the converse may fail only for a bad prime. The largest rank is kept, and a node counts as
    solvable if it is under a prime achieving that rank. `joint_view` uses the first prime and adds
    the second whenever the result disagrees with the floating-point computation (unless the
    null-space certificate of its step 5 proves the first prime's answer); a wrong answer then
    needs both primes to be bad for the same matrix. Failures are on the conservative side: a
    full leak where there is none, or a rank too small (the float part is then declared
    unresolved). Each prime is computed by `_modular_rowspace` (exact F_p elimination; the Krylov
    form for a fixed schedule when `observers` is given).
    """
    echs = [
        _modular_rowspace(schedule, req, p, observers=observers, published=published)
        for p in primes
    ]
    return _rank_and_members(echs, schedule.n)


def _frac_solve(G: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    """Solve G X = B exactly (G square, invertible) by Gauss–Jordan on Fractions."""
    k = len(G)
    A = [list(G[i]) + list(B[i]) for i in range(k)]
    width = len(A[0]) if A else 0
    for c in range(k):
        piv = next(i for i in range(c, k) if A[i][c] != 0)
        A[c], A[piv] = A[piv], A[c]
        inv = 1 / A[c][c]
        A[c] = [x * inv for x in A[c]]
        for i in range(k):
            if i != c and A[i][c] != 0:
                f = A[i][c]
                A[i] = [x - f * y for x, y in zip(A[i], A[c])]
    return [row[k:width] for row in A]


def _frac_rref(K: np.ndarray) -> tuple[list[list[Fraction]], list[int]]:
    rows = [list(r) for r in K]
    m = len(rows)
    n = len(rows[0]) if rows else 0
    pivots: list[int] = []
    r = 0
    for c in range(n):
        if r == m:
            break
        piv = next((i for i in range(r, m) if rows[i][c] != 0), None)
        if piv is None:
            continue
        rows[r], rows[piv] = rows[piv], rows[r]
        inv = 1 / rows[r][c]
        rows[r] = [x * inv for x in rows[r]]
        for i in range(m):
            if i != r and rows[i][c] != 0:
                f = rows[i][c]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[r])]
        pivots.append(c)
        r += 1
    return rows[:r], pivots


class _ExactProjector:
    """Exact orthogonal projector onto rowspace(K) for a rational K (spec §4.11: "for small graphs
    use exact rational arithmetic"). Entries Π[u, u'] are exact Fractions."""

    def __init__(self, K: np.ndarray) -> None:
        n = K.shape[1]
        R, piv = _frac_rref(K)
        self.n, self.rank = n, len(piv)
        if self.rank <= n - self.rank:
            # Π = Rᵀ (R Rᵀ)^{-1} R
            self.sign, self.basis = 1, R
        else:
            # Π = I − Nᵀ (N Nᵀ)^{-1} N, N a basis of the null space of R
            free = [c for c in range(n) if c not in set(piv)]
            N = []
            for j in free:
                vec = [Fraction(0)] * n
                vec[j] = Fraction(1)
                for i, c in enumerate(piv):
                    vec[c] = -R[i][j]
                N.append(vec)
            self.sign, self.basis = -1, N
        B = self.basis
        if B:
            G = [[sum((x * y for x, y in zip(bi, bj)), Fraction(0)) for bj in B] for bi in B]
            self.Y = _frac_solve(G, B)
        else:
            self.Y = []

    def entry(self, u: int, w: int) -> Fraction:
        s = sum((self.basis[i][u] * self.Y[i][w] for i in range(len(self.basis))), Fraction(0))
        if self.sign == 1:
            return s
        return (Fraction(1) if u == w else Fraction(0)) - s

    def diag(self) -> list[Fraction]:
        return [self.entry(u, u) for u in range(self.n)]


def _rational_reconstruction(a: int, p: int, bound: int) -> Fraction | None:
    """The fraction x = num/den with |num|, den ≤ bound and x ≡ a (mod p), if any (half extended
    Euclid; unique when 2·bound² < p). Only a candidate: callers verify it exactly."""
    r0, r1 = p, a % p
    s0, s1 = 0, 1
    while r1 > bound:
        q = r0 // r1
        r0, r1 = r1, r0 - q * r1
        s0, s1 = s1, s0 - q * s1
    if s1 == 0 or abs(s1) > bound:
        return None
    return Fraction(r1, s1)


#: Limits of `_lift_null_space` (beyond them `joint_view` stays "conservative").
_LIFT_MAX_DIM = 1024  # null-space dimension n − rank
_LIFT_MAX_NNZ = 50_000  # non-zeros of the null-space basis
_LIFT_MAX_WORK = 2_000_000  # Fraction operations: Σ_x Σ_{j ∈ supp x} |W[:, j]| (the products
#                              W x), and Σ over components of |C|²·|support(C)| (Gram solves)


def _same_rational(schedule: GossipSchedule) -> bool:
    """The exact weights are the same in every round (the float matrices may agree to 1e-12 only)."""
    if schedule.rational is None:
        return True
    r0 = schedule.rational[0]
    return all(r is r0 or r == r0 for r in schedule.rational)


class _NullProjector:
    """Exact projector onto rowspace(K) from an exactly verified rational basis X of null(K):
    `Π = I − Π_X`. X is split into components with pairwise disjoint supports (orthogonal
    subspaces), and `Π_X` is `X_C (X_Cᵀ X_C)^{-1} X_Cᵀ` on each, in Fractions."""

    def __init__(self, n: int, vecs: Sequence[Mapping[int, Fraction]]) -> None:
        self.n = n
        self.rank = n - len(vecs)
        parent = list(range(len(vecs)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        for i, x in enumerate(vecs):
            for c in x:
                j = owner.setdefault(c, i)
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[ri] = rj
        groups: dict[int, list[int]] = {}
        for i in range(len(vecs)):
            groups.setdefault(find(i), []).append(i)
        self._where: dict[int, tuple[int, int]] = {}  # coordinate -> (component, position)
        self._parts: list[tuple[list[list[Fraction]], list[list[Fraction]]]] = []
        work = 0
        for members in groups.values():
            support = sorted({c for i in members for c in vecs[i]})
            work += len(members) ** 2 * len(support)
            if work > _LIFT_MAX_WORK:
                raise ValueError("null space too large for the exact projector")
            X = [[vecs[i].get(c, Fraction(0)) for c in support] for i in members]
            G = [[sum((a * b for a, b in zip(xi, xj)), Fraction(0)) for xj in X] for xi in X]
            Y = _frac_solve(G, X)  # G^{-1} X
            k = len(self._parts)
            for pos, c in enumerate(support):
                self._where[c] = (k, pos)
            self._parts.append((X, Y))

    def entry(self, u: int, w: int) -> Fraction:
        """Π[u, w], exactly."""
        eye = Fraction(1) if u == w else Fraction(0)
        cu, cw = self._where.get(u), self._where.get(w)
        if cu is None or cw is None or cu[0] != cw[0]:
            return eye
        X, Y = self._parts[cu[0]]
        return eye - sum((X[i][cu[1]] * Y[i][cw[1]] for i in range(len(X))), Fraction(0))

    def diag(self) -> list[Fraction]:
        return [self.entry(u, u) for u in range(self.n)]


def _lift_null_space(
    schedule: GossipSchedule, req: Sequence[tuple[int, int]], ech: _ModEchelon
) -> _NullProjector | None:
    """Exact null space of K over Q from its RREF modulo p, for a FIXED schedule; None if it
    cannot be proven (then nothing is claimed).

    Candidate: the RREF null-space basis mod p (x_j = 1 at its free column j, −R[i, j] at pivot
    column i, 0 elsewhere), each entry lifted to a small fraction (`_rational_reconstruction`).
    Proof, in exact rational arithmetic, for the d = n − rank_p candidates X:
      (a) x_w = 0 for every w heading a row of K (`e_wᵀ M_t`, M_0 = I for the e_v rows);
      (b) W X ⊆ span_Q X (the coefficients are forced: x_k has 1 at free column k and 0 at the
          other free columns, so W x must equal `Σ_k (W x)_{free_k} x_k`, checked exactly).
    With one W in every round, every row of K is `e_wᵀ M_t(W)` with M_t a polynomial in W, so by
    (b) `M_t x ∈ span X` and by (a) `e_wᵀ M_t x = 0`: X ⊆ null_Q(K). X is independent (the unit
    pattern on the free columns), so `rank_Q K ≤ n − d = rank_p K ≤ rank_Q K`: the rank is exact,
    `null_Q(K) = span X` and `rowspace(K) = X^⊥` (over R too: same rational matrix). Hence
    `||Π e_u||² = 1 − ||Π_X e_u||²`, computed exactly by `_NullProjector`.
    """
    if not (_is_fixed(schedule) and _same_rational(schedule)):
        return None
    n, p = schedule.n, ech.p
    piv = np.asarray(ech.pivots, dtype=np.int64)
    free = ech.free_columns
    if len(free) > _LIFT_MAX_DIM:
        return None
    heads = {w for _, w in req}
    if heads.intersection(free.tolist()):
        return None
    cols = ech.free_part()  # basis[:, free]
    if np.count_nonzero(cols) + len(free) > _LIFT_MAX_NNZ:
        return None
    bound = math.isqrt((p - 1) // 2)
    vecs: list[dict[int, Fraction]] = []
    for k, j in enumerate(free.tolist()):
        x = {j: Fraction(1)}
        for i in np.flatnonzero(cols[:, k]).tolist():
            f = _rational_reconstruction(-int(cols[i, k]), p, bound)
            c = int(piv[i])
            if f is None or c in heads:
                return None
            x[c] = f
        vecs.append(x)
    by_col: dict[int, list[tuple[int, Fraction]]] = {}
    for (i, j), w in schedule.rational_matrix(0).items():
        if w != 0:
            by_col.setdefault(j, []).append((i, Fraction(w)))
    if sum(len(by_col.get(j, ())) for x in vecs for j in x) > _LIFT_MAX_WORK:
        return None  # the exact products W x would be too long
    free_pos = {int(j): k for k, j in enumerate(free.tolist())}
    for x in vecs:
        y: dict[int, Fraction] = {}
        for j, xj in x.items():
            for i, w in by_col.get(j, ()):
                y[i] = y.get(i, Fraction(0)) + w * xj
        z: dict[int, Fraction] = {}
        for i, yi in y.items():
            pos = free_pos.get(i)
            if pos is not None and yi != 0:
                for c, v in vecs[pos].items():
                    z[c] = z.get(c, Fraction(0)) + yi * v
        if any(y.get(c, 0) != z.get(c, 0) for c in set(y) | set(z)):
            return None
    try:
        return _NullProjector(n, vecs)
    except ValueError:
        return None


def _round_up(x: Fraction) -> float:
    v = float(x)
    return v if Fraction(v) >= x else math.nextafter(v, math.inf)


@dataclass
class _FloatBasis:
    Q: np.ndarray  # (r, n) orthonormal rows spanning the computed row space
    margin: float


def _stable_rowspace(
    schedule: GossipSchedule, requests: Sequence[tuple[int, int]], rtol: float
) -> tuple[np.ndarray, float, bool]:
    """Orthonormal basis of rowspace(K) for the requested message rows, computed stably.

    Same backward propagation as `_message_rows`, but the block of (a, b) pairs is replaced by an
    orthonormal basis of its row span (SVD) after every step. This is valid because the final row
    space depends only on the span of the pairs (`(a, b) ↦ a M_k + b M_{k−1}` is linear), and it
    avoids the monomial basis `e_wᵀ W^t`, whose rows all converge to `1ᵀ/n` (the source of the
    ill-conditioning, spec §4.11): each step only loses what a single multiplication by W_t
    contracts. Directions below the float noise floor (`64·eps·sqrt(n)·s_max`) are dropped; any
    kept direction below `rtol·s_max` marks the result ambiguous.

    Returns:
        (Q, min_ratio, ambiguous): Q of shape (r, n) with orthonormal rows; the smallest kept
        singular value relative to its block's largest, over all steps; the ambiguity flag.
    """
    n = schedule.n
    if not requests:
        return np.zeros((0, n)), 1.0, False
    by_t: dict[int, list[int]] = {}
    for t, w in requests:
        by_t.setdefault(t, []).append(w)
    arith = _FloatArith(schedule)
    noise = 64.0 * _EPS * math.sqrt(n)
    a = np.zeros((0, n))
    b: np.ndarray | None = None
    min_ratio, ambiguous = 1.0, False
    for k in range(max(by_t), -1, -1):
        new = by_t.get(k)
        if new:
            a = np.vstack([a, arith.units(sorted(set(new)))])
            if b is not None:
                b = np.vstack([b, np.zeros((len(set(new)), n))])
        if a.shape[0]:
            X = a if b is None else np.hstack([a, b])
            _, s, Vt = np.linalg.svd(X, full_matrices=False)
            keep = s > rtol * s[0]
            gray = (s > noise * s[0]) & ~keep
            ambiguous = ambiguous or bool(np.any(gray & (s > 1e-3 * rtol * s[0])))
            if np.any(keep):
                min_ratio = min(min_ratio, float(s[keep][-1] / s[0]))
            Vt = Vt[keep]
            a = Vt[:, :n]
            b = None if b is None else Vt[:, n:]
        if k == 0:
            break
        c = arith.coef(k - 1)
        new_a = arith.axpy(c, arith.right_mul(a, k - 1), b)
        b = None if c == 1.0 else (1.0 - c) * a
        a = new_a
    return a, min_ratio, ambiguous


def _krylov_rowspace(
    schedule: GossipSchedule, obs: Sequence[int], published: Sequence[int], rtol: float
) -> tuple[np.ndarray, float, bool]:
    """Orthonormal basis of rowspace(K_O) for a FIXED schedule, by block Lanczos/Arnoldi.

    With the same W and E in every round, the messages of a neighbour w span
    `span{e_wᵀ W^t : t < T}` (for accelerated runs too: `P_t` has degree t with leading coefficient
    `γ^{t−1} ≠ 0`, spec §4.11), so rowspace(K_O) is the block Krylov space
    `K_T(Wᵀ, [e_w]_{w ∈ N(O)∖O})` plus `e_v` (v ∈ O) and the published outputs. The Krylov
    space is built by applying W only to the newest orthonormal block, with full
    re-orthogonalisation (twice); it never forms `W^t`, so it stays accurate where the monomial
    rows are numerically dependent (spec §4.11: hypercube and ER examples). New directions of norm
    ≤ rtol are deflated (dropping a direction that is exactly in the span is safe: its images stay
    in the span); a norm in (1e-3·rtol, rtol] marks the result ambiguous.
    """
    n = schedule.n
    W = schedule.matrices[0]
    WT = sp.csr_array(W.T)
    obs_set = set(obs)
    nbrs = sorted(
        {b if a in obs_set else a for a, b in schedule.edges[0] if (a in obs_set) != (b in obs_set)}
    )
    blocks: list[np.ndarray] = []
    state = {"min": 1.0, "ambiguous": False}

    def orthonormal_new(Z: np.ndarray) -> np.ndarray:
        if blocks:
            B = np.hstack(blocks)
            for _ in range(2):
                Z = Z - B @ (B.T @ Z)
        if Z.shape[1] == 0:
            return Z
        U, sv, _ = np.linalg.svd(Z, full_matrices=False)
        keep = sv > rtol
        if np.any(~keep & (sv > 1e-3 * rtol)):
            state["ambiguous"] = True
        if np.any(keep):
            state["min"] = min(state["min"], float(sv[keep][-1]))
        return U[:, keep]

    def units(nodes: Sequence[int]) -> np.ndarray:
        Z = np.zeros((n, len(nodes)))
        Z[list(nodes), np.arange(len(nodes))] = 1.0
        return Z

    if schedule.T >= 1 and nbrs:
        V = orthonormal_new(units(nbrs))
        blocks.append(V)
        for _t in range(1, schedule.T):
            if V.shape[1] == 0:
                break
            V = orthonormal_new(np.asarray(WT @ V))
            if V.shape[1]:
                blocks.append(V)
    extras = [units(obs)]
    pub = [w for w in published if w not in obs_set]
    if pub:
        out = _message_rows(
            schedule, [(schedule.T, w) for w in pub], _FloatArith(schedule), accelerated=True
        )
        extras.append(out.T)
    E = orthonormal_new(np.hstack(extras))
    if E.shape[1]:
        blocks.append(E)
    Q = np.hstack(blocks).T if blocks else np.zeros((0, n))
    return Q, state["min"], bool(state["ambiguous"])


def _is_fixed(schedule: GossipSchedule) -> bool:
    """Same W and E in every round (after the first), i.e. a `fixed_schedule`."""
    if schedule.T == 0:
        return False
    M0, E0 = schedule.matrices[0], schedule.edges[0]
    return all(
        (M is M0 or (M != M0).nnz == 0) and E == E0
        for M, E in zip(schedule.matrices, schedule.edges)
    )


def joint_view(
    schedule: GossipSchedule,
    observers: int | Iterable[int],
    *,
    published: Iterable[int] = (),
    rtol: float = DEFAULT_RTOL,
    exact: bool | None = None,
) -> JointView:
    """THE EXACT JOINT-VIEW ACCOUNTANT (spec §4.11): what an observer set O learns about each u.

    `ε_{u→O} = ε_LDP · ||Π_{rowspace(K_O)} e_u||²` where K_O stacks `e_vᵀ` (v ∈ O) and the
    coefficient rows of every message O received (`knowledge_matrix`). Exact for Gaussian noise and
    linear views: fixing every input but `x_u`, O's view is `N(K x, σ² K Kᵀ)` and moving `x_u` by
    `δ_u` (|δ_u| ≤ Δ; L2 norm for vectors with i.i.d. noise per coordinate) gives
    `D_α = (α Δ²/(2σ²)) e_uᵀ Kᵀ (K Kᵀ)⁺ K e_u`. Single observer: O = {v}; colluders: O = V_c
    (Definition 6, the "merged node"); groups: `group_leakage`. For a time-varying, dropout or
    randomized run pass the realised schedule. Accelerated messages are used as they are (for a
    fixed W their row space equals the plain one, spec §4.11).

    Numerics (spec §4.11 "Computation", §7.1 item 11). In the monomial basis K is badly conditioned
    (rows converge to `1ᵀ/n`), and dropping a tiny singular value UNDER-states the leak (the value
    only grows as rtol shrinks, converging to the exact-arithmetic one). So:

    1. Exact part: the rank r of K and whether `e_u ∈ rowspace(K)` (O can solve its view for
       `x_u + η_u`: leak exactly 1) are computed in modular arithmetic (one prime, a second one
       when the float part disagrees and step 5 does not apply; see `_exact_rank_and_members`),
       not with a tolerance. The elimination over F_p is blocked (`_ModEchelon`: RREF kept up to
       date with float64 BLAS products that are exact by construction, `_matmul_mod`); on a fixed
       schedule the row space mod p is built as an incremental block Krylov basis
       (`_krylov_echelon`: W is applied only to the new basis rows of each step, and the loop
       stops when a step adds nothing), never forming the T·|N(O)| message rows.
    2. Float part: an orthonormal basis Q of the row space is built without ever forming the
       monomial rows `e_wᵀ W^t` (which all converge to `1ᵀ/n`): block Lanczos on a fixed schedule
       (`_krylov_rowspace`), a backward propagation re-orthonormalised after every round otherwise
       (`_stable_rowspace`; its errors grow with the contraction of each W_t, so long
       time-varying runs may end unresolved). Then `||Π e_u||² = ||Q e_u||²`.
    3. A perturbation margin `16·(T+2)·sqrt(mn)·eps / min_ratio` (backward-error estimate over the
       smallest relative singular value met, Wedin-style) is ADDED to every non-member; values are
       clipped at 1.
    4. `resolved` means the float basis has exactly the exact rank and no kept direction is below
       `rtol`. If not, the float basis cannot be trusted: with `exact=None` the projector is
       computed in exact rational arithmetic when n ≤ `EXACT_MAX_NODES` (method "exact");
       otherwise (method "conservative") a float basis larger than the exact rank is used as is (a
       superset of the row space over-states the leak), and a float basis missing directions
       reports 1 for every u (nothing smaller is provable), with the float value kept in
       `estimate`.
    5. Null-space certificate (fixed schedule, `exact=None`, n > `EXACT_MAX_NODES`, float part
       disagreeing with step 1): the null space mod p is lifted to small rationals and proven in
       exact arithmetic to be W-invariant and zero on every node heading a row of K
       (`_lift_null_space`). That proves `rank_Q K = rank_p K` and `null(K) = span X`, so
       `||Π e_u||² = 1 − ||Π_X e_u||²` is computed exactly (`_NullProjector`, per component of
       disjoint supports; rounded up to float), method "nullspace", and the second prime is
       skipped (no prime can change a proven answer). If any check fails or a size cap is hit,
       nothing is claimed and steps 1-4 apply. Typical case: twin nodes (same closed
       neighbourhood and weights) outside N(O) ∪ O, whose differences `e_a − e_b` the observer
       never sees (random geometric graph of Fig. 1a: 65 null vectors, leaks 1/2, 1/3, 1/4).
    Example (spec §4.11 table, Fig. 1a ER graph, n = 2048, T = 32, v = 0): the exact rank is 353,
    i.e. all 1 + 11·32 rows are independent, and the single distance-6 node leaks 0.990·ε_LDP (mean
    0.315 / 0.166 / 0.155 at distance 2 / 3 / 4). The spec's 0.986 and 0.259 / 0.095 / 0.080 are
    the monomial-basis SVD truncated at rtol = 1e-9 (numerical rank 200): under-estimates.

    Args:
        schedule: the (realised) schedule.
        observers: v or the colluding set V_c.
        published: nodes whose final output `x_w^T` the observers also see (e.g. `range(n)` when
            the outputs are made public, spec §7.1 item 7).
        rtol: resolution threshold of step 4 (spec recommends ≤ 1e-9).
        exact: True forces rational arithmetic, False forbids it (also step 5), None (default)
            uses it only when the float part is unresolved and n ≤ EXACT_MAX_NODES, and the
            bounded null-space certificate of step 5 when n > EXACT_MAX_NODES.
    """
    obs = _node_set("observers", observers, schedule.n)
    if not (0.0 < rtol < 1.0):
        raise ValueError(f"rtol must satisfy 0 < rtol < 1, got {rtol!r}")
    n = schedule.n
    pub = _published(published, n)
    req = _observer_requests(schedule, obs, published=pub)
    m = len(req)
    echs = [_modular_rowspace(schedule, req, _PRIMES[0], observers=obs, published=pub)]
    rank, full = _rank_and_members(echs, n) if echs[0] is not None else (-1, np.zeros(n, bool))

    if _is_fixed(schedule):
        Q, min_ratio, ambiguous = _krylov_rowspace(schedule, obs, pub, rtol)
    else:
        Q, min_ratio, ambiguous = _stable_rowspace(schedule, req, rtol)
    numeric_rank = Q.shape[0]
    float_value = np.sum(Q**2, axis=0)
    rational_path = exact is True or (exact is None and n <= EXACT_MAX_NODES)
    nproj: _NullProjector | None = None
    if numeric_rank != rank or np.any(float_value[full] < 1.0 - 1e-6):
        # disagreement with the float part. First try to prove the first prime's answer exact
        # over Q (fixed schedules, step 5); a bad prime is the other explanation: add the second
        # one (the first prime's result is reused, not recomputed), unless the proof succeeded
        # (then no prime can give another rank or membership).
        if echs[0] is not None and exact is None and not rational_path:
            nproj = _lift_null_space(schedule, req, echs[0])
        if nproj is None:
            echs += [
                _modular_rowspace(schedule, req, p, observers=obs, published=pub)
                for p in _PRIMES[1:]
            ]
            rank, full = _rank_and_members(echs, n)
    resolved = numeric_rank == rank and not ambiguous
    err = 16.0 * (schedule.T + 2) * math.sqrt(m * n) * _EPS
    margin = min(1.0, err / min_ratio)
    estimate = np.minimum(float_value, 1.0)
    estimate[full] = 1.0
    estimate[list(obs)] = 1.0

    if exact is True or (exact is None and not resolved and n <= EXACT_MAX_NODES):
        Kq = _message_rows(schedule, req, _FracArith(schedule), accelerated=True)
        proj = _ExactProjector(Kq)
        diag = proj.diag()
        full = np.array([x == 1 for x in diag], dtype=bool)  # exact: authoritative
        leak = np.array([float(x) for x in diag])
        leak[list(obs)] = 1.0
        return JointView(
            obs, leak, full, proj.rank, numeric_rank, resolved, "exact", 0.0, m, estimate, proj
        )
    if nproj is not None:
        diag = nproj.diag()
        full = np.array([x == 1 for x in diag], dtype=bool)  # exact: authoritative
        leak = np.array([min(1.0, _round_up(x)) for x in diag])
        leak[list(obs)] = 1.0
        return JointView(
            obs,
            leak,
            full,
            nproj.rank,
            numeric_rank,
            resolved,
            "nullspace",
            0.0,
            m,
            estimate,
            nproj,
        )
    if resolved:
        method = "float"
        values = estimate + margin
    else:
        method = "conservative"
        values = estimate + margin if numeric_rank > rank else np.ones(n)
    leak = np.where(full, 1.0, np.minimum(values, 1.0))
    leak[list(obs)] = 1.0
    return JointView(
        obs,
        leak,
        full,
        rank,
        numeric_rank,
        resolved,
        method,
        margin,
        m,
        estimate,
        _FloatBasis(Q, margin),
    )


def joint_view_leakage(
    schedule: GossipSchedule, observers: int | Iterable[int], **kwargs: Any
) -> np.ndarray:
    """`joint_view(...).leakage`: fractions of ε_LDP that the observers learnt about every u."""
    return joint_view(schedule, observers, **kwargs).leakage


def incoming_leakage(schedule: GossipSchedule, v: int, **kwargs: Any) -> np.ndarray:
    """INCOMING direction: what node v learnt about each other node u, from its own view (its
    messages and its own noisy input), `ε_{u→v}/ε_LDP` for every u (entry v is 1). spec §4.11.

    The coefficients of v's messages depend on the whole schedule, not only on v's edges: with
    dropout or randomized gossip the realised schedule must be published after the run (or drawn
    from a public seed); otherwise only the mean bound `mean_loss_bound` (own T_v) is local
    (spec §4.9, §7.1 item 8)."""
    return joint_view(schedule, _check_node("v", v, schedule.n), **kwargs).leakage


def joint_view_matrix(schedule: GossipSchedule, **kwargs: Any) -> np.ndarray:
    """`F[u, v] = ε_{u→v}/ε_LDP` (joint view) for every pair; one `joint_view` per observer."""
    n = schedule.n
    F = np.empty((n, n))
    for v in range(n):
        F[:, v] = joint_view(schedule, v, **kwargs).leakage
    return F


def outgoing_leakage(schedule: GossipSchedule, u: int, **kwargs: Any) -> np.ndarray:
    """OUTGOING direction: the loss node u incurs towards every node v, `ε_{u→v}/ε_LDP` (entry u is
    1), from the schedule (public, or published after a dropout/randomized run, spec §4.9). Every
    observer's knowledge matrix is needed: n `joint_view` calls."""
    uu = _check_node("u", u, schedule.n)
    return np.array([joint_view(schedule, v, **kwargs).leakage[uu] for v in range(schedule.n)])


def _projector_block(view: JointView, group: Sequence[int]) -> tuple[np.ndarray, float]:
    """Π[U, U] (float) and the elementwise uncertainty margin."""
    basis = view._basis
    if isinstance(basis, (_ExactProjector, _NullProjector)):
        B = np.array([[float(basis.entry(a, b)) for b in group] for a in group])
        return B, 0.0
    if basis.margin >= 1.0 or not view.resolved and view.numeric_rank < view.rank:
        return np.eye(len(group)), 1.0  # unresolved: nothing smaller is provable
    Qg = basis.Q[:, list(group)]
    return Qg.T @ Qg, basis.margin


def group_leakage(
    schedule: GossipSchedule,
    group: Iterable[int],
    observers: int | Iterable[int],
    *,
    dim: int = 1,
    **kwargs: Any,
) -> float:
    """Group privacy with the joint view (Definition 7, spec §4.11 "Groups"), fraction of ε_LDP:
    every user in U may change, each by at most Δ.

    `D_α/ε_LDP = max_{s ∈ [−1,1]^U} sᵀ Π_UU s`, Π the projector onto rowspace(K_O). Π_UU is
    positive semi-definite, so the maximum of this convex form is at a vertex s ∈ {±1}^U,
    enumerated exactly for |U| ≤ 16; for larger groups, or vector inputs (dim > 1, each δ_u in an
    L2 ball, where the vertex argument does not apply), the upper bound
    `min(|U| λ_max(Π_UU), Σ_{u,u'} |Π_uu'|)` is returned. The float margin of `joint_view` is added
    as `|U|·margin` (`|sᵀ(Π̂ − Π)s| ≤ margin·||s||²`); the result is capped at |U|. Can exceed 1
    (up to |U|).
    """
    obs = _node_set("observers", observers, schedule.n)
    U = _node_set("group", group, schedule.n)
    D = _check_int("dim", dim, 1)
    view = joint_view(schedule, obs, **kwargs)
    P, margin = _projector_block(view, U)
    k = len(U)
    slack = margin * k
    if D == 1 and k <= 16:
        best = 0.0
        for mask in range(1 << (k - 1)):
            s = np.array([1.0] + [(-1.0 if (mask >> i) & 1 else 1.0) for i in range(k - 1)])
            best = max(best, float(s @ P @ s))
        value = best
    else:
        value = min(k * float(np.max(np.linalg.eigvalsh(P))), float(np.sum(np.abs(P))))
    return min(float(k), value + slack)


# =============================================================================================
# Conversion to (ε, δ) and calibration (spec §4.8, §5.4)
# =============================================================================================


def rdp_to_dp_optimal(
    rho: float, delta: float, alpha_max: float | None = None
) -> tuple[float, float]:
    """Closed-form conversion of a linear RDP curve `ε_RDP(α) = α ρ` to (ε, δ)-DP (spec §4.8).

    `ε(δ) = min_{1<α≤α_max} [α ρ + ln(1/δ)/(α − 1)]`, attained at `α* = 1 + sqrt(ln(1/δ)/ρ)`,
    where `ε = ρ + 2 sqrt(ρ ln(1/δ))`; with a cap (Theorem 4: `theorem4_alpha_cap`) α* is clipped to
    α_max. ρ is `fraction · Δ²/(2σ²)`. Returns (ε, α). This is the paper's conversion (§2.2);
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


def pair_privacy_loss(
    fraction: float,
    *,
    sigma: float,
    sensitivity: float,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
    method: str = "muffliato-joint-view",
) -> PrivacyLoss:
    """A `PrivacyLoss` for one pair from a fraction of ε_LDP (joint view, or any accountant here).

    The pair is `(α, fraction·αΔ²/(2σ²))`-RDP for every α: exactly the curve of one Gaussian
    mechanism with noise multiplier `z = (σ/Δ)/sqrt(fraction)` (`composition.gaussian_rdp`),
    converted at δ by `composition.rdp_to_dp`; the curve is attached so that jobs compose in RDP
    (`compose_losses`). fraction = 0 gives `PrivacyLoss(0, 0, "no-contribution")`.
    """
    if not (0.0 <= fraction < math.inf):
        raise ValueError(f"fraction must be a finite number >= 0, got {fraction!r}")
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    if fraction == 0.0:
        zeros = tuple(0.0 for _ in orders)
        return PrivacyLoss(0.0, 0.0, "no-contribution", (tuple(float(a) for a in orders), zeros))
    z = (sigma / sensitivity) / math.sqrt(fraction)
    curve = gaussian_rdp(z, orders, 1)
    rdp = (tuple(float(a) for a in orders), tuple(float(x) for x in curve))
    eps, _ = rdp_to_dp(rdp[0], rdp[1], delta)
    return PrivacyLoss(eps, delta, method, rdp)


def sigma_for_mean_loss(
    target: float, *, alpha: float, sensitivity: float, n: int, communications: int
) -> float:
    """σ such that the mean privacy loss (eq. 7) is at most `target` (RDP at order α), spec §5.4:
    `α Δ² T_v/(2nσ²) ≤ target` ⇔ `σ = Δ sqrt(α T_v/(2 n target))`, with `T_v` the (maximum)
    number of messages a node receives (`d_max · T` for Algorithm 1).

    The mean loss is a summary, not a per-pair guarantee (spec §2.3): check pairs with
    `joint_view_leakage`; a pair can still leak the full LDP level `αΔ²/(2σ²)`.
    """
    _check_positive("target", target)
    _check_alpha(alpha)
    _check_positive("sensitivity", sensitivity)
    nn = _check_int("n", n, 1)
    tv = _check_int("communications", communications, 1)
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
    """σ such that the mean privacy loss, converted with `rdp_to_dp_optimal`, is (ε, δ) (§4.8).

    The mean loss is `α ρ̄` with `ρ̄ = Δ² T_v/(2nσ²)`; without a cap, `ε = ρ̄ + 2 sqrt(ρ̄ ln(1/δ))`
    inverts to `ρ̄ = (sqrt(ε + L) − sqrt(L))²`, L = ln(1/δ); with α_max and `α* > α_max`,
    `ρ̄ = (ε − L/(α_max − 1))/α_max`. Then `σ = Δ sqrt(T_v/(2 n ρ̄))`. Same caveat as
    `sigma_for_mean_loss`.

    Raises:
        ValueError: if the cap makes ε unreachable (ε ≤ L/(α_max − 1)).
    """
    _check_positive("epsilon", epsilon)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    _check_positive("sensitivity", sensitivity)
    nn = _check_int("n", n, 1)
    tv = _check_int("communications", communications, 1)
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
