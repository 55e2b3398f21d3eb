"""The node's local accountant: privacy loss towards every other node, from its own view only.

Pure functions of (the node's ledger entries, the public job specs). Nothing here reads another
node's ledger or any global trace.

Per job, each algorithm has a function `losses(spec, entries, me) -> {peer: PrivacyLoss}` giving the
loss the node has incurred towards each other participant. Across jobs, losses towards the same peer
are composed by `compose_losses` (in RDP when every part has an RDP curve, otherwise by basic
composition; see its docstring). The node's budget (ε, δ) must hold towards every peer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from netdp_node.privacy import muffliato_accountant, walk_accountant
from netdp_node.privacy.composition import PrivacyLoss, compose_losses
from netdp_node.privacy.network_dp import ldp_sum_std, ring_release_noise_count, ring_sum_loss


class ViewEntry(Protocol):
    job_id: str
    direction: str
    event: str
    peer: str
    params: dict[str, Any]


def _others(spec: Mapping[str, Any], me: str) -> list[str]:
    return [p for p in spec["participants"] if p != me]


# -- ring sum (Algorithm 1, Theorem 1) ----------------------------------------------------------
def ring_sum_losses(spec: Mapping[str, Any], entries: Iterable[ViewEntry],
                    me: str) -> dict[str, PrivacyLoss]:
    """Theorem 1 (network-dp.md §3.1) from the node's ledger.

    Every contribution of this node falls in exactly one inter-visit window of each observer v,
    counting the release of the result as v's last observation (spec §1.3 "Final output"), and no
    window holds two of them. Every window holds noise from a user other than v: Algorithm 1's
    schedule for the windows between receptions, and the extra last-step noise of
    `ring_release_adds_noise` for the final one (the spec's schedule alone leaves it unprotected). So the loss towards each v composes one Gaussian window per real
    contribution the ledger shows (noise-only visits of a declining node cost nothing)."""
    p = spec["params"]
    windows = walk_accountant.real_contributions(entries)
    loss = ring_sum_loss(sigma=p["sigma"], sensitivity=p["sensitivity"], windows=windows,
                         delta=p["delta"], delta_prime=p["delta_prime"])
    return {v: loss for v in _others(spec, me)}


def ring_sum_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    """The loss if the node contributes in every round (used for the budget check at job start)."""
    p = spec["params"]
    loss = ring_sum_loss(sigma=p["sigma"], sensitivity=p["sensitivity"], windows=p["rounds"],
                         delta=p["delta"], delta_prime=p["delta_prime"])
    return {v: loss for v in _others(spec, me)}


def ring_sum_utility(spec: Mapping[str, Any]) -> dict[str, float]:
    """Std of the released estimate (τ/K) and of the local-DP estimate with the same guarantee."""
    p = spec["params"]
    n, k, s = len(spec["participants"]), p["rounds"], p["sigma"]
    count = ring_release_noise_count(n, k)
    return {
        "netdp_std": count ** 0.5 * s / k,
        "ldp_std": ldp_sum_std(n, k, s) / k,
        "noise_additions": float(count),
    }


# -- ring histogram (Algorithm 2, Theorem 2) -----------------------------------------------------
def ring_histogram_loss(spec: Mapping[str, Any], windows: int) -> PrivacyLoss:
    """Theorem 2 (corrected, spec §3.2 with E3/E4/E22) in its numeric form (Remark 2, B6): each of
    the node's real contributions falls in one window of every observer holding the n − 1 reports
    it does not know (the first window: the pre-loaded blanket; the last: the post-load), a shuffle
    of ε0-LDP randomized responses; the FMT bound gives the window's ε at δ, advanced composition
    over the windows (δ'). Where the FMT condition fails (ε0 > ln((n − 1)/(16 ln(2/δ))), e.g. every
    ring under about 230 nodes at δ = 1e-6) no amplification is claimed. The better of that and the local-DP composition (k·ε0, or advanced)."""
    from netdp_node.privacy.composition import advanced_composition
    from netdp_node.privacy.network_dp_walk import fmt_shuffle_condition, fmt_shuffle_epsilon

    p = spec["params"]
    n, e0, d, dp = len(spec["participants"]), p["epsilon0"], p["delta"], p["delta_prime"]
    if windows == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    best = PrivacyLoss(windows * e0, 0.0, "ldp-basic")
    ae, ad = advanced_composition(e0, 0.0, windows, dp)
    if ae < best.epsilon:
        best = PrivacyLoss(ae, ad, "ldp-advanced")
    if e0 <= fmt_shuffle_condition(n - 1, d):  # FMT applies (n − 1 > 16 ln(2/δ) e^ε0)
        ew = fmt_shuffle_epsilon(e0, n - 1, d)
        te, td = advanced_composition(ew, d, windows, dp)
        if min(te, windows * ew) < best.epsilon:
            best = (PrivacyLoss(te, min(1.0, td), "theorem2-fmt-advanced") if te < windows * ew
                    else PrivacyLoss(windows * ew, min(1.0, windows * d), "theorem2-fmt-basic"))
    return best


def ring_histogram_losses(spec: Mapping[str, Any], entries: Iterable[ViewEntry],
                          me: str) -> dict[str, PrivacyLoss]:
    windows = walk_accountant.real_contributions(entries)
    loss = ring_histogram_loss(spec, windows)
    return {v: loss for v in _others(spec, me)}


def ring_histogram_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    loss = ring_histogram_loss(spec, int(spec["params"]["rounds"]))
    return {v: loss for v in _others(spec, me)}


# -- baselines: the same task under local DP and with a trusted curator -----------------------------
def _gaussian_loss(z: float, count: int, delta: float, method: str) -> PrivacyLoss:
    """`count` Gaussian mechanisms of noise multiplier z, composed in RDP, at δ."""
    from netdp_node.privacy.composition import DEFAULT_ORDERS, gaussian_rdp, rdp_to_dp

    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    curve = gaussian_rdp(z, DEFAULT_ORDERS, count)
    return PrivacyLoss(rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0], delta, method)


def gaussian_sum_baselines(spec: Mapping[str, Any], entries: Iterable[ViewEntry],
                           me: str) -> dict[str, PrivacyLoss]:
    """For the Gaussian sums (ring-sum, ring-sum-r, walk-sum), what the node's k real contributions
    would cost (i) under local DP, each contribution sent with its own N(0, σ²) and every one seen
    (k Gaussians of multiplier σ/Δ), and (ii) with a trusted curator releasing only the result (one
    Gaussian of the result's total noise std, user-level sensitivity k·Δ). Both in RDP at δ."""
    p = spec["params"]
    es = list(entries)
    k = walk_accountant.real_contributions(es)
    sigma, sens, delta = float(p["sigma"]), float(p["sensitivity"]), float(p["delta"])
    n = len(spec["participants"])
    if spec["algorithm"] == "walk-sum":
        total = math.sqrt(int(p["T"])) * sigma
    elif spec["algorithm"] == "ring-sum":
        total = math.sqrt(ring_release_noise_count(n, int(p["rounds"]))) * sigma
    else:  # ring-sum-r: σ + (nK − 1)·σ²/(n − 1) + the release's σ
        total = sigma * math.sqrt(2 + (n * int(p["rounds"]) - 1) / (n - 1))
    return {"local-dp": _gaussian_loss(sigma / sens, k, delta, "local DP, same σ per contribution"),
            "central-dp": _gaussian_loss(total / (max(k, 1) * sens), 1 if k else 0, delta,
                                         "trusted curator, same noise on the result")}


# -- random-walk DP-SGD on any graph (random-walks.md) ----------------------------------------------
def _rw_loss(p: Mapping[str, Any], count: int) -> PrivacyLoss:
    from netdp_node.privacy.composition import DEFAULT_ORDERS, gaussian_rdp
    from netdp_node.privacy.random_walk import ldp_epsilon

    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    z = float(p["noise_multiplier"])
    return PrivacyLoss(ldp_epsilon(count, z, float(p["delta"])), float(p["delta"]),
                       "ldp-gaussian-rdp (sound; random-walks.md §4.8)",
                       (DEFAULT_ORDERS, tuple(gaussian_rdp(z, DEFAULT_ORDERS, count).tolist())))


def rw_sgd_losses(spec: Mapping[str, Any], entries: Iterable[ViewEntry],
                  me: str) -> dict[str, PrivacyLoss]:
    """The always-valid bound from the node's ledger: its real contributions, each a Gaussian
    mechanism of multiplier σ seen by every observer at worst (spec §4.8). The paper's per-pair
    value is not a guarantee (spec §0 item 3, §4.9); it is shown beside this one (`baselines`)."""
    count = walk_accountant.real_contributions(entries)
    loss = _rw_loss(spec["params"], count)
    return {v: loss for v in _others(spec, me)}


def rw_sgd_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    loss = _rw_loss(spec["params"], int(spec["params"]["cap"]))
    return {v: loss for v in _others(spec, me)}


def rw_sgd_baselines(spec: Mapping[str, Any], entries: Iterable[ViewEntry],
                     me: str) -> dict[str, PrivacyLoss]:
    """The paper's accountant for the node's real count (Lemma 2 composed over its contributions,
    known-sender form of App. B.1, α cap of Theorem 3; spec §4.3–4.7), worst peer: labelled, it is
    NOT a guarantee (spec §4.9)."""
    from netdp_node.privacy.random_walk import (
        communicability_sparse,
        known_sender,
        neighbour_lists,
        paper_epsilon,
    )

    p = spec["params"]
    parts = list(spec["participants"])
    index = {v: i for i, v in enumerate(parts)}
    edges = [(index[a], index[b]) for a, b in spec.get("edges", []) if a in index and b in index]
    count = walk_accountant.real_contributions(entries)
    if not edges or count == 0:
        return {}
    u = index[me]
    S = communicability_sparse(len(parts), edges, u, int(p["T"]), str(p.get("weights", "coded")))
    S = known_sender(S, u, neighbour_lists(len(parts), edges))
    eps = paper_epsilon(S, count, float(p["noise_multiplier"]), float(p["delta"]))
    eps[u] = 0.0
    return {"paper (not a guarantee)": PrivacyLoss(
        float(eps.max()), float(p["delta"]),
        "Lemma 2 composed over contributions, known sender (App. B.1), α cap; unsound in "
        "general (random-walks.md §4.9)")}


@dataclass(frozen=True)
class Accountant:
    losses: Callable[[Mapping[str, Any], Iterable[ViewEntry], str], dict[str, PrivacyLoss]]
    prospective: Callable[[Mapping[str, Any], str], dict[str, PrivacyLoss]]
    theorem: str
    # the same task under local DP and with a trusted curator, for the report (optional)
    baselines: Callable[[Mapping[str, Any], Iterable[ViewEntry], str],
                        dict[str, PrivacyLoss]] | None = None
    # what the node learnt about every other participant (gossip: its own joint view), optional
    incoming: Callable[[Mapping[str, Any], Iterable[ViewEntry], str],
                       dict[str, PrivacyLoss]] | None = None


ACCOUNTANTS: dict[str, Accountant] = {
    "ring-sum": Accountant(ring_sum_losses, ring_sum_prospective,
                           "Cyffers & Bellet 2022, Theorem 1 (network-dp.md §3.1, erratum E1)",
                           gaussian_sum_baselines),
    "ring-sum-r": Accountant(ring_sum_losses, ring_sum_prospective,
                             "Cyffers & Bellet 2022, Remark 1 with E2 (σ/√(n−1)), accounted as "
                             "Theorem 1 (network-dp.md §2.2, §3.1)", gaussian_sum_baselines),
    "ring-histogram": Accountant(ring_histogram_losses, ring_histogram_prospective,
                                 "Cyffers & Bellet 2022, Theorem 2 corrected (E3, E4, E22), "
                                 "numeric shuffle bound (Remark 2, B6) (network-dp.md §3.2)"),
    "rw-sgd": Accountant(rw_sgd_losses, rw_sgd_prospective,
                         "random-walk DP-SGD: local-DP bound (random-walks.md §4.8), the paper's "
                         "Lemma 2 / Theorem 3 value beside it, labelled", rw_sgd_baselines),
    "walk-sum": Accountant(walk_accountant.walk_losses, walk_accountant.walk_prospective,
                           "Cyffers & Bellet 2022, Theorem 3 + App. D (E7) + App. G (Lemma 2, E14 / "
                           "edge cap §2.8) (network-dp.md §3.3, §3.6)", gaussian_sum_baselines),
    "walk-histogram": Accountant(walk_accountant.walk_losses,
                                 walk_accountant.walk_prospective,
                                 "Cyffers & Bellet 2022, Theorem 6 with Remark 4 (E8) + App. G "
                                 "(network-dp.md §3.4, §3.6)"),
    "walk-sgd": Accountant(walk_accountant.walk_losses, walk_accountant.walk_prospective,
                           "Cyffers & Bellet 2022, Theorem 4 via Lemma 1 (E10, RDP) + App. G "
                           "(network-dp.md §3.5, §3.6)"),
    "muffliato": Accountant(muffliato_accountant.losses, muffliato_accountant.prospective,
                            "Muffliato (Alg. 1): exact joint-view accountant on the realised "
                            "schedule (muffliato.md §4.11), local-DP level until the schedule is "
                            "known; paper eq. (6) beside it, labelled",
                            muffliato_accountant.baselines, muffliato_accountant.incoming),
    "muffliato-random": Accountant(muffliato_accountant.losses, muffliato_accountant.prospective,
                                   "Randomized Muffliato (Alg. 2): exact joint-view accountant on "
                                   "the realised exchanges (muffliato.md §3.2, §4.11); paper eq. "
                                   "(6) beside it, labelled", muffliato_accountant.baselines,
                                   muffliato_accountant.incoming),
    "muffliato-gd": Accountant(muffliato_accountant.losses, muffliato_accountant.prospective,
                               "Muffliato-GD (Alg. 3): local-DP composition over the steps (the "
                               "guarantee, muffliato.md §4.6); per-call joint view and paper eq. "
                               "(6) beside it, labelled", muffliato_accountant.baselines,
                               muffliato_accountant.incoming),
}


# -- across jobs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobView:
    """What the accountant needs of one job: its public spec and this node's entries for it."""

    job_id: str
    spec: Mapping[str, Any]  # {"algorithm", "participants", "params", ...}
    entries: Sequence[ViewEntry]


def per_job_losses(job: JobView, me: str) -> dict[str, PrivacyLoss]:
    acc = ACCOUNTANTS.get(job.spec["algorithm"])
    if acc is None:
        raise ValueError(f"no accountant for algorithm {job.spec['algorithm']!r}")
    return acc.losses(job.spec, job.entries, me)


def total_losses(jobs: Iterable[JobView], me: str, delta_target: float,
                 extra: Mapping[str, PrivacyLoss] | None = None) -> dict[str, PrivacyLoss]:
    """Compose every job's loss towards each peer (plus an optional prospective job)."""
    parts: dict[str, list[PrivacyLoss]] = {}
    for job in jobs:
        for peer, loss in per_job_losses(job, me).items():
            parts.setdefault(peer, []).append(loss)
    for peer, loss in (extra or {}).items():
        parts.setdefault(peer, []).append(loss)
    return {peer: compose_losses(ls, delta_target) for peer, ls in sorted(parts.items())}


@dataclass(frozen=True)
class BudgetCheck:
    ok: bool
    worst_peer: str
    worst: PrivacyLoss | None
    reason: str


def check_budget(jobs: Iterable[JobView], spec: Mapping[str, Any], me: str, epsilon: float,
                 delta: float) -> BudgetCheck:
    """Would contributing fully to the job `spec` keep the node within (epsilon, delta) towards every
    peer, given what its ledger already shows?"""
    acc = ACCOUNTANTS[spec["algorithm"]]
    after = total_losses(jobs, me, delta, extra=acc.prospective(spec, me))
    worst_peer, worst = "", None
    for peer, loss in after.items():
        if worst is None or loss.epsilon > worst.epsilon:
            worst_peer, worst = peer, loss
    if worst is None:
        return BudgetCheck(True, "", None, "no peers")
    ok = worst.epsilon <= epsilon and worst.delta <= delta
    reason = (f"after this job the loss towards {worst_peer} would be ε={worst.epsilon:.4g}, "
              f"δ={worst.delta:.3g} ({worst.method}); budget ε={epsilon:g}, δ={delta:g}")
    return BudgetCheck(ok, worst_peer, worst, reason)
