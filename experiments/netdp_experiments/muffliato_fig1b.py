"""Muffliato Fig. 1(b) / Fig. 5 (Cyffers et al., NeurIPS 2022, §5, App. H.4) on the social graphs
networkx ships.

The paper uses SNAP's Facebook ego graphs, which are not available offline; netdp uses four small
social graphs that come with networkx instead: Zachary's karate club (34 nodes), Les Misérables
co-appearances (77), the Florentine families (15) and Davis' southern women (32 people and events,
bipartite). Giant component, nodes relabelled 0..n−1 in networkx's order.

Parameters as the authors' `figb.py`: α = 1.5, ε = 5, σ = sqrt(α/2·ε) = 1.9365, so
ε_LDP = α/(2σ²) = 0.2; T = T_mix = ceil(ln n / sqrt(1 − λ_2)); NON-accelerated gossip
`x^{t+1} = W x^t`, Metropolis weights; the source u drawn with `np.random.seed(1)`,
`randint(n)`. Values are in units of ε_LDP, clipped at 1 (the code clips the raw value at 1, i.e.
at 5 ε_LDP, an inconsistency of the authors' code; here both accountants are clipped at ε_LDP).

For every node v: the paper bound eq. (6) from u to v (code convention t = 1..T, as the figure,
and Theorem 1's t = 0..T−1) and the exact joint-view loss u → v (one knowledge matrix per
observer, `gossip_joint_view.outgoing_leakage`). The paper's claim is that the LDP-level loss stays in
u's own community: the summary compares the mean loss inside u's community (networkx greedy
modularity) with the mean outside, for both accountants.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
from scipy.sparse.csgraph import shortest_path

from netdp_experiments.muffliato_common import gap_2, metropolis_csr, t_mix
from netdp_node.privacy.gossip import clip_to_ldp, fixed_schedule
from netdp_node.privacy.gossip_joint_view import outgoing_leakage
from netdp_node.privacy.gossip_paper_bound import paper_bound_outgoing

ALPHA, EPS = 1.5, 5.0
SIGMA = float(np.sqrt(ALPHA / 2 * EPS))


def social_graphs() -> dict[str, nx.Graph]:
    return {
        "karate club": nx.karate_club_graph(),
        "Les Misérables": nx.les_miserables_graph(),
        "Florentine families": nx.florentine_families_graph(),
        "Davis southern women": nx.davis_southern_women_graph(),
    }


def _giant(g: nx.Graph) -> nx.Graph:
    g = nx.Graph(g)  # drop weights / attributes that matter nothing here
    giant = g.subgraph(max(nx.connected_components(g), key=len)).copy()
    return nx.convert_node_labels_to_integers(giant, label_attribute="label")


def one_graph(g0: nx.Graph) -> dict[str, Any]:
    g = _giant(g0)
    n = g.number_of_nodes()
    edges = [(int(a), int(b)) for a, b in g.edges()]
    E = np.asarray(edges, dtype=np.int64)
    W = metropolis_csr(n, E)
    gap = gap_2(W)
    T = t_mix(n, SIGMA, gap)
    np.random.seed(1)
    u = int(np.random.randint(n))
    sched = fixed_schedule(n, edges, T)  # plain gossip, as figb.py
    code = clip_to_ldp(paper_bound_outgoing(sched, u, convention="code"))
    thm1 = clip_to_ldp(paper_bound_outgoing(sched, u, convention="thm1"))
    jv = outgoing_leakage(sched, u)
    dist = shortest_path(W, unweighted=True, indices=u).astype(np.int64)
    comms = nx.community.greedy_modularity_communities(g)
    mine = next(c for c in comms if u in c)
    inside = np.array([v in mine and v != u for v in range(n)])
    outside = np.array([v not in mine for v in range(n)])
    others = np.arange(n) != u

    def stats(x: np.ndarray) -> dict[str, float]:
        return {
            "mean": float(np.mean(x[others])),
            "mean_in_community": float(np.mean(x[inside])) if inside.any() else float("nan"),
            "mean_outside": float(np.mean(x[outside])) if outside.any() else float("nan"),
            "at_ldp_level": int(np.sum(x[others] >= 1.0 - 1e-9)),
        }

    return {
        "n": n,
        "edges": len(edges),
        "source": u,
        "source_label": str(g.nodes[u]["label"]),
        "gap_1_minus_lambda2": gap,
        "T": T,
        "communities": len(comms),
        "source_community_size": len(mine),
        "paper_code": code.tolist(),
        "paper_thm1": thm1.tolist(),
        "joint_view": jv.tolist(),
        "distance": dist.tolist(),
        "stats": {"paper_code": stats(code), "paper_thm1": stats(thm1), "joint_view": stats(jv)},
        "edge_list": edges,
    }


def run(name: str, args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "params": {
            "alpha": ALPHA,
            "epsilon": EPS,
            "sigma": SIGMA,
            "epsilon_ldp": ALPHA / (2 * SIGMA**2),
            "accelerated": False,
            "T": "ceil(ln n / sqrt(1 - lambda_2))",
            "source": "np.random.seed(1); randint(n)",
            "units": "fractions of epsilon_ldp, clipped at 1",
        },
        "notes": [
            "The paper's Facebook ego graphs (SNAP) are not available offline: graphs "
            "shipped with networkx are used instead, so no number is comparable with the "
            "paper's; the claim checked is qualitative (LDP-level loss inside u's "
            "community)."
        ],
        "graphs": {},
    }
    summary = []
    for gname, g in social_graphs().items():
        r = one_graph(g)
        out["graphs"][gname] = r
        s = r["stats"]
        summary.append(
            f"{gname}: n={r['n']}, T={r['T']}, u={r['source']} ({r['source_label']}); mean loss "
            f"in u's community / outside: paper {s['paper_code']['mean_in_community']:.3f} / "
            f"{s['paper_code']['mean_outside']:.3f}, joint view "
            f"{s['joint_view']['mean_in_community']:.3f} / {s['joint_view']['mean_outside']:.3f}; "
            f"at LDP level: paper {s['paper_code']['at_ldp_level']}, joint view "
            f"{s['joint_view']['at_ldp_level']} of {r['n'] - 1}"
        )
    out["summary"] = summary
    return out


def plot(res: dict[str, Any], path: Any) -> None:
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    names = list(res["graphs"])
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 6.2))
    for j, gname in enumerate(names):
        r = res["graphs"][gname]
        g: nx.Graph[int] = nx.Graph()
        g.add_nodes_from(range(r["n"]))
        g.add_edges_from(r["edge_list"])
        pos = nx.spring_layout(g, seed=1)
        for i, (key, lbl) in enumerate(
            (("paper_code", "eq. (6) (code)"), ("joint_view", "exact joint view"))
        ):
            ax = axes[i, j]
            nx.draw_networkx_edges(g, pos, ax=ax, width=0.3, alpha=0.4)
            sc = nx.draw_networkx_nodes(
                g,
                pos,
                ax=ax,
                node_size=25,
                node_color=r[key],
                cmap="Spectral_r",
                vmin=0.0,
                vmax=1.0,
            )
            nx.draw_networkx_nodes(
                g,
                pos,
                nodelist=[r["source"]],
                ax=ax,
                node_size=60,
                node_color="none",
                edgecolors="k",
                linewidths=1.2,
            )
            ax.set_title(f"{gname}\n{lbl}" if i == 0 else lbl, fontsize=8)
            ax.axis("off")
    fig.colorbar(sc, ax=axes, shrink=0.6, label="privacy loss u→v / ε_LDP")
    fig.savefig(path, dpi=70)
    plt.close(fig)
