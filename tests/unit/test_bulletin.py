"""The jobs' public bulletin at the bootstrap (Publish, ReadBulletin): a real bootstrap in this
process (mTLS gRPC on loopback, its durable store in tmp_path), real certificates, the real client.

One entry per (job, participant, kind), the publisher being the identity of its certificate: an
identical re-publication is accepted (a retry), another one refused (FAILED_PRECONDITION); a
non-participant is refused (PERMISSION_DENIED), an unknown job is NOT_FOUND, a malformed request
INVALID_ARGUMENT; a read long-polls until an entry comes and says when every participant has
published; the entries survive a restart of the bootstrap. The in-memory bulletin of the simulator
and tests (`MemoryBoard`) has the same rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import numpy as np
import pytest
import pytest_asyncio
from harness import loopback_pki

from netdp.v1 import bootstrap_pb2, peer_pb2
from netdp_bootstrap.server import BootstrapConfig, run_bootstrap
from netdp_node.bootstrap_client import BootstrapBulletin, BootstrapClient
from netdp_node.protocols.base import Message
from netdp_node.retry import Backoff
from netdp_node.security import pki
from netdp_node.transport.base import DeliveryError
from netdp_node.transport.memory import MemoryBoard

pytestmark = pytest.mark.timeout(60)
IDS = ["node-1", "node-2", "node-3", "node-4"]
PARTS = IDS[:3]  # node-4 is registered, not a participant


class Bootstrap:
    def __init__(self, tmp_path: Path, pki_root: Path) -> None:
        self.root = pki_root
        self.state = tmp_path / "state"
        self.address = ""
        self.clients: list[BootstrapClient] = []
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Future[Any] | None = None

    async def start(self) -> None:
        self._stop = asyncio.Event()
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        cfg = BootstrapConfig(
            certs=self.root / "bootstrap",
            state=self.state,
            listen=self.address or "127.0.0.1:0",
            grace=0.1,
        )
        self._task = asyncio.ensure_future(run_bootstrap(cfg, ready, self._stop))
        done, _ = await asyncio.wait(
            {ready, self._task}, timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
        assert ready in done, "the bootstrap did not start"
        self.address = f"127.0.0.1:{ready.result()}"

    async def stop(self) -> None:
        for c in self.clients:
            await c.close()
        self.clients.clear()
        assert self._stop is not None and self._task is not None
        self._stop.set()
        await asyncio.wait_for(self._task, 30)

    def client(self, who: str) -> BootstrapClient:
        c = BootstrapClient(
            self.address, pki.load_identity(self.root / who), backoff=Backoff(give_up_after=5)
        )
        self.clients.append(c)
        return c


@pytest.fixture(scope="module")
def pki_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The certificates, made once for the module (each test has its own bootstrap and store)."""
    root = tmp_path_factory.mktemp("bulletin") / "pki"
    loopback_pki(root, IDS)
    return root


@pytest_asyncio.fixture
async def boot(tmp_path: Path, pki_root: Path) -> AsyncIterator[Bootstrap]:
    b = Bootstrap(tmp_path, pki_root)
    await b.start()
    for i, nid in enumerate(IDS):
        await b.client(nid).register(nid, f"127.0.0.1:{7700 + i}")
    await b.client("operator").submit(
        "ring-sum", {"rounds": 1}, participants=PARTS, topology="ring", job_id="j1"
    )
    try:
        yield b
    finally:
        await b.stop()


def sched(missing: dict[str, float] | None = None) -> Message:
    return Message("schedule", scalars=missing or {})


async def refused(coro: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


async def test_publish_once_per_participant_and_read_in_order(boot: Bootstrap) -> None:
    n1, n2, n3 = (boot.client(n) for n in PARTS)
    first = sched({"0:1": 0.0})
    assert await n1.publish("j1", first) is False
    # a retry of the same entry is accepted, nothing changes
    assert await n1.publish("j1", first) is True
    # another entry of the same kind from the same node is refused
    e = await refused(n1.publish("j1", sched({"0:2": 0.0})))
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and "already" in e.details()
    # another kind is another entry
    assert await n1.publish("j1", Message("other")) is False
    r = await n2.read_bulletin("j1", "schedule")
    # the publisher is the certificate's identity; the stored message is the one published
    assert [b.node_id for b in r.entries] == ["node-1"]
    assert dict(r.entries[0].entry.scalars) == {"0:1": 0.0}
    assert r.next == 1 and not r.complete
    await n3.publish("j1", sched())
    await n2.publish("j1", sched())
    r = await n1.read_bulletin("j1", "schedule", after=1)
    assert [b.node_id for b in r.entries] == ["node-3", "node-2"] and r.next == 3 and r.complete
    # nothing after the last: an empty, complete answer at once
    r = await n1.read_bulletin("j1", "schedule", after=3, wait=10.0)
    assert list(r.entries) == [] and r.complete and r.next == 3


async def test_refusals_name_the_status(boot: Bootstrap) -> None:
    n1, n4 = boot.client("node-1"), boot.client("node-4")
    e = await refused(n4.publish("j1", sched()))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "node-4" in e.details()
    e = await refused(n4.read_bulletin("j1", "schedule"))
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED
    e = await refused(n1.publish("nope", sched()))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    e = await refused(n1.read_bulletin("nope", "schedule"))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    bad: list[tuple[Callable[[], Any], str]] = [
        (lambda: bootstrap_pb2.PublishRequest(job_id="j1"), "entry is missing"),
        (
            lambda: bootstrap_pb2.PublishRequest(entry=peer_pb2.Envelope(kind="schedule")),
            "job_id",
        ),
        (
            lambda: bootstrap_pb2.PublishRequest(
                job_id="j1", entry=peer_pb2.Envelope(kind="schedule", job_id="j2")
            ),
            "entry.job_id",
        ),
        (
            lambda: bootstrap_pb2.PublishRequest(
                job_id="j1", entry=peer_pb2.Envelope(kind="bad kind!")
            ),
            "entry.kind",
        ),
        (
            lambda: bootstrap_pb2.PublishRequest(
                job_id="j1", entry=peer_pb2.Envelope(kind="schedule", scalars={"x": float("nan")})
            ),
            "not finite",
        ),
    ]
    for make, why in bad:
        e = await refused(n1.call("Publish", make(), retry_transient=False))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (why, e.details())
        assert why in e.details()
    e = await refused(
        n1.call("ReadBulletin", bootstrap_pb2.ReadBulletinRequest(job_id="j1", kind=""))
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "kind" in e.details()
    # bytes that are not a PublishRequest
    e = await refused(n1.channel.unary_unary("/netdp.v1.Bootstrap/Publish")(b"\xff\xff\xff"))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    # none of it was stored
    r = await n1.read_bulletin("j1", "schedule")
    assert list(r.entries) == []


async def test_read_long_polls_until_an_entry_comes(boot: Bootstrap) -> None:
    n1, n2 = boot.client("node-1"), boot.client("node-2")
    poll = asyncio.ensure_future(n2.read_bulletin("j1", "schedule", wait=25.0))
    await asyncio.sleep(0.5)
    assert not poll.done()  # held: nothing published yet
    await n1.publish("j1", sched())
    r = await asyncio.wait_for(poll, 20.0)  # woken by the entry, not by the wait's end
    assert [b.node_id for b in r.entries] == ["node-1"] and not r.complete


async def test_entries_survive_a_restart_of_the_bootstrap(boot: Bootstrap) -> None:
    await boot.client("node-1").publish("j1", sched({"1:2": 0.0}))
    await boot.stop()
    await boot.start()
    n2 = boot.client("node-2")
    r = await n2.read_bulletin("j1", "schedule")
    assert [(b.node_id, dict(b.entry.scalars)) for b in r.entries] == [("node-1", {"1:2": 0.0})]
    e = await refused(boot.client("node-1").publish("j1", sched()))
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_the_runtime_adapter_maps_statuses(boot: Bootstrap) -> None:
    """`BootstrapBulletin` (what a node daemon's runtime uses): refusals as DeliveryError codes,
    entries back as Messages with their digest."""
    b1, b4 = BootstrapBulletin(boot.client("node-1")), BootstrapBulletin(boot.client("node-4"))
    m = sched({"0:1": 0.0})
    await b1.publish("j1", m)
    await b1.publish("j1", m)
    with pytest.raises(DeliveryError) as ex:
        await b1.publish("j1", sched())
    assert ex.value.code == "FAILED_PRECONDITION"
    with pytest.raises(DeliveryError) as ex:
        await b4.read("j1", "schedule", 0, 0.0)
    assert ex.value.code == "PERMISSION_DENIED"
    got, nxt, final = await b1.read("j1", "schedule", 0, 0.0)
    assert [(s, x.digest()) for s, x in got] == [("node-1", m.digest())]
    assert nxt == 1 and not final


async def test_memory_board_has_the_same_rules() -> None:
    board = MemoryBoard()
    board.add_job("j1", PARTS)
    b1, b2, b4 = (board.bulletin(n) for n in ("node-1", "node-2", "node-4"))
    m = Message("schedule", payload=np.zeros(0), scalars={"0:1": 0.0})
    await b1.publish("j1", m)
    await b1.publish("j1", m)  # identical: accepted
    codes = []
    for call in (
        lambda: b1.publish("j1", sched()),
        lambda: b4.publish("j1", sched()),
        lambda: b4.read("j1", "schedule", 0, 0.0),
        lambda: b1.publish("nope", sched()),
    ):
        with pytest.raises(DeliveryError) as ex:
            await call()
        codes.append(ex.value.code)
    assert codes == ["FAILED_PRECONDITION", "PERMISSION_DENIED", "PERMISSION_DENIED", "NOT_FOUND"]
    poll = asyncio.ensure_future(b1.read("j1", "schedule", 1, 5.0))
    await asyncio.sleep(0)
    assert not poll.done()
    await b2.publish("j1", sched())
    got, nxt, final = await poll
    assert [s for s, _ in got] == ["node-2"] and nxt == 2 and not final
    board.close("j1")  # nothing more will come: the readers are told so at once
    got, nxt, final = await b1.read("j1", "schedule", 2, 5.0)
    assert got == [] and final


async def test_large_entries_come_in_several_replies(boot: Bootstrap) -> None:
    """A reply carries at most about 2 MiB of entries (gRPC's message limit is 4 MiB); the reader
    asks again after `next` for the rest; an entry over 1 MiB is refused."""
    big = {n: Message("blob", payload=np.full(100_000, float(i))) for i, n in enumerate(PARTS)}
    for n in PARTS:
        await boot.client(n).publish("j1", big[n])
    reader = boot.client("node-1")
    r = await reader.read_bulletin("j1", "blob")
    assert [b.node_id for b in r.entries] == PARTS[:2] and r.next == 2 and not r.complete
    r = await reader.read_bulletin("j1", "blob", after=r.next)
    assert [b.node_id for b in r.entries] == PARTS[2:] and r.next == 3 and r.complete
    e = await refused(
        reader.publish("j1", Message("huge", payload=np.zeros(140_000)), retry_transient=False)
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes" in e.details()
