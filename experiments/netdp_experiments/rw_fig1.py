"""Figures 1 and 4 of Cyffers, Bellet & Upadhyay (ICML 2024, §7, App. B.1): privacy loss from source
0 against shortest-path distance on n ≈ 2048 synthetic graphs (complete, hypercube "exponential",
Erdős–Rényi, geometric, grid), random walk vs gossip (Muffliato), anonymous sender (Fig. 1) and
known sender (Fig. 4, App. B.1).

Conventions of the authors' code: coded Hamilton weights, α = 2, σ = 1 (LDP level
α/(2σ²) = 1 per contribution), T_walk and T_gossip from the one-sided gap, N_u = T/n, values
clipped to [0, 1], the source's own entry 1. Columns:
* `rw`: the code's `priv_global` (Theorem 3 with ln T, N_u = T/n): α T ln T/(σ²n²) + αT/(σ²n)·L_0v,
  L = −ln(I − W + 11ᵀ/n) from one eigendecomposition;
* `rw_exact`: the exact Lemma-2 value N_u·(α/σ²)·S_0v(T) (H_T, all tails; eq. (13));
* `rw_known_code`: Fig. 4 as the code draws it, max over v's neighbours w of the code value, with
  the source's own entry L_uu (App. B.1, as the code does); `rw_known`: netdp's known-sender form,
  S_uu := 1/2 (the neighbours of u get the LDP level: no amplification, docs/errata.md);
* `gossip`: Muffliato's paper bound, code convention (t = 1..T_gossip, plain powers W^t;
  `gossip_paper_bound.paper_bound_outgoing`).
None of these is a guarantee (docs/errata.md; gossip_paper_bound's docstring); they reproduce the
figures.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from netdp_experiments.rw_graphs import code_horizons, synthetic_graphs
from netdp_node.privacy.gossip import fixed_schedule
from netdp_node.privacy.gossip_paper_bound import paper_bound_outgoing
from netdp_node.privacy.rw_sgd import harmonic, power_sums, transition_matrix

ALPHA, SIGMA = 2.0, 1.0
# independently computed reference tables (hypercube: per distance; grid: selected distances; means
# over v ≠ u)
SPEC = {
    "exponential": {
        "gap": 0.166667,
        "T_walk": 1150,
        "T_gossip": 19,
        "rw": {
            1: 0.11658,
            2: 0.015314,
            3: 0.0054436,
            4: 0.0033864,
            5: 0.0027150,
            6: 0.0024194,
            8: 0.0021604,
            10: 0.0020421,
        },
        "rw_known_code": {
            1: 0.16052,
            2: 0.11658,
            3: 0.015314,
            4: 0.0054436,
            5: 0.0033864,
            6: 0.0027150,
            8: 0.0022597,
            10: 0.0020922,
        },
        "gossip": {
            1: 1.0,
            2: 0.64163,
            3: 0.24493,
            4: 0.12463,
            5: 0.075202,
            6: 0.050729,
            8: 0.026895,
            10: 0.015787,
        },
        "rw_exact": {
            1: 0.11690,
            2: 0.015631,
            3: 0.0057603,
            4: 0.0037032,
            5: 0.0030317,
            6: 0.0027361,
            8: 0.0024771,
            10: 0.0023589,
        },
        "mean": {"rw": 3.79e-3, "rw_known_code": 8.13e-3, "gossip": 9.95e-2},
    },
    "grid": {
        "gap": 0.000985116,
        "T_walk": 193225,
        "T_gossip": 243,
        "rw": {20: 0.9746, 25: 0.8298, 30: 0.6648, 40: 0.5071, 60: 0.4169},
        "gossip": {15: 0.946, 20: 0.559, 25: 0.130, 30: 0.0226, 40: 3.3e-4},
        "mean": {"rw": 0.569, "gossip": 0.120},
    },
    "erdos-renyi": {
        "gap": 0.0738,
        "T_walk": 2600,
        "T_gossip": 29,
        "rw": {1: 0.343, 2: 0.0267, 3: 0.0086, 4: 0.0069},
        "gossip": {1: 1.0, 2: 0.495, 3: 0.132, 4: 0.094},
        "mean": {"rw": 9.3e-3, "gossip": 0.118},
        "note": "one draw, the spec's seed",
    },
    "geometric": {
        "gap": 0.00456,
        "T_walk": 41850,
        "T_gossip": 113,
        "rw": {1: 1.0, 2: 0.664, 3: 0.347, 4: 0.235, 5: 0.187, 6: 0.157, 7: 0.137, 8: 0.119},
        "gossip": {1: 1, 2: 1, 3: 1, 4: 1, 5: 0.995, 6: 0.906, 7: 0.528, 8: 0.226},
        "mean": {"rw": 0.184, "gossip": 0.470},
        "note": "one draw, the spec's rng",
    },
}


def graph_losses(g: nx.Graph, u: int = 0) -> dict[str, Any]:
    n = g.number_of_nodes()
    edges = list(g.edges())
    W = transition_matrix(n, edges)
    lam, phi = np.linalg.eigh(W)
    hz = code_horizons(lam, n, SIGMA)
    T, Tg = hz["T_walk"], hz["T_gossip"]
    N = T / n
    # L = Σ_{i≥2} φ_i φ_iᵀ (−ln(1 − λ_i)) (the top eigenpair dropped, as the code does)
    top = np.argmax(lam)
    keep = np.arange(n) != top
    lrow = (phi[u, keep] * -np.log(np.clip(1 - lam[keep], 1e-300, None))) @ phi[:, keep].T
    code = ALPHA * T * math.log(T) / (SIGMA**2 * n * n) + ALPHA * T / (SIGMA**2 * n) * lrow
    code_self = code[u]
    code[u] = 0.0
    S = (phi[u] * power_sums(lam, T)) @ phi.T
    exact = N * ALPHA / SIGMA**2 * S
    nb = [list(g.neighbors(v)) for v in range(n)]
    with_self = code.copy()
    with_self[u] = code_self
    known_code = np.array([max(with_self[w] for w in nb[v]) for v in range(n)])
    half = exact.copy()
    half[u] = N * ALPHA / (2 * SIGMA**2) * 1.0  # S_uu := 1/2: the direct hop, no amplification
    known = np.array([max(half[w] for w in nb[v]) for v in range(n)])
    sched = fixed_schedule(n, edges, Tg, weights=sp.csr_array(W))
    gossip = (
        ALPHA / (2 * SIGMA**2) * paper_bound_outgoing(sched, u, convention="code", method="eigen")
    )
    cols = {
        "rw": code,
        "rw_exact": exact,
        "rw_known_code": known_code,
        "rw_known": known,
        "gossip": gossip,
    }
    for k, v in cols.items():
        cols[k] = np.clip(v, 0.0, 1.0)
        cols[k][u] = 1.0
    dist = nx.single_source_shortest_path_length(g, u)
    dmax = max(dist.values())
    rows = []
    for d in range(1, dmax + 1):
        idx = [v for v, dv in dist.items() if dv == d]
        row: dict[str, Any] = {"distance": d, "count": len(idx)}
        for k, v in cols.items():
            vals = v[idx]
            row[k] = {
                "mean": float(vals.mean()),
                "min": float(vals.min()),
                "max": float(vals.max()),
            }
        rows.append(row)
    others = np.arange(n) != u
    return {
        "n": n,
        "edges": len(edges),
        "mean_degree": 2 * len(edges) / n,
        **hz,
        "N_u": N,
        "H_T": harmonic(T),
        "means": {k: float(v[others].mean()) for k, v in cols.items()},
        "rows": rows,
    }


def run(name: str, args: Any) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    graphs = synthetic_graphs(quick)
    res: dict[str, Any] = {
        "params": {
            "alpha": ALPHA,
            "sigma": SIGMA,
            "source": 0,
            "weights": "coded Hamilton 1/(max(d_u, d_v)+1)",
            "quick": quick,
        },
        "figure": "Fig. 4 (known sender)" if name.endswith("fig4") else "Fig. 1 (anonymous sender)",
        "graphs": {},
    }
    summary = []
    for gname, g in graphs.items():
        out = graph_losses(g)
        if not quick and gname in SPEC:
            out["spec"] = SPEC[gname]
        res["graphs"][gname] = out
        rw_key = "rw_known_code" if name.endswith("fig4") else "rw"
        d1 = out["rows"][0]
        summary.append(
            f"{gname:<12} n={out['n']:<5} gap={out['gap']:.4g} T_walk={out['T_walk']} "
            f"T_gossip={out['T_gossip']}: distance 1 rw {d1[rw_key]['mean']:.4g} vs "
            f"gossip {d1['gossip']['mean']:.4g}; mean over v≠u rw "
            f"{out['means'][rw_key]:.4g} vs gossip {out['means']['gossip']:.4g}"
        )
    res["summary"] = summary
    return res


def plot(res: dict[str, Any], path: Any) -> None:
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    known = res["figure"].startswith("Fig. 4")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = dict(
        zip(res["graphs"], ("tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red"))
    )
    for ax, keys, title in (
        (
            axes[0],
            ("rw_known_code" if known else "rw", "gossip"),
            res["figure"] + ": random walk (solid) vs gossip (dashed)",
        ),
        (axes[1], ("rw_known", "rw"), "known sender, S_uu = 1/2 (solid) vs anonymous (dotted)"),
    ):
        for gname, out in res["graphs"].items():
            d = [r["distance"] for r in out["rows"]][:-1] or [1]  # the code drops the last
            for key, ls in zip(keys, ("-", "--" if keys[1] == "gossip" else ":")):
                mean = [r[key]["mean"] for r in out["rows"]][: len(d)]
                lo = [r[key]["min"] for r in out["rows"]][: len(d)]
                hi = [r[key]["max"] for r in out["rows"]][: len(d)]
                err = [
                    np.maximum(0.0, np.subtract(mean, lo)),
                    np.maximum(0.0, np.subtract(hi, mean)),
                ]
                ax.errorbar(
                    d,
                    mean,
                    yerr=err,
                    color=colors[gname],
                    ls=ls,
                    lw=1,
                    capsize=2,
                    label=f"{gname} {key}",
                )
        ax.axhline(1.0, color="k", lw=0.8, label="LDP loss")
        ax.set_yscale("log", base=2)
        ax.set_ylim(1e-5, 1.2)
        ax.set_xlim(0, 25.5)
        ax.set_xlabel("shortest-path distance from the source")
        ax.set_ylabel("privacy loss (α = 2, σ = 1)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
