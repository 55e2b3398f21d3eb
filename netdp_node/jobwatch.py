"""One watch of the bootstrap's news per process, shared by every node the process hosts.

A node learns its jobs from the bootstrap's ListJobs (only the jobs it takes part in, by its
certificate) and the revocation list from GetRevocations. If every node held a ListJobs long poll
of its own, idle nodes would cost the bootstrap one call per node per wait (1,000 nodes: 40 calls a
second). Instead a process holds ONE WatchJobs long poll, on the bootstrap channel of one of its
nodes: the bootstrap answers it as soon as its job version (the latest job's sequence number) or
its revocation list's number differs from the caller's, else after `wait` seconds. On news, every
hosted node asks its own ListJobs, which does not wait (and GetRevocations when the list's number
changed), as it did before: what a node learns, and through which certificate, is unchanged. A
process with a single node runs the same watch with that one member.

The watch publishes `News`: a generation number, raised at every change it sees, and after every
failed call once the bootstrap answers again (the nodes then ask again whether anything changed or
not: a restarted bootstrap is asked by every node). A node lists its jobs when the generation
differs from the one it listed at (`changed`), which it reads BEFORE its own ListJobs: news that
comes during the listing raises the generation again, so nothing is missed.

Who holds the watch: the first member (in order of joining) whose certificate the bootstrap did not
refuse. A member that leaves (its node stops) has its call cancelled at once, before its channel
closes, and the watch goes on through the next member: a node's stop never waits for the watch. A
member refused (PERMISSION_DENIED or UNAUTHENTICATED: its certificate revoked) is skipped from then
on, and the generation is raised so that it, like every node, asks its own ListJobs (which refuses
it too, and it stops as before). A bootstrap without WatchJobs (an older version: UNIMPLEMENTED)
turns the watch into `legacy` news: each node then long-polls its own ListJobs as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace

import grpc
import grpc.aio

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.errors import ServerIdentityError
from netdp_node.retry import Backoff

log = logging.getLogger("netdp.node")

#: The longest pause between two tries of a watch while the bootstrap cannot be reached.
MAX_BACKOFF_S = 10.0
_REFUSED = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


@dataclass(frozen=True)
class News:
    """What the watch last learned. `generation` 0: nothing yet (a node waits for the first)."""

    generation: int = 0
    version: int = 0  # the bootstrap's latest job sequence number
    crl_number: int = 0  # the number of the bootstrap's revocation list
    legacy: bool = False  # the bootstrap has no WatchJobs: each node long-polls ListJobs itself


class JobWatch:
    def __init__(self, *, wait: float, poll_interval: float = 0.5) -> None:
        """`wait`: how long the bootstrap may hold each watch (at most 30 s). `poll_interval`:
        the pause before asking again after an answer that came at once with nothing new (a
        bootstrap that does not hold calls, or one stopping), and the first retry delay."""
        self.wait = wait
        self.poll_interval = poll_interval
        self.news = News()
        self._changed = asyncio.Event()
        self._members: dict[str, BootstrapClient] = {}  # in order of joining
        self._refused: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._call: tuple[str, asyncio.Future[tuple[int, int]]] | None = None

    # -- the members' side ---------------------------------------------------------------------
    def join(self, member: str, client: BootstrapClient) -> None:
        """Node `member` (registered) follows the news from now on; its `client` may carry the
        watch. Starts the watch if it is not running."""
        self._members[member] = client
        if self.news.legacy:
            return  # the bootstrap has no watch: each node long-polls its own ListJobs
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def leave(self, member: str) -> None:
        """Node `member` stops (idempotent): the watch no longer uses its channel (a call on it is
        cancelled now); the last member to leave ends the watch."""
        if self._members.pop(member, None) is None:
            return
        self._refused.discard(member)
        if self._call is not None and self._call[0] == member:
            self._call[1].cancel()
        if not self._members and self._task is not None:
            self._task.cancel()
            self._task = None  # a member joining now starts another

    async def changed(self, generation: int) -> News:
        """The news once its generation differs from `generation` (at once if it does already, or
        when the bootstrap has no watch: legacy)."""
        while self.news.generation == generation and not self.news.legacy:
            await self._changed.wait()
        return self.news

    async def close(self) -> None:
        """End the watch (every member has normally left already)."""
        self._members.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- the watch -----------------------------------------------------------------------------
    def _publish(self, news: News) -> None:
        self.news = news
        woken, self._changed = self._changed, asyncio.Event()
        woken.set()

    def _holder(self) -> tuple[str, BootstrapClient] | None:
        for member, client in self._members.items():
            if member not in self._refused:
                return member, client
        return None

    def _policy(self) -> Backoff:
        return Backoff(initial=self.poll_interval, maximum=MAX_BACKOFF_S, give_up_after=0)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delays = self._policy().delays()
        failed = False  # a call failed since the last answer: raise the generation on the next
        while self._members:
            holder = self._holder()
            if holder is None:  # every member refused: they learn it from their own calls
                self._refused.clear()
                await asyncio.sleep(delays.next_delay())
                continue
            member, client = holder
            asked = loop.time()
            call = asyncio.ensure_future(
                client.watch_jobs(
                    self.news.version,
                    self.news.crl_number,
                    # the first call, and the first after a failure, is answered at once
                    wait=self.wait if self.news.generation and not failed else 0.0,
                    retry_transient=False,
                )
            )
            self._call = (member, call)
            try:
                await asyncio.wait({call})
            finally:
                if self._call is not None and self._call[1] is call:
                    self._call = None
                if not call.done():  # this task was cancelled (close, or the last member left)
                    call.cancel()
            if call.cancelled():
                continue  # its member left: go on through the next one
            error = call.exception()
            if error is None:
                version, crl = call.result()
                if failed:
                    log.info(
                        "[watch node=%s] the bootstrap at %s answers again: every node of this "
                        "process asks for its jobs",
                        member,
                        client.address,
                    )
                news = self.news
                if (
                    failed
                    or not news.generation
                    or (version, crl) != (news.version, news.crl_number)
                ):
                    self._publish(News(news.generation + 1, version, crl))
                elif loop.time() - asked < min(self.poll_interval, self.wait):
                    await asyncio.sleep(self.poll_interval)  # answered at once with nothing new
                failed = False
                delays = self._policy().delays()
                continue
            if isinstance(error, grpc.aio.AioRpcError) and error.code() in _REFUSED:
                log.error(
                    "[watch node=%s] the bootstrap refuses this node's watch (%s: %s); "
                    "watching through another node",
                    member,
                    error.code().name,
                    error.details(),
                )
                self._refused.add(member)
                # every node asks its own ListJobs: the refused one learns it is refused there
                self._publish(replace(self.news, generation=self.news.generation + 1))
                continue
            if (
                isinstance(error, grpc.aio.AioRpcError)
                and error.code() == grpc.StatusCode.UNIMPLEMENTED
            ):
                log.warning(
                    "[watch node=%s] the bootstrap at %s has no WatchJobs (an older version): "
                    "every node of this process long-polls its own ListJobs",
                    member,
                    client.address,
                )
                self._publish(replace(self.news, generation=self.news.generation + 1, legacy=True))
                return
            failed = True
            delay = delays.next_delay()
            why = (
                f"{error.code().name}: {error.details()}"
                if isinstance(error, grpc.aio.AioRpcError)
                else f"{type(error).__name__}: {error}"
            )
            log.warning(
                "[watch node=%s] cannot watch the bootstrap at %s (%s); jobs already fetched keep "
                "running; retrying in %.1fs",
                member,
                client.address,
                why if not isinstance(error, ServerIdentityError) else str(error),
                delay,
            )
            await asyncio.sleep(delay)
