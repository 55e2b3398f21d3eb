"""A private ring sum across real processes: a bootstrap and 5 node daemons on 127.0.0.1 over mTLS.

The operator submits through the bootstrap, every node reports the released result, the estimate is
within 4 standard deviations of the truth, each node's own ledger (read by `netdp privacy report`,
a separate process) accounts K contributions towards each other node, and SIGTERM stops every
process cleanly. Then `netdp demo --json` end to end, leaving no process behind.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from netdp_node.algorithms.ring.accountant import ring_sum_utility
from netdp_node.bootstrap_client import BootstrapClient

pytestmark = pytest.mark.slow

N = 5
K = 5
VALUES = [0.9, -0.3, 0.55, 0.1, 1.7]  # the last is clipped to the bound 1.0
CLIP = 1.0


@pytest.mark.timeout(120)
async def test_ring_sum_over_five_processes(clusters, nd):
    cluster = clusters(N, values=VALUES, seed=7)
    ids = cluster.ids
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    try:
        params = {"rounds": K, "epsilon": 0.9, "delta": 1e-5, "delta_prime": 1e-5, "clip": CLIP}
        job = await client.submit("ring-sum", params, participants=ids, job_id="ring-mp-1")
        assert [p.node_id for p in job.participants] == ids
        results = await nd.wait_reports(client, job.job_id, ids, timeout=60)
    finally:
        await client.close()

    # Every node finished, contributed K times, and received the same released value.
    for nid in ids:
        r = results[nid]
        assert r.state == "done", f"{nid}: {r.state} {r.detail}"
        assert r.contributed and r.contributions == K, (nid, r.contributed, r.contributions)
        assert r.HasField("output")
    outputs = {nid: np.frombuffer(results[nid].output.data, dtype="<f8") for nid in ids}
    first = outputs[ids[0]]
    assert first.shape == (1,)
    for nid in ids:
        assert np.array_equal(outputs[nid], first), f"{nid} released {outputs[nid]}, not {first}"

    # The estimate is within 4 standard deviations (the accountant's netdp_std) of the truth.
    spec = {"participants": ids, "params": json.loads(job.params_json)}
    std = ring_sum_utility(spec)["netdp_std"]
    truth = float(sum(np.clip(VALUES, -CLIP, CLIP)))
    estimate = float(first[0])
    assert std > 0 and math.isfinite(std)
    assert abs(estimate - truth) <= 4 * std, (estimate, truth, std)

    # Each node's own ledger, read by the CLI in another process: K contributions, and a finite
    # epsilon towards each of the 4 others.
    for nid in ids:
        rep = nd.privacy_report(cluster.ledger(nid), job.job_id)
        assert rep["node"] == nid
        (j,) = rep["jobs"]
        assert j["job_id"] == job.job_id and j["state"] == "done" and j["contributed"]
        assert j["contributions"] == K
        peers = {p["peer"]: p for p in j["peers"]}
        assert set(peers) == set(ids) - {nid}
        for p in peers.values():
            assert math.isfinite(p["epsilon"]) and p["epsilon"] > 0, (nid, p)
            assert 0 < p["delta"] < 1, (nid, p)

    # SIGTERM: every process (bootstrap and nodes) exits with 0 within the grace period.
    codes = cluster.stop()
    assert set(codes) == {"bootstrap", *ids}
    assert codes == {name: 0 for name in codes}, codes


@pytest.mark.timeout(150)
def test_demo_json(tmp_path, nd):
    workdir = tmp_path / "demo"
    r = nd.netdp(
        "demo",
        "--nodes",
        "4",
        "--rounds",
        "2",
        "--json",
        "--peers-out",
        str(tmp_path / "pairs.csv"),
        "--workdir",
        str(workdir),
        "--timeout",
        "90",
        timeout=130,
    )
    try:
        assert r.returncode == 0, f"demo exited {r.returncode}:\n{r.stderr[-4000:]}"
        res = json.loads(r.stdout)
        for key in (
            "algorithm",
            "nodes",
            "estimate",
            "truth",
            "abs_error",
            "netdp_std",
            "ldp_std",
            "elapsed_s",
            "privacy",
        ):
            assert key in res, key
        assert res["algorithm"] == "ring-sum" and res["nodes"] == 4
        for key in ("estimate", "truth", "abs_error", "netdp_std", "ldp_std", "elapsed_s"):
            assert isinstance(res[key], float) and math.isfinite(res[key]), (key, res[key])
        assert res["abs_error"] == pytest.approx(abs(res["estimate"] - res["truth"]))
        assert 0 < res["netdp_std"] < res["ldp_std"]
        assert isinstance(res["privacy"], list) and len(res["privacy"]) == 4
        ids = {f"node-{i}" for i in range(1, 5)}
        assert {row["node"] for row in res["privacy"]} == ids
        # per node its worst peer and a summary (the pairs: --json-peers, or the file)
        assert res["privacy_pairs"] == "summarised"
        assert res["peers_file"] == str(tmp_path / "pairs.csv")
        with open(res["peers_file"], newline="") as f:
            pairs = list(csv.DictReader(f))
        assert {(x["node"], x["peer"]) for x in pairs} == {
            (a, b) for a in ids for b in ids if a != b
        }
        assert {x["direction"] for x in pairs} == {"out"}
        for row in res["privacy"]:
            for key in ("node", "epsilon", "delta", "worst_peer", "peers_summary"):
                assert key in row, (key, row)
            assert "peers" not in row
            assert math.isfinite(row["epsilon"]) and row["epsilon"] > 0
            mine = [x for x in pairs if x["node"] == row["node"]]
            worst = max(mine, key=lambda x: float(x["epsilon"]))
            assert row["worst_peer"]["epsilon"] == float(worst["epsilon"]) == row["epsilon"]
            assert row["peers_summary"]["count"] == len(mine) == 3
    finally:
        # Whatever happened, the demo must not leave a daemon behind: none of the live processes
        # mentions its work directory (every daemon's command line does).
        leftovers = nd.reap(str(workdir))
    assert leftovers == [], leftovers
