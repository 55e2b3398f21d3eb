"""Simulator benchmark (token-walk issue): a simulated walk-sum of T = 204,800 steps over
n = 2048 nodes through netdp's own engines (`netdp simulate`'s event loop, record="walk"), then the
full walk-conditional audit of every ordered pair (2048 × 2047). Target: under 60 s here.

    python benchmarks/bench_walk_sim.py            # n = 2048, T = 204800, 3 repetitions
    python benchmarks/bench_walk_sim.py --quick    # n = 256, T = 25600, 1 repetition

Each repetition runs in a fresh child process, so that its peak memory (ru_maxrss: resident set,
including the Python interpreter, NumPy and the engines) is its own. Writes
benchmarks/results/walk_sim.json (--quick: walk_sim-quick.json).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import statistics
import time

import common


def one(n: int, T: int, seed: int, q: mp.Queue) -> None:
    import numpy as np

    from netdp_node.algorithms import get_algorithm
    from netdp_node.privacy.walk_audit import audit_walk
    from netdp_node.simulate import Simulator, synthetic_data

    ids = [f"node-{i}" for i in range(1, n + 1)]
    params = get_algorithm("walk-sum").prepare({"T": T}, n)
    data, _ = synthetic_data("walk-sum", ids, params, seed)
    t0 = time.perf_counter()
    res = Simulator("walk-sum", ids, params, data, seed=seed, record="walk").run()
    t_sim = time.perf_counter() - t0
    t1 = time.perf_counter()
    audit = audit_walk(np.asarray(res.holders), n, params["epsilon0"], params["delta"])
    t_audit = time.perf_counter() - t1
    q.put(
        {
            "sim_s": t_sim,
            "audit_s": t_audit,
            "total_s": t_sim + t_audit,
            "events": res.events,
            "steps": len(res.holders),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "ndp_mean": audit.ndp_mean,
            "ndp_max": audit.ndp_max,
            "ldp_mean": audit.ldp_mean,
            "pairs": n * (n - 1),
        }
    )


def main() -> None:
    ap = common.parser(__doc__)
    a = ap.parse_args()
    n, T = (256, 25_600) if a.quick else (2048, 204_800)
    reps = common.repetitions(a)
    facts = common.machine(["numpy"])
    runs = []
    for r in range(reps):
        runs.append(common.in_child(one, n, T, r, timeout=1800))
        print(
            f"  rep {r + 1}: simulate {runs[-1]['sim_s']:.1f} s + audit {runs[-1]['audit_s']:.2f} s"
            f", peak RSS {runs[-1]['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    med = {
        k: statistics.median(x[k] for x in runs)
        for k in ("sim_s", "audit_s", "total_s", "peak_rss_mb")
    }
    out = {
        "benchmark": "walk-sum simulation + full per-pair walk audit",
        "n": n,
        "T": T,
        "repetitions": reps,
        "median": med,
        "runs": runs,
        "target_total_s": 60.0,
        "meets_target": med["total_s"] < 60.0,
        "machine": facts,
    }
    path = common.write_results("walk_sim", out, a.quick)
    print(
        f"n={n} T={T}: median {med['total_s']:.1f} s (simulate {med['sim_s']:.1f} s, audit "
        f"{med['audit_s']:.2f} s), peak RSS {med['peak_rss_mb']:.0f} MB; target < 60 s: "
        f"{'met' if out['meets_target'] else 'NOT met'}; wrote {path}"
    )


if __name__ == "__main__":
    main()
