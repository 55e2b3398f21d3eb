"""What happened to each party of a finished IncA job, read from the public execution its result
states (never from the faults a test or demo planned: a planned departure may come after T, a
planned offline window may miss no iteration). Every party is in exactly one state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from netdp_node.privacy.inca_audit import IncaExecution


@dataclass(frozen=True)
class NodeStates:
    """A partition of the participants (each list sorted as in the job's participant order).

    stayed: online in every iteration 1..T, in the result; rejoined: in the result (online at T)
    after missing iterations (`missed`: how many of 1..T−1, ≥ 1); gone: not in the result (offline
    at T: left for good, or its final record never reached this node)."""

    stayed: list[str] = field(default_factory=list)
    rejoined: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    missed: dict[str, int] = field(default_factory=dict)

    def state_of(self, node: str) -> str:
        for name in ("stayed", "rejoined", "gone"):
            if node in getattr(self, name):
                return name
        raise KeyError(node)


def node_states(ex: IncaExecution, ids: Sequence[str]) -> NodeStates:
    """The state of every participant in the execution `ex` (`inca_audit.execution_from_info` of
    a node's result): in the result iff its final value is (`ex.final`)."""
    if len(ids) != ex.n:
        raise ValueError(f"{len(ids)} participants for an execution of {ex.n} parties")
    online = np.asarray(ex.online, dtype=bool)
    out = NodeStates()
    for i, nid in enumerate(ids):
        if not bool(ex.final[i]):
            out.gone.append(nid)
            continue
        missed = int((~online[1 : ex.T, i]).sum())
        if missed:
            out.rejoined.append(nid)
            out.missed[nid] = missed
        else:
            out.stayed.append(nid)
    return out
