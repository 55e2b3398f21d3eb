"""The ring algorithms (ring-sum, ring-sum-r, ring-histogram): Cyffers & Bellet, AISTATS 2022."""

from __future__ import annotations

from netdp_node.algorithms.catalog import DEMOS
from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.ring import accountant
from netdp_node.algorithms.ring import engine as ring
from netdp_node.algorithms.ring.hooks import RingHistogramHooks, RingSumHooks, RingSumRHooks
from netdp_node.algorithms.ring.params import RingHistogramParams, RingSumParams, RingSumRParams
from netdp_node.privacy import threat

RECORDS = (
    Algorithm(
        "ring-sum",
        ring.RingSum,
        RingSumParams,
        "ring",
        hooks=RingSumHooks(demo=DEMOS["ring-sum"]),
        accountant=accountant.RING_SUM,
        threat=threat.ring_sum,
    ),
    Algorithm(
        "ring-sum-r",
        ring.RingSumR,
        RingSumRParams,
        "ring",
        hooks=RingSumRHooks(),
        accountant=accountant.RING_SUM_R,
        threat=threat.ring_sum_r,
    ),
    Algorithm(
        "ring-histogram",
        ring.RingHistogram,
        RingHistogramParams,
        "ring",
        payload_params="bins",
        hooks=RingHistogramHooks(),
        accountant=accountant.RING_HISTOGRAM,
        threat=threat.ring_histogram,
    ),
)
