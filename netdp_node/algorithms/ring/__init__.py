"""The ring algorithms (ring-sum, ring-sum-r, ring-histogram): Cyffers & Bellet, AISTATS 2022."""

from __future__ import annotations

from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.ring import accountant
from netdp_node.algorithms.ring import engine as ring
from netdp_node.algorithms.ring.hooks import RingHistogramHooks, RingSumHooks
from netdp_node.algorithms.ring.params import RingHistogramParams, RingSumParams, RingSumRParams

RECORDS = (
    Algorithm(
        "ring-sum",
        ring.RingSum,
        RingSumParams,
        "ring",
        hooks=RingSumHooks(demo="private sum by a token passed around the ring --rounds times"),
        accountant=accountant.RING_SUM,
    ),
    Algorithm(
        "ring-sum-r",
        ring.RingSumR,
        RingSumRParams,
        "ring",
        hooks=RingSumHooks(),
        accountant=accountant.RING_SUM_R,
    ),
    Algorithm(
        "ring-histogram",
        ring.RingHistogram,
        RingHistogramParams,
        "ring",
        payload_params="bins",
        hooks=RingHistogramHooks(),
        accountant=accountant.RING_HISTOGRAM,
    ),
)
