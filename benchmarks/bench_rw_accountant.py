"""Random-walk accountant benchmark (random-walks issue): on the hypercube Q_11 (n = 2048, coded
Hamilton W = (I + A)/12), T = 20,480 (10 contributions per node on average):

* paper: the whole paper-form pairwise matrix S(T) = Φ diag(s_T(λ)) Φᵀ from one eigendecomposition
  (`rw_sgd.pairwise_matrix`). Target < 10 s.
* sound: the sound per-trajectory accountant (docs/accountants.md) for one pair (u = 0, v = 1) with
  1,000 simulated trajectories (`rw_sgd.sound_q`, then `sound_epsilon` at σ = 5, cap 20, δ = 1e-6).
  Target < 60 s. Also reports E[D] at α = 2, σ = 5 without cap or publication, beside the reference
  value 0.0428 (200–300 trajectories).

    python benchmarks/bench_rw_accountant.py [--reps 3] [--quick]

Each part runs in a fresh child process, so its peak memory (ru_maxrss: resident set including the
interpreter and NumPy) is its own. BLAS threads: `--threads` (default 1; on this shared 2-core
machine a multithreaded OpenBLAS eigh of a 256×256 matrix took 2.4 s under load instead of 0.02 s).
Writes benchmarks/results/rw_accountant.json (--quick: rw_accountant-quick.json, n = 256,
T = 2560, 200 trajectories).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import statistics
import time

import common


def _cube(dim: int):  # noqa: ANN202
    import networkx as nx

    from netdp_node.privacy.rw_sgd import transition_matrix

    g = nx.convert_node_labels_to_integers(nx.hypercube_graph(dim), ordering="sorted")
    return transition_matrix(2**dim, list(g.edges()))


def paper_part(dim: int, T: int, q: mp.Queue) -> None:
    from netdp_node.privacy.rw_sgd import hypercube_closed_form, pairwise_matrix

    W = _cube(dim)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    S = pairwise_matrix(W, T)
    dt = time.perf_counter() - t0
    q.put(
        {
            "seconds": dt,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": base,
            "S_01": float(S[0, 1]),
            "S_01_closed_form": hypercube_closed_form(dim, 1, T),
            "max_abs_error_vs_closed_form": max(
                abs(float(S[0, (1 << j) - 1]) - hypercube_closed_form(dim, j, T))
                for j in range(dim + 1)
            ),
        }
    )


def sound_part(dim: int, T: int, walks: int, q: mp.Queue) -> None:
    import numpy as np

    from netdp_node.privacy.rw_sgd import ldp_epsilon, sound_epsilon, sound_q

    W = _cube(dim)
    n = 2**dim
    cap = 2 * T // n
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    qs = sound_q(W, 0, [1], T, cap, walks, np.random.default_rng(0), release=True)[1]
    eps, delta, _ = sound_epsilon(qs, 5.0, cap, 1e-6)
    dt = time.perf_counter() - t0
    q_nocap = sound_q(W, 0, [1], T, 0, min(walks, 300), np.random.default_rng(1), release=False)[1]
    q.put(
        {
            "seconds": dt,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": base,
            "walks": walks,
            "cap": cap,
            "sigma": 5.0,
            "epsilon": eps,
            "delta": delta,
            "ldp_epsilon_at_cap": ldp_epsilon(cap, 5.0, 1e-6),
            "mean_D_alpha2_sigma5_nocap_nopublication": float(2 / 50 * q_nocap.mean()),
            "spec_mean_D": 0.0428 if dim == 11 else None,
        }
    )


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads of the children")
    a = ap.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)  # read by the spawned children when NumPy loads
    dim, T, walks = (8, 2560, 200) if a.quick else (11, 20_480, 1000)
    reps = common.repetitions(a)
    facts = common.machine(["numpy", "scipy", "networkx"])
    paper, sound = [], []
    for r in range(reps):
        paper.append(common.in_child(paper_part, dim, T))
        sound.append(common.in_child(sound_part, dim, T, walks))
        print(
            f"  rep {r + 1}: pairwise matrix {paper[-1]['seconds']:.2f} s "
            f"({paper[-1]['peak_rss_mb']:.0f} MB peak RSS); sound accountant "
            f"{sound[-1]['seconds']:.2f} s ({sound[-1]['peak_rss_mb']:.0f} MB)",
            flush=True,
        )
    med = {
        "paper_s": statistics.median(x["seconds"] for x in paper),
        "paper_peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in paper),
        "sound_s": statistics.median(x["seconds"] for x in sound),
        "sound_peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in sound),
    }
    out = {
        "benchmark": "random-walk accountants: paper-form pairwise matrix (one eigh) and the "
        "sound per-trajectory accountant for one pair",
        "graph": f"hypercube Q_{dim}, coded Hamilton W",
        "n": 2**dim,
        "T": T,
        "walks": walks,
        "repetitions": reps,
        "blas_threads": a.threads,
        "median": med,
        "paper_runs": paper,
        "sound_runs": sound,
        "targets_s": {"paper": 10.0, "sound": 60.0},
        "meets_targets": {"paper": med["paper_s"] < 10.0, "sound": med["sound_s"] < 60.0},
        "machine": facts,
    }
    path = common.write_results("rw_accountant", out, a.quick)
    print(
        f"n={2**dim} T={T}: pairwise matrix {med['paper_s']:.2f} s (target < 10 s), sound "
        f"accountant {med['sound_s']:.2f} s for {walks} walks (target < 60 s); wrote {path}"
    )


if __name__ == "__main__":
    main()
