"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

import functools

from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.record import Algorithm

_MUFFLIATO = frozenset({"T", "dim", "steps", "suspend_rounds"})
#: the joint views the family's accountants computed, bounded as one cache
_JOINT_VIEWS = ma.JointViewCache()

RECORDS = tuple(
    Algorithm(
        name,
        engine,
        functools.partial(muffliato.prepare_params, name),
        "ring",
        True,
        integers=_MUFFLIATO,
        accountant=ma.accountant(theorem, _JOINT_VIEWS),
    )
    for name, engine, theorem in (
        ("muffliato", muffliato.MuffliatoSync, ma.SYNC_THEOREM),
        ("muffliato-random", muffliato.MuffliatoRandom, ma.RANDOM_THEOREM),
        ("muffliato-gd", muffliato.MuffliatoGd, ma.GD_THEOREM),
    )
)
