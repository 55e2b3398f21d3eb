"""The registry of algorithms: one record per algorithm (`record.Algorithm`), built by its family's
folder. Adding an algorithm touches its folder, its line in `catalog` and the line below that lists
the families.

The registry is built at its first use (`ALGORITHMS`, `get_algorithm`, `threat_model`), not when
the package is imported: a node imports the modules of this package that its runtime needs
(`accounting`, `budget`) at start-up and every family's engines, parameters and hooks only when it
meets its first job; `netdp --help` reads the names in `catalog`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from netdp_node.algorithms.record import ENVELOPE_ALLOWANCE, MAX_PARAM_DEPTH, Algorithm
    from netdp_node.privacy.threat import ThreatModel

    #: name -> record, every algorithm (built at the first read)
    ALGORITHMS: dict[str, Algorithm]

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

#: what `from netdp_node.algorithms import NAME` reads from the record module
_FROM_RECORD = ("ENVELOPE_ALLOWANCE", "MAX_PARAM_DEPTH", "Algorithm")


def _registry() -> dict[str, Algorithm]:
    """Every family's records, imported and checked against `catalog` at the first call."""
    built = globals().get("ALGORITHMS")
    if built is None:
        # lazy: start-up cost
        from netdp_node.algorithms import catalog, inca, muffliato, ring, walk

        records = {a.name: a for family in (ring, walk, inca, muffliato) for a in family.RECORDS}
        catalog.check_registry((a.name, a.hooks.demo) for a in records.values())
        # one dict for every caller, even two that raced here
        built = globals().setdefault("ALGORITHMS", records)
    return built


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":
        return _registry()
    if name in _FROM_RECORD:
        from netdp_node.algorithms import record  # lazy: start-up cost

        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_algorithm(name: str) -> Algorithm:
    algorithms = _registry()
    try:
        return algorithms[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(algorithms)}") from None


def threat_model(spec: Mapping[str, Any], me: str | None = None) -> ThreatModel:
    """The threat model of a job from its public spec ({"algorithm", "participants", "params"}),
    optionally for one reporting node `me` (more specific where the algorithm allows it): its
    record's `threat`. ValueError for an algorithm the registry does not know."""
    algorithms = _registry()
    a = algorithms.get(spec["algorithm"])
    if a is None:
        raise ValueError(
            f"no threat model for algorithm {spec['algorithm']!r}: unknown algorithm; "
            f"available: {sorted(algorithms)}"
        )
    return a.threat(spec, me)
