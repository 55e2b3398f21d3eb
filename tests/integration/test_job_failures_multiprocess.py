"""A job the nodes cannot run ends `failed`, with every node's reason, for the operator: real
bootstrap and node processes over mTLS, the `netdp` CLI as a subprocess.

The nodes hold values 0.25, 0.5, 0.75: a walk histogram needs integer categories, and a ring sum
of dim 3 needs 3 numbers per node. Neither can run; before, both stayed "running" forever (the
node logged a traceback and told nobody).
"""

from __future__ import annotations

import json
import time

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.ledger import Ledger

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

JOBS = {
    "hist-1": (
        "walk-histogram",
        {"T": 6, "bins": 4},
        "histogram data must be one integer category in 0..3",
    ),
    "dim-1": ("ring-sum", {"rounds": 2, "dim": 3}, "the job expects (3,)"),
}


@pytest.mark.timeout(180)
async def test_jobs_the_nodes_cannot_run_end_failed_with_each_reason(clusters, nd):
    c = clusters(3, values=[0.25, 0.5, 0.75])
    op = BootstrapClient(c.bootstrap_address, c.operator)
    submitted = int(time.time())
    try:
        for job_id, (algorithm, params, _) in JOBS.items():
            await op.submit(algorithm, params, participants=c.ids, job_id=job_id)
        for job_id in JOBS:
            reports = await nd.wait_reports(op, job_id, c.ids, timeout=60)
            for r in reports.values():  # when, in Unix time
                assert submitted - 1 <= r.reported_unix <= int(time.time()) + 1, r
    finally:
        await op.close()
    for job_id, (_, _, reason) in JOBS.items():
        r = nd.netdp(
            "job",
            "result",
            job_id,
            "--bootstrap",
            c.bootstrap_address,
            "--certs",
            str(c.certs("operator")),
            "--json",
        )
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)  # a failed job
        s = json.loads(r.stdout)
        assert s["state"] == "failed" and s["missing"] == [], s
        assert sorted(s["failed"]) == c.ids, s
        for nid, why in s["failed"].items():
            assert "cannot run this job" in why and reason in why, (nid, why)
        text = nd.netdp(
            "job",
            "result",
            job_id,
            "--bootstrap",
            c.bootstrap_address,
            "--certs",
            str(c.certs("operator")),
        )
        assert f"job {job_id}" in text.stdout and ": failed" in text.stdout
        assert sum(f"failed: {nid}:" in text.stdout for nid in c.ids) == 3, text.stdout
        for nid in c.ids:  # in each node's ledger, failed with the same reason
            led = Ledger.open_readonly(c.ledger(nid))
            try:
                row = led.job(job_id)
            finally:
                led.close()
            assert row is not None and row.state == "failed" and row.detail == s["failed"][nid]
    for nid in c.ids:
        log = c.procs[nid].log_text()
        assert "Traceback" not in log, log[-3000:]
        assert all(f"job={job_id}] job failed: cannot run this job" in log for job_id in JOBS)
    # and what can never run is refused at submission: exit 2, naming the parameter
    r = nd.netdp(
        "job",
        "submit",
        "--bootstrap",
        c.bootstrap_address,
        "--certs",
        str(c.certs("operator")),
        "--param",
        "rounds=2.7",
    )
    assert r.returncode == 2 and "rounds" in r.stderr and "Traceback" not in r.stderr, r.stderr
