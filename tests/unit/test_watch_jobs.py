"""The bootstrap's WatchJobs: a long poll that tells only whether any job or revocation list is new
(the latest job's sequence number and the list's number), which a process holds once for all the
nodes it hosts. The real service on a loopback mTLS server in this process, called by nodes and an
operator with their own certificates.

- held while nothing differs from what the caller knows, for the wait it asked (at most 30 s), then
  answered with the same version and number;
- answered at once when a job is submitted or a newer revocation list accepted during the hold, or
  when the caller's version or number already differs (a first call, a bootstrap whose store was
  replaced);
- a held watch reads no store; a stopping bootstrap answers every held watch at once;
- refused: a wait above 30 s and malformed bytes (INVALID_ARGUMENT), a revoked certificate and a
  role that may not call it (PERMISSION_DENIED).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from harness import Boot, registered_bootstrap

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.service import BootstrapService
from netdp_bootstrap.store import Store
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.security import pki
from netdp_node.security.identity import BOOTSTRAP_NAME, PeerIdentity
from netdp_node.security.mtls import secure_channel

pytestmark = pytest.mark.timeout(60)

NODES = ("node-1", "node-2", "node-3", "node-4")
THREE = ["node-1", "node-2", "node-3"]
RING = {"rounds": 1}


@pytest_asyncio.fixture
async def boot(tmp_path: Path) -> AsyncIterator[Boot]:
    async with registered_bootstrap(tmp_path, NODES) as b:
        yield b


async def test_held_until_the_wait_is_over_when_nothing_is_new(boot: Boot) -> None:
    node = boot.nodes["node-1"]
    assert await node.watch_jobs(0, 0) == (0, 0)  # nothing yet: no job, no list
    t0 = time.monotonic()
    got = await asyncio.wait_for(node.watch_jobs(0, 0, wait=1.5), 20)
    assert got == (0, 0)
    assert time.monotonic() - t0 >= 1.4  # held for the wait it asked


async def test_a_submitted_job_answers_a_held_watch_at_once(boot: Boot) -> None:
    node = boot.nodes["node-4"]
    watch = asyncio.ensure_future(node.watch_jobs(0, 0, wait=30.0))
    await asyncio.sleep(0.5)
    assert not watch.done()  # held
    await boot.operator.submit("ring-sum", RING, participants=THREE, job_id="w-1")
    # answered by the submission, well before its 30 s: also a node that does not take part
    # learns that there is news (and nothing more: the version, not the job)
    assert await asyncio.wait_for(watch, 15) == (1, 0)
    # a caller that already knows version 1 is held again; one that knows 0 is answered at once
    held = asyncio.ensure_future(node.watch_jobs(1, 0, wait=30.0))
    assert await asyncio.wait_for(node.watch_jobs(0, 0, wait=30.0), 15) == (1, 0)
    await asyncio.sleep(0.3)
    assert not held.done()
    await boot.operator.submit("ring-sum", RING, participants=THREE, job_id="w-2")
    assert await asyncio.wait_for(held, 15) == (2, 0)
    # what a node lists is still only its own jobs
    assert await node.list_jobs(0) == []
    assert [j.job_id for _, j in await boot.nodes["node-1"].list_jobs(0)] == ["w-1", "w-2"]


async def test_a_newer_revocation_list_answers_a_held_watch_at_once(boot: Boot) -> None:
    node = boot.nodes["node-1"]
    watch = asyncio.ensure_future(node.watch_jobs(0, 0, wait=30.0))
    await asyncio.sleep(0.5)
    assert not watch.done()
    pki.issue(boot.pki_dir, "node-9", hosts=())
    crl = pki.revoke(boot.pki_dir, "node-9")
    await boot.operator.publish_revocations(crl)
    version, number = await asyncio.wait_for(watch, 15)
    assert version == 0 and number >= 1
    # a caller holding an older number (or none) is answered at once with the new one
    assert await asyncio.wait_for(node.watch_jobs(0, number - 1, wait=30.0), 15) == (0, number)


async def test_bad_input_and_callers_are_refused(boot: Boot) -> None:
    node = boot.nodes["node-1"]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await node.call(
            "WatchJobs", bootstrap_pb2.WatchJobsRequest(wait_ms=30_001), retry_transient=False
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "wait_ms must be at most 30000, got 30001" in (e.value.details() or "")
    # bytes that are not a WatchJobsRequest
    channel = secure_channel(
        boot.address, pki.load_identity(boot.pki_dir / "node-1"), BOOTSTRAP_NAME
    )
    try:
        raw = channel.unary_unary("/netdp.v1.Bootstrap/WatchJobs")
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw(b"\x0a\xff\xff", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed WatchJobsRequest" in (e.value.details() or "")
    finally:
        await channel.close()
    # a role that may not call it: the bootstrap's own certificate
    other = BootstrapClient(boot.address, pki.load_identity(boot.pki_dir / "bootstrap"))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await other.watch_jobs(0, 0, retry_transient=False)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await other.close()
    # a revoked node
    await boot.operator.publish_revocations(pki.revoke(boot.pki_dir, "node-2"))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await boot.nodes["node-2"].watch_jobs(0, 0, retry_transient=False)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "revoked" in (e.value.details() or "")
    # operators may watch too
    assert (await boot.operator.watch_jobs(0, 0))[1] >= 1


def _service(tmp_path: Path) -> tuple[BootstrapService, Store, list[str]]:
    pki.init_ca(tmp_path / "pki")
    store = Store(tmp_path / "state")
    svc = BootstrapService(store, (tmp_path / "pki" / "ca.pem").read_bytes())
    me = PeerIdentity("node-1", "node", 7, datetime(2100, 1, 1, tzinfo=timezone.utc))

    async def auth(context: object, roles: tuple[str, ...], what: str) -> PeerIdentity:
        return me

    svc._auth = auth  # type: ignore[method-assign]  # no TLS session here: the caller is node-1
    reads: list[str] = []
    for name in ("jobs_after", "current_seq", "job", "nodes", "crl"):
        real = getattr(store, name)

        def counted(*args, _real=real, _name=name):  # type: ignore[no-untyped-def]
            reads.append(_name)
            return _real(*args)

        setattr(store, name, counted)
    return svc, store, reads


async def test_a_held_watch_reads_no_store_and_ends_when_the_bootstrap_stops(
    tmp_path: Path,
) -> None:
    svc, store, reads = _service(tmp_path)
    try:
        watches = [
            asyncio.ensure_future(
                svc.WatchJobs(bootstrap_pb2.WatchJobsRequest(wait_ms=30_000), None)  # type: ignore[arg-type]
            )
            for _ in range(3)
        ]
        await asyncio.sleep(0.3)
        assert not any(w.done() for w in watches)
        assert reads == []
        svc.stop()  # held watches are answered now, not at the end of the server's grace
        replies = await asyncio.wait_for(asyncio.gather(*watches), 10)
        assert [(r.version, r.crl_number) for r in replies] == [(0, 0)] * 3
        assert reads == []
    finally:
        store.close()
