"""A node that finished a job but was SIGKILLed before its report reached the bootstrap reports it
when it comes back (real processes, real SIGKILL, real ledgers on disk).

The bootstrap is SIGKILLed while a ring job runs (the nodes need it only to learn the job): the
job finishes at every node, whose reports are retried while the bootstrap is down; then one node
is SIGKILLed, its ledger saying done and its report never delivered, and another is stopped
(SIGTERM: it exits at once, without waiting for the bootstrap). All come back on the same state:
`netdp job result` ends with every node done, with the contributions their ledgers hold.
"""

from __future__ import annotations

import json
import signal

import pytest
from harness import ledger_job_row

from netdp_node.bootstrap_client import BootstrapClient

pytestmark = pytest.mark.slow

VICTIM = "node-3"  # SIGKILLed
OTHER = "node-4"  # stopped (SIGTERM)


@pytest.mark.timeout(240)
async def test_a_node_killed_before_its_report_reports_after_its_restart(clusters, nd):
    cluster = clusters(4, values=[0.1, 0.2, 0.3, 0.4])
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    job = "ring-unreported"
    port = cluster.procs["bootstrap"].port
    try:
        await op.submit("ring-sum", {"rounds": 80}, participants=cluster.ids, job_id=job)
        # every node joined (they learn the job from the bootstrap): the ring needs it no more
        nd.wait_until(
            lambda: all(ledger_job_row(cluster.ledger(p), job) for p in cluster.ids),
            30,
            "every node to join the job",
        )
        cluster.kill("bootstrap", signal.SIGKILL)
        # the setup holds: nobody had reported when the bootstrap died
        assert f"{VICTIM} reported" not in cluster.procs["bootstrap"].log_text()

        def finished() -> bool:
            rows = [ledger_job_row(cluster.ledger(p), job) for p in (VICTIM, OTHER)]
            return all(r is not None and r.state == "done" for r in rows)

        nd.wait_until(finished, 90, f"{VICTIM}'s and {OTHER}'s ledgers to record the job done")
        cluster.kill(VICTIM, signal.SIGKILL)  # its report was being retried: lost with it
        row = ledger_job_row(cluster.ledger(VICTIM), job)
        assert row is not None and row.contributed
        # a graceful stop does not wait for the bootstrap: the retry is dropped, the node exits 0
        # (cluster.kill waits at most 15 s)
        cluster.kill(OTHER, signal.SIGTERM)
        assert cluster.procs[OTHER].popen.returncode == 0

        cluster.wait_port(cluster.start_bootstrap(listen=f"127.0.0.1:{port}"), timeout=30)
        for nid in (VICTIM, OTHER):
            data = cluster.workdir / "data" / f"{nid}.txt"
            cluster.wait_port(cluster.start_node(nid, data=data), timeout=30)

        # (before the fix: the node found the job done in its ledger and never reported it)
        r = nd.netdp(
            "job",
            "result",
            job,
            "--bootstrap",
            cluster.bootstrap_address,
            "--certs",
            str(cluster.certs("operator")),
            "--wait",
            "60",
            "--json",
            timeout=120,
        )
        summary = json.loads(r.stdout)
        assert r.returncode == 0 and summary["state"] == "done", (r.returncode, summary)
        assert summary["missing"] == [] and summary["failed"] == {}, summary
        # its report is its ledger's: the released value (the same as everyone's), contributions
        assert summary["value"] is not None and summary["outputs_agree"], summary
        for nid in (VICTIM, OTHER):
            es = nd.entries(cluster.ledger(nid), job)
            assert nid in summary["contributors"]
            assert summary["contributions"][nid] == sum(1 for e in es if e.event == "contribute")
            assert summary["contributions"][nid] >= 1
        # OTHER was retrying its report when it stopped (the log of its first run)
        assert (
            "could not report the result (done) to the bootstrap, retrying"
            in cluster.procs[OTHER].log_text()
        )
    finally:
        await op.close()
    codes = cluster.stop()
    assert codes == {name: 0 for name in codes}, codes
