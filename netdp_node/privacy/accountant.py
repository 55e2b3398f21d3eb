"""The node's local accountant: privacy loss towards every other node, from its own view only.

Pure functions of (the node's ledger entries, the public job specs). Nothing here reads another
node's ledger or any global trace.

Per job, each algorithm has a function `losses(spec, entries, me) -> {peer: PrivacyLoss}` giving the
loss the node has incurred towards each other participant. Across jobs, losses towards the same peer
are composed by `compose_losses` (in RDP when every part has an RDP curve, otherwise by basic
composition; see its docstring). The node's budget (ε, δ) must hold towards every peer.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from netdp_node.graphs import spec_edges
from netdp_node.privacy import muffliato_accountant, walk_accountant
from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    compose_losses,
    gaussian_rdp,
    rdp_to_dp,
)
from netdp_node.privacy.discrete_gaussian import charged_sensitivity
from netdp_node.privacy.network_dp import ldp_sum_std, ring_release_noise_count, ring_sum_loss
from netdp_node.privacy.network_dp_walk import fmt_shuffle_condition, fmt_shuffle_epsilon
from netdp_node.privacy.random_walk import (
    communicability_sparse,
    known_sender,
    ldp_epsilon,
    live_law,
    neighbour_lists,
    paper_epsilon,
    sound_epsilon,
    sound_q,
    transition_matrix,
    weight_rule,
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
    windows = walk_accountant.real_contributions(entries)
    loss = ring_sum_loss(
        sigma=p["sigma"],
        sensitivity=charged_sensitivity(p),
        windows=windows,
        delta=p["delta"],
        delta_prime=p["delta_prime"],
    )
    return {v: loss for v in _others(spec, me)}


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
    return {v: loss for v in _others(spec, me)}


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


def estimate_std(spec: Mapping[str, Any]) -> tuple[float, str] | None:
    """The noise std of a job's released value (each coordinate) from its public parameters, and
    how it is obtained; None for an algorithm without a closed form here. The operator's `netdp job
    result` and the demo's "noise std of the estimate" share it.

    ring-sum: the value is τ/K, τ holding `ring_release_noise_count` Gaussian additions of σ;
    walk-sum: the value sums T steps, each with its own N(0, σ²) (noise-only steps too)."""
    p = spec["params"]
    if spec["algorithm"] == "ring-sum":
        return (
            ring_sum_utility(spec)["netdp_std"],
            "σ·sqrt(noise additions)/K, Algorithm 1's schedule with the release's noise",
        )
    if spec["algorithm"] == "walk-sum":
        return (math.sqrt(int(p["T"])) * float(p["sigma"]), "σ·sqrt(T): one Gaussian per step")
    return None


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
    windows = walk_accountant.real_contributions(entries)
    loss = ring_histogram_loss(spec, windows)
    return {v: loss for v in _others(spec, me)}


def ring_histogram_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    loss = ring_histogram_loss(spec, int(spec["params"]["rounds"]))
    return {v: loss for v in _others(spec, me)}


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
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """For the Gaussian sums (ring-sum, ring-sum-r, walk-sum), what the node's k real contributions
    would cost (i) under local DP, each contribution sent with its own N(0, σ²) and every one seen
    (k Gaussians of multiplier σ/Δ), and (ii) with a trusted curator releasing only the result (one
    Gaussian of the result's total noise std, user-level sensitivity k·Δ). Both in RDP at δ."""
    p = spec["params"]
    es = list(entries)
    k = walk_accountant.real_contributions(es)
    sigma, sens, delta = float(p["sigma"]), charged_sensitivity(p), float(p["delta"])
    n = len(spec["participants"])
    if spec["algorithm"] == "walk-sum":
        total = math.sqrt(int(p["T"])) * sigma
    elif spec["algorithm"] == "ring-sum":
        total = math.sqrt(ring_release_noise_count(n, int(p["rounds"]))) * sigma
    else:  # ring-sum-r: σ + (nK − 1)·σ²/(n − 1) + the release's σ
        total = sigma * math.sqrt(2 + (n * int(p["rounds"]) - 1) / (n - 1))
    return {
        "local-dp": _gaussian_loss(sigma / sens, k, delta, "local DP, same σ per contribution"),
        "central-dp": _gaussian_loss(
            total / (max(k, 1) * sens),
            1 if k else 0,
            delta,
            "trusted curator, same noise on the result",
        ),
    }


# -- random-walk DP-SGD on any graph (Cyffers, Bellet & Upadhyay, ICML 2024) ------------------------
RW_MC_WALKS = 1000  # simulated trajectories per report (job parameter mc_walks)


#: rw-sgd's guarantee: contributions are clipped so that each is a Gaussian mechanism at the
#: local-DP level, composed in RDP without the α cap of Cyffers, Bellet & Upadhyay (ICML 2024)
RW_LDP_METHOD = (
    "local-DP bound: the node's contributions as Gaussian mechanisms in RDP, "
    "no α cap needed (sound; every contribution clipped at the local-DP level)"
)


def _rw_loss(p: Mapping[str, Any], count: int) -> PrivacyLoss:
    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    z = float(p["sigma"]) / charged_sensitivity(p)  # the noise multiplier on the grid
    return PrivacyLoss(
        ldp_epsilon(count, z, float(p["delta"])),
        float(p["delta"]),
        RW_LDP_METHOD,
        (DEFAULT_ORDERS, tuple(gaussian_rdp(z, DEFAULT_ORDERS, count).tolist())),
    )


def _rw_graph(spec: Mapping[str, Any]) -> tuple[list[str], list[tuple[int, int]]]:
    parts = list(spec["participants"])
    index = {v: i for i, v in enumerate(parts)}

    edges = [(index[a], index[b]) for a, b in spec_edges(spec) if a in index and b in index]
    return parts, edges


def _rw_realised_law(
    spec: Mapping[str, Any], entries: Sequence[ViewEntry], W: Any, parts: list[str]
) -> tuple[list[tuple[int, Any]], dict[int, list[int]]] | None:
    """The walk's law as far as this node's ledger shows it (custody re-sends): ([], {}) if no
    re-send is visible; the phases (from step t on: W conditioned on the live set) and the extra
    observations (x_t, seen by every participant: the receiver, or a stale branch) if every re-route
    the ledger reveals is one this node made (its record gives the step); None if the ledger shows
    the walk was re-routed elsewhere (fewer live participants) at a step it does not record."""
    index = {v: i for i, v in enumerate(parts)}
    reroutes = sorted(
        (int(e.params["t"]), index[e.peer])
        for e in entries
        if e.direction == "local" and e.event == "reroute" and "t" in e.params and e.peer in index
    )
    if any(e.event == "reroute" and "t" not in e.params for e in entries):
        return None
    if any(e.event in ("second-release", "fenced") or e.params.get("repeat") for e in entries):
        # the walk forked (a stale branch went on; or this node held one step on two branches,
        # the second time without its data: walk.py `repeat`): not one walk of a known law
        return None
    known = {d for _, d in reroutes}
    lives = [
        int(e.params["live"]) for e in entries if e.direction == "local" and "live" in e.params
    ]
    if lives and min(lives) < len(parts) - len(known):
        return None  # someone else re-routed, at a step this node cannot see
    phases, dead = [], set()
    for t, d in reroutes:
        dead.add(d)
        phases.append((t, live_law(W, dead)))
    # A re-send does not prove the receiver crashed: if only its handoff was lost it went on, and
    # the stale branch (fenced later, or even released) was seen by holders this ledger does not
    # name (walk.py docstring). Each of them saw x_t plus what u's data does not touch (u rejects
    # the stale epoch), a post-processing of x_t: so every participant is given a look at x_t.
    ts = [t for t, _ in reroutes]
    extra = {i: list(ts) for i in range(len(parts))} if ts else {}
    return phases, extra


def _rw_groups(p: Mapping[str, Any], parts: list[str], u: int) -> list[tuple[int, ...]]:
    """The job's public collusion groups as observer sets seen from u: each group without u (u's
    own colluders pool what they see of u), dropped when one member or fewer is left."""
    out = []
    for g in p.get("collusion_groups", []):
        members = tuple(sorted(int(i) for i in g if int(i) != u))
        if len(members) >= 2 and all(0 <= i < len(parts) for i in members):
            out.append(members)
    return out


#: rw-sgd's per-trajectory accountant (netdp's own, docs/accountants.md): amplification by
#: iteration along simulated walks, which replaces the per-contribution composition of Cyffers,
#: Bellet & Upadhyay (ICML 2024), App. B, shown unsound in docs/errata.md
RW_TRAJECTORY = "per-trajectory accountant (amplification by iteration over simulated walks)"
#: the label of rw-sgd's per-trajectory figure shown beside its guarantee (see below)
RW_SOUND = (
    f"{RW_TRAJECTORY[:-1]}; continuous-noise analysis; not proven for discrete noise; "
    "not a guarantee)"
)


def rw_sgd_pair_losses(
    spec: Mapping[str, Any],
    entries: Iterable[ViewEntry],
    me: str,
    count: int,
    *,
    walks: int | None = None,
) -> dict[str, PrivacyLoss]:
    """The node's loss towards every other participant (and collusion group): the local-DP bound
    of its `count` discrete Gaussian releases (`_rw_loss`), the bound proven for them.
    The per-trajectory accountant relies on amplification by iteration (shift reduction over
    real shifts, continuous noise only): it is shown beside it, labelled (`rw_sgd_figures`)."""
    ldp = _rw_loss(spec["params"], count)
    peers = _others(spec, me)
    u0 = list(spec["participants"]).index(me)
    return {
        v: ldp
        for v in peers
        + [
            "group:" + "+".join(spec["participants"][i] for i in g)
            for g in _rw_groups(spec["params"], list(spec["participants"]), u0)
        ]
    }


def rw_sgd_figures(
    spec: Mapping[str, Any],
    entries: Iterable[ViewEntry],
    me: str,
    count: int,
    *,
    walks: int | None = None,
) -> dict[str, PrivacyLoss]:
    """The per-trajectory figure towards every other participant (formerly the enforced loss).
    Not proven for the discrete noise sampled: its shift profiles a_k (e.g. 1/i for a contribution
    i draws before the observation) come from amplification by iteration (Feldman, Mironov,
    Talwar, Thakurta, FOCS 2018), whose shift reduction absorbs REAL shifts into CONTINUOUS
    Gaussian noise; only its a = 1 terms are per-release Gaussian RDP (CKS Theorem 4).
    The smaller of
    * the per-trajectory accountant (`random_walk.sound_q` / `sound_epsilon`): Monte
      Carlo over `mc_walks` data-independent walks from the public start holder, u contributing at
      its first `cap` visits, the observer seeing the token at its visits and the published final
      model, Hoeffding's certified upper confidence bound (β = δ/10 of δ); over
      the realised law after a custody re-send this node made, replaced by the
      local-DP bound if the ledger shows a re-send it cannot place in time;
    * the local-DP bound of the node's `count` contributions.
    Also towards every public collusion group ("group:a+b": the group contracted into
    one observer whose visits are its members', the per-trajectory accountant applied to it).
    Valid for a known sender (mTLS). No α cap applies to either (no Lemma 1). The simulation seed
    is derived from the job id and the node (the accountant stays a pure function)."""
    p = spec["params"]
    ldp = _rw_loss(p, count)
    peers = _others(spec, me)
    u0 = list(spec["participants"]).index(me)
    others = peers + [
        "group:" + "+".join(spec["participants"][i] for i in g)
        for g in _rw_groups(p, list(spec["participants"]), u0)
    ]
    if count == 0:
        return {v: ldp for v in others}
    parts, edges = _rw_graph(spec)
    if not edges:
        raise ValueError("the rw-sgd job spec has no graph (edges): the accountant needs W")
    es = list(entries)
    W = transition_matrix(len(parts), edges, weight_rule(p.get("weights", "coded")))
    law = _rw_realised_law(spec, es, W, parts)
    if law is None:
        lab = PrivacyLoss(
            ldp.epsilon,
            ldp.delta,
            ldp.method + "; the walk was re-routed "
            "(custody) at a step this ledger does not record, so the per-trajectory "
            "accountant over the realised law is not computable here",
            ldp.rdp,
        )
        return {v: lab for v in others}
    phases = law[0]
    extra: dict[Any, list[int]] = law[1]  # gains the groups' entries (tuple keys) below
    R = int(walks or p.get("mc_walks", RW_MC_WALKS))
    seed = int.from_bytes(
        hashlib.sha256(f"{spec.get('job_id', '')}|{me}".encode()).digest()[:8], "big"
    )
    u = parts.index(me)
    start = int(spec.get("public_seed", 0)) % len(parts)
    obs: list[Any] = [parts.index(v) for v in peers] + _rw_groups(p, parts, u)
    for g in obs:
        if isinstance(g, tuple) and extra:  # a group sees what any member saw
            extra[g] = sorted({t for i in g for t in extra.get(i, ())})
    cap = int(p["cap"])
    z, delta = float(p["sigma"]) / charged_sensitivity(p), float(p["delta"])
    burn = int(p.get("burn_in", 0))
    qs = sound_q(
        W,
        u,
        obs,
        int(p["T"]) + burn,
        cap,
        R,
        np.random.default_rng(seed),
        start=start,
        release=True,
        phases=phases,
        extra_obs=extra,
        burn_in=burn,
    )
    law_txt = f"realised law after {len(phases)} re-send(s)" if phases else "public W"
    out = {}
    for v, i in zip(others, obs):
        eps, dlt, _ = sound_epsilon(qs[i], z, cap, delta)
        if eps < ldp.epsilon:
            out[v] = PrivacyLoss(
                eps,
                dlt,
                f"{RW_TRAJECTORY}, {R} simulated walks over the {law_txt}, final model "
                f"published counted, Hoeffding bound β = δ/10, no α cap needed; "
                "continuous-noise analysis; not proven for discrete noise",
            )
        else:
            out[v] = ldp
    return out


def rw_sgd_losses(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """The proven loss towards each peer from the node's ledger (`rw_sgd_pair_losses` with its
    real contributions): the local-DP level. The §4.9 figure and the paper's per-pair value are
    not guarantees for discrete noise; they are shown beside it, labelled (`rw_sgd_baselines`)."""
    es = list(entries)
    return rw_sgd_pair_losses(spec, es, me, walk_accountant.real_contributions(es))


def rw_sgd_prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    return rw_sgd_pair_losses(spec, [], me, int(spec["params"]["cap"]))


def rw_sgd_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """The paper's accountant for the node's real count (Lemma 2 composed over its contributions,
    known-sender form of App. B.1, clipped at the LDP level; Cyffers, Bellet & Upadhyay, ICML 2024,
    §6) towards the worst peer, with the c ≤ 1 α cap of the paper's §4.2 (netdp is not reproducing
    the paper here): labelled, it is NOT a guarantee (the per-contribution composition is unsound,
    docs/errata.md), and only meaningful while the walk follows W (no re-send)."""
    p = spec["params"]
    parts, edges = _rw_graph(spec)
    es = list(entries)
    count = walk_accountant.real_contributions(es)
    if not edges or count == 0:
        return {}
    u = parts.index(me)
    S = communicability_sparse(
        len(parts), edges, u, int(p["T"]), weight_rule(p.get("weights", "coded"))
    )
    S = known_sender(S, u, neighbour_lists(len(parts), edges))
    eps = paper_epsilon(
        S, count, float(p["sigma"]) / charged_sensitivity(p), float(p["delta"]), cap="c1"
    )
    eps[u] = 0.0
    rerouted = any(e.event == "reroute" for e in es)
    figs = rw_sgd_figures(spec, es, me, count)
    worst = max(
        (x for v, x in figs.items() if not v.startswith("group:")),
        key=lambda x: x.epsilon,
        default=None,
    )
    sound = {RW_SOUND: worst} if worst is not None else {}
    return {
        **sound,
        "paper (not a guarantee)": PrivacyLoss(
            float(eps.max()),
            float(p["delta"]),
            "Cyffers, Bellet & Upadhyay, ICML 2024: Lemma 2 composed over contributions, known "
            "sender (App. B.1), α ≤ (1+√(1+8σ²))/2 (c ≤ 1 cap, §4.2); unsound in general (the "
            "per-contribution composition of App. B, docs/errata.md)"
            + ("; the walk was re-routed, so W no longer describes it" if rerouted else ""),
        ),
    }


@dataclass(frozen=True)
class Accountant:
    losses: Callable[[Mapping[str, Any], Iterable[ViewEntry], str], dict[str, PrivacyLoss]]
    prospective: Callable[[Mapping[str, Any], str], dict[str, PrivacyLoss]]
    theorem: str
    # the same task under local DP and with a trusted curator, for the report (optional)
    baselines: (
        Callable[[Mapping[str, Any], Iterable[ViewEntry], str], dict[str, PrivacyLoss]] | None
    ) = None
    # what the node learnt about every other participant (gossip: its own joint view), optional
    incoming: (
        Callable[[Mapping[str, Any], Iterable[ViewEntry], str], dict[str, PrivacyLoss]] | None
    ) = None


ACCOUNTANTS: dict[str, Accountant] = {
    "ring-sum": Accountant(
        ring_sum_losses,
        ring_sum_prospective,
        "Cyffers & Bellet, AISTATS 2022, Theorem 1 (App. A); erratum E1 (docs/errata.md)",
        gaussian_sum_baselines,
    ),
    "ring-sum-r": Accountant(
        ring_sum_losses,
        ring_sum_prospective,
        "Cyffers & Bellet, AISTATS 2022, Remark 1 with erratum E2 (σ/√(n−1)), accounted "
        "as Theorem 1 (errata E1, E2: docs/errata.md)",
        gaussian_sum_baselines,
    ),
    "ring-histogram": Accountant(
        ring_histogram_losses,
        ring_histogram_prospective,
        "Cyffers & Bellet, AISTATS 2022, Theorem 2 corrected (errata E3, E4, E22: "
        "docs/errata.md), numeric shuffle bound (Remark 2; Feldman, McMillan & Talwar, "
        "FOCS 2021, Theorem 3.1)",
    ),
    "rw-sgd": Accountant(
        rw_sgd_losses,
        rw_sgd_prospective,
        "random-walk DP-SGD: the local-DP bound of the node's discrete "
        "Gaussian releases (Canonne, Kamath & Steinke, NeurIPS 2020, Theorem 4); "
        "netdp's per-trajectory figure (amplification by iteration, continuous noise "
        "only; docs/accountants.md) and the Lemma 2 / Theorem 3 value of Cyffers, Bellet "
        "& Upadhyay, ICML 2024 beside it, labelled",
        rw_sgd_baselines,
    ),
    "walk-sum": Accountant(
        walk_accountant.walk_losses,
        walk_accountant.walk_prospective,
        "Cyffers & Bellet, AISTATS 2022, Theorem 3 + App. D (E7) + App. G (Lemma 2, "
        "E14, or netdp's per-edge contribution cap); errata: docs/errata.md",
        gaussian_sum_baselines,
    ),
    "walk-histogram": Accountant(
        walk_accountant.walk_losses,
        walk_accountant.walk_prospective,
        "Cyffers & Bellet, AISTATS 2022, Theorem 6 (App. E) with Remark 4 (E8) + App. G; "
        "errata: docs/errata.md",
    ),
    "walk-sgd": Accountant(
        walk_accountant.walk_losses,
        walk_accountant.walk_prospective,
        "local-DP level of the node's discrete Gaussian releases (RDP, CKS "
        "Theorem 4 and Proposition 12); Cyffers & Bellet 2022 Theorem 4 via "
        "Lemma 1 (amplification by iteration, continuous noise only) beside "
        "it, labelled",
        walk_accountant.sgd_baselines,
    ),
    # "inca": registered by netdp_node.algorithms.inca (its accountant lives in that folder)
    "muffliato": Accountant(
        muffliato_accountant.losses,
        muffliato_accountant.prospective,
        "Muffliato (Cyffers et al., NeurIPS 2022, Alg. 1): exact joint-view accountant on "
        "the realised schedule (netdp's own; eq. (6) is not a per-pair bound, docs/errata.md), "
        "local-DP level until the schedule is known; paper eq. (6) beside it, labelled",
        muffliato_accountant.baselines,
        muffliato_accountant.incoming,
    ),
    "muffliato-random": Accountant(
        muffliato_accountant.losses,
        muffliato_accountant.prospective,
        "Randomized Muffliato (Alg. 2): exact joint-view accountant on "
        "the realised exchanges (Cyffers et al., NeurIPS 2022, §3.3; netdp's own "
        "accountant, docs/errata.md); paper eq. (6) beside it, labelled",
        muffliato_accountant.baselines,
        muffliato_accountant.incoming,
    ),
    "muffliato-gd": Accountant(
        muffliato_accountant.losses,
        muffliato_accountant.prospective,
        "Muffliato-GD (Cyffers et al., NeurIPS 2022, Alg. 3): local-DP composition over "
        "the steps (the guarantee); per-call joint view and paper eq. (6) beside it, labelled",
        muffliato_accountant.baselines,
        muffliato_accountant.incoming,
    ),
}


# -- across jobs --------------------------------------------------------------------------------
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


def per_job_losses(job: JobView, me: str) -> dict[str, PrivacyLoss]:
    if never_ran(job.entries):
        return {}  # nothing left the node
    acc = ACCOUNTANTS.get(job.spec["algorithm"])
    if acc is None:
        raise ValueError(f"no accountant for algorithm {job.spec['algorithm']!r}")
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
    return {peer: compose_losses(ls, delta_target) for peer, ls in sorted(parts.items())}


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
        acc = ACCOUNTANTS[spec["algorithm"]]
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
