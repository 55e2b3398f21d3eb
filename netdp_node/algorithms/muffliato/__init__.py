"""Muffliato gossip averaging and gradient descent: Cyffers, Even, Bellet & Massoulié, NeurIPS 2022."""
