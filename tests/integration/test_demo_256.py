"""`netdp demo --nodes 256 --algorithm walk-sum` end to end: 256 nodes in host processes (mTLS on
loopback, one SQLite ledger each), the job done at every node and every node's privacy report read
from its own ledger, the same report `netdp privacy report` gives for that ledger."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

N = 256


@pytest.mark.timeout(900)
def test_demo_walk_sum_256_nodes(tmp_path, nd):
    workdir = tmp_path / "demo"
    r = nd.netdp(
        "demo",
        "--algorithm",
        "walk-sum",
        "--nodes",
        str(N),
        "--json",
        "--peers-out",
        str(tmp_path / "pairs.npz"),
        "--workdir",
        str(workdir),
        "--timeout",
        "600",
        "--seed",
        "3",
        timeout=840,
    )
    try:
        assert r.returncode == 0, f"demo exited {r.returncode}:\n{r.stderr[-4000:]}"
        res = json.loads(r.stdout)
    finally:
        leftovers = nd.reap(str(workdir))
        assert leftovers == [], leftovers
    ids = {f"node-{i}" for i in range(1, N + 1)}
    assert res["nodes"] == N and res["algorithm"] == "walk-sum"
    counts = res["contributions"]
    assert set(counts) == ids  # every node reported the job done (the demo raises otherwise)
    assert 0 < sum(counts.values()) <= res["steps"]  # edge-cap steps carry noise only
    assert abs(res["estimate"] - res["truth"]) <= 5 * res["netdp_std"]
    rows = {row["node"]: row for row in res["privacy"]}
    assert set(rows) == ids
    # every pair in the .npz (--peers-out), each row's worst peer and summary in the JSON
    with np.load(res["peers_file"], allow_pickle=False) as z:
        nodes = list(z["nodes"])
        eps, methods = z["epsilon"], list(z["methods"])
        how = z["method"]
    assert set(nodes) == ids and eps.shape == (N, N)
    for nid, row in rows.items():
        i = nodes.index(nid)
        assert row["contributions"] == counts[nid]
        assert 0.0 <= row["epsilon"] <= 1.0 + 1e-9  # the calibrated target ε = 1 per peer
        assert "peers" not in row and row["peers_summary"]["count"] == N - 1
        assert int(np.count_nonzero(~np.isnan(eps[i]))) == N - 1 and np.isnan(eps[i, i])
        assert np.nanmax(eps[i]) == row["epsilon"] == row["worst_peer"]["epsilon"]
        assert eps[i, nodes.index(row["worst_peer"]["peer"])] == row["epsilon"]
    # the worst-contributing node's row is what its own ledger says (`netdp privacy report`)
    nid = max(counts, key=lambda v: counts[v])
    rep = nd.privacy_report(Path(res["workdir"]) / "ledgers" / nid, res["job_id"])
    (job,) = rep["jobs"]
    assert job["state"] == "done" and job["contributions"] == counts[nid]
    assert job["epsilon"] == rows[nid]["epsilon"]
    i = nodes.index(nid)
    assert {p["peer"]: (p["epsilon"], p["method"]) for p in job["peers"]} == {
        peer: (float(eps[i, j]), methods[how[i, j]]) for j, peer in enumerate(nodes) if peer != nid
    }
