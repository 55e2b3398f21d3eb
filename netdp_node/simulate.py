"""`netdp simulate`: a job over thousands of nodes in one process, run by the daemon's runtime.

Every simulated node is a `NodeRuntime` (netdp_node.runtime), the object the daemon runs: the same
receipt checks (participant, payload shape, exact duplicate or conflict, job over), the same
staging of each step in the ledger's group commit, the same effects after durability (sends,
timers, output, Keep/Drop custody copies, Flush), the same refusals and the same fault injection
(`NodeRuntime.faults`, built from the daemon's --fault-* flags). The nodes talk over the in-memory
transport (`MemoryNetwork`, with a latency and the fault plans acting on the wire), and the whole
run is asyncio on a VIRTUAL clock (`netdp_node.vclock`): the event queue is asyncio's own, its clock
jumps to the next timer instead of sleeping, so a run is deterministic and takes no real sleep.
Each node has its own ledger: in memory (`MemoryLedger`: the Ledger's own group commit over
Python objects), or SQLite on request (`ledger_dir`, `netdp simulate --ledgers DIR`). Every node
has its own seeded generator (from `--seed` and its index), so a run is reproducible.

The public job context (participants, positions, graph) is built once and shared by every node's
engine (`JobContext.for_node`, `JobContext.shared`).

What it writes: `--trace FILE` (JSON lines, one per holding: t, holder, data) for
`netdp audit --trace`, and `--ledgers DIR` (one real SQLite ledger per node, written as the daemon
writes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from netdp_bootstrap.topology import build
from netdp_node.algorithms import ALGORITHMS, get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.algorithms.hooks import (
    GAIN_MIN,
    GAIN_SEARCH_MAX,
    SimRun,
    check_dropouts,
    gain_ratio,
)
from netdp_node.algorithms.ring import hooks as ring_hooks
from netdp_node.algorithms.walk.engine import HOLD_EVENTS
from netdp_node.errors import ConfigError
from netdp_node.faults import FaultInjector, FaultPlan, plan_from_flags
from netdp_node.ledger import Entry, Ledger
from netdp_node.memledger import MemoryLedger
from netdp_node.privacy.walk_audit import GLOBAL_KNOWLEDGE_NOTE, audit_walk
from netdp_node.progress import progress_bar
from netdp_node.protocols.base import Engine, JobContext, Message, Output
from netdp_node.runtime import NodeRuntime, _result_dict, spec_dict
from netdp_node.transport.base import DeliveryError
from netdp_node.transport.memory import MemoryBoard, MemoryNetwork, MemoryTransport
from netdp_node.vclock import run_virtual

RecordMode = Literal["full", "walk", "none"]

log = logging.getLogger("netdp.simulate")

#: Virtual seconds a simulation may run at most by default (every wait is bounded).
MAX_VIRTUAL_S = 1e6


@dataclass
class SimResult:
    algorithm: str
    n: int
    params: dict[str, Any]
    outputs: dict[str, Output]
    holders: list[int]  # index of the holder at every step, in order (the walk)
    data_steps: list[bool]  # whether that step carried data
    entries: dict[str, list[Entry]] = field(default_factory=dict)
    events: int = 0  # messages delivered
    virtual_time: float = 0.0
    wall_s: float = 0.0
    refused: int = 0  # sends that ended in a DeliveryError (refused, or given up on)
    states: dict[str, str] = field(default_factory=dict)  # node -> job state (done / failed)
    details: dict[str, str] = field(default_factory=dict)  # node -> why it failed, if it did

    @property
    def value(self) -> np.ndarray | None:
        out = next(iter(self.outputs.values()), None)
        return None if out is None else out.value


class _Engines(Mapping[str, Engine]):
    """node -> its engine of the simulated job (as the runtime holds it)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def __getitem__(self, nid: str) -> Engine:
        return self.sim.runtimes[nid].jobs[self.sim.job_id].engine

    def __iter__(self) -> Any:
        return iter(self.sim.ids)

    def __len__(self) -> int:
        return len(self.sim.ids)


class _Dropout(FaultInjector):
    """A node's fault injector with the simulator's `down(node, now)` hook on top of its plan:
    while `down` says so the node takes and sends no traffic, as an offline node (--fault-offline)
    does."""

    def __init__(self, sim: Simulator, nid: str, plan: FaultPlan) -> None:
        super().__init__(plan, clock=lambda: asyncio.get_running_loop().time())
        self.sim = sim
        self.nid = nid

    def blocked(self, peer: str) -> str | None:
        if self.sim.down is not None:
            try:
                down = self.sim.down(self.nid, self.clock())
            except KeyError:  # (the hook reads an engine that does not exist yet)
                down = False
            if down:
                return "down (simulated dropout)"
        return super().blocked(peer)


class _SimTransport(MemoryTransport):
    """The in-memory transport, counting what the simulation reports (deliveries, refusals) and
    the sends under way (the run ends when none is left)."""

    def __init__(self, sim: Simulator, network: MemoryNetwork, me: str) -> None:
        super().__init__(network, me)
        self.sim = sim

    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        self.sim._inflight += 1
        try:
            return await super().send(to, job_id, msg)
        except DeliveryError:
            self.sim.result.refused += 1
            raise
        finally:
            self.sim._inflight -= 1
            self.sim.result.events += 1
            if not self.sim._inflight and self.sim._idle is not None:
                self.sim._idle.set()


@contextlib.contextmanager
def simulation_collector(*, exits_after: bool = False) -> Iterator[None]:
    """The cyclic garbage collector is off while a simulation and its report run. A simulation
    allocates millions of objects that live to its end (engines, ledger entries, duplicate
    indexes) and next to no garbage cycles (none of any size in Muffliato, muffliato-random, IncA,
    walk-sum, ring-sum or rw-sgd runs, with faults too: the same peak memory without the
    collector), so every pass of the collector was wasted work: its young collections alone took
    a quarter of the CPU of Muffliato at n = 1024 (with the default thresholds about 40 % at
    n = 256). Its previous state is restored on the way out, and what the run left is collected
    then. With `exits_after` (the command line: the process exits once the report is out) it is
    frozen instead (`gc.freeze`, as `cli._run_daemon` does): the process frees it, not one last
    pass of the collector over all of it (seconds at n = 2048)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if exits_after:
            gc.freeze()
        if enabled:
            gc.enable()


_NODE_PREFIX = re.compile(r"^\[node=([^\] ]+)(?: job=[^\]]*)?\] ")


class NodeLogSummary(logging.Handler):
    """The simulated nodes' log lines (warning and above), one line per kind with how many nodes
    said it, instead of one line per node: a warning every node logs is thousands of lines at
    n = 2048. A kind is the message's template (before its arguments) without its "[node=...
    job=...]" prefix; the line shows the first node's message in full."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        # message template -> [level, nodes that said it, times, first node, its text]
        self.kinds: dict[str, list[Any]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        template = _NODE_PREFIX.sub("", str(record.msg), count=1)
        text = record.getMessage()
        m = _NODE_PREFIX.match(text)
        node = m.group(1) if m else ""
        kind = self.kinds.get(template)
        if kind is None:
            text = text[m.end() :] if m else text
            self.kinds[template] = [record.levelname.lower(), {node}, 1, node, text]
        else:
            kind[1].add(node)
            kind[2] += 1

    def lines(self) -> list[str]:
        out = []
        for level, nodes, times, first, text in self.kinds.values():
            who = f"{len(nodes)} node(s)" if first else "the simulator"
            again = f", {times} times" if times > len(nodes) else ""
            eg = f" (e.g. {first})" if first and times > 1 else f" ({first})" if first else ""
            out.append(f"{level} from {who}{again}{eg}: {text}")
        return out


@contextlib.contextmanager
def summarised_node_logs(stream: Any = None) -> Iterator[NodeLogSummary]:
    """While a simulation runs, the nodes' log lines are summarised (`NodeLogSummary`) and printed
    to `stream` (stderr) once it is over."""
    logger = logging.getLogger("netdp")
    handler = NodeLogSummary()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        for line in handler.lines():
            print(line, file=stream or sys.stderr)


class Simulator:
    """Runs one job of `algorithm` over participants `ids` with per-node `data`, every node a
    `NodeRuntime` (see the module docstring)."""

    def __init__(
        self,
        algorithm: str,
        ids: Sequence[str],
        params: Mapping[str, Any],
        data: Mapping[str, np.ndarray | None],
        *,
        seed: int = 0,
        public_seed: int = 0,
        latency: float = 0.001,
        record: RecordMode = "full",
        contribute: Mapping[str, bool] | None = None,
        job_id: str = "sim",
        down: Callable[[str, float], bool] | None = None,
        lose: Callable[[str, str, Message], str | None] | None = None,
        faults: Mapping[str, FaultPlan] | None = None,
        edges: Sequence[tuple[str, str]] = (),
        ledger_dir: str | Path | None = None,
        give_up_after: float = 10.0,
        retransmit_after: float = 0.5,
        job_deadline: float = 0.0,
        max_virtual_s: float = MAX_VIRTUAL_S,
        after: Callable[[Simulator], Awaitable[None]] | None = None,
    ) -> None:
        """`down(node, now)`: the node is unreachable at virtual time `now` (a dropout, as
        --fault-offline makes one: it neither takes nor sends traffic; its senders retry, then
        give up after `give_up_after` virtual seconds; its timers still fire). `lose(sender, to,
        msg)`: "msg" loses that attempt of the message, "ack" its acknowledgement; the sender sends
        it again after `retransmit_after` (see `MemoryNetwork`). `faults`: per-node fault plans
        (the daemon's --fault-* flags). `contribute[node] = False`: the node takes part without
        its data. `ledger_dir`: one SQLite ledger per node under it (default: in memory).
        `after(sim)`: a coroutine run in the simulation once the job ended everywhere (a test's
        extra traffic, e.g. through `sim.runtimes[node].transport`)."""
        self.down = down
        self.lose = lose
        self.algorithm = algorithm
        self.ids = list(ids)
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        self.params = dict(params)
        self.latency = latency
        self.record = record
        self.job_id = job_id
        self.seed = seed
        self.public_seed = public_seed
        self.data = data
        self.contribute = dict(contribute or {})
        self.faults = dict(faults or {})
        self.edges = [(str(a), str(b)) for a, b in edges]
        self.ledger_dir = None if ledger_dir is None else Path(ledger_dir)
        self.give_up_after = give_up_after
        self.retransmit_after = retransmit_after
        self.job_deadline = job_deadline
        self.max_virtual_s = max_virtual_s
        self.after = after
        get_algorithm(algorithm)  # (an unknown algorithm is refused here, naming the known ones)
        self.context = JobContext(
            job_id,
            algorithm,
            self.ids[0],
            tuple(self.ids),
            self.params,
            public_seed,
            tuple(self.edges),
        )
        self.runtimes: dict[str, Any] = {}
        self.engines = _Engines(self)
        self.now = 0.0
        self._inflight = 0  # sends under way
        self._idle: asyncio.Event | None = None  # set when no send is under way
        self.result = SimResult(algorithm, len(self.ids), self.params, {}, [], [])
        self._progress: Callable[[int, int], None] | None = None

    # -- the nodes -----------------------------------------------------------------------------
    def _observe(self, nid: str) -> Callable[[Entry], None] | None:
        i = self.index[nid]
        holders, data_steps = self.result.holders, self.result.data_steps
        expected = int(self.params.get("T", 0))

        def observe(e: Entry) -> None:
            if e.direction == "local" and e.event in HOLD_EVENTS:
                holders.append(i)
                data_steps.append(e.event == "contribute")
                if self._progress is not None and len(holders) % 4096 == 0:
                    self._progress(len(holders), expected)

        return observe

    def _build(self) -> MemoryNetwork:

        net = MemoryNetwork(
            give_up_after=self.give_up_after,
            retry_every=0.05,
            latency=self.latency,
            apply_faults=True,
            retransmit_after=self.retransmit_after,
            lose=self.lose,
            on_fault=self._on_fault,
        )
        loop = asyncio.get_running_loop()
        # the job's public bulletin (the bootstrap's, in a daemon): out of reach of a crashed or
        # offline node, as the bootstrap is
        self.board = MemoryBoard(unreachable=self._unreachable)
        self.board.add_job(self.job_id, self.ids)
        spec = json.loads(json.dumps(spec_dict(self.context), sort_keys=True))
        shared_specs = {self.job_id: spec}  # one copy of the public spec for every node
        shared_params: dict[int, tuple[Any, Any]] = {}  # shared entry parameters decoded once
        for i, nid in enumerate(self.ids):
            if self.ledger_dir is not None:
                ledger: Ledger = Ledger(self.ledger_dir / nid, nid)
            else:
                ledger = MemoryLedger(
                    nid,
                    clock=loop.time,
                    keep_entries=self.record == "full",
                    shared_specs=shared_specs,
                    shared_params=shared_params,
                )
            plan = self.faults.get(nid)
            injector = None
            if plan is not None or self.down is not None:
                injector = _Dropout(self, nid, plan or FaultPlan())
            data = self.data.get(nid)
            if not self.contribute.get(nid, True):
                data = None  # takes part, adds noise only (as a node with no --data)
            rt = NodeRuntime(
                nid,
                ledger,
                _SimTransport(self, net, nid),
                data=data,
                rng_factory=self._rng_factory(i),
                faults=injector,
                crash=self._crasher(nid),
                job_deadline=self.job_deadline,
                bulletin=self.board.bulletin(nid),
            )
            self.runtimes[nid] = rt
            net.nodes[nid] = rt
        return net

    def _unreachable(self, nid: str) -> str | None:
        if nid not in self._network.nodes:
            return "crashed"
        faults = self.runtimes[nid].faults
        return None if faults is None else faults.blocked("bootstrap")

    def _on_fault(self, nid: str, kind: str, peer: str, job_id: str) -> None:
        """An injected fault on the wire, recorded in the node's ledger as the daemon records it
        (`NodeDaemon._record_fault`)."""
        self.runtimes[nid].ledger.commit(
            [
                Entry(
                    job_id=job_id,
                    direction="local",
                    event="fault",
                    peer=peer,
                    params={"fault": kind},
                )
            ]
        )

    def _rng_factory(self, i: int) -> Callable[[str], np.random.Generator]:
        """Node i's RNG for every job: seeded from the simulation's seed (reproducible runs)."""

        def make(job: str) -> np.random.Generator:
            return np.random.default_rng([self.seed, i])

        return make

    def _crasher(self, nid: str) -> Callable[[str], None]:
        def crash(reason: str) -> None:
            self._crash(nid)

        return crash

    def _crash(self, nid: str) -> None:
        """--fault-crash-at-step: the node stops, as a machine losing power (its ledger stays)."""
        rt = self.runtimes[nid]
        self._network.nodes.pop(nid, None)  # unreachable from now on
        for runner in rt.jobs.values():
            for t in list(runner._tasks):
                t.cancel()

    # -- the run --------------------------------------------------------------------------------
    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._network = self._build()
        if self.record != "none":
            for nid, rt in self.runtimes.items():
                rt.ledger.observe = (
                    self._observe(nid) if isinstance(rt.ledger, MemoryLedger) else None
                )
        # every node joins; the starter (the first participant of a walk) last, as in the harness
        for nid in reversed(self.ids):
            try:
                await self.runtimes[nid].add_job(self.context.for_node(nid))
            except Exception as e:  # noqa: BLE001 - e.g. a node that left at its first step
                log.warning(
                    "[node=%s job=%s] did not join the simulated job: %s", nid, self.job_id, e
                )
        limit = loop.time() + self.max_virtual_s
        runners = [rt.jobs[self.job_id] for rt in self.runtimes.values() if self.job_id in rt.jobs]
        waits = [asyncio.ensure_future(r.finished.wait()) for r in runners]
        try:
            await asyncio.wait(waits, timeout=max(0.0, limit - loop.time()))
        finally:
            for w in waits:
                w.cancel()
        # the last sends of a finished job (releases, handoffs, schedules) are delivered or
        # given up on (each within give_up_after of its last attempt)
        if self._inflight:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), timeout=max(0.0, limit - loop.time()))
            except asyncio.TimeoutError:
                pass
        # every node has finished or stopped: nothing more is published; the readers of the
        # bulletin take what it holds and stop
        published = [
            f for rt in self.runtimes.values() for r in rt.jobs.values() for f in r.publications
        ]
        if published:
            await asyncio.wait(published, timeout=max(0.0, limit - loop.time()))
        self.board.close(self.job_id)
        readers = [
            t for rt in self.runtimes.values() for r in rt.jobs.values() for t in r.bulletin_tasks
        ]
        if readers:
            await asyncio.wait(readers, timeout=max(0.0, limit - loop.time()))
        if self.after is not None:
            await self.after(self)
        for rt in self.runtimes.values():
            rt.ledger.flush()

    def run(
        self, *, max_events: int = 0, progress: Callable[[int, int], None] | None = None
    ) -> SimResult:
        """Run the job to its end everywhere (or `max_virtual_s`); `max_events` is ignored (kept
        for callers of the previous simulator)."""
        t0 = time.perf_counter()
        self._progress = progress
        with simulation_collector():
            _, self.now = run_virtual(self._main())
        res = self.result
        for nid, rt in self.runtimes.items():
            runner = rt.jobs.get(self.job_id)
            if runner is None:
                res.states[nid] = "failed"
                res.details[nid] = "never joined (left at its first step)"
                continue
            res.states[nid] = runner.state
            if runner.detail:
                res.details[nid] = runner.detail
            if runner.output is not None:
                res.outputs[nid] = runner.output
            if self.record == "full":
                res.entries[nid] = rt.ledger.entries(self.job_id)
        if self.ledger_dir is not None and self.record != "none":
            self._holders_from_entries(res)
        for rt in self.runtimes.values():
            if self.ledger_dir is not None:
                rt.ledger.close()
        if progress is not None:
            progress(len(res.holders), int(self.params.get("T", 0)))
        res.virtual_time = self.now
        res.wall_s = time.perf_counter() - t0
        return res

    def _holders_from_entries(self, res: SimResult) -> None:
        """The walk from SQLite ledgers: their hold entries in time order (the step counter first,
        when the walk records it)."""
        seen: list[tuple[float, float, int, int, bool]] = []
        for nid, rt in self.runtimes.items():
            for e in rt.ledger.entries(self.job_id, events=HOLD_EVENTS):
                seen.append(
                    (
                        float(e.params.get("t", 0)),
                        e.ts,
                        e.id,
                        self.index[nid],
                        e.event == "contribute",
                    )
                )
        seen.sort()
        res.holders[:] = [h for _, _, _, h, _ in seen]
        res.data_steps[:] = [d for _, _, _, _, d in seen]


# -- inputs and outputs ------------------------------------------------------------------------------
def synthetic_data(
    algorithm: str,
    ids: Sequence[str],
    params: Mapping[str, Any],
    seed: int,
    points_per_node: int = 8,
    data_dir: str | None = None,
) -> tuple[dict[str, np.ndarray], Any]:
    """Per-node data for a simulation: values in [0, clip] (sums), categories (histograms), or
    logistic-regression rows (SGD: the housing data when found, else synthetic; returns the split
    too, for test accuracy)."""
    return get_algorithm(algorithm).hooks.synthetic_data(
        ids, params, seed, points_per_node, data_dir
    )


def dropout_plans(
    algorithm: str,
    ids: Sequence[str],
    params: Mapping[str, Any],
    leave: float,
    miss: float,
    seed: int,
) -> dict[str, FaultPlan]:
    """Fault plans for `netdp simulate --leave/--miss`, made of the daemon's fault flags.

    The algorithm's own flags when its hooks have them (`Hooks.dropout_flags`; inca: those `netdp
    demo --algorithm inca --leave --miss` gives its node processes). Other algorithms:
    round(leave·n) nodes leave for good (--fault-leave-at-step) at their first or second step;
    --miss is for inca."""

    check_dropouts(leave, miss)
    flags = get_algorithm(algorithm).hooks.dropout_flags(ids, params, leave, miss, seed)
    if flags is not None:
        return {nid: plan_from_flags(f) for nid, f in flags.items()}
    if miss:
        raise ConfigError(
            "--miss is for --algorithm inca (use --fault NODE:--fault-offline "
            "START:DURATION for the others)"
        )
    rng = np.random.default_rng([seed, 13])
    order = rng.permutation(len(ids))
    nl = int(round(leave * len(ids)))
    return {
        ids[int(i)]: plan_from_flags(["--fault-leave-at-step", str(rng.integers(1, 3))])
        for i in order[:nl]
    }


def parse_node_faults(specs: Sequence[str], ids: Sequence[str]) -> dict[str, FaultPlan]:
    """`--fault NODE:FLAGS` (repeatable): the daemon's --fault-* flags for one simulated node,
    e.g. `--fault "node-3:--fault-offline 0.5:2 --fault-drop 0.1"`."""

    out: dict[str, FaultPlan] = {}
    known = set(ids)
    for spec in specs:
        nid, sep, flags = spec.partition(":")
        nid = nid.strip()
        if not sep or nid not in known:
            raise ConfigError(
                f"--fault takes NODE:FLAGS with NODE one of the simulated nodes "
                f"({ids[0]}..{ids[-1]}), got {spec!r}"
            )
        out[nid] = plan_from_flags(flags.split())
    return out


def write_trace(res: SimResult, ids: Sequence[str], path: str | Path) -> None:
    """JSON lines: a header, then one line per holding (the walk, for `netdp audit --trace`)."""
    with open(path, "w") as f:
        f.write(
            json.dumps(
                {
                    "algorithm": res.algorithm,
                    "n": res.n,
                    "participants": list(ids),
                    "params": res.params,
                }
            )
            + "\n"
        )
        for t, (h, d) in enumerate(zip(res.holders, res.data_steps), start=1):
            f.write(json.dumps({"t": t, "holder": h, "data": d}) + "\n")


def read_trace(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    with open(path) as f:
        header = json.loads(f.readline())
        holders = [json.loads(line)["holder"] for line in f if line.strip()]
    return header, np.asarray(holders, dtype=np.int64)


def write_ledgers(res: SimResult, spec: Mapping[str, Any], root: str | Path) -> None:
    """One real ledger per node (as a daemon would have written it), for `netdp privacy report`
    and `netdp audit`."""
    for nid, entries in res.entries.items():
        led = Ledger(Path(root) / nid, nid)
        try:
            led.begin_job(spec["job_id"], spec["algorithm"], dict(spec), True)
            out = res.outputs.get(nid)
            update = None
            if out is not None:
                update = {"job_id": spec["job_id"], "state": "done", "result": _result_dict(out)}
            led.commit(entries, job_update=update)
        finally:
            led.close()


def walk_audit_dict(
    holders: np.ndarray,
    n: int,
    algorithm: str,
    params: Mapping[str, Any],
    paper_compatible: bool = False,
) -> dict[str, Any]:
    """The walk-conditional audit (Cyffers & Bellet, AISTATS 2022, §5.1) of one walk, as a
    JSON-friendly summary."""

    mode = get_algorithm(algorithm).hooks.walk_audit
    if mode is None:
        covered = [k for k, v in ALGORITHMS.items() if v.hooks.walk_audit]
        raise ValueError(
            f"the walk-conditional audit covers {' and '.join(covered)}, not {algorithm}"
        )
    a = audit_walk(
        holders,
        n,
        float(params["epsilon0"]),
        float(params["delta"]),
        mode=mode,
        paper_compatible=paper_compatible,
    )
    return {
        "algorithm": algorithm,
        "n": n,
        "T": int(len(holders)),
        "mode": mode,
        "paper_compatible": paper_compatible,
        "epsilon0": float(params["epsilon0"]),
        "delta": float(params["delta"]),
        "ndp_mean": a.ndp_mean,
        "ndp_min": a.ndp_min,
        "ndp_max": a.ndp_max,
        "ldp_mean": a.ldp_mean,
        "ldp_min": a.ldp_min,
        "ldp_max": a.ldp_max,
        "note": GLOBAL_KNOWLEDGE_NOTE,
    }


def node_privacy(res: SimResult, ids: Sequence[str], spec: Mapping[str, Any]) -> dict[str, Any]:
    """Every node's own accountant on its simulated view: worst and mean ε over nodes (worst peer),
    and the method. With record="walk" the view is rebuilt from the node's contribution count, the
    only part of it the walk accountants read."""

    counts = (
        np.bincount(
            np.asarray(res.holders, dtype=np.int64)[np.asarray(res.data_steps, dtype=bool)],
            minlength=len(ids),
        )
        if res.holders
        else np.zeros(len(ids), dtype=int)
    )
    cache: dict[int, Any] = {}
    worst: list[float] = []
    method = ""
    for i, nid in enumerate(ids):
        if res.entries:
            entries = res.entries[nid]
            key = None
        else:
            key = int(counts[i])
            entries = [Entry(job_id=spec["job_id"], direction="local", event="contribute")] * key
        if key is not None and key in cache:
            loss = cache[key]
        else:
            losses = per_job_losses(JobView(spec["job_id"], spec, entries), nid)
            loss = max(losses.values(), key=lambda x: x.epsilon)
            if key is not None:
                cache[key] = loss
        worst.append(loss.epsilon)
        if loss.method != "no-contribution":
            method = loss.method
    return {
        "epsilon_max": float(np.max(worst)),
        "epsilon_mean": float(np.mean(worst)),
        "method": method,
        "contributions_max": int(counts.max()),
        "contributions_mean": float(counts.mean()),
    }


def run_simulation(a: Any, *, exits_after: bool = False) -> int:
    """`netdp simulate` (see the CLI help), with the collector of a run (`simulation_collector`)
    until its report is out: the accountants and the report read every node's ledger after the
    run. `exits_after`: the process exits once this returns (see `simulation_collector`)."""
    with simulation_collector(exits_after=exits_after):
        return _run_simulation(a)


def _run_simulation(a: Any) -> int:
    n = int(a.nodes)
    if not 3 <= n <= 100_000:
        raise ConfigError(f"--nodes must be between 3 and 100000, not {n}")
    ids = [f"node-{i}" for i in range(1, n + 1)]
    try:
        hooks = get_algorithm(a.algorithm).hooks
        given = {
            **hooks.sim_param_defaults(getattr(a, "leave", 0.0), getattr(a, "miss", 0.0)),
            **dict(a.param or []),
        }
        params = get_algorithm(a.algorithm).validate(given, n)
    except ValueError as e:
        # the parameter first; `--param` when that is where it was given
        text = str(e)
        flag = "--param " if text.split(" ", 1)[0] in dict(a.param or []) else ""
        raise ConfigError(flag + text) from e
    data, split = synthetic_data(a.algorithm, ids, params, a.seed, a.points, a.data_dir)
    record: RecordMode = a.record or ("full" if n <= 512 or a.ledgers else "walk")
    if hooks.sim_privacy_skipped(n) is not None and not hooks.outcome_reads_entries:
        if not a.ledgers:  # nothing reads the views (no accountant at this n, nor the outcome)
            record = a.record or "walk"
    elif not hooks.counts_suffice:
        record = "full"  # their accountants read more than the contributions (rounds, schedules)
    if a.ledgers and record != "full":
        raise ConfigError("--ledgers needs --record full")
    edges: list[tuple[str, str]] = []
    if hooks.uses_edges(params):
        kind = getattr(a, "topology", None) or get_algorithm(a.algorithm).topology
        try:
            edges = [(str(u), str(v)) for u, v in build(kind, ids, seed=a.seed).edges]
        except ValueError as e:
            raise ConfigError(f"--topology: {e}") from e
    faults = dropout_plans(
        a.algorithm, ids, params, getattr(a, "leave", 0.0), getattr(a, "miss", 0.0), a.seed
    )
    faults.update(parse_node_faults(getattr(a, "fault", None) or [], ids))
    sim = Simulator(
        a.algorithm,
        ids,
        params,
        data,
        seed=a.seed,
        public_seed=a.seed,
        record=record,
        faults=faults,
        edges=edges,
        ledger_dir=a.ledgers or None,
        job_deadline=float(params.get("deadline_s", 0.0) or 0.0),
    )
    shown = not (a.quiet or a.json)
    if shown:
        print(f"simulating {a.algorithm} over {n} nodes (seed {a.seed})", file=sys.stderr)
    with summarised_node_logs(), progress_bar("simulating", unit="steps", enabled=shown) as bar:
        res = sim.run(progress=bar.update if shown else None)
    failed = {nid: res.details.get(nid, "") for nid, st in res.states.items() if st != "done"}
    if len(res.outputs) + len(faults) < n or not res.outputs:
        why = "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:3])
        raise RuntimeError(
            f"the simulated job did not finish ({len(res.outputs)}/{n} outputs"
            f"{'; ' + why if why else ''})"
        )
    spec = {
        "job_id": "sim",
        "algorithm": a.algorithm,
        "participants": ids,
        "params": params,
        "public_seed": a.seed,
        "edges": [list(e) for e in edges],
    }
    out: dict[str, Any] = {
        "algorithm": a.algorithm,
        "nodes": n,
        "seed": a.seed,
        "steps": len(res.holders),
        "data_steps": int(np.sum(res.data_steps)),
        "events": res.events,
        "virtual_time_s": res.virtual_time,
        "wall_s": res.wall_s,
        "params": {k: v for k, v in params.items()},
    }
    skipped = hooks.sim_privacy_skipped(n)
    out["privacy"] = {"note": skipped} if skipped else node_privacy(res, ids, spec)
    counts = np.bincount(
        np.asarray(res.holders, dtype=np.int64)[np.asarray(res.data_steps, dtype=bool)],
        minlength=n,
    )
    run = SimRun(
        ids=ids,
        params=params,
        spec=spec,
        data=data,
        split=split,
        outputs=res.outputs,
        counts=counts,
        steps=len(res.holders),
        entries=res.entries,
    )
    out.update(hooks.sim_outcome(run))
    if failed:
        out["failed"] = failed
    if a.audit:
        out["audit"] = walk_audit_dict(np.asarray(res.holders), n, a.algorithm, params)
    if a.trace:
        write_trace(res, ids, a.trace)
        out["trace"] = a.trace
    if a.ledgers:  # the nodes ran on SQLite ledgers there (Simulator ledger_dir)
        out["ledgers"] = a.ledgers
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(render_simulation(out))
    return 0


def recorded_noise_std(res: SimResult, ids: Sequence[str]) -> float:
    """The std of all the noise the nodes' ledgers say they added (√ of the sum of the recorded
    σ² of every step): read from the ledgers, not from the engines."""
    return ring_hooks.recorded_noise_std(res.entries, ids)


def _gain_lines(o: Mapping[str, Any]) -> list[str]:
    """netdp's noise std beside local DP's for the same per-peer guarantee (the algorithm's
    `sim_outcome`: "ldp_std"), and where netdp does not gain, from what n it would."""
    if "ldp_std" not in o or "noise_std" not in o:
        return []
    net, ldp = float(o["noise_std"]), float(o["ldp_std"])
    ratio = gain_ratio(ldp, net)
    lines = [
        f"  noise std of {o.get('std_of', 'the sum')}: netdp {net:.4g}  vs  local DP {ldp:.4g} "
        f"for the same per-peer guarantee ({ratio:.2f}x"
        + (" less noise)" if ratio >= GAIN_MIN else ", no real gain)")
    ]
    if "estimate" in o and o.get("estimate") is not None and "truth" in o and net > 0:
        err = float(np.max(np.abs(np.asarray(o["estimate"]) - np.asarray(o["truth"]))))
        lines[-1] += f"; |error| {err:.4g} = {err / net:.2f} netdp std"
    if o.get("gain_note"):
        lines.append("  " + o["gain_note"])
    elif ratio < GAIN_MIN and "gain_starts_at" in o:
        at = o["gain_starts_at"]
        lines.append(
            f"  no gain over local DP at n = {o['nodes']}"
            + (
                f": it gains from n ≈ {at} (try --nodes {at})"
                if at is not None
                else f" (none up to n = {GAIN_SEARCH_MAX})"
            )
        )
    return lines


def render_simulation(o: dict[str, Any]) -> str:
    p = o["params"]
    lines = [
        f"{o['algorithm']} over {o['nodes']} simulated nodes: {o['steps']} steps "
        f"({o['data_steps']} with data), {o['events']} events, {o['wall_s']:.2f} s"
    ]
    if "estimate" in o:
        lines.append(
            f"  estimate {np.round(o['estimate'], 4).tolist()}  truth "
            f"{np.round(o['truth'], 4).tolist()}"
        )
    if o.get("estimate_note"):
        lines.append("  " + o["estimate_note"])
    if "error_max" in o:
        lines.append(
            f"  per-node error against the true mean: max {o['error_max']:.4g}, mean "
            f"{o['error_mean']:.4g} (std of the mean of the noise σ/√n = "
            f"{o['noise_std']:.4g})"
        )
    elif "noise_std" in o and "sigma" in p and "ldp_std" not in o:
        lines.append(f"  noise std of the sum {o['noise_std']:.4g} (σ={p['sigma']:.4g} per step)")
    lines += _gain_lines(o)
    if "central_dp_std" in o and o.get("estimate") is not None:
        lines.append(
            f"  finals {o['final']}/{o['nodes']} (missing {o['missing']}), lost messages "
            f"{o['lost_messages']}; |error| {o['abs_error']:.4g} vs central-DP std "
            f"{o['central_dp_std']:.4g} at the target ε; std from η "
            f"{o['inca_std_eta']:.4g}, from uncancelled Δ "
            f"{o['uncancelled_noise_std']:.4g}"
        )
    if "test_accuracy" in o:
        lines.append(f"  test accuracy {o['test_accuracy']:.4f} on {o['data']}")
    pv = o["privacy"]
    target = (
        f"target ε={p['epsilon']:g}"
        if "epsilon" in p
        else f"σ={p['sigma']:g}"
        if "sigma" in p
        else f"ε0={p.get('epsilon0', 0):g}"
    )
    lines.append(
        f"  each node's accountant ({target}): worst ε="
        f"{pv['epsilon_max']:.4g}, mean ε={pv['epsilon_mean']:.4g} ({pv['method']}); "
        f"contributions per node: max {pv['contributions_max']}, mean "
        f"{pv['contributions_mean']:.2f}"
    )
    if "audit" in o:
        au = o["audit"]
        lines.append(
            f"  walk-conditional audit (global knowledge): network DP mean ε="
            f"{au['ndp_mean']:.4g} (max {au['ndp_max']:.4g}) vs local DP mean ε="
            f"{au['ldp_mean']:.4g}"
        )
    for k in ("trace", "ledgers"):
        if k in o:
            lines.append(f"  {k} written to {o[k]}")
    return "\n".join(lines)
