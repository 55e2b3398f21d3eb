"""The runtime: executes engine actions through a Transport and records the node's view.

`NodeRuntime.handle(sender, job_id, msg)` is THE place where an incoming protocol message is handled,
whatever the transport (the gRPC servicer and the in-memory transport both call it):

  1. find the job (or fetch its spec from the bootstrap once), refuse unknown jobs; a job that
     started before this node's ledger existed is not joined (`may_join`: the node came back with
     a new, empty ledger) and ends failed here at once;
  2. refuse senders that are not participants;
  3. recognise an exact re-send (same identity and digest: acknowledged, not applied again, also
     for a job that is over here, unless the engine refuses it: `Engine.on_duplicate`) and a
     conflicting one (same identity, other content: refused);
     refuse any other message for a job that is over here (failed, or finished: a second release,
     a token), except the protocol's close-down traffic (`Engine.closing_kinds`), and payloads of
     the wrong shape;
  4. let the engine decide (it may refuse, e.g. a token from a node that is not the predecessor);
  5. stage the received message, the engine's Record entries and the messages it will send as ONE
     step of the ledger's group commit (`Ledger.stage`: the steps staged in one iteration of the
     event loop share one transaction, one fsync; a receipt that only records, for an engine with
     `defer_receipts`, waits for a later commit), release the job's lock and wait until the step
     is durable; only then return, which acknowledges the message;
  6. once the step is durable, and not before: send the engine's messages (the sender keeps them
     until the receiver acknowledged), arm its timers, release its output. A receiver's
     acknowledgement is noted in the ledger (`acked`, with the next commit), so that the audit can
     tell a message lost after it was acknowledged from one whose sender never learnt it arrived.

The steps of a job are staged under its lock and committed in staging order, so their effects
happen in that order too.

A job's public bulletin (`Publish`; `transport.base.Bulletin`, the bootstrap's in a daemon, in
memory in the simulator): a step's publication is recorded in the ledger ("publish", with its
kind and digest) and, once the step is durable, uploaded; the node then reads the other
participants' entries of that kind (long poll, bounded by `bulletin_wait` or the job's
`deadline_s`) and hands each batch to `Engine.on_published` as one step (its records carry the
kind). The job's state does not wait for the bulletin: a participant that never publishes is left
out when the reading ends, which is recorded with its reason ("bulletin-end"). A node that stopped
before (its publication in the ledger, no end) takes the reading up again when it restarts: it
publishes the same message again and hands the engine only the entries it has not recorded.
Calls to an unreachable bulletin are retried with `retry.retry` on the event loop's clock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from netdp_node.algorithms import get_algorithm
from netdp_node.errors import LedgerError, NetdpError, NodeUnavailable, UnknownJob
from netdp_node.faults import EXIT_CRASHED, FaultInjector
from netdp_node.graphs import COMPLETE, CompleteEdges
from netdp_node.lazy import lazy_module
from netdp_node.ledger import Entry, JobRow, Ledger
from netdp_node.protocols.base import (
    Action,
    Drop,
    Engine,
    Flush,
    JobContext,
    Keep,
    Message,
    Output,
    Publish,
    Record,
    RefusalCode,
    Refused,
    Send,
    SetTimer,
    shape_fits,
)
from netdp_node.retry import Backoff, retry
from netdp_node.transport.base import Bulletin, DeliveryError, Transport
from netdp_node.waiting import stop_tasks

if TYPE_CHECKING:
    import numpy as np

    from netdp_node.algorithms import accounting
    from netdp_node.algorithms import budget as budgets
else:
    np = lazy_module("numpy")  # lazy: start-up cost
    # a node's first job needs them, its start does not (their dataclasses cost start-up CPU)
    accounting = lazy_module("netdp_node.algorithms.accounting")
    budgets = lazy_module("netdp_node.algorithms.budget")

log = logging.getLogger("netdp.runtime")
T = TypeVar("T")


#: Messages from a peer for jobs this node does not know make it ask the bootstrap (GetJob) at
#: most UNKNOWN_JOB_LOOKUPS times per UNKNOWN_JOB_TTL seconds, whatever the job ids, and at most
#: once per UNKNOWN_JOB_TTL for the same id: a peer sending made-up job ids cannot turn into load
#: on the bootstrap (nor spend the lookups of the other peers). A new job is learnt from the long
#: poll (daemon `_poll`) at once anyway; a message refused as unknown is sent again by its sender.
UNKNOWN_JOB_TTL = 2.0
UNKNOWN_JOB_LOOKUPS = 2
#: Seconds a stopping job waits for its tasks to end (`JobRunner.cancel`); a task still running
#: then is left behind with a warning, so that a node's stop never waits for ever.
JOB_STOP_S = 30.0

#: How long a node that published on a job's bulletin keeps reading it for the other participants'
#: entries (seconds; a job's `deadline_s`, else the node's job deadline, when set, is used
#: instead): a participant that never publishes (it crashed or left) ends the reading then. The
#: job's own state is not affected: it ended when the engine released its output. Each read
#: waits at most BULLETIN_POLL_S.
BULLETIN_WAIT_S = 600.0
BULLETIN_POLL_S = 30.0
#: A bulletin call that failed because the bulletin is unreachable (DeliveryError UNAVAILABLE) is
#: tried again after a pause of this backoff (full jitter, `retry.Backoff`), until the reading's
#: bound; its `give_up_after` is that bound.
BULLETIN_RETRY = Backoff(initial=1.0, maximum=10.0, multiplier=2.0)
#: A bound that passed already (a restart long after the publication) still allows a try.
_ONE_MORE_TRY_S = 1e-3
#: The ledger event that ends the reading of a kind of the bulletin, with its reason ("kind",
#: "read": participants whose entry this node holds, itself included, "of": participants,
#: "reason"). A publication without it is a reading a restart takes up (`resume_bulletin`).
BULLETIN_END = "bulletin-end"

#: Why a node does not take part in a job its ledger never knew (`NodeRuntime.may_join`).
NOT_JOINED = "this node's ledger was created after the job started; it does not take part"


@dataclass(frozen=True)
class Budget:
    epsilon: float
    delta: float


def spec_dict(ctx: JobContext) -> dict[str, Any]:
    """The public job spec as stored in the ledger and read by the accountant (the complete
    graph's edges are not listed: "topology": "complete", `graphs.spec_edges`). Built once per
    job (`JobContext.shared`) and shared: read-only."""
    return dict(ctx.shared.get("spec", lambda: _spec(ctx)))


def _spec(ctx: JobContext) -> dict[str, Any]:
    spec = {
        "job_id": ctx.job_id,
        "algorithm": ctx.algorithm,
        "participants": list(ctx.participants),
        "params": dict(ctx.params),
        "public_seed": ctx.public_seed,
        "edges": [] if isinstance(ctx.edges, CompleteEdges) else [list(e) for e in ctx.edges],
    }
    if isinstance(ctx.edges, CompleteEdges):
        spec["topology"] = COMPLETE
    return spec


class NotRun(Engine):
    """Stands in for the engine of a job this node could not start: it failed (with its reason)
    before taking any step, e.g. its data does not fit the job."""

    def __init__(self, ctx: JobContext) -> None:  # no Engine.__init__: nothing to set up
        self.ctx = ctx
        self.ids = ctx.ids
        self.n = len(self.ids)
        self.position = ctx.position
        self.data = None
        self.contribute = False
        self.done = False


class JobLog(logging.LoggerAdapter):
    """Every log line names the node and the job."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[node={self.extra['node']} job={self.extra['job']}] {msg}", kwargs  # type: ignore[index]


class JobRunner:
    """One job at one node: its engine, its lock, its result."""

    def __init__(
        self,
        node: NodeRuntime,
        ctx: JobContext,
        engine: Engine,
        contributed: bool,
        decline_reason: str = "",
    ) -> None:
        self.node = node
        self.ctx = ctx
        self.engine = engine
        self.contributed = contributed
        self.decline_reason = decline_reason
        self.lock = asyncio.Lock()
        self.state = "running"
        self.detail = decline_reason
        self.output: Output | None = None
        self.finished = asyncio.Event()
        self.log = JobLog(log, {"node": node.node_id, "job": ctx.job_id})
        self._tasks: set[asyncio.Task[None]] = set()
        self.steps = 0  # protocol steps this node has taken in this job
        self._deadline: asyncio.TimerHandle | None = None
        self._finishing = False  # the step with the output is staged, not yet durable
        #: the tasks publishing on the job's bulletin and reading it (`_bulletin`), and the futures
        #: done once each publication was stored (or given up on)
        self.bulletin_tasks: list[asyncio.Task[None]] = []
        self.publications: list[asyncio.Future[None]] = []
        self._jitter: random.Random | None = None  # the bulletin's retries (`_on_bulletin`)

    def _fault_step(self) -> None:
        """Fault injection (--fault-crash-at-step, --fault-leave-at-step): before each step."""
        faults = self.node.faults
        if faults is None:
            return
        was_left = faults.left
        what = faults.step(self.steps + 1)
        if what is None or (what == "leave" and was_left):
            if what == "leave":
                raise NodeUnavailable(f"{self.node.node_id} has left (fault injection)")
            return
        reason = f"fault injection: {what} at step {self.steps + 1} of job {self.ctx.job_id}"
        self.node.ledger.commit(
            [
                Entry(
                    job_id=self.ctx.job_id,
                    direction="local",
                    event="fault",
                    params={"fault": what, "step": self.steps + 1},
                )
            ]
        )
        self.log.error("%s", reason)
        if what == "crash":
            self.node.crash(reason)
        raise NodeUnavailable(f"{self.node.node_id} has left (fault injection)")

    def arm_deadline(self, seconds: float) -> None:
        """Fail the job at this node if it has not finished `seconds` after it joined."""
        if seconds > 0:
            self._deadline = asyncio.get_running_loop().call_later(
                seconds,
                lambda: self.fail(
                    f"deadline of {seconds:g}s passed before the job finished at this node "
                    f"(after {self.steps} step(s); a participant may be down)"
                ),
            )

    # -- driving the engine --------------------------------------------------------------------
    async def start(self) -> None:
        async with self.lock:
            actions = self.engine.start()
            if actions:
                self._fault_step()
                self.steps += 1
            self._apply(actions, received=None)

    async def deliver(self, sender: str, msg: Message) -> bool:
        """Handle one incoming message; returns True for an exact duplicate (not applied)."""
        async with self.lock:
            if sender not in self.engine.position:
                raise Refused(
                    RefusalCode.PERMISSION_DENIED,
                    f"{sender} is not a participant of job {self.ctx.job_id}",
                )
            digest = msg.digest()
            ledger = self.node.ledger
            stored = ledger.received_digest(self.ctx.job_id, sender, msg.key())
            if stored is None:
                self._check_open(msg)
                shape = self.engine.payload_shape(msg.kind)
                got = None if msg.payload is None else tuple(msg.payload.shape)
                if not shape_fits(got, shape):
                    raise Refused(
                        RefusalCode.INVALID_ARGUMENT,
                        f"{msg.kind} payload has shape {got}, job {self.ctx.job_id} "
                        f"expects {shape}",
                    )
            if stored is not None:
                if stored != digest:
                    raise Refused(
                        RefusalCode.ALREADY_EXISTS,
                        f"{msg.kind} {msg.walk}/{msg.epoch} seq={msg.seq} "
                        f"round={msg.round} from {sender} conflicts with the one "
                        "already stored",
                    )
                self.engine.on_duplicate(sender, msg)  # it may refuse (Refused): said so
                self.log.info(
                    "exact duplicate of %s %s seq=%d from %s acknowledged, not applied",
                    msg.kind,
                    msg.walk,
                    msg.seq,
                    sender,
                )
                # acknowledged once the original is durable (it may still be staged)
                durable = ledger.staged_future(self.ctx.job_id, sender, msg.key())
                duplicate = True
            else:
                self._fault_step()
                actions = self.engine.on_message(sender, msg)
                self.steps += 1
                received = Entry(
                    job_id=self.ctx.job_id,
                    direction="received",
                    event=msg.kind,
                    peer=sender,
                    kind=msg.kind,
                    walk=msg.walk,
                    epoch=msg.epoch,
                    seq=msg.seq,
                    round=msg.round,
                    digest=digest,
                )
                durable = self._apply(actions, received=received)
                duplicate = False
        if durable is not None:  # the acknowledgement waits until the step is durable
            await durable  # (a cancelled wait cancels only this waiter, never the step)
        return duplicate

    def _check_open(self, msg: Message) -> None:
        """Refuse a new message (not a re-send of a stored one) for a job that is over here: failed,
        or finished, unless it is the protocol's close-down traffic (`Engine.closing_kinds`: e.g.
        a walk's handoff) and the engine that finished is this one (a job found finished in the
        ledger after a restart has no live engine). A second release, a token or a round value for
        a finished job is refused: nothing can be added to a job after its end."""
        if self.state == "running" and not self.engine.done:
            return
        if self.state != "failed" and self.engine.done and msg.kind in self.engine.closing_kinds:
            return
        state = "finished" if self.state == "running" else self.state
        why = f": {self.detail}" if self.detail else ""
        raise Refused(
            RefusalCode.FAILED_PRECONDITION,
            f"job {self.ctx.job_id} is {state} at {self.node.node_id}{why}; a new "
            f"{msg.kind} is not taken",
        )

    async def on_timer(self, name: str) -> None:
        """Timers keep firing after the job is done at this node (an engine may still have to
        deliver something, e.g. a walk's release to a restarting peer), not after it failed."""
        async with self.lock:
            if self.state != "failed":
                self._apply(self.engine.on_timer(name), received=None)

    def _apply(
        self, actions: list[Action], received: Entry | None, bulletin_kind: str = ""
    ) -> asyncio.Future[None] | None:
        """Persist, then act. Synchronous (call under the job's lock, or with it free): stages the
        step in the ledger's group commit and returns the future of its durability (None when it
        has nothing to write: then it only arms timers, at once). The step's sends, timers and
        output take effect only once it is durable, and not at all if the write failed (the job
        then fails). `bulletin_kind`: the step takes entries of the bulletin of that kind
        (`Engine.on_published`); its records carry the kind (`Entry.kind`), which tells a restart
        whose entries were taken already (`resume_bulletin`)."""
        job = self.ctx.job_id
        entries: list[Entry] = [] if received is None else [received]
        sends: list[Send] = []
        output: Output | None = None
        keep: list[tuple[str, str, Any, dict[str, Any]]] = []
        drop: list[tuple[str, str]] = []
        publish: list[Message] = []
        for a in actions:
            if isinstance(a, Publish):
                publish.append(a.msg)
                entries.append(
                    Entry(
                        job_id=job,
                        direction="local",
                        event="publish",
                        kind=a.msg.kind,
                        digest=a.msg.digest(),
                        # the message itself: a restart publishes it again (`resume_bulletin`)
                        params={"message": _message_dict(a.msg)},
                    )
                )
            elif isinstance(a, Keep):
                keep.append((job, a.key, a.payload, dict(a.meta)))
            elif isinstance(a, Drop):
                drop.append((job, a.key))
            elif isinstance(a, Record):
                entries.append(
                    Entry(
                        job_id=job,
                        direction="local",
                        event=a.event,
                        peer=a.peer,
                        kind=bulletin_kind,
                        params=dict(a.params),
                    )
                )
            elif isinstance(a, Send):
                sends.append(a)
                m = a.msg
                entries.append(
                    Entry(
                        job_id=job,
                        direction="sent",
                        event=m.kind,
                        peer=a.to,
                        kind=m.kind,
                        walk=m.walk,
                        epoch=m.epoch,
                        seq=m.seq,
                        round=m.round,
                        digest=m.digest(),
                    )
                )
            elif isinstance(a, Output):
                output = a
                entries.append(
                    Entry(
                        job_id=job,
                        direction="local",
                        event="output",
                        params={"info": _jsonable(a.info)},
                    )
                )
        update = None
        if output is not None:
            update = {
                "job_id": job,
                "state": "done",
                "result": _result_dict(output),
                "detail": self.detail,
            }
        ledger = self.node.ledger
        if not (entries or update or keep or drop):
            if any(isinstance(a, Flush) for a in actions):
                ledger.flush_soon()
            self._act(actions, sends, output)
            return None
        # a receipt the engine lets wait (it only records): committed with a later step
        defer = (
            received is not None
            and self.engine.defer_receipts
            and not sends
            and output is None
            and not keep
            and not drop
            and not publish
            and not any(isinstance(a, (SetTimer, Flush)) for a in actions)
        )
        for s in sends:  # the transport may dial while the step is written (nothing is sent)
            self.node.transport.prepare(s.to)
        durable = ledger.stage(
            entries,
            job_update=update,
            keep=keep,
            drop=drop,
            defer=defer,
            done=lambda err: self._durable(err, actions, sends, output),
        )
        if output is not None:
            self._finishing = True  # its result is on the way to the ledger: no failing now
        return durable

    def _durable(
        self,
        err: LedgerError | None,
        actions: list[Action],
        sends: list[Send],
        output: Output | None,
    ) -> None:
        if err is None:
            self._act(actions, sends, output)
        else:  # nothing of the step happens: it was not recorded
            self._finishing = False
            self.fail(f"the ledger could not record a step: {err}")

    def _act(self, actions: list[Action], sends: list[Send], output: Output | None) -> None:
        """A step's effects, once it is durable."""
        for s in sends:
            self._send(s)
        for a in actions:
            if isinstance(a, SetTimer):
                asyncio.get_running_loop().call_later(a.delay, self._fire_timer, a.name)
            elif isinstance(a, Publish):
                self._start_bulletin(a.msg, a.msg.kind)
        if output is not None:
            self.output = output
            self.state = "done"
            if self._deadline is not None:
                self._deadline.cancel()
            self.log.info("finished: result released to this node")
            self.finished.set()
            self.node.notify_finished(self)

    # -- the job's public bulletin ---------------------------------------------------------------
    def _start_bulletin(
        self, msg: Message | None, kind: str, taken: Collection[str] = (), elapsed: float = 0.0
    ) -> None:
        """Publish `msg` (None: it cannot be, after a restart) and read the entries of `kind`, in a
        task of the job's; `taken`: participants whose entry was taken already, `elapsed`: seconds
        of the reading's bound spent already (both from the ledger, after a restart)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.publications.append(done)
        t = asyncio.ensure_future(self._bulletin(msg, kind, done, taken, elapsed))
        self.bulletin_tasks.append(t)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _bulletin(
        self,
        msg: Message | None,
        kind: str,
        published: asyncio.Future[None],
        taken: Collection[str],
        elapsed: float,
    ) -> None:
        try:
            await self._publish_and_read(msg, kind, published, taken, elapsed)
        finally:
            if not published.done():
                published.set_result(None)

    def _bulletin_wait(self) -> float:
        return (
            float(self.ctx.params.get("deadline_s", 0.0) or 0.0)
            or self.node.job_deadline
            or self.node.bulletin_wait
        )

    async def _publish_and_read(
        self,
        msg: Message | None,
        kind: str,
        published: asyncio.Future[None],
        taken: Collection[str],
        elapsed: float,
    ) -> None:
        """Publish `msg` (durable in this node's ledger already) on the job's bulletin, then read
        the other participants' entries of its kind and hand them to the engine
        (`Engine.on_published`), each as one step of the ledger. Bounded: `bulletin_wait` seconds
        (the job's `deadline_s`, else the node's job deadline, when set) after the publication; a
        participant that never publishes is left out, and the engine, as its accountant, never
        reads its silence as an empty entry. The end of the reading is recorded (BULLETIN_END,
        with its reason) unless the task is cancelled (the node stops: a restart takes the reading
        up again, `resume_bulletin`)."""
        bulletin = self.node.bulletin
        if bulletin is None:
            self.log.warning("no bulletin on this node: its %s is not published", kind)
            return
        loop = asyncio.get_running_loop()
        wait = self._bulletin_wait()
        until = loop.time() + max(0.0, wait - elapsed)
        job = self.ctx.job_id
        n = len(self.engine.position)
        seen = {self.node.node_id, *taken}
        after = 0

        def read() -> Awaitable[tuple[list[tuple[str, Message]], int, bool]]:
            return bulletin.read(
                job, kind, after, max(0.0, min(until - loop.time(), BULLETIN_POLL_S))
            )

        try:
            if msg is not None:
                try:
                    await self._on_bulletin(lambda: bulletin.publish(job, msg), until, "publish")
                finally:
                    published.set_result(None)
                self.log.info("published its %s on the bulletin", kind)
            position, want = self.engine.position, self.engine.payload_shape(kind)
            while True:
                entries, after, final = await self._on_bulletin(read, until, "read")
                new: dict[str, Message] = {}
                for sender, m in entries:
                    if sender in seen or sender not in position or m.kind != kind:
                        continue
                    shape = None if m.payload is None else tuple(m.payload.shape)
                    if shape != want:
                        self.log.warning(
                            "bulletin: %s of %s has a payload of shape %s", kind, sender, shape
                        )
                        continue
                    new[sender] = m
                    seen.add(sender)
                if new:
                    async with self.lock:
                        if self.state == "failed":
                            raise _BulletinEnded("the job failed")
                        durable = self._apply(
                            self.engine.on_published(kind, new), received=None, bulletin_kind=kind
                        )
                    if durable is not None:
                        await durable
                if len(seen) >= n:
                    raise _BulletinEnded("complete: every participant's entry read")
                if final:
                    raise _BulletinEnded("the bulletin holds no more entries")
                if loop.time() >= until:
                    raise _BulletinEnded(f"its bound passed ({wait:g}s after the publication)")
        except _BulletinEnded as e:
            reason = str(e)
        if len(seen) < n:
            self.log.warning(
                "the bulletin holds the %s of %d of %d participants; the others never published",
                kind,
                len(seen),
                n,
            )
        end = Record(
            BULLETIN_END, params={"kind": kind, "read": len(seen), "of": n, "reason": reason}
        )
        async with self.lock:
            durable = self._apply([end], received=None)
        if durable is not None:
            await durable

    async def _on_bulletin(self, call: Callable[[], Awaitable[T]], until: float, what: str) -> T:
        """One bulletin call, tried again while the bulletin is unreachable (DeliveryError
        UNAVAILABLE), with BULLETIN_RETRY's backoff (`retry.retry`, on the event loop's clock:
        virtual in the simulator) until `until`. Raises _BulletinEnded, with the reason, when it
        gave up or the bulletin refused (logged)."""
        loop = asyncio.get_running_loop()
        policy = Backoff(
            initial=BULLETIN_RETRY.initial,
            maximum=BULLETIN_RETRY.maximum,
            multiplier=BULLETIN_RETRY.multiplier,
            give_up_after=max(until - loop.time(), _ONE_MORE_TRY_S),
        )
        if self._jitter is None:  # the same draws in every run of a simulation
            self._jitter = random.Random(f"{self.node.node_id}/{self.ctx.job_id}")

        def told(e: BaseException, attempt: int, delay: float) -> None:
            why = e.detail if isinstance(e, DeliveryError) else e
            self.log.warning(
                "bulletin %s failed (%s), retry %d in %.2fs", what, why, attempt, delay
            )

        try:
            return await retry(call, policy, _unreachable, told, clock=loop.time, rng=self._jitter)
        except DeliveryError as e:
            self.log.error("bulletin %s failed: %s: %s", what, e.code, e.detail)
            raise _BulletinEnded(f"{what} failed: {e.code}: {e.detail}") from e

    def resume_bulletin(self) -> int:
        """After a restart: take up again every reading of the bulletin that the ledger shows begun
        (a "publish" entry) and not ended (no BULLETIN_END of its kind): the node stopped after
        the step that published and before it read every entry. The message (in the "publish"
        entry) is published again (the bulletin accepts an identical one) and only the entries of
        participants that no record of this job names (its `Entry.kind`, `_apply`'s
        `bulletin_kind`) are handed to the engine: none is recorded twice. Bounded as the first
        reading: `_bulletin_wait` seconds after the publication, at least one read. A record that
        takes several participants' entries at once names them in its params' "peers"
        (`Engine.on_published`). A publication recorded without its message (a ledger from
        before) is not read again. Returns how many readings it took up."""
        if self.node.bulletin is None:
            return 0
        ledger = self.node.ledger
        job = self.ctx.job_id
        marks = ledger.entries(job, events=("publish", BULLETIN_END))
        ended = {e.params.get("kind") for e in marks if e.event == BULLETIN_END}
        pending = [e for e in marks if e.event == "publish" and e.kind not in ended]
        if not pending:
            return 0
        everything = ledger.entries(job)
        wait = self._bulletin_wait()
        resumed = 0
        for pub in pending:
            kind = pub.kind
            if "message" not in pub.params:
                self.log.warning("its %s publication is not in its ledger: not read again", kind)
                continue
            msg = _stored_message(pub)
            if msg is None:
                self.log.error(
                    "its %s publication in the ledger does not match its digest: not published "
                    "again, the bulletin is read",
                    kind,
                )
            taken: set[str] = set()
            for e in everything:
                if e.direction != "local" or e.kind != kind or e.event in ("acked", "publish"):
                    continue
                if e.peer:
                    taken.add(e.peer)
                taken.update(e.params.get("peers", ()))  # a record of a whole batch
            elapsed = min(max(0.0, time.time() - pub.ts), wait)
            self.log.warning(
                "resuming the reading of the bulletin (%s) after a restart: %d of %d other "
                "participants' entries taken, %.0fs of %gs left",
                kind,
                len(taken),
                len(self.engine.position) - 1,
                wait - elapsed,
                wait,
            )
            self._start_bulletin(msg, kind, taken, elapsed)
            resumed += 1
        return resumed

    def _fire_timer(self, name: str) -> None:
        self._spawn(self.on_timer(name))

    def _spawn(self, coro: Awaitable[None]) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _send(self, s: Send) -> None:
        """Send, then tell the engine how it went (walk custody needs both outcomes). No task per
        message: the transport calls back with the outcome."""
        self.node.transport.submit(s.to, self.ctx.job_id, s.msg, on_done=lambda f: self._sent(s, f))

    def _sent(self, s: Send, fut: asyncio.Future[bool]) -> None:
        if fut.cancelled():
            return
        if self.lock.locked():  # a step is under way: take the outcome after it, in order
            self._spawn(self._sent_locked(s, fut))
        else:  # nobody holds the lock and this does not await: the same as taking it
            self._outcome(s, fut)

    async def _sent_locked(self, s: Send, fut: asyncio.Future[bool]) -> None:
        async with self.lock:
            self._outcome(s, fut)

    def _outcome(self, s: Send, fut: asyncio.Future[bool]) -> None:
        """The engine learns the send's outcome (call with the job's lock held or free)."""
        e = fut.exception()
        if e is None:
            # the receiver acknowledged: the message is durable there (the audit tells a message
            # lost after its acknowledgement from one whose sender never learnt it arrived)
            m = s.msg
            self.node.ledger.note(
                [
                    Entry(
                        job_id=self.ctx.job_id,
                        direction="local",
                        event="acked",
                        peer=s.to,
                        kind=m.kind,
                        walk=m.walk,
                        epoch=m.epoch,
                        seq=m.seq,
                        round=m.round,
                        digest=m.digest(),
                    )
                ]
            )
            self._apply(self.engine.on_delivered(s.to, s.msg), received=None)
        elif isinstance(e, DeliveryError):
            actions = self.engine.on_undeliverable(s.to, s.msg, e.code, e.detail)
            if actions is None:
                self.fail(f"{s.msg.kind} to {s.to} failed: {e.code}: {e.detail}")
            else:
                self.log.warning(
                    "%s to %s failed (%s: %s); the protocol recovers",
                    s.msg.kind,
                    s.to,
                    e.code,
                    e.detail,
                )
                self._apply(actions, received=None)
        else:
            self.log.error("sending %s to %s raised %s: %s", s.msg.kind, s.to, type(e).__name__, e)
            self.fail(f"{s.msg.kind} to {s.to} failed: {type(e).__name__}: {e}")

    def fail(self, reason: str) -> None:
        if self.state != "running" or self._finishing:
            return
        self.state = "failed"
        self.detail = reason
        if self._deadline is not None:
            self._deadline.cancel()
        self.log.error("job failed: %s", reason)
        try:
            self.node.ledger.set_job_state(self.ctx.job_id, "failed", detail=reason)
        except LedgerError as e:
            self.log.error("could not record the failure in the ledger: %s", e)
        self.finished.set()
        self.node.notify_finished(self)

    async def cancel(self) -> None:
        """Stop this job's tasks (bounded: JOB_STOP_S, cancelling again while one runs on)."""
        left = await stop_tasks(list(self._tasks), JOB_STOP_S)
        if left:
            self.log.warning(
                "%d task(s) of the job did not stop within %gs; left behind", len(left), JOB_STOP_S
            )


class _BulletinEnded(NetdpError):
    """The reading of the bulletin ends, for the reason given (recorded: BULLETIN_END)."""


def _unreachable(e: BaseException) -> bool:
    """Whether a bulletin call failed only because the bulletin cannot be reached now."""
    return isinstance(e, DeliveryError) and e.code == "UNAVAILABLE"


def _message_dict(m: Message) -> dict[str, Any]:
    """A message as the "publish" entry keeps it (JSON; `_stored_message` reads it back)."""
    d: dict[str, Any] = {"scalars": {k: float(v) for k, v in m.scalars.items()}}
    if m.payload is not None:
        a = np.asarray(m.payload, dtype="<f8")
        d["shape"] = list(a.shape)
        d["payload"] = a.ravel().tolist()
    for f in ("walk", "epoch", "seq", "round"):
        if getattr(m, f):
            d[f] = getattr(m, f)
    return d


def _stored_message(e: Entry) -> Message | None:
    """The message a "publish" entry keeps, or None if it is not the one its digest names."""
    d = e.params.get("message")
    if not isinstance(d, dict):
        return None
    try:
        payload = None
        if "payload" in d:
            payload = np.asarray(d["payload"], dtype="<f8").reshape(d["shape"])
            payload.setflags(write=False)
        m = Message(
            e.kind,
            payload=payload,
            walk=str(d.get("walk", "")),
            epoch=int(d.get("epoch", 0)),
            seq=int(d.get("seq", 0)),
            round=int(d.get("round", 0)),
            scalars={str(k): float(v) for k, v in dict(d.get("scalars") or {}).items()},
        )
    except (TypeError, ValueError, KeyError):
        return None
    return m if m.digest() == e.digest else None


def private_rng(key: int | None = None) -> np.random.Generator:
    """A node's private generator for one job: ChaCha20 (a CSPRNG, randomgen) keyed with 256 bits
    from the OS. Noise and next hops come from it :
    an observer of some outputs (the hops it sees) cannot predict the others, as it could with a
    statistical generator such as PCG64. `--seed` replaces it with a seeded PCG64, for tests only.

    The secret is ChaCha's `key` itself (counter 0), not a `seed`: a seed goes through NumPy's
    SeedSequence, whose pool holds 128 bits, so a 256-bit seed would give a 128-bit key. `key`
    (tests only) fixes the 256-bit key; by default it is `secrets.randbits(256)`."""
    from randomgen import ChaCha  # lazy: start-up cost

    if key is None:
        key = secrets.randbits(256)
    if not 0 <= key < 1 << 256:
        raise ValueError("the ChaCha key must be an integer in [0, 2^256)")
    return np.random.Generator(ChaCha(key=key, counter=0, rounds=20))


def _exit_crashed(reason: str) -> None:
    """The default crash: exit at once with code 70, as a machine losing power would (the ledger
    is already durable; nothing else is flushed)."""
    logging.shutdown()
    os._exit(EXIT_CRASHED)


#: the leaves `_jsonable` returns as they are, told by their exact type first: a result's lists of
#: thousands of names and numbers (IncA's finals) then cost no abstract-class check each
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(v: Any) -> Any:
    if type(v) in _PLAIN:
        return v
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _result_dict(o: Output) -> dict[str, Any]:
    return {
        "value": None if o.value is None else np.asarray(o.value).tolist(),
        "info": _jsonable(o.info),
    }


def _stored_output(row: JobRow) -> Output | None:
    """The output a finished job's ledger row kept (`_result_dict`), to report it again."""
    if row.state != "done" or not row.result:
        return None
    value = row.result.get("value")
    return Output(None if value is None else np.asarray(value), dict(row.result.get("info") or {}))


class NodeRuntime:
    """All jobs of one node. Transport-independent: the daemon and the tests both drive it."""

    def __init__(
        self,
        node_id: str,
        ledger: Ledger,
        transport: Transport,
        *,
        data: np.ndarray | None = None,
        budget: Budget | None = None,
        rng_factory: Callable[[str], np.random.Generator] | None = None,
        job_fetcher: Callable[[str], Awaitable[tuple[JobContext, int] | None]] | None = None,
        on_finished: Callable[[JobRunner], None] | None = None,
        faults: FaultInjector | None = None,
        crash: Callable[[str], None] | None = None,
        job_deadline: float = 0.0,
        join_after: int | None = None,
        join_pending: bool = False,
        bulletin: Bulletin | None = None,
        bulletin_wait: float = BULLETIN_WAIT_S,
    ) -> None:
        self.node_id = node_id
        #: the jobs' public bulletin (the bootstrap's; None: none, a Publish is not uploaded)
        self.bulletin = bulletin
        self.bulletin_wait = bulletin_wait
        self.ledger = ledger
        self.transport = transport
        self.data = data
        self.budget = budget
        self.rng_factory = rng_factory or (lambda job: private_rng())
        self.job_fetcher = job_fetcher
        self.on_finished = on_finished
        self.faults = faults
        self.crash = crash or _exit_crashed
        self.job_deadline = job_deadline
        self.jobs: dict[str, JobRunner] = {}
        self._adding: dict[str, asyncio.Future[JobRunner]] = {}
        # Which jobs this node may join (`may_join`): the bootstrap's jobs after `join_after`, and
        # any its ledger already holds; None: any job (no bootstrap, e.g. tests and simulations).
        # `join_pending`: not known yet (the node has not registered): no job its ledger does not
        # hold is taken until it is.
        self.join_after = join_after
        self.join_pending = join_pending
        # Job ids the bootstrap did not know, with when we asked; the times of each peer's last
        # lookups; the lookups under way (see UNKNOWN_JOB_LOOKUPS).
        self._unknown: dict[str, float] = {}
        self._lookups: dict[str, collections.deque[float]] = {}
        self._looking_up: dict[str, asyncio.Future[tuple[JobContext, int] | None]] = {}
        self.log = logging.LoggerAdapter(log, {})

    # -- jobs ----------------------------------------------------------------------------------
    def _decide_contribution(self, ctx: JobContext) -> tuple[bool, str]:
        if self.data is None:
            return False, "no data configured on this node (--data): it adds noise only"
        if self.budget is None:
            return True, ""
        views = [
            accounting.JobView(j.job_id, j.spec, self.ledger.entries(j.job_id))
            for j in self.ledger.jobs()
            if j.job_id != ctx.job_id
        ]
        check = budgets.check_budget(
            views, spec_dict(ctx), self.node_id, self.budget.epsilon, self.budget.delta
        )
        if check.ok:
            return True, ""
        return False, "declined (privacy budget): " + check.reason

    # -- which jobs this node takes part in --------------------------------------------------------
    def set_join_after(self, seq: int | None) -> None:
        """The node registered: it joins the bootstrap's jobs numbered after `seq` (see
        `Ledger.join_after`), and those its ledger already holds."""
        self.join_after = seq
        self.join_pending = False

    def may_join(self, job_id: str, seq: int) -> bool:
        """Whether this node may take part in the bootstrap's job number `seq`: yes if its ledger
        holds it already (a restarted node then resumes it or not, as `_create` decides) or if the
        job came after the ledger was created. A job that started before (the node came back with
        a new, empty ledger) is one whose earlier steps its ledger cannot know: running it would
        spend privacy twice and replay finished work, so the node stays out of it
        (`not_joined`) and is a dropout to the others."""
        if job_id in self.jobs or (self.join_after is None and not self.join_pending):
            return True
        if self.ledger.job(job_id) is not None:
            return True
        return not self.join_pending and self.join_after is not None and seq > self.join_after

    def not_joined(self, ctx: JobContext, seq: int) -> JobRunner:
        """Stay out of a job `may_join` refuses: record it in the ledger as failed, with the
        reason (no engine runs, nothing is sent), and end it here so that it is reported."""
        if ctx.job_id in self.jobs:
            return self.jobs[ctx.job_id]
        reason = f"{NOT_JOINED} (job #{seq}; this ledger joins jobs after #{self.join_after})"
        # no engine, and no generator drawn for it (a seeded node would record one it never uses)
        runner = JobRunner(self, ctx, NotRun(ctx), False, reason)
        runner.state = "failed"
        entry = Entry(
            job_id=ctx.job_id,
            direction="local",
            event="not-joined",
            params={"reason": NOT_JOINED, "job_seq": seq, "join_after": self.join_after},
        )
        self.ledger.begin_job(
            ctx.job_id, ctx.algorithm, spec_dict(ctx), False, [entry], state="failed", detail=reason
        )
        self.jobs[ctx.job_id] = runner
        runner.finished.set()
        runner.log.warning("%s", reason)
        self.notify_finished(runner)
        return runner

    async def add_job(self, ctx: JobContext) -> JobRunner:
        """Take part in a job (idempotent). Decides once whether to contribute, records it, starts."""
        if ctx.job_id in self.jobs:
            return self.jobs[ctx.job_id]
        if ctx.job_id in self._adding:
            return await self._adding[ctx.job_id]
        fut: asyncio.Future[JobRunner] = asyncio.get_running_loop().create_future()
        self._adding[ctx.job_id] = fut
        try:
            runner = await self._create(ctx)
            fut.set_result(runner)
            return runner
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        finally:
            del self._adding[ctx.job_id]

    async def _create(self, ctx: JobContext) -> JobRunner:
        previous = self.ledger.job(ctx.job_id)
        if previous is not None:
            # A restarted node does not run a job twice; an engine that can resume from its ledger
            # (token walks: custody) does so below.
            contributed = previous.contributed
            reason = previous.detail or "job already in the ledger before a restart"
        try:  # the job may not fit this node (its data, its version): the job fails here, said so
            if previous is None:
                contributed, reason = self._decide_contribution(ctx)
            engine = get_algorithm(ctx.algorithm).engine(
                ctx, self.data, self.rng_factory(ctx.job_id), contribute=contributed
            )
        except Exception as e:  # noqa: BLE001 - recorded and reported: the job's failure
            return self._not_run(ctx, previous, e)
        runner = JobRunner(self, ctx, engine, contributed, reason)
        self.jobs[ctx.job_id] = runner
        if previous is not None and previous.state == "running":
            kept = self.ledger.kept(ctx.job_id)
            resumed = engine.restore(self.ledger.entries(ctx.job_id), kept)
            if resumed is not None:
                runner.log.warning("resuming after a restart (%d kept copies)", len(kept))
                runner.arm_deadline(float(ctx.params.get("deadline_s", self.job_deadline)))
                async with runner.lock:
                    runner._apply(resumed, received=None)
                runner.resume_bulletin()
                return runner
        if previous is not None:
            runner.state = previous.state if previous.state != "running" else "failed"
            runner.detail = (
                "the node restarted during this job; it does not resume it"
                if previous.state == "running"
                else previous.detail
            )
            runner.finished.set()
            runner.log.warning("job found in the ledger (state %s): not run again", previous.state)
            if previous.state == "running":  # it failed here: record it and say so, as fail() does
                self.ledger.set_job_state(ctx.job_id, "failed", detail=runner.detail)
            else:
                # finished before the restart: reported again (the report may have been lost with
                # the process; the bootstrap keeps the first one), with the result the ledger kept
                runner.output = _stored_output(previous)
                if previous.state == "done":  # a reading of the bulletin it had not ended
                    runner.resume_bulletin()
            self.notify_finished(runner)
            return runner
        first: list[Entry] = []
        if not contributed:
            runner.log.warning("%s", reason)
            first.append(
                Entry(
                    job_id=ctx.job_id, direction="local", event="decline", params={"reason": reason}
                )
            )
        if self.faults is not None and self.faults.plan.active:
            first.append(
                Entry(
                    job_id=ctx.job_id,
                    direction="local",
                    event="fault-plan",
                    params=self.faults.plan.describe(),
                )
            )
        self.ledger.begin_job(ctx.job_id, ctx.algorithm, spec_dict(ctx), contributed, first)
        runner.arm_deadline(float(ctx.params.get("deadline_s", self.job_deadline)))
        runner.log.info(
            "joined %s with %d participants (contributing: %s)",
            ctx.algorithm,
            len(ctx.participants),
            "yes" if contributed else "no",
        )
        try:
            await runner.start()
        except NodeUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - an engine that cannot start fails the job
            self._not_started(runner, e)
        return runner

    def _not_started(self, runner: JobRunner, error: Exception) -> None:
        """The engine's start raised (e.g. data that does not fit, checked there): the job fails
        at this node as one whose engine could not be made; it took no step."""
        runner.log.debug("the engine could not start", exc_info=error)
        reason = f"cannot run this job: {type(error).__name__}: {error}"
        runner.contributed = False
        self.ledger.commit(
            [
                Entry(
                    job_id=runner.ctx.job_id,
                    direction="local",
                    event=accounting.NOT_RUN,
                    params={"reason": reason},
                )
            ]
        )
        runner.fail(reason)

    def _not_run(self, ctx: JobContext, previous: JobRow | None, error: Exception) -> JobRunner:
        """A job whose engine could not be made (or whose contribution could not be decided):
        failed at this node with the reason, recorded in the ledger (so that a restart does not
        try again) and reported. A job the ledger already shows finished keeps its state."""
        reason = f"cannot run this job: {type(error).__name__}: {error}"
        runner = JobRunner(self, ctx, NotRun(ctx), False, reason)
        self.jobs[ctx.job_id] = runner
        runner.log.debug("the engine could not be made", exc_info=error)
        if previous is not None and previous.state != "running":
            runner.state, runner.detail = previous.state, previous.detail or reason
            runner.contributed = previous.contributed
            runner.output = _stored_output(previous)
            runner.finished.set()
            self.notify_finished(runner)  # reported again, as in _create
            return runner
        if previous is None:
            self.ledger.begin_job(
                ctx.job_id,
                ctx.algorithm,
                spec_dict(ctx),
                False,
                [
                    Entry(
                        job_id=ctx.job_id,
                        direction="local",
                        event=accounting.NOT_RUN,
                        params={"reason": reason},
                    )
                ],
            )
        runner.fail(reason)
        return runner

    async def _job_for(self, job_id: str, sender: str = "") -> JobRunner:
        runner = self.jobs.get(job_id)
        if runner is not None:
            return runner
        if job_id in self._adding:
            return await self._adding[job_id]
        if self.job_fetcher is not None and self.join_pending and self.ledger.job(job_id) is None:
            raise NodeUnavailable(
                f"{self.node_id} is registering with the bootstrap; it takes "
                "no job it does not know yet"
            )
        fetched = await self._look_up(job_id, sender)
        if fetched is not None and self.node_id in fetched[0].participants:
            ctx, seq = fetched
            if not self.may_join(job_id, seq):
                return self.not_joined(ctx, seq)  # deliver() then refuses, with the reason
            return await self.add_job(ctx)
        raise UnknownJob(f"job {job_id!r} is unknown to node {self.node_id}")

    async def _look_up(self, job_id: str, sender: str) -> tuple[JobContext, int] | None:
        """Ask the bootstrap for a job `sender` names, within the bounds of UNKNOWN_JOB_LOOKUPS
        (None: unknown, or not asked now). Concurrent messages for one id share one lookup."""
        if self.job_fetcher is None:
            return None
        pending = self._looking_up.get(job_id)
        if pending is not None:
            await asyncio.wait([pending])  # (a lookup that failed: unknown for this message too)
            return None if pending.cancelled() else pending.result()
        now = asyncio.get_running_loop().time()
        if now - self._unknown.get(job_id, -1e9) <= UNKNOWN_JOB_TTL:
            return None
        if len(self._lookups) > 10_000:
            self._lookups.clear()
        recent = self._lookups.setdefault(sender, collections.deque(maxlen=UNKNOWN_JOB_LOOKUPS))
        if len(recent) == UNKNOWN_JOB_LOOKUPS and now - recent[0] <= UNKNOWN_JOB_TTL:
            return None  # this peer's lookups are spent for now: it will send again
        recent.append(now)
        fut: asyncio.Future[tuple[JobContext, int] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._looking_up[job_id] = fut
        try:
            fetched = await self.job_fetcher(job_id)
        except BaseException:
            fut.cancel()
            raise
        finally:
            del self._looking_up[job_id]
        fut.set_result(fetched)
        if fetched is None or self.node_id not in fetched[0].participants:
            if len(self._unknown) > 10_000:
                self._unknown.clear()
            self._unknown[job_id] = now
        return fetched

    async def handle(self, sender: str, job_id: str, msg: Message) -> bool:
        """Entry point for every incoming protocol message (see module docstring)."""
        runner = self.jobs.get(job_id)
        if runner is None:
            runner = await self._job_for(job_id, sender)
        try:
            return await runner.deliver(sender, msg)
        except Refused as e:
            runner.log.warning("refused %s from %s: %s", msg.kind, sender, e.reason)
            raise

    def notify_finished(self, runner: JobRunner) -> None:
        if self.on_finished is not None:
            self.on_finished(runner)

    async def close(self) -> None:
        for r in self.jobs.values():
            await r.cancel()
