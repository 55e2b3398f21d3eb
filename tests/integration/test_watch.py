"""`netdp watch JOB` over a real job: a bootstrap and four node daemons on 127.0.0.1 (mTLS). One
node is stopped (SIGSTOP) while the job starts, so the ring waits for it: `netdp watch` (another
process, its stdout a pipe, so plain lines) shows the others running and that node unreachable;
once it is continued the job ends, and `watch` prints every node's end, the job's final state and
exits 0. An unknown job is a usage error (exit 2)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster

pytestmark = pytest.mark.slow

N, K = 4, 4


def _watch(cluster: LocalCluster, job_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "netdp_node.cli",
            "watch",
            job_id,
            "--bootstrap",
            cluster.bootstrap_address,
            "--certs",
            str(cluster.certs("operator")),
            "--interval",
            "0.2",
            "--timeout",
            "90",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(240)
async def test_watch_follows_a_job_to_its_end(tmp_path):
    cluster = LocalCluster(tmp_path / "c", N, poll_interval=0.2)
    w = None
    try:
        data = {}
        for i, nid in enumerate(cluster.ids):
            f = tmp_path / f"{nid}.txt"
            f.write_text(f"{0.1 * (i + 1)}\n")
            data[nid] = f
        cluster.start(data=data)
        await cluster.wait_registered(cluster.ids)
        stalled = cluster.ids[2]
        cluster.procs[stalled].popen.send_signal(signal.SIGSTOP)
        client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
        try:
            job = await client.submit(
                "ring-sum", {"rounds": K}, participants=cluster.ids, job_id="watch-1"
            )
        finally:
            await client.close()
        w = _watch(cluster, job.job_id)
        seen = []
        assert w.stdout is not None
        while True:  # bounded by the test's timeout; ends when watch shows the stalled node
            line = w.stdout.readline()
            assert line, ("watch ended early", seen, w.stderr.read() if w.stderr else "")
            seen.append(line.rstrip("\n"))
            if f"{stalled}: unreachable" in line:
                break
        cluster.procs[stalled].popen.send_signal(signal.SIGCONT)
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, (seen, out, err)
        lines = seen + out.splitlines()
        text = "\n".join(lines)
        # progress while it ran: the others running (their steps), the stalled one unreachable
        assert any(": running, " in x and " steps" in x for x in seen), text
        assert any("1 unreachable" in x for x in seen), text
        # every node's end, then the operator's result
        for nid in cluster.ids:
            assert any(f"{nid}: done, contributes, {K} contributions" in x for x in lines), text
        assert f"job {job.job_id} (ring-sum): done" in lines, text
        assert "released result:" in text and "(noise std)" in text
        assert "\x1b[" not in text  # a pipe gets plain text, no escape codes
        tail = lines[lines.index(f"job {job.job_id} (ring-sum): done") :]
        assert any(x.startswith("  contributors (4/4)") for x in tail), text

        bad = subprocess.run(  # noqa: ASYNC221
            [
                sys.executable,
                "-m",
                "netdp_node.cli",
                "watch",
                "nope",
                "--bootstrap",
                cluster.bootstrap_address,
                "--certs",
                str(cluster.certs("operator")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert bad.returncode == 2 and "job nope" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        if w is not None and w.poll() is None:
            w.kill()
            w.wait()
        for p in cluster.procs.values():
            if p.alive() and p.popen is not None:
                p.popen.send_signal(signal.SIGCONT)
        cluster.stop()
