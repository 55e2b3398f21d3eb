"""Deterministic communication topologies for a job, built on networkx.

The bootstrap service builds the graph of a job from the ordered list of participant ids, and every
participant must be able to recompute exactly the same graph. So a graph is a pure function of
(kind, node ids, params, seed): random generators are seeded explicitly (never from global state),
and the result is stored as a canonical, sorted edge list.

    build("ring", ["a", "b", "c"])                              a -> b -> c -> a
    build("erdos_renyi", ids, {"p": 0.2}, seed=7)              connected G(n, p)
    build("edgelist", ids, {"path": "g.txt", "directed": True})

Kinds (every kind needs at least 2 nodes; node i is the i-th id given):
    ring              directed ring in the given order: i -> i+1, last -> first (nx.cycle_graph)
    complete          every pair (nx.complete_graph)
    erdos_renyi       G(n, p); params: p (required, 0 < p <= 1), max_attempts (default 100).
                      Attempt a uses seed + a; the first connected sample wins, else ValueError.
    exponential       i ~ i +- 2^k mod n for every 2^k < n (nx.circulant_graph)
    hypercube         n must be a power of two; node i is the vertex whose bits are those of i
                      (nx.hypercube_graph)
    grid              rows x cols 2-D grid (nx.grid_2d_graph), node i at (i // cols, i % cols);
                      params: rows and/or cols, else the most square factorisation of n (a prime
                      n is refused: pass rows=1 explicitly for a path)
    random_geometric  unit-cube random geometric graph (nx.random_geometric_graph); params: radius
                      (required), dim (default 2), max_attempts (default 100); resampled like
                      erdos_renyi until connected
    star              the first node is the centre (nx.star_graph)
    edgelist          params: edges (a list of [src, dst] pairs) or path (a local file of
                      `src dst` lines, `#` starts a comment; not accepted by the bootstrap, which
                      reads no file a request names), directed (default False). Duplicates are
                      merged; self-loops and unknown ids are refused.

Every graph is connected: undirected graphs must be connected, directed ones (ring, directed
edgelist) at least weakly connected. `edges` holds directed pairs; an undirected edge {u, v} is
listed as both (u, v) and (v, u). Edges are sorted by the positions of their endpoints in `nodes`.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from netdp_node.lazy import lazy_module

if TYPE_CHECKING:
    import networkx as nx
else:
    nx = lazy_module("networkx")  # lazy: start-up cost


__all__ = ["KINDS", "TopologyGraph", "build"]

KINDS: tuple[str, ...] = (
    "ring",
    "complete",
    "erdos_renyi",
    "exponential",
    "hypercube",
    "grid",
    "random_geometric",
    "star",
    "edgelist",
)

DEFAULT_MAX_ATTEMPTS = 100
_MAX_ATTEMPTS_CAP = 10_000
_MIN_NODES = 2

# Params each kind accepts (anything else is refused, to catch typos such as "prob" for "p").
_ALLOWED_PARAMS: dict[str, frozenset[str]] = {
    "ring": frozenset(),
    "complete": frozenset(),
    "erdos_renyi": frozenset({"p", "max_attempts"}),
    "exponential": frozenset(),
    "hypercube": frozenset(),
    "grid": frozenset({"rows", "cols"}),
    "random_geometric": frozenset({"radius", "dim", "max_attempts"}),
    "star": frozenset(),
    "edgelist": frozenset({"path", "edges", "directed"}),
}


@dataclass(frozen=True)
class TopologyGraph:
    """An immutable communication graph over an ordered tuple of node ids.

    `edges` are directed (src, dst) pairs; for an undirected graph both directions are listed.
    Construction normalises (lists -> tuples, edges sorted and deduplicated) and validates (unique
    ids, known endpoints, no self-loops, undirected edge lists symmetric), so a graph received as
    JSON from another party is checked the same way as one built locally.
    """

    kind: str
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    directed: bool
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(_unknown_kind_message(self.kind))
        nodes = _check_nodes(self.nodes)
        index = {node: i for i, node in enumerate(nodes)}
        pairs: set[tuple[str, str]] = set()
        for edge in self.edges:
            if isinstance(edge, (str, bytes)) or len(edge) != 2:
                raise ValueError(f"edge {edge!r} is not a (src, dst) pair")
            src, dst = edge
            for end in (src, dst):
                if end not in index:
                    raise ValueError(f"edge ({src!r}, {dst!r}) uses unknown node id {end!r}")
            if src == dst:
                raise ValueError(f"self-loop on node {src!r} is not allowed")
            pairs.add((src, dst))
        if not isinstance(self.directed, bool):
            raise ValueError(f"directed must be a bool, got {self.directed!r}")
        if not self.directed:
            for src, dst in pairs:
                if (dst, src) not in pairs:
                    raise ValueError(
                        f"undirected graph lists ({src!r}, {dst!r}) but not ({dst!r}, {src!r})"
                    )
        if not isinstance(self.params, Mapping):
            raise ValueError(f"params must be a mapping, got {type(self.params).__name__}")
        edges = tuple(sorted(pairs, key=lambda e: (index[e[0]], index[e[1]])))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "params", dict(self.params))

    # -- adjacency -----------------------------------------------------------------------------

    @cached_property
    def _index(self) -> dict[str, int]:
        return {node: i for i, node in enumerate(self.nodes)}

    @cached_property
    def _adjacency(self) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
        out: dict[str, list[str]] = {node: [] for node in self.nodes}
        inc: dict[str, list[str]] = {node: [] for node in self.nodes}
        for src, dst in self.edges:  # sorted by (src index, dst index)
            out[src].append(dst)
            inc[dst].append(src)
        key = self._index.__getitem__
        return (
            {node: tuple(v) for node, v in out.items()},
            {node: tuple(sorted(v, key=key)) for node, v in inc.items()},
        )

    def _require(self, node: str) -> int:
        try:
            return self._index[node]
        except (KeyError, TypeError):
            msg = f"unknown node id {node!r} (not in this {self.kind} topology)"
            raise ValueError(msg) from None

    def __contains__(self, node: object) -> bool:
        return node in self._index

    def __len__(self) -> int:
        return len(self.nodes)

    def index(self, node: str) -> int:
        """Position of `node` in `nodes` (ValueError if unknown)."""
        return self._require(node)

    def neighbors_out(self, node: str) -> tuple[str, ...]:
        """Nodes `node` sends to (all neighbours if undirected), in node order."""
        self._require(node)
        return self._adjacency[0][node]

    def neighbors_in(self, node: str) -> tuple[str, ...]:
        """Nodes that send to `node` (all neighbours if undirected), in node order."""
        self._require(node)
        return self._adjacency[1][node]

    def degree(self, node: str) -> int:
        """Number of neighbours if undirected; in-degree + out-degree if directed (as networkx)."""
        out = len(self.neighbors_out(node))
        return out if not self.directed else out + len(self.neighbors_in(node))

    def successor(self, node: str) -> str:
        """The next node on a ring (ValueError for any other kind)."""
        i = self._require_ring(node)
        return self.nodes[(i + 1) % len(self.nodes)]

    def predecessor(self, node: str) -> str:
        """The previous node on a ring, the only one allowed to send to `node` (ring only)."""
        i = self._require_ring(node)
        return self.nodes[(i - 1) % len(self.nodes)]

    def _require_ring(self, node: str) -> int:
        if self.kind != "ring":
            raise ValueError(
                f"predecessor/successor are only defined for a ring, not {self.kind!r}"
            )
        return self._require(node)

    # -- conversions ---------------------------------------------------------------------------

    def to_networkx(self) -> nx.Graph | nx.DiGraph:
        """A fresh nx.DiGraph (directed) or nx.Graph (undirected) with nodes in order."""
        g: nx.Graph = nx.DiGraph() if self.directed else nx.Graph()
        g.graph.update(kind=self.kind, params=dict(self.params))
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.edges)
        return g

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): equal graphs give equal strings."""
        return json.dumps(
            {
                "kind": self.kind,
                "nodes": list(self.nodes),
                "edges": [list(e) for e in self.edges],
                "directed": self.directed,
                "params": self.params,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> TopologyGraph:
        """Parse and validate the output of `to_json` (ValueError if malformed)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"topology JSON is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("topology JSON must be an object")
        missing = {"kind", "nodes", "edges", "directed"} - data.keys()
        if missing:
            raise ValueError(f"topology JSON lacks field(s): {', '.join(sorted(missing))}")
        if not isinstance(data["nodes"], list) or not isinstance(data["edges"], list):
            raise ValueError("topology JSON fields 'nodes' and 'edges' must be lists")
        for edge in data["edges"]:
            if not isinstance(edge, list):
                raise ValueError(f"edge {edge!r} is not a [src, dst] pair")
        return cls(
            kind=data["kind"],
            nodes=tuple(data["nodes"]),
            edges=tuple(tuple(e) for e in data["edges"]),
            directed=data["directed"],
            params=data.get("params") or {},
        )


# -- building -------------------------------------------------------------------------------------


def build(
    kind: str,
    nodes: Sequence[str],
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> TopologyGraph:
    """Build the `kind` topology over `nodes` (in order), deterministically from `params`, `seed`.

    Raises ValueError for an unknown kind, bad or unknown params, too few nodes, a node count the
    kind cannot use (hypercube, grid) or a graph that is not connected.
    """
    ids, params, seed = _checked(kind, nodes, params, seed)
    n = len(ids)
    if kind == "ring":
        return _from_nx(kind, ids, nx.cycle_graph(n, create_using=nx.DiGraph), params)
    if kind == "complete":
        return _from_nx(kind, ids, nx.complete_graph(n), params)
    return _build_other(kind, ids, params, seed)


def complete_params(
    nodes: Sequence[str], params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The checked params of the complete graph over `nodes` (what `build("complete", ...)`
    checks: ids, node count, params), without listing its n(n-1) edges (the bootstrap does not
    send them: `netdp_node.protocols.base.CompleteEdges`)."""
    return _checked("complete", nodes, params, 0)[1]


def _checked(
    kind: str, nodes: Sequence[str], params: Mapping[str, Any] | None, seed: int
) -> tuple[tuple[str, ...], dict[str, Any], int]:
    if kind not in KINDS:
        raise ValueError(_unknown_kind_message(kind))
    ids = _check_nodes(nodes)
    n = len(ids)
    if n < _MIN_NODES:
        raise ValueError(f"{kind} topology needs at least {_MIN_NODES} nodes, got {n}")
    params = dict(params or {})
    if not all(isinstance(k, str) for k in params):
        raise ValueError("topology param names must be strings")
    unknown = set(params) - _ALLOWED_PARAMS[kind]
    if unknown:
        allowed = ", ".join(sorted(_ALLOWED_PARAMS[kind])) or "none"
        hint = " (pass the seed as build(..., seed=...))" if "seed" in unknown else ""
        raise ValueError(
            f"unknown param(s) for {kind}: {', '.join(sorted(unknown))}; allowed: {allowed}{hint}"
        )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return ids, params, int(seed)


def _build_other(
    kind: str, ids: tuple[str, ...], params: dict[str, Any], seed: int
) -> TopologyGraph:
    n = len(ids)
    if kind == "erdos_renyi":
        return _erdos_renyi(ids, params, seed)
    if kind == "exponential":
        offsets = [1 << k for k in range(n.bit_length()) if (1 << k) < n]
        return _from_nx(kind, ids, nx.circulant_graph(n, offsets), params)
    if kind == "hypercube":
        return _hypercube(ids, params)
    if kind == "grid":
        return _grid(ids, params)
    if kind == "random_geometric":
        return _random_geometric(ids, params, seed)
    if kind == "star":
        return _from_nx(kind, ids, nx.star_graph(n - 1), params)
    return _edgelist(ids, params)


def _erdos_renyi(ids: tuple[str, ...], params: dict[str, Any], seed: int) -> TopologyGraph:
    if "p" not in params:
        raise ValueError("erdos_renyi needs param p (edge probability, 0 < p <= 1)")
    p = _number(params["p"], "erdos_renyi param p")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"erdos_renyi param p must be in (0, 1], got {p!r}")
    attempts = _max_attempts(params, "erdos_renyi")
    resolved = {"p": p, "max_attempts": attempts}
    n = len(ids)
    for attempt in range(attempts):
        g = nx.gnp_random_graph(n, p, seed=seed + attempt)
        if nx.is_connected(g):
            return _from_nx("erdos_renyi", ids, g, resolved)
    raise ValueError(
        f"erdos_renyi graph with n={n}, p={p} was not connected in {attempts} attempts "
        f"(seeds {seed}..{seed + attempts - 1}); raise p or max_attempts"
    )


def _hypercube(ids: tuple[str, ...], params: dict[str, Any]) -> TopologyGraph:
    n = len(ids)
    if n & (n - 1):
        lower = 1 << (n.bit_length() - 1)
        raise ValueError(
            f"hypercube needs a power-of-two number of nodes, got {n} "
            f"(nearest: {lower} or {lower * 2})"
        )
    dim = n.bit_length() - 1
    g = nx.hypercube_graph(dim)  # vertices are bit tuples (plain 0/1 when dim == 1)
    label = {v: sum(bit << k for k, bit in enumerate(_bits(v))) for v in g.nodes}
    return _from_nx("hypercube", ids, nx.relabel_nodes(g, label), params)


def _grid(ids: tuple[str, ...], params: dict[str, Any]) -> TopologyGraph:
    n = len(ids)
    rows = _positive_int(params["rows"], "grid param rows") if "rows" in params else None
    cols = _positive_int(params["cols"], "grid param cols") if "cols" in params else None
    if rows is None and cols is None:
        rows = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
        cols = n // rows
        if rows == 1:
            raise ValueError(
                f"grid cannot lay out {n} nodes (a prime) as a 2-D grid; use a composite number "
                f"of nodes, or pass rows=1, cols={n} for a path"
            )
    elif cols is not None and rows is None:
        rows = _divide(n, cols, "cols")
    elif rows is not None and cols is None:
        cols = _divide(n, rows, "rows")
    if rows is None or cols is None:  # pragma: no cover - the branches above set both
        raise AssertionError("grid: rows and cols unresolved")
    if rows * cols != n:
        raise ValueError(f"grid rows*cols = {rows}*{cols} = {rows * cols} != {n} nodes")
    g = nx.grid_2d_graph(rows, cols)
    g = nx.relabel_nodes(g, {(r, c): r * cols + c for r, c in g.nodes})
    return _from_nx("grid", ids, g, {"rows": rows, "cols": cols})


def _random_geometric(ids: tuple[str, ...], params: dict[str, Any], seed: int) -> TopologyGraph:
    if "radius" not in params:
        raise ValueError("random_geometric needs param radius (> 0, in unit-cube distance)")
    radius = _number(params["radius"], "random_geometric param radius")
    if radius <= 0:
        raise ValueError(f"random_geometric param radius must be > 0, got {radius!r}")
    dim = _positive_int(params.get("dim", 2), "random_geometric param dim")
    attempts = _max_attempts(params, "random_geometric")
    resolved = {"radius": radius, "dim": dim, "max_attempts": attempts}
    n = len(ids)
    for attempt in range(attempts):
        g = nx.random_geometric_graph(n, radius, dim=dim, seed=seed + attempt)
        if nx.is_connected(g):
            return _from_nx("random_geometric", ids, g, resolved)
    raise ValueError(
        f"random_geometric graph with n={n}, radius={radius} was not connected in {attempts} "
        f"attempts (seeds {seed}..{seed + attempts - 1}); raise radius or max_attempts"
    )


def _edgelist(ids: tuple[str, ...], params: dict[str, Any]) -> TopologyGraph:
    directed = params.get("directed", False)
    if not isinstance(directed, bool):
        raise ValueError(f"edgelist param directed must be true or false, got {directed!r}")
    if ("path" in params) == ("edges" in params):
        raise ValueError(
            "edgelist needs exactly one of params edges (a list of [src, dst] pairs) "
            "and path (a file of `src dst` lines)"
        )
    if "edges" in params:
        pairs = params["edges"]
        if not isinstance(pairs, list) or not all(
            isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(x, str) for x in e)
            for e in pairs
        ):
            raise ValueError("edgelist param edges must be a list of [src, dst] pairs of node ids")
        lines = [f"{a} {b}" for a, b in pairs]
        path = "edges"
    else:
        path = params["path"]
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"edgelist param path must be a string, got {path!r}")
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read edge list {path!r}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"edge list {path!r} is not UTF-8 text") from None
    known = set(ids)
    g: nx.Graph = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(len(ids)))
    index = {node: i for i, node in enumerate(ids)}
    for lineno, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"{path}:{lineno}"
        if len(parts) != 2:
            raise ValueError(f"{where}: expected `src dst`, got {raw.strip()!r}")
        for end in parts:
            if end not in known:
                raise ValueError(f"{where}: unknown node id {end!r} (not a participant of the job)")
        src, dst = parts
        if src == dst:
            raise ValueError(f"{where}: self-loop on {src!r} is not allowed")
        g.add_edge(index[src], index[dst])
    if g.number_of_edges() == 0:
        raise ValueError(f"edge list {path!r} has no edges")
    source = {"edges": params["edges"]} if "edges" in params else {"path": path}
    return _from_nx("edgelist", ids, g, {**source, "directed": directed})


# -- helpers --------------------------------------------------------------------------------------


def _from_nx(kind: str, ids: tuple[str, ...], g: nx.Graph, params: dict[str, Any]) -> TopologyGraph:
    """Relabel an integer-labelled graph (0..n-1 = positions in `ids`) and check it."""
    n = len(ids)
    if set(g.nodes) != set(range(n)):  # pragma: no cover - guards the generators above
        raise AssertionError(f"{kind} generator produced nodes {sorted(g.nodes)!r}")
    g = nx.relabel_nodes(g, dict(enumerate(ids)), copy=True)
    if nx.number_of_selfloops(g):  # pragma: no cover - generators above never make them
        raise ValueError(f"{kind} graph has self-loops")
    directed = g.is_directed()
    if isinstance(g, nx.DiGraph):
        connected = nx.is_weakly_connected(g)
        parts = list(nx.weakly_connected_components(g)) if not connected else []
    else:
        connected = nx.is_connected(g)
        parts = list(nx.connected_components(g)) if not connected else []
    if not connected:
        sizes = sorted((len(c) for c in parts), reverse=True)
        isolated = [v for v in ids if g.degree(v) == 0]
        detail = ""
        if isolated:
            detail = f"; isolated: {', '.join(isolated[:5])}" + ("..." if len(isolated) > 5 else "")
        raise ValueError(
            f"{kind} graph is disconnected: {len(sizes)} components of sizes {sizes}{detail}"
        )
    edges: Iterable[tuple[str, str]]
    if directed:
        edges = g.edges()
    else:
        edges = [e for u, v in g.edges() for e in ((u, v), (v, u))]
    return TopologyGraph(
        kind=kind,
        nodes=ids,
        edges=tuple(edges),
        directed=directed,
        params=params,
    )


def _bits(vertex: Any) -> tuple[int, ...]:
    return tuple(vertex) if isinstance(vertex, tuple) else (int(vertex),)


def _check_nodes(nodes: Any) -> tuple[str, ...]:
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Iterable):
        raise ValueError(f"nodes must be a sequence of node id strings, got {nodes!r}")
    ids = tuple(nodes)
    seen: set[str] = set()
    for node in ids:
        if not isinstance(node, str) or not node:
            raise ValueError(f"node ids must be non-empty strings, got {node!r}")
        if node in seen:
            raise ValueError(f"duplicate node id {node!r}")
        seen.add(node)
    return ids


def _unknown_kind_message(kind: object) -> str:
    return f"unknown topology kind {kind!r}; valid kinds: {', '.join(KINDS)}"


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return value


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _divide(n: int, given: int, name: str) -> int:
    if n % given:
        raise ValueError(f"grid {name}={given} does not divide the number of nodes {n}")
    return n // given


def _max_attempts(params: dict[str, Any], kind: str) -> int:
    attempts = _positive_int(
        params.get("max_attempts", DEFAULT_MAX_ATTEMPTS), f"{kind} param max_attempts"
    )
    if attempts > _MAX_ATTEMPTS_CAP:
        raise ValueError(
            f"{kind} param max_attempts must be <= {_MAX_ATTEMPTS_CAP}, got {attempts}"
        )
    return attempts
