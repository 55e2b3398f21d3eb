"""`netdp demo --json` grows with the nodes, not with the pairs; every pair on request.

At 1,000 nodes the JSON used to list every node's loss towards every peer: a million pairs, 182 MB.
Now each node's row holds its worst peer and a summary over its peers (checked here against
`statistics` over the same losses), the per-peer lists only with --json-peers, and --peers-out
writes every pair to a compact file (.npz matrices, .csv lines), read back here and compared with
the rows it was written from. The flags are checked before anything starts (exit 2, naming them).
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from netdp_node.cli import main
from netdp_node.demo import json_result, render, write_peers

METHODS = ("ldp-gaussian-rdp", "theorem3-tight+edge-cap(B=2), counts=bound", "no-contribution")


def _loss(rng: np.random.Generator, peer: str) -> dict[str, Any]:
    m = METHODS[int(rng.integers(len(METHODS)))]
    eps = 0.0 if m == "no-contribution" else float(rng.uniform(0.01, 2.0))
    return {"peer": peer, "epsilon": eps, "delta": 0.0 if eps == 0 else 1e-5, "method": m}


def _res(n: int, *, incoming: bool = False, seed: int = 0) -> dict[str, Any]:
    """A demo result as `_run` makes it: a privacy row per node listing every peer."""
    rng = np.random.default_rng(seed)
    ids = [f"node-{i}" for i in range(1, n + 1)]
    rows = []
    for nid in ids:
        peers = [_loss(rng, p) for p in ids if p != nid]
        worst = max(peers, key=lambda p: p["epsilon"])
        row: dict[str, Any] = {
            "node": nid,
            "epsilon": worst["epsilon"],
            "delta": worst["delta"],
            "contributed": True,
            "contributions": int(rng.integers(1, 9)),
            "peers": peers,
            "baselines": {"local-dp": {"epsilon": 1.0, "delta": 1e-5, "method": "local DP"}},
            "seeded_rng": False,
        }
        if incoming:
            row["incoming"] = [_loss(rng, p) for p in ids if p != nid]
        rows.append(row)
    return {
        "algorithm": "walk-sum",
        "job_id": "demo-0123456789ab",
        "nodes": n,
        "workers": 1,
        "elapsed_s": 1.0,
        "startup_s": 1.0,
        "contributors": ids,
        "contributions": {row["node"]: row["contributions"] for row in rows},
        "privacy": rows,
        "threat_model": None,
        "not_private": None,
        # the walk-sum outcome (`WalkSumHooks.demo_outcome`), for the text report
        "sigma": 1.0,
        "epsilon0": 0.5,
        "estimate": 1.5,
        "truth": 1.0,
        "abs_error": 0.5,
        "netdp_std": 1.0,
        "ldp_std": 2.0,
        "steps": 10 * n,
        "gain_starts_at": None,
    }


def _summary_check(summary: dict[str, Any], losses: list[dict[str, Any]]) -> None:
    eps = [p["epsilon"] for p in losses]
    assert summary["count"] == len(losses)
    assert summary["epsilon_min"] == min(eps) and summary["epsilon_max"] == max(eps)
    assert summary["epsilon_median"] == pytest.approx(statistics.median(eps), rel=1e-12)
    assert summary["epsilon_mean"] == pytest.approx(statistics.fmean(eps), rel=1e-12)
    assert summary["delta_max"] == max(p["delta"] for p in losses)
    counts: dict[str, int] = {}
    for p in losses:
        counts[p["method"]] = counts.get(p["method"], 0) + 1
    assert summary["methods"] == counts


@pytest.mark.parametrize("incoming", [False, True])
def test_rows_hold_the_worst_peer_and_a_summary(incoming: bool) -> None:
    res = _res(12, incoming=incoming)
    out = json_result(res)
    assert out["privacy_pairs"] == "summarised"
    assert len(out["privacy"]) == 12
    for row, full in zip(out["privacy"], res["privacy"]):
        assert "peers" not in row and "incoming" not in row
        assert row["node"] == full["node"] and row["epsilon"] == full["epsilon"]
        assert row["baselines"] == full["baselines"]
        worst = max(full["peers"], key=lambda p: p["epsilon"])
        assert row["worst_peer"] == worst and row["worst_peer"]["epsilon"] == row["epsilon"]
        _summary_check(row["peers_summary"], full["peers"])
        if incoming:
            assert row["worst_incoming"] == max(full["incoming"], key=lambda p: p["epsilon"])
            _summary_check(row["incoming_summary"], full["incoming"])
        else:
            assert "incoming_summary" not in row and "worst_incoming" not in row
    assert "peers" in res["privacy"][0]  # the result itself is left whole (the text report)


def test_json_peers_keeps_every_pair() -> None:
    res = _res(6, incoming=True)
    out = json_result(res, peers=True)
    assert out["privacy_pairs"] == "listed"
    for row, full in zip(out["privacy"], res["privacy"]):
        assert row["peers"] == full["peers"] and row["incoming"] == full["incoming"]
        _summary_check(row["peers_summary"], full["peers"])


def test_the_default_json_grows_with_the_nodes_not_the_pairs() -> None:
    def size(n: int, peers: bool) -> int:
        return len(json.dumps(json_result(_res(n), peers=peers), indent=2))

    # doubling the nodes about doubles the summary, and about quadruples the full listing
    assert size(80, False) / size(40, False) < 2.3
    assert size(80, True) / size(40, True) > 3.5
    assert size(80, False) < size(80, True) / 10


def test_the_text_report_reads_either_json() -> None:
    res = _res(5)
    full = render(res)
    listed = render(json.loads(json.dumps(json_result(res, peers=True))))
    summarised = render(json.loads(json.dumps(json_result(res))))
    assert listed == full
    method_line = [ln for ln in full.splitlines() if "(method:" in ln]
    assert method_line and method_line[0] in summarised.splitlines()
    for row in res["privacy"]:  # every node's worst ε, in either
        assert f"{row['epsilon']:.4f}" in summarised


@pytest.mark.parametrize("incoming", [False, True])
def test_npz_holds_every_pair(tmp_path: Path, incoming: bool) -> None:
    res = _res(9, incoming=incoming, seed=3)
    path = tmp_path / "out" / "pairs.npz"  # its folder is created
    write_peers(path, res)
    assert sorted(p.name for p in path.parent.iterdir()) == ["pairs.npz"]  # no temporary left
    with np.load(path, allow_pickle=False) as z:
        nodes = list(z["nodes"])
        methods = list(z["methods"])
        assert str(z["job_id"]) == res["job_id"] and str(z["algorithm"]) == "walk-sum"
        assert nodes == [row["node"] for row in res["privacy"]]
        for key, prefix in (("peers", ""),) + ((("incoming", "incoming_"),) if incoming else ()):
            eps, delta, how = z[f"{prefix}epsilon"], z[f"{prefix}delta"], z[f"{prefix}method"]
            assert eps.shape == delta.shape == how.shape == (9, 9)
            assert np.isnan(np.diag(eps)).all() and (np.diag(how) == -1).all()
            seen = 0
            for i, row in enumerate(res["privacy"]):
                for p in row[key]:
                    j = nodes.index(p["peer"])
                    assert eps[i, j] == p["epsilon"] and delta[i, j] == p["delta"]
                    assert methods[how[i, j]] == p["method"]
                    seen += 1
            assert seen == 9 * 8 == int(np.count_nonzero(~np.isnan(eps)))
        assert ("incoming_epsilon" in z.files) == incoming


def test_csv_holds_every_pair(tmp_path: Path) -> None:
    res = _res(7, incoming=True, seed=5)
    path = tmp_path / "pairs.csv"
    write_peers(path, res)
    with path.open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert set(lines[0]) == {"node", "peer", "direction", "epsilon", "delta", "method"}
    got = {
        (x["node"], x["peer"], x["direction"]): (
            float(x["epsilon"]),
            float(x["delta"]),
            x["method"],
        )
        for x in lines
    }
    want = {
        (row["node"], p["peer"], direction): (p["epsilon"], p["delta"], p["method"])
        for row in res["privacy"]
        for key, direction in (("peers", "out"), ("incoming", "in"))
        for p in row[key]
    }
    assert len(lines) == len(want) == 2 * 7 * 6 and got == want  # floats round-trip exactly


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--json-peers"], "--json-peers"),
        (["--peers-out", "pairs.txt"], "--peers-out"),
        (["--peers-out", "pairs"], "--peers-out"),
        (["--json", "--peers-out", "{tmp}/folder.npz"], "is a directory"),
        (["--peers-out", "{tmp}/a-file/pairs.npz"], "cannot create files"),
    ],
)
def test_output_flags_are_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    (tmp_path / "folder.npz").mkdir()
    (tmp_path / "a-file").write_text("")
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    code = main(["demo", "--nodes", "4", "--workdir", str(tmp_path / "work"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert not (tmp_path / "work").exists()  # nothing was created, nothing started
