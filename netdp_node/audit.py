"""`netdp audit`: checks over the MERGED ledgers of several nodes (uses global knowledge).

No node can run this on its own: it needs every participant's ledger, as after an end-to-end test
or a trusted post-mortem. It checks invariants that must hold whatever faults were injected:

* privacy-monotone: replaying each node's ledger entry by entry, the loss it has incurred towards
  every peer (its own accountant, composed across jobs) never decreases;
* tokens-conserved: every token a node recorded as received was recorded as sent by that sender
  with the same content digest (nothing forged or duplicated), and every message whose
  acknowledgement the sender recorded (`acked`: the receiver acknowledges only once the message is
  durable in its ledger) is in the receiver's ledger: nothing acknowledged was lost;
* received-once: no node recorded the same message twice.

A message recorded as sent (the sender records it in the step that decides it, before sending)
whose acknowledgement the sender never recorded may legitimately be missing at the receiver: the
sender crashed before it went out or before the acknowledgement came back (a restarted ring node
does not resume), the receiver refused it (a stale or late message, a job over there) or was gone,
and the protocol or the job's result at the sender deals with it. So it is not a failure.

Ledgers from before acknowledgements were recorded (`Ledger.acks_from`) get the older rules for
the sends they hold: a token sent but never recorded by its receiver must be explained by the
sender's records. For token walks a token sent but never recorded by its receiver is accounted
for when the sender recorded a custody re-route around that receiver (or a fenced branch, or a
copy abandoned because the walk ended on another branch), or when the sender itself never
finished and another node re-routed around it (it died with the token unsent); a
release/handoff/fence to or from a node that never finished the job is expected (the job result
lists that node as missing).

* inca-shares (IncA, Sabater et al. 2025, Eq. 8-9): every party of an IncA job that stayed to the
  end (its value is in the released result) injected exactly its share: the public coefficients its
  ledger records per iteration (α^(i)_t and the row U^(i)_t it applied to its Δ; never the samples)
  sum to γ_i = Σ_{t online} α_t and to 0 (every Δ cancelled), its online history is the one the
  released result states, and its public weight ω follows Alg. 2 line 15 in every iteration from the
  ω^(t-1) its in-neighbours' ledgers show they sent (the public messages) and its own counted
  messages (the public weights), up to the ω^(T) the result releases for it. A MIX or CLOSE an IncA
  party sent but nobody recorded is expected (the receiver was down or had mixed: the protocol's
  delivery rule accounts for it), so tokens-conserved only checks what was received.
* gossip-mass-conserved (Muffliato jobs): the mass of linear gossip is conserved among the
  participants exactly when every edge is used symmetrically: every realised edge of every round
  recorded by one end is recorded by the other (whose ledger is part of the audit), every
  pairwise exchange committed at one end is committed at the other, and an accelerated round has
  one coefficient at every node (Chebyshev or plain; per-node restarts after drops break it). A
  node that leaves takes its mass with it: edges to a node whose ledger is absent are not checked,
  nor an edge used only by a node that then left (its job not done there, and no later value of
  it taken by anyone: a crash after it took its neighbour's value, before its neighbour knew).
  A gossip message sent but never recorded by its receiver is expected when it was refused (late,
  busy, presumed gone): the sender's own records say the edge or exchange did not happen.

For every walk-sum / walk-histogram job whose whole walk the ledgers show, it also runs the
walk-conditional audit of Cyffers & Bellet, AISTATS 2022, §5.1 (Fig. 1(b)) on the realised walk: the
loss of every ordered pair, which only global knowledge can compute (informational, not a pass/fail
check).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netdp_node.algorithms import ALGORITHMS
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import total_losses
from netdp_node.algorithms.hooks import GOSSIP_MASS, INCA_SHARES, NO_HOOKS, Hooks
from netdp_node.ledger import Entry, JobRow, Ledger
from netdp_node.privacy import inca_audit
from netdp_node.privacy.inca_audit import execution_from_info
from netdp_node.simulate import read_trace, walk_audit_dict

GLOBAL_KNOWLEDGE = (
    "this audit merges the ledgers of several nodes: it uses global knowledge, which no "
    "single participant has"
)


def _hooks(algorithm: str) -> Hooks:
    """The algorithm's hooks (none for a name no record has: a ledger from another version)."""
    a = ALGORITHMS.get(algorithm)
    return NO_HOOKS if a is None else a.hooks


def _checked(job: JobRow, check: str) -> bool:
    """The job's algorithm asks for this audit check (`Hooks.audit_checks`)."""
    return check in _hooks(job.algorithm).audit_checks


@dataclass
class Check:
    name: str
    ok: bool = True
    details: list[str] = field(default_factory=list)
    #: why the check does not apply to these ledgers (e.g. no IncA job for inca-shares), or ""
    not_applicable: str = ""

    def fail(self, msg: str) -> None:
        self.ok = False
        if len(self.details) < 50:
            self.details.append(msg)


@dataclass
class NodeLedger:
    node: str
    jobs: list[JobRow]
    entries: list[Entry]
    #: the first entry id from which this ledger records acknowledgements (None: it does not)
    acks_from: int | None = None


def load(dirs: Sequence[str | Path]) -> list[NodeLedger]:
    out = []
    for d in dirs:
        led = Ledger.open_readonly(d)
        try:
            out.append(NodeLedger(led.node_id, led.jobs(), led.entries(), led.acks_from))
        finally:
            led.close()
    return out


def check_privacy_monotone(nodes: Sequence[NodeLedger], delta: float) -> Check:
    c = Check("privacy-monotone")
    for n in nodes:
        specs = {j.job_id: j.spec for j in n.jobs}
        history: dict[str, list[tuple[float, float]]] = {}
        seen: dict[str, list[Entry]] = {}
        # Replay: after each entry that can change the loss, recompute the total from the prefix.
        # A loss is an (ε, δ) pair: it decreased when the new pair is strictly better in ε at no
        # larger δ than an earlier one (a smaller ε at a larger δ, e.g. basic composition replacing
        # an RDP conversion at the target δ, claims no less privacy spent).
        for e in n.entries:
            if e.job_id not in specs:
                continue
            seen.setdefault(e.job_id, []).append(e)
            if e.event not in ("contribute", "noise-only", "decline"):
                continue
            views = [JobView(jid, specs[jid], es) for jid, es in seen.items()]
            now = {
                p: (loss.epsilon, loss.delta)
                for p, loss in total_losses(views, n.node, delta).items()
            }
            for peer, (eps, dlt) in now.items():
                past = history.setdefault(peer, [])
                worse = [
                    (pe, pd) for pe, pd in past if eps + 1e-12 < pe and dlt <= pd * (1 + 1e-12)
                ]
                if worse:
                    old_eps, old_dlt = max(worse)
                    c.fail(
                        f"{n.node}: loss towards {peer} decreased from (ε {old_eps:.6g}, "
                        f"δ {old_dlt:.3g}) to (ε {eps:.6g}, δ {dlt:.3g}) at ledger entry {e.id}"
                    )
                # keep only the pairs no other pair dominates (at least its ε at no larger δ)
                if not any(pe >= eps and pd <= dlt for pe, pd in past):
                    past[:] = [(pe, pd) for pe, pd in past if not (eps >= pe and dlt <= pd)]
                    past.append((eps, dlt))
    return c


def check_messages(nodes: Sequence[NodeLedger]) -> tuple[Check, Check]:
    conserved, once = Check("tokens-conserved"), Check("received-once")
    by_node = {n.node: n for n in nodes}
    sent: dict[tuple[Any, ...], str] = {}
    received: dict[tuple[Any, ...], str] = {}
    acked: set[tuple[Any, ...]] = set()
    tracked: set[tuple[Any, ...]] = set()  # sends whose sender records acknowledgements
    for n in nodes:
        keys: Counter[tuple[Any, ...]] = Counter()
        for e in n.entries:
            if e.direction == "sent":
                k = (e.job_id, n.node, e.peer, e.kind, e.walk, e.epoch, e.seq, e.round)
                sent[k] = e.digest
                if n.acks_from is not None and e.id >= n.acks_from:
                    tracked.add(k)
            elif e.direction == "local" and e.event == "acked":
                acked.add((e.job_id, n.node, e.peer, e.kind, e.walk, e.epoch, e.seq, e.round))
            elif e.direction == "received":
                k = (e.job_id, e.peer, n.node, e.kind, e.walk, e.epoch, e.seq, e.round)
                keys[k] += 1
                received[k] = e.digest
        for k, count in keys.items():
            if count > 1:
                once.fail(f"{n.node} recorded {k} {count} times")
    for k, digest in received.items():
        job, src, dst = k[:3]
        if src not in by_node:
            continue  # the sender's ledger is not part of this audit
        if k not in sent:
            conserved.fail(
                f"{dst} received {k[3]} seq={k[6]} of job {job} from {src}, which "
                f"{src}'s ledger does not show as sent"
            )
        elif sent[k] != digest:
            conserved.fail(
                f"{dst} received {k[3]} seq={k[6]} of job {job} from {src} with other "
                f"content than {src} sent"
            )
    recovered = {
        (e.job_id, n.node, e.peer)
        for n in nodes
        for e in n.entries
        if e.event in ("reroute", "fenced", "abandoned")
    }
    gossip_used = _gossip_used(nodes)
    for k in sent:
        job, src, dst = k[:3]
        if dst not in by_node or k in received:
            continue
        if k in acked:
            conserved.fail(
                f"{src} sent {k[3]} seq={k[6]} of job {job} to {dst}, which "
                f"acknowledged it but never recorded it (lost after its "
                "acknowledgement)"
            )
            continue
        if k in tracked:
            continue  # attempted, never acknowledged: the sender crashed, or it was refused
        row = next((j for j in by_node[src].jobs if j.job_id == job), None)
        if row is not None and row.state == "failed" and dst in row.detail:
            continue  # lost, and the sender's result says so
        if k[3] in GOSSIP_KINDS and (job, src, dst, k[7], k[6]) not in gossip_used.get(k[3], ()):
            continue  # a refused gossip message: the sender's records show it was not used
        if (job, src, dst) in recovered:
            continue  # a walk went around dst (custody re-route), or the copy's branch was fenced
            # or abandoned when the walk ended elsewhere
        if row is not None and _hooks(row.algorithm).undelivered_expected:
            continue  # IncA: an undelivered message is part of the protocol (see above)
        dst_row = next((j for j in by_node[dst].jobs if j.job_id == job), None)
        src_done = row is not None and row.state == "done"
        routed_around_src = any(r[0] == job and r[2] == src for r in recovered)
        if not src_done and routed_around_src:
            continue  # src died with it unsent; upstream custody re-routed around src
        if k[3] in ("release", "handoff", "fence") and (
            not src_done or dst_row is None or dst_row.state != "done"
        ):
            continue  # control message to or from a node that never finished (missing from the
            # result)
        conserved.fail(
            f"{src} sent {k[3]} seq={k[6]} of job {job} to {dst}, which never recorded "
            f"it, and {src}'s result does not report the failure"
        )
    return conserved, once


def check_inca_shares(nodes: Sequence[NodeLedger]) -> Check:
    """Eq. (8)-(9) for every IncA party that stayed to the end (see the module docstring)."""
    check = Check(INCA_SHARES)
    jobs: dict[str, tuple[JobRow, dict[str, Any]]] = {}
    for n in nodes:
        for j in n.jobs:
            if not _checked(j, INCA_SHARES) or j.result is None:
                continue
            info = j.result.get("info", {})
            if j.job_id not in jobs or len(info.get("final", [])) > len(
                jobs[j.job_id][1].get("final", [])
            ):
                jobs[j.job_id] = (j, info)
    if not any(_checked(j, INCA_SHARES) for n in nodes for j in n.jobs):
        check.not_applicable = "no IncA job in these ledgers"
    for job_id, (row, info) in jobs.items():
        spec = row.spec
        ids = list(spec["participants"])
        p = spec["params"]
        T, w = int(p["T"]), 1.0 / (int(p["k"]) + 1)
        ex = execution_from_info(spec, info)
        alpha, _ = inca_audit.noise_scheme(str(p["scheme"]), T)
        # per node, its steps over every ledger it had (a node back on a new ledger does not take
        # part in the job again: its steps are all in the ledger it had then)
        steps: dict[str, dict[int, dict[str, Any]]] = {}
        for n in nodes:
            mine = steps.setdefault(n.node, {})
            for e in n.entries:
                if e.job_id == job_id and "u_row" in e.params:
                    mine.setdefault(int(e.params["t"]), e.params)
        for node, mine in steps.items():
            if node not in ids:
                continue
            i = ids.index(node)
            if node not in info.get("final", []):
                continue  # did not stay to the end (its value is not in the result)
            if len(mine) != T + 1 or not mine[T]["online"]:
                check.fail(
                    f"{node} in job {job_id} is in the result but its ledgers do not "
                    "show it online at T"
                )
                continue
            online = [True] + [bool(mine[t]["online"]) for t in range(1, T + 1)]
            gamma = float(alpha[np.asarray(online)].sum())
            got_alpha = sum(float(c["alpha"]) for c in mine.values())
            u_sum = np.abs(np.sum([mine[t]["u_row"] for t in range(T + 1)], axis=0)).max()
            if abs(got_alpha - gamma) > 1e-12 or u_sum > 1e-12:
                check.fail(
                    f"{node} in job {job_id} injected Σα = {got_alpha:.6g} (share "
                    f"{gamma:.6g}) with Σ U rows off zero by {u_sum:.3g}"
                )
            if online != ex.online[:, i].tolist():
                check.fail(
                    f"{node} in job {job_id}: its online history differs from the one "
                    "the result states"
                )
            for t in range(1, T + 1):
                c = mine[t]
                if not c["online"]:
                    expect = mine[t - 1]["omega"]
                else:
                    senders = [steps.get(j, {}).get(t - 1) for j in c["counted_in"]]
                    omegas = [s["omega"] for s in senders if s is not None]
                    if len(omegas) < len(senders):
                        continue  # a sender's ledger is not part of this audit
                    expect = (
                        (1 - w * len(c["counted_out"])) * mine[t - 1]["omega"]
                        + w * sum(omegas)
                        + c["alpha"]
                    )
                if abs(c["omega"] - expect) > 1e-9:
                    check.fail(
                        f"{node} in job {job_id}: ω^({t}) = {c['omega']:.9g}, the "
                        f"public messages and weights give {expect:.9g}"
                    )
            released = info.get("omega_final", {}).get(node)
            if released is not None and abs(released - mine[T]["omega"]) > 1e-12:
                check.fail(
                    f"{node} in job {job_id}: released ω^(T) = {released:.9g}, its "
                    f"ledger shows {mine[T]['omega']:.9g}"
                )
    return check


GOSSIP_KINDS = ("value", "offer", "reply", "pair-value", "schedule")


def _gossip_used(nodes: Sequence[NodeLedger]) -> dict[str, set[tuple[Any, ...]]]:
    """Gossip messages whose sender's own records say the receiver took them: round values of
    realised edges (job, src, dst, round, 0), and the messages of committed pairwise exchanges
    (job, src, dst, 0, id)."""
    used: dict[str, set[tuple[Any, ...]]] = {"value": set(), "reply": set(), "pair-value": set()}
    for n in nodes:
        for e in n.entries:
            if e.direction != "local":
                continue
            if e.event == "round":
                for w in e.params.get("realised", []):
                    used["value"].add((e.job_id, n.node, w, int(e.params["round"]), 0))
            elif e.event == "activation" and e.params.get("status") == "committed":
                kind = "pair-value" if e.params["initiator"] == n.node else "reply"
                used[kind].add((e.job_id, n.node, e.peer, 0, int(e.params["id"])))
    return used


def check_gossip_mass(nodes: Sequence[NodeLedger]) -> Check:
    """gossip-mass-conserved (see the module docstring)."""
    check = Check(GOSSIP_MASS)
    if not any(_checked(j, GOSSIP_MASS) for n in nodes for j in n.jobs):
        check.not_applicable = "no Muffliato job in these ledgers"
    rounds: dict[tuple[str, str, int], tuple[set[str], str]] = {}
    acts: dict[tuple[str, str, int], dict[str, bool]] = {}
    accelerated = {
        j.job_id
        for n in nodes
        for j in n.jobs
        if _checked(j, GOSSIP_MASS) and j.spec["params"].get("accelerated")
    }
    for n in nodes:
        for e in n.entries:
            if e.direction != "local":
                continue
            if e.event == "round":
                rounds[(e.job_id, n.node, int(e.params["round"]))] = (
                    set(e.params.get("realised", [])),
                    str(e.params.get("step", "plain")),
                )
            elif e.event == "activation":
                key = (e.job_id, str(e.params["initiator"]), int(e.params["id"]))
                acts.setdefault(key, {})[n.node] = e.params.get("status") == "committed"
    # the last round in which some node took v's value (v's state after round r - 1)
    taken: dict[tuple[str, str], int] = {}
    for (job, _, r), (realised, _) in rounds.items():
        for w in realised:
            taken[(job, w)] = max(taken.get((job, w), -1), r)
    done = {(j.job_id, n.node) for n in nodes for j in n.jobs if j.state == "done"}
    steps: dict[tuple[str, int], set[str]] = {}
    for (job, v, r), (realised, step) in rounds.items():
        steps.setdefault((job, r), set()).add(step)
        for w in realised:
            other = rounds.get((job, w, r))
            if other is not None and v not in other[0]:
                if (job, v) not in done and taken.get((job, v), -1) <= r:
                    # v left the job after this round (it crashed before w heard that it took
                    # w's value) and nobody took a later value of v's: what v took left with it
                    continue
                check.fail(
                    f"job {job} round {r}: {v} used its edge with {w}, {w} did not "
                    "(one-sided edge: mass is not conserved)"
                )
    for (job, r), kinds in sorted(steps.items()):
        if job in accelerated and len(kinds) > 1:
            check.fail(
                f"job {job} round {r}: some nodes took a Chebyshev step, others restarted "
                "(accelerated run with drops: mass is not conserved exactly)"
            )
    for (job, init, k), ends in acts.items():
        if len(set(ends.values())) > 1:
            check.fail(
                f"job {job}: exchange {init}#{k} committed at "
                f"{[v for v, c in ends.items() if c]} only"
            )
    return check


def walk_of_job(
    nodes: Sequence[NodeLedger], job_id: str, participants: Sequence[str]
) -> list[int] | None:
    """The holder of every step 1..T of a walk job with a hop counter, from the merged ledgers:
    the node whose ledger records step t (the latest epoch's, after a re-route), or None if a
    step is missing (a ledger not given, no counter)."""
    index = {p: i for i, p in enumerate(participants)}
    at: dict[int, tuple[int, int]] = {}  # t -> (epoch, holder index)
    for n in nodes:
        for e in n.entries:
            if (
                e.job_id == job_id
                and e.direction == "local"
                and "t" in e.params
                and e.event in ("contribute", "noise-only", "pass")
            ):
                t, ep = int(e.params["t"]), int(e.params.get("epoch", 0))
                if t not in at or ep >= at[t][0]:
                    at[t] = (ep, index[n.node])
    if not at or sorted(at) != list(range(1, max(at) + 1)):
        return None
    return [at[t][1] for t in range(1, max(at) + 1)]


def walk_audits(nodes: Sequence[NodeLedger]) -> list[dict[str, Any]]:
    """The walk-conditional audit (Cyffers & Bellet, §5.1) of every walk-sum / walk-histogram job
    whose whole walk the merged ledgers show: the loss of every ordered pair given the realised
    walk."""
    out = []
    seen: set[str] = set()
    for n in nodes:
        for j in n.jobs:
            if j.job_id in seen or _hooks(j.algorithm).walk_audit is None:
                continue
            seen.add(j.job_id)
            parts = list(j.spec["participants"])
            walk = walk_of_job(nodes, j.job_id, parts)
            if walk is None:
                out.append(
                    {
                        "job_id": j.job_id,
                        "algorithm": j.algorithm,
                        "skipped": "the merged ledgers do not show every step of the walk",
                    }
                )
                continue

            r = walk_audit_dict(np.asarray(walk), len(parts), j.algorithm, j.spec["params"])
            out.append({"job_id": j.job_id, **r})
    return out


#: The checks an algorithm can ask for (`Hooks.audit_checks`), by name.
CHECKS: dict[str, Callable[[Sequence[NodeLedger]], Check]] = {
    INCA_SHARES: check_inca_shares,
    GOSSIP_MASS: check_gossip_mass,
}


def audit(dirs: Sequence[str | Path], delta: float = 1e-5) -> dict[str, Any]:
    nodes = load(dirs)
    checks = [
        check_privacy_monotone(nodes, delta),
        *check_messages(nodes),
        *(check(nodes) for check in CHECKS.values()),
    ]
    return {
        "note": GLOBAL_KNOWLEDGE,
        "nodes": [n.node for n in nodes],
        "ok": all(c.ok for c in checks),
        "checks": [
            {
                "name": c.name,
                "ok": c.ok,
                "details": c.details,
                "status": "n/a" if c.not_applicable else ("ok" if c.ok else "FAIL"),
                **({"not_applicable": c.not_applicable} if c.not_applicable else {}),
            }
            for c in checks
        ],
        "walk_audits": walk_audits(nodes),
    }


def audit_trace(path: str | Path, *, paper_compatible: bool = False) -> dict[str, Any]:
    """The walk-conditional audit (Cyffers & Bellet, §5.1, Fig. 1(b)) of a simulated walk's trace:
    the loss of every ordered pair (observer, protected) given the whole walk. Global knowledge."""
    header, holders = read_trace(path)
    return walk_audit_dict(
        holders, int(header["n"]), header["algorithm"], header["params"], paper_compatible
    )
