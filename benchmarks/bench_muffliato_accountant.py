"""Muffliato accountant benchmark (issue 5): the exact joint-view accountant
(`gossip_joint_view.joint_view`; docs/errata.md) for ONE observer (node 0) at n ≈ 2048, on the
Fig. 1(a) graphs with their T (Chebyshev schedule, Metropolis weights). Target: < 30 s.

    python benchmarks/bench_muffliato_accountant.py           # hypercube, ER, grid; 3 repetitions
    python benchmarks/bench_muffliato_accountant.py --all     # + the random geometric graph (3 reps too)
    python benchmarks/bench_muffliato_accountant.py --graphs random_geometric   # that one only
    python benchmarks/bench_muffliato_accountant.py --quick   # n ≈ 128, 1 repetition

Each measurement runs in a fresh child process: time of `joint_view` alone (the schedule is built
before the clock starts), the peak of Python-tracked allocations during the call (tracemalloc;
NumPy and SciPy arrays included) and the child's peak resident set (ru_maxrss: interpreter, NumPy,
the schedule and the call). Writes benchmarks/results/muffliato_accountant.json (--quick:
muffliato_accountant-quick.json).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import statistics
import time

import common

TARGET_S = 30.0


def one(graph: str, quick: bool, q: mp.Queue) -> None:
    import tracemalloc

    import numpy as np

    from netdp_experiments.muffliato_common import gap_2, gap_def2, metropolis_csr, t_mix
    from netdp_experiments.muffliato_fig1a import graphs
    from netdp_node.privacy.gossip import chebyshev_gamma, fixed_schedule
    from netdp_node.privacy.gossip_joint_view import joint_view

    n, edges = graphs(quick)[graph]
    W = metropolis_csr(n, np.asarray(edges))
    T = t_mix(n, 1.0, gap_2(W))
    sched = fixed_schedule(n, edges, T, gamma=chebyshev_gamma(min(1.0, gap_def2(W))))
    tracemalloc.start()
    t0 = time.perf_counter()
    jv = joint_view(sched, 0)
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    q.put(
        {
            "graph": graph,
            "n": n,
            "T": T,
            "rows": jv.rows,
            "rank": jv.rank,
            "method": jv.method,
            "resolved": jv.resolved,
            "margin": jv.margin,
            "seconds": dt,
            "peak_traced_mb": peak / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "full_leak_nodes": int(np.sum(jv.full)) - 1,
        }
    )


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--all", action="store_true", help="include the random geometric graph")
    ap.add_argument("--graphs", help="comma-separated subset (written to a file of its own)")
    a = ap.parse_args()
    reps = common.repetitions(a)
    names = ["hypercube", "erdos_renyi", "grid"] + (["random_geometric"] if a.all else [])
    if a.graphs:
        names = a.graphs.split(",")
    facts = common.machine(["numpy", "scipy"])
    out_graphs = {}
    for g in names:
        runs = []
        for r in range(reps):
            runs.append(common.in_child(one, g, a.quick))
            x = runs[-1]
            print(
                f"  {g} rep {r + 1}: n={x['n']} T={x['T']} rows={x['rows']} rank={x['rank']} "
                f"({x['method']}): {x['seconds']:.2f} s, traced peak "
                f"{x['peak_traced_mb']:.0f} MB, RSS {x['peak_rss_mb']:.0f} MB",
                flush=True,
            )
        med = {
            k: statistics.median(x[k] for x in runs)
            for k in ("seconds", "peak_traced_mb", "peak_rss_mb")
        }
        out_graphs[g] = {"median": med, "runs": runs, "meets_target": med["seconds"] < TARGET_S}
    out = {
        "benchmark": "exact joint-view accountant, one observer (node 0), Fig. 1(a) graphs",
        "target_s": TARGET_S,
        "repetitions": reps,
        "graphs": out_graphs,
        "machine": facts,
    }
    stem = "muffliato_accountant" + ("-" + "-".join(names) if a.graphs else "")
    path = common.write_results(stem, out, a.quick)
    for g, r in out_graphs.items():
        print(
            f"{g}: median {r['median']['seconds']:.2f} s, traced peak "
            f"{r['median']['peak_traced_mb']:.0f} MB; target < {TARGET_S:.0f} s: "
            f"{'met' if r['meets_target'] else 'NOT met'}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
