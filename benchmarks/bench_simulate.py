"""`netdp simulate` benchmark: the daemon's runtime (NodeRuntime, in-memory ledgers, in-memory
transport) for n simulated nodes on a virtual clock, walk-sum at n = 1,000 and 10,000 (and
100,000 with --big), and Muffliato on an n = 2048 hypercube (--muffliato).

    python benchmarks/bench_simulate.py                  # walk-sum n = 1,000 and 10,000
    python benchmarks/bench_simulate.py --big            # ... and n = 100,000
    python benchmarks/bench_simulate.py --muffliato      # ... and Muffliato, 2048-node hypercube
    python benchmarks/bench_simulate.py --quick          # walk-sum n = 1,000 only

Each case runs in a fresh child process, so that its peak memory (ru_maxrss: the resident set of
that process, including the interpreter and NumPy) is its own; the wall time is the simulation's
(`Simulator.run`). The load average of the machine is recorded before and after each case (the
machine may be shared). Writes benchmarks/results/simulate.json (--quick: simulate-quick.json).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_s() -> float:
    """CPU seconds (user + system) this process used: unlike the wall time, not stretched by
    the other processes of a loaded machine."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def walk_sum(n: int, T: int, seed: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    from netdp_node.algorithms import get_algorithm
    from netdp_node.simulate import Simulator, synthetic_data

    ids = [f"node-{i}" for i in range(1, n + 1)]
    params = get_algorithm("walk-sum").validate({"T": T}, n)
    data, _ = synthetic_data("walk-sum", ids, params, seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res = Simulator("walk-sum", ids, params, data, seed=seed, record="walk").run()
    q.put(
        {
            "algorithm": "walk-sum",
            "n": n,
            "T": T,
            "wall_s": res.wall_s,
            "virtual_s": res.virtual_time,
            "messages": res.events,
            "steps": len(res.holders),
            "outputs": len(res.outputs),
            "refused": res.refused,
            "cpu_s": _cpu_s(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_run_mb": rss_before,
        }
    )


def muffliato(n: int, T: int, seed: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    from netdp_node.algorithms import get_algorithm
    from netdp_node.simulate import Simulator, synthetic_data

    ids = [f"node-{i}" for i in range(1, n + 1)]
    given: dict[str, Any] = {"graph": "hypercube", **({"T": T} if T > 0 else {})}
    params = get_algorithm("muffliato").validate(given, n)
    data, _ = synthetic_data("muffliato", ids, params, seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res = Simulator("muffliato", ids, params, data, seed=seed, record="none").run()
    q.put(
        {
            "algorithm": "muffliato",
            "graph": "hypercube",
            "n": n,
            "T": params["T"],
            "wall_s": res.wall_s,
            "virtual_s": res.virtual_time,
            "messages": res.events,
            "outputs": len(res.outputs),
            "refused": res.refused,
            "cpu_s": _cpu_s(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_run_mb": rss_before,
        }
    )


def run_case(fn: Any, *args: Any, timeout: float = 3600) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    load_before = os.getloadavg()
    p = ctx.Process(target=fn, args=(*args, q))
    p.start()
    try:
        while True:  # bounded: the child's own time, and its exit without a result
            try:
                out: dict[str, Any] = q.get(timeout=5)
                break
            except Exception:  # noqa: BLE001 - queue.Empty: still running?
                timeout -= 5
                if not p.is_alive() or timeout <= 0:
                    raise RuntimeError(
                        f"{fn.__name__}{args}: no result (exit code {p.exitcode})"
                    ) from None
    finally:
        p.join(timeout=60)
    out["load_avg_before"] = [round(x, 2) for x in load_before]
    out["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(
        f"  {out['algorithm']} n={out['n']}: {out['wall_s']:.1f} s ({out['cpu_s']:.1f} s CPU), "
        f"peak RSS "
        f"{out['peak_rss_mb']:.0f} MB, {out['messages']} messages, load "
        f"{out['load_avg_before'][0]:.1f}->{out['load_avg_after'][0]:.1f}",
        flush=True,
    )
    return out


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_total_gb": round(mem_kb / 2**20, 1),
        "commit": commit,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--big", action="store_true", help="also n = 100,000")
    ap.add_argument("--muffliato", action="store_true", help="also Muffliato, 2048-node hypercube")
    ap.add_argument("--sizes", help="walk-sum sizes, comma-separated (overrides the defaults)")
    ap.add_argument(
        "--append", action="store_true", help="add the cases to the existing results file"
    )
    ap.add_argument(
        "--steps-per-node", type=int, default=2, help="walk-sum T = this × n (default 2)"
    )
    ap.add_argument(
        "--muffliato-n",
        type=int,
        default=2048,
        help="Muffliato nodes (a power of two; default 2048)",
    )
    ap.add_argument(
        "--muffliato-T", type=int, default=0, help="Muffliato rounds (default: its calibrated T)"
    )
    a = ap.parse_args()
    sizes = [1_000] if a.quick else [1_000, 10_000] + ([100_000] if a.big else [])
    if a.sizes:
        sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / ("simulate-quick.json" if a.quick else "simulate.json")
    cases = json.loads(path.read_text())["cases"] if a.append and path.exists() else []
    for n in sizes:
        cases.append(run_case(walk_sum, n, a.steps_per_node * n, 0))
    if a.muffliato:
        cases.append(run_case(muffliato, a.muffliato_n, a.muffliato_T, 0))
    out = {
        "benchmark": "netdp simulate: the daemon's runtime per simulated node, virtual clock",
        "cases": cases,
        "machine": machine(),
        "targets": {"walk_sum_100k_wall_s": 300, "walk_sum_100k_peak_rss_gb": 8},
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
