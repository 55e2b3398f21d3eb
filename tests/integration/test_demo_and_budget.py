"""`netdp demo` stops every process on Ctrl-C; a node over budget declines across real processes and
the job result says so."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.jobs import result_summary, wait_result

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_demo_ctrl_c_stops_everything(tmp_path, nd):
    workdir = tmp_path / "demo"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "netdp_node.cli",
            "demo",
            "--nodes",
            "3",
            "--rounds",
            "100000",
            "--workdir",
            str(workdir),
            "--timeout",
            "100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # wait until the job runs (the demo prints the job's progress in node steps), then press Ctrl-C
        deadline = time.monotonic() + 60
        seen = ""
        while "node steps" not in seen and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            seen += line
        assert "node steps" in seen, seen
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, err[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
        leftovers = nd.reap(str(workdir))
    assert leftovers == [], leftovers


@pytest.mark.timeout(120)
async def test_node_over_budget_declines_and_the_result_says_so(tmp_path):
    c = LocalCluster(tmp_path / "c", 4, poll_interval=0.2)
    data = {}
    for i, nid in enumerate(c.ids):
        f = tmp_path / f"{nid}.txt"
        f.write_text(f"{0.1 * (i + 1)}\n")
        data[nid] = f
    try:
        c.start(data=data, extra={"node-2": ["--budget-epsilon", "0.3", "--budget-delta", "1e-5"]})
        op = BootstrapClient(c.bootstrap_address, c.operator)
        try:
            await op.submit("ring-sum", {"rounds": 5}, participants=c.ids, job_id="b1")
            s = result_summary(await wait_result(op, "b1", 60))
        finally:
            await op.close()
        assert s["state"] == "done" and s["complete"], s
        assert "node-2" in s["declined"] and "budget" in s["declined"]["node-2"]
        assert set(s["contributors"]) == {"node-1", "node-3", "node-4"}
        assert "declined (privacy budget)" in c.procs["node-2"].log_text()
        from netdp_node.report import ledger_report

        rep = ledger_report(c.ledger("node-2"), job_id="b1")["jobs"][0]
        assert rep["contributed"] is False and rep["contributions"] == 0
        assert all(p["epsilon"] == 0 for p in rep["peers"])
    finally:
        c.stop()
