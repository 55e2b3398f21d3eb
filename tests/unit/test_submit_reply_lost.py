"""A submission whose reply is lost starts ONE job, with or without --job-id.

The real bootstrap service and store behind real mTLS gRPC on loopback, real certificates, the real
client and CLI; only the first SubmitJob's reply is lost: the bootstrap stores the job, then the
call fails with UNAVAILABLE (a connection dropped after the commit, a timeout on a loaded machine).
The client retries, as it must; the retry has to name the job the first attempt stored, or it
starts a second job and every participant spends its budget twice (what `netdp job submit`
without --job-id did: the bootstrap picked a fresh id for each attempt).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from harness import loopback_pki

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.service import BootstrapService, generic_handler
from netdp_bootstrap.store import Store
from netdp_node import bootstrap_client
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cli import main
from netdp_node.retry import Backoff
from netdp_node.security import pki
from netdp_node.security.mtls import start_server

pytestmark = pytest.mark.timeout(60)
IDS = ["node-1", "node-2", "node-3"]
JOB_ID_FORM = r"job-[0-9a-f]{16}"


class LosesReplies(BootstrapService):
    """The bootstrap's own service, except that the reply of each of the first `lose` SubmitJob
    calls is lost AFTER the service handled it (the job is stored and announced)."""

    def __init__(self, store: Store, ca_pem: bytes, lose: int) -> None:
        super().__init__(store, ca_pem)
        self.lose = lose
        self.requested: list[str] = []  # the job id each SubmitJob call named

    async def SubmitJob(
        self, request: bootstrap_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.SubmitJobReply:
        self.requested.append(request.job_id)
        reply = await super().SubmitJob(request, context)
        if len(self.requested) <= self.lose:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the reply was lost")
        return reply


@dataclass
class Boot:
    address: str
    root: Path
    store: Store
    service: LosesReplies
    clients: list[BootstrapClient] = field(default_factory=list)

    def operator(self, give_up_after: float = 10.0) -> BootstrapClient:
        c = BootstrapClient(
            self.address,
            pki.load_identity(self.root / "operator"),
            backoff=Backoff(give_up_after=give_up_after),
        )
        self.clients.append(c)
        return c

    def jobs(self) -> list[str]:
        return [j.job_id for _, j in self.store.jobs_after(0)]


async def _boot(tmp_path: Path, lose: int) -> AsyncIterator[Boot]:
    root = tmp_path / "pki"
    loopback_pki(root, IDS)
    identity = pki.load_identity(root / "bootstrap")
    store = Store(tmp_path / "state")
    service = LosesReplies(store, identity.ca_pem, lose)
    server, port = await start_server(
        identity,
        "127.0.0.1:0",
        lambda srv: srv.add_generic_rpc_handlers((generic_handler(service),)),
    )
    boot = Boot(f"127.0.0.1:{port}", root, store, service)
    try:
        for i, nid in enumerate(IDS):
            c = BootstrapClient(boot.address, pki.load_identity(root / nid))
            try:
                await c.register(nid, f"127.0.0.1:{7700 + i}")
            finally:
                await c.close()
        yield boot
    finally:
        for c in boot.clients:
            await c.close()
        await server.stop(0.1)
        store.close()


@pytest_asyncio.fixture
async def boot(tmp_path: Path) -> AsyncIterator[Boot]:
    """The first SubmitJob's reply is lost."""
    async for b in _boot(tmp_path, lose=1):
        yield b


@pytest_asyncio.fixture
async def boot_down(tmp_path: Path) -> AsyncIterator[Boot]:
    """Every SubmitJob's reply is lost (until the client gives up)."""
    async for b in _boot(tmp_path, lose=10**6):
        yield b


def _gives_up_after(seconds: float) -> Callable[..., Backoff]:
    """A stand-in for `bootstrap_client.Backoff` whose give-up time is `seconds` whatever the
    client asks for (the client names its own, `functools.partial` would not override it)."""

    def backoff(*args: Any, **kwargs: Any) -> Backoff:
        return Backoff(*args, **{**kwargs, "give_up_after": seconds})

    return backoff


def _submit_argv(b: Boot, *extra: str) -> list[str]:
    return [
        "job",
        "submit",
        "--bootstrap",
        b.address,
        "--certs",
        str(b.root / "operator"),
        "--param",
        "rounds=2",
        *extra,
    ]


async def test_client_submit_without_id_retries_under_one_id(boot: Boot) -> None:
    job = await boot.operator().submit("ring-sum", {"rounds": 3})
    assert boot.jobs() == [job.job_id]  # ONE job: nothing runs or is spent twice
    first, again = boot.service.requested
    assert first == again == job.job_id  # chosen before the first attempt, reused by the retry
    assert job.participants and [p.node_id for p in job.participants] == IDS


async def test_cli_submit_without_job_id_starts_one_job(boot: Boot, capsys: Any) -> None:
    assert await asyncio.to_thread(main, _submit_argv(boot)) == 0
    std = capsys.readouterr()
    out = std.out.split()
    assert len(out) == 1, out  # the job id the user polls, on stdout
    (job_id,) = out
    assert f"submitting job {job_id} to {boot.address}" in std.err  # named before the call
    assert boot.jobs() == [job_id]  # ONE job
    assert boot.service.requested == [job_id, job_id]
    assert re.fullmatch(JOB_ID_FORM, job_id), job_id
    # the printed id is the one to poll
    assert (await boot.operator().get_job(job_id)).job_id == job_id


async def test_submissions_without_id_are_distinct_jobs(boot: Boot) -> None:
    """An id per submission, not per client: two submissions are two jobs."""
    op = boot.operator()
    a = await op.submit("ring-sum", {"rounds": 3})  # its first reply lost: retried
    b = await op.submit("ring-sum", {"rounds": 3})
    assert a.job_id != b.job_id
    assert sorted(boot.jobs()) == sorted([a.job_id, b.job_id])


async def test_cli_names_the_job_when_every_reply_is_lost(
    boot_down: Boot, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client gives up while the bootstrap did store the job: the CLI names the job id to
    poll or to submit again with; submitting again under it re-attaches (still one job)."""
    monkeypatch.setattr(bootstrap_client, "Backoff", _gives_up_after(0.5))
    assert await asyncio.to_thread(main, _submit_argv(boot_down)) == 1
    err = capsys.readouterr().err
    assert len(boot_down.jobs()) == 1  # however many attempts
    (job_id,) = set(boot_down.service.requested)  # every attempt under one id
    assert boot_down.jobs() == [job_id]
    assert "UNAVAILABLE" in err and f"--job-id {job_id}" in err, err
    assert f"job result --bootstrap {boot_down.address}" in err, err
    boot_down.service.lose = 0
    assert await asyncio.to_thread(main, _submit_argv(boot_down, "--job-id", job_id)) == 0
    assert capsys.readouterr().out.split() == [job_id]
    assert boot_down.jobs() == [job_id]
