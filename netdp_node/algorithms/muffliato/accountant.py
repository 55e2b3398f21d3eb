"""The node's accountant for Muffliato jobs (muffliato, muffliato-random, muffliato-gd), from its
own ledger: functions of (public job spec, the node's entries); the joint-view matrices they compute
are kept in an explicit, bounded cache (`JointViewCache`) that the family's accountants share.

Paper: Cyffers, Even, Bellet & Massoulié, "Muffliato", NeurIPS 2022 (eq. (6), Theorem 1;
Muffliato-GD, §4); the exact joint-view accountant is netdp's own (docs/errata.md explains why
eq. (6) is not a per-pair bound). The computations are `netdp_node.privacy.pndp_gossip`'s (and
`netdp_node.privacy.muffliato_accountant`'s: public graphs, labels); this module only rebuilds the
realised schedule from the ledger.

What the ledger holds (see `algorithms/muffliato/engine.py`): the node's own "round" records (its
realised neighbours per round) or "activation" records (randomized gossip), and the schedules of
the other participants, which every node publishes on the job's bulletin at the end of the job
(the realised schedule is treated as public): one "schedules" record per batch read from the
bulletin, naming its publishers (`peers`) and holding, per publisher, its public edges that did
NOT realise (`missing`, only the publishers that have some: none without drops) or its
activation list (`activations`), from which `sync_schedules` rebuilds the realised rounds with the
public graph. Ledgers written before hold one "schedule" record per publisher (`missing`,
`activations`, or earlier still the expanded form `realised`, the realised neighbours of every
round), read as such.

The guarantee (what the node enforces in its budget checks, records and reports as its loss):
the LOCAL-DP level of its release x + η, composed over its calls. The noise is a discrete Gaussian
on the job's grid (`discrete_gaussian`), and every message of the transcript is a function of the
nodes' independent releases x_w + η_w (data processing), so the loss towards any observer, or
group of observers, is at most that of the node's own releases: ρ-zCDP of the discrete Gaussian
(Canonne, Kamath, Steinke, NeurIPS 2020, Theorem 4) converted by their Proposition 12. The
amplification Muffliato claims (Cyffers, Even, Bellet, Massoulié, NeurIPS 2022, Theorem 1 /
eq. (6)) and the exact joint view below are analyses of CONTINUOUS Gaussian noise: a view mixes
the nodes' discrete draws with non-integer (Metropolis, Chebyshev) weights, which no theorem we
know covers (Kairouz–Liu–Steinke's Prop. 14 covers integer-weighted sums only), and an observer
computing exactly can in general solve its view for the lattice points (x_w + η_w) it mixes. So
they are shown beside the guarantee (`baselines`), labelled "continuous-noise analysis; not
proven for discrete noise", never as it.

The joint view of v, shown labelled: `ε_LDP · ||Π_{rowspace K_v} e_u||²` on the realised schedule.
It needs the whole schedule: until every realised edge is known from at least one of its ends (or
when two ends disagree, or an accelerated run had drops, see the engine's docstring), it is not
shown. A schedule with drops is not a sub-schedule of the planned one once the weights are
rebuilt, so the planned schedule is no bound.
* OUTGOING, the loss this node u incurs towards every v: the guarantee above; the joint-view
  figure (worst peer) among the baselines.
* INCOMING, what this node learnt about every u: at most u's local-DP level (the same argument);
  its joint view's figure is what the mean-loss summary among the baselines averages.

Conservative modelling: every message of the public graph counts as seen by its receiver in every
round (a refused late message was still received), so E_t is the planned graph of the call and
W_t is supported on the realised edges (`GossipSchedule` allows W_t's support to be a subset of
E_t).
For randomized gossip an exchange that revealed values without committing is a round with the
edge and W = I. The nodes' outputs stay on the nodes (`Algorithm.private_output`: they are
never reported to the bootstrap: x^T is not sent), so an observer's view holds
its own output, which its messages already determine, and no other; publishing every output would
give every observer P(x + η), i.e. the local-DP level for every pair when P is invertible.

Muffliato-GD (the paper's Alg. 3): neither accountant is proven across gradient steps (the
inputs of later steps depend on u's data through earlier gossip). The guarantee shown is the
local-DP composition over the node's steps; the per-call joint-view and paper values are shown
beside it, labelled. The paper's eq. (6) is always labelled "paper bound (not a guarantee)"
and never shown alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from netdp_node.algorithms.accounting import Accountant
from netdp_node.graphs import metropolis_fractions, spec_edges
from netdp_node.lazy import lazy_module
from netdp_node.privacy import gossip, gossip_joint_view, gossip_paper_bound
from netdp_node.privacy.composition import DEFAULT_ORDERS, PrivacyLoss, gaussian_rdp, rdp_to_dp
from netdp_node.privacy.discrete_gaussian import charged_sensitivity
from netdp_node.privacy.muffliato_accountant import (
    CONTINUOUS,
    GUARANTEE,
    JOINT_VIEW,
    MEAN_LOSS,
    PAPER,
    merge_activations,
    public_graph,
)

sp = lazy_module("scipy.sparse")  # lazy: start-up cost

#: schedules up to this many rounds may use pndp_gossip's exact rational fallback
EXACT_MAX_ROUNDS = 60


class JointViewCache:
    """The joint-view matrices already computed (`leakage_matrices`), per (job, node, reported
    schedules): a report and the demo ask for them several times while the ledger has not moved.
    Bounded: past `max_entries` it starts afresh."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._items: dict[tuple[Any, ...], tuple[list[np.ndarray] | None, str]] = {}

    def get(self, key: tuple[Any, ...]) -> tuple[list[np.ndarray] | None, str] | None:
        return self._items.get(key)

    def put(self, key: tuple[Any, ...], value: tuple[list[np.ndarray] | None, str]) -> None:
        if len(self._items) > self.max_entries:
            self._items.clear()
        self._items[key] = value

    def __len__(self) -> int:
        return len(self._items)


def _index(spec: Mapping[str, Any]) -> dict[str, int]:
    return {v: i for i, v in enumerate(spec["participants"])}


def call_graph(spec: Mapping[str, Any], call: int) -> list[tuple[int, int]]:
    """The public graph of gossip call `call`, as the engine builds it (`public_graph`)."""
    idx = _index(spec)

    topo = [(idx[a], idx[b]) for a, b in spec_edges(spec) if a in idx and b in idx]
    return public_graph(spec["params"], len(idx), int(spec.get("public_seed", 0)), call, topo)


def _reports(entries: Iterable[Any], me: str) -> dict[str, Any]:
    """Who reported what: {node: {round: [peers]}} (sync) or {node: [activations]} (random)."""
    out: dict[str, Any] = {}
    for e in entries:
        if e.direction != "local":
            continue
        if e.event == "round":
            out.setdefault(me, {})[int(e.params["round"])] = list(e.params["realised"])
        elif e.event == "activation":
            out.setdefault(me, []).append(
                [
                    e.params["initiator"],
                    int(e.params["id"]),
                    e.peer,
                    e.params["status"] == "committed",
                ]
            )
        elif e.event == "schedules":  # a batch of the bulletin (a publisher absent: empty)
            if "missing" in e.params:  # the publishers' public edges that did not realise
                held = e.params["missing"]
                for v in e.params["peers"]:
                    out[v] = Missing((int(r), str(w)) for r, w in held.get(v, ()))
            else:
                held = e.params["activations"]
                for v in e.params["peers"]:
                    out[v] = [list(a) for a in held.get(v, ())]
        elif e.event == "schedule":  # one publisher per entry: ledgers written before
            if "missing" in e.params:  # as received: the sender's public edges that did not realise
                out[e.peer] = Missing((int(r), str(w)) for r, w in e.params["missing"])
            elif "realised" in e.params:  # the expanded form of ledgers written earlier still
                out[e.peer] = {int(r): list(v) for r, v in e.params["realised"].items()}
            else:
                out[e.peer] = [list(a) for a in e.params["activations"]]
    return out


class Missing(tuple[tuple[int, str], ...]):
    """A peer's published schedule as received and recorded: (round, neighbour) of each edge of
    its public graph that did NOT realise (empty without drops). `_realised` rebuilds its
    realised neighbours of every round from the public graph."""

    def __new__(cls, items: Iterable[tuple[int, str]]) -> Missing:
        return super().__new__(cls, sorted(items))


def _realised(
    spec: Mapping[str, Any], reports: dict[str, Any], adjacency: Sequence[Sequence[list[int]]]
) -> None:
    """Replace every compact schedule (`Missing`) in `reports` by the realised neighbours of every
    round, {round: [peers]} (rounds with none left out), as the expanded "schedule" records of
    earlier ledgers hold them. `adjacency[c][v]`: v's public neighbours in call c (indices)."""
    parts = spec["participants"]
    idx = _index(spec)
    T = int(spec["params"]["T"])
    for v, sched in list(reports.items()):
        if not isinstance(sched, Missing):
            continue
        gone = set(sched)
        rounds: dict[int, list[str]] = {}
        for c, adj in enumerate(adjacency):
            nb = adj[idx[v]]
            for r in range(c * T, (c + 1) * T):
                R = [parts[w] for w in nb if (r, parts[w]) not in gone]
                if R:
                    rounds[r] = R
        reports[v] = rounds


def _adjacency(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    return adj


def _restricted_metropolis(
    n: int, planned: Sequence[tuple[int, int]], realised: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], Fraction]:
    """The engine's weights: Metropolis weights of the planned (public) graph on the realised
    edges, the rest of each row on the diagonal (exact fractions)."""
    return metropolis_fractions(n, realised, degree_edges=planned)


def _csr(n: int, rat: Mapping[tuple[int, int], Fraction]) -> Any:
    keys = [k for k, v in rat.items() if v != 0]
    rows = [i for i, _ in keys]
    cols = [j for _, j in keys]
    return sp.csr_array(([float(rat[k]) for k in keys], (rows, cols)), shape=(n, n))


def sync_schedules(
    spec: Mapping[str, Any], entries: Iterable[Any], me: str
) -> tuple[list[gossip.GossipSchedule] | None, str]:
    """The realised schedule of every gossip call of a synchronous job, from the ledger, or
    (None, why) when the ledger does not determine it (yet)."""
    p = spec["params"]
    idx = _index(spec)
    n, T, calls = len(idx), int(p["T"]), int(p.get("calls", 1))
    reports = _reports(entries, me)
    if me not in reports or len(reports[me]) < T * calls:
        return None, "this node did not finish its rounds"
    reported = {idx[v] for v in reports}
    gamma = float(p["gamma"]) if p.get("accelerated", True) else None
    graphs = [call_graph(spec, c) for c in range(calls)]
    _realised(spec, reports, [_adjacency(n, g) for g in graphs])
    out = []
    for c in range(calls):
        planned = graphs[c]
        for a, b in planned:
            if a not in reported and b not in reported:
                return None, (
                    f"no schedule from {spec['participants'][a]} nor "
                    f"{spec['participants'][b]} (call {c})"
                )
        E = frozenset(planned)
        rounds = []
        for r in range(c * T, (c + 1) * T):
            real: set[tuple[int, int]] = set()
            for v, sched in reports.items():
                for w in sched.get(r, []):
                    a, b = idx[v], idx[w]
                    real.add((min(a, b), max(a, b)))
            for a, b in real:
                for x, y in ((a, b), (b, a)):
                    v = spec["participants"][x]
                    if x in reported and spec["participants"][y] not in reports[v].get(r, []):
                        return None, (
                            f"{v} and {spec['participants'][y]} disagree on their edge in round {r}"
                        )
                if (a, b) not in E:
                    return None, f"edge ({a}, {b}) in round {r} is not in the public graph"
            rounds.append(frozenset(real))
        if gamma is not None and len(set(rounds)) > 1:
            return None, (
                "an accelerated call with drops (per-node Chebyshev restarts) is not a "
                "schedule the accountant can rebuild"
            )
        cache: dict[frozenset[tuple[int, int]], Any] = {}
        mats, rats = [], []
        for R in rounds:
            if R not in cache:
                rat = _restricted_metropolis(n, planned, R)
                cache[R] = (_csr(n, rat), rat)
            mats.append(cache[R][0])
            rats.append(cache[R][1])
        out.append(gossip.GossipSchedule(n, (E,) * T, tuple(mats), gamma, tuple(rats)))
    return out, ""


def random_schedule(
    spec: Mapping[str, Any], entries: Iterable[Any], me: str
) -> tuple[list[gossip.GossipSchedule] | None, str]:
    """The realised schedule of a randomized job (one exchange per round), or (None, why)."""
    idx = _index(spec)
    n = len(idx)
    reports = _reports(entries, me)
    reports.setdefault(me, [])
    reported = {idx[v] for v in reports}
    if not any(e.event == "output" for e in entries):
        return None, "this node has not finished"
    for i, j in call_graph(spec, 0):
        if i not in reported and j not in reported:
            return None, (
                f"no schedule from {spec['participants'][i]} nor {spec['participants'][j]}"
            )
    try:
        seq = merge_activations(reports)
    except ValueError as e:
        return None, str(e)
    # A node whose own list is missing fixes no order among its exchanges: the merge would pick
    # one, and the views depend on it (a later exchange carries the earlier ones' values), so a
    # guessed order is no bound. Only a silent node with at most one exchange is determined.
    seen: dict[str, int] = {}
    for _, _, a, b, _ in seq:
        for x in (a, b):
            seen[x] = seen.get(x, 0) + 1
    silent = sorted(x for x, k in seen.items() if k > 1 and x not in reports)
    if silent:
        return None, (
            f"no schedule from {silent[0]}, which took part in {seen[silent[0]]} "
            "exchanges: their order is unknown"
        )
    # Its one exchange's outcome is known only where the protocol forces it: an initiator that
    # committed had its value acknowledged (so the responder averaged); a responder that did not
    # commit never accepted (so the initiator did not). A silent responder of an "aborted"
    # exchange may have accepted (the acknowledgement lost), a silent initiator of a "committed"
    # one may have been left without the acknowledgement: either way not determined.
    for init, k, a, b, committed in seq:
        if (b not in reports and not committed) or (a not in reports and committed):
            return None, (
                f"no schedule from {b if b not in reports else a}: the outcome of "
                f"exchange {init}:{k} at its end is unknown"
            )
    if not seq:
        return [], ""
    # Consecutive exchanges on disjoint pairs commute: pack them greedily into one round (a
    # matching; its W is the product of the pair averages, the messages are the same), which
    # divides the number of rounds the joint view has to propagate through by up to n/2.
    edges, mats, rats = [], [], []
    cur: list[tuple[int, int, bool]] = []
    busy: set[int] = set()

    def flush() -> None:
        rat = {(i, i): Fraction(1) for i in range(n)}
        for i, j, committed in cur:
            if committed:
                rat[(i, i)] = rat[(j, j)] = rat[(i, j)] = rat[(j, i)] = Fraction(1, 2)
        edges.append(frozenset((min(i, j), max(i, j)) for i, j, _ in cur))
        mats.append(_csr(n, rat))
        rats.append(rat)

    for _, _, a, b, committed in seq:
        i, j = idx[a], idx[b]
        if i in busy or j in busy:
            flush()
            cur, busy = [], set()
        cur.append((i, j, committed))
        busy |= {i, j}
    flush()
    return [gossip.GossipSchedule(n, tuple(edges), tuple(mats), None, tuple(rats))], ""


def schedules(
    spec: Mapping[str, Any], entries: Sequence[Any], me: str
) -> tuple[list[gossip.GossipSchedule] | None, str]:
    if spec["algorithm"] == "muffliato-random":
        return random_schedule(spec, entries, me)
    return sync_schedules(spec, entries, me)


def leakage_matrices(
    spec: Mapping[str, Any],
    entries: Sequence[Any],
    me: str,
    cache: JointViewCache | None = None,
) -> tuple[list[np.ndarray] | None, str]:
    """Per gossip call, the joint-view matrix F[u, v] = ε_{u→v}/ε_LDP on the realised schedule
    (`gossip_joint_view.joint_view_matrix`), or (None, why). Kept in `cache` (if given) per (job, node,
    reported schedules)."""
    key = (
        "jv",
        spec["job_id"],
        tuple(spec["participants"]),
        repr(sorted(_reports(entries, me).items())),
        spec["algorithm"] != "muffliato-random" or any(e.event == "output" for e in entries),
    )
    hit = cache.get(key) if cache is not None else None
    if hit is not None:
        return hit
    scheds, why = schedules(spec, entries, me)
    res: tuple[list[np.ndarray] | None, str]
    if scheds is None:
        res = (None, why)
    else:
        n = len(spec["participants"])
        # exact rational arithmetic (pndp_gossip's fallback when the float basis is unresolved)
        # only for short schedules: it is slow; otherwise unresolved values are conservative
        res = (
            [
                gossip_joint_view.joint_view_matrix(
                    s, exact=None if s.T <= EXACT_MAX_ROUNDS else False
                )
                if s.T
                else np.eye(n)
                for s in scheds
            ],
            "",
        )
    if cache is not None:
        cache.put(key, res)
    return res


def _sigma_ratio(spec: Mapping[str, Any]) -> tuple[float, float, float]:
    p = spec["params"]
    return float(p["sigma"]), charged_sensitivity(p), float(p["delta"])


def _ldp_loss(spec: Mapping[str, Any], count: int, label: str) -> PrivacyLoss:
    """`count` Gaussian mechanisms of multiplier σ/Δ composed in RDP: the local-DP level."""
    sigma, sens, delta = _sigma_ratio(spec)
    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution")
    curve = gaussian_rdp(sigma / sens, DEFAULT_ORDERS, count)
    return PrivacyLoss(
        rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0],
        delta,
        label,
        (tuple(DEFAULT_ORDERS), tuple(float(x) for x in curve)),
    )


def _contributions(entries: Iterable[Any]) -> int:
    return sum(1 for e in entries if e.direction == "local" and e.event == "contribute")


def _pair(spec: Mapping[str, Any], fraction: float, label: str) -> PrivacyLoss:
    sigma, sens, delta = _sigma_ratio(spec)
    return gossip.pair_privacy_loss(
        min(1.0, max(0.0, fraction)), sigma=sigma, sensitivity=sens, delta=delta, method=label
    )


def _direction(
    spec: Mapping[str, Any], entries: Sequence[Any], me: str, outgoing: bool
) -> dict[str, PrivacyLoss]:
    parts = list(spec["participants"])
    others = [v for v in parts if v != me]
    count = _contributions(entries)
    gd = spec["algorithm"] == "muffliato-gd"
    if outgoing and count == 0:
        return {v: PrivacyLoss(0.0, 0.0, "no-contribution") for v in others}
    if gd:  # only the local-DP composition is a guarantee across steps
        calls = int(spec["params"].get("calls", 1)) if not outgoing else count
        loss = _ldp_loss(
            spec,
            calls,
            "local-DP composition over the steps (discrete Gaussian; Canonne, Kamath & "
            "Steinke, NeurIPS 2020, Theorem 4 and Proposition 12)",
        )
        return {v: loss for v in others}
    # one release x + η per node: the local-DP level, the bound proven for the discrete noise
    # (module docstring); the continuous-noise joint view is among the baselines, labelled
    loss = _ldp_loss(spec, 1, GUARANTEE)
    return {v: loss for v in others}


def joint_view(
    spec: Mapping[str, Any],
    entries: Sequence[Any],
    me: str,
    outgoing: bool = True,
    cache: JointViewCache | None = None,
) -> dict[str, PrivacyLoss] | None:
    """The exact joint-view figure on the realised schedule (netdp's own accountant) towards (or, with
    outgoing=False, about) every other participant, or None when the ledger does not determine
    the schedule: an analysis of continuous Gaussian noise, NOT proven for the discrete noise the
    nodes draw (module docstring); shown beside the guarantee, never as it."""
    Fs, _ = leakage_matrices(spec, entries, me, cache)
    if Fs is None:
        return None
    F, parts = Fs[0], list(spec["participants"])
    u = parts.index(me)
    return {
        v: _pair(spec, float(F[u, j] if outgoing else F[j, u]), JOINT_VIEW)
        for j, v in enumerate(parts)
        if v != me
    }


def losses(spec: Mapping[str, Any], entries: Iterable[Any], me: str) -> dict[str, PrivacyLoss]:
    """OUTGOING: the loss this node incurs towards every other participant (see module doc)."""
    return _direction(spec, list(entries), me, outgoing=True)


def incoming(spec: Mapping[str, Any], entries: Iterable[Any], me: str) -> dict[str, PrivacyLoss]:
    """INCOMING: what this node learnt about every other participant, from its own view."""
    return _direction(spec, list(entries), me, outgoing=False)


def prospective(spec: Mapping[str, Any], me: str) -> dict[str, PrivacyLoss]:
    """Before the job: the local-DP level over the job's calls, the only bound valid whatever the
    realised schedule will be (used by the budget check at the start)."""
    calls = int(spec["params"].get("calls", 1))
    loss = _ldp_loss(spec, calls, "local-DP level (before the run)")
    return {v: loss for v in spec["participants"] if v != me}


def baselines(
    spec: Mapping[str, Any],
    entries: Iterable[Any],
    me: str,
    cache: JointViewCache | None = None,
) -> dict[str, PrivacyLoss]:
    """Shown beside the guarantee, labelled: the paper's eq. (6) (thm1 convention, clipped at the
    LDP level; worst peer), for GD the per-call joint-view value (worst over calls and peers), and
    for averaging the local-DP and trusted-curator baselines of the same task."""
    es = list(entries)
    parts = list(spec["participants"])
    u = parts.index(me)
    out: dict[str, PrivacyLoss] = {}
    count = _contributions(es)
    scheds, why = schedules(spec, es, me)
    if scheds is not None and count:
        worst_paper = max(
            (
                float(
                    np.max(
                        np.delete(
                            gossip.clip_to_ldp(gossip_paper_bound.paper_bound_outgoing(s, u)), u
                        )
                    )
                )
                for s in scheds
                if s.T
            ),
            default=0.0,
        )
        out[PAPER] = _pair(
            spec,
            worst_paper,
            "paper eq. (6), Theorem 1 convention, worst peer; "
            "NOT a guarantee (Cyffers et al., NeurIPS 2022; summing per-message divergences "
            "does not bound the joint view, docs/errata.md; continuous Gaussian noise)",
        )
        if spec["algorithm"] == "muffliato-gd":
            Fs, _ = leakage_matrices(spec, es, me, cache)
            if Fs is not None:
                worst = max(float(np.max(np.delete(F[u], u))) for F in Fs)
                out[f"joint view per call ({CONTINUOUS}; not a guarantee across steps)"] = _pair(
                    spec, worst, "exact joint view of one call, worst call and peer"
                )
    if spec["algorithm"] != "muffliato-gd" and scheds is not None:
        Fs, _ = leakage_matrices(spec, es, me, cache)
        if Fs is not None:  # eq. (7) on the joint view: what this node learnt, on average
            jv = joint_view(spec, es, me, cache=cache)
            if jv and count:
                out[JOINT_VIEW] = max(jv.values(), key=lambda x: x.epsilon)
            out[MEAN_LOSS] = _pair(
                spec,
                gossip_paper_bound.mean_privacy_loss(Fs[0][:, u], u),
                "incoming joint view averaged over the others, (1/n) Σ_u (the mean privacy "
                "loss of Cyffers et al., NeurIPS 2022, eq. (7))",
            )
    if spec["algorithm"] != "muffliato-gd" and count:
        sigma, sens, delta = _sigma_ratio(spec)
        n = len(parts)
        out["local-dp"] = _ldp_loss(spec, 1, "local DP, same σ")
        z = math.sqrt(n) * sigma / sens  # the mean's noise σ/√n over its sensitivity Δ/n
        curve = gaussian_rdp(z, DEFAULT_ORDERS, 1)
        out["central-dp"] = PrivacyLoss(
            rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0],
            delta,
            "trusted curator, same noise on the mean",
        )
    return out


#: each algorithm's theorem (the report's "accountant:" line)
SYNC_THEOREM = (
    "Muffliato (Cyffers et al., NeurIPS 2022, Alg. 1): exact joint-view accountant on "
    "the realised schedule (netdp's own; eq. (6) is not a per-pair bound, docs/errata.md), "
    "local-DP level until the schedule is known; paper eq. (6) beside it, labelled"
)
RANDOM_THEOREM = (
    "Randomized Muffliato (Alg. 2): exact joint-view accountant on "
    "the realised exchanges (Cyffers et al., NeurIPS 2022, §3.3; netdp's own "
    "accountant, docs/errata.md); paper eq. (6) beside it, labelled"
)
GD_THEOREM = (
    "Muffliato-GD (Cyffers et al., NeurIPS 2022, Alg. 3): local-DP composition over "
    "the steps (the guarantee); per-call joint view and paper eq. (6) beside it, labelled"
)


def accountant(theorem: str, cache: JointViewCache) -> Accountant:
    """A Muffliato algorithm's accountant; its baselines keep their joint views in `cache`."""
    return Accountant(
        losses, prospective, theorem, functools.partial(baselines, cache=cache), incoming
    )
