"""Job graphs shared by every layer: the complete graph's edges, implied rather than listed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class CompleteEdges(Sequence[tuple[str, str]]):
    """Every ordered pair of distinct participants, without storing them: the edges of a job on
    the complete graph, which the bootstrap does not list (n(n-1) of them: 1,000 nodes would make
    a spec of tens of MB, held by every node and written to every ledger)."""

    def __init__(self, participants: Sequence[str]) -> None:
        self.ids = tuple(participants)

    def __len__(self) -> int:
        return len(self.ids) * (len(self.ids) - 1)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return ((a, b) for a in self.ids for b in self.ids if a != b)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
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
    return [tuple(e) for e in spec.get("edges", [])]  # type: ignore[misc]
