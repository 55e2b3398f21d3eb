"""`netdp demo --nodes N` as a user runs it, with every process it starts watched: memory per node,
file descriptors, start-up, job time and CPU.

    python benchmarks/bench_demo_scale.py                         # N = 1000, walk-sum
    python benchmarks/bench_demo_scale.py --nodes 300 --algorithm walk-sum
    python benchmarks/bench_demo_scale.py --quick                 # N = 60

Runs (--reps, default 3) of `netdp demo --nodes N --algorithm A --json` (defaults otherwise: one
host process per core, T = 10·n for the walks), each in a fresh process. While one runs, every
second, each process of its tree (the demo, the bootstrap, the host processes) is read from /proc:
RSS and PSS (/proc/PID/smaps_rollup; PSS splits the pages shared between processes), open file
descriptors and CPU time. Recorded: the demo's own start-up and job time (`startup_s`, `elapsed_s` of its
--json: start-up is until every node registered, the job from submission to the last node's
result), the wall time and exit status of the command, the peak RSS / PSS / descriptors of each
process, the hosts' peak PSS divided by the nodes they host (memory per node), start-up per node,
the CPU time of every process, the estimate's noise std against local DP's, and the load average
before and after. Writes benchmarks/results/demo_scale-<N>.json (--quick: demo_scale-quick.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

TICK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (from /proc/PID/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                out.append(int(k))
                todo.append(int(k))
    return out


def sample(pid: int) -> dict[str, Any] | None:
    """RSS, PSS (kB), open descriptors, CPU seconds and the command of one process."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        roll = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    mem = {}
    for line in roll:
        k, _, v = line.partition(":")
        if v.strip().endswith("kB"):
            mem[k.strip()] = int(v.split()[0])
    fields = stat[stat.rindex(")") + 2 :].split()
    words = [c.decode(errors="replace") for c in cmd if c]
    return {
        "rss_kb": mem.get("Rss", 0),
        "pss_kb": mem.get("Pss", 0),
        "fds": fds,
        "cpu_s": (int(fields[11]) + int(fields[12])) / TICK,
        "role": role(words),
        "hosted": words.count("--certs") or None,
    }


def role(words: list[str]) -> str:
    if "demo" in words:
        return "demo"
    if "bootstrap" in words:
        return "bootstrap"
    if "node" in words:
        return "host"
    return "other"


def run(nodes: int, algorithm: str, extra: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "netdp_node.cli",
        "demo",
        "--nodes",
        str(nodes),
        "--algorithm",
        algorithm,
        "--json",
        *extra,
    ]
    load_before = common.load_average()
    peaks: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=tempfile.gettempdir())
        while p.poll() is None:
            for pid in [p.pid, *children(p.pid)]:
                s = sample(pid)
                if s is None:
                    continue
                peak = peaks.setdefault(pid, dict(s))
                for k in ("rss_kb", "pss_kb", "fds"):
                    peak[k] = max(peak[k], s[k])
                peak["cpu_s"] = s["cpu_s"]  # the last reading: CPU only grows
                peak["role"], peak["hosted"] = s["role"], s["hosted"]  # (after its exec)
            time.sleep(1.0)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    load_after = common.load_average()
    res: dict[str, Any] = {}
    if p.returncode == 0:
        res = json.loads(stdout)
    procs = sorted(peaks.values(), key=lambda s: s["role"])
    hosts = [s for s in procs if s["role"] == "host"]
    hosted = sum(s["hosted"] or 0 for s in hosts) or nodes
    startup = res.get("startup_s")
    return {
        "command": " ".join(cmd[2:]),
        "exit_status": p.returncode,
        "wall_s": round(wall, 1),
        "startup_s": startup,
        "startup_per_node_ms": None if startup is None else round(1000 * startup / nodes, 2),
        "job_s": res.get("elapsed_s"),
        "netdp_std": res.get("netdp_std"),
        "ldp_std": res.get("ldp_std"),
        "processes": procs,
        "hosts_peak_pss_mb_per_node": round(sum(s["pss_kb"] for s in hosts) / 1024 / hosted, 2)
        if hosts
        else None,
        "hosts_peak_rss_mb_per_node": round(sum(s["rss_kb"] for s in hosts) / 1024 / hosted, 2)
        if hosts
        else None,
        "peak_fds_per_host": [s["fds"] for s in hosts],
        "cpu_s_all": round(sum(s["cpu_s"] for s in procs), 1),
        "load_before": load_before,
        "load_after": load_after,
        "stderr_tail": stderr.splitlines()[-5:],
    }


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--algorithm", default="walk-sum")
    ap.add_argument("extra", nargs="*", help="more `netdp demo` arguments (after --)")
    a = ap.parse_args()
    nodes = 60 if a.quick else a.nodes
    runs = []
    for i in range(common.repetitions(a)):
        r = run(nodes, a.algorithm, a.extra)
        runs.append(r)
        print(f"run {i + 1}:")
        keys = ("exit_status", "wall_s", "startup_s", "startup_per_node_ms", "job_s", "cpu_s_all")
        for k in keys:
            print(f"{k:>24}: {r[k]}")
        print(
            f"{'hosts PSS / RSS per node':>24}: {r['hosts_peak_pss_mb_per_node']} / "
            f"{r['hosts_peak_rss_mb_per_node']} MB"
        )
        print(f"{'peak fds per host':>24}: {r['peak_fds_per_host']}")
        print(f"{'std vs local DP':>24}: {r['netdp_std']} vs {r['ldp_std']}")
    summary = {
        k: [r[k] for r in runs]
        for k in ("job_s", "startup_s", "wall_s", "cpu_s_all", "hosts_peak_pss_mb_per_node")
    }
    data = {
        "benchmark": "demo_scale",
        "machine": common.machine(),
        "nodes": nodes,
        "algorithm": a.algorithm,
        "summary": summary,
        "runs": runs,
    }
    path = common.write_results(f"demo_scale-{nodes}", data, a.quick)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
