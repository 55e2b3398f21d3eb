"""Token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet, AISTATS 2022) and random-walk
SGD (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024)."""

from __future__ import annotations

import functools

from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.walk import accountant
from netdp_node.algorithms.walk import engine as walk

_WALK = frozenset({"T", "cap", "edge_cap", "colluders", "dim", "bins"})
_RW_SGD = frozenset({"T", "cap", "dim", "mc_walks", "burn_in"})

RECORDS = (
    Algorithm(
        "walk-sum",
        walk.WalkSum,
        functools.partial(walk.prepare_params, "walk-sum"),
        "complete",
        integers=_WALK,
        accountant=accountant.WALK_SUM,
    ),
    Algorithm(
        "walk-histogram",
        walk.WalkHistogram,
        functools.partial(walk.prepare_params, "walk-histogram"),
        "complete",
        integers=_WALK,
        payload=lambda p, n: int(p["bins"]),
        payload_params="bins",
        accountant=accountant.WALK_HISTOGRAM,
    ),
    Algorithm(
        "walk-sgd",
        walk.WalkSgd,
        functools.partial(walk.prepare_params, "walk-sgd"),
        "complete",
        integers=_WALK,
        accountant=accountant.WALK_SGD,
    ),
    Algorithm(
        "rw-sgd",
        walk.RandomWalkSgd,
        walk.prepare_rw_sgd,
        "exponential",
        integers=_RW_SGD,
        accountant=accountant.RW_SGD,
    ),
)
