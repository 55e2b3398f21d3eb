"""A node's privacy across jobs, from its own view: per job, each algorithm's accountant (its record's
`accountant`, `accounting.Accountant`) gives the loss towards each other participant; losses
towards the same peer are composed by `compose_losses` (in RDP when every part has an RDP curve,
otherwise by basic composition; see its docstring). The node's budget (ε, δ) must hold towards
every peer.

Apart from `accounting` because it looks accountants up in the registry (`netdp_node.algorithms`),
which imports every family's accountant, which imports `accounting`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView, never_ran
from netdp_node.privacy.composition import PrivacyLoss, compose_losses


def per_job_losses(job: JobView, me: str) -> dict[str, PrivacyLoss]:
    if never_ran(job.entries):
        return {}  # nothing left the node
    acc = get_algorithm(job.spec["algorithm"]).accountant
    return acc.losses(job.spec, job.entries, me)


def total_losses(
    jobs: Iterable[JobView],
    me: str,
    delta_target: float,
    extra: Mapping[str, PrivacyLoss] | None = None,
) -> dict[str, PrivacyLoss]:
    """Compose every job's loss towards each peer (plus an optional prospective job)."""
    parts: dict[str, list[PrivacyLoss]] = {}
    for job in jobs:
        for peer, loss in per_job_losses(job, me).items():
            parts.setdefault(peer, []).append(loss)
    for peer, loss in (extra or {}).items():
        parts.setdefault(peer, []).append(loss)
    # Accountants give most peers the very same loss object (walks, rings, inca: one loss towards
    # every peer), so the peers fall in few groups of identical parts: compose each group once
    # (compose_losses is a pure function of its parts) instead of once per peer, O(n) not O(n²)
    # rdp conversions over a node's n peers. Keyed by the parts' identities, all alive in `parts`.
    composed: dict[tuple[int, ...], PrivacyLoss] = {}
    out: dict[str, PrivacyLoss] = {}
    for peer, ls in sorted(parts.items()):
        key = tuple(map(id, ls))
        total = composed.get(key)
        if total is None:
            total = composed[key] = compose_losses(ls, delta_target)
        out[peer] = total
    return out


@dataclass(frozen=True)
class BudgetCheck:
    ok: bool
    worst_peer: str
    worst: PrivacyLoss | None
    reason: str


def check_budget(
    jobs: Iterable[JobView], spec: Mapping[str, Any], me: str, epsilon: float, delta: float
) -> BudgetCheck:
    """Would contributing fully to the job `spec` keep the node within (epsilon, delta) towards every
    peer, given what its ledger already shows? When the accountant cannot bound the loss (e.g. a
    job so long that its δ terms reach 1), the answer is no, with the accountant's reason."""
    try:
        acc = get_algorithm(spec["algorithm"]).accountant
        after = total_losses(jobs, me, delta, extra=acc.prospective(spec, me))
    except (ValueError, KeyError, TypeError, ArithmeticError) as e:
        return BudgetCheck(
            False,
            "",
            None,
            f"the accountant cannot bound the loss of this job: {type(e).__name__}: {e}",
        )
    worst_peer, worst = "", None
    for peer, loss in after.items():
        if worst is None or loss.epsilon > worst.epsilon:
            worst_peer, worst = peer, loss
    if worst is None:
        return BudgetCheck(True, "", None, "no peers")
    ok = worst.epsilon <= epsilon and worst.delta <= delta
    reason = (
        f"after this job the loss towards {worst_peer} would be ε={worst.epsilon:.4g}, "
        f"δ={worst.delta:.3g} ({worst.method}); budget ε={epsilon:g}, δ={delta:g}"
    )
    return BudgetCheck(ok, worst_peer, worst, reason)
