"""Smoke test of benchmarks/bench_muffliato_net.py (so that the script cannot rot): 4 node processes
and 4 bare grpc.aio processes, T = 5, one repetition. Checks the JSON it writes is sane, not how
fast anything is (speed is the benchmark's business, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from netdp_node.privacy.muffliato_accountant import public_graph

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_bench_muffliato_net_quick(tmp_path):
    out = tmp_path / "muffliato_net.json"
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_muffliato_net.py"),
            "--quick",
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=220,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(out.read_text())
    assert (res["n"], res["T"], len(res["reps"])) == (4, 5, 1)
    # the graph the benchmark used is the engine's ER graph of the recorded public seed: connected
    g = res["graph"]
    edges = public_graph({"graph": "er", "p": g["p"]}, 4, g["public_seed"], 0)
    G = nx.Graph(edges)
    G.add_nodes_from(range(4))
    assert nx.is_connected(G) and len(edges) == g["edges"]
    assert g["degree_mean"] == pytest.approx(2 * len(edges) / 4)
    (pair,) = res["reps"]
    netdp, bare = (
        pair["netdp"]["rounds_per_s_median_node"],
        pair["bare"]["rounds_per_s_median_node"],
    )
    assert netdp > 0 and bare > 0
    assert pair["ratio"] == pytest.approx(netdp / bare)
    assert res["ratio"] == pytest.approx(netdp / bare)
    assert res["target"]["target_met"] == (res["ratio"] >= 0.5)
    assert pair["bare"]["envelope_bytes"] > 0 and pair["netdp"]["job_wall_s"] > 0
    assert res["machine"]["cpus"] >= 1 and len(res["machine"]["loadavg_at_start"]) == 3
