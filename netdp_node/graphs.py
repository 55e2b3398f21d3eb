"""Graphs, the one place the engines, the accountants and the experiments take them from: graphs on
nodes 0..n−1 and their Metropolis gossip weights (edges as (i, j) index pairs, i < j), and a job's
complete graph over participant ids, implied rather than listed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fractions import Fraction


def ring_edges(n: int) -> list[tuple[int, int]]:
    """The cycle 0 − 1 − … − (n−1) − 0, sorted (one edge for n = 2, none for n = 1)."""
    return sorted(
        {(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n) if i != (i + 1) % n}
    )


def complete_edges(n: int) -> list[tuple[int, int]]:
    """Every pair i < j, in lexicographic order."""
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def hypercube_edges(n: int) -> list[tuple[int, int]]:
    """The hypercube on n = 2^m nodes: i ~ j iff their labels differ in one bit, ordered by i and
    then by the bit flipped.

    Raises:
        ValueError: n is not a power of two.
    """
    m = n.bit_length() - 1
    if n < 1 or n != 1 << m:
        raise ValueError(f"a hypercube needs a power-of-two number of nodes, got {n}")
    return [(i, i ^ (1 << b)) for i in range(n) for b in range(m) if i < i ^ (1 << b)]


def metropolis_fractions(
    n: int,
    edges: Iterable[tuple[int, int]],
    degree_edges: Iterable[tuple[int, int]] | None = None,
) -> dict[tuple[int, int], Fraction]:
    """Exact Metropolis weights `W_vw = 1/(1 + max(d_v, d_w))` on `edges` (both (v, w) and
    (w, v)), and `W_vv = 1 − Σ_w W_vw` on the diagonal, as {(i, j): Fraction}.

    The degrees d are those of `degree_edges` (default: `edges` itself); Muffliato's engine weighs
    the realised edges of a round by the degrees of the planned (public) graph. Each edge must be
    listed once (in either orientation)."""
    from fractions import Fraction  # lazy: start-up cost (fractions, decimal: a node needs neither)

    edge_list = list(edges)
    d = [0] * n
    for a, b in edge_list if degree_edges is None else degree_edges:
        d[a] += 1
        d[b] += 1
    weights: dict[tuple[int, int], Fraction] = {}
    diag = [Fraction(1)] * n
    for a, b in edge_list:
        w = Fraction(1, 1 + max(d[a], d[b]))
        weights[(a, b)] = w
        weights[(b, a)] = w
        diag[a] -= w
        diag[b] -= w
    for v in range(n):
        weights[(v, v)] = diag[v]
    return weights


class CompleteEdges(Sequence[tuple[str, str]]):
    """Every ordered pair of distinct participants, without storing them: the edges of a job on
    the complete graph, which the bootstrap does not list (n(n-1) of them: 1,000 nodes would make
    a spec of tens of MB, held by every node and written to every ledger)."""

    def __init__(self, participants: Sequence[str]) -> None:
        self.ids = tuple(participants)

    def __len__(self) -> int:
        return len(self.ids) * (len(self.ids) - 1)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((a, b) for a in self.ids for b in self.ids if a != b)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self.ids)
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        a, r = divmod(i, n - 1)
        return self.ids[a], self.ids[r + (r >= a)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompleteEdges) and other.ids == self.ids

    def __repr__(self) -> str:
        return f"CompleteEdges({len(self.ids)} participants)"


#: The topology kind whose edges are implied, not listed (`CompleteEdges`).
COMPLETE = "complete"


def spec_edges(spec: Mapping[str, Any]) -> Sequence[tuple[str, str]]:
    """The edges of a job spec as stored in a ledger (`runtime.spec_dict`): listed, or, for the
    complete graph (spec "topology": "complete", no edges listed), every ordered pair."""
    if spec.get("topology") == COMPLETE and not spec.get("edges"):
        return CompleteEdges(spec["participants"])
    return [(str(e[0]), str(e[1])) for e in spec.get("edges", [])]
