"""`netdp demo --algorithm walk-sum|walk-sgd` over real node processes with mTLS on loopback: the
result agrees with the contributions the nodes report, each node's report comes from its own
ledger, and the SGD demo prints test accuracy beside the local-DP and central-DP baselines."""

from __future__ import annotations

import json
import math

import pytest

from netdp_node.algorithms.walk.accountant import RW_LDP_METHOD, RW_TRAJECTORY

pytestmark = pytest.mark.slow


def _run_demo(nd, workdir, *args: str) -> dict:
    r = nd.netdp(
        "demo",
        *args,
        "--json",
        "--json-peers",  # every node's row lists every peer (small runs)
        "--workdir",
        str(workdir),
        "--timeout",
        "120",
        "--seed",
        "4",
        timeout=170,
    )
    try:
        assert r.returncode == 0, f"demo exited {r.returncode}:\n{r.stderr[-4000:]}"
        return json.loads(r.stdout)
    finally:
        leftovers = nd.reap(str(workdir))
        assert leftovers == [], leftovers


@pytest.mark.timeout(200)
def test_demo_walk_sum(tmp_path, nd):
    res = _run_demo(
        nd, tmp_path / "demo", "--algorithm", "walk-sum", "--nodes", "5", "--steps", "60"
    )
    assert res["algorithm"] == "walk-sum" and res["steps"] == 60
    counts = res["contributions"]
    assert set(counts) == {f"node-{i}" for i in range(1, 6)}
    assert 0 < sum(counts.values()) <= 60  # edge-cap steps carry noise only
    # truth = Σ contributions × value; the error is within 5 std of the walk's noise
    assert abs(res["estimate"] - res["truth"]) <= 5 * res["netdp_std"]
    assert 0 < res["netdp_std"] <= res["ldp_std"]  # equal at small n: local DP is the better bound
    for row in res["privacy"]:
        assert row["contributions"] == counts[row["node"]]
        assert 0 <= row["epsilon"] <= 1.0 + 1e-9  # the calibrated target ε = 1
        assert {p["peer"] for p in row["peers"]} == set(counts) - {row["node"]}


@pytest.mark.timeout(200)
def test_demo_walk_sgd(tmp_path, nd):
    res = _run_demo(
        nd, tmp_path / "demo", "--algorithm", "walk-sgd", "--nodes", "4", "--steps", "80"
    )
    assert 0.0 <= res["test_accuracy"] <= 1.0 and len(res["model"]) == 9
    for mode in ("local", "central"):
        b = res["baselines"][mode]
        assert 0.0 <= b["test_accuracy"] <= 1.0 and b["sigma"] > 0
    for row in res["privacy"]:
        assert math.isfinite(row["epsilon"]) and row["epsilon"] <= 10.0 + 1e-9
        # the proven local-DP level only; Lemma 1 (continuous noise) is a labelled baseline
        assert {p["method"] for p in row["peers"]} <= {"no-contribution", "ldp-gaussian-rdp"}
        assert all("not proven for discrete noise" in k for k in row["baselines"])


@pytest.mark.timeout(200)
def test_demo_rw_sgd(tmp_path, nd):
    res = _run_demo(
        nd,
        tmp_path / "demo",
        "--algorithm",
        "rw-sgd",
        "--nodes",
        "5",
        "--steps",
        "60",
        "--topology",
        "ring",
    )
    assert res["algorithm"] == "rw-sgd" and 0.0 <= res["test_accuracy"] <= 1.0
    assert sum(res["contributions"].values()) <= 60
    for mode in ("local", "central"):  # the baselines at the same ε
        assert 0.0 <= res["baselines"][mode]["test_accuracy"] <= 1.0
    for row in res["privacy"]:
        assert row["epsilon"] <= 10.0 + 1e-9
        for p in row["peers"]:  # the best sound value, never the paper's
            assert p["method"] == "no-contribution" or p["method"].startswith(
                (RW_LDP_METHOD, RW_TRAJECTORY)
            )
