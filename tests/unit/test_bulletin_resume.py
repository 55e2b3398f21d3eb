"""A node that stops after the step that published on the job's bulletin (its engine finished) and
before it read every other participant's entry takes the reading up again when it restarts on the
same ledger: it publishes the same message again (the bulletin accepts an identical one) and
records each other participant's schedule exactly once; the reading ends with its reason
("bulletin-end"), and a further restart reads nothing again.

Real parts: Muffliato's engines, each node's SQLite ledger, a bootstrap in this process (mTLS gRPC on
loopback, its durable bulletin store) reached through the node's `BootstrapBulletin`; the peers
exchange the rounds' values over the in-memory network. The stop is a node whose bulletin calls
hang (publish, read, or read after a first batch) and whose runtime is then closed, as a daemon
killed at that point leaves its ledger."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from harness import loopback_pki, published_schedules

from netdp_bootstrap.server import BootstrapConfig, run_bootstrap
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.bootstrap_client import BootstrapBulletin, BootstrapClient, job_context
from netdp_node.ledger import Entry, Ledger
from netdp_node.protocols.base import Message
from netdp_node.retry import Backoff
from netdp_node.runtime import BULLETIN_END, NodeRuntime
from netdp_node.security import pki
from netdp_node.simulate import synthetic_data
from netdp_node.transport.base import Bulletin
from netdp_node.transport.memory import MemoryNetwork

pytestmark = pytest.mark.timeout(60)
IDS = ["node-1", "node-2", "node-3", "node-4"]
STOPPED = "node-1"
PARAMS = {"graph": "hypercube", "T": 3, "sigma": 1.0, "round_timeout_s": 0.2}


@pytest.fixture(scope="module")
def pki_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume") / "pki"
    loopback_pki(root, IDS)
    return root


class Boot:
    """A bootstrap in this process, and the clients made for it (closed with it)."""

    def __init__(self, tmp_path: Path, root: Path) -> None:
        self.root = root
        self.state = tmp_path / "bootstrap"
        self.address = ""
        self.clients: list[BootstrapClient] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Future[Any] | None = None

    async def start(self) -> None:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        cfg = BootstrapConfig(
            certs=self.root / "bootstrap", state=self.state, listen="127.0.0.1:0", grace=0.1
        )
        self._task = asyncio.ensure_future(run_bootstrap(cfg, ready, self._stop))
        done, _ = await asyncio.wait(
            {ready, self._task}, timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
        assert ready in done, "the bootstrap did not start"
        self.address = f"127.0.0.1:{ready.result()}"

    def client(self, who: str) -> BootstrapClient:
        c = BootstrapClient(
            self.address, pki.load_identity(self.root / who), backoff=Backoff(give_up_after=5)
        )
        self.clients.append(c)
        return c

    async def stop(self) -> None:
        for c in self.clients:
            await c.close()
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, 30)


@pytest_asyncio.fixture
async def boot(tmp_path: Path, pki_root: Path) -> AsyncIterator[Boot]:
    b = Boot(tmp_path, pki_root)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


class Hang(Bulletin):
    """A node's bulletin whose calls stop at `at` ("publish", "read": the first read, "partial":
    the second read, after a first one that hands over one entry only): they never return, as
    in a process killed there."""

    def __init__(self, inner: Bulletin, at: str) -> None:
        self.inner = inner
        self.at = at
        self.reads = 0

    async def publish(self, job_id: str, msg: Message) -> None:
        if self.at == "publish":
            await asyncio.Event().wait()
        await self.inner.publish(job_id, msg)

    async def read(
        self, job_id: str, kind: str, after: int, wait: float
    ) -> tuple[list[tuple[str, Message]], int, bool]:
        self.reads += 1
        if self.at == "partial" and self.reads == 1:
            # one other participant's entry, once some are there (position unchanged: the next
            # read would take the rest)
            for _ in range(100):
                got, _, _ = await self.inner.read(job_id, kind, 0, 1.0)
                others = [(s, m) for s, m in got if s != STOPPED]
                if others:
                    return others[:1], after, False
            raise AssertionError("no other participant published")
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def schedules(entries: list[Entry]) -> list[str]:
    """The publishers whose schedule the ledger holds (each once: `published_schedules` checks)."""
    return sorted(published_schedules(entries))


async def bounded(aws: list[asyncio.Task[None]], what: str, timeout: float = 30.0) -> None:
    if aws:
        done, pending = await asyncio.wait(aws, timeout=timeout)
        assert not pending, f"{what} did not end within {timeout}s"
        for t in done:
            t.result()


async def wait_for(aw: Awaitable[Any], what: str, timeout: float = 30.0) -> Any:
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what} did not happen within {timeout}s") from None


@pytest.mark.parametrize("at", ["publish", "read", "partial"])
async def test_a_restarted_node_reads_the_bulletin_it_had_not_read(
    boot: Boot, tmp_path: Path, at: str
) -> None:
    for i, nid in enumerate(IDS):
        await boot.client(nid).register(nid, f"127.0.0.1:{7800 + i}")
    spec = await boot.client("operator").submit("muffliato", PARAMS, participants=IDS, job_id="j")
    ctxs = {v: job_context(spec, v) for v in IDS}
    job = spec.job_id
    data, _ = synthetic_data("muffliato", IDS, ctxs[STOPPED].params, 3)
    net = MemoryNetwork(give_up_after=5.0)

    def runtime(nid: str, bulletin: Bulletin) -> NodeRuntime:
        rt = NodeRuntime(
            nid,
            Ledger(tmp_path / nid, nid),
            net.transport(nid),
            data=data[nid],
            bulletin=bulletin,
            bulletin_wait=30.0,
        )
        net.nodes[nid] = rt
        return rt

    hang = Hang(BootstrapBulletin(boot.client(STOPPED)), at)
    rts = {v: runtime(v, hang if v == STOPPED else BootstrapBulletin(boot.client(v))) for v in IDS}
    later: list[NodeRuntime] = []
    try:
        for v in reversed(IDS):
            await rts[v].add_job(ctxs[v])
        for v in IDS:
            await wait_for(rts[v].jobs[job].finished.wait(), f"the job at {v}")
            assert rts[v].jobs[job].state == "done", rts[v].jobs[job].detail
        others = [v for v in IDS if v != STOPPED]
        if at != "publish":  # the others read every entry: STOPPED published
            await bounded([t for v in others for t in rts[v].jobs[job].bulletin_tasks], "reading")
        # STOPPED: its publication is in its ledger, its reading did not end; it stops now
        old = rts[STOPPED]
        es = old.ledger.entries(job)
        (pub,) = [e for e in es if e.event == "publish"]
        assert pub.kind == "schedule" and old.ledger.job(job).state == "done"  # type: ignore[union-attr]
        assert not [e for e in es if e.event == BULLETIN_END]
        before = schedules(es)
        assert len(before) == (1 if at == "partial" else 0)
        await old.close()
        old.ledger.close()
        del net.nodes[STOPPED]

        # the restart, on the same ledger, with a bulletin that answers
        new = runtime(STOPPED, BootstrapBulletin(boot.client(STOPPED)))
        later.append(new)
        runner = await new.add_job(ctxs[STOPPED])
        assert runner.state == "done"  # the job stays done: the reading does not run it again
        assert len(runner.bulletin_tasks) == 1
        await bounded(runner.bulletin_tasks, "the resumed reading")
        # the others end their reading too (with "publish", they waited for STOPPED's entry)
        await bounded([t for v in others for t in rts[v].jobs[job].bulletin_tasks], "reading")

        es = new.ledger.entries(job)
        # every other participant's schedule, each recorded once (the first of "partial" too)
        assert schedules(es) == sorted(others)
        assert set(before) <= set(others)
        (end,) = [e for e in es if e.event == BULLETIN_END]
        assert end.params["kind"] == "schedule" and end.params["read"] == end.params["of"] == 4
        assert end.params["reason"].startswith("complete")
        # one publication in the ledger; the bulletin holds it once, with its digest
        assert [e.digest for e in es if e.event == "publish"] == [pub.digest]
        reply = await boot.client("node-2").read_bulletin(job, "schedule")
        assert sorted(b.node_id for b in reply.entries) == sorted(IDS) and reply.complete
        # the joint view is shown at every node, the restarted one included
        for v in IDS:
            ledger = new.ledger if v == STOPPED else rts[v].ledger
            got, why = ma.sync_schedules(
                ledger.job(job).spec,  # type: ignore[union-attr]
                ledger.entries(job),
                v,
            )
            assert got is not None, (v, why)
            assert schedules(ledger.entries(job)) == sorted(set(IDS) - {v})

        # another restart: the reading ended, nothing is read or recorded again
        await new.close()
        new.ledger.close()
        del net.nodes[STOPPED]
        again = runtime(STOPPED, BootstrapBulletin(boot.client(STOPPED)))
        later.append(again)
        runner = await again.add_job(ctxs[STOPPED])
        assert runner.state == "done" and runner.bulletin_tasks == []
        assert again.ledger.entries(job) == es
    finally:
        for rt in [*rts.values(), *later]:
            await rt.close()
            rt.ledger.close()


def test_the_publish_entry_keeps_the_message_it_names() -> None:
    """What a restart publishes again is the message the "publish" entry's digest names: payload,
    position fields and scalars come back exactly; anything else is not taken for it."""
    from netdp_node.runtime import _message_dict, _stored_message

    def entry(m: Message, stored: dict[str, Any]) -> Entry:
        return Entry("j", "local", "publish", kind=m.kind, digest=m.digest(), params=stored)

    payload = np.array([[0.1, -2.5e-300], [1e300, 3.0]])
    m = Message("note", payload=payload, walk="w", epoch=2, seq=3, round=4, scalars={"0:1": 0.5})
    # as the ledger keeps it: JSON
    back = _stored_message(entry(m, json.loads(json.dumps({"message": _message_dict(m)}))))
    assert back is not None and back.digest() == m.digest()
    assert back.payload is not None and np.array_equal(back.payload, payload)
    assert (back.walk, back.epoch, back.seq, back.round) == ("w", 2, 3, 4)
    assert not back.payload.flags.writeable
    plain = Message("schedule")
    assert _message_dict(plain) == {"scalars": {}}
    assert _stored_message(entry(plain, {"message": _message_dict(plain)})) == plain
    # another message under that digest, a malformed one, none: not taken
    for stored in (
        {"message": {"scalars": {"0:1": 0.0}}},
        {"message": {"scalars": {}, "payload": [1.0, 2.0], "shape": [3]}},
        {"message": "x"},
        {},
    ):
        assert _stored_message(entry(plain, stored)) is None, stored
