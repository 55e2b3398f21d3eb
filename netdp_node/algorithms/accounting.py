"""What every algorithm's accountant shares: what it reads of a node's view and what it is.

A node's accountant is a function of its OWN view only: the public job specs and its own ledger
entries. Nothing here reads another node's ledger or any global trace. The formulas (theorems,
compositions, calibrations: functions of numbers, parameters and graphs) are in
`netdp_node.privacy`; each algorithm's folder reads its view and applies them
(`netdp_node/algorithms/<family>/accountant.py`), and its record (`record.Algorithm.accountant`)
holds the result, an `Accountant`. Across jobs, `budget` composes the losses towards each peer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from netdp_node.privacy.composition import DEFAULT_ORDERS, PrivacyLoss, gaussian_rdp, rdp_to_dp


class ViewEntry(Protocol):
    """What the accountants read of a ledger entry (`ledger.Entry` is one; read-only)."""

    @property
    def job_id(self) -> str: ...
    @property
    def direction(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def peer(self) -> str: ...
    @property
    def params(self) -> dict[str, Any]: ...


#: (spec, this node's entries, this node) -> {peer: loss}
ViewLosses = Callable[[Mapping[str, Any], Iterable[ViewEntry], str], dict[str, PrivacyLoss]]


@dataclass(frozen=True)
class Accountant:
    """An algorithm's accountant (the `accountant` of its record)."""

    #: the loss the node has incurred towards each other participant, from its ledger
    losses: ViewLosses
    #: (spec, me) -> the loss if the node contributes fully (the budget check at job start)
    prospective: Callable[[Mapping[str, Any], str], dict[str, PrivacyLoss]]
    theorem: str
    # the same task under local DP and with a trusted curator, for the report (optional)
    baselines: ViewLosses | None = None
    # what the node learnt about every other participant (gossip: its own joint view), optional
    incoming: ViewLosses | None = None
    # spec -> the noise std of the released value (each coordinate) from the public parameters,
    # and how it is obtained (`netdp job result`, the demo); None: no closed form
    estimate_std: Callable[[Mapping[str, Any]], tuple[float, str]] | None = None


def others(spec: Mapping[str, Any], me: str) -> list[str]:
    """The job's participants but this node."""
    return [p for p in spec["participants"] if p != me]


# -- reading the view ------------------------------------------------------------------------------
def real_contributions(entries: Iterable[Any]) -> int:
    """Data contributions this node made, from its ledger: its "contribute" records (every engine
    records a step with data as "contribute", and a step without data under another name). For a
    walk every copy it ever made counts, kept or discarded."""
    return sum(1 for e in entries if e.event == "contribute")


#: the only ledger events `contributions_in_result` reads
CONTRIBUTION_EVENTS = ("contribute", "fenced")


def contributions_in_result(entries: Iterable[Any]) -> int:
    """Data contributions of this node that the released result contains: all of them minus those
    on branches of the walk that were fenced off after a re-route (custody). Reads only the
    CONTRIBUTION_EVENTS entries."""
    es = list(entries)
    return real_contributions(es) - sum(
        int(e.params.get("discarded", 0))
        for e in es
        if e.direction == "local" and e.event == "fenced"
    )


@dataclass(frozen=True)
class JobView:
    """What the accountant needs of one job: its public spec and this node's entries for it."""

    job_id: str
    spec: Mapping[str, Any]  # {"algorithm", "participants", "params", ...}
    entries: Sequence[ViewEntry]


#: The ledger event of a job the node could not run at all (it failed before taking any step).
NOT_RUN = "cannot-run"


def never_ran(entries: Iterable[ViewEntry]) -> bool:
    """The node failed the job before its first step: it sent and received nothing."""
    entries = list(entries)
    return any(e.event == NOT_RUN for e in entries) and not any(
        e.direction in ("sent", "received") for e in entries
    )


# -- baselines: the same task under local DP and with a trusted curator -----------------------------
def _gaussian_loss(z: float, count: int, delta: float, method: str) -> PrivacyLoss:
    """`count` Gaussian mechanisms of noise multiplier z, composed in RDP, at δ."""
    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    curve = gaussian_rdp(z, DEFAULT_ORDERS, count)
    return PrivacyLoss(
        rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0],
        delta,
        method,
        (tuple(DEFAULT_ORDERS), tuple(float(x) for x in curve)),
    )


def gaussian_sum_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str, total: float
) -> dict[str, PrivacyLoss]:
    """For the Gaussian sums (ring-sum, ring-sum-r, walk-sum), what the node's k real contributions
    would cost (i) under local DP, each contribution sent with its own N(0, σ²) and every one seen
    (k Gaussians of multiplier σ/Δ), and (ii) with a trusted curator releasing only the result (one
    Gaussian of the result's total noise std `total`, the algorithm's, user-level sensitivity k·Δ).
    Both in RDP at δ."""
    from netdp_node.privacy.discrete_gaussian import charged_sensitivity  # lazy: start-up cost

    p = spec["params"]
    k = real_contributions(entries)
    sigma, sens, delta = float(p["sigma"]), charged_sensitivity(p), float(p["delta"])
    return {
        "local-dp": _gaussian_loss(sigma / sens, k, delta, "local DP, same σ per contribution"),
        "central-dp": _gaussian_loss(
            total / (max(k, 1) * sens),
            1 if k else 0,
            delta,
            "trusted curator, same noise on the result",
        ),
    }
