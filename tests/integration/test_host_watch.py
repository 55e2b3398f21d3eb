"""Idle hosted nodes cost the bootstrap one call per long poll for the whole host process, not one
per node: 50 node daemons in ONE `netdp node` process (real mTLS gRPC on loopback, real ledgers)
against the real bootstrap service, served in this test's process so that every call it answers
is counted (method and caller, from the caller's certificate).

- Idle for 8 long polls (`--long-poll 1`), the bootstrap answers at most one WatchJobs per poll
  (and a little slack) and nothing else; each node holding its own ListJobs long poll made it 50
  calls per poll (400 here).
- A job submitted afterwards still reaches every hosted node at once: each asks its own ListJobs
  with its own certificate, and all 50 report the ring sum done.
- The node whose channel holds the watch is revoked: it stops alone (the bootstrap refuses it), the
  watch goes on through another hosted node, and a job for the other 49 reaches all of them.
- The bootstrap restarts (same state, same port): once it answers again every node asks for its
  jobs, and a job submitted then reaches all of them.
- SIGTERM then stops the process promptly (the revoked node's exit code 3 is the process's).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.service import BootstrapService, generic_handler
from netdp_bootstrap.store import Store
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster, Proc
from netdp_node.errors import SecurityError
from netdp_node.security import pki
from netdp_node.security.mtls import Unauthorized, caller_identity, start_server

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

N = 50
HOST = "host-1"
POLL_S = 1.0  # the host's --long-poll
IDLE_POLLS = 8


class Counted:
    """The bootstrap, in this process: every call it answers, as (method, caller)."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.calls: list[tuple[str, str]] = []
        self.identity = pki.load_identity(c.certs("bootstrap"))

    def _service(self) -> None:
        self.store = Store(self.c.workdir / "bootstrap-state")
        self.svc = BootstrapService(self.store, self.identity.ca_pem, self.c.pki_dir / "crl.pem")
        for m in bootstrap_pb2.DESCRIPTOR.services_by_name["Bootstrap"].methods:
            setattr(self.svc, m.name, self._counted(m.name, getattr(self.svc, m.name)))

    def _counted(self, name: str, real: Any) -> Any:
        async def method(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                who = caller_identity(context).node_id
            except (Unauthorized, SecurityError):
                who = "?"
            self.calls.append((name, who))
            return await real(request, context)

        return method

    async def start(self, listen: str = "127.0.0.1:0") -> None:
        self._service()
        self.server, port = await start_server(
            self.identity,
            listen,
            lambda s: s.add_generic_rpc_handlers((generic_handler(self.svc),)),
        )
        self.crl_watch = asyncio.ensure_future(self.svc.watch_crl(every=0.2))
        log = self.c.logs / "bootstrap.log"
        self.c.procs["bootstrap"] = Proc("bootstrap", [], log, log, None, port)

    async def stop(self) -> None:
        self.svc.stop()
        self.crl_watch.cancel()
        await self.server.stop(1)
        self.store.close()

    async def restart(self) -> None:
        """Stop, then serve again on the same port from the same state."""
        port = self.c.procs["bootstrap"].port
        await self.stop()
        await asyncio.sleep(1.0)  # the nodes' watch finds it gone
        await self.start(f"127.0.0.1:{port}")


@pytest_asyncio.fixture
async def hosted(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    c = LocalCluster(tmp_path / "c", N, poll_interval=0.5)
    c.setup_pki()
    boot = Counted(c)
    await boot.start()
    loop = asyncio.get_running_loop()
    try:
        data = c.workdir / "data"
        data.mkdir()
        for i, nid in enumerate(c.ids):
            (data / f"{nid}.txt").write_text(f"{i / N!r}\n")
        host = c.start_host(HOST, c.ids, data_dir=data, extra=["--long-poll", str(POLL_S)])
        # (blocking: in a thread, so that this loop goes on serving the bootstrap)
        await loop.run_in_executor(None, c.wait_host, host, 120)
        yield c, boot
    finally:
        codes = await loop.run_in_executor(None, c.stop, 30)
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"--- {HOST}\n{c.procs[HOST].log_text()[-6000:]}")
        await boot.stop()
        request.node.host_exit = codes.get(HOST)


async def _all_done(op: BootstrapClient, job: str, ids: list[str], nd: Any) -> None:
    results = await nd.wait_reports(op, job, ids, timeout=120)
    bad = {nid: (r.state, r.detail) for nid, r in results.items() if r.state != "done"}
    assert not bad, bad


@pytest.mark.timeout(600)
async def test_idle_hosted_nodes_cost_one_call_per_poll_and_still_get_every_job(
    hosted: Any, nd: Any
) -> None:
    c, boot = hosted
    # every hosted node listed its jobs and read the revocation list once, with its own certificate
    await _until(nd, lambda: _listed(boot, c.ids), "every hosted node's first listing")
    await asyncio.sleep(2 * POLL_S)  # settle
    start = len(boot.calls)
    await asyncio.sleep(IDLE_POLLS * POLL_S)
    idle = boot.calls[start:]
    methods = {m for m, _ in idle}
    # one WatchJobs per long poll for the whole process (a node holding its own ListJobs long poll
    # made it 50 per poll)
    assert len(idle) <= IDLE_POLLS + 3, (len(idle), sorted(methods))
    assert methods <= {"WatchJobs"}, methods
    assert len({who for _, who in idle}) <= 1  # held through one node's channel

    op = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        before = len(boot.calls)
        await op.submit("ring-sum", {"rounds": 1}, participants=c.ids, seed=1, job_id="ring-a")
        await _all_done(op, "ring-a", c.ids, nd)
        listed = {who for m, who in boot.calls[before:] if m == "ListJobs"}
        assert listed == set(c.ids)  # each node asked for its own jobs, as itself

        # revoke the node holding the watch: it alone stops; the watch goes on through another
        holder = next(who for m, who in reversed(boot.calls) if m == "WatchJobs")
        await op.publish_revocations(pki.revoke(c.pki_dir, holder))
        await _until(
            nd,
            lambda: (
                f"[node={holder}] the bootstrap refuses this node" in c.procs[HOST].log_text()
                and f"[node={holder}] shutting down" in c.procs[HOST].log_text()
            ),
            f"{holder} to stop",
        )
        others = [nid for nid in c.ids if nid != holder]
        mark = len(boot.calls)
        await asyncio.sleep(3 * POLL_S)
        watchers = {who for m, who in boot.calls[mark:] if m == "WatchJobs"}
        assert watchers and holder not in watchers, watchers
        await op.submit("ring-sum", {"rounds": 1}, participants=others, seed=2, job_id="ring-b")
        await _all_done(op, "ring-b", others, nd)
        assert c.procs[HOST].alive()

        # the bootstrap restarts: every node asks again once it answers, and gets the next job
        await boot.restart()
        mark = len(boot.calls)
        await _until(
            nd,
            lambda: {who for m, who in boot.calls[mark:] if m == "ListJobs"} >= set(others),
            "every node's listing after the restart",
        )
        await op.submit("ring-sum", {"rounds": 1}, participants=others, seed=3, job_id="ring-c")
        await _all_done(op, "ring-c", others, nd)
    finally:
        await op.close()
    # a prompt stop: SIGTERM, and the process exits by itself (no SIGKILL) with the revoked
    # node's code
    p = c.procs[HOST].popen
    assert p is not None
    p.send_signal(signal.SIGTERM)
    code = await asyncio.get_running_loop().run_in_executor(None, p.wait, 60)
    assert code == 3, c.procs[HOST].log_text()[-3000:]


async def _until(nd: Any, cond: Any, what: str) -> None:
    async def check() -> bool:
        return bool(cond())

    await nd.await_until(check, 60, what, interval=0.2)


def _listed(boot: Counted, ids: list[str]) -> bool:
    listed = {who for m, who in boot.calls if m == "ListJobs"}
    read = {who for m, who in boot.calls if m == "GetRevocations"}
    return set(ids) <= listed and set(ids) <= read
