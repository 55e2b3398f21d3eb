"""In-process transport: every node's runtime lives in one event loop (tests, small simulations).

It goes through exactly the same runtime entry point (`NodeRuntime.handle`) as the gRPC servicer,
including validation, ledger writes and refusals, only without sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from netdp_node.errors import NodeUnavailable, UnknownJob
from netdp_node.faults import FaultInjector
from netdp_node.protocols.base import Message, Refused
from netdp_node.transport.base import Bulletin, DeliveryError, Receiver, Transport
from netdp_node.wire import WireError


class Node(Receiver, Protocol):
    """A node on the in-memory network: a `Receiver` with its fault plan (`NodeRuntime`)."""

    faults: FaultInjector | None


class MemoryNetwork:
    """The set of nodes reachable in-process, by id. A node missing from `nodes` (stopped, not yet
    restarted) or answering NodeUnavailable is retried every `retry_every` seconds for up to
    `give_up_after` seconds, as the gRPC links do; then the send fails with UNAVAILABLE.

    For the simulator (`netdp simulate`), all off by default:
    `latency`: seconds a message takes to arrive, and its acknowledgement to come back (the loop's
    seconds: virtual ones in the simulator).
    `apply_faults`: each node's fault plan (`NodeRuntime.faults`, the daemon's --fault-* flags)
    acts on the wire as over gRPC: a node that is offline, left or partitioned from the peer
    neither sends nor takes the message (UNAVAILABLE, retried); `--fault-delay-ms` delays it;
    `--fault-drop` loses it, and it is sent again `retransmit_after` seconds later; each drop is
    reported to `on_fault(kind, peer, job_id)` of the sending node's network entry.
    `lose(sender, to, msg)`: a test's hook, asked once per message: "msg" loses its first attempt
    (sent again after `retransmit_after`), "ack" delivers it and loses its acknowledgement (the
    sender sends it again; the receiver recognises the exact re-send), None delivers both."""

    def __init__(
        self,
        give_up_after: float = 10.0,
        retry_every: float = 0.05,
        *,
        latency: float = 0.0,
        apply_faults: bool = False,
        retransmit_after: float = 0.5,
        lose: Callable[[str, str, Message], str | None] | None = None,
        on_fault: Callable[[str, str, str, str], None] | None = None,
    ) -> None:
        self.nodes: dict[str, Node] = {}
        self.delivered = 0
        self.give_up_after = give_up_after
        self.retry_every = retry_every
        self.latency = latency
        self.apply_faults = apply_faults
        self.retransmit_after = retransmit_after
        self.lose = lose
        # on_fault(node, kind, peer, job_id): an injected fault on the wire (a dropped message)
        self.on_fault = on_fault

    def transport(self, me: str) -> MemoryTransport:
        return MemoryTransport(self, me)


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, me: str) -> None:
        self.network = network
        self.me = me
        self._locks: dict[str, asyncio.Lock] = {}

    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        net = self.network
        loop = asyncio.get_running_loop()
        give_up = loop.time() + net.give_up_after
        lock = self._locks.get(to)
        if lock is None:
            lock = self._locks[to] = asyncio.Lock()
        first = True
        async with lock:  # per-link ordering, as a stream gives it
            while True:
                await asyncio.sleep(0)
                node = net.nodes.get(to)
                lost = None
                try:
                    if net.apply_faults:
                        lost = await self._wire(to, job_id, msg, node, first)
                        first = False
                        if lost == "msg":
                            await asyncio.sleep(net.retransmit_after)
                            continue
                    elif net.latency:
                        await asyncio.sleep(net.latency)
                    node = net.nodes.get(to)
                    if node is None:
                        raise NodeUnavailable(f"no node {to!r} in this in-memory network")
                    dup = await node.handle(self.me, job_id, msg)
                    if lost == "ack":  # taken there; the sender never learns: it sends again
                        await asyncio.sleep(net.retransmit_after)
                        continue
                    if net.latency:
                        await asyncio.sleep(net.latency)
                    break
                except Refused as e:
                    raise DeliveryError(to, e.code.name, e.reason) from e
                except UnknownJob as e:
                    raise DeliveryError(to, "NOT_FOUND", str(e)) from e
                except WireError as e:
                    raise DeliveryError(to, "INVALID_ARGUMENT", str(e)) from e
                except NodeUnavailable as e:
                    if loop.time() >= give_up:
                        raise DeliveryError(to, "UNAVAILABLE", f"gave up on {to}: {e}") from e
                    await asyncio.sleep(net.retry_every)
        net.delivered += 1
        return dup

    async def _wire(
        self, to: str, job_id: str, msg: Message, node: Node | None, first: bool
    ) -> str | None:
        """One attempt on the wire under the fault plans (`MemoryNetwork.apply_faults`): raises
        NodeUnavailable when either end refuses traffic now, waits the delay and the latency;
        returns "msg" if the attempt is lost, "ack" if its acknowledgement will be."""
        net = self.network
        me = net.nodes.get(self.me)
        mine = None if me is None else me.faults
        if mine is not None:
            why = mine.blocked(to)
            if why:
                raise NodeUnavailable(f"{self.me} cannot reach {to}: {why}")
            delay = mine.delay_s()
            if delay:
                await asyncio.sleep(delay)
        if net.latency:
            await asyncio.sleep(net.latency)
        lost = None if net.lose is None or not first else net.lose(self.me, to, msg)
        if mine is not None and lost is None and mine.drop():
            if net.on_fault is not None:
                net.on_fault(self.me, "drop", to, job_id)
            lost = "msg"
        if lost == "msg":
            return lost
        theirs = None if node is None else node.faults
        if theirs is not None:
            why = theirs.blocked(self.me)
            if why:
                raise NodeUnavailable(f"{to} is unavailable: {why}")
        return lost


class MemoryBoard:
    """The bulletins of in-process nodes (simulator, tests), with the bootstrap's rules: one entry
    per (job, participant, kind), an identical re-publication accepted, another refused
    (FAILED_PRECONDITION), a non-participant refused (PERMISSION_DENIED), an unknown job NOT_FOUND.
    Entries are kept in publication order, so a run is deterministic. `close(job)`: nothing more
    will be published (the simulator, once every node finished or stopped): readers are told so."""

    def __init__(
        self,
        lookup: Callable[[str], Sequence[str] | None] | None = None,
        unreachable: Callable[[str], str | None] | None = None,
    ) -> None:
        """`lookup(job)`: the participants of a job not added with `add_job` (None: unknown).
        `unreachable(node)`: why `node` cannot reach the bulletin now (a crashed or offline node,
        in the simulator), or None: its calls fail with UNAVAILABLE, as a bootstrap out of reach."""
        self.lookup = lookup
        self.unreachable = unreachable
        #: how long a read woken by a new entry waits for more (the bootstrap's
        #: BULLETIN_COALESCE_S)
        self.coalesce = 0.2
        self.jobs: dict[str, frozenset[str]] = {}
        self.closed: set[str] = set()
        self._entries: dict[tuple[str, str], list[tuple[str, Message]]] = {}
        self._digests: dict[tuple[str, str, str], str] = {}
        self._news: dict[tuple[str, str], asyncio.Event] = {}

    def add_job(self, job_id: str, participants: Sequence[str]) -> None:
        self.jobs[job_id] = frozenset(participants)

    def close(self, job_id: str) -> None:
        self.closed.add(job_id)
        for (job, _), ev in self._news.items():
            if job == job_id:
                ev.set()

    def bulletin(self, me: str) -> MemoryBulletin:
        return MemoryBulletin(self, me)

    def _job(self, job_id: str, me: str) -> frozenset[str]:
        why = None if self.unreachable is None else self.unreachable(me)
        if why:
            raise DeliveryError("bulletin", "UNAVAILABLE", f"{me} cannot reach the bulletin: {why}")
        parts = self.jobs.get(job_id)
        if parts is None and self.lookup is not None:
            found = self.lookup(job_id)
            if found is not None:
                parts = self.jobs[job_id] = frozenset(found)
        if parts is None:
            raise DeliveryError("bulletin", "NOT_FOUND", f"no job {job_id!r} on the bulletin")
        if me not in parts:
            raise DeliveryError(
                "bulletin", "PERMISSION_DENIED", f"{me} is not a participant of job {job_id}"
            )
        return parts

    def publish(self, me: str, job_id: str, msg: Message) -> None:
        self._job(job_id, me)
        key = (job_id, msg.kind, me)
        stored = self._digests.get(key)
        if stored is not None:
            if stored != msg.digest():
                raise DeliveryError(
                    "bulletin",
                    "FAILED_PRECONDITION",
                    f"{me} published another {msg.kind} for job {job_id} already",
                )
            return
        self._digests[key] = msg.digest()
        self._entries.setdefault((job_id, msg.kind), []).append((me, msg))
        ev = self._news.pop((job_id, msg.kind), None)
        if ev is not None:
            ev.set()

    async def read(
        self, me: str, job_id: str, kind: str, after: int, wait: float
    ) -> tuple[list[tuple[str, Message]], int, bool]:
        parts = self._job(job_id, me)
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while True:
            entries = self._entries.get((job_id, kind), [])
            final = len(entries) == len(parts) or job_id in self.closed
            left = until - loop.time()
            if len(entries) > after or final or left <= 0:
                return list(entries[after:]), len(entries), final
            ev = self._news.setdefault((job_id, kind), asyncio.Event())
            try:
                await asyncio.wait_for(ev.wait(), left)
                # as the bootstrap does: entries come in bursts, take them together (one step of
                # each reader per burst, not one per entry)
                await asyncio.sleep(min(self.coalesce, max(0.0, until - loop.time())))
            except asyncio.TimeoutError:
                pass


class MemoryBulletin(Bulletin):
    """One node's access to a `MemoryBoard` (its identity is `me`, as a certificate's)."""

    def __init__(self, board: MemoryBoard, me: str) -> None:
        self.board = board
        self.me = me

    async def publish(self, job_id: str, msg: Message) -> None:
        self.board.publish(self.me, job_id, msg)

    async def read(
        self, job_id: str, kind: str, after: int, wait: float
    ) -> tuple[list[tuple[str, Message]], int, bool]:
        return await self.board.read(self.me, job_id, kind, after, wait)
