"""The walks' accountant from a node's own view (the public job spec and its ledger entries): the
complete-graph token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet, AISTATS 2022;
their bounds are `netdp_node.privacy.walk_accountant`, whose docstring says what a node's report
uses) and random-walk DP-SGD on any graph (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024; the
per-trajectory machinery is `netdp_node.privacy.random_walk`). One `Accountant` per algorithm."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from netdp_node.algorithms import accounting
from netdp_node.algorithms.accounting import (
    Accountant,
    ViewEntry,
    gaussian_sum_baselines,
    real_contributions,
)
from netdp_node.graphs import spec_edges
from netdp_node.privacy.composition import DEFAULT_ORDERS, PrivacyLoss, gaussian_rdp
from netdp_node.privacy.discrete_gaussian import charged_sensitivity
from netdp_node.privacy.muffliato_accountant import CONTINUOUS
from netdp_node.privacy.rw_sgd import (
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
from netdp_node.privacy.walk_accountant import (
    HISTOGRAM,
    LEMMA1,
    SGD,
    SUM,
    Bounds,
    sgd_network_loss,
)


# -- the complete-graph token walks -----------------------------------------------------------------
def live_participants(spec: Mapping[str, Any], entries: Iterable[Any]) -> int:
    """n for the theorems: the participants minus those the walk was re-routed around, as far as
    this node's view shows (its own steps and the release record how many were still live).
    With D participants excluded after a crash the walk is uniform over a live set of at
    least n − D at every step; Theorems 3, 4, 6 and Lemma 2 only get worse as n decreases
    (subsampling probability, visit counts, cycle count T/n), so evaluating them at n − D is
    conservative (custody)."""
    n = len(spec["participants"])
    lives = [
        int(e.params["live"]) for e in entries if e.direction == "local" and "live" in e.params
    ]
    return max(2, min([n, *lives]))


class WalkAccountant:
    """A token walk's accountant (walk-sum, walk-histogram or walk-sgd) over its `Bounds`."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds

    def losses(
        self, spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
    ) -> dict[str, PrivacyLoss]:
        """The job's loss towards every peer, from this node's ledger: its real contributions and
        the participants still live (`privacy.walk_accountant` docstring)."""
        es = list(entries)
        count, n = real_contributions(es), live_participants(spec, es)
        loss = self.bounds.loss(spec["params"], n, count)
        return {v: loss for v in accounting.others(spec, me)}

    def prospective(self, spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
        """The loss if the node makes its maximum number of contributions (budget check)."""
        loss = self.bounds.prospective(spec["params"], len(spec["participants"]))
        return {v: loss for v in accounting.others(spec, me)}


SUM_ACCOUNTANT = WalkAccountant(SUM)
HISTOGRAM_ACCOUNTANT = WalkAccountant(HISTOGRAM)
SGD_ACCOUNTANT = WalkAccountant(SGD)


def sgd_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """Shown beside walk-sgd's guarantee, labelled: the Lemma-1 network figure (Theorem 4 + App. G)
    for the node's real contributions and the live participants, unclipped (at small n it can
    exceed the local-DP level). An analysis of CONTINUOUS Gaussian noise, NOT a guarantee for the
    discrete noise sampled (module docstring)."""
    p, es = spec["params"], list(entries)
    count = real_contributions(es)
    if count == 0 or p.get("dp", "network") == "local":
        return {}
    fig = sgd_network_loss(p, live_participants(spec, es), count)
    return {LEMMA1: PrivacyLoss(fig.epsilon, fig.delta, f"{fig.method}; {CONTINUOUS}")}


def walk_sum_baselines(
    spec: Mapping[str, Any], entries: Iterable[ViewEntry], me: str
) -> dict[str, PrivacyLoss]:
    """`gaussian_sum_baselines` with walk-sum's result noise: T steps, each with its own N(0, σ²)
    (noise-only steps too)."""
    p = spec["params"]
    return gaussian_sum_baselines(spec, entries, me, math.sqrt(int(p["T"])) * float(p["sigma"]))


def walk_sum_std(spec: Mapping[str, Any]) -> tuple[float, str]:
    """walk-sum's released value sums T steps, each with its own N(0, σ²) (noise-only steps too):
    the noise std of each coordinate, and how it is obtained (`Accountant.estimate_std`)."""
    p = spec["params"]
    return (math.sqrt(int(p["T"])) * float(p["sigma"]), "σ·sqrt(T): one Gaussian per step")


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
    peers = accounting.others(spec, me)
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
    """The per-trajectory figure towards every other participant (shown, not enforced).
    Not proven for the discrete noise sampled: its shift profiles a_k (e.g. 1/i for a contribution
    i draws before the observation) come from amplification by iteration (Feldman, Mironov,
    Talwar, Thakurta, FOCS 2018), whose shift reduction absorbs REAL shifts into CONTINUOUS
    Gaussian noise; only its a = 1 terms are per-release Gaussian RDP (CKS Theorem 4).
    The smaller of
    * the per-trajectory accountant (`rw_sgd.sound_q` / `sound_epsilon`): Monte
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
    peers = accounting.others(spec, me)
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
    real contributions): the local-DP level. The sound per-trajectory figure and the paper's
    per-pair value are not guarantees for discrete noise; they are shown beside it, labelled
    (`rw_sgd_baselines`)."""
    es = list(entries)
    return rw_sgd_pair_losses(spec, es, me, real_contributions(es))


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
    count = real_contributions(es)
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


WALK_SUM = Accountant(
    SUM_ACCOUNTANT.losses,
    SUM_ACCOUNTANT.prospective,
    "Cyffers & Bellet, AISTATS 2022, Theorem 3 + App. D (E7) + App. G (Lemma 2, "
    "E14, or netdp's per-edge contribution cap); errata: docs/errata.md",
    walk_sum_baselines,
    estimate_std=walk_sum_std,
)
WALK_HISTOGRAM = Accountant(
    HISTOGRAM_ACCOUNTANT.losses,
    HISTOGRAM_ACCOUNTANT.prospective,
    "Cyffers & Bellet, AISTATS 2022, Theorem 6 (App. E) with Remark 4 (E8) + App. G; "
    "errata: docs/errata.md",
)
WALK_SGD = Accountant(
    SGD_ACCOUNTANT.losses,
    SGD_ACCOUNTANT.prospective,
    "local-DP level of the node's discrete Gaussian releases (RDP, CKS "
    "Theorem 4 and Proposition 12); Cyffers & Bellet 2022 Theorem 4 via "
    "Lemma 1 (amplification by iteration, continuous noise only) beside "
    "it, labelled",
    sgd_baselines,
)
RW_SGD = Accountant(
    rw_sgd_losses,
    rw_sgd_prospective,
    "random-walk DP-SGD: the local-DP bound of the node's discrete "
    "Gaussian releases (Canonne, Kamath & Steinke, NeurIPS 2020, Theorem 4); "
    "netdp's per-trajectory figure (amplification by iteration, continuous noise "
    "only; docs/accountants.md) and the Lemma 2 / Theorem 3 value of Cyffers, Bellet "
    "& Upadhyay, ICML 2024 beside it, labelled",
    rw_sgd_baselines,
)
