"""A bounded, seeded fault campaign (Jepsen-style) over real node processes on loopback.

Two halves:

* the CHECKER (pure functions over ledgers read from disk, no processes): the invariants every
  execution must keep whatever faults it met, each returning a list of violations (strings);
  tests/unit/test_campaign_checks.py shows each one catching a planted violation;
* the RUNNER: a seeded schedule (`make_schedule`) of faults applied to a `LocalCluster` (a bootstrap
  and N node daemons, each behind a userspace TCP proxy, tests/e2e/tcp_proxy.py) while jobs of
  several algorithms run, then the checks.

Faults (all real): `kill` (SIGKILL a node, restart it on the same ledger and port), `wipe` (SIGKILL,
restart on a NEW EMPTY ledger directory: the old one stays on disk for the checker only),
`bootstrap` (SIGKILL the bootstrap, restart it on the same state and port), `partition` (the node's
proxy aborts every connection to it for a while: nobody reaches it, an asymmetric partition),
`delay` and `drop` (the proxy delays chunks, or resets connections at random, for a while).

Invariants:
(a) acked-not-lost: every message a sender's ledger shows was acknowledged (protocol evidence, see
    `acknowledged`) is in one of its receiver's ledgers with the same digest; and every entry a
    node's ledger held just before it was SIGKILLed is still there after its restart;
(b) privacy-monotone: the privacy a node has spent towards each peer (the project's accountant over
    every ledger the node ever had) never decreases across its restarts;
(c) contributions-within-schedule: per node and job, over every ledger the node ever had, no
    schedule slot (ring round, walk step, gossip call, IncA start) is contributed twice and the
    count stays within the algorithm's schedule (rounds, cap, one call);
(d) jobs-end: every job ends done or failed with a reason (bounded wait on `netdp job result`);
(e) audit: `netdp audit` over every ledger passes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import total_losses
from netdp_node.audit import NodeLedger, load
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Entry

REPO = Path(__file__).resolve().parent.parent
PROXY = REPO / "tests" / "e2e" / "tcp_proxy.py"
DELTA = 1e-5

# -- the checker ----------------------------------------------------------------------------------
RING = ("ring-sum", "ring-sum-r", "ring-histogram")
WALKS = ("walk-sum", "walk-histogram", "walk-sgd", "rw-sgd")
GOSSIP = ("muffliato", "muffliato-random", "muffliato-gd")


def _job_rows(n: NodeLedger) -> dict[str, Any]:
    return {j.job_id: j for j in n.jobs}


def _sent_index(n: NodeLedger) -> dict[tuple[Any, ...], Entry]:
    """(job, dst, kind, walk, epoch, seq, round) -> the sent entry."""
    return {
        (e.job_id, e.peer, e.kind, e.walk, e.epoch, e.seq, e.round): e
        for e in n.entries
        if e.direction == "sent"
    }


def acknowledged(n: NodeLedger) -> list[Entry]:
    """The sent entries of `n` whose acknowledgement its own ledger proves, per protocol:

    * ring: a token sent to the successor, followed (later ledger id) by any reception in the same
      job: the only way back to the sender is round the ring, through the successor;
    * token walks: a token (epoch, seq) for which the receiver's handoff (same epoch, seq) came
      back later (the receiver hands off only what it took);
    * Muffliato: the value of round r to a neighbour the sender's `round` record lists as realised;
      Muffliato-random: the message of an exchange the sender recorded as committed;
    * IncA: the MIX of iteration t to each out-neighbour its `inca-iteration` record counted out
      (counted = acknowledged)."""
    rows = _job_rows(n)
    sent = _sent_index(n)
    out: list[Entry] = []
    by_job: dict[str, list[Entry]] = {}
    for e in n.entries:
        by_job.setdefault(e.job_id, []).append(e)
    for job, es in by_job.items():
        row = rows.get(job)
        if row is None:
            continue
        alg = row.algorithm
        if alg in RING:
            last_rx = max((e.id for e in es if e.direction == "received"), default=-1)
            out += [e for e in es if e.direction == "sent" and e.kind == "token" and e.id < last_rx]
        elif alg in WALKS:
            # a handoff names (epoch, seq): it proves the latest such token sent before it (a
            # node may draw a seq again, e.g. a seeded one restarted)
            last: dict[tuple[str, int, int], Entry] = {}
            for e in es:
                k = (e.peer, e.epoch, e.seq)
                if e.direction == "sent" and e.kind == "token":
                    last[k] = e
                elif e.direction == "received" and e.kind == "handoff" and k in last:
                    out.append(last.pop(k))
        elif alg in GOSSIP:
            for e in es:
                if e.direction != "local":
                    continue
                if e.event == "round":
                    for w in e.params.get("realised", []):
                        s = sent.get((job, w, "value", "", 0, 0, int(e.params["round"])))
                        if s is not None:
                            out.append(s)
                elif e.event == "activation" and e.params.get("status") == "committed":
                    kind = "pair-value" if e.params["initiator"] == n.node else "reply"
                    s = sent.get((job, e.peer, kind, "", 0, int(e.params["id"]), 0))
                    if s is not None:
                        out.append(s)
        elif alg == "inca":
            for e in es:
                if e.direction == "local" and e.event == "inca-iteration":
                    for w in e.params.get("counted_out", []):
                        s = sent.get((job, w, "mix", "", 0, 0, int(e.params["t"])))
                        if s is not None:
                            out.append(s)
    return out


def by_node(ledgers: Iterable[NodeLedger]) -> dict[str, list[NodeLedger]]:
    """Every ledger (generation) of each node, in the order given."""
    out: dict[str, list[NodeLedger]] = {}
    for n in ledgers:
        out.setdefault(n.node, []).append(n)
    return out


def check_acked(ledgers: Sequence[NodeLedger]) -> list[str]:
    """(a) every acknowledged message is in one of the receiver's ledgers, with the same digest."""
    nodes = by_node(ledgers)
    received: dict[tuple[Any, ...], set[str]] = {}
    for n in ledgers:
        for e in n.entries:
            if e.direction == "received":
                received.setdefault(
                    (e.job_id, e.peer, n.node, e.kind, e.walk, e.epoch, e.seq, e.round), set()
                ).add(e.digest)
    bad = []
    for n in ledgers:
        for e in acknowledged(n):
            if e.peer not in nodes:
                continue  # the receiver's ledger is not part of this check
            k = (e.job_id, n.node, e.peer, e.kind, e.walk, e.epoch, e.seq, e.round)
            got = received.get(k)
            if not got:
                bad.append(
                    f"acked-not-lost: {n.node} has {e.kind} epoch={e.epoch} seq={e.seq} "
                    f"round={e.round} of job {e.job_id} acknowledged by {e.peer}, which "
                    "no ledger of the receiver holds"
                )
            elif e.digest not in got:
                bad.append(
                    f"acked-not-lost: {e.peer} holds {e.kind} seq={e.seq} round={e.round} "
                    f"of job {e.job_id} from {n.node} with other content than was sent"
                )
    return bad


def entry_key(e: Entry) -> tuple[Any, ...]:
    return (
        e.id,
        e.job_id,
        e.direction,
        e.event,
        e.peer,
        e.kind,
        e.walk,
        e.epoch,
        e.seq,
        e.round,
        e.digest,
        json.dumps(e.params, sort_keys=True),
    )


def check_durable(node: str, before: Sequence[Entry], after: Sequence[Entry]) -> list[str]:
    """(a) what a node's ledger held before a SIGKILL is all there after its restart."""
    have = {entry_key(e) for e in after}
    lost = [e for e in before if entry_key(e) not in have]
    if not lost:
        return []
    what = "entry" if len(lost) == 1 else "entries"
    first = lost[0]
    return [
        (
            f"acked-not-lost: {node} lost {len(lost)} ledger {what} across a restart, first: "
            f"{first.direction} {first.event} of job {first.job_id} (id {first.id})"
        )
    ]


def spent(generations: Sequence[NodeLedger], delta: float = DELTA) -> dict[str, float]:
    """The privacy the node has spent towards each peer: the project's accountant (the one behind
    `netdp privacy report`) composing every job of every ledger the node ever had."""
    if not generations:
        return {}
    me = generations[0].node
    views = []
    for g in generations:
        for j in g.jobs:
            views.append(JobView(j.job_id, j.spec, [e for e in g.entries if e.job_id == j.job_id]))
    return {p: loss.epsilon for p, loss in total_losses(views, me, delta).items()}


def check_spent_monotone(
    node: str, before: Mapping[str, float], after: Mapping[str, float], when: str
) -> list[str]:
    """(b) no peer's loss went down."""
    return [
        f"privacy-monotone: {node}'s loss towards {p} went from {eps:.6g} to "
        f"{after.get(p, 0.0):.6g} across {when}"
        for p, eps in sorted(before.items())
        if after.get(p, 0.0) + 1e-9 < eps
    ]


def _slot(alg: str, e: Entry) -> Any:
    """The place of a contribution in its algorithm's schedule (None: no public slot)."""
    p = e.params
    if alg in RING:
        return ("round", int(p["round"]))
    if alg in WALKS:
        return ("step", int(p.get("epoch", 0)), int(p["t"])) if "t" in p else None
    if alg in GOSSIP:
        return ("call", int(p.get("call", 0)))
    if alg == "inca":
        return ("t", int(p.get("t", 0)))
    return None


def schedule_max(alg: str, params: Mapping[str, Any]) -> int | None:
    """The most contributions one node may make to one job under the algorithm's schedule."""
    if alg in RING:
        return int(params["rounds"])
    if alg in WALKS:
        cap = int(params.get("cap", 0))
        if cap:
            return cap
        return int(params["T"]) if params.get("stop", "counter") == "counter" else None
    if alg in GOSSIP:
        return int(params.get("calls", 1))
    if alg == "inca":
        return 1
    return None


def check_contributions(ledgers: Sequence[NodeLedger]) -> list[str]:
    """(c) per node and job, over every ledger the node ever had: no slot contributed twice, and
    no more contributions than the schedule allows."""
    bad = []
    for node, gens in by_node(ledgers).items():
        jobs: dict[str, tuple[str, dict[str, Any]]] = {}
        slots: dict[str, Counter[Any]] = {}
        counts: Counter[str] = Counter()
        per_gen: dict[str, list[int]] = {}
        for gi, g in enumerate(gens):
            rows = _job_rows(g)
            for e in g.entries:
                if e.event != "contribute" or e.job_id not in rows:
                    continue
                row = rows[e.job_id]
                jobs[e.job_id] = (row.algorithm, row.spec["params"])
                counts[e.job_id] += 1
                per_gen.setdefault(e.job_id, [0] * len(gens))[gi] += 1
                s = _slot(row.algorithm, e)
                if s is not None:
                    slots.setdefault(e.job_id, Counter())[s] += 1
        for job, (alg, params) in sorted(jobs.items()):
            where = f" (per ledger: {per_gen[job]})" if len(gens) > 1 else ""
            twice = sorted(str(s) for s, c in slots.get(job, Counter()).items() if c > 1)
            if twice:
                why = (
                    " (two branches of the walk held the same step in the same epoch)"
                    if alg in WALKS
                    else ""
                )
                bad.append(
                    f"contributions: {node} contributed twice at {', '.join(twice)} of "
                    f"{alg} job {job}{where}{why}"
                )
            cap = schedule_max(alg, params)
            if cap is not None and counts[job] > cap:
                bad.append(
                    f"contributions: {node} contributed {counts[job]} times to {alg} job "
                    f"{job}, its schedule allows {cap}{where}"
                )
    return bad


def check_job_summary(job: str, summary: Mapping[str, Any] | None, waited: float) -> list[str]:
    """(d) the job ended: done, or failed with a reason from every node that failed it."""
    if summary is None:
        return [f"jobs-end: no result for job {job} from `netdp job result`"]
    if summary["state"] == "done":
        return []
    if summary["state"] == "failed":
        return [
            f"jobs-end: job {job} failed at {n} without a reason"
            for n, why in summary["failed"].items()
            if not str(why).strip()
        ]
    return [
        (
            f"jobs-end: job {job} ({summary.get('algorithm')}) still {summary['state']} after "
            f"{waited:g}s: not reported by {summary.get('missing')}"
        )
    ]


def check_audit(report: Mapping[str, Any]) -> list[str]:
    """(e) `netdp audit --json` passed."""
    return [
        f"audit: {c['name']}: "
        + "; ".join(c["details"][:3])
        + (f" (+{len(c['details']) - 3} more)" if len(c["details"]) > 3 else "")
        for c in report.get("checks", [])
        if not c["ok"]
    ]


# -- schedules ------------------------------------------------------------------------------------
#: Wiping a node's ledger: the node comes back on a new empty ledger; it stays out of every job
#: submitted before that ledger (`NodeRuntime.may_join`), reported failed there.
#: NETDP_CAMPAIGN_WIPE=0 turns it off for one run (=1 on).
WIPE_ENABLED = True

FAULT_KINDS = ("kill", "wipe", "bootstrap", "partition", "delay", "drop")

#: Groups of algorithms whose data fit one node data file: "cat" gives every node one integer
#: category (0..3: a value for the sums, a category for the histograms), "pair" one feature and a
#: label (the SGDs on one feature; the sums on dimension 2).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cat", ("ring-sum", "walk-sum", "muffliato", "inca", "ring-histogram")),
    ("cat", ("ring-sum-r", "walk-histogram", "rw-sgd", "muffliato-random")),
    ("pair", ("walk-sgd", "muffliato-gd", "ring-sum", "walk-sum")),
)


def job_params(alg: str, dim: int) -> dict[str, Any]:
    """Jobs of several seconds each on 5 loaded nodes, so that faults hit them running (and some
    after they ended: a restarted node meets finished jobs too)."""
    walk = {"T": 250, "custody_timeout_s": 4.0}
    return {
        "ring-sum": {"rounds": 120, "epsilon": 0.9, "dim": dim, "clip": 4.0},
        "ring-sum-r": {"rounds": 120, "epsilon": 0.9, "dim": dim, "clip": 4.0},
        "ring-histogram": {"rounds": 100, "bins": 4},
        "walk-sum": {**walk, "cap": 60, "dim": dim, "clip": 4.0},
        "walk-histogram": {**walk, "cap": 60, "bins": 4},
        "walk-sgd": {**walk, "dim": 1},
        "rw-sgd": {**walk, "objective": "mean", "dim": dim, "mc_walks": 20},
        # plain gossip: an accelerated round with a drop does not conserve the mass (the audit
        # says so, rightly), and this campaign drops messages on purpose
        "muffliato": {
            "graph": "ring",
            "T": 60,
            "round_timeout_s": 1.0,
            "dim": dim,
            "clip": 4.0,
            "accelerated": False,
        },
        "muffliato-random": {
            "graph": "ring",
            "duration_s": 8.0,
            "rate": 3.0,
            "dim": dim,
            "clip": 4.0,
        },
        "muffliato-gd": {
            "graph": "ring",
            "T": 12,
            "steps": 5,
            "round_timeout_s": 1.0,
            "dim": 1,
            "accelerated": False,
        },
        "inca": {"T": 30, "k": 2, "round_s": 1.0, "dim": dim, "hi": 4.0, "calibration_runs": 1},
    }[alg]


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after the jobs were submitted
    kind: str
    target: str  # a node id, or "bootstrap"
    duration_s: float  # downtime (kill, wipe, bootstrap) or how long the impairment lasts


@dataclass(frozen=True)
class Schedule:
    seed: int
    nodes: int
    data: str
    algorithms: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        return json.dumps({**asdict(self), "faults": [asdict(f) for f in self.faults]})


def make_schedule(
    seed: int,
    nodes: int = 5,
    faults: int | None = None,
    wipe: bool | None = None,
    window_s: float = 10.0,
) -> Schedule:
    """A reproducible schedule: everything below comes from `seed`."""
    rng = random.Random(seed)
    data, algorithms = GROUPS[seed % len(GROUPS)]
    ids = [f"node-{i}" for i in range(1, nodes + 1)]
    if data == "cat":
        values = tuple((float(rng.randrange(4)),) for _ in ids)
    else:
        values = tuple((round(rng.random(), 3), float(rng.randrange(2))) for _ in ids)
    if wipe is None:
        env = os.environ.get("NETDP_CAMPAIGN_WIPE", "")
        wipe = env == "1" if env in ("0", "1") else WIPE_ENABLED
    weights = {"kill": 4, "wipe": 2, "bootstrap": 1, "partition": 2, "delay": 1, "drop": 1}
    count = faults if faults is not None else rng.randint(4, 6)
    times = sorted(round(rng.uniform(0.3, window_s), 2) for _ in range(count))
    out = []
    for t in times:
        kind = rng.choices(FAULT_KINDS, [weights[k] for k in FAULT_KINDS])[0]
        if kind == "wipe" and not wipe:
            kind = "kill"  # the same schedule otherwise, so that a seed replays with wipes on
        target = "bootstrap" if kind == "bootstrap" else rng.choice(ids)
        dur = round(
            rng.uniform(0.2, 2.5)
            if kind in ("kill", "wipe", "bootstrap")
            else rng.uniform(1.0, 5.0),
            2,
        )
        out.append(Fault(t, kind, target, dur))
    return Schedule(seed, nodes, data, algorithms, values, tuple(out))


# -- the runner -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_file(path: Path, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        time.sleep(0.05)
    raise TimeoutError(f"{path} not written after {timeout}s")


@dataclass
class Outcome:
    schedule: Schedule
    faults_done: int = 0
    applied: list[str] = field(default_factory=list)  # "kind target at Ns" as really applied
    violations: list[str] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)  # job -> final state
    seconds: float = 0.0


class CampaignRun:
    """One schedule on one fresh cluster. `run()` never leaves a process behind."""

    NODE_FLAGS: ClassVar[tuple[str, ...]] = ("--peer-timeout", "6", "--job-deadline", "45")
    RESULT_WAIT_S = 70.0  # per job, after the faults: > --job-deadline

    def __init__(self, schedule: Schedule, workdir: Path) -> None:
        self.s = schedule
        self.c = LocalCluster(workdir, schedule.nodes, poll_interval=0.2)
        self.ids = self.c.ids
        self.real_port: dict[str, int] = {}
        self.proxy_port: dict[str, int] = {}
        self.proxies: dict[str, subprocess.Popen[bytes]] = {}
        self.generations: dict[str, list[Path]] = {nid: [self.c.ledger(nid)] for nid in self.ids}
        self.data: dict[str, Path] = {}
        self.out = Outcome(schedule)
        # (node, what, spent before, (ledger, its entries) before a same-ledger restart) of each
        # restart, checked at the end
        self.before: list[tuple[str, str, dict[str, float], tuple[Path, list[Entry]] | None]] = []
        self.jobs: dict[str, str] = {}  # job id -> algorithm
        self.restarts: Counter[str] = Counter()

    # -- processes --------------------------------------------------------------------------
    def _node_flags(self, i: int, nid: str) -> list[str]:
        # each incarnation of a node its own seed: a seeded node restarted with the same seed
        # would draw the same walk sequence numbers (and noise) again
        incarnation = self.restarts.get(nid, 0)
        return [
            *self.NODE_FLAGS,
            "--seed",
            str(self.s.seed * 1000 + incarnation * 10 + i),
            "--listen",
            f"127.0.0.1:{self.real_port[nid]}",
            "--advertise",
            f"127.0.0.1:{self.proxy_port[nid]}",
        ]

    def _proxy_config(self, nid: str, cfg: dict[str, Any]) -> None:
        path = self.c.workdir / "proxy" / f"{nid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "delay_ms": 0.0,
                    "jitter_ms": 0.0,
                    "drop_prob": 0.0,
                    "drop_after": 4,
                    "max_drops": 0,
                    **cfg,
                }
            )
        )
        os.replace(tmp, path)

    def _start_proxy(self, nid: str) -> None:
        d = self.c.workdir / "proxy"
        d.mkdir(parents=True, exist_ok=True)
        self._proxy_config(nid, {})
        ready = d / f"{nid}.ready"
        ready.unlink(missing_ok=True)
        with open(d / f"{nid}.log", "ab") as log:
            p = subprocess.Popen(
                [
                    sys.executable,
                    str(PROXY),
                    "--listen",
                    "127.0.0.1:0",
                    "--target",
                    f"127.0.0.1:{self.real_port[nid]}",
                    "--config",
                    str(d / f"{nid}.json"),
                    "--seed",
                    str(self.s.seed),
                    "--stats",
                    str(d / f"{nid}.stats"),
                    "--ready",
                    str(ready),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.proxies[nid] = p
        self.proxy_port[nid] = int(wait_file(ready, 30, p))

    def start(self) -> None:
        self.c.setup_pki()
        self.c.wait_port(self.c.start_bootstrap(), 60)
        for i, nid in enumerate(self.ids):
            f = self.c.workdir / "data" / f"{nid}.txt"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(" ".join(repr(v) for v in self.s.values[i]) + "\n")
            self.data[nid] = f
            self.real_port[nid] = free_port()
            self._start_proxy(nid)
        for i, nid in enumerate(self.ids):
            self.c.start_node(nid, data=self.data[nid], extra=self._node_flags(i, nid))
        for nid in self.ids:
            self.c.wait_port(self.c.procs[nid], 60)

    def stop(self) -> None:
        for p in self.c.procs.values():
            if p.alive() and p.popen is not None:
                p.popen.send_signal(signal.SIGCONT)
        self.c.stop()
        for p in self.proxies.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.proxies.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)

    def _load(self, nid: str) -> list[NodeLedger]:
        return load([d for d in self.generations[nid] if (d / "ledger.sqlite").exists()])

    def _spent(self, nid: str) -> dict[str, float]:
        try:
            return spent(self._load(nid))
        except Exception as e:  # noqa: BLE001 (any ledger a run leaves must be readable)
            self.out.violations.append(
                f"privacy-monotone: the accountant failed on {nid}'s "
                f"ledgers: {type(e).__name__}: {e}"
            )
            return {}

    # -- faults -----------------------------------------------------------------------------
    async def _restart_node(self, f: Fault, wipe: bool) -> None:
        nid = f.target
        before_spent = self._spent(nid)
        current = self.generations[nid][-1]
        at_kill = (
            (current, load([current])[0].entries)
            if not wipe and (current / "ledger.sqlite").exists()
            else None
        )
        self.c.kill(nid, signal.SIGKILL)
        what = f"a SIGKILL at {f.at_s}s and a restart on {'a wiped' if wipe else 'the same'} ledger"
        self.before.append((nid, what, before_spent, at_kill))
        await asyncio.sleep(f.duration_s)
        self.restarts[nid] += 1
        extra = self._node_flags(self.ids.index(nid), nid)
        if wipe:
            new = self.c.workdir / "ledgers" / f"{nid}.wiped{len(self.generations[nid])}"
            self.generations[nid].append(new)
            extra += ["--ledger", str(new)]
        self.c.wait_port(self.c.start_node(nid, data=self.data[nid], extra=extra), 60)

    async def _restart_bootstrap(self, f: Fault) -> None:
        port = self.c.procs["bootstrap"].port
        self.c.kill("bootstrap", signal.SIGKILL)
        await asyncio.sleep(f.duration_s)
        self.c.wait_port(self.c.start_bootstrap(listen=f"127.0.0.1:{port}"), 60)

    async def _impair(self, f: Fault) -> None:
        cfg = {
            "partition": {"drop_prob": 1.0, "drop_after": 0, "max_drops": 10**9},
            "delay": {"delay_ms": 150.0, "jitter_ms": 100.0},
            "drop": {"drop_prob": 0.3, "drop_after": 4, "max_drops": 4},
        }[f.kind]
        self._proxy_config(f.target, cfg)
        await asyncio.sleep(f.duration_s)
        self._proxy_config(f.target, {})

    async def apply(self, f: Fault) -> None:
        if f.kind in ("kill", "wipe"):
            await self._restart_node(f, wipe=f.kind == "wipe")
        elif f.kind == "bootstrap":
            await self._restart_bootstrap(f)
        else:
            await self._impair(f)

    # -- the run ----------------------------------------------------------------------------
    def _netdp(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "netdp_node.cli", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    async def _submit(self) -> None:
        op = BootstrapClient(self.c.bootstrap_address, self.c.operator)
        try:
            dim = 1 if self.s.data == "cat" else 2
            for alg in self.s.algorithms:
                job = f"s{self.s.seed}-{alg}"
                await op.submit(
                    alg, job_params(alg, dim), participants=self.ids, job_id=job, seed=self.s.seed
                )
                self.jobs[job] = alg
        finally:
            await op.close()

    def _wait_jobs(self) -> None:
        deadline = time.monotonic() + self.RESULT_WAIT_S
        for job in self.jobs:
            left = max(1.0, deadline - time.monotonic())
            r = self._netdp(
                "job",
                "result",
                job,
                "--bootstrap",
                self.c.bootstrap_address,
                "--certs",
                str(self.c.certs("operator")),
                "--wait",
                f"{left:.1f}",
                "--json",
                timeout=left + 60,
            )
            try:
                summary = json.loads(r.stdout)
            except json.JSONDecodeError:
                summary = None
            self.out.jobs[job] = summary["state"] if summary else "?"
            self.out.violations += check_job_summary(job, summary, self.RESULT_WAIT_S)

    def _final_checks(self) -> None:
        ledgers: list[NodeLedger] = []
        for nid in self.ids:
            ledgers += self._load(nid)
        self.out.violations += check_acked(ledgers)
        self.out.violations += check_contributions(ledgers)
        for nid, what, before_spent, at_kill in self.before:
            self.out.violations += check_spent_monotone(nid, before_spent, self._spent(nid), what)
            if at_kill is not None:  # restarted on the same ledger: it still holds all of it
                directory, entries = at_kill
                self.out.violations += check_durable(nid, entries, load([directory])[0].entries)
        dirs = [
            str(d)
            for nid in self.ids
            for d in self.generations[nid]
            if (d / "ledger.sqlite").exists()
        ]
        r = self._netdp("audit", *[a for d in dirs for a in ("--ledger", d)], "--json", timeout=300)
        try:
            self.out.violations += check_audit(json.loads(r.stdout))
        except json.JSONDecodeError:
            self.out.violations.append(
                f"audit: `netdp audit` printed no JSON (exit {r.returncode}): {r.stderr[-500:]}"
            )

    async def run(self) -> Outcome:
        t0 = time.monotonic()
        try:
            self.start()
            await self._submit()
            start = time.monotonic()
            for f in self.s.faults:
                await asyncio.sleep(max(0.0, start + f.at_s - time.monotonic()))
                began = time.monotonic() - start
                await self.apply(f)
                self.out.faults_done += 1
                self.out.applied.append(
                    f"{f.kind} {f.target} {began:.1f}-{time.monotonic() - start:.1f}s"
                )
            self._wait_jobs()
        finally:
            self.stop()
        self._final_checks()
        self.out.seconds = time.monotonic() - t0
        return self.out
