"""Muffliato Fig. 6 / Table 3 (Cyffers et al., NeurIPS 2022, App. H.6): averaging under dropout.

n = 1000, x_v ~ U[0, 1], `x^0 = clip(x + N(0, 1), 0, 1)` (σ = 1, α = 2, ε_LDP = 1); every step a
fresh G(n, 0.002), each node unavailable with probability q ∈ {0, 0.1, 0.5, 0.9} (all its edges
removed), Metropolis weights rebuilt on the realised edges (an isolated node keeps its value),
NON-accelerated `x^{t+1} = W_t x^t`, until the authors' stopping rule
`(1/n)||x^{t+1} − mean(x^0)||² < 3 (mean(x^0) − mean(x))²` (random and data-dependent: a
simulation convenience, never a protocol rule).

Privacy (Table 3): `(1/n) Σ_{v≠0} Σ_t f_t(0, v)`, the paper bound eq. (6) from node 0 over the
realised schedule (`gossip.realised_schedule` + `paper_bound_outgoing`), in units of ε_LDP,
in both conventions (code: round t's messages use `W_{0:t+1}`; Theorem 1: `W_{0:t}`). Beside it,
the exact joint view in the other direction, what node 0 learns about everyone on average,
`(rank K_0 − 1)/n` (trace identity), and eq. (7)'s bound `T_0/n`; the outgoing joint
view would need one knowledge matrix per observer (1000 per run).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netdp_experiments.labels import label
from netdp_experiments.muffliato_common import er_edges, metropolis_csr
from netdp_node.privacy.gossip import GossipSchedule, realised_schedule
from netdp_node.privacy.gossip_joint_view import joint_view
from netdp_node.privacy.gossip_paper_bound import mean_privacy_loss, paper_bound_outgoing

N, P, SIGMA, RUNS = 1000, 0.002, 1.0, 8
DROPOUTS = (0.0, 0.1, 0.5, 0.9)
SPEC_OURS = {
    0.0: (0.0191, 0.0075, 9),
    0.1: (0.0197, 0.0081, 12),
    0.5: (0.0170, 0.0058, 35),
    0.9: (0.0145, 0.0059, 712),
}  # reference values: mean, std, mean steps
PAPER_TABLE3 = {0.0: (0.017, 0.006), 0.1: (0.018, 0.006), 0.5: (0.015, 0.007), 0.9: (0.014, 0.006)}


def summarise_runs(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over the runs of one dropout level: the paper's two bounds, the joint view and
    the number of rounds."""
    out: dict[str, Any] = {}
    for key in ("paper_code", "paper_thm1", "joint_view_in_mean"):
        v = np.array([x[key] for x in per_run])
        name = key.removesuffix("_in_mean") + "_in" if key.endswith("_in_mean") else key
        out[f"{name}_mean"], out[f"{name}_std"] = float(v.mean()), float(v.std())
    steps = np.array([x["steps"] for x in per_run])
    out["steps_mean"], out["steps"] = float(steps.mean()), steps.tolist()
    return out


def dropout_run(
    n: int, p: float, dropout: float, rng: np.random.Generator, max_steps: int = 100_000
) -> dict[str, Any]:
    """One run: the realised edges per step, the error curve and the stopping step."""
    x = rng.random(n)
    x0 = np.clip(x + rng.normal(0.0, SIGMA, size=n), 0.0, 1.0)
    target = 3.0 * (x0.mean() - x.mean()) ** 2
    scale = (x0.mean() - x.mean()) ** 2
    xt = x0
    rounds: list[np.ndarray] = []
    errors = [float(np.mean((x0 - x0.mean()) ** 2) / scale)]
    for _ in range(max_steps):
        e = er_edges(n, p, rng)
        up = rng.random(n) >= dropout
        e = e[up[e[:, 0]] & up[e[:, 1]]]
        rounds.append(e)
        xt = metropolis_csr(n, e) @ xt
        err = float(np.mean((xt - x0.mean()) ** 2))
        errors.append(err / scale)
        if err < target:
            break
    return {
        "rounds": rounds,
        "errors": errors,
        "steps": len(rounds),
        "final_error_over_mean_shift": errors[-1],
    }


def account(n: int, rounds: list[np.ndarray]) -> dict[str, Any]:
    return account_schedule(realised_schedule(n, [e.tolist() for e in rounds]))


def account_schedule(sched: GossipSchedule) -> dict[str, Any]:
    """Table 3's numbers on a realised schedule (also the engine mode's, read from a ledger)."""
    n, rounds = sched.n, sched.edges
    out: dict[str, Any] = {}
    for conv in ("code", "thm1"):
        f = paper_bound_outgoing(sched, 0, convention=conv)
        out[f"paper_{conv}"] = float((np.sum(f) - f[0]) / n)
    # running total for Fig. 6(a), at ~log-spaced steps (prefixes of the same schedule)
    T = len(rounds)
    checkpoints = sorted({int(x) for x in np.unique(np.geomspace(1, T, 16).round())} | {T})
    running = []
    for t in checkpoints:
        sub = GossipSchedule(
            n,
            sched.edges[:t],
            sched.matrices[:t],
            None,
            None if sched.rational is None else sched.rational[:t],
        )
        f = paper_bound_outgoing(sub, 0, convention="code")
        running.append((t, float((np.sum(f) - f[0]) / n)))
    out["running_code"] = running
    jv = joint_view(sched, 0)
    out["joint_view_in_mean"] = mean_privacy_loss(jv.leakage, 0)
    out["joint_view_rank"] = jv.rank
    out["joint_view_method"] = jv.method
    out["eq7_bound"] = sched.communications(0) / n
    return out


def run(name: str, args: Any) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    runs = getattr(args, "runs", 0) or (2 if quick else RUNS)
    n = 200 if quick else N
    p = P * N / n if quick else P  # same expected degree in the quick version
    dropouts = (0.0, 0.5) if quick else DROPOUTS
    out: dict[str, Any] = {
        "params": {
            "n": n,
            "p": p,
            "sigma": SIGMA,
            "alpha": 2,
            "epsilon_ldp": 1.0,
            "runs": runs,
            "dropouts": list(dropouts),
            "accelerated": False,
            "source": 0,
            "seeds": "np.random.default_rng([run, round(100 q)])",
        },
        "spec": {str(k): v for k, v in SPEC_OURS.items()},
        "paper_table3": {str(k): v for k, v in PAPER_TABLE3.items()},
        "rows": {},
    }
    summary = []
    for q in dropouts:
        per_run = []
        for r in range(runs):
            rng = np.random.default_rng([r, int(round(100 * q))])
            sim = dropout_run(n, p, q, rng)
            acc = account(n, sim["rounds"])
            per_run.append({"steps": sim["steps"], "errors": sim["errors"], **acc})
        row = {**summarise_runs(per_run), "runs": per_run}
        out["rows"][str(q)] = row
        summary.append(
            f"dropout {q:.0%}: total loss {row['paper_code_mean']:.4f} ± "
            f"{row['paper_code_std']:.4f} (code; Thm 1 {row['paper_thm1_mean']:.4f}), joint view "
            f"in {row['joint_view_in_mean']:.4f}; steps {row['steps_mean']:.1f}; spec "
            f"{SPEC_OURS[q][0]} ± {SPEC_OURS[q][1]} ({SPEC_OURS[q][2]} steps), paper "
            f"{PAPER_TABLE3[q][0]} ± {PAPER_TABLE3[q][1]}"
        )
    out["summary"] = summary
    return out


def plot(res: dict[str, Any], path: Any) -> None:
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    for (q, row), c in zip(res["rows"].items(), colors):
        for i, r in enumerate(row["runs"]):
            ts, vs = zip(*r["running_code"])
            lbl = f"dropout {float(q):.0%}" if i == 0 else None
            a.plot(ts, vs, color=c, lw=0.8, alpha=0.7, label=lbl)
            b.plot(np.arange(len(r["errors"])), r["errors"], color=c, lw=0.8, alpha=0.7, label=lbl)
    a.set_xscale("log")
    a.set_xlabel("time step")
    a.set_ylabel("privacy loss (1/n) Σ_v f(0, v) / ε_LDP")
    b.set_xscale("log")
    b.set_yscale("log")
    b.axhline(3.0, color="k", lw=0.6, ls=":")
    b.set_xlabel("time step")
    b.set_ylabel("error / (mean x⁰ − mean x)²")
    a.legend(fontsize=7)
    label(fig, res)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
