"""The registry of algorithms: one record per algorithm (`record.Algorithm`), built by its family's
folder. Adding an algorithm touches its folder and the line below that lists the families."""

from __future__ import annotations

from netdp_node.algorithms import inca, muffliato, ring, walk
from netdp_node.algorithms.record import ENVELOPE_ALLOWANCE, MAX_PARAM_DEPTH, Algorithm

__all__ = [
    "ALGORITHMS",
    "DEFAULT",
    "ENVELOPE_ALLOWANCE",
    "MAX_PARAM_DEPTH",
    "Algorithm",
    "get_algorithm",
]

#: The algorithm `netdp demo` and `netdp job submit` run when --algorithm is not given.
DEFAULT = "ring-sum"

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for family in (ring, walk, inca, muffliato) for a in family.RECORDS
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}") from None
