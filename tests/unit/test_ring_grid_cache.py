"""RingSum's visits without noise add a grid value it computes once."""

from __future__ import annotations

import numpy as np

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.ring.engine import RingSum
from netdp_node.protocols.base import JobContext, Message, Send


def test_a_visit_without_noise_adds_the_same_grid_value_as_recomputing_it():
    """RingSum keeps γ·round(x/γ) for its visits without noise; the tokens it passes on, and the
    draws of its generator, are those of an engine that recomputes it at every visit (a guard
    of the cache: same result as the computation it replaces)."""
    ids = [f"n{i}" for i in range(1, 5)]
    params = get_algorithm("ring-sum").prepare({"rounds": 12, "dim": 3, "epsilon": 0.5}, 4)
    ctx = JobContext("j", "ring-sum", "n2", ids, params, 1)
    x = np.array([0.123456789, -0.5, 0.987654321])
    cached = RingSum(ctx, x, np.random.default_rng(5))
    fresh = RingSum(ctx, x, np.random.default_rng(5))
    tau = np.zeros(3)
    noisy = 0
    for k in range(1, 13):
        fresh._x_on_grid = None  # recomputed at this visit
        a = cached.on_message("n1", Message("token", payload=tau, walk="ring", seq=k))
        b = fresh.on_message("n1", Message("token", payload=tau, walk="ring", seq=k))
        [sa] = [x for x in a if isinstance(x, Send)]
        [sb] = [x for x in b if isinstance(x, Send)]
        assert sa.msg.payload.tobytes() == sb.msg.payload.tobytes()
        noisy += any(r.params.get("sigma") for r in a if hasattr(r, "params"))
        tau = sa.msg.payload
    assert 0 < noisy < 12  # both kinds of visit were taken
    assert cached.rng.integers(1 << 62) == fresh.rng.integers(1 << 62)
