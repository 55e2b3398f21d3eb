"""IncA, incremental correlated noise for decentralized mean estimation (2025)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netdp_node.algorithms.accounting import Accountant
from netdp_node.algorithms.inca import engine as inca
from netdp_node.algorithms.inca.hooks import IncaHooks
from netdp_node.algorithms.record import Algorithm
from netdp_node.privacy.accountant import inca_baselines, inca_losses, inca_prospective

_INCA = frozenset({"T", "k", "dim", "fanout", "calibration_runs"})


def _inca_payload(p: Mapping[str, Any], n: int) -> int:
    dim, k, T = int(p["dim"]), int(p["k"]), int(p["T"])
    return max(inca.record_length(dim, n, k, T), dim + 1 + inca.history_length(n, k, T))


#: IncA's accountant (its functions move to algorithms/inca/accountant.py)
INCA_ACCOUNTANT = Accountant(
    inca_losses,
    inca_prospective,
    "IncA (Sabater et al. 2025): exact audit of the execution, Theorem 4.1 "
    "(and Eq. 10, App. A.2), capped by the local-DP level of η",
    inca_baselines,
)

RECORDS = (
    Algorithm(
        "inca",
        inca.Inca,
        inca.prepare_params,
        "complete",
        integers=_INCA,
        payload=_inca_payload,
        payload_params="dim, T or k (or the participants)",
        hooks=IncaHooks(),
        accountant=INCA_ACCOUNTANT,
    ),
)
