"""Before/after of the hop path: bench_transport.py run alternately on two checkouts, in one run.

    git worktree add /tmp/netdp-before <commit>
    python benchmarks/compare_hop.py --before /tmp/netdp-before [--runs 3] [--rounds 150] [--reps 3]

Each run is `bench_transport.py --quick --rounds R --reps P` of THIS checkout's benchmark script
on the code of `--before`, then on this working tree, alternating `--runs` times: a change in the
machine's load hits both sides alike. The two checkouts are what is measured, so each run's
PYTHONPATH names its checkout (it comes before the installed netdp; the node processes inherit it),
and the run's result must say it imported netdp from there. Per run it keeps the single-walk hop
rates, the floor, the ratios, the CPU per hop of the whole cluster (less sensitive to other
processes than the rates) and the load.
Writes benchmarks/results/transport-compare.json and .txt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def run_one(tree: Path, out: Path, rounds: int, reps: int, workers: int = 0) -> dict[str, Any]:
    """bench_transport.py (this checkout's) on the netdp of `tree`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    subprocess.run(
        [sys.executable, str(HERE / "bench_transport.py"), "--quick", "--rounds", str(rounds)]
        + ["--reps", str(reps), "--workers", str(workers), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=900,
        env=env,
    )
    r = json.loads(out.read_text())
    measured = Path(r["machine"]["netdp_node_imported_from"]).parent
    if measured != tree:
        raise SystemExit(f"the run meant for {tree} imported netdp from {measured}")
    pairs = r["target"]["pairs"]
    return {
        "hops_per_s": [p["hops_per_s"] for p in pairs],
        "floor_per_s": [p["floor_per_s"] for p in pairs],
        "ratio_to_floor": [p["ratio_to_floor"] for p in pairs],
        "ratio_to_pingpong": [p["ratio_to_pingpong"] for p in pairs],
        "cpu_us_per_hop": [p["cpu_us_per_hop"] for p in pairs],
        # (absent from results of a bench_transport.py older than the per-process CPU: NaN)
        "node_cpu_us_per_hop": [
            p.get("cpu_us_per_hop_by_process", {}).get("nodes", float("nan")) for p in pairs
        ],
        "node_loop_cpu_us_per_hop": [
            p.get("cpu_us_per_hop_by_process", {}).get("nodes_event_loop_threads", float("nan"))
            for p in pairs
        ],
        "node_grpc_cpu_us_per_hop": [
            p.get("cpu_us_per_hop_by_process", {}).get("nodes_grpc_threads", float("nan"))
            for p in pairs
        ],
        "p50_hop_ms": [r["netdp"]["single_walk"]["hop_latency_ms"]["p50"]],
        "p90_hop_ms": [r["netdp"]["single_walk"]["hop_latency_ms"]["p90"]],
        "ledger_commits_per_token_hop": [
            p.get("ledger_commits_per_token_hop", float("nan")) for p in pairs
        ],
        "floor_starved": [p["floor_starved"] for p in pairs],
        "loadavg_start": r["machine"]["loadavg_at_start"][0],
        "loadavg_end": r["machine"]["loadavg_at_end"][0],
        "concurrent_hops_per_s": r["netdp"]["concurrent_walks"]["aggregate_hops_per_s"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="checkout of the old code")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--workers", type=int, default=0, help="the ring's nodes in W host processes (0: one each)"
    )
    ap.add_argument("--out", type=Path, default=common.result_path("transport-compare"))
    a = ap.parse_args()
    sides = {"before": a.before.resolve(), "after": REPO}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    facts = common.machine(["grpcio"])
    with common.workdir("netdp-compare-") as work:
        for i in range(a.runs):
            for name, tree in sides.items():
                res = run_one(tree, work / f"{name}-{i}.json", a.rounds, a.reps, a.workers)
                runs[name].append(res)
                print(
                    f"{name:6} run {i + 1}: hops/s "
                    + " ".join(f"{x:.0f}" for x in res["hops_per_s"])
                    + "  cpu us/hop "
                    + " ".join(f"{x:.0f}" for x in res["cpu_us_per_hop"])
                    + f"  load {res['loadavg_end']:.1f}",
                    file=sys.stderr,
                    flush=True,
                )

    def med(side: str, key: str) -> float:
        return float(statistics.median(x for r in runs[side] for x in r[key]))

    keys = (
        "hops_per_s",
        "cpu_us_per_hop",
        "node_cpu_us_per_hop",
        "node_loop_cpu_us_per_hop",
        "node_grpc_cpu_us_per_hop",
        "ratio_to_floor",
        "ratio_to_pingpong",
        "floor_per_s",
        "p50_hop_ms",
        "p90_hop_ms",
        "ledger_commits_per_token_hop",
    )
    summary = {side: {k: med(side, k) for k in keys} for side in sides}
    for side in sides:  # (one value per run: 8 walks in flight)
        summary[side]["concurrent_hops_per_s"] = float(
            statistics.median(r["concurrent_hops_per_s"] for r in runs[side])
        )
    res = {
        "machine": facts,
        "command": " ".join(["python benchmarks/compare_hop.py", *sys.argv[1:]]),
        "before_commit": common.git(sides["before"], "rev-parse", "HEAD"),
        "after_commit": common.git(REPO, "rev-parse", "HEAD"),
        "after_dirty": bool(common.git(REPO, "status", "--porcelain", "--untracked-files=no")),
        "config": {"runs": a.runs, "rounds": a.rounds, "reps": a.reps, "workers": a.workers},
        "median_over_all_pairs": summary,
        "runs": runs,
    }
    lines = [
        f"hop path before/after, {facts['date']}, {facts['cpus_usable']} CPU(s); before "
        f"{res['before_commit'][:10]}, after {res['after_commit'][:10]}"
        + (" (+ uncommitted changes)" if res["after_dirty"] else ""),
        f"  {a.runs} alternating runs x {a.reps} pairs, single walk K={a.rounds} on 8 node "
        "processes; medians over all pairs:",
        "           hops/s  p50/p90 ms  cpu us/hop (nodes)  hop/floor  hop/ping-pong  floor/s"
        "  commits/hop",
        *[
            f"  {side:7} {s['hops_per_s']:7.0f} {s['p50_hop_ms']:5.2f}/{s['p90_hop_ms']:<5.2f}"
            f" {s['cpu_us_per_hop']:8.0f} ({s['node_cpu_us_per_hop']:5.0f})"
            f" {s['ratio_to_floor']:10.3f} {s['ratio_to_pingpong']:14.3f} {s['floor_per_s']:8.0f}"
            f" {s['ledger_commits_per_token_hop']:12.3f}"
            for side, s in summary.items()
        ],
        "  node CPU per hop, event-loop threads / grpc's threads (us): "
        + ", ".join(
            f"{side} {s['node_loop_cpu_us_per_hop']:.0f} / {s['node_grpc_cpu_us_per_hop']:.0f}"
            for side, s in summary.items()
        ),
        "  8 walks in flight, aggregate hops/s (median of runs): "
        + ", ".join(f"{side} {s['concurrent_hops_per_s']:.0f}" for side, s in summary.items()),
        "  load average (1 min) per run: "
        + ", ".join(
            f"{side} {r['loadavg_start']:.1f}-{r['loadavg_end']:.1f}"
            for i in range(a.runs)
            for side in sides
            for r in [runs[side][i]]
        ),
    ]
    text = "\n".join(lines)
    common.write_results("transport-compare", res, out=a.out, text=text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
