"""IncA's accountant from the node's own view (Sabater et al. 2025): pure functions of (the node's
ledger entries, the public job spec). Nothing here reads another node's ledger or any global trace.

Being moved to `netdp_node/algorithms/inca/accountant.py`, where every other algorithm's accountant
already is (`netdp_node/algorithms/<family>/accountant.py`, and what they share in
`netdp_node/algorithms/accounting.py`); the IncA record takes its accountant from here until then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from netdp_node.privacy.composition import PrivacyLoss
from netdp_node.privacy.discrete_gaussian import charged_sensitivity, release_epsilon
from netdp_node.privacy.inca_audit import (
    execution_from_info,
    party_report,
    threat_dict,
)


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


def _others(spec: Mapping[str, Any], me: str) -> list[str]:
    return [p for p in spec["participants"] if p != me]


def _real_contributions(entries: Iterable[Any]) -> int:
    """`netdp_node.algorithms.accounting.real_contributions` (privacy may not import it)."""
    return sum(1 for e in entries if e.event == "contribute")


# -- IncA (Sabater et al. 2025; engine algorithms.inca.engine, audit privacy.inca_audit) -------
def _inca_ldp(p: Mapping[str, Any]) -> PrivacyLoss:
    """The local-DP level of the node's η: what an adversary who sees every message of the node
    learns at most (it recovers x + η), so valid whatever the execution: every
    message is a function of the parties' releases x + η and of the data-independent Δ terms
    (data processing). ε is that of the discrete Gaussian η actually drawn
    (`discrete_gaussian.release_epsilon`: CKS Theorem 4 and Proposition 12), not the analytic
    continuous-Gaussian ε (Balle & Wang), which is not proven for discrete noise."""
    eps = release_epsilon(p, sigma_key="sigma_eta")
    return PrivacyLoss(
        eps,
        float(p["delta"]),
        "local DP of η (always valid; discrete Gaussian, zCDP → (ε, δ) by CKS Prop. 12)",
    )


_INCA_CACHE: dict[str, PrivacyLoss] = {}
#: the label of IncA's audited value: twice not a guarantee (sampled placements; Theorem 4.1 is a
#: continuous-Gaussian analysis of real-weighted sums, not proven for the discrete noise drawn)
INCA_AUDIT = (
    "audit of sampled adversaries (continuous-noise analysis; not proven for discrete "
    "noise; not a guarantee)"
)


def inca_audit_loss(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str, samples: int = 8
) -> tuple[PrivacyLoss, dict[str, Any] | None]:
    """The node's privacy for an IncA job under the job's threat model (`threat`), computed from
    the public schedule and its own ledger: the result it received states the public execution
    (online sets, counted messages, finals, from the dissemination records), which
    `inca_audit.party_report` audits (Theorem 4.1, worst of `samples` adversaries drawn from the
    job's public seed). Before the node has a result, and as a cap, the local-DP level of its η
    (always valid). Returns (loss, the party report or None)."""
    es = list(entries)
    p = spec["params"]
    if _real_contributions(es) == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution"), None
    ldp = _inca_ldp(p)
    out = [e for e in es if e.direction == "local" and e.event == "output"]
    if not out:
        return ldp, None
    info = out[-1].params.get("info", {})
    key = json.dumps(
        [
            spec.get("job_id"),
            me,
            p,
            info.get("online"),
            info.get("counted"),
            info.get("final"),
            samples,
        ],
        sort_keys=True,
        default=str,
    )
    rep_key = key + "#report"
    if rep_key in _INCA_CACHE:
        return _INCA_CACHE[key], _INCA_CACHE[rep_key]  # type: ignore[return-value]
    ex = execution_from_info(spec, info)
    parts = list(spec["participants"])
    rep = party_report(
        ex,
        parts.index(me),
        threat_dict(p["threat"], len(parts)),
        sigma_eta=float(p["sigma_eta"]),
        sigma_delta=float(p["sigma_delta"]),
        delta=float(p["delta"]),
        sensitivity=charged_sensitivity(p, sigma_key="sigma_eta"),
        samples=samples,
        seed=int(spec.get("public_seed", 0)),
    )
    if rep["epsilon"] < ldp.epsilon:
        loss = PrivacyLoss(
            rep["epsilon"],
            float(p["delta"]),
            f"IncA audit of this execution, threat {p['threat']} (Theorem 4.1, "
            f"worst of {rep['samples']} sampled adversaries; "
            f"rank condition in {rep['rank_condition_fraction']:.0%})",
        )
    else:
        loss = ldp
    if len(_INCA_CACHE) > 256:
        _INCA_CACHE.clear()
    _INCA_CACHE[key], _INCA_CACHE[rep_key] = loss, rep  # type: ignore[assignment]
    return loss, rep


def inca_losses(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """The guarantee: the local-DP level of η (always valid, whoever the adversary is). The job's
    threat ("collude:ρ", "eavesdrop:P") is a SIZE of adversary and C-DP / E-DP are worst-case over
    its placement (docs/errata.md), while `inca_audit_loss` is the worst of a few sampled placements:
    an audit, shown beside the guarantee (`inca_baselines`), never as it."""
    if _real_contributions(entries) == 0:
        return {v: PrivacyLoss(0.0, 0.0, "no-contribution") for v in _others(spec, me)}
    loss = _inca_ldp(spec["params"])
    return {v: loss for v in _others(spec, me)}


def inca_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    """Before the job: the always-valid local-DP level of η (the execution is not known yet)."""
    loss = _inca_ldp(spec["params"])
    return {v: loss for v in _others(spec, me)}


def inca_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """The local-DP level of η beside the audited value (what the node would have without the
    correlated noise), and the job's target."""
    p = spec["params"]
    es = list(entries)
    out = {
        "local-dp": _inca_ldp(p),
        "target": PrivacyLoss(
            float(p["epsilon"]),
            float(p["delta"]),
            f"the job's calibration target against {p['threat']}",
        ),
    }
    _, rep = inca_audit_loss(spec, es, me)
    if rep is not None:
        out[INCA_AUDIT] = PrivacyLoss(
            rep["epsilon"],
            float(p["delta"]),
            f"IncA audit of this execution, threat {p['threat']} (Theorem 4.1), worst of "
            f"{rep['samples']} sampled adversaries only: not a bound over all placements "
            "(the paper's C-DP / E-DP are worst cases over placements, docs/errata.md); "
            "continuous-noise analysis of real-weighted views, not proven for the "
            "discrete noise sampled",
        )
    return out
