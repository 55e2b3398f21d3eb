"""Token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet, AISTATS 2022) and random-walk
SGD (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024)."""

from __future__ import annotations

from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.walk import accountant
from netdp_node.algorithms.walk import engine as walk
from netdp_node.algorithms.walk.hooks import (
    RwSgdHooks,
    WalkHistogramHooks,
    WalkSgdHooks,
    WalkSumHooks,
)
from netdp_node.algorithms.walk.params import (
    RwSgdParams,
    WalkHistogramParams,
    WalkSgdParams,
    WalkSumParams,
)
from netdp_node.privacy import threat

RECORDS = (
    Algorithm(
        "walk-sum",
        walk.WalkSum,
        WalkSumParams,
        "complete",
        hooks=WalkSumHooks(),
        accountant=accountant.WALK_SUM,
        threat=threat.walk,
    ),
    Algorithm(
        "walk-histogram",
        walk.WalkHistogram,
        WalkHistogramParams,
        "complete",
        payload=lambda p, n: int(p["bins"]),
        payload_params="bins",
        hooks=WalkHistogramHooks(),
        accountant=accountant.WALK_HISTOGRAM,
        threat=threat.walk,
    ),
    Algorithm(
        "walk-sgd",
        walk.WalkSgd,
        WalkSgdParams,
        "complete",
        hooks=WalkSgdHooks(),
        accountant=accountant.WALK_SGD,
        threat=threat.walk_sgd,
    ),
    Algorithm(
        "rw-sgd",
        walk.RandomWalkSgd,
        RwSgdParams,
        "exponential",
        hooks=RwSgdHooks(),
        accountant=accountant.RW_SGD,
        threat=threat.rw_sgd,
    ),
)
