"""IncA, incremental correlated noise for decentralized mean estimation (2025)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netdp_node.algorithms.inca import accountant
from netdp_node.algorithms.inca import engine as inca
from netdp_node.algorithms.inca.hooks import IncaHooks
from netdp_node.algorithms.inca.params import IncaParams
from netdp_node.algorithms.record import Algorithm
from netdp_node.privacy import threat


def _inca_payload(p: Mapping[str, Any], n: int) -> int:
    dim, k, T = int(p["dim"]), int(p["k"]), int(p["T"])
    # the largest MIX or batch of one record (every iteration offline, every message uncounted:
    # a batch of more is split to fit) or digest; a history carries only its exceptions, so the
    # usual message is far smaller
    return max(
        inca.batch_length(dim, n, k, T),
        dim + 1 + inca.history_length(n, k, T),
        inca.digest_length(n),
    )


RECORDS = (
    Algorithm(
        "inca",
        inca.Inca,
        IncaParams,
        "complete",
        payload=_inca_payload,
        payload_params="dim, T or k (or the participants)",
        hooks=IncaHooks(),
        accountant=accountant.ACCOUNTANT,
        threat=threat.inca,
    ),
)
