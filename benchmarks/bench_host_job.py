"""Job time of a demo job whose nodes are hosted many to a process, with the ledgers' group commits
on the event loop or off it (`netdp node --ledger-threads`), in paired runs.

    python benchmarks/bench_host_job.py                          # 300 nodes, walk-sum, 0 vs 4
    python benchmarks/bench_host_job.py --nodes 200 --pairs 3 --variant off=0 --variant on=4
    python benchmarks/bench_host_job.py --variant main=-:/tmp/main-tree --variant on=4
    python benchmarks/bench_host_job.py --quick                  # 60 nodes, one pair

Each run is one `netdp demo --algorithm A --nodes N --workers W --json` (a bootstrap and W host
processes on loopback, real mTLS, real SQLite ledgers) in a fresh driver process. A variant is
NAME=THREADS[:TREE]: the host processes get `--ledger-threads THREADS` ("-": no such flag, e.g.
for a tree from before it), and TREE, if given, is put first on PYTHONPATH of the driver and of
every process it starts (to measure another checkout, e.g. main, with the same interpreter). The
variants of a pair run one after the other, their order alternating from pair to pair (ABBA), so
that a machine shared with other work loads both alike; compare the runs of a pair.

Per run: the job's wall time (`elapsed_s`, submission to result, as `netdp demo` reports it),
start-up, and the CPU time (user + system) the host processes and the bootstrap used between the
submission and the result, and the driver's own (the demo: its progress rounds, its result polls);
the load average before and after. Writes
benchmarks/results/host_job.json (--quick: host_job-quick.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve()
TICK = os.sysconf("SC_CLK_TCK")


def _driver(argv: list[str], threads: str, out: Path) -> int:
    """In the driver process: `netdp demo ARGV`, with `--ledger-threads THREADS` for every node
    process and the CPU time of the processes over the job written to `out`."""
    from netdp_node import cli, demo
    from netdp_node.cluster import LocalCluster
    from netdp_node.waiting import cpu_ticks

    marks: dict[str, dict[str, int | None]] = {}
    clusters: list[LocalCluster] = []
    start = LocalCluster.start

    def started(self: LocalCluster, *args: Any, **kw: Any) -> Any:
        clusters.append(self)
        if threads != "-":
            kw["common"] = [*(kw.get("common") or []), "--ledger-threads", threads]
        return start(self, *args, **kw)

    def mark(name: str) -> None:
        if name not in marks and clusters:
            marks[name] = {
                p.name: cpu_ticks(p.popen.pid) if p.popen else None
                for p in clusters[0].procs.values()
            }
            # the driver itself (the demo's progress rounds, its result polls), in ticks
            marks.setdefault("driver", {})[name] = round(time.process_time() * TICK)

    submit = demo.submit_job

    async def submitted(*args: Any, **kw: Any) -> Any:
        mark("submit")
        return await submit(*args, **kw)

    summarise = demo.result_summary

    def summary(reply: Any) -> Any:
        s = summarise(reply)
        if s["complete"] or s["failed"]:
            mark("result")
        return s

    LocalCluster.start = started  # type: ignore[method-assign]
    demo.submit_job = submitted  # type: ignore[assignment]
    demo.result_summary = summary  # type: ignore[assignment]
    code = cli.main(["demo", *argv])
    out.write_text(json.dumps(marks))
    return code


def run_one(
    name: str, threads: str, tree: str | None, demo_args: list[str], work: Path
) -> dict[str, Any]:
    cpu_file = work / f"cpu-{name}-{time.monotonic_ns()}.json"
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(
            [tree, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
    load_before = common.load_average()
    t0 = time.monotonic()
    # cwd: not a checkout. The node processes run `python -m netdp_node.cli`, which puts the
    # working directory first on sys.path: started from a checkout, every variant ran that
    # checkout's nodes whatever its TREE (only the driver used TREE).
    r = subprocess.run(
        [sys.executable, str(HERE), "--driver", threads, str(cpu_file), "--", *demo_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=3600,
    )
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"variant {name}: demo failed ({r.returncode}):\n{r.stderr[-4000:]}")
    res = json.loads(r.stdout)
    marks = json.loads(cpu_file.read_text())

    def cpu(which: str) -> float | None:
        if which == "driver":
            d = marks.get("driver", {})
            return (d["result"] - d["submit"]) / TICK if "submit" in d and "result" in d else None
        a, b = marks.get("submit", {}), marks.get("result", {})
        names = [n for n in a if (n == "bootstrap") == (which == "bootstrap")]
        if not names or any(a.get(n) is None or b.get(n) is None for n in names):
            return None
        return sum(b[n] - a[n] for n in names) / TICK

    return {
        "variant": name,
        "ledger_threads": threads,
        "tree": tree,
        "elapsed_s": round(res["elapsed_s"], 2),
        "startup_s": round(res["startup_s"], 2),
        "hosts_cpu_s": cpu("hosts"),
        "bootstrap_cpu_s": cpu("bootstrap"),
        "driver_cpu_s": cpu("driver"),
        "run_wall_s": round(wall, 1),
        "load_before": load_before,
        "load_after": common.load_average(),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--driver":
        threads, out = sys.argv[2], Path(sys.argv[3])
        raise SystemExit(_driver(sys.argv[5:], threads, out))
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--algorithm", default="walk-sum")
    ap.add_argument("--workers", type=int, default=2, help="host processes (default 2)")
    ap.add_argument("--pairs", type=int, default=2, help="paired rounds of the variants (2)")
    ap.add_argument(
        "--variant",
        action="append",
        metavar="NAME=THREADS[:TREE]",
        help="a variant to measure (default: loop=0 and pool=4)",
    )
    ap.add_argument("--quick", action="store_true", help="60 nodes, one pair (smoke test)")
    ap.add_argument("--out", type=Path, help="output file (default benchmarks/results/...)")
    a = ap.parse_args()
    if a.quick:
        a.nodes, a.pairs = 60, 1
    variants = []
    for v in a.variant or ["loop=0", "pool=4"]:
        name, _, rest = v.partition("=")
        threads, _, tree = rest.partition(":")
        if not name or not threads:
            raise SystemExit(f"--variant {v!r}: NAME=THREADS[:TREE]")
        variants.append((name, threads, tree or None))
    demo_args = [
        "--algorithm",
        a.algorithm,
        "--nodes",
        str(a.nodes),
        "--workers",
        str(a.workers),
        "--json",
    ]
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"netdp-bench-host-job-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for k in range(a.pairs):
        order = variants if k % 2 == 0 else list(reversed(variants))
        for name, threads, tree in order:
            r = run_one(name, threads, tree, demo_args, work)
            r["pair"] = k
            runs.append(r)
            print(
                f"pair {k} {name:>8}: job {r['elapsed_s']:7.1f} s, hosts CPU "
                f"{r['hosts_cpu_s']} s, bootstrap {r['bootstrap_cpu_s']} s, driver "
                f"{r['driver_cpu_s']} s, load {r['load_before']} -> {r['load_after']}",
                flush=True,
            )
    summary = {
        name: {
            "elapsed_s": [r["elapsed_s"] for r in runs if r["variant"] == name],
            "hosts_cpu_s": [r["hosts_cpu_s"] for r in runs if r["variant"] == name],
            "all_cpu_s": [
                round(
                    sum(r[k] or 0.0 for k in ("hosts_cpu_s", "bootstrap_cpu_s", "driver_cpu_s")), 2
                )
                for r in runs
                if r["variant"] == name
            ],
        }
        for name, _, _ in variants
    }
    res = {
        "benchmark": "host_job",
        "machine": common.machine(),
        "nodes": a.nodes,
        "algorithm": a.algorithm,
        "workers": a.workers,
        "runs": runs,
        "summary": summary,
        "note": "paired runs on a possibly shared machine: compare within a pair",
    }
    out = common.write_results("host_job", res, a.quick, out=a.out)
    for name, s in summary.items():
        print(f"{name:>8}: job {s['elapsed_s']} s, hosts CPU {s['hosts_cpu_s']} s")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
