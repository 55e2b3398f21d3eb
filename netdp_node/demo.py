"""`netdp demo`: a bootstrap and N node daemons on loopback run a private job end to end.

`--algorithm`: every algorithm whose record offers a demo (`ALGORITHMS`, from the registry; its
hooks make the job, the data and the report: `netdp_node.algorithms.hooks`); `inca` takes
`--leave`/`--miss` (node processes that leave for good or drop out for a while, through the node's
fault flags). Prints progress on stderr, then the result against the truth (sums, histograms) or
the test accuracy beside the local-DP and central-DP baselines (SGD, GD), the noise netdp needed
against local DP for the same guarantee, and every node's privacy report read from its own ledger,
with the threat model (who the ε holds against; JSON key "threat_model"). With --seed the nodes'
private RNGs are seeded (reproducible, NOT PRIVATE): the output says so (JSON keys "seeded_rng",
"not_private"). With --json, one JSON object on stdout (keys in the README): per node its loss
towards its worst peer and a summary over its peers (`json_result`), every pair only with
--json-peers; --peers-out writes every pair to a compact file instead (`write_peers`: .npz
matrices or .csv lines). Every process it started is stopped on success, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from netdp.v1 import common_pb2, peer_pb2
from netdp_node import audit
from netdp_node.algorithms import ALGORITHMS as REGISTRY
from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.hooks import DemoRun, Hooks
from netdp_node.algorithms.muffliato.accountant import schedules
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.data import load_values
from netdp_node.errors import ConfigError
from netdp_node.jobs import render_result, result_summary
from netdp_node.ledger import JobRow, Ledger
from netdp_node.privacy.threat import NOT_PRIVATE, not_private_note
from netdp_node.progress import progress_bar
from netdp_node.report import ledger_report, threat_lines, wrap
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import secure_channel
from netdp_node.waiting import interruptible


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class JobWatch:
    """`netdp demo --timeout`: the job fails when it made NO PROGRESS for `stall` seconds (no
    protocol step at any node, no node reported), not when it runs longer than that: a 1,000-node
    walk of 10,000 steps takes minutes and is healthy as long as it moves. Progress is a new high
    of the steps summed over the nodes' Status replies (a node that did not answer makes the sum
    drop; that is not progress) or of the nodes reported. Times are passed in (no clock here)."""

    def __init__(self, stall: float, now: float) -> None:
        self.stall = stall
        self.steps = 0
        self.reported = 0
        self.changed = now

    def note(self, now: float, *, steps: int | None = None, reported: int | None = None) -> None:
        if steps is not None and steps > self.steps:
            self.steps, self.changed = steps, now
        if reported is not None and reported > self.reported:
            self.reported, self.changed = reported, now

    def expired(self, now: float) -> bool:
        return now - self.changed > self.stall


def demo_job_id() -> str:
    """The demo's own job id, fresh for each run. The bootstrap treats a client-chosen id as an
    idempotency key: when the client retries a submission whose reply was lost (a transient error
    on a loaded machine), it gets the same job back instead of starting a second walk over the
    same nodes (seen: two jobs 1.7 s apart, each node's budget spent twice)."""
    return f"demo-{secrets.token_hex(6)}"


def node_job_deadline(stall: float) -> float:
    """The nodes' own --job-deadline in the demo: a safety net for nodes left without the demo
    (it stops them itself when `JobWatch` gives up), an hour or 10 stalls, whichever is longer."""
    return max(3600.0, 10 * stall)


#: Most nodes one progress round asks for their Status (`ProgressSweep`), after the first round.
PROGRESS_SLICE = 64


class ProgressSweep:
    """The job's progress from the nodes' Status replies, in slices: the first round asks every
    node, each later one the next `per_round` nodes in turn, and every node's last answer is kept
    (a node that does not answer keeps it). The sum never drops, and the load the rounds put on the
    hosts does not grow with the number of nodes: at 1,000 nodes, asking all of them every 10 s
    cost about as many RPCs as the walk's own messages. A step anywhere shows within
    ceil(n / per_round) rounds."""

    def __init__(self, ids: Sequence[str], per_round: int = PROGRESS_SLICE) -> None:
        self.ids = list(ids)
        self.per_round = max(1, per_round)
        self.next = 0
        self.first = True
        self.last: dict[str, tuple[int, int]] = {}

    def slice(self) -> list[str]:
        """The nodes to ask this round."""
        if self.first or self.per_round >= len(self.ids):
            self.first = False
            return list(self.ids)
        k = self.next
        out = [self.ids[(k + i) % len(self.ids)] for i in range(self.per_round)]
        self.next = (k + self.per_round) % len(self.ids)
        return out

    def record(self, node: str, done: int, expected: int) -> None:
        """A node's answer (the larger of it and what it said before: its steps only grow)."""
        old = self.last.get(node, (0, 0))
        self.last[node] = (max(old[0], done), max(old[1], expected))

    def totals(self) -> tuple[int, int]:
        """Steps done and expected, summed over every node's last answer."""
        return sum(d for d, _ in self.last.values()), sum(e for _, e in self.last.values())


async def _progress(
    channels: dict[str, grpc.aio.Channel], job_id: str, sweep: ProgressSweep
) -> tuple[int, int]:
    """Ask this round's nodes of `sweep` for their Status (at most 64 RPCs at a time); the steps
    done / expected over every node's last answer."""
    limit = asyncio.Semaphore(64)

    async def one(nid: str) -> None:
        async with limit:
            try:
                reply = await channels[nid].unary_unary(
                    "/netdp.v1.Peer/Status",
                    request_serializer=peer_pb2.StatusRequest.SerializeToString,
                    response_deserializer=peer_pb2.StatusReply.FromString,
                )(peer_pb2.StatusRequest(), timeout=5)
            except grpc.aio.AioRpcError:
                return
        sweep.record(
            nid,
            sum(j.progress for j in reply.jobs if j.job_id == job_id),
            sum(j.expected for j in reply.jobs if j.job_id == job_id),
        )

    await asyncio.gather(*(one(nid) for nid in sweep.slice()))
    return sweep.totals()


#: The algorithms with a demo, in the registry's order.
ALGORITHMS = tuple(name for name, a in REGISTRY.items() if a.hooks.demo)


def _hooks(a: argparse.Namespace) -> Hooks:
    return get_algorithm(a.algorithm).hooks


@dataclass
class DemoData:
    """What each node gets as --data, and what the demo needs to judge the result."""

    files: dict[str, Path]
    values: dict[str, np.ndarray]
    split: Any = None  # walk-sgd: the train/test split (test accuracy, baselines)


def _write_data(
    a: argparse.Namespace, cluster: LocalCluster, values: np.ndarray | None
) -> DemoData:
    out, split = _hooks(a).demo_data(a, cluster.ids, values)
    files = cluster.write_data({nid: " ".join(repr(float(x)) for x in v) for nid, v in out.items()})
    return DemoData(files, out, split)


def _job_params(a: argparse.Namespace, n: int) -> dict[str, Any]:
    """The job's parameters from the flags; with --target-epsilon, the planner's noise
    (`netdp_node.plan.apply_target`, the choice kept in `a.planned` to be printed)."""
    params = _hooks(a).demo_params(a, n)
    target = getattr(a, "target_epsilon", None)
    if target is None:
        return params
    from netdp_node.plan import NOISE_PARAMS, apply_target  # lazy: start-up cost

    key = (n, a.algorithm, target)
    if getattr(a, "planned", None) is None or a.planned[0] != key:
        base = {k: v for k, v in params.items() if k not in NOISE_PARAMS}
        try:
            a.planned = (key, *apply_target(a.algorithm, base, n, target))
        except ConfigError as e:  # check_args names the flag of a ValueError
            raise ValueError(str(e)) from None
    return dict(a.planned[1])


async def submit_job(
    client: BootstrapClient, a: argparse.Namespace, ids: list[str]
) -> common_pb2.JobSpec:
    """Submit the demo's job under its own id (`demo_job_id`): the client retries a submission
    that failed transiently, and the id makes that retry re-attach instead of starting a second
    job."""
    return await client.submit(
        job_id=demo_job_id(),
        algorithm=a.algorithm,
        params=_job_params(a, len(ids)),
        participants=list(ids),
        seed=a.seed or 0,
        topology=getattr(a, "topology", "") or "",
    )


async def _run(
    a: argparse.Namespace, cluster: LocalCluster, values: np.ndarray | None
) -> dict[str, Any]:
    t0 = time.monotonic()
    data = _write_data(a, cluster, values)
    seeds = (
        {nid: a.seed * 1000 + i for i, nid in enumerate(cluster.ids)} if a.seed is not None else {}
    )
    hooks = _hooks(a)
    faults = hooks.demo_faults(a, cluster.ids)
    workers = a.workers
    if workers:
        alone = f" (+{len(faults)} with fault flags, one process each)" if faults else ""
        _say(
            f"starting a bootstrap and {cluster.n} nodes in {min(workers, cluster.n)} host "
            f"process(es){alone} on 127.0.0.1 (work directory {cluster.workdir})"
        )
    else:
        _say(
            f"starting a bootstrap and {cluster.n} node processes on 127.0.0.1 "
            f"(work directory {cluster.workdir})"
        )
    # start-up is not part of --timeout: its waits fail only when the processes stop progressing.
    # --timeout bounds a stall, not the job's length (`JobWatch`): the nodes' own job deadline is
    # only a safety net, far beyond any healthy demo
    cluster.start(
        data=data.files,
        extra=faults,
        timeout=a.timeout,
        workers=workers,
        seeds=seeds,
        wait=False,
        common=["--job-deadline", f"{node_job_deadline(a.timeout):g}"],
    )
    with progress_bar("start-up", cluster.n, unit="nodes registered") as starting:
        await cluster.wait_registered(cluster.ids, timeout=a.timeout, on_progress=starting.update)
    await asyncio.get_running_loop().run_in_executor(None, cluster.wait_ready, a.timeout)
    _say(f"{cluster.n} nodes registered with the bootstrap at {cluster.bootstrap_address}")
    startup = time.monotonic() - t0
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    op = cluster.operator
    channels = {
        nid: secure_channel(cluster.address(nid), op, peer_name(nid)) for nid in cluster.ids
    }
    try:
        job = await submit_job(client, a, cluster.ids)
        graph = getattr(a, "topology", "") or "exponential"
        _say(f"submitted job {job.job_id}: {hooks.describe(json.loads(job.params_json), graph)}")
        t_job = time.monotonic()
        watch = JobWatch(a.timeout, t_job)
        reported = 0
        # a slice of the nodes' Status each round (`ProgressSweep`): the load on the hosts stays
        # the same at any size, and a step anywhere shows within a few rounds (several sweeps fit
        # in --timeout, which counts from the last step seen)
        sweep = ProgressSweep(cluster.ids)
        rounds = math.ceil(cluster.n / sweep.per_round)
        every = min(0.2 if cluster.n <= 64 else 2.0, a.timeout / (4 * rounds))
        next_progress = 0.0
        with progress_bar("job", unit="node steps") as bar:
            while True:
                reply = await client.result(job.job_id)
                summary = result_summary(reply)
                if summary["complete"] or summary["failed"]:
                    break
                watch.note(time.monotonic(), reported=len(reply.results))
                if time.monotonic() >= next_progress:
                    done, expected = await _progress(channels, job.job_id, sweep)
                    next_progress = time.monotonic() + every
                    watch.note(time.monotonic(), steps=done)
                    bar.update(done, expected)
                    if cluster.n > 64 and len(reply.results) != reported:
                        reported = len(reply.results)
                        bar.note(f"  {reported}/{cluster.n} nodes reported")
                if watch.expired(time.monotonic()):
                    raise TimeoutError(
                        f"job {job.job_id} made no progress for {a.timeout:g}s (no protocol "
                        f"step at any node, no node reported; {watch.steps} node steps done, "
                        f"{watch.reported}/{cluster.n} nodes reported, "
                        f"{time.monotonic() - t_job:.0f}s after it was submitted)"
                    )
                await asyncio.sleep(0.2 if cluster.n <= 64 else 0.5)
        elapsed = time.monotonic() - t_job
    finally:
        await client.close()
        for ch in channels.values():
            await ch.close()
    if summary["state"] != "done":
        raise RuntimeError("the job did not complete:\n" + render_result(summary))
    spec_params = json.loads(job.params_json)
    if hooks.demo_waits_for_schedules:
        await _wait_schedules(cluster, job.job_id)
    privacy = []
    for nid in cluster.ids:
        rep = ledger_report(cluster.ledger(nid), delta_target=1e-5, job_id=job.job_id)
        j = rep["jobs"][0]
        privacy.append(
            {
                "node": nid,
                "epsilon": j["epsilon"],
                "delta": j["delta"],
                "contributed": j["contributed"],
                "contributions": j["contributions"],
                "peers": j["peers"],
                "baselines": j["baselines"],
                "seeded_rng": j["seeded_rng"],
                **({"incoming": j["incoming"]} if "incoming" in j else {}),
            }
        )
    seeded = sorted(set(summary["seeded_rng"]) | {r["node"] for r in privacy if r["seeded_rng"]})
    res: dict[str, Any] = {
        "algorithm": a.algorithm,
        "job_id": job.job_id,
        "nodes": cluster.n,
        "workers": len({cluster.host_of[nid] for nid in cluster.ids}) if workers else 0,
        "params": spec_params,
        "contributors": sorted(summary["contributors"]),
        "contributions": summary["contributions"],
        "elapsed_s": elapsed,
        "startup_s": startup,
        "privacy": privacy,
        "threat_model": summary["threat_model"],
        "seeded_rng": seeded,
        "not_private": not_private_note(seeded) if seeded else None,
        "workdir": str(cluster.workdir),
    }
    value = np.asarray(summary["value"], dtype=np.float64)
    run = DemoRun(
        flags=a,
        ids=list(cluster.ids),
        summary=summary,
        params=spec_params,
        values=data.values,
        split=data.split,
        value=value,
        privacy=privacy,
        faults=faults,
        job_rows=lambda: _job_rows(cluster, job.job_id),
        check=lambda name: _check(cluster, name),
    )
    res.update(hooks.demo_outcome(run))
    return res


def _job_rows(cluster: LocalCluster, job_id: str) -> dict[str, JobRow]:
    """Every node's row of the job, read from its ledger."""
    rows = {}
    for nid in cluster.ids:
        led = Ledger.open_readonly(cluster.ledger(nid))
        try:
            row = led.job(job_id)
        finally:
            led.close()
        if row is not None:
            rows[nid] = row
    return rows


def _check(cluster: LocalCluster, name: str) -> tuple[bool, list[str]]:
    """An audit check over the merged ledgers of every node."""
    c = audit.CHECKS[name](audit.load([cluster.ledger(nid) for nid in cluster.ids]))
    return c.ok, c.details


async def _wait_schedules(cluster: LocalCluster, job_id: str, bound: float = 20.0) -> None:
    """Muffliato: the public end-of-job schedules still travel after the job is done; wait (at most
    `bound` seconds) until every node's ledger holds them, so that the labelled joint-view and paper
    figures can be computed for every node (the guarantee itself does not need them)."""
    waiting = list(cluster.ids)
    deadline = time.monotonic() + bound
    while waiting and time.monotonic() < deadline:
        still = []
        for nid in waiting:
            led = Ledger.open_readonly(cluster.ledger(nid))
            try:
                spec = next((j.spec for j in led.jobs() if j.job_id == job_id), None)
                known = (
                    spec is not None and schedules(spec, led.entries(job_id), nid)[0] is not None
                )
            finally:
                led.close()
            if not known:
                still.append(nid)
        waiting = still
        if waiting:
            await asyncio.sleep(0.2)


def render(res: dict[str, Any]) -> str:
    lines = [""]
    alg = res["algorithm"]
    head = (
        f"(job {res['job_id']}: {res['elapsed_s']:.2f} s after {res['startup_s']:.1f} s of "
        "start-up)"
    )
    lines += get_algorithm(alg).hooks.render_demo(res, _where(res), head)
    lines += [""]
    if res.get("not_private"):
        lines += wrap(res["not_private"], "")
    lines += [
        "privacy each node has incurred towards each other node, from its own ledger"
        + (f" ({NOT_PRIVATE})" if res.get("not_private") else "")
        + ":"
    ]
    # `res` as `_run` makes it, or as --json prints it (per-peer lists only with --json-peers)
    listed = all("peers" in row for row in res["privacy"])
    peers = [p["node"] for p in res["privacy"]]
    w = max(len(x) for x in peers)
    show = peers if len(peers) <= 10 and listed else []
    lines.append(
        f"  {'node':<{w}}  {'ε (worst)':>10}  {'δ':>9}  " + "  ".join(f"{p:>{w}}" for p in show)
    )
    rows = res["privacy"]
    if len(rows) > MAX_ROWS:  # the nodes that lost most; the others summed up below
        rows = sorted(rows, key=lambda r: -r["epsilon"])[:MAX_ROWS]
    for row in rows:
        eps = {p["peer"]: p["epsilon"] for p in row.get("peers", ())}
        cells = "  ".join(f"{(f'{eps[p]:.3f}' if p in eps else '-'):>{w}}" for p in show)
        lines.append(
            f"  {row['node']:<{w}}  {row['epsilon']:>10.4f}  {row['delta']:>9.2g}  {cells}"
            + (f"  {NOT_PRIVATE}" if row.get("seeded_rng") else "")
        )
    if len(rows) < len(res["privacy"]):
        rest = sorted(res["privacy"], key=lambda r: -r["epsilon"])[len(rows) :]
        lines.append(
            f"  ... {len(rest)} more nodes, ε (worst) from {rest[-1]['epsilon']:.4f} to "
            f"{rest[0]['epsilon']:.4f} (every row: --json)"
        )
    methods = sorted(
        {p["method"] for row in res["privacy"] for p in row["peers"]}
        if listed
        else {m for row in res["privacy"] for m in row["peers_summary"]["methods"]}
    )
    lines.append(f"  (method: {'; '.join(methods)}; see `netdp privacy report`)")
    if res.get("threat_model"):
        lines += threat_lines(res["threat_model"], "  ")
    return "\n".join(lines)


#: most rows of the per-node privacy table the demo prints (the worst first; --json has all)
MAX_ROWS = 16


def _where(res: dict[str, Any]) -> str:
    w = res.get("workers", 0)
    return "node processes" if not w else f"nodes in {w} host process{'es' if w > 1 else ''}"


#: Most nodes `netdp demo` runs: one process each (--workers 0), or packed in host processes.
MAX_PROCESS_NODES = 64
MAX_HOSTED_NODES = 2000


def default_workers() -> int:
    """--workers default: one host process per core."""
    return max(1, os.cpu_count() or 1)


#: The demo flag each job parameter comes from (to name it in an error).
PARAM_FLAGS = {
    "delta": "--delta",
    "delta_prime": "--delta",
    "epsilon": "--epsilon",
    "target": "--target-epsilon",
    "rounds": "--rounds",
    "T": "--steps",
    "steps": "--steps",
    "clip": "--clip",
    "hi": "--clip",
    "bins": "--bins",
    "k": "--k",
    "scheme": "--scheme",
    "threat": "--threat",
    "round_s": "--round-s",
    "expect_leave": "--leave",
    "expect_miss": "--miss",
    "participants": "--nodes",
}


def check_args(a: argparse.Namespace) -> dict[str, Any]:
    """Every flag, then the job they make, checked as the bootstrap checks a submission
    (`Algorithm.validate`), before anything is created or started: a mistake is a ConfigError
    (exit 2) naming the flag, not a failure after the processes started. Returns the job's
    validated parameters."""
    if a.algorithm not in ALGORITHMS:
        raise ConfigError(
            f"--algorithm must be one of {', '.join(ALGORITHMS)}, not {a.algorithm!r}"
        )
    if getattr(a, "nodes", None) is None:
        a.nodes = _hooks(a).demo_nodes  # the algorithm's: a size where its gain shows
    if getattr(a, "workers", None) is None:
        a.workers = default_workers()
    if a.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (0: one process per node), not {a.workers}")
    most = MAX_HOSTED_NODES if a.workers else MAX_PROCESS_NODES
    if not 3 <= a.nodes <= most:
        raise ConfigError(
            f"--nodes must be between 3 and {most}"
            + ("" if a.workers else " with --workers 0 (one process per node)")
            + f", not {a.nodes}"
        )
    if a.rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, not {a.rounds}")
    if a.steps < 0:
        raise ConfigError(f"--steps must be >= 0 (0: the default), not {a.steps}")
    if not 0 < a.delta < 1:
        raise ConfigError(f"--delta must be in (0, 1), not {a.delta:g}")
    if a.epsilon is not None and not 0 < a.epsilon < math.inf:
        raise ConfigError(f"--epsilon must be a finite number > 0, not {a.epsilon:g}")
    target = getattr(a, "target_epsilon", None)
    if target is not None and a.epsilon is not None:
        raise ConfigError("--target-epsilon sets the noise of the job: do not also give --epsilon")
    if target is not None and not 0 < target < math.inf:
        raise ConfigError(f"--target-epsilon must be a finite number > 0, not {target:g}")
    _check_output_flags(a)
    hooks = _hooks(a)
    hooks.check_demo_flags(a)
    if hooks.demo_topology and a.topology:
        from netdp_bootstrap.topology import KINDS  # lazy: start-up cost

        if a.topology not in KINDS:
            raise ConfigError(
                f"--topology {a.topology!r} is not a kind the bootstrap serves: {', '.join(KINDS)}"
            )
    try:
        return get_algorithm(a.algorithm).validate(_job_params(a, a.nodes), a.nodes)
    except (ValueError, KeyError, TypeError) as e:
        # the message names the job's parameter at fault first: name its flag before it
        text = str(e)
        flag = PARAM_FLAGS.get(text.split(" ", 1)[0])
        others = sorted(
            {
                f
                for k, f in PARAM_FLAGS.items()
                if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text)
            }
            - {flag}
        )
        where = f"; in the {a.algorithm} job these flags make" + (
            f", see also {', '.join(others)}" if others else ""
        )
        raise ConfigError(f"{flag}: {text}{where}" if flag else f"{text}{where}") from None


def _check_output_flags(a: argparse.Namespace) -> None:
    """--json-peers and --peers-out, before anything starts (a mistake found after a 1,000-node
    job would lose the pairs)."""
    if getattr(a, "json_peers", False) and not a.json:
        raise ConfigError("--json-peers adds every pair to the --json output: give --json too")
    out = getattr(a, "peers_out", None)
    if out is None:
        return
    path = Path(out)
    if path.suffix not in PEERS_FORMATS:
        raise ConfigError(
            f"--peers-out {out}: the file name must end in {' or '.join(PEERS_FORMATS)} (its "
            "format)"
        )
    if path.is_dir():
        raise ConfigError(f"--peers-out {out} is a directory, not a file")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # the folder it would be created in
        parent = parent.parent
    if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        raise ConfigError(f"--peers-out {out}: cannot create files in {parent}")


# -- the JSON output and the per-pair file ------------------------------------------------------
#: --peers-out formats, by the file name's suffix
PEERS_FORMATS = (".npz", ".csv")
#: the per-peer lists of a node's privacy row (outgoing; incoming for gossip) and their summaries
PAIR_LISTS = {"peers": "out", "incoming": "in"}


def peer_summary(losses: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A node's losses towards its peers in a few numbers: count, ε min/median/mean/max, the
    largest δ, and how many peers each accounting method covers."""
    if not losses:
        return {
            "count": 0,
            "epsilon_min": None,
            "epsilon_median": None,
            "epsilon_mean": None,
            "epsilon_max": None,
            "delta_max": None,
            "methods": {},
        }
    eps = np.array([p["epsilon"] for p in losses], dtype=np.float64)
    return {
        "count": len(losses),
        "epsilon_min": float(eps.min()),
        "epsilon_median": float(np.median(eps)),
        "epsilon_mean": float(eps.mean()),
        "epsilon_max": float(eps.max()),
        "delta_max": max(float(p["delta"]) for p in losses),
        "methods": dict(sorted(Counter(str(p["method"]) for p in losses).items())),
    }


def worst_of(losses: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The loss of the largest ε (the first such peer in the list's order), None if none."""
    worst = max(losses, key=lambda p: p["epsilon"], default=None)
    return None if worst is None else dict(worst)


def json_result(res: Mapping[str, Any], *, peers: bool = False) -> dict[str, Any]:
    """The --json object: `res` with each node's per-peer lists ("peers", and "incoming" for
    gossip) replaced by the worst of them ("worst_peer", "worst_incoming") and their summary
    ("peers_summary", "incoming_summary", `peer_summary`), so that its size grows with the nodes,
    not with the pairs (1,000 nodes: about 1 MB, not 180 MB). `peers`: keep the lists as well
    (--json-peers)."""
    rows = []
    for row in res["privacy"]:
        out = {k: v for k, v in row.items() if k not in PAIR_LISTS or peers}
        for key in PAIR_LISTS:
            if key in row:
                name = "peer" if key == "peers" else key
                out[f"worst_{name}"] = worst_of(row[key])
                out[f"{key}_summary"] = peer_summary(row[key])
        rows.append(out)
    return {**res, "privacy": rows, "privacy_pairs": "listed" if peers else "summarised"}


def write_peers(path: Path, res: Mapping[str, Any]) -> None:
    """Every node's loss towards every peer (--peers-out), by the file name's suffix:

    - `.npz` (numpy, `np.load(path)`, no pickle): `nodes` (n ids: the rows and columns),
      `epsilon` and `delta` (n x n float64; [i, j] is node i's loss towards node j, NaN where none,
      e.g. the diagonal), `method` (n x n int32, an index into `methods`, -1 where none),
      `methods`; for gossip also `incoming_epsilon`, `incoming_delta`, `incoming_method` (what node
      i learnt about node j, from its own view); `job_id`, `algorithm`. Compressed: a few MB at
      1,000 nodes.
    - `.csv`: a header, then one line per pair: node, peer, direction (out: the node's loss
      towards the peer; in: gossip, what it learnt about the peer), epsilon, delta, method.

    Written to a temporary file renamed into place (never half a file under the name)."""
    rows = res["privacy"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if path.suffix == ".csv":
            with tmp.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["node", "peer", "direction", "epsilon", "delta", "method"])
                for row in rows:
                    for key, direction in PAIR_LISTS.items():
                        for p in row.get(key) or ():
                            w.writerow(
                                [
                                    row["node"],
                                    p["peer"],
                                    direction,
                                    repr(float(p["epsilon"])),
                                    repr(float(p["delta"])),
                                    p["method"],
                                ]
                            )
        else:
            nodes = [row["node"] for row in rows]
            index = {nid: i for i, nid in enumerate(nodes)}
            methods: dict[str, int] = {}
            arrays: dict[str, np.ndarray] = {
                "nodes": np.array(nodes, dtype=str),
                "job_id": np.array(res["job_id"], dtype=str),
                "algorithm": np.array(res["algorithm"], dtype=str),
            }
            for key in PAIR_LISTS:
                if not any(key in row for row in rows):
                    continue
                n = len(nodes)
                eps = np.full((n, n), np.nan)
                delta = np.full((n, n), np.nan)
                how = np.full((n, n), -1, dtype=np.int32)
                for i, row in enumerate(rows):
                    for p in row.get(key) or ():
                        j = index[p["peer"]]
                        eps[i, j], delta[i, j] = p["epsilon"], p["delta"]
                        how[i, j] = methods.setdefault(str(p["method"]), len(methods))
                prefix = "" if key == "peers" else f"{key}_"
                arrays |= {
                    f"{prefix}epsilon": eps,
                    f"{prefix}delta": delta,
                    f"{prefix}method": how,
                }
            arrays["methods"] = np.array(list(methods), dtype=str)
            with tmp.open("wb") as f:
                np.savez_compressed(f, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


#: Seconds every process gets to stop after SIGTERM before it is SIGKILLed (it needs its
#: --shutdown-grace, 2 s, at most, plus its exit).
STOP_GRACE = 8.0


def run_demo(a: argparse.Namespace) -> int:
    check_args(a)
    if getattr(a, "planned", None) is not None:
        _say(a.planned[2])  # what --target-epsilon chose, before anything starts
    values = None
    if a.data:
        if not _hooks(a).demo_takes_values:
            raise ConfigError(
                f"{a.algorithm} reads the housing data (--data-dir) or makes synthetic data"
            )
        values = load_values(a.data)
        if values.size != a.nodes:
            raise ConfigError(
                f"{a.data} holds {values.size} values; --nodes is {a.nodes} (one value per node)"
            )
    keep = a.workdir is not None
    workdir = Path(a.workdir) if keep else Path(tempfile.mkdtemp(prefix="netdp-demo-"))
    if keep:
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            raise ConfigError(f"--workdir {workdir} is not empty")
    cluster = LocalCluster(workdir, a.nodes, log_level="info")
    code = 1
    try:
        res = asyncio.run(interruptible(_run(a, cluster, values)))
        code = 0
        peers_file = None
        if a.peers_out:
            try:
                write_peers(Path(a.peers_out), res)
                peers_file = str(Path(a.peers_out))
            except OSError as e:  # the result is printed all the same
                _say(f"netdp demo: cannot write --peers-out {a.peers_out}: {e}")
                code = 1
        if a.json:
            out = json_result(res, peers=a.json_peers)
            print(json.dumps({**out, "peers_file": peers_file}, indent=2))
        else:
            print(render(res))
        if peers_file:
            _say(f"every node's loss towards every peer: {peers_file}")
    except TimeoutError as e:
        _say(f"netdp demo: timeout: {e}")
        code = 5
    except RuntimeError as e:
        _say(f"netdp demo: {e}")
        code = 1
    finally:
        # a host process stops its nodes together (each: server grace, links, ledger): more time
        most = max((len(cluster.hosted(h)) for h in set(cluster.host_of.values())), default=1)
        grace = STOP_GRACE + 0.15 * most
        codes = cluster.stop(grace=grace)
        killed = sorted(k for k, v in codes.items() if v == -signal.SIGKILL)
        if killed:  # a healthy process stops well within the grace: never expected
            _say(
                f"warning: {', '.join(killed)} did not stop within {grace:g} s of SIGTERM "
                f"and had to be killed (SIGKILL); see {workdir / 'logs'}"
            )
            keep = True
        bad = {k: v for k, v in codes.items() if v not in (0, None) and k not in killed}
        if bad:
            _say(f"processes that did not exit cleanly: {bad}")
        _say(f"stopped {len(codes)} processes")
        if code != 0:
            _say(f"logs are in {workdir / 'logs'}")
        if not keep and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return code
