"""Networked Muffliato against a bare grpc.aio run of the same message pattern (issue 5, Performance).

    python benchmarks/bench_muffliato_net.py            # n = 16, T = 100, 5 repetitions of each
    python benchmarks/bench_muffliato_net.py --quick    # n = 4, T = 5, 1 repetition (smoke test)

In one run, with the same certificates and the same public graph:

1. netdp: a LocalCluster (bootstrap + n node processes on loopback, mTLS) runs Muffliato jobs
   (`graph=er` with the first public seed whose G(n, p) is connected, a fixed T, no faults,
   `accelerated` left at its default). Rounds/s of a node = (T − 1 − w) / (time of its "round"
   ledger record of round T − 1 − that of round w), w = min(10, T // 5) warm-up rounds (the nodes
   join at slightly different times), the median over nodes. The job's wall
   time (submit → every node's result, dissemination included) is recorded too.
2. bare: after the cluster stopped, n processes of `muff_bare_node.py` (one per node, each with the
   node's certificate from the cluster's PKI, loopback, ephemeral ports) run the same pattern: per
   round one Envelope of the same size to every neighbour of the same graph on a long-lived stream,
   an Ack for each, and the next round once every neighbour's value and Ack arrived. No engine, no
   ledger. Rounds/s computed the same way from the processes' round completion times.
3. The target: netdp rounds/s ≥ 0.5 × bare rounds/s.

Writes benchmarks/results/muffliato_net.json (--quick: muffliato_net-quick.json; or --out), with the
machine, the date, the load average and the CPU other processes used during each phase (this
machine may be shared). Every process it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
from bench_transport import CpuMeter, machine
from profile_hop import ProfiledCluster, proc_cpu

from netdp_node.algorithms.muffliato.engine import degrees
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Ledger
from netdp_node.privacy import gossip
from netdp_node.privacy.muffliato_accountant import public_graph

BARE = Path(__file__).resolve().parent / "muff_bare_node.py"
TARGET_RATIO = 0.5
FULL = {"nodes": 16, "T": 100, "reps": 5, "timeout": 300.0, "whatif": True}
QUICK = {"nodes": 4, "T": 5, "reps": 1, "timeout": 60.0, "whatif": False}


def connected_er(n: int, p: float, max_seed: int = 1000) -> tuple[int, list[tuple[int, int]]]:
    """The first public seed ≥ 1 whose ER graph (call 0, as the engine draws it) is connected."""
    import networkx as nx

    for seed in range(1, max_seed + 1):
        edges = public_graph({"graph": "er", "p": p}, n, seed, 0)
        g = nx.Graph(edges)
        g.add_nodes_from(range(n))
        if nx.is_connected(g):
            return seed, edges
    raise ValueError(f"no connected G({n}, {p}) among seeds 1..{max_seed}; raise p")


def warmup_rounds(T: int) -> int:
    """Rounds left out at the start: the processes do not start at the same instant, and a round
    waits for every neighbour, so the first rounds (about the graph's diameter) absorb the skew."""
    return min(10, T // 5)


def rate(times: list[float]) -> float:
    """Rounds per second from the completion times of rounds 0..T−1, after the warm-up rounds:
    (T − 1 − w) / (t[T − 1] − t[w])."""
    w = warmup_rounds(len(times))
    span = times[-1] - times[w]
    return (len(times) - 1 - w) / span if span > 0 else math.nan


# ------------------------------------------------------------------------------------------------
# netdp


def start_cluster(
    workdir: Path,
    n: int,
    timeout: float,
    ledger_synchronous: str | None = None,
    poll_interval: float = 0.2,
) -> LocalCluster:
    """A LocalCluster (no data: every node adds noise only; the message pattern is the same), or,
    for a what-if variant, profile_hop's ProfiledCluster whose nodes commit their ledgers with
    `ledger_synchronous` (node_variant.py)."""
    if ledger_synchronous:
        c: LocalCluster = ProfiledCluster(workdir, n, poll_interval=poll_interval)
        c.ledger_synchronous = ledger_synchronous  # type: ignore[attr-defined]
    else:
        c = LocalCluster(workdir, n, poll_interval=poll_interval)
    try:
        c.start(timeout=timeout)
    except BaseException:
        c.stop()
        raise
    return c


async def _netdp_job(
    c: LocalCluster, params: dict[str, Any], seed: int, job_id: str, timeout: float
) -> dict[str, Any]:
    await c.wait_registered(c.ids, timeout=timeout)
    client = BootstrapClient(c.bootstrap_address, c.operator)
    pids = {nid: c.procs[nid].popen.pid for nid in c.ids}  # type: ignore[union-attr]
    try:
        cpu0 = {nid: proc_cpu(pid) for nid, pid in pids.items()}
        with CpuMeter() as cpu:
            t0 = time.monotonic()
            await client.submit("muffliato", params, participants=c.ids, seed=seed, job_id=job_id)
            # (the rates come from the ledgers; polling the bootstrap more often would only take
            # CPU from the nodes, which the bare run has no counterpart of)
            s = await common.wait_job(client, job_id, timeout, poll=0.2)
            wall = time.monotonic() - t0
        node_cpu = sum(proc_cpu(pid) - cpu0[nid] for nid, pid in pids.items())
    finally:
        await client.close()
    if s["state"] != "done":
        raise RuntimeError(f"job {job_id} failed: {s['failed']}")
    T = int(params["T"])
    rates = []
    for nid in c.ids:
        led = Ledger.open_readonly(c.ledger(nid))
        try:
            ts = {e.params["round"]: e.ts for e in led.entries(job_id) if e.event == "round"}
        finally:
            led.close()
        rates.append(rate([ts[r] for r in range(T)]))
    return {
        "job_id": job_id,
        "rounds_per_s_median_node": statistics.median(rates),
        "rounds_per_s_min_node": min(rates),
        "job_wall_s": wall,
        "node_cpu_s_per_round": node_cpu / T,
        "cpu": cpu.result,
    }


def run_netdp(
    workdir: Path,
    n: int,
    params: dict[str, Any],
    seed: int,
    jobs: int,
    timeout: float,
    ledger_synchronous: str | None = None,
    poll_interval: float = 0.2,
) -> tuple[LocalCluster, list[dict]]:
    """Start a cluster, run `jobs` Muffliato jobs one after the other, stop it."""
    c = start_cluster(workdir, n, timeout, ledger_synchronous, poll_interval)
    try:

        async def all_jobs() -> list[dict[str, Any]]:
            return [
                await _netdp_job(c, params, seed, f"bench-{k + 1}", timeout) for k in range(jobs)
            ]

        return c, asyncio.run(all_jobs())
    finally:
        c.stop()


# ------------------------------------------------------------------------------------------------
# bare grpc.aio


def run_bare(
    c: LocalCluster, edges: list[tuple[int, int]], T: int, dim: int, rep: int, timeout: float
) -> dict[str, Any]:
    """n bare processes, one per node id, with the nodes' certificates; returns the rate."""
    work = c.workdir / f"bare-{rep}"
    work.mkdir(parents=True)
    cfg = {
        "ids": c.ids,
        "edges": edges,
        "T": T,
        "dim": dim,
        "pki": str(c.pki_dir),
        "workdir": str(work),
        "job_id": f"bench-{rep}",
        "timeout": timeout,
        "linger": 10.0,
    }
    (work / "config.json").write_text(json.dumps(cfg))
    procs: list[subprocess.Popen[bytes]] = []
    env = {
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        **os.environ,
        "PYTHONUNBUFFERED": "1",
    }
    try:
        with CpuMeter() as cpu:
            t0 = time.monotonic()
            for i in range(len(c.ids)):
                with open(work / f"{c.ids[i]}.log", "ab") as log:
                    procs.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                str(BARE),
                                "--config",
                                str(work / "config.json"),
                                "--index",
                                str(i),
                            ],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            env=env,
                        )
                    )
            for i, p in enumerate(procs):
                code = p.wait(timeout=max(1.0, timeout + 30 - (time.monotonic() - t0)))
                if code != 0:
                    raise RuntimeError(
                        f"bare {c.ids[i]} exited {code}:\n"
                        + (work / f"{c.ids[i]}.log").read_text()[-3000:]
                    )
            wall = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    got = [json.loads((work / "results" / f"{nid}.json").read_text()) for nid in c.ids]
    rates = [rate(g["round_done"]) for g in got]
    return {
        "rounds_per_s_median_node": statistics.median(rates),
        "rounds_per_s_min_node": min(rates),
        "processes_wall_s": wall,
        "cpu_s_per_round": sum(g["cpu_s_rounds"] for g in got) / (T - 1),
        "envelope_bytes": got[0]["envelope_bytes"],
        "cpu": cpu.result,
    }


# ------------------------------------------------------------------------------------------------
# what-if: one cost removed from the node processes (node_variant.py, not the product)

#: (variant, the nodes' ledger synchronous mode (None: the product's FULL), bootstrap poll interval)
WHATIF: list[tuple[str, str | None, float]] = [
    ("ledger synchronous=NORMAL (no fsync per commit)", "NORMAL", 0.2),
    ("bootstrap polled every 5 s instead of 0.2 s", None, 5.0),
]


# ------------------------------------------------------------------------------------------------
# profile: every node process under cProfile during one job

# the costs a round is made of, by function (cumulative time, summed over the node processes)
PROFILE_BUCKETS = {
    "ledger commit (SQLite, fsync)": ("ledger.py", "commit"),
    "ledger duplicate lookup": ("ledger.py", "received_digest"),
    "engine on_message": ("muffliato.py", "on_message"),
    "engine on_delivered (acks)": ("muffliato.py", "on_delivered"),
    "runtime deliver (whole receive path, incl. commit)": ("runtime.py", "deliver"),
    "runtime _send (send + ack wait + outcome)": ("runtime.py", "_send"),
    "server: handle one envelope (decode + deliver)": ("transport/grpc.py", "_process"),
    "envelope <-> message": ("wire/convert.py", ""),
    "bootstrap polling": ("daemon.py", "_poll"),
}


def run_profile(
    workdir: Path, n: int, params: dict[str, Any], seed: int, timeout: float
) -> dict[str, Any]:
    pdir = workdir / "cprofile"
    pdir.mkdir(parents=True)
    c = ProfiledCluster(workdir / "cluster", n, poll_interval=0.2)
    c.cprofile_dir = pdir
    try:
        c.start(timeout=timeout)
        job = asyncio.run(_netdp_job(c, params, seed, "bench-profiled", timeout))
    finally:
        c.stop(grace=30)
    files = sorted(str(f) for f in pdir.glob("node-*.prof"))
    if not files:
        return {"skipped": "no profile written", **job}
    st = pstats.Stats(*files)
    rounds = int(params["T"]) * len(files)  # node-rounds profiled
    buckets = {name: 0.0 for name in PROFILE_BUCKETS}
    top = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        for name, (f, func) in PROFILE_BUCKETS.items():
            if file.endswith(f) and (not func or fn == func):
                buckets[name] += ct
        if ("netdp_node" in file or "grpc" in file) and nc >= rounds:
            top.append(
                {
                    "func": f"{fn} ({file.split('site-packages/')[-1].split('/netdp_node/')[-1]}"
                    f":{line})",
                    "calls_per_node_round": nc / rounds,
                    "self_ms_per_node_round": tt / rounds * 1e3,
                    "cum_ms_per_node_round": ct / rounds * 1e3,
                }
            )
    top.sort(key=lambda r: -r["cum_ms_per_node_round"])
    return {
        **job,
        "profiles": len(files),
        "node_rounds": rounds,
        "buckets_cum_ms_per_node_round": {k: v / rounds * 1e3 for k, v in buckets.items()},
        "top_by_cumulative": top[:30],
        "note": "cProfile over each node's whole life (start-up and polling included), divided "
        "by T x nodes; cProfile inflates Python-heavy code: read it for the relative "
        "weight of the parts, not for absolute time",
    }


# ------------------------------------------------------------------------------------------------
# main


def run(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    n, T, reps, timeout = cfg["nodes"], cfg["T"], cfg["reps"], cfg["timeout"]
    p = cfg.get("p") or min(1.0, 2.0 * math.log(n) / n)
    seed, edges = connected_er(n, p)
    deg = degrees(n, edges)
    lam = gossip.spectral_gap(gossip.metropolis_weights(n, edges))
    params = {"graph": "er", "p": p, "spectral_gap": lam, "T": T, "sigma": 0.1}
    res: dict[str, Any] = {
        "benchmark": "muffliato_net",
        "machine": machine(workdir),
        "config": cfg,
        "n": n,
        "T": T,
        "graph": {
            "kind": "er",
            "p": p,
            "public_seed": seed,
            "edges": len(edges),
            "degree_mean": float(deg.mean()),
            "degree_min": int(deg.min()),
            "degree_max": int(deg.max()),
            "spectral_gap": lam,
        },
        "muffliato_params": params,
        "method": "repetition k: a fresh cluster runs one Muffliato job, stops; then the bare "
        "processes run with that cluster's certificates; rounds/s of a node = (T - 1 - w)"
        " / (completion of round T - 1 - completion of round w), w = min(10, T // 5) "
        "warm-up rounds, median over nodes; the result is the median over repetitions, "
        "the ratio the median of the paired ones",
        "warmup_rounds": warmup_rounds(T),
    }
    pairs = []
    for k in range(reps):
        print(
            f"rep {k + 1}/{reps}: netdp, {n} node processes, Muffliato ER(p={p:.3f}) T={T} ...",
            file=sys.stderr,
            flush=True,
        )
        c, (job,) = run_netdp(workdir / f"rep-{k + 1}", n, params, seed, 1, timeout)
        bare = run_bare(c, edges, T, int(params.get("dim", 1)), k + 1, timeout)
        pair = {
            "netdp": job,
            "bare": bare,
            "ratio": job["rounds_per_s_median_node"] / bare["rounds_per_s_median_node"],
        }
        pairs.append(pair)
        print(
            f"  netdp {job['rounds_per_s_median_node']:.1f} rounds/s, bare "
            f"{bare['rounds_per_s_median_node']:.1f} rounds/s, ratio {pair['ratio']:.3f}",
            file=sys.stderr,
            flush=True,
        )
    res["reps"] = pairs
    res["netdp"] = {
        "rounds_per_s": statistics.median(x["netdp"]["rounds_per_s_median_node"] for x in pairs),
        "job_wall_s_median": statistics.median(x["netdp"]["job_wall_s"] for x in pairs),
        "node_cpu_s_per_round_median": statistics.median(
            x["netdp"]["node_cpu_s_per_round"] for x in pairs
        ),
    }
    res["bare"] = {
        "rounds_per_s": statistics.median(x["bare"]["rounds_per_s_median_node"] for x in pairs),
        "cpu_s_per_round_median": statistics.median(x["bare"]["cpu_s_per_round"] for x in pairs),
    }
    res["ratio"] = statistics.median(x["ratio"] for x in pairs)
    res["ratio_of_medians"] = res["netdp"]["rounds_per_s"] / res["bare"]["rounds_per_s"]
    res["target"] = {
        "definition": f"netdp Muffliato rounds/s >= {TARGET_RATIO} x bare grpc.aio "
        "rounds/s of the same message pattern, same run (median of paired ratios)",
        "required_ratio": TARGET_RATIO,
        "target_met": res["ratio"] >= TARGET_RATIO,
    }
    if cfg.get("whatif"):
        res["whatif"] = []
        for i, (name, sync, poll) in enumerate(WHATIF):
            print(f"what-if: {name} ...", file=sys.stderr, flush=True)
            _, (job,) = run_netdp(workdir / f"whatif-{i}", n, params, seed, 1, timeout, sync, poll)
            res["whatif"].append({"variant": name, **job})
            print(f"  {job['rounds_per_s_median_node']:.1f} rounds/s", file=sys.stderr, flush=True)
    if cfg.get("profile"):
        print("profile: node processes under cProfile ...", file=sys.stderr, flush=True)
        res["profile"] = run_profile(workdir / "profile", n, params, seed, timeout)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="n = 4, T = 5, 1 repetition")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--T", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--p", type=float, help="ER edge probability (default 2 ln n / n)")
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also run one job with every node under cProfile (where the time goes)",
    )
    ap.add_argument("--no-whatif", action="store_true", help="skip the what-if variants")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args(argv)
    cfg = dict(QUICK if a.quick else FULL)
    for k in ("nodes", "T", "reps", "p"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    cfg["profile"] = a.profile
    if a.no_whatif:
        cfg["whatif"] = False
    if cfg["nodes"] < 2 or cfg["T"] < 2 or cfg["reps"] < 1:
        ap.error("needs --nodes >= 2, --T >= 2, --reps >= 1")
    t0 = time.monotonic()
    with common.workdir("netdp-bench-muff-", keep=a.keep) as workdir:
        res = run(cfg, workdir)
        res["elapsed_s"] = time.monotonic() - t0
        out = common.write_results("muffliato_net", res, a.quick, out=a.out)
        g = res["graph"]
        print(
            f"Muffliato over the network, n = {res['n']}, ER(p = {g['p']:.3f}, mean degree "
            f"{g['degree_mean']:.2f}), T = {res['T']}:\n"
            f"  netdp {res['netdp']['rounds_per_s']:.1f} rounds/s, bare grpc.aio "
            f"{res['bare']['rounds_per_s']:.1f} rounds/s, ratio {res['ratio']:.3f} (target "
            f"{TARGET_RATIO}: {'MET' if res['target']['target_met'] else 'NOT MET'})\n"
            f"written to {out} ({res['elapsed_s']:.0f} s)"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
