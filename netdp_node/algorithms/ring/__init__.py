"""The ring algorithms (ring-sum, ring-sum-r, ring-histogram): Cyffers & Bellet, AISTATS 2022."""

from __future__ import annotations

from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.ring import accountant
from netdp_node.algorithms.ring import engine as ring

_RING = frozenset({"rounds", "dim"})
_RING_HISTOGRAM = frozenset({"rounds", "bins"})

RECORDS = (
    Algorithm(
        "ring-sum",
        ring.RingSum,
        ring.prepare_params,
        "ring",
        integers=_RING,
        accountant=accountant.RING_SUM,
    ),
    Algorithm(
        "ring-sum-r",
        ring.RingSumR,
        ring.prepare_params,
        "ring",
        integers=_RING,
        accountant=accountant.RING_SUM_R,
    ),
    Algorithm(
        "ring-histogram",
        ring.RingHistogram,
        ring.prepare_histogram_params,
        "ring",
        integers=_RING_HISTOGRAM,
        payload_params="bins",
        accountant=accountant.RING_HISTOGRAM,
    ),
)
