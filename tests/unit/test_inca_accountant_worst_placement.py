"""The `inca` accountant (privacy/accountant.py, privacy/inca_audit.py): the paper's
C-DP / E-DP are worst-case over the adversary's placement, while the value in the
guarantee slot is the worst of a few SAMPLED placements."""

from __future__ import annotations

import itertools

import numpy as np

from netdp_node.algorithms import get_algorithm
from netdp_node.privacy import inca_audit as ia


def _job(n: int, k: int, T: int, seed: int, threat: str):
    """A finished IncA job with nobody dropping (every message counted, every final known) as
    node `me`'s ledger shows it: one contribution and the result's public execution info."""
    ids = [f"n{i}" for i in range(n)]
    p = get_algorithm("inca").prepare({"T": T, "k": k, "threat": threat, "epsilon": 1.0}, n)
    nb = ia.out_neighbours(n, k, T, seed)
    info = {
        "online": np.ones((T + 1, n), dtype=bool).tolist(),
        "counted": [[(ids[i], ids[int(j)]) for i in range(n) for j in nb[t, i]] for t in range(T)],
        "lost": [],
        "final": ids,
    }
    spec = {
        "job_id": "review-inca",
        "algorithm": "inca",
        "participants": ids,
        "params": p,
        "public_seed": seed,
    }

    def entries(me: str):
        return [
            type("E", (), {"event": ev, "direction": "local", "peer": me, "params": prm})()
            for ev, prm in (("contribute", {}), ("output", {"info": info}))
        ]

    return spec, entries, p, ids


def test_party_report_worst_of_samples_is_below_a_real_placement():
    """Numeric counterexample (inca_audit.party_report): n = 10, k = 1, T = 8, 3 colluders,
    σ_η = 1, σ_Δ = 5, δ = 1e-5. Party 1's reported worst-of-8 sampled coalitions is ε = 1.516;
    the coalition {4, 6, 9} gives party 1 ε = 1.682 on the same execution."""
    ex = ia.make_execution(10, 1, 8, seed=3)
    kw = {"sigma_eta": 1.0, "sigma_delta": 5.0, "delta": 1e-5}
    rep = ia.party_report(ex, 1, {"colluders": 3}, samples=8, seed=0, **kw)
    real = float(ia.account(ex, corrupted=[4, 6, 9], **kw).epsilon[1])
    assert real > rep["epsilon"] * 1.1  # the report is an audit of samples, not a bound


def test_inca_guarantee_covers_every_placement_of_the_threat():
    """The value `get_algorithm('inca').accountant.losses` returns is what budgets are charged with
    (`total_losses`, `check_budget`): it must bound the loss against EVERY coalition of the job's
    size (C-DP is worst-case), not only the sampled ones. Brute force over all
    C(9, 3) = 84 coalitions of a small job."""
    n, k, T, seed = 10, 1, 6, 3
    spec, entries, p, ids = _job(n, k, T, seed, "collude:0.3")
    ex = ia.make_execution(n, k, T, seed)
    me = 1
    shown = get_algorithm("inca").accountant.losses(spec, entries(ids[me]), ids[me])["n0"].epsilon
    worst = max(
        float(
            ia.account(
                ex,
                corrupted=list(C),
                sigma_eta=p["sigma_eta"],
                sigma_delta=p["sigma_delta"],
                delta=p["delta"],
                sensitivity=p["sensitivity"],
            ).epsilon[me]
        )
        for C in itertools.combinations([i for i in range(n) if i != me], 3)
    )
    assert shown >= worst - 1e-9, (shown, worst)
