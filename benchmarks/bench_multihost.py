"""Memory, start-up and file descriptors of node daemons hosted N to a process (`netdp node
--certs A --certs B ...`), against one node per process.

    python benchmarks/bench_multihost.py                   # N = 1, 8, 32, 64, 128, 256
    python benchmarks/bench_multihost.py --sizes 1,8,64     # other sizes
    python benchmarks/bench_multihost.py --quick            # N = 1, 4 (smoke test)

For each N: a bootstrap (started once) and ONE process hosting N node daemons on loopback, each
with its own certificate, mTLS server, port and ledger. Measured once every node registered and
the process then sat idle (long-polling the bootstrap) for --idle seconds:

- rss_kb, pss_kb: of the host process, from /proc/PID/smaps_rollup (PSS splits pages shared
  with other processes, e.g. the interpreter's, among them);
- startup_s: wall time from spawning the process until its port file (every node registered);
  cpu_s: the host process's CPU time (user + system) by then;
- fds, threads: /proc/PID/fd and /proc/PID/status;
- bootstrap_cpu_idle_s: the bootstrap's CPU time over the idle window (does it grow with idle
  long-polling nodes?);
- shutdown: SIGTERM, the exit code and how long until it exited.

Marginal cost per hosted node: the least-squares slope of RSS (and PSS, start-up CPU) over N.
Also: the load average before and after, and machine facts. Writes
benchmarks/results/multihost.json (--quick: multihost-quick.json) and prints a table. Every process
it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from netdp_node.cluster import LocalCluster
from netdp_node.waiting import cpu_ticks

TICK = os.sysconf("SC_CLK_TCK")


def smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        k, _, v = line.partition(":")
        if v.strip().endswith("kB"):
            out[k.strip()] = int(v.split()[0])
    return out


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def measure(c: LocalCluster, ids: list[str], idle: float) -> dict[str, Any]:
    name = f"host-{len(ids)}"
    t0 = time.monotonic()
    if len(ids) == 1:
        p = c.start_node(ids[0])
        c.ports[ids[0]] = c.wait_port(p, 120)
    else:
        p = c.start_host(name, ids)
        c.wait_host(p, 120)
    startup = time.monotonic() - t0
    assert p.popen is not None
    pid = p.popen.pid
    cpu = (cpu_ticks(pid) or 0) / TICK
    boot = c.procs["bootstrap"].popen.pid  # type: ignore[union-attr]
    b0 = cpu_ticks(boot) or 0
    time.sleep(idle)
    b1 = cpu_ticks(boot) or 0
    roll = smaps_rollup(pid)
    row = {
        "nodes": len(ids),
        "startup_s": round(startup, 3),
        "cpu_s": round(cpu, 3),
        "rss_kb": roll["Rss"],
        "pss_kb": roll["Pss"],
        "private_kb": roll.get("Private_Clean", 0) + roll.get("Private_Dirty", 0),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": threads(pid),
        "cpu_idle_s": round(((cpu_ticks(pid) or 0) / TICK) - cpu, 3),
        "bootstrap_cpu_idle_s": round((b1 - b0) / TICK, 3),
        "idle_s": idle,
        "loadavg": os.getloadavg(),
    }
    t1 = time.monotonic()
    p.popen.send_signal(signal.SIGTERM)
    row["exit_code"] = p.popen.wait(timeout=60)
    row["shutdown_s"] = round(time.monotonic() - t1, 3)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1,8,32,64,128,256")
    ap.add_argument(
        "--idle",
        type=float,
        default=10.0,
        help="seconds each host sits idle before it is measured (default 10)",
    )
    ap.add_argument("--quick", action="store_true", help="N = 1, 4, short idle (smoke test)")
    ap.add_argument(
        "--out", type=Path, help="output file (default benchmarks/results/multihost.json)"
    )
    a = ap.parse_args()
    sizes = [1, 4] if a.quick else [int(x) for x in a.sizes.split(",")]
    idle = 2.0 if a.quick else a.idle
    work = Path(tempfile.mkdtemp(prefix="netdp-bench-multihost-"))
    c = LocalCluster(work, sum(sizes), log_level="warning", poll_interval=0.5)
    rows = []
    facts = common.machine(["grpcio"])
    try:
        c.setup_pki()
        c.wait_port(c.start_bootstrap(), 60)
        used = 0
        for n in sizes:  # fresh identities each time: every ledger and registration is new
            row = measure(c, c.ids[used : used + n], idle)
            used += n
            rows.append(row)
            print(
                f"N={n:4d}  start {row['startup_s']:7.2f} s  cpu {row['cpu_s']:7.2f} s  "
                f"RSS {row['rss_kb'] / 1024:8.1f} MB  PSS {row['pss_kb'] / 1024:8.1f} MB  "
                f"fds {row['fds']:5d}  threads {row['threads']:3d}  bootstrap idle cpu "
                f"{row['bootstrap_cpu_idle_s']:.2f} s/{idle:g} s  exit {row['exit_code']} "
                f"in {row['shutdown_s']:.2f} s  load {row['loadavg'][0]:.2f}",
                flush=True,
            )
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
    ns = [r["nodes"] for r in rows]
    marginal = {
        "rss_kb_per_node": round(slope(ns, [r["rss_kb"] for r in rows]), 1),
        "pss_kb_per_node": round(slope(ns, [r["pss_kb"] for r in rows]), 1),
        "startup_cpu_s_per_node": round(slope(ns, [r["cpu_s"] for r in rows]), 4),
        "startup_s_per_node": round(slope(ns, [r["startup_s"] for r in rows]), 4),
        "fds_per_node": round(slope(ns, [r["fds"] for r in rows]), 2),
        "bootstrap_idle_cpu_s_per_node": round(
            slope(ns, [r["bootstrap_cpu_idle_s"] / idle for r in rows]), 5
        ),
    }
    res = {
        "benchmark": "multihost",
        "machine": facts,
        "rows": rows,
        "marginal": marginal,
        "note": "one process hosting N node daemons (own certificate, mTLS server, port, "
        "ledger each), idle and registered; marginal = least-squares slope over N; "
        "the machine is shared (see loadavg)",
    }
    out = common.write_results("multihost", res, a.quick, out=a.out)
    print(
        f"marginal per hosted node: RSS {marginal['rss_kb_per_node'] / 1024:.2f} MB, PSS "
        f"{marginal['pss_kb_per_node'] / 1024:.2f} MB, start-up CPU "
        f"{marginal['startup_cpu_s_per_node']:.3f} s, fds {marginal['fds_per_node']:.1f}; "
        f"wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
