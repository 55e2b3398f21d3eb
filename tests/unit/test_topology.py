"""Unit tests for netdp_bootstrap.topology: every kind, closed-form edge counts, determinism,
ring neighbours, edge-list parsing and the JSON round trip."""

from __future__ import annotations

import json
import math

import networkx as nx
import pytest

from netdp_bootstrap.topology import KINDS, TopologyGraph, build


def ids(n: int) -> list[str]:
    # Deliberately not in lexicographic order, to check that node order is preserved.
    return [f"node-{(7 * i) % n if math.gcd(7, n) == 1 else i}" for i in range(n)]


def exp_offsets(n: int) -> set[int]:
    return {(s * (1 << k)) % n for k in range(n.bit_length()) if (1 << k) < n for s in (1, -1)}


PARAMS = {
    "erdos_renyi": {"p": 0.5},
    "random_geometric": {"radius": 0.5},
}


@pytest.fixture
def edge_file(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "edges.txt"
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


def check_invariants(g: TopologyGraph, nodes: list[str]) -> None:
    assert g.nodes == tuple(nodes)
    assert all(src != dst for src, dst in g.edges)
    assert len(set(g.edges)) == len(g.edges)
    pos = {v: i for i, v in enumerate(nodes)}
    assert list(g.edges) == sorted(g.edges, key=lambda e: (pos[e[0]], pos[e[1]]))
    if not g.directed:
        assert set(g.edges) == {(d, s) for s, d in g.edges}
        assert nx.is_connected(g.to_networkx())
    else:
        assert nx.is_weakly_connected(g.to_networkx())


# -- every kind ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "edgelist"])
@pytest.mark.parametrize("n", [2, 4, 16])
def test_every_kind_builds(kind, n):
    nodes = ids(n)
    if kind == "grid" and n == 2:
        g = build(kind, nodes, {"rows": 1, "cols": 2})
    else:
        g = build(kind, nodes, PARAMS.get(kind, {"p": 1.0} if kind == "erdos_renyi" else None))
    assert g.kind == kind
    check_invariants(g, nodes)


def test_kinds_tuple():
    assert set(KINDS) == {
        "ring",
        "complete",
        "erdos_renyi",
        "exponential",
        "hypercube",
        "grid",
        "random_geometric",
        "star",
        "edgelist",
    }


def test_edgelist_kind_builds(edge_file):
    path = edge_file("a b\nb c\n")
    g = build("edgelist", ["a", "b", "c"], {"path": path})
    check_invariants(g, ["a", "b", "c"])


# -- closed-form edge counts -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_ring_edges(n):
    nodes = ids(n)
    g = build("ring", nodes)
    assert g.directed
    assert len(g.edges) == n
    assert set(g.edges) == {(nodes[i], nodes[(i + 1) % n]) for i in range(n)}
    for v in nodes:
        assert len(g.neighbors_out(v)) == 1 and len(g.neighbors_in(v)) == 1


@pytest.mark.parametrize("n", [2, 3, 7, 10])
def test_complete_edges(n):
    g = build("complete", ids(n))
    assert not g.directed
    assert len(g.edges) == n * (n - 1)
    assert all(g.degree(v) == n - 1 for v in g.nodes)


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_hypercube_edges(m):
    n = 2**m
    nodes = ids(n)
    g = build("hypercube", nodes)
    assert len(g.edges) == n * m  # n*m/2 undirected edges, both directions
    assert all(g.degree(v) == m for v in nodes)
    # node at index i is vertex i: neighbours differ in exactly one bit
    expected = {
        (nodes[i], nodes[j]) for i in range(n) for j in range(n) if bin(i ^ j).count("1") == 1
    }
    assert set(g.edges) == expected


@pytest.mark.parametrize(
    "n,params,shape",
    [
        (12, None, (3, 4)),
        (16, None, (4, 4)),
        (6, None, (2, 3)),
        (12, {"rows": 2}, (2, 6)),
        (12, {"cols": 2}, (6, 2)),
        (12, {"rows": 6, "cols": 2}, (6, 2)),
        (5, {"rows": 1, "cols": 5}, (1, 5)),
    ],
)
def test_grid_edges(n, params, shape):
    rows, cols = shape
    nodes = ids(n)
    g = build("grid", nodes, params)
    assert g.params == {"rows": rows, "cols": cols}
    assert len(g.edges) == 2 * (rows * (cols - 1) + cols * (rows - 1))
    # node i sits at (i // cols, i % cols)
    for i, v in enumerate(nodes):
        r, c = divmod(i, cols)
        want = {
            nodes[rr * cols + cc]
            for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
            if 0 <= rr < rows and 0 <= cc < cols
        }
        assert set(g.neighbors_out(v)) == want


@pytest.mark.parametrize("n", [2, 3, 9])
def test_star_edges(n):
    nodes = ids(n)
    g = build("star", nodes)
    assert len(g.edges) == 2 * (n - 1)
    assert g.degree(nodes[0]) == n - 1
    assert all(g.neighbors_out(v) == (nodes[0],) for v in nodes[1:])


@pytest.mark.parametrize("n,degree", [(2, 1), (3, 2), (8, 5), (10, 6), (16, 7), (6, 4), (33, 10)])
def test_exponential_degree(n, degree):
    nodes = ids(n)
    g = build("exponential", nodes)
    assert len(exp_offsets(n)) == degree
    assert all(g.degree(v) == degree for v in nodes)
    assert len(g.edges) == n * degree
    for i, v in enumerate(nodes):
        assert set(g.neighbors_out(v)) == {nodes[(i + d) % n] for d in exp_offsets(n)}


def test_exponential_power_of_two_closed_form():
    for m in range(1, 8):
        g = build("exponential", ids(2**m))
        assert all(g.degree(v) == 2 * m - 1 for v in g.nodes)


# -- determinism -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,params",
    [("erdos_renyi", {"p": 0.2}), ("random_geometric", {"radius": 0.35})],
)
def test_random_kinds_deterministic(kind, params):
    nodes = ids(30)
    a = build(kind, nodes, params, seed=42)
    b = build(kind, list(nodes), dict(params), seed=42)
    assert a == b
    assert a.edges == b.edges
    assert a.to_json() == b.to_json()


def test_erdos_renyi_seed_changes_graph():
    nodes = ids(30)
    a = build("erdos_renyi", nodes, {"p": 0.2}, seed=1)
    b = build("erdos_renyi", nodes, {"p": 0.2}, seed=2)
    assert a.edges != b.edges


def test_random_geometric_seed_changes_graph():
    nodes = ids(30)
    a = build("random_geometric", nodes, {"radius": 0.4}, seed=1)
    b = build("random_geometric", nodes, {"radius": 0.4}, seed=2)
    assert a.edges != b.edges


def test_erdos_renyi_matches_networkx_with_seed():
    # attempt 0 uses the seed itself; p=0.5, n=12 is connected at seed 3
    nodes = ids(12)
    ref = nx.gnp_random_graph(12, 0.5, seed=3)
    assert nx.is_connected(ref)
    g = build("erdos_renyi", nodes, {"p": 0.5}, seed=3)
    assert set(g.edges) == {(nodes[u], nodes[v]) for a, b in ref.edges for u, v in ((a, b), (b, a))}


def test_erdos_renyi_resamples_until_connected():
    # p is low enough that some of the first seeds are disconnected; the result must be connected
    nodes = ids(20)
    seeds_disconnected = [
        s for s in range(20) if not nx.is_connected(nx.gnp_random_graph(20, 0.2, seed=s))
    ]
    assert seeds_disconnected, "test needs a seed whose first sample is disconnected"
    g = build("erdos_renyi", nodes, {"p": 0.2}, seed=seeds_disconnected[0])
    assert nx.is_connected(g.to_networkx())


def test_erdos_renyi_gives_up():
    with pytest.raises(ValueError, match="not connected in 5 attempts"):
        build("erdos_renyi", ids(50), {"p": 0.01, "max_attempts": 5})


def test_random_geometric_gives_up():
    with pytest.raises(ValueError, match="not connected in 3 attempts"):
        build("random_geometric", ids(50), {"radius": 0.01, "max_attempts": 3})


def test_nodes_order_matters():
    a = build("ring", ["a", "b", "c"])
    b = build("ring", ["c", "b", "a"])
    assert a.successor("a") == "b" and b.successor("a") == "c"


# -- ring neighbours -------------------------------------------------------------------------------


def test_ring_predecessor_successor():
    nodes = ["n3", "n1", "n2", "n0"]
    g = build("ring", nodes)
    assert [g.successor(v) for v in nodes] == ["n1", "n2", "n0", "n3"]
    assert [g.predecessor(v) for v in nodes] == ["n0", "n3", "n1", "n2"]
    for v in nodes:
        assert g.neighbors_out(v) == (g.successor(v),)
        assert g.neighbors_in(v) == (g.predecessor(v),)
        assert g.predecessor(g.successor(v)) == v
        assert g.degree(v) == 2


def test_ring_of_two():
    g = build("ring", ["a", "b"])
    assert g.edges == (("a", "b"), ("b", "a"))
    assert g.successor("a") == g.predecessor("a") == "b"


def test_predecessor_only_for_rings():
    g = build("complete", ["a", "b", "c"])
    with pytest.raises(ValueError, match="only defined for a ring"):
        g.predecessor("a")
    with pytest.raises(ValueError, match="only defined for a ring"):
        g.successor("a")


def test_unknown_node_lookup():
    g = build("ring", ["a", "b", "c"])
    for method in (g.successor, g.predecessor, g.neighbors_out, g.neighbors_in, g.degree):
        with pytest.raises(ValueError, match="unknown node id 'zz'"):
            method("zz")


# -- edge lists ------------------------------------------------------------------------------------


def test_edgelist_parsing(edge_file):
    path = edge_file(
        "# a comment line\n"
        "\n"
        "a b\n"
        "  b   c   # trailing comment\n"
        "c\td\n"
        "b a\n"  # duplicate of a-b when undirected
        "a b\n"
    )
    g = build("edgelist", ["a", "b", "c", "d"], {"path": path})
    assert not g.directed
    assert g.params == {"path": path, "directed": False}
    assert g.edges == (("a", "b"), ("b", "a"), ("b", "c"), ("c", "b"), ("c", "d"), ("d", "c"))


def test_edgelist_directed(edge_file):
    path = edge_file("a b\nb c\nc a\nb a\n")
    g = build("edgelist", ["a", "b", "c"], {"path": path, "directed": True})
    assert g.directed
    assert g.edges == (("a", "b"), ("b", "a"), ("b", "c"), ("c", "a"))
    assert g.neighbors_out("b") == ("a", "c")
    assert g.neighbors_in("a") == ("b", "c")
    assert g.degree("a") == 3


def test_edgelist_unknown_node(edge_file):
    path = edge_file("a b\nb mallory\n")
    with pytest.raises(ValueError, match=r"edges\.txt:2: unknown node id 'mallory'"):
        build("edgelist", ["a", "b"], {"path": path})


@pytest.mark.parametrize(
    "text,match",
    [
        ("a b c\n", "expected `src dst`"),
        ("a\n", "expected `src dst`"),
        ("a b\nb b\n", "self-loop"),
        ("# only comments\n\n", "has no edges"),
        ("a b\n", "disconnected"),  # c is isolated
    ],
)
def test_edgelist_errors(edge_file, text, match):
    path = edge_file(text)
    with pytest.raises(ValueError, match=match):
        build("edgelist", ["a", "b", "c"], {"path": path})


def test_edgelist_disconnected_names_isolated(edge_file):
    path = edge_file("a b\nc d\n")
    with pytest.raises(ValueError, match=r"2 components of sizes \[2, 2\]"):
        build("edgelist", ["a", "b", "c", "d"], {"path": path})
    with pytest.raises(ValueError, match="isolated: e"):
        build("edgelist", ["a", "b", "c", "d", "e"], {"path": edge_file("a b\nb c\nc d\n")})


def test_edgelist_missing_file_and_params(tmp_path):
    with pytest.raises(ValueError, match="cannot read edge list"):
        build("edgelist", ["a", "b"], {"path": str(tmp_path / "nope.txt")})
    with pytest.raises(ValueError, match="needs exactly one of params edges .* and path"):
        build("edgelist", ["a", "b"])
    with pytest.raises(ValueError, match="directed must be true or false"):
        build("edgelist", ["a", "b"], {"path": "x", "directed": "yes"})


# -- build errors ----------------------------------------------------------------------------------


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(ValueError) as exc:
        build("torus", ["a", "b"])
    msg = str(exc.value)
    assert "'torus'" in msg
    assert all(k in msg for k in KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_too_few_nodes(kind):
    with pytest.raises(ValueError, match="at least 2 nodes"):
        build(kind, ["solo"], PARAMS.get(kind))


@pytest.mark.parametrize("n", [3, 6, 12, 100])
def test_hypercube_needs_power_of_two(n):
    with pytest.raises(ValueError, match=f"power-of-two number of nodes, got {n}"):
        build("hypercube", ids(n))


def test_grid_errors():
    with pytest.raises(ValueError, match="prime"):
        build("grid", ids(7))
    with pytest.raises(ValueError, match="rows=5 does not divide"):
        build("grid", ids(12), {"rows": 5})
    with pytest.raises(ValueError, match=r"rows\*cols"):
        build("grid", ids(12), {"rows": 3, "cols": 3})
    with pytest.raises(ValueError, match="positive integer"):
        build("grid", ids(12), {"rows": 0})


def test_param_validation():
    with pytest.raises(ValueError, match="needs param p"):
        build("erdos_renyi", ids(5))
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        build("erdos_renyi", ids(5), {"p": 0})
    with pytest.raises(ValueError, match="must be a number"):
        build("erdos_renyi", ids(5), {"p": "0.5"})
    with pytest.raises(ValueError, match="needs param radius"):
        build("random_geometric", ids(5))
    with pytest.raises(ValueError, match="unknown param.*prob.*allowed: max_attempts, p"):
        build("erdos_renyi", ids(5), {"prob": 0.5})
    with pytest.raises(ValueError, match="seed="):
        build("random_geometric", ids(5), {"radius": 0.5, "seed": 3})
    with pytest.raises(ValueError, match="unknown param"):
        build("ring", ids(5), {"p": 0.5})
    with pytest.raises(ValueError, match="seed must be an integer"):
        build("erdos_renyi", ids(5), {"p": 0.5}, seed=1.5)


def test_node_validation():
    with pytest.raises(ValueError, match="duplicate node id 'a'"):
        build("ring", ["a", "b", "a"])
    with pytest.raises(ValueError, match="non-empty strings"):
        build("ring", ["a", 2])
    with pytest.raises(ValueError, match="non-empty strings"):
        build("ring", ["a", ""])
    with pytest.raises(ValueError, match="sequence of node id strings"):
        build("ring", "abc")


# -- TopologyGraph ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "edgelist"])
def test_json_round_trip(kind):
    g = build(kind, ids(16), PARAMS.get(kind), seed=5)
    text = g.to_json()
    back = TopologyGraph.from_json(text)
    assert back == g
    assert back.to_json() == text
    data = json.loads(text)
    assert data["kind"] == kind and data["nodes"] == list(g.nodes)
    assert all(isinstance(e, list) and len(e) == 2 for e in data["edges"])


def test_json_round_trip_edgelist(edge_file):
    g = build("edgelist", ["a", "b", "c"], {"path": edge_file("a b\nb c\n"), "directed": True})
    back = TopologyGraph.from_json(g.to_json())
    assert back == g and back.directed


def test_from_json_validates():
    good = json.loads(build("ring", ["a", "b", "c"]).to_json())
    with pytest.raises(ValueError, match="not valid JSON"):
        TopologyGraph.from_json("{")
    with pytest.raises(ValueError, match="lacks field"):
        TopologyGraph.from_json(json.dumps({"kind": "ring"}))
    bad = dict(good, edges=good["edges"] + [["a", "zz"]])
    with pytest.raises(ValueError, match="unknown node id 'zz'"):
        TopologyGraph.from_json(json.dumps(bad))
    bad = dict(good, edges=good["edges"] + [["a", "a"]])
    with pytest.raises(ValueError, match="self-loop"):
        TopologyGraph.from_json(json.dumps(bad))
    bad = dict(good, kind="mesh")
    with pytest.raises(ValueError, match="unknown topology kind"):
        TopologyGraph.from_json(json.dumps(bad))
    bad = dict(good, directed=False)  # a directed ring edge list is not symmetric
    with pytest.raises(ValueError, match="undirected graph lists"):
        TopologyGraph.from_json(json.dumps(bad))


def test_constructor_normalises():
    g = TopologyGraph("ring", ["b", "a"], [("a", "b"), ("b", "a"), ("b", "a")], True, {})
    assert g.nodes == ("b", "a")
    assert g.edges == (("b", "a"), ("a", "b"))
    assert isinstance(g.edges[0], tuple)
    assert hash(g) == hash(TopologyGraph("ring", ("b", "a"), (("b", "a"), ("a", "b")), True))


def test_to_networkx():
    g = build("ring", ["x", "y", "z"])
    d = g.to_networkx()
    assert isinstance(d, nx.DiGraph)
    assert list(d.nodes) == ["x", "y", "z"]
    assert set(d.edges) == set(g.edges)
    u = build("hypercube", ids(8)).to_networkx()
    assert not u.is_directed() and u.number_of_edges() == 12
    assert nx.is_isomorphic(u, nx.hypercube_graph(3))


def test_frozen():
    g = build("star", ["c", "a", "b"])
    with pytest.raises(AttributeError):
        g.kind = "ring"  # type: ignore[misc]
    assert g.neighbors_out("c") == ("a", "b")


def test_edgelist_inline_edges_match_the_file(edge_file):
    from_file = build("edgelist", ["a", "b", "c", "d"], {"path": edge_file("a b\nb c\nc d\n")})
    inline = build(
        "edgelist", ["a", "b", "c", "d"], {"edges": [["a", "b"], ["b", "c"], ["c", "d"]]}
    )
    assert inline.edges == from_file.edges
    with pytest.raises(ValueError, match="exactly one of"):
        build("edgelist", ["a", "b"], {"edges": [["a", "b"]], "path": "x"})
    with pytest.raises(ValueError, match="pairs"):
        build("edgelist", ["a", "b"], {"edges": [["a", "b", "c"]]})
    with pytest.raises(ValueError, match="unknown node id"):
        build("edgelist", ["a", "b"], {"edges": [["a", "z"]]})
