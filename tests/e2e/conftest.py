"""Fixtures of the network-namespace tests (tests/e2e); the machinery is in e2e_netns.py.

`netns_support` (session): skips every test that needs namespaces, with the reason, unless this
process can create a namespace, a veth pair and a bridge (root or CAP_SYS_ADMIN, iproute2's `ip`);
then deletes what earlier runs killed with SIGKILL left behind (`sweep_orphans`).

`netns_cluster` (function): a factory; each call builds a fresh topology (a bridge namespace and
one namespace per host, random tag and /24), certificates for the hosts' addresses, a bootstrap and
n registered nodes. Its finalizer ALWAYS runs (failure, pytest-timeout, Ctrl-C): it stops the
processes, then deletes every namespace, dumps the daemons' logs if the test failed, and fails the
test's teardown if a namespace could not be deleted.
"""

from __future__ import annotations

import secrets
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from e2e_netns import (
    _LIVE_NAMESPACES,
    IpError,
    NetnsCluster,
    Topology,
    delete_namespaces,
    ip,
    sweep_orphans,
)


@pytest.fixture(scope="session")
def netns_support() -> None:
    """Skip (with the reason) unless this process can create namespaces, veths and a bridge."""
    if not sys.platform.startswith("linux"):
        pytest.skip("network namespaces need Linux")
    if shutil.which("ip") is None:
        pytest.skip("network namespace tests need iproute2's `ip` command, which is not installed")
    probe = f"ndp-pr-{secrets.token_hex(3)}"
    peer = f"ndp-pq-{secrets.token_hex(3)}"
    try:
        ip("netns", "add", probe)
    except IpError as e:
        pytest.skip(f"cannot create a network namespace (needs root or CAP_SYS_ADMIN): {e}")
    _LIVE_NAMESPACES.add(probe)
    try:
        ip("netns", "add", peer)
        _LIVE_NAMESPACES.add(peer)
        ip("-n", probe, "link", "add", "br0", "type", "bridge")
        ip("link", "add", "v0", "netns", peer, "type", "veth", "peer", "name", "p0", "netns", probe)
        ip("-n", probe, "link", "set", "p0", "master", "br0")
    except IpError as e:
        pytest.skip(f"network namespaces work but a veth pair or a bridge cannot be made: {e}")
    finally:
        delete_namespaces([probe, peer])
    left = sweep_orphans()
    if left:
        sys.stderr.write(f"\ndeleted namespaces left by an earlier, killed run: {left}\n")


@pytest.fixture
def netns_cluster(
    netns_support: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., NetnsCluster]]:
    """`netns_cluster(n, values=..., extra=..., peer_timeout=..., job_deadline=...)`: a fresh
    topology, certificates, a bootstrap and n registered nodes. Always torn down: processes first,
    then every namespace."""
    made: list[NetnsCluster] = []

    def make(
        n: int = 5,
        *,
        values: Sequence[float] | None = None,
        extra: dict[str, list[str]] | None = None,
        **kw: Any,
    ) -> NetnsCluster:
        topo = Topology(n)
        c = NetnsCluster(tmp_path / f"cluster-{len(made)}", topo, **kw)
        made.append(c)  # before creating anything: the finalizer must see half-built clusters
        topo.create()
        c.start(values=values, extra=extra)
        return c

    yield make

    rep = getattr(request.node, "rep_call", None)
    leaks: list[str] = []
    for c in made:
        try:
            c.stop()
        finally:
            if rep is not None and rep.failed:
                c.dump_logs()
            leaks += c.topo.destroy()
    assert not leaks, f"namespaces could not be deleted: {leaks}"
