"""The registry of algorithms: one record per algorithm (`record.Algorithm`), built by its family's
folder. Adding an algorithm touches its folder and the line below that lists the families."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netdp_node.algorithms import inca, muffliato, ring, walk
from netdp_node.algorithms.record import ENVELOPE_ALLOWANCE, MAX_PARAM_DEPTH, Algorithm
from netdp_node.privacy.threat import ThreatModel

__all__ = [
    "ALGORITHMS",
    "DEFAULT",
    "ENVELOPE_ALLOWANCE",
    "MAX_PARAM_DEPTH",
    "Algorithm",
    "get_algorithm",
    "threat_model",
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


def threat_model(spec: Mapping[str, Any], me: str | None = None) -> ThreatModel:
    """The threat model of a job from its public spec ({"algorithm", "participants", "params"}),
    optionally for one reporting node `me` (more specific where the algorithm allows it): its
    record's `threat`. ValueError for an algorithm the registry does not know."""
    a = ALGORITHMS.get(spec["algorithm"])
    if a is None:
        raise ValueError(
            f"no threat model for algorithm {spec['algorithm']!r}: unknown algorithm; "
            f"available: {sorted(ALGORITHMS)}"
        )
    return a.threat(spec, me)
