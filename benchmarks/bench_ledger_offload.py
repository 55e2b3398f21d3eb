"""Group commits of many ledgers on one event loop: on the loop, or off it (`Ledger` executor).

    python benchmarks/bench_ledger_offload.py                     # 200 ledgers, 20 rounds
    python benchmarks/bench_ledger_offload.py --ledgers 500 --threads 0,2,4,8
    python benchmarks/bench_ledger_offload.py --quick

What a process hosting many nodes does, without the network: `--ledgers` real SQLite ledgers
(WAL, synchronous=FULL) on one asyncio loop, in a temporary folder on the file system of
--dir (default: the system's temporary folder, where `netdp demo` puts its ledgers). Each round,
every ledger stages one step shaped as a token hop's (the received token, the sent one, a custody
copy) and the round ends when every step is durable. Meanwhile a ticker on the same loop asks to
be woken every millisecond and records how late it was woken: what any other node's message
handling on that loop waits. Per variant (`--threads`: 0 = commits on the loop; N = a pool of N
write threads): steps per second, the ticker's median and worst lateness, and the process's CPU
time per step. The variants run in turns, round by round (paired: a shared machine's load hits
them alike). Writes benchmarks/results/ledger_offload.json (--quick: ledger_offload-quick.json).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import common
import numpy as np

from netdp_node.ledger import Entry, Ledger


def hop(job: str, i: int, k: int) -> dict[str, Any]:
    peer = f"p{k}"
    return {
        "entries": [
            Entry(job, "received", "token", peer=peer, kind="token", seq=i, digest="d" * 64),
            Entry(job, "sent", "token", peer=peer, kind="token", seq=i + 1, digest="e" * 64),
        ],
        "keep": [(job, f"token:{i}", np.zeros(1), {"to": peer})],
        "drop": [(job, f"token:{i - 1}")] if i else [],
    }


async def one_round(ledgers: list[Ledger], i: int) -> tuple[float, list[float]]:
    """Every ledger stages one hop; returns the round's wall time and the ticker's lateness."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = loop.time()
            await asyncio.sleep(0.001)
            late.append(max(0.0, loop.time() - t - 0.001))

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    futs = [led.stage(**hop("j", i, k)) for k, led in enumerate(ledgers)]
    await asyncio.gather(*futs)
    wall = time.perf_counter() - t0
    stop = True
    await tick
    return wall, late


async def run(a: argparse.Namespace, root: Path) -> dict[str, Any]:
    variants = [int(t) for t in a.threads.split(",")]
    pools = {t: ThreadPoolExecutor(t, thread_name_prefix="bench-ledger") for t in variants if t}
    sets = {
        t: [
            Ledger(root / f"t{t}" / f"n{k}", f"n{k}", executor=pools.get(t))
            for k in range(a.ledgers)
        ]
        for t in variants
    }
    walls: dict[int, list[float]] = {t: [] for t in variants}
    lates: dict[int, list[float]] = {t: [] for t in variants}
    cpu: dict[int, float] = {t: 0.0 for t in variants}
    try:
        for t in variants:  # warm-up
            await one_round(sets[t], 0)
        for i in range(1, a.rounds + 1):
            order = variants if i % 2 else list(reversed(variants))
            for t in order:
                c0 = time.process_time()
                wall, late = await one_round(sets[t], i)
                cpu[t] += time.process_time() - c0
                walls[t].append(wall)
                lates[t].extend(late)
    finally:
        for leds in sets.values():
            for led in leds:
                led.close()
        for p in pools.values():
            p.shutdown()
    out = {}
    for t in variants:
        steps = a.ledgers * a.rounds
        out[str(t)] = {
            "threads": t,
            "steps_per_s": round(steps / sum(walls[t]), 1),
            "round_wall_s_median": round(statistics.median(walls[t]), 4),
            "loop_late_ms_median": round(1000 * statistics.median(lates[t]), 3),
            "loop_late_ms_p99": round(1000 * float(np.quantile(lates[t], 0.99)), 2),
            "loop_late_ms_max": round(1000 * max(lates[t]), 2),
            "cpu_ms_per_step": round(1000 * cpu[t] / steps, 3),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ledgers", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", default="0,4", help="variants: write threads (0: on the loop)")
    ap.add_argument("--dir", type=Path, help="where the ledgers go (a temporary folder in it)")
    ap.add_argument("--quick", action="store_true", help="20 ledgers, 3 rounds")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.quick:
        a.ledgers, a.rounds = 20, 3
    root = Path(tempfile.mkdtemp(prefix="netdp-bench-ledger-", dir=a.dir))
    load_before = common.load_average()
    try:
        res = asyncio.run(run(a, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    data = {
        "benchmark": "ledger_offload",
        "machine": common.machine(),
        "ledgers": a.ledgers,
        "rounds": a.rounds,
        "variants": res,
        "load_before": load_before,
        "load_after": common.load_average(),
        "note": "rounds of the variants interleaved; compare them within this run",
    }
    out = common.write_results("ledger_offload", data, a.quick, out=a.out)
    for v in res.values():
        print(
            f"threads {v['threads']}: {v['steps_per_s']:8.1f} steps/s, round "
            f"{v['round_wall_s_median']:.3f} s, loop late median {v['loop_late_ms_median']} ms"
            f" p99 {v['loop_late_ms_p99']} ms max {v['loop_late_ms_max']} ms, CPU "
            f"{v['cpu_ms_per_step']} ms/step"
        )
    print(f"load {load_before} -> {data['load_after']}; written to {out}")


if __name__ == "__main__":
    main()
