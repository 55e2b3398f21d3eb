"""Real processes stop promptly on SIGTERM: a node in a long poll to the bootstrap, with peers whose
links into it stay open, and a bootstrap holding the nodes' long polls, exit 0 before the SIGKILL
fallback of `LocalCluster.stop` (the demo's), even with a long --shutdown-grace: only calls in
progress get the grace; idle links and held polls end at once.

Before the fix an idle peer link (a stream that never ends by itself) held the node's
`server.stop(grace)` for the whole grace, so with --shutdown-grace 60 the node outlived the
fallback; with the default 2 s grace, a cluster stopped at once always waited it out, and on a
loaded machine the demo SIGKILLed nodes."""

from __future__ import annotations

import asyncio
import signal
import subprocess

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.waiting import await_progress

pytestmark = pytest.mark.slow

#: The SIGKILL fallback of LocalCluster.stop and of the demo (`demo.STOP_GRACE`).
FALLBACK = 8.0
GRACE = ["--shutdown-grace", "60"]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "c", 3)
    try:
        c.start(extra={nid: GRACE for nid in c.ids}, timeout=60)
        yield c
    finally:
        c.stop()


async def _run_job(c: LocalCluster) -> None:
    """A ring sum over the three nodes, to its end: every node has links to the others open."""
    client = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        job = await client.submit(
            "ring-sum",
            {"rounds": 2, "epsilon": 0.5, "delta": 1e-6, "clip": 1.0, "delta_prime": 1e-6},
            participants=c.ids,
        )

        async def reported() -> bool:
            return len((await client.result(job.job_id)).results) == len(c.ids)

        await await_progress(reported, "every node to report", stall=60, progress=c.progress())
    finally:
        await client.close()


def _stopped(c: LocalCluster, name: str) -> int:
    """SIGTERM `name`; its exit code, if it exited before the fallback would SIGKILL it."""
    p = c.procs[name]
    assert p.popen is not None and p.alive()
    p.popen.send_signal(signal.SIGTERM)
    try:
        return p.popen.wait(timeout=FALLBACK)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{name} still running {FALLBACK:g} s after SIGTERM (the SIGKILL fallback):\n"
            + p.log_text()[-3000:]
        )


def test_a_node_in_a_long_poll_stops_at_once_on_sigterm(cluster):
    asyncio.run(_run_job(cluster))
    # node-1 is back in its long poll, node-2's and node-3's links into it are open and idle
    assert _stopped(cluster, "node-1") == 0
    log = cluster.procs["node-1"].log_text()
    assert "[node=node-1] shutting down" in log and "Traceback" not in log
    # the others did not notice anything worth a warning, and stop as promptly
    for nid in ("node-2", "node-3"):
        assert _stopped(cluster, nid) == 0


def test_the_bootstrap_holding_long_polls_stops_at_once_on_sigterm(cluster):
    asyncio.run(_run_job(cluster))
    assert _stopped(cluster, "bootstrap") == 0
    # the nodes outlive it, saying where they cannot reach it (every retry is logged)
    for nid in cluster.ids:
        assert cluster.procs[nid].alive()
    for nid in cluster.ids:
        assert _stopped(cluster, nid) == 0
        log = cluster.procs[nid].log_text()
        assert "Traceback" not in log
