"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.muffliato.params import (
    MuffliatoAverageParams,
    MuffliatoGdParams,
    MuffliatoRandomParams,
)
from netdp_node.algorithms.record import Algorithm

RECORDS = (
    Algorithm("muffliato", muffliato.MuffliatoSync, MuffliatoAverageParams, "ring", True),
    Algorithm("muffliato-random", muffliato.MuffliatoRandom, MuffliatoRandomParams, "ring", True),
    Algorithm("muffliato-gd", muffliato.MuffliatoGd, MuffliatoGdParams, "ring", True),
)
