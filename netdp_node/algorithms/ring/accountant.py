"""The ring algorithms' accountant (ring-sum, ring-sum-r, ring-histogram) from a node's own view:
the public job spec and its ledger entries. The theorems are in `netdp_node.privacy.network_dp`
(Theorem 1) and `netdp_node.privacy.network_dp_walk` (the shuffle bound of Theorem 2)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from netdp_node.algorithms.accounting import (
    Accountant,
    ViewEntry,
    gaussian_sum_baselines,
    others,
    real_contributions,
)
from netdp_node.privacy.amplification import fmt_shuffle_condition, fmt_shuffle_epsilon
from netdp_node.privacy.composition import PrivacyLoss, advanced_composition
from netdp_node.privacy.discrete_gaussian import charged_sensitivity
from netdp_node.privacy.ring import ldp_sum_std, ring_release_noise_count, ring_sum_loss


# -- ring sum (Algorithm 1, Theorem 1) ----------------------------------------------------------
def ring_sum_losses(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """Theorem 1 of Cyffers & Bellet, AISTATS 2022 (with erratum E1, docs/errata.md) from the node's
    ledger.

    Every contribution of this node falls in exactly one inter-visit window of each observer v,
    counting the release of the result as v's last observation (docs/errata.md, "The released
    result leaks the last steps"), and no window holds two of them. Every window holds noise from
    a user other than v: Algorithm 1's schedule for the windows between receptions, and the extra
    last-step noise of `ring_release_adds_noise` for the final one (the paper's schedule alone
    leaves it unprotected).
    So the loss towards each v composes one Gaussian window per real
    contribution the ledger shows (noise-only visits of a declining node cost nothing)."""
    p = spec["params"]
    windows = real_contributions(entries)
    loss = ring_sum_loss(
        sigma=p["sigma"],
        sensitivity=charged_sensitivity(p),
        windows=windows,
        delta=p["delta"],
        delta_prime=p["delta_prime"],
    )
    return {v: loss for v in others(spec, me)}


def ring_sum_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    """The loss if the node contributes in every round (used for the budget check at job start)."""
    p = spec["params"]
    loss = ring_sum_loss(
        sigma=p["sigma"],
        sensitivity=charged_sensitivity(p),
        windows=p["rounds"],
        delta=p["delta"],
        delta_prime=p["delta_prime"],
    )
    return {v: loss for v in others(spec, me)}


def ring_sum_utility(spec: Mapping[str, Any]) -> dict[str, float]:
    """Std of the released estimate (τ/K) and of the local-DP estimate with the same guarantee."""
    p = spec["params"]
    n, k, s = len(spec["participants"]), p["rounds"], p["sigma"]
    count = ring_release_noise_count(n, k)
    return {
        "netdp_std": count**0.5 * s / k,
        "ldp_std": ldp_sum_std(n, k, s) / k,
        "noise_additions": float(count),
    }


# -- ring histogram (Algorithm 2, Theorem 2) -----------------------------------------------------
def ring_histogram_loss(spec: Mapping[str, Any], windows: int) -> PrivacyLoss:
    """Theorem 2 (corrected with errata E3/E4/E22, docs/errata.md) in its numeric form (Remark 2;
    Feldman, McMillan & Talwar's shuffle bound): each of
    the node's real contributions falls in one window of every observer holding the n − 1 reports
    it does not know (the first window: the pre-loaded blanket; the last: the post-load), a shuffle
    of ε0-LDP randomized responses; the FMT bound gives the window's ε at δ, advanced composition
    over the windows (δ'). Where the FMT condition fails (ε0 > ln((n − 1)/(16 ln(2/δ))), e.g. every
    ring under about 230 nodes at δ = 1e-6) no amplification is claimed. The better of that and
    the local-DP composition (k·ε0, or advanced)."""
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
            best = (
                PrivacyLoss(te, min(1.0, td), "theorem2-fmt-advanced")
                if te < windows * ew
                else PrivacyLoss(windows * ew, min(1.0, windows * d), "theorem2-fmt-basic")
            )
    return best


def ring_histogram_losses(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    windows = real_contributions(entries)
    loss = ring_histogram_loss(spec, windows)
    return {v: loss for v in others(spec, me)}


def ring_histogram_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    loss = ring_histogram_loss(spec, int(spec["params"]["rounds"]))
    return {v: loss for v in others(spec, me)}


def estimate_std(spec: Mapping[str, Any]) -> tuple[float, str]:
    """ring-sum's released value is τ/K, τ holding `ring_release_noise_count` Gaussian additions of
    σ: the noise std of each coordinate, and how it is obtained (`Accountant.estimate_std`)."""
    return (
        ring_sum_utility(spec)["netdp_std"],
        "σ·sqrt(noise additions)/K, Algorithm 1's schedule with the release's noise",
    )


# -- baselines: the same task under local DP and with a trusted curator -----------------------------
def ring_sum_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """`gaussian_sum_baselines` with ring-sum's result noise: `ring_release_noise_count` σ's."""
    p, n = spec["params"], len(spec["participants"])
    total = math.sqrt(ring_release_noise_count(n, int(p["rounds"]))) * float(p["sigma"])
    return gaussian_sum_baselines(spec, entries, me, total)


def ring_sum_r_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """`gaussian_sum_baselines` with ring-sum-r's result noise: σ + (nK − 1)·σ²/(n − 1) + the
    release's σ."""
    p, n = spec["params"], len(spec["participants"])
    total = float(p["sigma"]) * math.sqrt(2 + (n * int(p["rounds"]) - 1) / (n - 1))
    return gaussian_sum_baselines(spec, entries, me, total)


RING_SUM = Accountant(
    ring_sum_losses,
    ring_sum_prospective,
    "Cyffers & Bellet, AISTATS 2022, Theorem 1 (App. A); erratum E1 (docs/errata.md)",
    ring_sum_baselines,
    estimate_std=estimate_std,
)
RING_SUM_R = Accountant(
    ring_sum_losses,
    ring_sum_prospective,
    "Cyffers & Bellet, AISTATS 2022, Remark 1 with erratum E2 (σ/√(n−1)), accounted "
    "as Theorem 1 (errata E1, E2: docs/errata.md)",
    ring_sum_r_baselines,
)
RING_HISTOGRAM = Accountant(
    ring_histogram_losses,
    ring_histogram_prospective,
    "Cyffers & Bellet, AISTATS 2022, Theorem 2 corrected (errata E3, E4, E22: "
    "docs/errata.md), numeric shuffle bound (Remark 2; Feldman, McMillan & Talwar, "
    "FOCS 2021, Theorem 3.1)",
)
