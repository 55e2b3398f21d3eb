"""Muffliato's public graphs, the merge of the nodes' exchange orders, and the labels of the figures
the Muffliato accountant shows beside its guarantee: pure functions of public parameters and of the
nodes' reports. The accountant that rebuilds the realised schedule from a node's ledger is
`netdp_node/algorithms/muffliato/accountant.py`; the joint-view computations are
`netdp_node.privacy.pndp_gossip`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from netdp_node.graphs import complete_edges, hypercube_edges, ring_edges

#: the labels of the continuous-noise figures shown beside the guarantee (module docstring)
CONTINUOUS = "continuous-noise analysis; not proven for discrete noise"
JOINT_VIEW = f"joint view, realised schedule ({CONTINUOUS}; not a guarantee)"
PAPER = f"paper bound ({CONTINUOUS}; not a guarantee)"
MEAN_LOSS = f"mean loss eq. (7) ({CONTINUOUS}; a summary, not a guarantee)"
GUARANTEE = (
    "local-DP level of the node's discrete-Gaussian release (data processing; CKS "
    "Theorem 4 and Proposition 12): the guarantee proven for the noise sampled"
)


#: the public graphs a Muffliato job may gossip on (its `graph` parameter)
GRAPHS = ("ring", "complete", "hypercube", "topology", "er")


def public_graph(
    params: Mapping[str, Any],
    n: int,
    public_seed: int,
    call: int,
    topology: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
    """The undirected edges (i < j, participant indices) of gossip call `call`: a pure function of
    public parameters, so every node and every accountant compute the same graph."""
    kind = str(params.get("graph", "ring"))
    if kind == "ring":
        return ring_edges(n)
    if kind == "complete":
        return complete_edges(n)
    if kind == "hypercube":
        return hypercube_edges(n)
    if kind == "topology":
        return sorted({(min(a, b), max(a, b)) for a, b in topology if a != b})
    if kind == "er":
        p = float(params["p"])
        rng = np.random.default_rng([int(public_seed), int(call), 0x4D554646])
        iu, ju = np.triu_indices(n, k=1)
        keep = rng.random(iu.size) < p
        return [(int(a), int(b)) for a, b in zip(iu[keep], ju[keep])]
    raise ValueError(f"unknown graph {kind!r}; known: {list(GRAPHS)}")


def merge_activations(
    reports: Mapping[str, Sequence[Sequence[Any]]],
) -> list[tuple[str, int, str, str, bool]]:
    """One global sequence of pairwise exchanges consistent with every node's local order
    (a topological order of the union of the nodes' chains; any such order gives the same
    views, because exchanges on disjoint pairs commute). Items (initiator, id, a, b, committed).
    Raises ValueError on a cycle or on two ends that disagree on an exchange's outcome."""
    status: dict[tuple[str, int], bool] = {}
    ends: dict[tuple[str, int], tuple[str, str]] = {}
    succ: dict[tuple[str, int], list[tuple[str, int]]] = {}
    indeg: dict[tuple[str, int], int] = {}
    for node, acts in reports.items():
        prev = None
        for init, k, peer, committed in acts:
            key = (str(init), int(k))
            other = str(peer) if str(init) == node else node
            pair = (str(init), other)
            if key in status and status[key] != bool(committed):
                raise ValueError(f"the two ends of exchange {key} disagree on its outcome")
            status[key] = status.get(key, False) or bool(committed)
            ends[key] = pair
            indeg.setdefault(key, 0)
            if prev is not None and prev != key:
                succ.setdefault(prev, []).append(key)
                indeg[key] += 1
            prev = key
    ready = sorted(k for k, d in indeg.items() if d == 0)
    order = []
    while ready:
        key = ready.pop(0)
        order.append(key)
        for nxt in succ.get(key, []):
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
    if len(order) != len(indeg):
        raise ValueError("the nodes' exchange orders are inconsistent (a cycle)")
    return [(k[0], k[1], ends[k][0], ends[k][1], status[k]) for k in order]
