"""The ring algorithms (ring-sum, ring-sum-r, ring-histogram): Cyffers & Bellet, AISTATS 2022."""

from __future__ import annotations

from netdp_node.algorithms.record import Algorithm
from netdp_node.algorithms.ring import engine as ring
from netdp_node.algorithms.ring.hooks import RingHistogramHooks, RingSumHooks

_RING = frozenset({"rounds", "dim"})
_RING_HISTOGRAM = frozenset({"rounds", "bins"})

RECORDS = (
    Algorithm(
        "ring-sum",
        ring.RingSum,
        ring.prepare_params,
        "ring",
        integers=_RING,
        hooks=RingSumHooks(demo="private sum by a token passed around the ring --rounds times"),
    ),
    Algorithm(
        "ring-sum-r",
        ring.RingSumR,
        ring.prepare_params,
        "ring",
        integers=_RING,
        hooks=RingSumHooks(),
    ),
    Algorithm(
        "ring-histogram",
        ring.RingHistogram,
        ring.prepare_histogram_params,
        "ring",
        integers=_RING_HISTOGRAM,
        payload_params="bins",
        hooks=RingHistogramHooks(),
    ),
)
