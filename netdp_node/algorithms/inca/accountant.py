"""IncA's ledger-reading accountant (Sabater et al. 2025; engine `algorithms.inca.engine`, audit
`privacy.inca_audit`): the node's privacy from its own ledger and the public job spec only.

The guarantee is the local-DP level of the node's η (`IncaAccountant.losses`); the exact audit of
the execution the node's result states (Theorem 4.1 against sampled adversaries of the job's
threat) is shown beside it, labelled (`IncaAccountant.baselines`). Audits are memoised in an
explicit, bounded cache (`AuditCache`) owned by the accountant object."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from netdp_node.algorithms.accounting import Accountant, ViewEntry, others, real_contributions
from netdp_node.privacy.composition import PrivacyLoss
from netdp_node.privacy.discrete_gaussian import charged_sensitivity, release_epsilon
from netdp_node.privacy.inca_audit import execution_from_info, party_report, threat_dict

#: the label of IncA's audited value: twice not a guarantee (sampled placements; Theorem 4.1 is a
#: continuous-Gaussian analysis of real-weighted sums, not proven for the discrete noise drawn)
INCA_AUDIT = (
    "audit of sampled adversaries (continuous-noise analysis; not proven for discrete "
    "noise; not a guarantee)"
)
THEOREM = (
    "IncA (Sabater et al. 2025): exact audit of the execution, Theorem 4.1 "
    "(and Eq. 10, App. A.2), capped by the local-DP level of η"
)


def inca_ldp(p: Mapping[str, Any]) -> PrivacyLoss:
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


class AuditCache:
    """The audits already computed, by (job, node, parameters, public execution, samples): least
    recently used first out beyond `capacity` entries. An audit is a pure function of its key, so
    a hit returns exactly what a recomputation would."""

    def __init__(self, capacity: int = 256) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[PrivacyLoss, dict[str, Any]]] = OrderedDict()

    def get(self, key: str) -> tuple[PrivacyLoss, dict[str, Any]] | None:
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
        return hit

    def put(self, key: str, value: tuple[PrivacyLoss, dict[str, Any]]) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class IncaAccountant:
    """The accountant's functions over one audit cache (`accounting.Accountant`)."""

    def __init__(self, cache: AuditCache | None = None) -> None:
        self.cache = AuditCache() if cache is None else cache

    def audit_loss(
        self, spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str, samples: int = 8
    ) -> tuple[PrivacyLoss, dict[str, Any] | None]:
        """The node's privacy for an IncA job under the job's threat model (`threat`), computed
        from the public schedule and its own ledger: the result it received states the public
        execution (online sets, counted messages, finals, from the dissemination records), which
        `inca_audit.party_report` audits (Theorem 4.1, worst of `samples` adversaries drawn from
        the job's public seed). Before the node has a result, and as a cap, the local-DP level of
        its η (always valid). Returns (loss, the party report or None)."""
        es = list(entries)
        p = spec["params"]
        if real_contributions(es) == 0:
            return PrivacyLoss(0.0, 0.0, "no-contribution"), None
        ldp = inca_ldp(p)
        out = [e for e in es if e.direction == "local" and e.event == "output"]
        if not out:
            return ldp, None
        info = out[-1].params.get("info", {})
        key = json.dumps(
            [
                spec.get("job_id"),
                me,
                p,
                info.get("online"),  # the dense form (earlier ledgers)
                info.get("counted"),
                info.get("offline"),  # the compact form (exceptions)
                info.get("uncounted"),
                info.get("final"),
                info.get("lost"),
                samples,
            ],
            sort_keys=True,
            default=str,
        )
        hit = self.cache.get(key)
        if hit is not None:
            return hit
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
        self.cache.put(key, (loss, rep))
        return loss, rep

    def losses(
        self, spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
    ) -> dict[str, PrivacyLoss]:
        """The guarantee: the local-DP level of η (always valid, whoever the adversary is). The
        job's threat ("collude:ρ", "eavesdrop:P") is a SIZE of adversary and C-DP / E-DP are
        worst-case over its placement (docs/errata.md), while `audit_loss` is the worst of a few
        sampled placements: an audit, shown beside the guarantee (`baselines`), never as it."""
        if real_contributions(entries) == 0:
            return {v: PrivacyLoss(0.0, 0.0, "no-contribution") for v in others(spec, me)}
        loss = inca_ldp(spec["params"])
        return {v: loss for v in others(spec, me)}

    def prospective(self, spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
        """Before the job: the always-valid local-DP level of η (the execution is not known)."""
        loss = inca_ldp(spec["params"])
        return {v: loss for v in others(spec, me)}

    def baselines(
        self, spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
    ) -> dict[str, PrivacyLoss]:
        """The local-DP level of η beside the audited value (what the node would have without
        the correlated noise), and the job's target."""
        p = spec["params"]
        es = list(entries)
        out = {
            "local-dp": inca_ldp(p),
            "target": PrivacyLoss(
                float(p["epsilon"]),
                float(p["delta"]),
                f"the job's calibration target against {p['threat']}",
            ),
        }
        _, rep = self.audit_loss(spec, es, me)
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

    def accountant(self) -> Accountant:
        return Accountant(self.losses, self.prospective, THEOREM, self.baselines)


#: the accountant the node uses (one audit cache per process)
INCA = IncaAccountant()
ACCOUNTANT = INCA.accountant()
