"""Graphs and conventions shared by the reproductions of Cyffers, Bellet & Upadhyay (ICML 2024).

`synthetic_graphs(quick)`: the Fig. 1 graphs as the authors' code builds them: the
hypercube Q_11 ("exponential" in the code), Erdős–Rényi gnp(2048, 1.2 ln n/n) resampled until
connected, the 45×45 grid (2025 nodes, source a corner), a random geometric graph (2048 points,
radius 0.07), and the complete graph. Nodes are 0..n−1; node 0 is the source.
`code_horizons`: the code's T_walk and T_gossip from the one-sided gap 1 − λ_2.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np


def _relabel(g: nx.Graph) -> nx.Graph:
    return nx.convert_node_labels_to_integers(g, ordering="sorted")


def er_graph(n: int, c: float = 1.2, seed: int = 0) -> nx.Graph:
    """gnp(n, c ln n/n), the first connected draw from `seed` on (c = 1.2, as the authors' code)."""
    for s in range(seed, seed + 1000):
        g = nx.gnp_random_graph(n, c * math.log(n) / n, seed=s)
        if nx.is_connected(g):
            return g
    raise RuntimeError("no connected Erdős–Rényi draw in 1000 tries")


def geometric_graph(n: int, radius: float, seed: int = 0) -> nx.Graph:
    """n uniform points in [0, 1]² (numpy default_rng(seed)), edges below `radius`; the first
    connected draw from `seed` on (the authors' code does not check)."""
    for s in range(seed, seed + 100):
        pts = np.random.default_rng(s).random((n, 2))
        g = nx.random_geometric_graph(n, radius, pos={i: tuple(p) for i, p in enumerate(pts)})
        if nx.is_connected(g):
            return g
    raise RuntimeError("no connected geometric draw in 100 tries")


def synthetic_graphs(quick: bool = False) -> dict[str, nx.Graph]:
    if quick:  # the same families at n ≈ 128
        return {
            "complete": nx.complete_graph(128),
            "exponential": _relabel(nx.hypercube_graph(7)),
            "erdos-renyi": er_graph(128),
            "geometric": geometric_graph(128, 0.2),
            "grid": _relabel(nx.grid_2d_graph(11, 11)),
        }
    return {
        "complete": nx.complete_graph(2048),
        "exponential": _relabel(nx.hypercube_graph(11)),
        "erdos-renyi": er_graph(2048),
        "geometric": geometric_graph(2048, 0.07),
        "grid": _relabel(nx.grid_2d_graph(45, 45)),
    }


def code_horizons(lam_sorted: np.ndarray, n: int, sigma: float) -> dict[str, Any]:
    """The code's conventions: gap = 1 − λ_2 (one-sided), T_walk = int(20·⌈ln n/gap⌉·
    (0.25 + σ²)/σ²), T_gossip = ⌈ln(n·max(0.25, σ²)/σ²)/√gap⌉."""
    gap = 1.0 - float(lam_sorted[-2])
    if not 0 < gap <= 1 + 1e-9:
        raise ValueError(f"spectral gap {gap} outside (0, 1]: the graph is not connected")
    gap = min(gap, 1.0)
    t_walk = int(20 * math.ceil(math.log(n) / gap) * (0.25 + sigma**2) / sigma**2)
    t_gossip = math.ceil(math.log(n * max(0.25, sigma**2) / sigma**2) / math.sqrt(gap))
    return {"gap": gap, "T_walk": t_walk, "T_gossip": t_gossip}
