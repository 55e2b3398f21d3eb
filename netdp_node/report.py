"""`netdp privacy report`: what a node's ledger says it has spent, towards every other node.

Reads the ledger read-only (safe while the daemon runs) and calls the pure accountants.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView, never_ran, real_contributions
from netdp_node.algorithms.budget import per_job_losses, total_losses
from netdp_node.errors import LedgerError
from netdp_node.ledger import LEDGER_FILE, Ledger
from netdp_node.privacy.composition import PrivacyLoss, compose_losses
from netdp_node.privacy.threat import NOT_PRIVATE, not_private_note, seeded
from netdp_node.progress import table

#: the δ of a report when neither --delta nor a recorded budget names one
DEFAULT_DELTA = 1e-5


def at_delta(loss: PrivacyLoss, delta: float) -> PrivacyLoss:
    """The same loss stated at the report's δ: the better of its own (ε, δ') when δ' ≤ δ (an
    (ε, δ')-DP mechanism is (ε, δ)-DP) and its RDP curve converted at δ; unchanged when neither
    applies (no curve and δ' > δ: it cannot be stated at δ, and says so by its δ). The method
    label is the accountant's."""
    if loss.epsilon == 0.0 and loss.delta == 0.0:
        return loss
    c = compose_losses([loss], delta)  # the single-loss case of the cross-job rule
    return PrivacyLoss(c.epsilon, c.delta, loss.method, loss.rdp)


class _AtDelta:
    """`at_delta` at one δ, computed once per distinct loss object: an accountant gives most of its
    peers the very same loss (walks, rings, inca), so a node's n peers cost a few conversions, not
    n. Keeps the losses it has seen (an id is only unique while its object lives)."""

    def __init__(self, delta: float) -> None:
        self.delta = delta
        self._seen: dict[int, tuple[PrivacyLoss, PrivacyLoss]] = {}

    def __call__(self, loss: PrivacyLoss) -> PrivacyLoss:
        hit = self._seen.get(id(loss))
        if hit is None:
            hit = self._seen[id(loss)] = (loss, at_delta(loss, self.delta))
        return hit[1]


def ledger_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Ledger directories from `paths`: each is a ledger directory (holds ledger.sqlite) or a
    folder of them (its subfolders that hold one, sorted by name)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / LEDGER_FILE).exists():
            out.append(p)
            continue
        subs = sorted(d for d in p.iterdir() if (d / LEDGER_FILE).exists()) if p.is_dir() else []
        if not subs:
            raise LedgerError(
                f"no ledger at {p} (neither {p / LEDGER_FILE} nor a folder of ledger directories)"
            )
        out.extend(subs)
    return out


def ledger_report(
    ledger_dir: str | Path,
    *,
    delta_target: float | None = None,
    job_id: str | None = None,
    budget: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The privacy report of one node as a JSON-friendly dict.

    Every ε in it is stated at ONE δ, `delta_target` (default: the δ of the node's budget, else
    DEFAULT_DELTA): each job's losses and baselines through `at_delta`, the total composed across
    the jobs at that δ (so it is never below one job's ε towards the same peer).

    keys: node, ledger, delta_target, budget (None, or {epsilon, delta, source, spent (ε of the
    worst peer, composed at the budget's δ), worst_peer, remaining (ε, may be < 0)}), jobs (per
    job: job_id, algorithm, state, contributed, theorem, contributions, epsilon, delta (worst peer
    at delta_target), native {epsilon, delta, method} (the worst peer as the accountant states it,
    at its own δ), peers [{peer, epsilon, delta, method}], baselines {local-dp, central-dp:
    {epsilon, delta, method}} for the Gaussian sums, other labelled values such as the Muffliato
    paper bound), incoming [{peer, ...}] (gossip: what the node learnt about each peer, from its
    own view), total (composed across the jobs shown: epsilon, delta (worst peer), peers [...])."""
    led = Ledger.open_readonly(ledger_dir)
    try:
        me = led.node_id
        recorded = led.budget
        if budget is None and recorded is not None:
            budget, source = recorded, "recorded in the ledger by the node (--budget-epsilon)"
        else:
            source = "given on the command line"
        delta = (
            delta_target
            if delta_target is not None
            else (budget[1] if budget is not None else DEFAULT_DELTA)
        )
        views = []
        all_views = []
        jobs_out = []
        seeded_jobs: list[str] = []
        stated = _AtDelta(delta)
        for j in led.jobs():
            entries = led.entries(j.job_id)
            view = JobView(j.job_id, j.spec, entries)
            all_views.append(view)
            if job_id is not None and j.job_id != job_id:
                continue
            views.append(view)
            raw = per_job_losses(view, me)
            losses = {p: stated(x) for p, x in raw.items()}
            peers = [{"peer": p, **_loss(loss)} for p, loss in sorted(losses.items())]
            worst = max(losses.values(), key=lambda x: x.epsilon, default=None)
            native = max(raw.values(), key=lambda x: x.epsilon, default=None)
            acc = get_algorithm(j.algorithm).accountant
            base = (
                {k: _loss(stated(v)) for k, v in acc.baselines(j.spec, entries, me).items()}
                if acc.baselines is not None
                else {}
            )
            learnt = (
                None
                if acc.incoming is None
                else []
                if never_ran(entries)
                else [
                    {"peer": p, **_loss(stated(loss))}
                    for p, loss in sorted(acc.incoming(j.spec, entries, me).items())
                ]
            )
            was_seeded = seeded(entries)
            if was_seeded:
                seeded_jobs.append(j.job_id)
            jobs_out.append(
                {
                    "job_id": j.job_id,
                    "algorithm": j.algorithm,
                    "state": j.state,
                    "detail": j.detail,
                    "contributed": j.contributed,
                    "contributions": real_contributions(entries),
                    "messages_sent": sum(1 for e in entries if e.direction == "sent"),
                    "messages_received": sum(1 for e in entries if e.direction == "received"),
                    "theorem": acc.theorem,
                    "epsilon": worst.epsilon if worst else 0.0,
                    "delta": worst.delta if worst else 0.0,
                    "native": _loss(native) if native else None,
                    "peers": peers,
                    "baselines": base,
                    **({"incoming": learnt} if learnt is not None else {}),
                    "threat_model": get_algorithm(j.algorithm).threat(j.spec, me).as_dict(),
                    "seeded_rng": was_seeded,
                    "not_private": not_private_note() if was_seeded else None,
                }
            )
        totals = total_losses(views, me, delta)
        tworst = max(totals.values(), key=lambda x: x.epsilon, default=None)
        spend = None
        if budget is not None:
            # what the budget check at a job's start sees: every job of the ledger, at its δ
            after = total_losses(all_views, me, budget[1])
            bpeer, bworst = max(
                after.items(),
                key=lambda kv: kv[1].epsilon,
                default=("", PrivacyLoss(0.0, 0.0, "none")),
            )
            spend = {
                "epsilon": budget[0],
                "delta": budget[1],
                "source": source,
                "spent": bworst.epsilon,
                "spent_delta": bworst.delta,
                "worst_peer": bpeer,
                "remaining": budget[0] - bworst.epsilon,
                "within": bworst.epsilon <= budget[0] and bworst.delta <= budget[1],
            }
        return {
            "node": me,
            "ledger": str(led.path),
            "delta_target": delta,
            "budget": spend,
            "not_private": (
                not_private_note() + f" (jobs {', '.join(seeded_jobs)})" if seeded_jobs else None
            ),
            "jobs": jobs_out,
            "total": {
                "epsilon": tworst.epsilon if tworst else 0.0,
                "delta": tworst.delta if tworst else 0.0,
                "composition": "rdp across jobs where every job has an RDP curve, else basic",
                "peers": [{"peer": p, **_loss(loss)} for p, loss in totals.items()],
            },
        }
    finally:
        led.close()


def _loss(loss: PrivacyLoss) -> dict[str, Any]:
    return {"epsilon": loss.epsilon, "delta": loss.delta, "method": loss.method}


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def render_text(rep: dict[str, Any]) -> str:
    """A human report: the budget (spent, remaining), one block per job, then the composed total,
    per peer; every ε at the one δ stated in the header."""
    d = rep["delta_target"]
    lines = [
        f"privacy report of node {rep['node']} (ledger {rep['ledger']})",
        f"every ε below holds at δ = {d:g} (per job, baselines and total alike)",
    ]
    if rep.get("not_private"):
        lines += wrap(rep["not_private"], "")
    b = rep.get("budget")
    if b is not None:
        state = "within budget" if b["within"] else "OVER BUDGET"
        lines.append(
            f"budget ε = {_fmt(b['epsilon'])} at δ = {b['delta']:g} ({b['source']}): "
            f"spent ε = {_fmt(b['spent'])} towards {b['worst_peer'] or '-'} (the worst "
            f"peer, every job of the ledger composed at δ = {b['delta']:g}), remaining "
            f"ε = {_fmt(max(0.0, b['remaining']))}  [{state}]"
        )
    else:
        lines.append(
            "budget: none recorded (the node runs without --budget-epsilon; give "
            "--budget-epsilon to compare)"
        )
    for j in rep["jobs"]:
        lines.append("")
        lines.append(
            f"job {j['job_id']}  {j['algorithm']}  state={j['state']}  "
            f"contributed={'yes' if j['contributed'] else 'no'} "
            f"({j['contributions']} contributions, {j['messages_sent']} sent, "
            f"{j['messages_received']} received)"
            + (f"  {NOT_PRIVATE}" if j.get("seeded_rng") else "")
        )
        if j.get("not_private"):
            lines += wrap(j["not_private"], "  ")
        lines.append(f"  accountant: {j['theorem']}")
        lines += threat_lines(j["threat_model"], "  ")
        if j["detail"]:
            lines.append(f"  note: {j['detail']}")
        nat = j.get("native")
        if (
            nat
            and nat["epsilon"] > 0
            and (nat["delta"] != j["delta"] or nat["epsilon"] != j["epsilon"])
        ):
            lines.append(
                f"  the accountant states the worst peer as ε = {_fmt(nat['epsilon'])} "
                f"at δ = {nat['delta']:.3g}; at δ = {d:g}: ε = {_fmt(j['epsilon'])}"
            )
        lines.append("  outgoing: the loss this node incurs towards each peer")
        lines.append(_peer_table(j["peers"], d))
        if "incoming" in j:
            lines.append("  incoming: what this node learnt about each peer (its own view)")
            lines.append(_peer_table(j["incoming"], d, head="about"))
        if j.get("baselines"):
            rows = [
                (name, _fmt(x["epsilon"]) + _off(x, d), x["method"])
                for name, x in j["baselines"].items()
            ]
            rows.append(("this job (worst peer)", _fmt(j["epsilon"]), "netdp accountant"))
            lines.append("  baselines: the same task another way, at the same δ")
            lines.append(table(("", "epsilon", "method"), rows, right=("epsilon",), indent=4))
    t = rep["total"]
    lines.append("")
    lines.append(
        f"total over {len(rep['jobs'])} job(s), composed ({t['composition']}), "
        f"at δ = {d:g}:"
        + (f"  {NOT_PRIVATE}: holds for none of the seeded jobs" if rep.get("not_private") else "")
    )
    lines.append(_peer_table(t["peers"], d))
    return "\n".join(lines)


def _off(x: dict[str, Any], delta: float) -> str:
    """A mark for a value that cannot be stated at the report's δ (no RDP curve, larger δ)."""
    return f" (at δ={x['delta']:.3g})" if x["delta"] > delta * (1 + 1e-9) else ""


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """A long sentence as lines of at most `width` characters, each starting with `indent`."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    )


def threat_lines(tm: dict[str, Any], indent: str) -> list[str]:
    """The threat model of a job (`ThreatModel.as_dict`) as text lines."""
    return wrap(f"threat model: the ε holds against {tm['observers']}. {tm['statement']}", indent)


def _peer_table(peers: list[dict[str, Any]], delta: float, head: str = "towards") -> str:
    if not peers:
        return "  (no peers)"
    return table(
        (head, "epsilon", "method"),
        [(p["peer"], _fmt(p["epsilon"]) + _off(p, delta), p["method"]) for p in peers],
        right=("epsilon",),
    )


# -- the node × peer heatmap (`netdp privacy report --plot`) ---------------------------------------
def heatmap_size(n: int) -> tuple[float, float]:
    """Figure size (inches) of the heatmap of `n` nodes: 0.45 inch per cell, plus room for the
    labels, title and colour bar (at least 6 inches wide, for the title)."""
    return (max(6.0, 2.8 + 0.45 * n), 2.0 + 0.45 * n)


HEATMAP_DPI = 100


def plot_heatmap(reports: Sequence[dict[str, Any]], path: str | Path) -> dict[str, Any]:
    """Draw the pairwise loss of every node (row) towards every peer (column), composed over the
    jobs each report shows at its one δ, as a PNG: colour scale in ε; where a node has a budget,
    the cells over it are outlined in red and the budget is a line on the colour bar. Imports
    matplotlib here only (ImportError if absent).

    Returns {nodes, epsilon (rows × columns, None where no loss is defined), delta, budgets, size
    (pixels), cells {"node→peer": [x, y] pixel centre in the PNG}}."""
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost
    import numpy as np  # lazy: start-up cost
    from matplotlib.patches import Rectangle  # lazy: start-up cost

    deltas = {r["delta_target"] for r in reports}
    if len(deltas) != 1:
        raise ValueError(f"the reports are at different δ ({sorted(deltas)}): give --delta")
    (delta,) = deltas
    nodes = sorted(
        {r["node"] for r in reports} | {p["peer"] for r in reports for p in r["total"]["peers"]}
    )
    idx = {v: i for i, v in enumerate(nodes)}
    n = len(nodes)
    eps = np.full((n, n), np.nan)
    for r in reports:
        for p in r["total"]["peers"]:
            eps[idx[r["node"]], idx[p["peer"]]] = p["epsilon"]
    budgets = {r["node"]: r["budget"]["epsilon"] for r in reports if r.get("budget")}
    fig, ax = plt.subplots(figsize=heatmap_size(n), dpi=HEATMAP_DPI)
    finite = eps[np.isfinite(eps)]
    vmax = max([float(finite.max()) if finite.size else 1.0, *budgets.values()]) or 1.0
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    im = ax.imshow(
        np.ma.masked_invalid(eps),
        cmap=cmap,
        vmin=0.0,
        vmax=vmax,
        interpolation="nearest",
        aspect="equal",
    )
    ax.set_xticks(range(n), nodes, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), nodes, fontsize=8)
    ax.set_xlabel("peer (towards)")
    ax.set_ylabel("node (whose ledger)")
    jobs = sorted({j["job_id"] for r in reports for j in r["jobs"]})
    over = sum(
        1
        for node, b in budgets.items()
        for j in range(n)
        if np.isfinite(eps[idx[node], j]) and eps[idx[node], j] > b
    )
    budget_note = (
        f"\nred: {over} pair(s) over the node's budget (line on the colour bar)" if budgets else ""
    )
    ax.set_title(
        f"privacy loss ε node → peer at δ = {delta:g}\n"
        f"{len(reports)} ledger(s), {len(jobs)} job(s) composed" + budget_note,
        fontsize=9,
    )
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(f"ε at δ = {delta:g}")
    for node, b in budgets.items():
        i = idx[node]
        for j in range(n):
            if np.isfinite(eps[i, j]) and eps[i, j] > b:
                ax.add_patch(
                    Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)
                )
    for b in sorted(set(budgets.values())):
        bar.ax.axhline(b, color="red", linewidth=2)
    fig.tight_layout()
    fig.canvas.draw()
    width, height = fig.canvas.get_width_height()
    cells = {}
    for a in nodes:
        for b in nodes:
            x, y = ax.transData.transform((idx[b], idx[a]))
            cells[f"{a}→{b}"] = [float(x), float(height - y)]  # PNG rows count from the top
    fig.savefig(path, dpi=HEATMAP_DPI)
    plt.close(fig)
    return {
        "nodes": nodes,
        "delta": delta,
        "budgets": budgets,
        "over_budget": over,
        "epsilon": [[None if not np.isfinite(x) else float(x) for x in row] for row in eps],
        "size": [width, height],
        "cells": cells,
        "path": str(path),
    }
