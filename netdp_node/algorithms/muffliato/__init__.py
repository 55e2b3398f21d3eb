"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

import functools

from netdp_node.algorithms.hooks import Hooks
from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.muffliato.hooks import GossipHooks, MuffliatoGdHooks, MuffliatoSyncHooks
from netdp_node.algorithms.record import Algorithm

_MUFFLIATO = frozenset({"T", "dim", "steps", "suspend_rounds"})

_RANDOM: Hooks = GossipHooks(
    name="muffliato-random",
    demo="private gossip averaging by random pairwise exchanges (Poisson clocks)",
    poisson=True,
)

RECORDS = tuple(
    Algorithm(
        name,
        engine,
        functools.partial(muffliato.prepare_params, name),
        "ring",
        True,
        integers=_MUFFLIATO,
        hooks=hooks,
    )
    for name, engine, hooks in (
        ("muffliato", muffliato.MuffliatoSync, MuffliatoSyncHooks()),
        ("muffliato-random", muffliato.MuffliatoRandom, _RANDOM),
        ("muffliato-gd", muffliato.MuffliatoGd, MuffliatoGdHooks()),
    )
)
