"""One watch of the bootstrap's news per process (netdp_node.jobwatch), shared by its nodes.

Against a scripted bootstrap (no network): one WatchJobs call per wait however many nodes follow
the watch; news wakes every node, and each then lists its own jobs (and reads the revocation list
only when its number changed); a node that stops has the watch's call on its channel cancelled at
once, and the watch goes on through another node; a refused node is skipped; an outage ends with
every node asked to list again; a bootstrap without WatchJobs turns every node to its own long
poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from netdp.v1 import common_pb2
from netdp_node.daemon import NodeDaemon
from netdp_node.jobwatch import JobWatch, News
from netdp_node.security.identity import RevocationList

pytestmark = pytest.mark.timeout(60)


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Bootstrap:
    """The bootstrap's news: a job version and a list number; `changed()` after changing them."""

    def __init__(self) -> None:
        self.version = 0
        self.crl = 0
        self.news = asyncio.Event()
        self.watches: list[tuple[str, int, float]] = []  # (client, version asked, wait)
        self.cancelled: list[str] = []
        self.jobs: list[tuple[int, common_pb2.JobSpec]] = []
        self.lists: list[tuple[str, int]] = []  # ListJobs: (client, after)
        self.crl_reads: list[str] = []

    def changed(self) -> None:
        self.news.set()
        self.news = asyncio.Event()

    def submit(self, job_id: str, participants: list[str]) -> None:
        self.version += 1
        job = common_pb2.JobSpec(job_id=job_id, algorithm="ring-sum")
        for p in participants:
            job.participants.add(node_id=p, address="127.0.0.1:1")
        self.jobs.append((self.version, job))
        self.changed()


class Client:
    """A node's bootstrap client, as the watch and the daemon use it."""

    def __init__(self, name: str, boot: Bootstrap) -> None:
        self.name = name
        self.boot = boot
        self.address = "127.0.0.1:7600"
        self.fail: list[BaseException] = []  # raised by the next watch calls, in order

    async def watch_jobs(
        self, version: int, crl_number: int, *, wait: float = 0.0, retry_transient: bool = True
    ) -> tuple[int, int]:
        b = self.boot
        b.watches.append((self.name, version, wait))
        if self.fail:
            raise self.fail.pop(0)
        try:
            if (b.version, b.crl) == (version, crl_number):
                news = b.news
                try:
                    await asyncio.wait_for(news.wait(), wait)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            b.cancelled.append(self.name)
            raise
        return b.version, b.crl

    async def list_jobs(
        self, after: int = 0, *, wait: float = 0.0, crl_number: int = 0
    ) -> list[tuple[int, common_pb2.JobSpec]]:
        assert wait == 0.0  # the daemon's listing never waits (the watch does)
        self.boot.lists.append((self.name, after))
        return [
            (s, j)
            for s, j in self.boot.jobs
            if s > after and self.name in {p.node_id for p in j.participants}
        ]

    async def revocations(self) -> bytes:
        self.boot.crl_reads.append(self.name)
        return b""


async def until(cond: Any, what: str, limit: float = 10.0) -> None:
    """Bounded: until `cond()` holds, at most `limit` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"not within {limit} s: {what}")
        await asyncio.sleep(0.01)


async def test_one_watch_call_per_wait_however_many_members() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=0.2, poll_interval=0.05)
    clients = [Client(f"node-{i}", boot) for i in range(50)]
    for c in clients:
        watch.join(c.name, c)  # type: ignore[arg-type]
    try:
        first = await asyncio.wait_for(watch.changed(0), 10)  # the first answer, at once
        assert (first.generation, first.version, first.legacy) == (1, 0, False)
        woken = asyncio.ensure_future(watch.changed(first.generation))
        await asyncio.sleep(1.1)  # about 5 waits, nothing new
        assert not woken.done()
        assert {name for name, _, _ in boot.watches} == {"node-0"}  # one member holds it
        assert 3 <= len(boot.watches) <= 9  # the first (no wait) and one per wait, not 50 per wait
        assert [w for _, _, w in boot.watches][:2] == [0.0, 0.2]
        boot.submit("job-1", ["node-3"])
        news = await asyncio.wait_for(woken, 10)  # woken by the news, not by the end of a wait
        assert (news.generation, news.version) == (2, 1)
    finally:
        await watch.close()


async def _two_members_held(watch: JobWatch, boot: Bootstrap, a: Client, b: Client) -> News:
    """`a` and `b` join `watch`; once the first news is out and the watch held (through `a`)."""
    watch.join(a.name, a)  # type: ignore[arg-type]
    watch.join(b.name, b)  # type: ignore[arg-type]
    seen = await asyncio.wait_for(watch.changed(0), 10)
    await until(lambda: len(boot.watches) == 2, "the held watch")
    return seen


async def test_a_member_that_leaves_hands_the_watch_on_at_once() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0, poll_interval=0.05)
    a, b = Client("node-a", boot), Client("node-b", boot)
    try:
        seen = await _two_members_held(watch, boot, a, b)
        assert boot.watches[-1] == ("node-a", 0, 30.0)
        watch.leave(a.name)  # no await: a stopping node never waits for the watch
        await until(lambda: boot.cancelled == ["node-a"], "node-a's call cancelled")
        await until(lambda: boot.watches[-1][0] == "node-b", "the watch through node-b")
        assert watch.news == seen  # nothing new: no listing asked of the nodes
        boot.submit("job-1", ["node-b"])
        news = await asyncio.wait_for(watch.changed(seen.generation), 10)
        assert news.version == 1
        watch.leave(b.name)  # the last member: the watch ends
        await until(lambda: boot.cancelled == ["node-a", "node-b"], "node-b's call cancelled")
        assert watch._task is None
        calls = len(boot.watches)
        await asyncio.sleep(0.2)
        assert len(boot.watches) == calls
        watch.join(b.name, b)  # type: ignore[arg-type]  # a member again: the watch runs again
        await until(lambda: len(boot.watches) == calls + 1, "the watch again")
    finally:
        await watch.close()


async def test_a_refused_member_is_skipped_and_every_node_lists() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0, poll_interval=0.05)
    a, b = Client("node-a", boot), Client("node-b", boot)
    try:
        seen = await _two_members_held(watch, boot, a, b)
        a.fail.append(rpc_error(grpc.StatusCode.PERMISSION_DENIED, "revoked"))
        boot.crl = 1  # (its certificate was revoked)
        boot.changed()
        news = await asyncio.wait_for(watch.changed(seen.generation), 10)
        assert news.crl_number == 1
        news = await asyncio.wait_for(watch.changed(news.generation), 10)  # the refusal
        assert (news.crl_number, news.legacy) == (1, False)
        await until(lambda: boot.watches[-1][0] == "node-b", "the watch through node-b")
        assert all(name == "node-b" for name, _, _ in boot.watches[4:])
    finally:
        await watch.close()


async def test_after_an_outage_every_node_lists_again() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0, poll_interval=0.01)
    a = Client("node-a", boot)
    a.fail += [rpc_error(grpc.StatusCode.UNAVAILABLE, "down")] * 3
    watch.join(a.name, a)  # type: ignore[arg-type]
    try:
        news = await asyncio.wait_for(watch.changed(0), 10)
        # three failures, then an answer at once (no wait) that changes nothing but is news
        assert (news.generation, news.version) == (1, 0)
        await until(lambda: len(boot.watches) == 5, "the held watch")
        assert [w for _, _, w in boot.watches] == [0.0] * 4 + [30.0]
        a.fail.append(rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting"))
        boot.changed()  # (the fake answers its held call; the next call fails)
        news = await asyncio.wait_for(watch.changed(1), 10)
        assert (news.generation, news.version) == (2, 0)  # asked again after the failure
    finally:
        await watch.close()


async def test_a_bootstrap_without_the_watch_turns_every_node_to_its_long_poll() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0)
    a = Client("node-a", boot)
    a.fail.append(rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!"))
    watch.join(a.name, a)  # type: ignore[arg-type]
    try:
        news = await asyncio.wait_for(watch.changed(0), 10)
        assert news.legacy
        assert (await asyncio.wait_for(watch.changed(news.generation), 10)).legacy  # at once
        await asyncio.sleep(0.1)
        assert len(boot.watches) == 1  # the watch ended
        b = Client("node-b", boot)
        watch.join(b.name, b)  # type: ignore[arg-type]  # a node registering later: no new watch
        assert (await asyncio.wait_for(watch.changed(0), 10)).legacy
        await asyncio.sleep(0.1)
        assert len(boot.watches) == 1
    finally:
        await watch.close()


# -- the daemon's side ------------------------------------------------------------------------
class Runtime:
    def __init__(self) -> None:
        self.jobs: dict[str, Any] = {}

    def may_join(self, job_id: str, seq: int) -> bool:
        return True

    async def add_job(self, ctx: Any) -> None:
        self.jobs[ctx.job_id] = ctx


class Transport:
    def learn(self, addresses: dict[str, str]) -> None:
        pass

    def revocations_changed(self) -> None:
        pass


def _node(name: str, boot: Bootstrap, watch: JobWatch) -> NodeDaemon:
    from netdp_node.daemon import NodeConfig

    node = NodeDaemon.__new__(NodeDaemon)  # the polling state only; no certificate needed here
    node.cfg = NodeConfig(certs=None, bootstrap="", ledger=None, poll_interval=0.05)  # type: ignore[arg-type]
    node.node_id = name
    node.bootstrap = Client(name, boot)  # type: ignore[assignment]
    node.watch = watch
    node.revocations = RevocationList.empty()
    node._crl_due = True
    node._crl_read = None
    node.stop_event = asyncio.Event()
    node.exit_code = 0
    node._bg = set()
    node.runtime = Runtime()  # type: ignore[assignment]
    node.transport = Transport()  # type: ignore[assignment]
    return node


async def test_hosted_nodes_list_their_own_jobs_on_news_and_stop_at_once() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0, poll_interval=0.05)
    nodes = [_node(f"node-{i}", boot, watch) for i in range(1, 11)]
    polls = [asyncio.ensure_future(n._poll()) for n in nodes]
    try:
        # every node lists once at the start, and reads the list once
        await until(lambda: len(boot.lists) == 10, "the first listings")
        assert sorted(boot.crl_reads) == sorted(n.node_id for n in nodes)
        await asyncio.sleep(0.3)
        assert len(boot.lists) == 10 and len(boot.watches) == 2  # idle: one held watch
        # a job for three of them: every node lists (the watch tells no participants), the three
        # join it; nobody reads the list (its number did not change)
        boot.submit("job-1", ["node-1", "node-2", "node-3"])
        await until(lambda: len(boot.lists) == 20, "the listings after the job")
        await until(
            lambda: all("job-1" in n.runtime.jobs for n in nodes[:3]), "the participants join"
        )
        assert not any(n.runtime.jobs for n in nodes[3:])
        assert len(boot.crl_reads) == 10
        # the next listing starts after the version the watch reported: job-1 is not read again
        assert {after for _, after in boot.lists[10:]} == {0}
        boot.crl = 1
        boot.changed()
        await until(lambda: len(boot.crl_reads) == 20, "every node reads the newer list")
        assert {after for _, after in boot.lists[20:]} == {1}
        # the node whose channel holds the watch stops: at once, and the watch goes on
        holder = boot.watches[-1][0]
        n = next(n for n in nodes if n.node_id == holder)
        n.stop_event.set()
        await asyncio.wait_for(polls[nodes.index(n)], 5)
        await until(lambda: holder in boot.cancelled, "its call cancelled")
        await until(lambda: boot.watches[-1][0] != holder, "the watch through another node")
        boot.submit("job-2", ["node-9", "node-10", "node-8"])
        await until(lambda: all("job-2" in m.runtime.jobs for m in nodes[7:]), "job-2 reaches them")
    finally:
        for n in nodes:
            n.stop_event.set()
        await asyncio.wait_for(asyncio.gather(*polls), 10)
        await watch.close()
    assert watch._task is None  # the last node out ended the watch


async def test_legacy_news_makes_the_node_long_poll_itself() -> None:
    boot = Bootstrap()
    watch = JobWatch(wait=30.0)
    watch.news = News(generation=1, legacy=True)
    node = _node("node-1", boot, watch)
    waits: list[float] = []

    async def fetch(after: int, wait: float | None = None) -> list[Any]:
        waits.append(wait or 0.0)
        await asyncio.sleep(0.05)
        return []

    node._fetch_updates = fetch  # type: ignore[method-assign]
    node.cfg = node.cfg.__class__(**{**node.cfg.__dict__, "long_poll": 7.0})
    task = asyncio.ensure_future(node._follow())
    try:
        await until(lambda: len(waits) >= 3, "long polls")
        assert set(waits) == {7.0} and boot.lists == []
    finally:
        node.stop_event.set()
        await asyncio.wait_for(task, 5)
