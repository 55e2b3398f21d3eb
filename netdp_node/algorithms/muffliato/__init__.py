"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

from netdp_node.algorithms.catalog import DEMOS
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.muffliato.hooks import GossipHooks, MuffliatoGdHooks, MuffliatoSyncHooks
from netdp_node.algorithms.muffliato.params import (
    MuffliatoAverageParams,
    MuffliatoGdParams,
    MuffliatoRandomParams,
)
from netdp_node.algorithms.record import Algorithm
from netdp_node.privacy import threat

#: the joint views the family's accountants computed, bounded as one cache
_JOINT_VIEWS = ma.JointViewCache()

_RANDOM = GossipHooks(
    name="muffliato-random",
    demo=DEMOS["muffliato-random"],
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
        accountant=ma.accountant(ma.SYNC_THEOREM, _JOINT_VIEWS),
        threat=threat.muffliato,
    ),
    Algorithm(
        "muffliato-random",
        muffliato.MuffliatoRandom,
        MuffliatoRandomParams,
        "ring",
        True,
        hooks=_RANDOM,
        accountant=ma.accountant(ma.RANDOM_THEOREM, _JOINT_VIEWS),
        threat=threat.muffliato,
    ),
    Algorithm(
        "muffliato-gd",
        muffliato.MuffliatoGd,
        MuffliatoGdParams,
        "ring",
        True,
        hooks=MuffliatoGdHooks(),
        accountant=ma.accountant(ma.GD_THEOREM, _JOINT_VIEWS),
        threat=threat.muffliato_gd,
    ),
)
