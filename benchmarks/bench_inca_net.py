"""IncA over real node processes: mixing iterations per second for n = 16 and k = 3.

    python benchmarks/bench_inca_net.py            # 3 jobs of T = 20 iterations
    python benchmarks/bench_inca_net.py --quick    # 1 job of T = 8 (smoke test)

A LocalCluster (bootstrap + 16 node processes on loopback, mTLS) runs IncA jobs without faults and
with a generous deadline (round_s = 10 s), so iterations advance as fast as the exchanges do: MIX,
acknowledgement, CLOSE, each a durable ledger commit at the receiver. Timed from the nodes' own
ledgers: for every node, the time between its "inca-iteration" entries of iterations 1 and T;
iterations/s = (T − 1) / that time, the median over nodes, then the median over jobs. Also records
the whole job (submit → every node's result, including dissemination). Writes
benchmarks/results/inca_net.json (--quick: inca_net-quick.json). Every process it starts is
stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Ledger


async def _jobs(c: LocalCluster, runs: int, T: int, k: int, timeout: float) -> list[dict]:
    await c.wait_registered(c.ids, timeout=timeout)
    client = BootstrapClient(c.bootstrap_address, c.operator)
    out = []
    try:
        for r in range(runs):
            t0 = time.monotonic()
            job = await client.submit(
                "inca", {"T": T, "k": k, "round_s": 10.0}, participants=c.ids, seed=r + 1
            )
            s = await common.wait_job(client, job.job_id, timeout, poll=0.1)
            wall = time.monotonic() - t0
            if s["state"] != "done":
                raise RuntimeError(f"job failed: {s['failed']}")
            rates, spans = [], []
            for nid in c.ids:
                led = Ledger.open_readonly(c.ledger(nid))
                try:
                    ts = {
                        e.params["t"]: e.ts
                        for e in led.entries(job.job_id)
                        if e.event == "inca-iteration"
                    }
                finally:
                    led.close()
                span = ts[T] - ts[1]
                spans.append(span)
                rates.append((T - 1) / span)
            out.append(
                {
                    "job_id": job.job_id,
                    "T": T,
                    "k": k,
                    "job_wall_s": wall,
                    "iterations_per_s_median_node": statistics.median(rates),
                    "iterations_per_s_min_node": min(rates),
                    "mixing_span_s_median": statistics.median(spans),
                }
            )
            print(
                f"  job {r + 1}/{runs}: {out[-1]['iterations_per_s_median_node']:.1f} "
                f"iterations/s (median node), job {wall:.1f} s",
                file=sys.stderr,
            )
    finally:
        await client.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--k", type=int, default=3)
    a = ap.parse_args()
    runs, T = (1, 8) if a.quick else (3, 20)
    work = Path(tempfile.mkdtemp(prefix="netdp-bench-inca-"))
    c = LocalCluster(work, a.nodes, poll_interval=0.2)
    facts = common.machine(["grpcio", "numpy"])
    data = common.uniform_values(c)
    try:
        t0 = time.monotonic()
        c.start(data=data, timeout=180)
        startup = time.monotonic() - t0
        jobs = asyncio.run(_jobs(c, runs, T, a.k, timeout=300))
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
    res = {
        "benchmark": "inca_net",
        "nodes": a.nodes,
        "k": a.k,
        "T": T,
        "runs": runs,
        "iterations_per_s": statistics.median(j["iterations_per_s_median_node"] for j in jobs),
        "job_wall_s_median": statistics.median(j["job_wall_s"] for j in jobs),
        "startup_s": startup,
        "jobs": jobs,
        "machine": facts,
        "note": "no faults, round_s = 10 s (never reached): iterations advance at the speed of "
        "the MIX/ack/CLOSE exchanges, each a durable ledger commit; shared, loaded machine",
    }
    path = common.write_results("inca_net", res, a.quick)
    print(
        f"{res['iterations_per_s']:.1f} IncA iterations/s with n = {a.nodes} processes, k = "
        f"{a.k} (median over nodes and {runs} jobs); written to {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
