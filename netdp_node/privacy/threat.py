"""What every reported ε assumes: who observes (the threat model of each algorithm) and that the
node's noise is secret (a seeded node is NOT PRIVATE).

One place for both, read by every report (`netdp privacy report`, `netdp job result`, `netdp demo`):

* One function per algorithm, (spec, me) -> `ThreatModel`, the `threat` of its record
  (`get_algorithm(name).threat`; `netdp_node.algorithms.threat_model(spec, me)`): which observers
  the job's ε holds against (a single node, a colluding set of up to c nodes, or anyone,
  eavesdroppers included), and what it does not cover, from the public job spec. JSON outputs
  carry it under the key "threat_model" (`ThreatModel.as_dict`).
* `SEEDED_RNG_EVENT`: the ledger entry a node started with `--seed` writes for every job it runs
  (its private RNG is then a seeded PCG64: its noise and next hops are predictable). Every report
  and result of such a node is marked `NOT_PRIVATE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: ledger event (direction "local") of a job whose private RNG was seeded (`netdp node --seed`)
SEEDED_RNG_EVENT = "seeded-rng"
#: the mark of every report and result of a node whose private RNG was seeded
NOT_PRIVATE = "NOT PRIVATE (seeded)"


def not_private_note(nodes: Sequence[str] | None = None) -> str:
    """The sentence every report prints beside NOT_PRIVATE (for `nodes`, or for this node)."""
    if not nodes:
        who, its = "this node's private RNG was", "its"
    elif len(nodes) == 1:
        who, its = f"the private RNG of {nodes[0]} was", "its"
    else:
        who, its = f"the private RNGs of {', '.join(nodes)} were", "their"
    return (
        f"{NOT_PRIVATE}: {who} seeded (--seed, for tests only), so {its} noise and draws are "
        "predictable to anyone who knows or guesses the seed; no reported ε holds for "
        f"{its} data, nor for the data of nodes whose protection relies on {its} noise"
    )


def seeded(entries: Iterable[Any]) -> bool:
    """Whether a job's ledger entries say that the node's private RNG was seeded."""
    return any(e.event == SEEDED_RNG_EVENT and e.direction == "local" for e in entries)


@dataclass(frozen=True)
class ThreatModel:
    """Who a job's ε holds against.

    observers: short label: "each single node", "any colluding set of up to c nodes", or "any set
        of nodes and any eavesdropper (local DP)".
    colluders: the largest colluding set the ε covers (1: no collusion; None: any set).
    statement: the full statement, with what it does not cover (collusion, eavesdroppers).
    """

    observers: str
    colluders: int | None
    statement: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "observers": self.observers,
            "colluders": self.colluders,
            "statement": self.statement,
        }


LINKS = (
    "Links are mutually authenticated TLS: an eavesdropper on the network sees who sends to "
    "whom and when, never a value."
)
SINGLE = "each single node (no collusion)"
ANYONE = "any set of nodes and any eavesdropper (local DP)"


def _ring_noise_rounds(spec: Mapping[str, Any]) -> list[int]:
    """Per ring position, the rounds (of K) in which that node adds Gaussian noise."""
    from netdp_node.privacy.ring import ring_release_adds_noise  # lazy: start-up cost

    n, k = len(spec["participants"]), int(spec["params"]["rounds"])
    return [
        sum(ring_release_adds_noise(p, r, n, k) for r in range(1, k + 1)) for p in range(1, n + 1)
    ]


def ring_sum(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    k = int(spec["params"]["rounds"])
    counts = _ring_noise_rounds(spec)
    lo, hi = min(counts), max(counts)
    span = f"{lo}" if lo == hi else f"{lo}–{hi}"
    mine = ""
    if me is not None and me in spec["participants"]:
        mine = f"; {me} adds noise in {counts[list(spec['participants']).index(me)]} of {k}"
    return ThreatModel(
        SINGLE,
        1,
        (
            "Network DP: an observer's view is the tokens it receives and the release. It does NOT "
            "hold against colluding nodes: a node u's ring "
            "predecessor and successor together see the token just before and just after u's step, "
            f"and u adds noise in only {span} of its {k} rounds (Algorithm 1's schedule{mine}), so in "
            "every other round those two neighbours learn x_u exactly. ring-sum-r (noise at every "
            "visit) avoids the exact leak, though its ε does not cover colluders either; for an ε "
            "against colluding sets use a walk (walk-sum, walk-histogram, walk-sgd) with the job "
            "parameter colluders=c, or inca (local DP of η). " + LINKS
        ),
    )


def ring_sum_r(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    return ThreatModel(
        SINGLE,
        1,
        (
            "Network DP: an observer's view is the tokens it receives and the release. Colluding "
            "nodes are not covered: a node u's ring predecessor "
            "and successor together see x_u + N(0, σ²/(n−1)) at each of u's visits (noise at every "
            "visit, Remark 1: no exact leak, but the accountant credits no guarantee against them); "
            "for an ε against colluding sets use a walk with colluders=c, or inca. " + LINKS
        ),
    )


def ring_histogram(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    return ThreatModel(
        SINGLE,
        1,
        (
            "Network DP: an observer's view is the counts it receives and the release. Colluding "
            "nodes are not covered: a node u's ring predecessor "
            "and successor together see each of u's randomized responses, i.e. only the local-DP "
            "level ε0 per report, composed over the rounds. " + LINKS
        ),
    )


def walk(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    p = spec["params"]
    if p.get("dp", "network") == "local":
        return ThreatModel(
            ANYONE,
            None,
            (
                "Local DP-SGD (the baseline, dp=local): the ε composes the node's own noisy steps, so "
                "it holds whoever sees them: any set of colluding nodes, and an eavesdropper on every "
                "link."
            ),
        )
    return _walk_network(spec)


def walk_sgd(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    if spec["params"].get("dp", "network") == "local":
        return walk(spec, me)
    return ThreatModel(
        ANYONE,
        None,
        (
            "walk-sgd: the ε is the local-DP level of the node's own noisy steps (Lemma 1's "
            "amplification is proven for continuous noise only; its figure is shown beside it, "
            "labelled), so it holds whoever sees them: any set of colluding nodes, and an "
            "eavesdropper on every link."
        ),
    )


def _walk_network(spec: Mapping[str, Any]) -> ThreatModel:
    c = int(spec["params"].get("colluders", 1))
    who = SINGLE if c == 1 else f"any colluding set of up to {c} nodes"
    whom = (
        "each other participant observing alone (the job parameter colluders=1)"
        if c == 1
        else f"any set of up to {c} participants pooling their views (the job parameter "
        f"colluders={c}: the theorems at n/c, the spotted contributions of {c} observers)"
    )
    return ThreatModel(
        who,
        c,
        (
            f"Network DP against {whom}; each holder knows who sent it the token and whom it sends it "
            "to (mTLS), "
            "which the accountant charges (App. G). Larger coalitions are not covered (raise "
            "colluders to cover them). The theorems assume the rest of the walk's path is secret: "
            "an eavesdropper who sees the traffic pattern learns it, so one that shares it with a "
            "participant is not covered. Where a peer's method is local DP (ldp-...), that ε holds "
            "against any observer. " + LINKS
        ),
    )


def rw_sgd(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    groups = spec["params"].get("collusion_groups") or []
    parts = list(spec["participants"])
    named = ["+".join(parts[i] for i in g) for g in groups]
    who = SINGLE + (f" and the listed collusion groups ({', '.join(named)})" if named else "")
    return ThreatModel(
        who,
        1,
        (
            "The ε towards each peer is the local-DP bound of the node's contributions (proven for "
            "the discrete noise sampled), so it holds against any coalition; a group listed in the "
            "job parameter collusion_groups is reported as one observer (group:...). The "
            "per-trajectory figure is a continuous-noise analysis, shown beside it, labelled. "
            "The walk's path is assumed secret beyond each holder's own neighbours: an eavesdropper "
            "who sees the traffic pattern learns it. " + LINKS
        ),
    )


def inca(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    threat = spec["params"].get("threat", "")
    return ThreatModel(
        ANYONE,
        None,
        (
            "The reported ε is the local-DP level of the node's η: it holds whoever observes (any "
            "set of colluding nodes, an eavesdropper on every link). The audited value shown beside "
            f"it is against the job's threat {threat} (collude:ρ, a colluding fraction ρ of the "
            "nodes; eavesdrop:P, an eavesdropper on each message with probability P) for a few "
            "sampled placements only: not a guarantee."
        ),
    )


def muffliato(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    return ThreatModel(
        ANYONE,
        None,
        (
            "The reported ε is the local-DP level of the node's discrete-Gaussian release x + η "
            "(every gossip message is computed from the nodes' releases: data processing), so it "
            "holds whoever observes (any set of colluding nodes, an eavesdropper on every link). The "
            "joint-view and paper figures shown beside it would bound single nodes only, and are "
            "continuous-noise analyses, not proven for discrete noise. " + LINKS
        ),
    )


def muffliato_gd(spec: Mapping[str, Any], me: str | None) -> ThreatModel:
    return ThreatModel(
        ANYONE,
        None,
        (
            "The reported ε is the local-DP composition over the node's gradient steps: it holds "
            "whoever observes (any set of colluding nodes, an eavesdropper on every link). The "
            "per-call joint-view values shown beside it hold against single nodes only and are not "
            "proven across steps."
        ),
    )
