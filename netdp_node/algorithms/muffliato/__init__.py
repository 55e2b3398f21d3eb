"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

import functools

from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.record import Algorithm

_MUFFLIATO = frozenset({"T", "dim", "steps", "suspend_rounds"})

RECORDS = tuple(
    Algorithm(
        name,
        engine,
        functools.partial(muffliato.prepare_params, name),
        "ring",
        True,
        integers=_MUFFLIATO,
    )
    for name, engine in (
        ("muffliato", muffliato.MuffliatoSync),
        ("muffliato-random", muffliato.MuffliatoRandom),
        ("muffliato-gd", muffliato.MuffliatoGd),
    )
)
