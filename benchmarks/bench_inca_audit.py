"""IncA audit benchmark (issue 7): the exact privacy audit of one execution with n = 200 parties and
T = 20 iterations (k = 1), against a colluding set of 30% and an eavesdropper who sees 50% of the
messages, plus the calibration of σ_Δ on that execution (Theorem 4.1 of Sabater, Ben Mokhtar &
Ramon 2025).

    OMP_NUM_THREADS=1 python benchmarks/bench_inca_audit.py           # n = 200, T = 20, 3 reps
    OMP_NUM_THREADS=1 python benchmarks/bench_inca_audit.py --quick   # n = 50, T = 10, 1 rep

Phases timed (`netdp_node.privacy.inca_audit`): `linear_view` (coefficient rows of every observed
message, Eq. 10, and the SVD row reduction), `account` (M = σ_η²AAᵀ + σ_Δ²BBᵀ, Cholesky
and triangular solve, per-party ε, Theorem 4.1), `calibrate` (one generalised eigendecomposition
and a bisection on σ_Δ), `explain` (Lemma 4.4 rank condition and Theorem 4.8 strong connectivity).
The linear system's size is recorded (rows observed, honest unknowns n_H(T+1), rank after
reduction).
Each repetition runs in a fresh child process so that its peak memory (ru_maxrss, including the
interpreter and NumPy) is its own. Writes benchmarks/results/inca_audit.json (--quick:
inca_audit-quick.json).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import statistics
import time

import common

PHASES = ("view_s", "account_s", "calibrate_s", "explain_s", "total_s")


def one(n: int, T: int, k: int, seed: int, q: mp.Queue) -> None:
    import numpy as np

    from netdp_node.privacy import inca_audit as ia

    rng = np.random.default_rng(seed)
    ex = ia.make_execution(n, k, T, seed=seed)
    out = {}
    for label, adv in (
        ("cdp30", {"corrupted": ia.sample_corrupted(n, int(0.3 * n), rng)}),
        ("edp50", {"observed": ia.sample_observed(ex, 0.5, rng)}),
    ):
        t0 = time.perf_counter()
        view = ia.linear_view(ex, **adv)
        t1 = time.perf_counter()
        cal = ia.calibrate([view], epsilon=1.0, delta=1e-5, kappa=2.0)
        t2 = time.perf_counter()
        audit = ia.account(
            ex, sigma_eta=cal.sigma_eta, sigma_delta=cal.sigma_delta, delta=1e-5, view=view
        )
        t3 = time.perf_counter()
        e = ia.explain(ex, **adv)
        t4 = time.perf_counter()
        out[label] = {
            "view_s": t1 - t0,
            "calibrate_s": t2 - t1,
            "account_s": t3 - t2,
            "explain_s": t4 - t3,
            "total_s": t4 - t0,
            "rows_observed": view.rows_observed,
            "unknowns": int(view.A.shape[1] + view.B.shape[1]),
            "rank": view.rank,
            "n_honest": int(view.honest.size),
            "sigma_eta": cal.sigma_eta,
            "sigma_delta": cal.sigma_delta,
            "epsilon_paper_max": audit.epsilon_paper_max,
            "epsilon_analytic_max": audit.epsilon_max,
            "rank_condition": e["rank_condition"]["holds"],
            "strongly_connected": e["strongly_connected"],
        }
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    q.put(out)


def main() -> None:
    ap = common.parser(__doc__)
    a = ap.parse_args()
    n, T, k = (50, 10, 1) if a.quick else (200, 20, 1)
    reps = common.repetitions(a)
    facts = common.machine(["numpy", "scipy"])
    runs = []
    for r in range(reps):
        runs.append(common.in_child(one, n, T, k, r))
        print(
            f"  rep {r + 1}: "
            + ", ".join(
                f"{lbl} {runs[-1][lbl]['total_s']:.1f} s (rows {runs[-1][lbl]['rows_observed']}, "
                f"rank {runs[-1][lbl]['rank']})"
                for lbl in ("cdp30", "edp50")
            )
            + f", peak RSS {runs[-1]['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    med = {
        lbl: {ph: statistics.median(x[lbl][ph] for x in runs) for ph in PHASES}
        for lbl in ("cdp30", "edp50")
    }
    med["peak_rss_mb"] = statistics.median(x["peak_rss_mb"] for x in runs)
    out = {
        "benchmark": "IncA exact audit of one execution (linear system, Theorem 4.1, calibration,"
        " rank condition)",
        "n": n,
        "T": T,
        "k": k,
        "repetitions": reps,
        "median": med,
        "runs": runs,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "machine": facts,
    }
    path = common.write_results("inca_audit", out, a.quick)
    print(
        f"n={n} T={T} k={k}: median C-DP 30% {med['cdp30']['total_s']:.1f} s, E-DP 50% "
        f"{med['edp50']['total_s']:.1f} s, peak RSS {med['peak_rss_mb']:.0f} MB; wrote {path}"
    )


if __name__ == "__main__":
    main()
