"""`netdp privacy report`: what a node's ledger says it has spent, towards every other node.

Reads the ledger read-only (safe while the daemon runs) and calls the pure accountants.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from netdp_node.ledger import Ledger
from netdp_node.privacy.accountant import (
    ACCOUNTANTS,
    JobView,
    never_ran,
    per_job_losses,
    total_losses,
)
from netdp_node.privacy.composition import PrivacyLoss
from netdp_node.privacy.threat import NOT_PRIVATE, not_private_note, seeded, threat_model
from netdp_node.privacy.walk_accountant import real_contributions


def ledger_report(ledger_dir: str | Path, *, delta_target: float = 1e-5,
                  job_id: str | None = None) -> dict[str, Any]:
    """The privacy report of one node as a JSON-friendly dict.

    keys: node, ledger, delta_target, jobs (per job: job_id, algorithm, state, contributed,
    theorem, contributions, epsilon, delta (worst peer), peers [{peer, epsilon, delta, method}],
    baselines {local-dp, central-dp: {epsilon, delta, method}} for the Gaussian sums, other
    labelled values such as the Muffliato paper bound), incoming [{peer, ...}] (gossip: what the
    node learnt about each peer, from its own view),
    total (composed across the jobs shown: epsilon, delta (worst peer), peers [...])."""
    led = Ledger.open_readonly(ledger_dir)
    try:
        me = led.node_id
        views = []
        jobs_out = []
        seeded_jobs: list[str] = []
        for j in led.jobs():
            if job_id is not None and j.job_id != job_id:
                continue
            entries = led.entries(j.job_id)
            view = JobView(j.job_id, j.spec, entries)
            views.append(view)
            losses = per_job_losses(view, me)
            peers = [{"peer": p, **_loss(loss)} for p, loss in sorted(losses.items())]
            worst = max(losses.values(), key=lambda x: x.epsilon, default=None)
            acc = ACCOUNTANTS[j.algorithm]
            base = ({k: _loss(v) for k, v in acc.baselines(j.spec, entries, me).items()}
                    if acc.baselines is not None else {})
            learnt = (None if acc.incoming is None else [] if never_ran(entries) else
                      [{"peer": p, **_loss(loss)}
                       for p, loss in sorted(acc.incoming(j.spec, entries, me).items())])
            was_seeded = seeded(entries)
            if was_seeded:
                seeded_jobs.append(j.job_id)
            jobs_out.append({
                "job_id": j.job_id,
                "algorithm": j.algorithm,
                "state": j.state,
                "detail": j.detail,
                "contributed": j.contributed,
                "contributions": real_contributions(entries),
                "messages_sent": sum(1 for e in entries if e.direction == "sent"),
                "messages_received": sum(1 for e in entries if e.direction == "received"),
                "theorem": ACCOUNTANTS[j.algorithm].theorem,
                "epsilon": worst.epsilon if worst else 0.0,
                "delta": worst.delta if worst else 0.0,
                "peers": peers,
                "baselines": base,
                **({"incoming": learnt} if learnt is not None else {}),
                "threat_model": threat_model(j.spec, me).as_dict(),
                "seeded_rng": was_seeded,
                "not_private": not_private_note() if was_seeded else None,
            })
        totals = total_losses(views, me, delta_target)
        tworst = max(totals.values(), key=lambda x: x.epsilon, default=None)
        return {
            "node": me,
            "ledger": str(led.path),
            "delta_target": delta_target,
            "not_private": (not_private_note() + f" (jobs {', '.join(seeded_jobs)})"
                            if seeded_jobs else None),
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
    """A human table: one block per job, then the composed total, per peer."""
    lines = [f"privacy report of node {rep['node']} (ledger {rep['ledger']})"]
    if rep.get("not_private"):
        lines += wrap(rep["not_private"], "")
    for j in rep["jobs"]:
        lines.append("")
        lines.append(f"job {j['job_id']}  {j['algorithm']}  state={j['state']}  "
                     f"contributed={'yes' if j['contributed'] else 'no'} "
                     f"({j['contributions']} contributions, {j['messages_sent']} sent, "
                     f"{j['messages_received']} received)"
                     + (f"  {NOT_PRIVATE}" if j.get("seeded_rng") else ""))
        if j.get("not_private"):
            lines += wrap(j["not_private"], "  ")
        lines.append(f"  accountant: {j['theorem']}")
        lines += threat_lines(j["threat_model"], "  ")
        if j["detail"]:
            lines.append(f"  note: {j['detail']}")
        lines.append("  outgoing: the loss this node incurs towards each peer")
        lines.extend(_peer_table(j["peers"]))
        if "incoming" in j:
            lines.append("  incoming: what this node learnt about each peer (its own view)")
            lines.extend(_peer_table(j["incoming"], head="about"))
        for name, b in j.get("baselines", {}).items():
            lines.append(f"  baseline {name}: ε={_fmt(b['epsilon'])} at δ={_fmt(b['delta'])} "
                         f"({b['method']}); this job's worst: ε={_fmt(j['epsilon'])}")
    t = rep["total"]
    lines.append("")
    lines.append(f"total over {len(rep['jobs'])} job(s), composed ({t['composition']}), "
                 f"at δ ≤ {rep['delta_target']:g}:"
                 + (f"  {NOT_PRIVATE}: holds for none of the seeded jobs"
                    if rep.get("not_private") else ""))
    lines.extend(_peer_table(t["peers"]))
    return "\n".join(lines)


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """A long sentence as lines of at most `width` characters, each starting with `indent`."""
    return textwrap.wrap(text, width=width, initial_indent=indent,
                         subsequent_indent=indent + "  ", break_on_hyphens=False)


def threat_lines(tm: dict[str, Any], indent: str) -> list[str]:
    """The threat model of a job (`ThreatModel.as_dict`) as text lines."""
    return wrap(f"threat model: the ε holds against {tm['observers']}. {tm['statement']}", indent)


def _peer_table(peers: list[dict[str, Any]], head: str = "towards") -> list[str]:
    if not peers:
        return ["  (no peers)"]
    w = max(len(head), *(len(p["peer"]) for p in peers))
    out = [f"  {head:<{w}}  {'epsilon':>10}  {'delta':>10}  method"]
    for p in peers:
        out.append(f"  {p['peer']:<{w}}  {_fmt(p['epsilon']):>10}  {_fmt(p['delta']):>10}  "
                   f"{p['method']}")
    return out
