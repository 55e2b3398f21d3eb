"""Sans-IO protocol engines (see base.py for the interface) and the registry of algorithms."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netdp_node.protocols import inca, muffliato, ring, walk
from netdp_node.protocols.base import Engine


@dataclass(frozen=True)
class Algorithm:
    name: str
    engine: type[Engine]
    prepare: Callable[[dict[str, Any], int], dict[str, Any]]  # (params, n) -> validated params
    topology: str  # default topology kind
    # Each node's output stays on the node (its ledger), never reported to the bootstrap: for
    # gossip every node ends with its own estimate x_v^T, and showing them all to every participant
    # would give each observer P(x + η), i.e. x + η itself when P is invertible (muffliato.md §7.1
    # item 7: x^T is not sent).
    private_output: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    "ring-sum": Algorithm("ring-sum", ring.RingSum, ring.prepare_params, "ring"),
    "ring-sum-r": Algorithm("ring-sum-r", ring.RingSumR, ring.prepare_params, "ring"),
    "ring-histogram": Algorithm("ring-histogram", ring.RingHistogram,
                                ring.prepare_histogram_params, "ring"),
    "walk-sum": Algorithm("walk-sum", walk.WalkSum,
                          functools.partial(walk.prepare_params, "walk-sum"), "complete"),
    "walk-histogram": Algorithm("walk-histogram", walk.WalkHistogram,
                                functools.partial(walk.prepare_params, "walk-histogram"),
                                "complete"),
    "walk-sgd": Algorithm("walk-sgd", walk.WalkSgd,
                          functools.partial(walk.prepare_params, "walk-sgd"), "complete"),
    "rw-sgd": Algorithm("rw-sgd", walk.RandomWalkSgd, walk.prepare_rw_sgd, "exponential"),
    "inca": Algorithm("inca", inca.Inca, inca.prepare_params, "complete"),
    "muffliato": Algorithm("muffliato", muffliato.MuffliatoSync,
                           functools.partial(muffliato.prepare_params, "muffliato"), "ring", True),
    "muffliato-random": Algorithm("muffliato-random", muffliato.MuffliatoRandom,
                                  functools.partial(muffliato.prepare_params, "muffliato-random"),
                                  "ring", True),
    "muffliato-gd": Algorithm("muffliato-gd", muffliato.MuffliatoGd,
                              functools.partial(muffliato.prepare_params, "muffliato-gd"), "ring",
                              True),
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}") from None
