"""Shared fixtures of the multi-process tests (tests/integration, tests/security).

`clusters` / `module_clusters` build `LocalCluster`s (real OS processes on 127.0.0.1, mTLS) and
always stop them in a finalizer, even when starting them failed half-way. `nd` is a small toolbox
for the tests: bounded waits, raw Peer calls, envelopes, and the `netdp` CLI as a subprocess.

Every wait here is a loop on a condition with a deadline; nothing sleeps to synchronise.

(This file also makes pytest put tests/ on sys.path, which `from harness import ...` relies on.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
import numpy as np
import pytest

from netdp.v1 import bootstrap_pb2, common_pb2, peer_pb2
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Entry, Ledger
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import CHANNEL_OPTIONS, secure_channel
from netdp_node.security.pki import Identity
from netdp_node.waiting import (
    DEFAULT_LIMIT,
    Probe,
    await_progress,
    probes,
    tree_size,
    wait_progress,
)

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
CALL_TIMEOUT = 10.0
DELIVER = "/netdp.v1.Peer/Deliver"
STATUS = "/netdp.v1.Peer/Status"


# -- the fast tier on every core ----------------------------------------------------------------
#: Most pytest-xdist workers plain `pytest` starts (the fast tier: pure code, engines in memory,
#: small loopback; independent tests). `NETDP_TEST_WORKERS=0` runs it in one process.
FAST_TIER_WORKERS = 4


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Plain `pytest` (no paths, no -m of its own, no -n) runs the fast tier on up to
    FAST_TIER_WORKERS cores with pytest-xdist: on the 2-core machine about 2 min instead of
    3.5. Anything else stays in one process: named files (quicker without workers to start),
    the slow tier and CI's both tiers (multi-process tests must not compete for the cores)."""
    if getattr(config.option, "numprocesses", "absent") is not None:
        return  # -n given, or pytest-xdist not installed / disabled (-p no:xdist)
    if hasattr(config, "workerinput") or config.getoption("usepdb", False):
        return
    if (
        config.option.markexpr != "not slow"
        or config.args_source != pytest.Config.ArgsSource.TESTPATHS
    ):
        return
    wanted = os.environ.get("NETDP_TEST_WORKERS", "").strip()
    workers = int(wanted) if wanted.isdigit() else min(os.cpu_count() or 1, FAST_TIER_WORKERS)
    if workers > 1:
        config.option.numprocesses = workers


# -- per-test time limits -----------------------------------------------------------------------
#: The least per-test pytest-timeout of a multi-process test (`slow`): above the hard bound of any
#: one progress-aware wait (waiting.DEFAULT_LIMIT), so that under load a wait that still advances
#: is never cut short by pytest-timeout. A test that is really stuck fails earlier, at the stall
#: bound of the wait it is in. Unit tests keep pyproject's `timeout = 120`.
SLOW_TEST_TIMEOUT = 2 * DEFAULT_LIMIT


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None:
            continue
        marker = item.get_closest_marker("timeout")
        current = None
        if marker is not None:
            current = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if current is None or current < SLOW_TEST_TIMEOUT:
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT), append=False)


# -- failure diagnostics ------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def _dump_logs(cluster: LocalCluster, tail: int = 4000) -> None:
    for name, p in cluster.procs.items():
        sys.stderr.write(f"\n----- {name} ({p.log}) -----\n{p.log_text()[-tail:]}\n")


# -- clusters -----------------------------------------------------------------------------------
class ClusterFactory:
    """Makes started clusters; `stop_all` (the fixture finalizer) stops every one of them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[LocalCluster] = []

    def __call__(
        self,
        n: int,
        *,
        values: Sequence[float] | None = None,
        seed: int | None = None,
        poll_interval: float = 0.2,
        timeout: float = 60.0,
    ) -> LocalCluster:
        """A bootstrap and n nodes, started and registered. `values`: one private value per node
        (written to data files, so every node contributes); `seed`: seeds each node's RNG."""
        c = LocalCluster(self.root / f"cluster-{len(self.made)}", n, poll_interval=poll_interval)
        self.made.append(c)  # before starting: the finalizer must see half-started clusters too
        data = write_values(c, values) if values is not None else None
        extra = (
            {nid: ["--seed", str(seed * 1000 + i)] for i, nid in enumerate(c.ids)}
            if seed is not None
            else None
        )
        c.start(data=data, extra=extra, timeout=timeout)  # returns once every node registered
        return c

    def stop_all(self, dump: bool = False) -> None:
        for c in self.made:
            for p in c.procs.values():  # a SIGSTOPped process acts on SIGTERM only once continued
                if p.alive() and p.popen is not None:
                    p.popen.send_signal(signal.SIGCONT)
            c.stop()
            if dump:
                _dump_logs(c)


def write_values(c: LocalCluster, values: Sequence[float]) -> dict[str, Path]:
    if len(values) != c.n:
        raise ValueError(f"{len(values)} values for {c.n} nodes")
    return c.write_data({nid: repr(float(v)) for nid, v in zip(c.ids, values)})


@pytest.fixture
def clusters(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterFactory]:
    f = ClusterFactory(tmp_path)
    yield f
    rep = getattr(request.node, "rep_call", None)
    f.stop_all(dump=rep is not None and rep.failed)


@pytest.fixture(scope="module")
def module_clusters(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ClusterFactory]:
    failed = request.session.testsfailed
    f = ClusterFactory(tmp_path_factory.mktemp("clusters"))
    yield f
    f.stop_all(dump=request.session.testsfailed > failed)


# -- the toolbox --------------------------------------------------------------------------------
class Toolbox:
    CALL_TIMEOUT = CALL_TIMEOUT

    # waits
    @staticmethod
    def wait_until(
        cond: Callable[[], T],
        timeout: float,
        what: str,
        interval: float = 0.05,
        *,
        progress: Probe | None = None,
        limit: float | None = None,
    ) -> T:
        """Poll `cond` until it returns something truthy. Without `progress`: TimeoutError after
        `timeout` seconds. With a progress probe (e.g. `progress(cluster)`): TimeoutError once
        the probe has not changed for `timeout` seconds, or after `limit` (default
        waiting.DEFAULT_LIMIT) in all: a loaded machine makes the wait longer, not red."""
        return wait_progress(
            cond, what, stall=timeout, limit=limit, progress=progress, interval=interval
        )

    @staticmethod
    async def await_until(
        cond: Callable[[], Awaitable[T]],
        timeout: float,
        what: str,
        interval: float = 0.05,
        *,
        progress: Probe | None = None,
        limit: float | None = None,
    ) -> T:
        """`wait_until` for an async condition."""
        return await await_progress(
            cond, what, stall=timeout, limit=limit, progress=progress, interval=interval
        )

    @staticmethod
    def progress(cluster: LocalCluster) -> Probe:
        """Progress of a cluster: its processes' CPU time and logs, and its ledgers' sizes."""
        return probes(
            cluster.progress(), *[lambda n=n: tree_size(cluster.ledger(n)) for n in cluster.ids]
        )

    # envelopes
    @staticmethod
    def envelope(
        job_id: str,
        kind: str = "token",
        seq: int = 1,
        payload: Any = (0.0,),
        walk: str = "ring",
        msg_id: int = 1,
    ) -> peer_pb2.Envelope:
        env = peer_pb2.Envelope(job_id=job_id, kind=kind, walk_id=walk, seq=seq, msg_id=msg_id)
        if payload is not None:
            a = np.asarray(payload, dtype=np.float64)
            env.payload.CopyFrom(
                common_pb2.Tensor(
                    dtype="float64", shape=list(a.shape), data=a.astype("<f8").tobytes()
                )
            )
        return env

    # raw Peer calls from the test process
    @staticmethod
    async def deliver_raw(
        address: str,
        creds: grpc.ChannelCredentials | Identity,
        raw: bytes,
        options: list[tuple[str, Any]] | None = None,
    ) -> peer_pb2.Ack:
        """Deliver exactly these bytes (no client-side serialisation). Raises AioRpcError.
        The server is verified by the address (the clusters' certificates name 127.0.0.1)."""
        if isinstance(creds, Identity):
            ch = grpc.aio.secure_channel(address, _creds(creds), options=options or CHANNEL_OPTIONS)
        else:
            ch = grpc.aio.secure_channel(address, creds, options=options or CHANNEL_OPTIONS)
        try:
            call = ch.unary_unary(
                DELIVER, request_serializer=None, response_deserializer=peer_pb2.Ack.FromString
            )
            return await call(raw, timeout=CALL_TIMEOUT)
        finally:
            await ch.close()

    @classmethod
    async def deliver(
        cls, address: str, creds: grpc.ChannelCredentials | Identity, env: peer_pb2.Envelope
    ) -> peer_pb2.Ack:
        return await cls.deliver_raw(address, creds, env.SerializeToString())

    @classmethod
    async def deliver_code(
        cls, address: str, creds: grpc.ChannelCredentials | Identity, raw: bytes
    ) -> tuple[grpc.StatusCode, str]:
        """The status code (and details) a Deliver of these bytes gets."""
        try:
            await cls.deliver_raw(address, creds, raw)
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details() or ""
        return grpc.StatusCode.OK, ""

    @staticmethod
    async def status(
        address: str, identity: Identity, node_id: str | None = None
    ) -> peer_pb2.StatusReply:
        """The node's Status (operators only). `node_id`: verify the server is that node (as netdp
        does); without it, verify the address (the clusters' certificates name 127.0.0.1)."""
        ch = (
            secure_channel(address, identity, peer_name(node_id))
            if node_id is not None
            else grpc.aio.secure_channel(address, _creds(identity), options=CHANNEL_OPTIONS)
        )
        try:
            call = ch.unary_unary(
                STATUS,
                request_serializer=peer_pb2.StatusRequest.SerializeToString,
                response_deserializer=peer_pb2.StatusReply.FromString,
            )
            return await call(peer_pb2.StatusRequest(), timeout=CALL_TIMEOUT)
        finally:
            await ch.close()

    @classmethod
    async def job_status(
        cls, address: str, identity: Identity, job_id: str
    ) -> peer_pb2.JobStatus | None:
        for j in (await cls.status(address, identity)).jobs:
            if j.job_id == job_id:
                return j
        return None

    # bootstrap
    @classmethod
    async def wait_reports(
        cls, client: BootstrapClient, job_id: str, ids: Sequence[str], timeout: float
    ) -> dict[str, bootstrap_pb2.NodeResult]:
        """Poll GetResult until every node of `ids` reported; returns {node: result}."""

        async def reported() -> dict[str, bootstrap_pb2.NodeResult] | None:
            got = {r.node_id: r for r in (await client.result(job_id)).results}
            return got if set(ids) <= set(got) else None

        return await cls.await_until(
            reported, timeout, f"{list(ids)} to report job {job_id}", interval=0.1
        )

    # ledgers
    @staticmethod
    def entries(ledger_dir: Path, job_id: str) -> list[Entry]:
        led = Ledger.open_readonly(ledger_dir)
        try:
            return led.entries(job_id)
        finally:
            led.close()

    # the CLI, as a subprocess
    @staticmethod
    def netdp(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "netdp_node.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    @classmethod
    def privacy_report(cls, ledger_dir: Path, job_id: str | None = None) -> dict[str, Any]:
        args = ["privacy", "report", "--ledger", str(ledger_dir), "--json"]
        if job_id:
            args += ["--job", job_id]
        r = cls.netdp(*args)
        assert r.returncode == 0, f"privacy report failed ({r.returncode}): {r.stderr}"
        return json.loads(r.stdout)

    @staticmethod
    def procs_mentioning(text: str) -> list[tuple[int, str]]:
        """Live processes whose command line contains `text` (scans /proc)."""
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmd and state != "Z":
                found.append((int(d.name), cmd))
        return found

    @classmethod
    def reap(cls, text: str) -> list[tuple[int, str]]:
        """SIGKILL the live processes mentioning `text` (so a failing test leaks none into the
        others) and return them: a test asserts the list is empty."""
        leftovers = cls.procs_mentioning(text)
        for pid, _ in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return leftovers


def _creds(identity: Identity) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=identity.ca_pem,
        private_key=identity.key_pem,
        certificate_chain=identity.cert_pem,
    )


@pytest.fixture(scope="session")
def nd() -> type[Toolbox]:
    return Toolbox
