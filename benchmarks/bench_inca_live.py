"""IncA over real node processes (gRPC, mTLS, SQLite ledgers), before and after a change: the CPU
the node processes spend per job, the messages they send, and how long the dissemination takes.

    python benchmarks/bench_inca_live.py --before /tmp/base --pairs 2

A LocalCluster (bootstrap + `--nodes` node processes on loopback) runs `--jobs` IncA jobs without
faults (T = `--T`, k = `--k`, the default round_s = 2 s and gossip_s = 4 s), one after the
other. `--before DIR` is a source tree of the code to compare with (e.g. `git archive main | tar
-x -C DIR`): its clusters run with DIR first on PYTHONPATH, the others with the installed
checkout (the processes start in the temporary directory, not in a checkout); the versions
alternate cluster by cluster (before, after; then after, before), each cluster's first `--warmup`
jobs unmeasured (a node's first job imports what jobs use). Per job:
the CPU time of all node processes over the job (utime + stime from /proc, read before the submit
and after every node's result), the job's wall time (submit to every result), the messages the
nodes recorded as sent, by kind (their ledgers), and the dissemination's time at each node (from
its entry of iteration T to its output; the median over nodes). Writes
benchmarks/results/inca_live.json (appends a run). Every process it starts is stopped before it
exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Ledger

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    """utime + stime of the processes `pids`, in seconds."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICKS


async def _jobs(c: LocalCluster, a: argparse.Namespace, pids: list[int]) -> list[dict[str, Any]]:
    await c.wait_registered(c.ids, timeout=300)
    client = BootstrapClient(c.bootstrap_address, c.operator)
    out = []
    try:
        for r in range(-a.warmup, a.jobs):
            await asyncio.sleep(2.0)  # the previous job's last messages and commits settle
            cpu0, t0 = cpu_s(pids), time.monotonic()
            job = await client.submit(
                "inca", {"T": a.T, "k": a.k}, participants=c.ids, seed=r + 1 + a.warmup
            )
            s = await common.wait_job(client, job.job_id, 300, poll=0.1)
            wall, cpu = time.monotonic() - t0, cpu_s(pids) - cpu0
            if s["state"] != "done":
                raise RuntimeError(f"job failed: {s['failed']}")
            if r < 0:
                continue  # a warm-up job (the nodes' first job imports what jobs use)
            sent: Counter[str] = Counter()
            spans: list[float] = []
            estimates: list[str] = []
            for nid in c.ids:
                led = Ledger.open_readonly(c.ledger(nid))
                try:
                    es = led.entries(job.job_id)
                    row = led.job(job.job_id)
                finally:
                    led.close()
                sent.update(e.kind for e in es if e.direction == "sent")
                last = [e.ts for e in es if e.event == "inca-iteration" and e.params["t"] == a.T]
                done = [e.ts for e in es if e.event == "output"]
                spans.append(done[0] - last[0])
                assert row is not None and row.result is not None
                estimates.append(json.dumps(row.result["value"]))
            out.append(
                {
                    "job_id": job.job_id,
                    "node_cpu_s": round(cpu, 2),
                    "job_wall_s": round(wall, 2),
                    "sent_by_kind": dict(sorted(sent.items())),
                    "sent_total": sum(sent.values()),
                    "dissemination_s_median": round(statistics.median(spans), 3),
                    "dissemination_s_max": round(max(spans), 3),
                    "nodes_agree": len(set(estimates)) == 1,
                }
            )
            print(json.dumps(out[-1]), flush=True)
    finally:
        await client.close()
    return out


def cluster_run(version: str, a: argparse.Namespace) -> dict[str, Any]:
    old = os.environ.get("PYTHONPATH")
    if version == "before":
        os.environ["PYTHONPATH"] = a.before + (os.pathsep + old if old else "")
    work = Path(tempfile.mkdtemp(prefix="netdp-bench-inca-live-"))
    c = LocalCluster(work, a.nodes, poll_interval=0.2)
    data = common.uniform_values(c)
    load = common.load_average()
    try:
        c.start(data=data, timeout=300)
        pids = [c.procs[nid].popen.pid for nid in c.ids]  # type: ignore[union-attr]
        jobs = asyncio.run(_jobs(c, a, pids))
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return {
        "version": version,
        "jobs": jobs,
        "node_cpu_s_median": statistics.median(j["node_cpu_s"] for j in jobs),
        "sent_total_median": statistics.median(j["sent_total"] for j in jobs),
        "dissemination_s_median": statistics.median(j["dissemination_s_median"] for j in jobs),
        "job_wall_s_median": statistics.median(j["job_wall_s"] for j in jobs),
        "load_avg_before": load,
        "load_avg_after": common.load_average(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common.before_after(ap)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="jobs run first, not measured (1)")
    ap.add_argument("--T", type=int, default=10)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    versions = common.versions(ap, a)
    # the node processes run `python -m netdp_node.cli`, which looks in the working directory
    # first: not in a checkout, so that PYTHONPATH decides which code runs
    os.chdir(tempfile.gettempdir())
    path = common.RESULTS / "inca_live.json"
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    run_: dict[str, Any] = {
        "label": a.label,
        "nodes": a.nodes,
        "T": a.T,
        "k": a.k,
        "machine": common.machine(["grpcio", "numpy"]),
        "before_tree": a.before or None,
        "clusters": [],
    }
    data["runs"].append(run_)
    data["benchmark"] = __doc__.strip().splitlines()[0]
    for k in range(a.pairs):
        for v in versions if k % 2 == 0 else versions[::-1]:
            res = cluster_run(v, a)
            summary = {x: y for x, y in res.items() if x != "jobs"}
            print(json.dumps(summary), flush=True)
            run_["clusters"].append(res)
            run_["machine"]["loadavg_at_end"] = common.load_average()
            common.write_results("inca_live", data, out=path)


if __name__ == "__main__":
    main()
