"""Gossip averaging as the privacy accountants see it: gossip matrices, schedules, message rows.

Cyffers, Even, Bellet & Massoulié, *Muffliato: Peer-to-Peer Privacy Amplification for
Decentralized Optimization and Averaging*, NeurIPS 2022: node v adds `η_v ~ N(0, σ²)` once,
then T rounds `x^{t+1} = W_t x^t` (plain) or, accelerated, `x^{t+1} = γ W x^t + (1−γ) x^{t−1}`
(Chebyshev, Definition 3). Everything a node sees is a linear function of `x + η`: the message rows
(`message_rows`, `knowledge_matrix`) are those linear maps. Losses are in fractions of the local-DP
level `ε_LDP = αΔ²/(2σ²)` (`ldp_level`); `pair_privacy_loss` turns a fraction into a `PrivacyLoss`.
The paper's accountant is in `gossip_paper_bound`, the exact one in `gossip_joint_view`.
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
from netdp_node.privacy.checks import int_at_least, positive, renyi_order
from netdp_node.privacy.composition import DEFAULT_ORDERS, PrivacyLoss, gaussian_rdp, rdp_to_dp
from netdp_node.privacy.exact_linalg import MAX_MOD_TERMS, mod_fraction

sp = lazy_module("scipy.sparse")  # lazy: start-up cost

Edge = tuple[int, int]


def ldp_level(alpha: float, sigma: float, sensitivity: float) -> float:
    """The local-DP level `ε_LDP = α Δ²/(2σ²)` (the unit of every Muffliato loss).

    The RDP guarantee of `x_u + η_u` alone; every fraction returned by this module is in this
    unit.

    Raises:
        ValueError: unless α > 1, σ > 0 and Δ > 0 (finite).
    """
    renyi_order(alpha)
    positive("sigma", sigma)
    positive("sensitivity", sensitivity)
    return alpha * sensitivity**2 / (2.0 * sigma**2)


def node_index(name: str, value: Any, n: int) -> int:
    v = int_at_least(name, value, 0)
    if v >= n:
        raise ValueError(f"{name} must be a node index in 0..{n - 1}, got {value!r}")
    return v


def node_set(name: str, nodes: int | Iterable[int], n: int) -> tuple[int, ...]:
    """A non-empty sorted tuple of distinct node indices (a single int is accepted)."""
    items: list[Any] = list(nodes) if isinstance(nodes, Iterable) else [nodes]
    if not items:
        raise ValueError(f"{name} must contain at least one node")
    out = sorted({node_index(name, x, n) for x in items})
    return tuple(out)


def _undirected_edges(n: int, edges: Iterable[Sequence[int]]) -> frozenset[Edge]:
    """Normalise edges to a frozenset of (a, b) pairs with a < b; an edge listed in both
    directions counts once. Raises ValueError on self-loops or out-of-range endpoints."""
    out: set[Edge] = set()
    for edge in edges:
        if isinstance(edge, (str, bytes)) or len(edge) != 2:
            raise ValueError(f"edge {edge!r} is not a pair of node indices")
        a = node_index("edge endpoint", edge[0], n)
        b = node_index("edge endpoint", edge[1], n)
        if a == b:
            raise ValueError(f"self-loop ({a}, {a}) is not an edge (self-weights are implied)")
        out.add((a, b) if a < b else (b, a))
    return frozenset(out)


def edges_from_topology(topology: Any) -> tuple[int, frozenset[Edge]]:
    """`(n, edges)` of a `netdp_bootstrap.topology.TopologyGraph` (or anything with `.nodes` and
    `.edges` of id pairs), node i being `topology.nodes[i]`.

    Gossip is undirected: a directed edge (e.g. of the `ring` kind) is taken as the
    undirected pair.
    """
    nodes = tuple(topology.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    try:
        pairs = [(index[a], index[b]) for a, b in topology.edges]
    except KeyError as exc:
        raise ValueError(f"topology edge uses an unknown node id {exc.args[0]!r}") from None
    return len(nodes), _undirected_edges(len(nodes), pairs)


def _metropolis_rational(n: int, edges: frozenset[Edge]) -> dict[tuple[int, int], Fraction]:
    """Exact Metropolis weights as {(i, j): Fraction}, both (i, j) and (j, i), plus the diagonal."""
    return metropolis_fractions(n, sorted(edges))


def metropolis_weights(n: int, edges: Iterable[Sequence[int]]) -> np.ndarray:
    """Metropolis–Hastings gossip matrix (the "Hamilton scheme" of the
    authors' code).

    `W_vw = 1/(1 + max(d_v, d_w))` for every edge {v, w}, `W_vv = 1 − Σ_{w~v} W_vw`; zero
    elsewhere. Symmetric, doubly stochastic, lazy (`W_vv ≥ 1/(1+d_v)`), hence aperiodic. An
    isolated node keeps its value (`W_vv = 1`). This is the rule to implement; Table 1's
    `min(1/d_v, 1/d_w)` has eigenvalue −1 on bipartite regular graphs and is not provided.

    Examples: ring → all weights 1/3; hypercube m = 11 → 1/12; star K_{1,3} → centre
    row (1/4, 1/4, 1/4, 1/4), leaf row 1/4 to the centre and 3/4 to itself; path P4 →
    off-diagonals 1/3, corner self-weights 2/3.

    Args:
        n: number of nodes (≥ 1); nodes are 0..n−1.
        edges: undirected edges as index pairs (either orientation, duplicates merged).

    Returns:
        A dense float64 (n, n) array.
    """
    nn = int_at_least("n", n, 1)
    rational = _metropolis_rational(nn, _undirected_edges(nn, edges))
    W = np.zeros((nn, nn), dtype=np.float64)
    for (i, j), w in rational.items():
        W[i, j] = float(w)
    return W


def check_gossip_matrix(
    W: Any, edges: Iterable[Sequence[int]] | None = None, *, atol: float = 1e-9
) -> None:
    """Raise ValueError unless W is a gossip matrix (Definition 1).

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
    """Spectral gap of Definition 2: `λ_W = min_{λ ∈ Sp(W)∖{1}} (1 − |λ|)`.

    Includes the negative eigenvalues (unlike the authors' code, `second_eigenvalue_gap`). One
    eigenvalue 1 (the largest) is removed; a disconnected graph (eigenvalue 1 repeated) or a
    periodic matrix (eigenvalue −1) gives 0. W must be symmetric. Examples: ring 8 →
    0.195262, path P5 → 0.127322, hypercube (Metropolis) → 1/(1+m)·2 = 1/6 for m = 11.
    """
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    ev = np.linalg.eigvalsh(M)
    if ev.size == 1:
        return 1.0
    rest = ev[:-1]  # eigvalsh sorts ascending; the largest is the eigenvalue 1
    return float(max(0.0, 1.0 - np.max(np.abs(rest))))


#: the public graphs whose Metropolis matrix has a closed-form spectrum (`metropolis_spectral_gap`)
CLOSED_FORM_GRAPHS = ("ring", "complete", "hypercube")


def metropolis_spectral_gap(kind: str, n: int) -> float:
    """`spectral_gap(metropolis_weights(n, edges))` of the ring, complete graph or hypercube on n
    nodes (`graphs.ring_edges`, `complete_edges`, `hypercube_edges`), from their known spectra
    instead of an O(n³) dense eigen-decomposition (about 10 s at n = 2048):

    * complete K_n: `W = J/n` (every weight 1/n), eigenvalues 1 and 0 (n − 1 times): gap 1;
    * ring C_n (n ≥ 3, degree 2): `W = (I + A)/3`, A circulant, eigenvalues
      `1/3 + (2/3) cos(2πk/n)`, k = 0..n−1; the largest |λ| but λ_0 = 1 is at k = 1 or at
      k = ⌊n/2⌋ (the cosine is monotone between them); n ≤ 2 is K_n;
    * hypercube Q_m (n = 2^m, degree m): `W = (I + A)/(m + 1)`, A's eigenvalues `m − 2k`
      (k = 0..m), so `λ = 1 − 2k/(m + 1)`: the largest |λ| but 1 is `1 − 2/(m + 1)` (k = 1 and
      k = m alike): gap `2/(m + 1)` (e.g. 1/6 for m = 11).

    Raises:
        ValueError: another kind, or a hypercube whose n is not a power of two."""
    nn = int_at_least("n", n, 1)
    if nn <= 2 or kind == "complete":
        return 1.0
    if kind == "ring":
        lam = [1.0 / 3.0 + 2.0 / 3.0 * math.cos(2.0 * math.pi * k / nn) for k in (1, nn // 2)]
        return max(0.0, 1.0 - max(abs(x) for x in lam))
    if kind == "hypercube":
        m = nn.bit_length() - 1
        if nn != 1 << m:
            raise ValueError(f"a hypercube needs a power-of-two number of nodes, got {nn}")
        return 2.0 / (m + 1)
    raise ValueError(f"no closed-form spectrum for graph {kind!r}; known: {CLOSED_FORM_GRAPHS}")


def second_eigenvalue_gap(W: Any) -> float:
    """`1 − λ_2(W)` as the authors' code computes it: ignores negative
    eigenvalues. Equal to `spectral_gap` on the paper's graphs; kept to reproduce the
    code's T (`T_mix`), never to choose γ."""
    M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    ev = np.linalg.eigvalsh(M)
    if ev.size == 1:
        return 1.0
    return float(1.0 - ev[-2])


def chebyshev_gamma(spectral_gap_lower_bound: float) -> float:
    """γ of Algorithm 1: `2(1 − sqrt(λ(1 − λ/4)))/(1 − λ/2)²`.

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
    """Monomial coefficients of the re-scaled Chebyshev polynomials (Definition 3).

    `P_0 = 1`, `P_1(X) = X` (i.e. `x^1 = W x^0`), and for t ≥ 1 (not t ≥ 2, docs/errata.md)
    `P_{t+1}(X) = γ X P_t(X) + (1−γ) P_{t−1}(X)`.

    Returns:
        C of shape (T+1, T+1) with `P_t(X) = Σ_k C[t, k] X^k`. Every row sums to 1 (`P_t(1) = 1`,
        the mean is preserved) and γ = 1 gives `P_t(X) = X^t`.
    """
    TT = int_at_least("T", T, 0)
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
    tt = int_at_least("t", t, 0)
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
    """Number of rounds T from a public spectral-gap bound (Theorem 2).

    `T = ceil( (1/√λ) · ln( n/(Dσ²) · max(Dσ², B) ) )` for accelerated gossip (`1/λ` instead of
    `1/√λ` for plain gossip, whose rate is `e^{−tλ}`); then the mean squared error is at most
    `3Dσ²/n` (Theorem 2). B must be a PUBLIC upper bound on the data spread
    `(1/n) Σ_v ||x_v − x̄||²` (e.g. `b²/4` for data in [0, b]): a T computed from the data would leak.
    The authors' `T_mix` is this formula with B = 0.25.

    Examples: hypercube n = 2048, λ = 1/6, σ = 1, B = 0.25 → 18.676 → T = 19.

    Raises:
        ValueError: unless 0 < λ ≤ 1, n ≥ 1, σ > 0, B ≥ 0, dim ≥ 1.
    """
    lam = float(spectral_gap_lower_bound)
    if not (0.0 < lam <= 1.0):
        raise ValueError(
            f"the spectral gap bound must be in (0, 1], got {spectral_gap_lower_bound!r}"
        )
    nn = int_at_least("n", n, 1)
    positive("sigma", sigma)
    if not (0.0 <= spread_bound < math.inf):
        raise ValueError(f"spread_bound must be a finite number >= 0, got {spread_bound!r}")
    D = int_at_least("dim", dim, 1)
    noise = D * sigma**2
    log_term = math.log(nn / noise * max(noise, spread_bound))
    rate = math.sqrt(lam) if accelerated else lam
    return max(0, math.ceil(log_term / rate))


@dataclass(frozen=True, eq=False)
class GossipSchedule:
    """The realised communication schedule of one gossip run: the accountants' only input.

    Round t (0 ≤ t < T): every edge {v, w} ∈ `edges[t]` carries the current values of v and w
    (both directions), then `x^{t+1} = c_t W_t x^t + (1 − c_t) x^{t−1}` with `W_t = matrices[t]`.
    `c_t = 1` (plain step) when `gamma` is None, at t = 0 (`x^1 = W x^0`), and
    whenever W_t differs from W_{t−1} (the recursion restarts when the graph changes
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
        n = int_at_least("n", self.n, 1)
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
        """Whether round t restarts the Chebyshev recursion (W_t ≠ W_{t−1})."""
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
        """`T_v = Σ_t |N_t(v)|`, the number of messages v received (`d_v T` for a fixed
        graph)."""
        vv = node_index("v", v, self.n)
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
        stacked on a new first axis. The messages of round t are `x^t`."""
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
    """T rounds on a fixed graph (Algorithm 1).

    Args:
        n: number of nodes.
        edges: the undirected edges (index pairs).
        T: number of rounds (messages `x^0..x^{T−1}` are sent; `x^T` is the output).
        weights: the gossip matrix; default Metropolis (`metropolis_weights`). An object array of
            `Fraction` gives exact weights to the exact parts of the accountant.
        gamma: Chebyshev γ (`chebyshev_gamma` of a public λ lower bound) or None for plain gossip.
    """
    nn = int_at_least("n", n, 1)
    TT = int_at_least("T", T, 0)
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
    each round.

    W_t is rebuilt with Metropolis weights on the realised edges and realised degrees; a node with
    no realised edge keeps its value (`W_vv = 1`). With `gamma`, the recursion restarts (plain step)
    whenever the realised graph changes.
    """
    nn = int_at_least("n", n, 1)
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
    """Randomized gossip (Algorithm 2): one activated edge per tick, or None for an idle
    tick. `W_t = I − (e_a − e_b)(e_a − e_b)ᵀ/2`, which is the Metropolis matrix of the single edge.
    """
    return realised_schedule(n, [[] if e is None else [e] for e in activations])


def is_fixed(schedule: GossipSchedule) -> bool:
    """Same W and E in every round (after the first), i.e. a `fixed_schedule`."""
    if schedule.T == 0:
        return False
    M0, E0 = schedule.matrices[0], schedule.edges[0]
    return all(
        (M is M0 or (M != M0).nnz == 0) and E == E0
        for M, E in zip(schedule.matrices, schedule.edges)
    )


def same_rational(schedule: GossipSchedule) -> bool:
    """The exact weights are the same in every round (the float matrices may agree to 1e-12 only)."""
    if schedule.rational is None:
        return True
    r0 = schedule.rational[0]
    return all(r is r0 or r == r0 for r in schedule.rational)


class FloatArith:
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


class ModArith:
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
                memo[w] if w in memo else memo.setdefault(w, mod_fraction(w, self.p))
                for w in rat.values()
            ]
            MT = sp.csr_array(
                (np.asarray(vals, dtype=np.int64), (rows, cols)), shape=(n, n), dtype=np.int64
            )
            MT.sum_duplicates()
            if MT.nnz and int(np.max(np.diff(MT.indptr))) > MAX_MOD_TERMS:
                raise ValueError(
                    "a node with more than 8190 neighbours exceeds the modular arithmetic range"
                )
            self._T[key] = MT
        return np.asarray(self._T[key] @ a.T).T % self.p

    def coef(self, t: int) -> int:
        c = self.s.coefficient(t)
        return 1 if c == 1.0 else mod_fraction(Fraction(c), self.p)

    def axpy(self, c: int, a: Any, b: Any) -> Any:
        r = a if c == 1 else (c * a) % self.p
        return r if b is None else (r + b) % self.p

    def scale(self, c: int, a: Any) -> Any:
        return ((c % self.p) * a) % self.p

    def is_zero(self, c: int) -> bool:
        return c == 0


class FracArith:
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


def message_rows(
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


def observer_requests(
    schedule: GossipSchedule, observers: Sequence[int], *, published: Sequence[int] = ()
) -> list[tuple[int, int]]:
    """(t, w) of every row of the knowledge matrix K_O, each message counted once.

    Rows: `e_v` (time 0, own noisy input) for v ∈ O; for each round t and each edge {v, w} ∈ E_t
    with v ∈ O, w's round-t message (w ∉ O; a colluder's own messages are post-processing of the
    joint view, and v's own are linear in what v received); then the final output `x_w^T` of every
    w in `published` (an output made public is one more linear view; an
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
    """The knowledge matrix K_O of an observer set O, float64, one row per observed
    quantity: `e_v` for v ∈ O, then every message received by O (row w of the actual message matrix
    of round t: `P_t(W)` for accelerated runs, `W_{0:t}` for plain ones), in round order, then
    the published outputs `x_w^T`.

    The view of O is `K_O (x + η)`. The matrix depends only on the public schedule, never on data.
    """
    obs = node_set("observers", observers, schedule.n)
    pub = published_nodes(published, schedule.n)
    req = observer_requests(schedule, obs, published=pub)
    return message_rows(schedule, req, FloatArith(schedule), accelerated=True)


def published_nodes(published: Iterable[int], n: int) -> tuple[int, ...]:
    items = list(published)
    return node_set("published", items, n) if items else ()


def clip_to_ldp(values: Any) -> np.ndarray:
    """`min(f, 1)` in units of ε_LDP: the whole transcript is a
    post-processing of `x + η`, so no pair leaks more than the local-DP level."""
    return np.minimum(np.asarray(values, dtype=np.float64), 1.0)


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
    positive("sigma", sigma)
    positive("sensitivity", sensitivity)
    if fraction == 0.0:
        zeros = tuple(0.0 for _ in orders)
        return PrivacyLoss(0.0, 0.0, "no-contribution", (tuple(float(a) for a in orders), zeros))
    z = (sigma / sensitivity) / math.sqrt(fraction)
    curve = gaussian_rdp(z, orders, 1)
    rdp = (tuple(float(a) for a in orders), tuple(float(x) for x in curve))
    eps, _ = rdp_to_dp(rdp[0], rdp[1], delta)
    return PrivacyLoss(eps, delta, method, rdp)
