"""The node daemon: serve peers over mTLS, register, follow the bootstrap's jobs, run them, report.

Lifecycle: load identity -> open ledger -> start the mTLS server -> register (retry with backoff) ->
follow the bootstrap's news (the process's one job watch, netdp_node.jobwatch) and ask it for this
node's jobs and the revocation list when there is some -> run each job through the runtime -> on
SIGTERM/SIGINT stop polling, stop the server (grace period), close links and the ledger, exit 0.
Jobs already fetched keep running if the bootstrap goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import zlib
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from netdp.v1 import bootstrap_pb2, peer_pb2
from netdp_node.algorithms import get_algorithm
from netdp_node.bootstrap_client import (
    BootstrapBulletin,
    BootstrapClient,
    addresses,
    is_transient,
    job_context,
)
from netdp_node.data import load_values
from netdp_node.errors import SecurityError, ServerIdentityError
from netdp_node.faults import FaultInjector, FaultPlan
from netdp_node.jobwatch import JobWatch, News
from netdp_node.lazy import lazy_module
from netdp_node.ledger import Entry, Ledger, write_pool
from netdp_node.protocols.base import JobContext
from netdp_node.retry import Backoff
from netdp_node.runtime import Budget, JobRunner, NodeRuntime, private_rng
from netdp_node.security.identity import RevocationList
from netdp_node.security.mtls import AccessPolicy, start_server
from netdp_node.security.pki import Identity, check_role, check_server_names, load_identity
from netdp_node.transport.grpc import GrpcTransport, PeerService
from netdp_node.wire import ndarray_to_tensor

if TYPE_CHECKING:
    import numpy as np

    from netdp_node.algorithms import accounting
    from netdp_node.privacy import threat
else:
    np = lazy_module("numpy")  # lazy: start-up cost
    # what a node needs once it has a job, not to start (their dataclasses cost start-up CPU)
    accounting = lazy_module("netdp_node.algorithms.accounting")
    threat = lazy_module("netdp_node.privacy.threat")

log = logging.getLogger("netdp.node")

#: How long the bootstrap may hold the process's job watch when nothing is new (a long poll; the
#: bootstrap holds at most 30 s; `NodeConfig.long_poll`). Idle, a process costs the bootstrap one
#: WatchJobs call per LONG_POLL_S, however many nodes it hosts (netdp_node.jobwatch).
LONG_POLL_S = 25.0
#: (A bootstrap without WatchJobs: each node long-polls ListJobs, `_fetch_updates`.) A long poll
#: answered with no job before this fraction of the wait was answered early: by a newer revocation
#: list (or a bootstrap that does not hold calls), which the node then reads.
CRL_EARLY = 0.8
#: How long a node keeps retrying a report while the bootstrap is unreachable (with backoff, up to
#: 10 s apart). After that, or if the node stops, the report waits for the node's next start.
REPORT_RETRY_S = 600.0


@dataclass(frozen=True)
class NodeConfig:
    certs: Path
    bootstrap: str
    ledger: Path
    listen: str = "127.0.0.1:0"
    advertise: str | None = None
    data: Path | None = None
    budget_epsilon: float | None = None
    budget_delta: float = 1e-5
    poll_interval: float = 0.5
    crl: Path | None = None
    seed: int | None = None  # tests and simulations only: seeds the private RNG
    grace: float = 2.0
    faults: FaultPlan = field(default_factory=FaultPlan)
    peer_timeout: float = 60.0  # give up on a peer that does not acknowledge for this long
    job_deadline: float = 600.0  # fail a job not finished this long after joining (0: never)
    # give up (exit 5) when the bootstrap cannot be reached to register for this long (0: never)
    bootstrap_timeout: float = 120.0
    # the ledger's group commits: 0 on the event loop (the default: measured faster and cheaper for
    # one node and for hosts of 300 and 1,000, docs/performance.md); N: their COMMITs (fsyncs) in
    # a pool of N threads shared by the process's nodes (`Ledger` executor, `ledger.write_pool`)
    ledger_threads: int = 0
    # how long the bootstrap may hold the process's job watch (at most 30 s; tests and benchmarks
    # shorten it: a shorter wait costs the bootstrap more calls)
    long_poll: float = LONG_POLL_S


class NodeDaemon:
    def __init__(self, config: NodeConfig, watch: JobWatch | None = None) -> None:
        """`watch`: the job watch of the process, shared by the nodes it hosts (netdp_node.host);
        None: this node runs one of its own (a process of one node)."""
        self.cfg = config
        self._own_watch = watch is None
        self.watch = watch or JobWatch(wait=config.long_poll, poll_interval=config.poll_interval)
        self.identity: Identity = load_identity(config.certs)
        check_role(self.identity, config.certs, "node", "netdp node")
        check_server_names(self.identity, config.certs)  # callers verify this node by them
        self.node_id = self.identity.node_id
        self.data = load_values(config.data) if config.data else None
        self.revocations = RevocationList.empty()
        self._crl_due = True  # read the bootstrap's revocation list at the next listing
        # the bootstrap's list number this node last read the list at (`_list_updates`)
        self._crl_read: int | None = None
        if config.crl is not None and config.crl.exists():
            self.revocations = RevocationList.from_pem(
                config.crl.read_bytes(), self.identity.ca_pem
            )
        self.stop_event = asyncio.Event()
        self.port = 0
        self.exit_code = 0
        self._bg: set[asyncio.Task[None]] = set()

    # -- helpers -------------------------------------------------------------------------------
    def _rng(self, job_id: str) -> np.random.Generator:
        if self.cfg.seed is None:
            return private_rng()
        # Seeded: NOT PRIVATE. Say so in the job's ledger (every report of the job reads it); the
        # seed itself is not written (a stolen ledger must not give the noise away).
        self.ledger.commit(
            [
                Entry(
                    job_id=job_id,
                    direction="local",
                    event=threat.SEEDED_RNG_EVENT,
                    params={"generator": "PCG64", "private": False},
                )
            ]
        )
        log.warning(
            "[node=%s job=%s] %s: this job's noise and draws come from the seeded RNG",
            self.node_id,
            job_id,
            threat.NOT_PRIVATE,
        )
        return np.random.default_rng([self.cfg.seed, zlib.crc32(job_id.encode())])

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _status(self) -> peer_pb2.StatusReply:
        reply = peer_pb2.StatusReply(node_id=self.node_id)
        for r in self.runtime.jobs.values():
            reply.jobs.append(
                peer_pb2.JobStatus(
                    job_id=r.ctx.job_id,
                    algorithm=r.ctx.algorithm,
                    state=r.state,
                    progress=r.engine.progress(),
                    expected=r.engine.expected_steps(),
                    detail=r.detail,
                    contributed=r.contributed,
                )
            )
        return reply

    def _accept_crl(self, pem: bytes) -> None:
        if not pem or pem == self.revocations.pem:
            return
        try:
            new = RevocationList.from_pem(pem, self.identity.ca_pem)
        except SecurityError as e:
            log.error(
                "[node=%s] ignoring a revocation list from the bootstrap: %s", self.node_id, e
            )
            return
        if new.newer_than(self.revocations):
            self.revocations = new
            transport = getattr(self, "transport", None)  # (made once the node serves)
            if transport is not None:
                transport.revocations_changed()  # open links re-check their servers
            log.info(
                "[node=%s] revocation list #%d: %d revoked certificate(s)",
                self.node_id,
                new.number,
                len(new.serials),
            )

    async def _fetch_job(self, job_id: str) -> tuple[JobContext, int] | None:
        try:
            seq, job = await self.bootstrap.get_job_seq(job_id)
        except grpc.aio.AioRpcError as e:
            log.info(
                "[node=%s] bootstrap does not give job %s: %s", self.node_id, job_id, e.details()
            )
            return None
        except ServerIdentityError as e:
            log.error("[node=%s job=%s] %s", self.node_id, job_id, e)
            return None
        self.transport.learn(addresses(job))
        return job_context(job, self.node_id), seq

    def _record_fault(self, kind: str, peer: str, job_id: str) -> None:
        """An injected fault on the wire (a dropped message): in the ledger and the log."""
        self.ledger.commit(
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
        log.info(
            "[node=%s job=%s] fault injection: %s of a message to %s",
            self.node_id,
            job_id,
            kind,
            peer,
        )

    def _crash_after(self) -> None:
        reason = f"fault injection: crash after {self.cfg.faults.crash_after_s:g}s"
        self.ledger.commit(
            [
                Entry(
                    job_id="",
                    direction="local",
                    event="fault",
                    params={"fault": "crash", "after_s": self.cfg.faults.crash_after_s},
                )
            ]
        )
        log.error("[node=%s] %s", self.node_id, reason)
        self.runtime.crash(reason)

    def _on_finished(self, runner: JobRunner) -> None:
        self._spawn(self._report(runner))

    async def _report(self, runner: JobRunner) -> None:
        # the contributions the released result contains (a walk discounts fenced-off branches)
        contributions = accounting.contributions_in_result(
            self.ledger.entries(runner.ctx.job_id, events=accounting.CONTRIBUTION_EVENTS)
        )
        res = bootstrap_pb2.NodeResult(
            job_id=runner.ctx.job_id,
            node_id=self.node_id,
            state=runner.state if runner.contributed or runner.state != "done" else "declined",
            contributed=runner.contributed,
            contributions=contributions,
            detail=runner.detail,
            reported_unix=int(time.time()),
            # seeded for any part of the job (this run, or one before a restart)
            seeded_rng=self.cfg.seed is not None
            or bool(self.ledger.entries(runner.ctx.job_id, events=(threat.SEEDED_RNG_EVENT,))),
        )
        if (
            runner.output is not None
            and runner.output.value is not None
            and not get_algorithm(runner.ctx.algorithm).private_output
        ):
            res.output.CopyFrom(ndarray_to_tensor(np.asarray(runner.output.value)))
        await self._send_report(res, "the result")

    async def _send_report(self, res: bootstrap_pb2.NodeResult, what: str) -> bool:
        """Report to the bootstrap, retried with backoff while it is unreachable, for at most
        REPORT_RETRY_S (a node that restarts reports its finished jobs again: `_create`). The
        daemon cancels the retry when it shuts down: shutdown never waits for the bootstrap."""
        delays = Backoff(
            initial=self.cfg.poll_interval, maximum=10.0, give_up_after=REPORT_RETRY_S
        ).delays()
        while True:
            try:
                await self.bootstrap.report(res, retry_transient=False)
                if delays.attempt:
                    log.info(
                        "[node=%s job=%s] reported %s (%s) after %d retries",
                        self.node_id,
                        res.job_id,
                        what,
                        res.state,
                        delays.attempt,
                    )
                return True
            except grpc.aio.AioRpcError as e:
                if not is_transient(e):
                    log.error(
                        "[node=%s job=%s] the bootstrap refused %s: %s: %s",
                        self.node_id,
                        res.job_id,
                        what,
                        e.code().name,
                        e.details(),
                    )
                    return False
                why = f"{e.code().name}: {e.details()}"
            except ServerIdentityError as e:  # someone else at its address: it may come back
                why = str(e)
            if delays.expired():
                log.error(
                    "[node=%s job=%s] could not report %s (%s) to the bootstrap for %.0fs, "
                    "giving up until this node restarts: %s",
                    self.node_id,
                    res.job_id,
                    what,
                    res.state,
                    REPORT_RETRY_S,
                    why,
                )
                return False
            if delays.attempt == 0:
                log.warning(
                    "[node=%s job=%s] could not report %s (%s) to the bootstrap, retrying: %s",
                    self.node_id,
                    res.job_id,
                    what,
                    res.state,
                    why,
                )
            await delays.sleep()

    # -- main loop -----------------------------------------------------------------------------
    async def _poll(self) -> None:
        """Follow the process's job watch: list this node's jobs whenever it has news (and once
        at the start), join the new ones. Against a bootstrap without the watch (`News.legacy`),
        long-poll ListJobs instead."""
        self.watch.join(self.node_id, self.bootstrap)
        try:
            await self._follow()
        finally:
            self.watch.leave(self.node_id)  # at once: the watch goes on through another node

    async def _follow(self) -> None:
        after = 0
        listed = 0  # the watch's generation at this node's last listing (0: none yet)
        backoff = Backoff(initial=self.cfg.poll_interval, maximum=10.0, give_up_after=0).delays()
        while not self.stop_event.is_set():
            try:
                news = await self._unless_stopped(self.watch.changed(listed))
                if news is None:
                    return  # stopped while idle
                asked = time.monotonic()
                fetched = await self._unless_stopped(
                    self._fetch_updates(after, self.cfg.long_poll)
                    if news.legacy
                    else self._list_updates(after, news)
                )
                if fetched is None:
                    return  # SIGTERM while the bootstrap was unreachable
                jobs = fetched  # a new revocation list was accepted there
                quick = news.legacy and time.monotonic() - asked < self.cfg.poll_interval
                if not news.legacy:
                    # every job of this node up to the watch's version is in `jobs` (the listing
                    # came after the version was read): later listings need not read them again
                    after = max(after, news.version)
                    listed = news.generation
                for seq, job in jobs:
                    after = max(after, seq)
                    if job.job_id in self.runtime.jobs:
                        continue
                    if not self.runtime.may_join(job.job_id, seq):
                        # it started before this ledger existed: recorded and reported failed
                        self.runtime.not_joined(job_context(job, self.node_id), seq)
                        continue
                    self.transport.learn(addresses(job))
                    self._spawn(self._join(job_context(job, self.node_id)))
                # the watch (or the long poll) paces the loop; a long poll answered at once with
                # nothing new (a new revocation list, or a bootstrap that does not hold calls) is
                # made again after poll_interval
                delay = self.cfg.poll_interval if quick and not jobs else 0.0
                backoff = Backoff(
                    initial=self.cfg.poll_interval, maximum=10.0, give_up_after=0
                ).delays()
            except grpc.aio.AioRpcError as e:
                if e.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                    log.error(
                        "[node=%s] the bootstrap refuses this node (%s: %s); is its "
                        "certificate revoked? stopping",
                        self.node_id,
                        e.code().name,
                        e.details(),
                    )
                    self.exit_code = 3
                    self.stop_event.set()
                    return
                delay = backoff.next_delay()
                log.warning(
                    "[node=%s] bootstrap unreachable (%s); jobs already fetched keep "
                    "running; retrying in %.1fs",
                    self.node_id,
                    e.code().name,
                    delay,
                )
            except ServerIdentityError as e:
                # somebody else answers at the bootstrap's address: tell it nothing, keep running
                # the jobs already fetched, and ask again later (the bootstrap may come back)
                delay = backoff.next_delay()
                log.error(
                    "[node=%s] %s; jobs already fetched keep running; retrying in %.1fs",
                    self.node_id,
                    e,
                    delay,
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), timeout=delay)

    async def _list_updates(self, after: int, news: News) -> list[tuple[int, Any]]:
        """This node's jobs after `after`, asked when the watch has news (ListJobs without a
        wait). The revocation list is read first when its number at the bootstrap changed since
        this node last read it (and at the first listing)."""
        if self._crl_due or news.crl_number != self._crl_read:
            self._accept_crl(await self.bootstrap.revocations())
            self._crl_due = False
            self._crl_read = news.crl_number
        return await self.bootstrap.list_jobs(after)

    async def _fetch_updates(self, after: int, wait: float | None = None) -> list[tuple[int, Any]]:
        """(A bootstrap without WatchJobs.) This node's jobs after `after`: a long poll of `wait`
        seconds (default LONG_POLL_S), which the bootstrap answers at once when there is a job or
        a newer revocation list than the one this node holds. The revocation list is read first
        when it may have changed: at the first poll, after an error, and after a poll answered
        early with no job (what a newer list does)."""
        wait = LONG_POLL_S if wait is None else wait
        if self._crl_due:
            self._accept_crl(await self.bootstrap.revocations())
            self._crl_due = False
        # the number of the list this node now holds: a newer one answers the poll at once, even
        # one published between the two calls
        held = self.revocations.number
        asked = time.monotonic()
        try:
            jobs = await self.bootstrap.list_jobs(after, wait=wait, crl_number=held)
        except BaseException:
            self._crl_due = True
            raise
        self._crl_due = not jobs and time.monotonic() - asked < wait * CRL_EARLY
        return jobs

    async def _unless_stopped(self, coro: Any) -> Any:
        """Await coro unless the daemon is asked to stop first (then cancel it, return None)."""
        task = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self.stop_event.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return None
        return task.result()

    async def _join(self, ctx: JobContext) -> None:
        try:
            await self.runtime.add_job(ctx)
        except Exception as e:  # the runtime records what it can; say it anyway
            # (a job the node cannot run normally fails inside the runtime, recorded and reported;
            # this is what is left, e.g. a ledger that cannot be written)
            reason = f"cannot run this job: {type(e).__name__}: {e}"
            log.error("[node=%s job=%s] %s", self.node_id, ctx.job_id, reason)
            log.debug("[node=%s job=%s] traceback", self.node_id, ctx.job_id, exc_info=True)
            await self._report_failure(ctx.job_id, reason)

    async def _report_failure(self, job_id: str, reason: str) -> None:
        await self._send_report(
            bootstrap_pb2.NodeResult(
                job_id=job_id,
                node_id=self.node_id,
                state="failed",
                contributed=False,
                detail=reason,
                reported_unix=int(time.time()),
            ),
            "the failure",
        )

    def _set_join_rule(self, registered: bootstrap_pb2.RegisterReply) -> None:
        """Which of the bootstrap's jobs this node may take part in (`NodeRuntime.may_join`): those
        after the latest job at this ledger's first registration with this bootstrap store."""
        if not registered.store_id:  # a bootstrap without store ids: every job, as before
            log.warning(
                "[node=%s] the bootstrap does not number its store: this node cannot tell "
                "the jobs its ledger started after",
                self.node_id,
            )
            self.runtime.set_join_after(None)
            return
        after, new = self.ledger.join_after(registered.store_id, registered.job_seq)
        self.runtime.set_join_after(after)
        if new and after > 0:
            log.warning(
                "[node=%s] ledger %s is new to this bootstrap: it does not take part in "
                "the %d job(s) submitted before it (jobs #1-#%d; those that list this "
                "node end failed here)",
                self.node_id,
                self.ledger.ledger_id,
                after,
                after,
            )
        else:
            log.info(
                "[node=%s] ledger %s joins the bootstrap's jobs after #%d",
                self.node_id,
                self.ledger.ledger_id,
                after,
            )

    def _log_retry(self, e: BaseException, attempt: int, delay: float) -> None:
        """Every retry of a call to the bootstrap, with its address (`BootstrapClient.on_retry`)."""
        log.warning("[node=%s] %s; retry %d in %.1fs", self.node_id, e, attempt, delay)

    async def _register(self, advertise: str) -> bootstrap_pb2.RegisterReply:
        """Register, retried with backoff while the bootstrap is unreachable, every retry logged
        with its address; gives up (TimeoutError: exit 5) when it could not be reached for
        cfg.bootstrap_timeout seconds (0: never)."""
        limit = self.cfg.bootstrap_timeout
        delays = Backoff(
            initial=min(self.cfg.poll_interval, 1.0), maximum=5.0, give_up_after=limit
        ).delays()
        while True:
            try:
                return await self.bootstrap.register(
                    self.node_id,
                    advertise,
                    ledger_id=self.ledger.ledger_id,
                    ledger_created=self.ledger.created,
                    retry_transient=False,
                )
            except grpc.aio.AioRpcError as e:
                if not (is_transient(e) or e.code() == grpc.StatusCode.CANCELLED):
                    raise  # CANCELLED: seen under a registration storm, the call never arrived
                why = f"{e.code().name}: {e.details()}"
            delay = delays.next_sleep()
            if delay is None:
                msg = (
                    f"could not reach the bootstrap at {self.cfg.bootstrap} to register for "
                    f"{limit:g}s ({delays.attempt + 1} attempts; last: {why}); is it running "
                    f"there? (--bootstrap-timeout)"
                )
                log.error("[node=%s] %s; stopping", self.node_id, msg)
                raise TimeoutError(msg)
            log.warning(
                "[node=%s] cannot reach the bootstrap at %s to register (%s); attempt %d, "
                "retrying in %.1fs (giving up after %s: --bootstrap-timeout)",
                self.node_id,
                self.cfg.bootstrap,
                why,
                delays.attempt,
                delay,
                f"{limit:g}s" if limit > 0 else "never",
            )
            await asyncio.sleep(delay)

    async def run(self, ready: asyncio.Future[int] | None = None, *, signals: bool = True) -> int:
        """Serve until stopped. `signals`: install this node's SIGTERM/SIGINT handler (a process
        hosting several nodes installs one for all instead: netdp_node.host)."""
        loop = asyncio.get_running_loop()
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.stop_event.set)
        threads = self.cfg.ledger_threads
        self.ledger = Ledger(
            self.cfg.ledger, self.node_id, executor=write_pool(threads) if threads > 0 else None
        )
        self.ledger.record_budget(self.cfg.budget_epsilon, self.cfg.budget_delta)
        if self.cfg.seed is not None:
            log.warning(
                "[node=%s] %s: --seed makes the private RNG a seeded PCG64; noise and next "
                "hops are predictable (tests only); every job's ledger, privacy report "
                "and result say so",
                self.node_id,
                threat.NOT_PRIVATE,
            )
        started = time.monotonic()
        self.faults = FaultInjector(self.cfg.faults, clock=lambda: time.monotonic() - started)
        if self.cfg.faults.active:
            log.warning(
                "[node=%s] fault injection on: %s", self.node_id, self.cfg.faults.describe()
            )
            if self.cfg.faults.crash_after_s is not None:
                loop.call_later(self.cfg.faults.crash_after_s, self._crash_after)
        # no fault flags: no fault checks on the message path at all
        faults = self.faults if self.cfg.faults.active else None
        self.transport = GrpcTransport(
            self.identity,
            faults=faults,
            on_fault=self._record_fault,
            backoff=Backoff(give_up_after=self.cfg.peer_timeout),
            revocations=lambda: self.revocations,
        )
        budget = (
            Budget(self.cfg.budget_epsilon, self.cfg.budget_delta)
            if self.cfg.budget_epsilon is not None
            else None
        )
        self.runtime = NodeRuntime(
            self.node_id,
            self.ledger,
            self.transport,
            data=self.data,
            budget=budget,
            rng_factory=self._rng,
            job_fetcher=self._fetch_job,
            on_finished=self._on_finished,
            faults=faults,
            job_deadline=self.cfg.job_deadline,
            join_pending=True,
        )
        policy = AccessPolicy(
            is_revoked=lambda s: self.revocations.is_revoked(s), owner=f"node={self.node_id}"
        )
        service = PeerService(
            self.node_id,
            self.runtime.handle,
            self._status,
            policy,
            gate=faults.blocked if faults is not None else None,
            links=self.transport,
        )
        server, self.port = await start_server(
            self.identity,
            self.cfg.listen,
            lambda srv: srv.add_generic_rpc_handlers((service.generic_handler(),)),
        )
        host = self.cfg.listen.rsplit(":", 1)[0]
        advertise = self.cfg.advertise or f"{host}:{self.port}"
        log.info(
            "[node=%s] serving mTLS on %s (advertised %s), ledger %s",
            self.node_id,
            self.cfg.listen.rsplit(":", 1)[0] + f":{self.port}",
            advertise,
            self.ledger.path,
        )
        self.bootstrap = BootstrapClient(
            self.cfg.bootstrap,
            self.identity,
            backoff=Backoff(give_up_after=0),
            on_retry=self._log_retry,
        )
        self.runtime.bulletin = BootstrapBulletin(self.bootstrap)
        try:
            reg = asyncio.ensure_future(self._register(advertise))
            stop = asyncio.ensure_future(self.stop_event.wait())
            await asyncio.wait({reg, stop}, return_when=asyncio.FIRST_COMPLETED)
            if reg.done():
                try:
                    registered = reg.result()
                except ServerIdentityError as e:
                    log.error("[node=%s] %s; stopping", self.node_id, e)
                    raise
                except grpc.aio.AioRpcError as e:
                    if e.code() in (
                        grpc.StatusCode.PERMISSION_DENIED,
                        grpc.StatusCode.UNAUTHENTICATED,
                    ):
                        raise SecurityError(
                            f"the bootstrap refused to register {self.node_id}: {e.details()}"
                        ) from e
                    raise
                self._set_join_rule(registered)
                log.info(
                    "[node=%s] registered with the bootstrap at %s",
                    self.node_id,
                    self.cfg.bootstrap,
                )
                if ready is not None and not ready.done():
                    ready.set_result(self.port)
                await self._poll()
            else:
                reg.cancel()
            stop.cancel()
        finally:
            log.info("[node=%s] shutting down", self.node_id)
            service.stop_links()  # idle peer links end now: only calls in progress get the grace
            await server.stop(self.cfg.grace)
            await self.runtime.close()
            for t in list(self._bg):
                t.cancel()
            await asyncio.gather(*self._bg, return_exceptions=True)
            await self.transport.close()
            self.watch.leave(self.node_id)  # (before its channel closes)
            if self._own_watch:
                await self.watch.close()
            await self.bootstrap.close()
            self.ledger.close()
        return self.exit_code
