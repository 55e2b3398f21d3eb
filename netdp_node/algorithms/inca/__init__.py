"""IncA, incremental correlated noise for decentralized mean estimation (2025)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netdp_node.algorithms.inca import accountant
from netdp_node.algorithms.inca import engine as inca
from netdp_node.algorithms.inca.params import IncaParams
from netdp_node.algorithms.record import Algorithm
from netdp_node.privacy.accountant import ACCOUNTANTS

_INCA = frozenset({"T", "k", "dim", "fanout", "calibration_runs"})


def _inca_payload(p: Mapping[str, Any], n: int) -> int:
    dim, k, T = int(p["dim"]), int(p["k"]), int(p["T"])
    return max(inca.record_length(dim, n, k, T), dim + 1 + inca.history_length(n, k, T))


RECORDS = (
    Algorithm(
        "inca",
        inca.Inca,
        # the typed parameters' wire form (`IncaParams`); with a `params` field on the record this
        # becomes `params=IncaParams` and the bootstrap calls IncaParams.prepare(raw, n).to_wire()
        lambda raw, n: IncaParams.prepare(raw, n).to_wire(),
        "complete",
        integers=_INCA,
        payload=_inca_payload,
        payload_params="dim, T or k (or the participants)",
    ),
)

# IncA's accountant lives in this folder (`accountant.py`); until the record carries its accountant,
# it is registered where the node looks accountants up by algorithm name
ACCOUNTANTS["inca"] = accountant.ACCOUNTANT
