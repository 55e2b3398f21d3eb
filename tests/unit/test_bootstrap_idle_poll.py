"""An idle node's long poll costs the bootstrap two reads of its store, not one per second: with
1,000 nodes hosted in a few processes (`netdp demo --workers`), 1,000 held ListJobs calls woke the
bootstrap 1,000 times a second before. A new --crl file still ends every held poll (one watcher for
the whole service)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.service import BootstrapService
from netdp_bootstrap.store import Store
from netdp_node.security import pki
from netdp_node.security.identity import PeerIdentity


def _service(tmp_path: Path, crl: Path | None = None) -> tuple[BootstrapService, Store, list[int]]:
    pki.init_ca(tmp_path / "pki")
    store = Store(tmp_path / "state")
    svc = BootstrapService(store, (tmp_path / "pki" / "ca.pem").read_bytes(), crl)
    me = PeerIdentity("node-1", "node", 7, datetime(2100, 1, 1, tzinfo=timezone.utc))

    async def auth(context: object, roles: tuple[str, ...], what: str) -> PeerIdentity:
        return me

    svc._auth = auth  # type: ignore[method-assign]  # no TLS session here: the caller is node-1
    reads: list[int] = []
    real = store.jobs_after

    def counted(after: int):  # type: ignore[no-untyped-def]
        reads.append(after)
        return real(after)

    store.jobs_after = counted  # type: ignore[method-assign]
    return svc, store, reads


async def test_a_held_poll_reads_the_store_once_until_there_is_news(tmp_path: Path) -> None:
    svc, store, reads = _service(tmp_path)
    try:
        reply = await svc.ListJobs(bootstrap_pb2.ListJobsRequest(after=0, wait_ms=3000), None)
        assert list(reply.jobs) == []
        # once when called, once when the wait is over (whatever its length)
        assert len(reads) <= 2, f"the held call read the store {len(reads)} times"
    finally:
        store.close()


async def test_a_new_crl_file_still_ends_a_held_poll(tmp_path: Path) -> None:
    crl = tmp_path / "pki" / "crl.pem"
    svc, store, _ = _service(tmp_path, crl)
    watcher = asyncio.ensure_future(svc.watch_crl(every=0.05))
    try:
        poll = asyncio.ensure_future(
            svc.ListJobs(bootstrap_pb2.ListJobsRequest(after=0, wait_ms=30_000), None)
        )
        await asyncio.sleep(0.3)
        assert not poll.done()
        pki.issue(tmp_path / "pki", "node-2", hosts=())
        pki.revoke(tmp_path / "pki", "node-2")  # writes a newer crl.pem
        reply = await asyncio.wait_for(poll, 20)  # bounded: ended by the news, not the 30 s
        assert list(reply.jobs) == [] and svc.revocations.number >= 1
    finally:
        watcher.cancel()
        store.close()


async def test_shutting_down_answers_the_held_polls(tmp_path: Path) -> None:
    """Held polls end when the bootstrap stops (the server would otherwise cancel each at the end
    of its grace period, an error logged per node)."""
    svc, store, _ = _service(tmp_path)
    try:
        polls = [
            asyncio.ensure_future(
                svc.ListJobs(bootstrap_pb2.ListJobsRequest(after=0, wait_ms=30_000), None)
            )
            for _ in range(3)
        ]
        await asyncio.sleep(0.2)
        assert not any(p.done() for p in polls)
        svc.stop()
        replies = await asyncio.wait_for(asyncio.gather(*polls), 20)
        assert all(list(r.jobs) == [] for r in replies)
    finally:
        store.close()
