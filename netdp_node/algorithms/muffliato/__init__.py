"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.muffliato.hooks import GossipHooks, MuffliatoGdHooks, MuffliatoSyncHooks
from netdp_node.algorithms.muffliato.params import (
    MuffliatoAverageParams,
    MuffliatoGdParams,
    MuffliatoRandomParams,
)
from netdp_node.algorithms.record import Algorithm

_RANDOM = GossipHooks(
    name="muffliato-random",
    demo="private gossip averaging by random pairwise exchanges (Poisson clocks)",
    poisson=True,
)

RECORDS = (
    Algorithm(
        "muffliato",
        muffliato.MuffliatoSync,
        MuffliatoAverageParams,
        "ring",
        True,
        hooks=MuffliatoSyncHooks(),
    ),
    Algorithm(
        "muffliato-random",
        muffliato.MuffliatoRandom,
        MuffliatoRandomParams,
        "ring",
        True,
        hooks=_RANDOM,
    ),
    Algorithm(
        "muffliato-gd",
        muffliato.MuffliatoGd,
        MuffliatoGdParams,
        "ring",
        True,
        hooks=MuffliatoGdHooks(),
    ),
)
