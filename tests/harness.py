"""In-process networks of NodeRuntimes over either transport, for engine tests.

`memory`: the in-memory transport. `grpc`: every node gets its own certificate and a real grpc.aio
mTLS server on 127.0.0.1, and messages cross TLS. The same test body runs over both.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc.aio
import numpy as np

from netdp_bootstrap.server import BootstrapConfig, run_bootstrap
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.errors import LedgerError
from netdp_node.faults import FaultInjector, FaultPlan
from netdp_node.ledger import JobRow, Ledger
from netdp_node.protocols.base import JobContext
from netdp_node.runtime import Budget, NodeRuntime
from netdp_node.security import pki
from netdp_node.security.mtls import AccessPolicy, start_server
from netdp_node.transport.grpc import GrpcTransport, PeerService
from netdp_node.transport.memory import MemoryBoard, MemoryNetwork
from netdp_node.waiting import Probe, await_progress, probes, tree_size

TRANSPORTS = ("memory", "grpc")
#: Hard bound of a job wait in these in-process tests (pytest-timeout is 120 s for unit tests).
HARD_LIMIT = 100.0


@dataclass
class Net:
    kind: str
    ids: list[str]
    root: Path
    nodes: dict[str, NodeRuntime] = field(default_factory=dict)
    servers: list[grpc.aio.Server] = field(default_factory=list)
    identities: dict[str, pki.Identity] = field(default_factory=dict)
    memory: MemoryNetwork | None = None
    crashed: list[str] = field(default_factory=list)
    data: Mapping[str, np.ndarray | None] = field(default_factory=dict)
    #: the jobs' public bulletin (the bootstrap's in a deployment), in memory
    board: MemoryBoard = field(default_factory=MemoryBoard)

    def participants(self, job: str) -> tuple[str, ...] | None:
        """A job's participants, as some node of this network knows them (the bulletin's)."""
        for rt in self.nodes.values():
            if job in rt.jobs:
                return tuple(rt.jobs[job].ctx.participants)
        return None

    def ledger(self, nid: str) -> Ledger:
        return self.nodes[nid].ledger

    async def run_job(self, ctx_for: Mapping[str, JobContext], timeout: float = 20.0) -> None:
        # Join in reverse order so that the starter is last (the others are ready).
        for nid in reversed(self.ids):
            await self.nodes[nid].add_job(ctx_for[nid])
        job = next(iter(ctx_for.values())).job_id
        await self.wait_done(job, self.ids, timeout)

    def progress(self) -> Probe:
        """Progress of the network: the size of every node's ledger (each step commits to it)."""
        return probes(*[lambda n=n: tree_size(self.root / n) for n in self.ids])

    async def wait_done(self, job: str, ids: Sequence[str], timeout: float = 20.0) -> None:
        """Until every node of `ids` finished `job`. TimeoutError when no ledger grew for `timeout`
        seconds, or after HARD_LIMIT in all (below pyproject's per-test timeout of 120 s): on a
        loaded machine a job takes longer, it does not fail."""

        async def finished() -> bool:
            return all(self.nodes[n].jobs[job].finished.is_set() for n in ids)

        await await_progress(
            finished,
            f"{list(ids)} to finish {job}",
            stall=timeout,
            limit=max(timeout, HARD_LIMIT),
            progress=self.progress(),
            interval=0.01,
        )

    async def restart(self, nid: str, ctx: JobContext, seed: int = 99) -> NodeRuntime:
        """Memory networks only: stop `nid` as a crash would (its tasks cancelled, nothing
        flushed beyond the ledger) and start a fresh runtime on the same ledger directory, which
        rejoins `ctx` the way the daemon does after a restart (resuming from its ledger)."""
        assert self.memory is not None
        old = self.nodes[nid]
        self.memory.nodes.pop(nid, None)
        await old.close()
        old.ledger.close()
        rt = NodeRuntime(
            nid,
            Ledger(self.root / nid, nid),
            self.memory.transport(nid),
            data=self.data.get(nid),
            rng_factory=lambda job: np.random.default_rng([seed, len(self.crashed)]),
            bulletin=self.board.bulletin(nid),
        )
        self.nodes[nid] = rt
        self.memory.nodes[nid] = rt
        await rt.add_job(ctx)
        return rt

    async def close(self) -> None:
        for rt in self.nodes.values():
            await rt.close()
            await rt.transport.close()
        for s in self.servers:
            await s.stop(0)
        for rt in self.nodes.values():
            rt.ledger.close()


async def make_net(
    kind: str,
    ids: Sequence[str],
    root: Path,
    *,
    data: Mapping[str, np.ndarray | None] | None = None,
    budgets: Mapping[str, Budget] | None = None,
    seed: int = 0,
    faults: Mapping[str, FaultPlan] | None = None,
    give_up_after: float = 10.0,
) -> Net:
    """`faults`: per-node fault plans (memory only); a crash marks the node in `net.crashed` and it
    then answers UNAVAILABLE, as a dead machine would, until `net.restart`."""
    net = Net(kind, list(ids), root)
    net.board.lookup = net.participants
    data = data or {}
    net.data = data
    budgets = budgets or {}
    faults = faults or {}

    def rng_factory(i: int) -> Any:
        return lambda job: np.random.default_rng([seed, i])

    if kind == "memory":
        mem = net.memory = MemoryNetwork(give_up_after=give_up_after)
        for i, nid in enumerate(ids):
            plan = faults.get(nid)
            rt = NodeRuntime(
                nid,
                Ledger(root / nid, nid),
                mem.transport(nid),
                data=data.get(nid),
                budget=budgets.get(nid),
                rng_factory=rng_factory(i),
                faults=None if plan is None else FaultInjector(plan, lambda: 0.0),
                crash=lambda reason, nid=nid: net.crashed.append(nid),
                bulletin=net.board.bulletin(nid),
            )
            mem.nodes[nid] = rt
            net.nodes[nid] = rt
        return net
    if kind != "grpc" or faults:
        raise ValueError(f"{kind} network (faults are for memory networks)")
    pki.init_ca(root / "pki")
    for nid in ids:
        pki.issue(root / "pki", nid, hosts=("127.0.0.1",))
        net.identities[nid] = pki.load_identity(root / "pki" / nid)
    addresses: dict[str, str] = {}
    for i, nid in enumerate(ids):
        ident = net.identities[nid]
        transport = GrpcTransport(ident)
        rt = NodeRuntime(
            nid,
            Ledger(root / nid, nid),
            transport,
            data=data.get(nid),
            budget=budgets.get(nid),
            rng_factory=rng_factory(i),
            bulletin=net.board.bulletin(nid),
        )
        service = PeerService(
            nid,
            rt.handle,
            lambda: None,
            AccessPolicy(),
            links=transport,  # type: ignore[arg-type]
        )
        server, port = await start_server(
            ident,
            "127.0.0.1:0",
            lambda s, svc=service: s.add_generic_rpc_handlers((svc.generic_handler(),)),
        )
        net.servers.append(server)
        addresses[nid] = f"127.0.0.1:{port}"
        net.nodes[nid] = rt
    for rt in net.nodes.values():
        assert isinstance(rt.transport, GrpcTransport)
        rt.transport.learn(addresses)
    return net


def contexts(
    job_id: str, algorithm: str, ids: Sequence[str], params: Mapping[str, Any], seed: int = 1
) -> dict[str, JobContext]:
    return {nid: JobContext(job_id, algorithm, nid, tuple(ids), dict(params), seed) for nid in ids}


class IntegersOnly:
    """A generator that hands out uniform integers and refuses every floating-point draw (normal,
    random, ...): what an engine or sampler that draws exactly may use."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)
        self.calls = 0  # draws handed out

    def integers(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._g.integers(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"asked the generator for {name!r}: floats are refused")


def ledger_job_row(ledger_dir: Path, job: str) -> JobRow | None:
    """A node process's ledger row for `job`, read from its files while it runs; None while the
    ledger or the job is not there yet."""
    try:
        led = Ledger.open_readonly(ledger_dir)
    except (LedgerError, sqlite3.Error):  # not created yet
        return None
    try:
        return led.job(job)
    finally:
        led.close()


def loopback_pki(root: Path, ids: Sequence[str]) -> Path:
    """A CA at `root` with an operator, a bootstrap and the nodes `ids`, servers on 127.0.0.1."""
    pki.init_ca(root)
    pki.issue(root, "operator", role="operator", hosts=())
    pki.issue(root, "bootstrap", role="bootstrap", hosts=("127.0.0.1",))
    for nid in ids:
        pki.issue(root, nid, hosts=("127.0.0.1",))
    return root


def published_schedules(entries: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The other participants' Muffliato schedules a node's ledger holds, by publisher, in the
    one-record-per-publisher form of the "schedule" records ({"missing": [...]} or
    {"activations": [...]}), whatever form the ledger holds them in: one "schedules" record per
    bulletin batch (a publisher named in `peers` and absent from the field published an empty
    schedule) or one "schedule" record per publisher. Which batch a publisher was read in
    depends on timing; what it published does not."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.direction != "local":
            continue
        if e.event == "schedules":
            field_ = "missing" if "missing" in e.params else "activations"
            for v in e.params["peers"]:
                assert v not in out, f"{v}'s schedule recorded twice"
                out[v] = {field_: [list(x) for x in e.params[field_].get(v, [])]}
        elif e.event == "schedule":
            assert e.peer not in out, f"{e.peer}'s schedule recorded twice"
            out[e.peer] = dict(e.params)
    return out


@dataclass
class Boot:
    """A bootstrap serving on loopback with an operator's and some nodes' clients."""

    address: str
    pki_dir: Path
    operator: BootstrapClient
    nodes: dict[str, BootstrapClient]

    def identity(self, name: str) -> pki.Identity:
        return pki.load_identity(self.pki_dir / name)


@asynccontextmanager
async def registered_bootstrap(tmp_path: Path, node_ids: Sequence[str]) -> AsyncIterator[Boot]:
    """A real bootstrap (mTLS, its own state folder) with `node_ids` registered at addresses where
    nobody listens (jobs submitted to them never run); stopped, clients closed, on exit."""
    d = tmp_path / "pki"
    pki.init_ca(d)
    pki.issue(d, "bootstrap", role="bootstrap", hosts=("127.0.0.1",))
    pki.issue(d, "operator", role="operator", hosts=())
    for nid in node_ids:
        pki.issue(d, nid, hosts=("127.0.0.1",))
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    server = asyncio.ensure_future(
        run_bootstrap(
            BootstrapConfig(certs=d / "bootstrap", state=tmp_path / "state", listen="127.0.0.1:0"),
            ready=ready,
            stop=stop,
        )
    )
    port = await asyncio.wait_for(asyncio.shield(ready), 20)
    address = f"127.0.0.1:{port}"
    op = BootstrapClient(address, pki.load_identity(d / "operator"))
    nodes = {nid: BootstrapClient(address, pki.load_identity(d / nid)) for nid in node_ids}
    try:
        for i, (nid, c) in enumerate(nodes.items()):
            await c.register(nid, f"127.0.0.1:{7700 + i}")
        yield Boot(address, d, op, nodes)
    finally:
        for c in [op, *nodes.values()]:
            await c.close()
        stop.set()
        await asyncio.wait_for(server, 20)
