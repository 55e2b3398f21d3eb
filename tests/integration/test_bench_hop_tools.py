"""Smoke tests of the hop benchmarks' tools, so that they cannot rot as the code under them changes
(cold_hop.py had kept calling an old signature of `PeerService._process`): each runs on a tiny
configuration and what it reports is checked for sense, not for speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_cold_hop_runs_the_receivers_path(capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cold_hop
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert cold_hop.main(["--hops", "12", "--warm", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["hops"] >= 10
    # the path took CPU, and its wall time holds at least that CPU time (one thread)
    assert 0 < res["cpu_us_median"] <= res["wall_us_median"] * 1.05 + 50


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bare_ring_packed_with_the_floor(tmp_path):
    out = tmp_path / "bare.json"
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bare_ring.py"),
            "--nodes",
            "3",
            "--rounds",
            "5",
            "--reps",
            "1",
            "--hosts",
            "1",
            "--floor",
            "--modes",
            "grpc,grpc+ledger",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["processes"] == 1 and res["nodes"] == 3
    assert [x["mode"] for x in res["runs"]] == ["grpc", "grpc+ledger"]
    for run in res["runs"]:
        assert run["hops_per_s"] > 0
        assert run["ratio_to_floor"] == pytest.approx(
            run["hops_per_s"] / run["floor"]["floor_per_s"]
        )
