"""IncA over 16 node processes with mTLS on loopback, through `netdp demo --algorithm inca`: 30% of
the nodes leave for good at random iterations (--fault-leave-at-step) and 20% drop out for a while
(--fault-offline windows), and the job still ends with an estimate.

Checks against independent quantities: the error of the estimate against the noise-free target of
Σy/Σω on this execution (c_uᵀx/Σω, from the public execution) within 6 standard deviations of the
noise the execution left in it (η and the uncancelled Δ, from the job's σ's), beside the central-DP
error at the privacy the execution achieved; Eq. (8) for every party that stayed to the end, over
the merged ledgers; the correlated noise the leavers took away is quantified; every stayer's
privacy comes from the audit of this execution (below the local-DP level of its η)."""

from __future__ import annotations

import json
import math

import pytest

from netdp_node.algorithms.inca.accountant import INCA_AUDIT
from netdp_node.privacy.discrete_gaussian import release_epsilon

pytestmark = pytest.mark.slow


@pytest.mark.timeout(420)
def test_inca_16_processes_with_leavers_and_dropouts(tmp_path, nd):
    work = tmp_path / "demo"
    r = nd.netdp(
        "demo",
        "--algorithm",
        "inca",
        "--nodes",
        "16",
        "--steps",
        "8",
        "--k",
        "3",
        "--round-s",
        "2",
        "--leave",
        "0.3",
        "--miss",
        "0.2",
        "--threat",
        "collude:0.3",
        "--json",
        "--workdir",
        str(work),
        "--timeout",
        "300",
        "--seed",
        "4",
        timeout=400,
    )
    try:
        assert r.returncode == 0, f"demo exited {r.returncode}:\n{r.stderr[-4000:]}"
        res = json.loads(r.stdout)
    finally:
        leftovers = nd.reap(str(work))
        assert leftovers == [], leftovers
    ids = {f"node-{i}" for i in range(1, 17)}
    # every node in exactly one state, read from the execution (not from the planned faults)
    leavers, missers, stayed = set(res["leavers"]), set(res["missers"]), set(res["stayed"])
    assert leavers | missers | stayed == ids and len(leavers) + len(missers) + len(stayed) == 16
    final = set(res["final"])
    # an estimate from the parties online at T; no leaver is in it, every other stayer agrees
    assert final == stayed | missers and not leavers & final and len(final) >= 16 - 5 - 3
    assert res["stayers_agree"]
    assert all(math.isfinite(v) for v in res["estimate"])
    # the dropouts happened: leavers took correlated noise away, some iterations were missed
    assert res["uncancelled_terms"] > 0 and res["uncancelled_noise_std"] > 0
    assert res["values_lost"] > 0
    assert set(res["missed_iterations"]) == missers
    assert all(v >= 1 for v in res["missed_iterations"].values())
    # Eq. (8) for every party that stayed to the end (merged ledgers)
    assert res["shares_ok"], res["shares_details"]
    # the error is within the noise the execution left, and is shown beside central DP
    std = math.hypot(res["std_from_eta"], res["uncancelled_noise_std"])
    err = max(abs(a - b) for a, b in zip(res["estimate"], res["truth_weighted"]))
    assert err <= 6 * std
    assert res["central_dp_std"] > 0 and res["abs_error"] >= 0
    # every stayer's guarantee is the local-DP level of its η; the audit of this execution
    # (worst of sampled adversaries, not a bound over all placements) is beside it, below it
    # (the discrete η's ε: ρ-zCDP for Δ' converted by CKS Prop. 12, discrete_gaussian's tests
    # check it against an independent computation)
    ldp = release_epsilon(res["params"], sigma_key="sigma_eta")
    assert ldp <= res["params"]["epsilon"]  # the target ε the job asked for is met
    for row in res["privacy"]:
        if row["node"] in final:
            assert row["epsilon"] == pytest.approx(ldp)
            assert row["epsilon"] <= res["params"]["epsilon"]
            audit = row["baselines"][INCA_AUDIT]
            assert audit["method"].startswith("IncA audit") and 0 < audit["epsilon"] < ldp
