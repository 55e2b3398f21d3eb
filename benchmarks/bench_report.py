"""The demo's report step alone: `netdp_node.report.ledger_report` of every node of a job, read
from real SQLite ledgers (`netdp simulate --ledgers DIR --record full` writes them as the daemons
would), as `netdp demo` gathers it after the job.

    netdp simulate --algorithm walk-sum --nodes 1000 --ledgers /tmp/l1000 --record full --quiet
    python benchmarks/bench_report.py /tmp/l1000 --label after
    python benchmarks/bench_report.py /tmp/l1000 --limit 50 --label before   # 50 nodes of 1000

Runs in the current interpreter (PYTHONPATH picks the code under test: a worktree of an older
commit measures "before"). Records the wall and CPU time of the reports (the first report pays the
imports: it is timed apart), the load average before and after, and a digest of every loss of
every report (ε, δ, method per peer, per job and total), so that two runs over the same ledgers
can be compared value for value. Appends a case to benchmarks/results/report.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("root", help="a folder of ledger directories (netdp simulate --ledgers)")
    ap.add_argument("--job", default="sim", help="the job id (netdp simulate: sim)")
    ap.add_argument("--limit", type=int, default=0, help="only K nodes, evenly spread (0: all)")
    ap.add_argument("--label", default="", help="a label for the case (before, after)")
    ap.add_argument("--out", default=str(RESULTS / "report.json"))
    a = ap.parse_args()

    from netdp_node.report import ledger_dirs, ledger_report

    dirs = ledger_dirs([a.root])
    n = len(dirs)
    if a.limit:
        dirs = dirs[:: max(1, n // a.limit)][: a.limit]  # evenly spread over the nodes
    load_before = os.getloadavg()
    digest = hashlib.sha256()
    worst = []
    t0, c0 = time.perf_counter(), _cpu_s()
    first_s = 0.0
    for i, d in enumerate(dirs):
        rep = ledger_report(d, delta_target=1e-5, job_id=a.job)
        if i == 0:
            first_s = time.perf_counter() - t0
        j = rep["jobs"][0]
        worst.append(j["epsilon"])
        for row in (*j["peers"], *rep["total"]["peers"]):
            digest.update(
                f"{rep['node']}|{row['peer']}|{row['epsilon']!r}|{row['delta']!r}|"
                f"{row['method']}\n".encode()
            )
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    rest = len(dirs) - 1
    per_node = (wall - first_s) / rest if rest else wall
    case: dict[str, Any] = {
        "label": a.label,
        "nodes": n,
        "reports": len(dirs),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "first_report_s": round(first_s, 3),
        "per_report_s": round(per_node, 5),
        "all_nodes_estimate_s": round(first_s + per_node * (n - 1), 1),
        "epsilon_max": max(worst),
        "losses_sha256": digest.hexdigest(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    print(json.dumps(case))
    out = Path(a.out)
    data = json.loads(out.read_text()) if out.exists() else {"cases": []}
    data["benchmark"] = (
        "the demo's report step: ledger_report of every node, walk-sum ledgers written by "
        "netdp simulate --ledgers (delta_target 1e-5)"
    )
    data["cases"].append(case)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
