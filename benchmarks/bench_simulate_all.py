"""`netdp simulate` of every algorithm at one size (default n = 2048), each in a fresh process.

    python benchmarks/bench_simulate_all.py                       # every algorithm, n = 2048
    python benchmarks/bench_simulate_all.py --only muffliato --timeout 600

Each case is the command line a user types (`netdp simulate --algorithm A --nodes N --json
--quiet`; muffliato and muffliato-gd with `--param graph=hypercube`, muffliato-random on its
default ring and on the hypercube), so its wall time includes the start-up, the parameter
preparation, the simulation and the accountants. Records per case the wall time, the peak
resident set and CPU time of that process (os.wait4), the simulation's own wall time as the
command reports it (`wall_s`), the job's T (rounds per gossip call, as `validate` prepares it;
None for the others), the load average before and after (a shared machine), the machine, the
tree that ran (the `netdp_node` this Python imports: set PYTHONPATH to measure another checkout
side by side) and the exit status (a case over --timeout is stopped and recorded as such). Writes
benchmarks/results/simulate-<n>.json, or `--out`.
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

import netdp_node

RESULTS = Path(__file__).resolve().parent / "results"
#: the packages a case runs (`_commit`)
CODE = ("netdp", "netdp_node", "netdp_bootstrap")

CASES: list[tuple[str, list[str]]] = [
    ("muffliato", ["--param", "graph=hypercube"]),
    ("muffliato-random", []),
    ("muffliato-random", ["--param", "graph=hypercube"]),
    # the hypercube, not the default ring: on a ring of 2048 the spectral gap sets T = 4,305
    # rounds per step (about 176 million messages in 10 steps); the paper's own experiment with
    # Muffliato-GD (Cyffers et al., NeurIPS 2022, §5 and App. H.5) gossips on expanders (a fresh
    # Erdős–Rényi graph per step, T about 30), where T stays near 20 (hypercube: T = 19)
    ("muffliato-gd", ["--param", "graph=hypercube"]),
    ("ring-sum", []),
    ("ring-sum-r", []),
    ("ring-histogram", []),
    ("walk-sum", []),
    ("walk-histogram", []),
    ("walk-sgd", []),
    ("rw-sgd", []),
    ("inca", []),
]


def rounds(alg: str, extra: list[str], n: int) -> Any:
    """The job's T (synchronous gossip rounds per call; None for the others), as the command line
    prepares it (`validate`), so that a case stopped at --timeout still says which T it ran."""
    from netdp_node.algorithms import get_algorithm  # lazy: start-up cost

    given = dict(get_algorithm(alg).hooks.sim_param_defaults(0.0, 0.0))
    given.update(dict(kv.split("=", 1) for kv in extra[1::2]))
    return get_algorithm(alg).validate(given, n).get("T")


def run(
    alg: str, extra: list[str], n: int, timeout: float, max_memory_gb: float = 0.0
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "netdp_node.cli", "simulate", "--algorithm", alg]
    cmd += ["--nodes", str(n), "--json", "--quiet", *extra]
    load_before = os.getloadavg()
    # `-m` puts the working directory first on the path: from this folder the case runs the
    # netdp_node this script imports (PYTHONPATH or the installed one), not a checkout that happens
    # to be the working directory
    r = common.run_capped(
        cmd, cwd=Path(__file__).resolve().parent, gb=max_memory_gb, timeout=timeout
    )
    case: dict[str, Any] = {
        "algorithm": alg,
        "n": n,
        "args": " ".join(cmd[3:]),
        "T": rounds(alg, extra, n),
        "wall_s": r.wall_s,
        "peak_rss_mb": r.peak_rss_mb,  # this process's own peak (wait4)
        "cpu_s": r.cpu_s,
        "exit": r.code,
        "timed_out": r.timed_out,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if not r.timed_out and r.code == 0:
        res = json.loads(r.stdout)
        case["simulation_wall_s"] = round(float(res.get("wall_s", 0.0)), 1)
        case["events"] = res.get("events")
        case["privacy"] = res.get("privacy")
    else:
        case["stderr_tail"] = r.stderr.decode(errors="replace")[-400:]
    return case


def _commit(tree: Path) -> str:
    """The git commit of the tree the cases ran, with "+dirty" if its code (the packages a case
    imports) has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--", *CODE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _machine() -> dict[str, Any]:
    """The CPU model, its cores and the memory of the machine the case ran on."""
    model = ""
    mem_gb = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "mem_gib": mem_gb}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--only", default="", help="comma-separated algorithms (default: all)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per case (900)")
    ap.add_argument("--label", default="", help="a label for these cases (before, after)")
    ap.add_argument(
        "--out",
        default="",
        help="results file name under benchmarks/results (default simulate-<n>.json)",
    )
    ap.add_argument(
        "--max-memory-gb",
        type=float,
        default=12.0,
        help="address-space cap per case in GB (12; 0: none): IncA at n = 2048 outgrows any",
    )
    a = ap.parse_args()
    only = {x for x in a.only.split(",") if x}
    path = RESULTS / (a.out or f"simulate-{a.nodes}.json")
    tree = Path(netdp_node.__file__).resolve().parent.parent  # what the cases run (PYTHONPATH)
    data = json.loads(path.read_text()) if path.exists() else {"cases": []}
    for alg, extra in CASES:
        if only and alg not in only:
            continue
        case = run(alg, extra, a.nodes, a.timeout, a.max_memory_gb)
        case["label"] = a.label
        case["when"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        case["tree"] = {"path": str(tree), "commit": _commit(tree)}
        case["machine"] = _machine()
        print(json.dumps({k: v for k, v in case.items() if k != "privacy"}), flush=True)
        data["cases"].append(case)
        data["benchmark"] = "netdp simulate of every algorithm (command line; each case's n)"
        path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
