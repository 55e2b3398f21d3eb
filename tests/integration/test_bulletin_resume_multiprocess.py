"""A node SIGKILLed after it finished a Muffliato job (its schedule published in its ledger) and
before it read the bulletin reads it when it comes back (real processes, real SIGKILL, mTLS gRPC,
a real bootstrap and real ledgers on disk).

The bootstrap is SIGKILLed while the job runs (the nodes need it only to learn the job): every node
finishes, records its publication and retries the upload while the bootstrap is down. Then VICTIM
is SIGKILLed, its ledger saying done with no schedule of the others, and the bootstrap and VICTIM
come back on the same state. VICTIM publishes again and reads the bulletin: its ledger records each
other participant's schedule once, the reading's end with its reason, and its report shows the
joint view; the others read VICTIM's schedule too.
"""

from __future__ import annotations

import signal
import sqlite3

import pytest
from harness import ledger_job_row, published_schedules

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.errors import LedgerError
from netdp_node.ledger import Entry, Ledger
from netdp_node.privacy import muffliato_accountant as ma
from netdp_node.report import ledger_report
from netdp_node.runtime import BULLETIN_END

pytestmark = pytest.mark.slow

VICTIM = "node-3"


def _entries(ledger_dir, job: str) -> list[Entry]:
    try:
        led = Ledger.open_readonly(ledger_dir)
    except (LedgerError, sqlite3.Error):
        return []
    try:
        return led.entries(job)
    finally:
        led.close()


def _schedules(es: list[Entry]) -> list[str]:
    return sorted(published_schedules(es))  # (each publisher once)


@pytest.mark.timeout(300)
async def test_a_node_killed_before_reading_the_bulletin_reads_it_after_its_restart(clusters, nd):
    cluster = clusters(4, values=[0.1, 0.2, 0.3, 0.4])
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    job = "bulletin-unread"
    port = cluster.procs["bootstrap"].port
    others = [v for v in cluster.ids if v != VICTIM]
    try:
        # plain steps: the joint view is determined even if an edge of a round did not realise
        params = {
            "graph": "hypercube",
            "sigma": 0.05,
            "T": 60,
            "accelerated": False,
            "round_timeout_s": 5.0,
        }
        await op.submit("muffliato", params, participants=cluster.ids, job_id=job)
        nd.wait_until(
            lambda: all(ledger_job_row(cluster.ledger(p), job) for p in cluster.ids),
            30,
            "every node to join the job",
        )
        cluster.kill("bootstrap", signal.SIGKILL)
        nd.wait_until(
            lambda: all(
                (r := ledger_job_row(cluster.ledger(p), job)) is not None and r.state == "done"
                for p in cluster.ids
            ),
            90,
            "every ledger to record the job done",
            interval=0.2,
        )
        cluster.kill(VICTIM, signal.SIGKILL)
        # the setup holds: VICTIM published in its ledger, read nothing, its reading did not end
        es = _entries(cluster.ledger(VICTIM), job)
        assert [e.kind for e in es if e.event == "publish"] == ["schedule"]
        assert _schedules(es) == [] and not [e for e in es if e.event == BULLETIN_END]
        assert "bulletin publish failed" in cluster.procs[VICTIM].log_text()

        cluster.wait_port(cluster.start_bootstrap(listen=f"127.0.0.1:{port}"), timeout=30)
        data = cluster.workdir / "data" / f"{VICTIM}.txt"
        cluster.wait_port(cluster.start_node(VICTIM, data=data), timeout=30)

        def ended(p: str) -> bool:
            return any(e.event == BULLETIN_END for e in _entries(cluster.ledger(p), job))

        # (before the fix: VICTIM found the job done in its ledger and never read the bulletin)
        nd.wait_until(
            lambda: len(_schedules(_entries(cluster.ledger(VICTIM), job))) == len(others),
            90,
            f"{VICTIM}'s ledger to record the others' schedules",
            interval=0.5,
        )
        nd.wait_until(lambda: ended(VICTIM), 30, f"{VICTIM}'s reading to end", interval=0.5)
        nd.wait_until(
            lambda: all(ended(p) for p in others), 90, "the others' readings to end", interval=0.5
        )
        for p in cluster.ids:
            es = _entries(cluster.ledger(p), job)
            assert _schedules(es) == sorted(set(cluster.ids) - {p}), p  # each once
            (end,) = [e for e in es if e.event == BULLETIN_END]
            assert end.params["read"] == end.params["of"] == 4, (p, end.params)
            assert end.params["reason"].startswith("complete"), (p, end.params)
            report = ledger_report(cluster.ledger(p), job_id=job)["jobs"][0]
            assert report["state"] == "done"
            assert ma.JOINT_VIEW in report["baselines"], (p, sorted(report["baselines"]))
        bulletin = await op.read_bulletin(job, "schedule")
        assert sorted(b.node_id for b in bulletin.entries) == sorted(cluster.ids)
        assert bulletin.complete
        assert "resuming the reading of the bulletin" in cluster.procs[VICTIM].log_text()
    finally:
        await op.close()
    codes = cluster.stop()
    assert codes == {name: 0 for name in codes}, codes
