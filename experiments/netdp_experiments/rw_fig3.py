"""Figure 3 of Cyffers, Bellet & Upadhyay (ICML 2024, §7): on real graphs, the random walk's
pairwise privacy loss against communicability, and each node's summed loss against its
centrality. The Davis Southern Women graph as in the paper (networkx ships it); instead of the
Facebook ego graphs (SNAP files, not downloadable here), other real graphs networkx
ships: Zachary's karate club, the Florentine families, Les Misérables.

The code's procedure: coded Hamilton weights, α = 2, σ = 10, T = computeTwalk, priv =
priv_global(logW, T, α, σ) (Theorem 3 with ln T and N_u = T/n; diagonal 0), communicability expm(W)
with zeroed diagonal. Node colour = priv.sum(axis=0). The paper's panel says "Katz centrality" but
the code plots eigenvector centrality (docs/errata.md): both are reported, and the degree. The exact
Lemma-2 matrix (H_T, tails) is reported beside it. These are the paper's values, not guarantees
(docs/errata.md).
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np
from scipy.linalg import expm
from scipy.stats import pearsonr, spearmanr

from netdp_experiments.rw_graphs import code_horizons
from netdp_node.privacy.rw_sgd import pairwise_matrix, transition_matrix

ALPHA, SIGMA = 2.0, 10.0
SPEC_DAVIS = {
    "gap": 0.082098,
    "T_walk": 862,
    "N_u": 26.94,
    "constant": 0.113798,
    "priv_min": 0.0581,
    "priv_max": 0.3747,
    "priv_mean": 0.1022,
    "spearman_priv_expmW": 0.956,
    "pearson_priv_expmW": 0.971,
    "spearman_priv_expmA": 0.592,
    "spearman_sum_eigenvector": 0.841,
    "spearman_sum_katz": 0.857,
    "spearman_sum_degree": 0.978,
    "top": ["E8", 3.494],
    "bottom": ["Dorothy Murchison", 2.500],
}


def graphs() -> dict[str, nx.Graph]:
    return {
        "davis-southern-women": nx.davis_southern_women_graph(),
        "karate-club": nx.karate_club_graph(),
        "florentine-families": nx.florentine_families_graph(),
        "les-miserables": nx.les_miserables_graph(),
    }


def analyse(g: nx.Graph) -> dict[str, Any]:
    names = sorted(g.nodes(), key=str)
    index = {v: i for i, v in enumerate(names)}
    n = len(names)
    edges = [(index[a], index[b]) for a, b in g.edges() if a != b]
    W = transition_matrix(n, edges)
    lam, phi = np.linalg.eigh(W)
    hz = code_horizons(lam, n, SIGMA)
    T = hz["T_walk"]
    keep = np.arange(n) != np.argmax(lam)
    L = (phi[:, keep] * -np.log(1 - lam[keep])) @ phi[:, keep].T
    const = ALPHA * T * math.log(T) / (SIGMA**2 * n * n)
    priv = const + ALPHA * T / (SIGMA**2 * n) * L
    np.fill_diagonal(priv, 0.0)
    exact = (T / n) * ALPHA / SIGMA**2 * pairwise_matrix(W, T)
    np.fill_diagonal(exact, 0.0)
    com = expm(W)
    np.fill_diagonal(com, 0.0)
    A = nx.to_numpy_array(g, nodelist=names)
    comA = expm(A)
    iu = np.triu_indices(n, 1)
    total = priv.sum(axis=0)
    adj = nx.relabel_nodes(g, index)
    eig = nx.eigenvector_centrality_numpy(adj)
    lam_a = float(np.max(np.linalg.eigvalsh(A)))
    katz = nx.katz_centrality_numpy(adj, alpha=0.9 / lam_a)
    deg = dict(adj.degree())
    cent = {
        k: np.array([d[i] for i in range(n)])
        for k, d in (("eigenvector", eig), ("katz", katz), ("degree", deg))
    }
    order = np.argsort(total)
    return {
        "n": n,
        "edges": len(edges),
        **hz,
        "N_u": T / n,
        "constant": const,
        "priv_min": float(priv[iu].min()),
        "priv_max": float(priv[iu].max()),
        "priv_mean": float(priv[iu].mean()),
        "exact_mean": float(exact[iu].mean()),
        "exact_over_priv_max": float((exact[iu] / priv[iu]).max()),
        "spearman_priv_expmW": float(spearmanr(priv[iu], com[iu])[0]),
        "pearson_priv_expmW": float(pearsonr(priv[iu], com[iu])[0]),
        "spearman_priv_expmA": float(spearmanr(priv[iu], comA[iu])[0]),
        **{f"spearman_sum_{k}": float(spearmanr(total, c)[0]) for k, c in cent.items()},
        "top": [str(names[order[-1]]), float(total[order[-1]])],
        "bottom": [str(names[order[0]]), float(total[order[0]])],
        "_priv": priv,
        "_com": com,
        "_total": total,
        "_katz": cent["katz"],
        "_eig": cent["eigenvector"],
    }


def run(name: str, args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "params": {
            "alpha": ALPHA,
            "sigma": SIGMA,
            "weights": "coded Hamilton 1/(max(d_u, d_v)+1)",
            "instead_of_facebook": "karate club, Florentine families, Les Misérables (networkx)",
        },
        "graphs": {},
    }
    summary = []
    for gname, g in graphs().items():
        r = analyse(g)
        pub = {k: v for k, v in r.items() if not k.startswith("_")}
        pub["matrices"] = {
            "priv": r["_priv"].tolist(),
            "communicability": r["_com"].tolist(),
            "summed_loss": r["_total"].tolist(),
            "katz": r["_katz"].tolist(),
            "eigenvector": r["_eig"].tolist(),
        }
        if gname == "davis-southern-women":
            pub["spec"] = SPEC_DAVIS
        out["graphs"][gname] = pub
        summary.append(
            f"{gname:<22} n={r['n']:<3} T={r['T_walk']:<5} priv in "
            f"[{r['priv_min']:.4f}, {r['priv_max']:.4f}] mean {r['priv_mean']:.4f}; "
            f"Spearman(priv, expm W) {r['spearman_priv_expmW']:.3f}; summed loss vs "
            f"Katz {r['spearman_sum_katz']:.3f}, eigenvector "
            f"{r['spearman_sum_eigenvector']:.3f}, degree "
            f"{r['spearman_sum_degree']:.3f}"
        )
    out["summary"] = summary
    return out


def plot(res: dict[str, Any], path: Any) -> None:
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    gs = res["graphs"]
    fig, axes = plt.subplots(3, len(gs), figsize=(4 * len(gs), 11))
    for j, (gname, r) in enumerate(gs.items()):
        m = r["matrices"]
        priv, com = np.array(m["priv"]), np.array(m["communicability"])
        with np.errstate(divide="ignore"):
            axes[0, j].imshow(np.log(priv), cmap="cividis")
            axes[1, j].imshow(np.log(com) / np.log(2), cmap="cividis")
        axes[0, j].set_title(f"{gname}: log privacy loss", fontsize=8)
        axes[1, j].set_title("log2 communicability expm(W)", fontsize=8)
        axes[2, j].scatter(m["katz"], m["summed_loss"], s=10, label="Katz")
        axes[2, j].set_xlabel("Katz centrality (α = 0.9/λ_max)")
        axes[2, j].set_ylabel("summed privacy loss")
        axes[2, j].set_title(f"Spearman {r['spearman_sum_katz']:.2f}", fontsize=8)
    fig.suptitle("Fig. 3: privacy loss vs communicability and centrality (α = 2, σ = 10)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
