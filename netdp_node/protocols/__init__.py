"""Sans-IO protocol engines (see base.py for the interface) and the registry of algorithms."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netdp_node.protocols import ring
from netdp_node.protocols.base import Engine


@dataclass(frozen=True)
class Algorithm:
    name: str
    engine: type[Engine]
    prepare: Callable[[dict[str, Any], int], dict[str, Any]]  # (params, n) -> validated params
    topology: str  # default topology kind


ALGORITHMS: dict[str, Algorithm] = {
    "ring-sum": Algorithm("ring-sum", ring.RingSum, ring.prepare_params, "ring"),
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}") from None
