"""The sound random-walk accountant (privacy/rw_sgd.py machinery as used by
`rw_sgd_pair_losses`, algorithms/walk/accountant.py) against the sound per-trajectory model
(docs/errata.md)."""

from __future__ import annotations

import numpy as np

from netdp_node.algorithms.walk.accountant import _rw_realised_law
from netdp_node.privacy.composition import DEFAULT_ORDERS, rdp_to_dp
from netdp_node.privacy.rw_sgd import sound_q, transition_matrix


def test_reroute_model_misses_the_stale_branch_of_a_fork():
    """A custody re-route is also what the engine does when the receiver got the token but its
    handoff was late or lost (walk.py docstring: the stale branch can go on and even release a
    second result). Complete graph n = 100 (coded weights: every hop 1/100), T = 2, cap = 1,
    noise multiplier 4, start holder u = p0: u contributes at step 0 and sends x_1 to d = p1,
    whose handoff never comes; u re-routes at t = 1 (W conditioned on d gone: 1/99 each), while
    d goes on: it holds step 1 and releases x_1 + n_d. Observer w = p3 (not on either branch,
    98 times out of 99) then sees two releases x_1 + n_d and x_1 + n_{d'} sharing u's noise:
    per-trajectory RDP (α/(2σ²))·1ᵀΣ⁻¹1 with Σ = [[2, 1], [1, 2]], i.e. q = 2/3; when the
    re-route goes to w itself, q = 1. The accountant's realised law (phases + d's extra
    observation) gives q = 1/2 instead of 2/3, so its Monte Carlo target, the value it converges
    to as mc_walks grows, is below the loss of this execution GIVEN the fork (the re-route record
    at step t is itself conditioned on, as the accountant does). Caveat: under a reading that
    conditions only on the failure process, the fork has the probability of the hop u → d and the
    gap is weighted by it; the realised-law model is then not that law either (it avoids d in
    every walk). Either way the stale branch is unmodelled."""
    n, z, delta = 100, 4.0, 1e-6
    ids = [f"p{i}" for i in range(n)]
    edges = [(a, b) for a in range(n) for b in range(a + 1, n)]
    W = transition_matrix(n, edges)
    spec = {"participants": ids, "params": {}}
    entries = [
        type(
            "E",
            (),
            {
                "event": "reroute",
                "direction": "local",
                "peer": "p1",
                "params": {"t": 1, "epoch": 1, "old_epoch": 0},
            },
        )()
    ]
    law = _rw_realised_law(spec, entries, W, ids)
    assert law is not None
    phases, extra = law
    q = sound_q(
        W,
        0,
        [3],
        2,
        1,
        20000,
        np.random.default_rng(5),
        start=0,
        release=True,
        phases=phases,
        extra_obs=extra,
    )[3]
    a = np.asarray(DEFAULT_ORDERS, dtype=np.float64)
    c = (a - 1) * a / (2 * z * z)  # exp((α − 1) D) = exp(c q)
    model = np.array([np.logaddexp.reduce(ci * q) - np.log(len(q)) for ci in c]) / (a - 1)
    pw = 1.0 / (n - 1)  # the re-route lands on w
    truth = np.logaddexp(np.log(pw) + c, np.log(1 - pw) + c * 2.0 / 3.0) / (a - 1)
    eps_model = rdp_to_dp(DEFAULT_ORDERS, model, delta)[0]
    eps_true = rdp_to_dp(DEFAULT_ORDERS, truth, delta)[0]
    assert eps_model >= eps_true, (eps_model, eps_true)


def test_a_visible_fork_falls_back_to_the_local_dp_level():
    """A second release (two branches reached T) or a fenced copy of this node (it held a stale
    branch) shows the walk forked: the single-walk model does not describe it, whatever
    "live" the records carry (the stale branch's release does not carry the other's dead set)."""
    ids = [f"p{i}" for i in range(6)]
    W = transition_matrix(6, [(i, (i + 1) % 6) for i in range(6)])
    spec = {"participants": ids, "params": {}}
    for ev in ("second-release", "fenced"):
        entries = [
            type(
                "E", (), {"event": ev, "direction": "local", "peer": "p2", "params": {"epoch": 0}}
            )()
        ]
        assert _rw_realised_law(spec, entries, W, ids) is None
