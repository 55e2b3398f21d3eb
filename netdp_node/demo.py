"""`netdp demo`: a bootstrap and N node daemons on loopback run a private ring sum end to end.

Prints progress on stderr, then the estimate against the truth, the noise std of netdp against what
local DP would need for the same guarantee, and every node's privacy report read from its own
ledger. With --json, one JSON object on stdout (keys in the README). Every process it started is
stopped on success, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from netdp.v1 import peer_pb2
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.data import load_values
from netdp_node.errors import ConfigError
from netdp_node.jobs import render_result, result_summary
from netdp_node.privacy.accountant import ring_sum_utility
from netdp_node.report import ledger_report
from netdp_node.transport.grpc import secure_channel


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _progress(channels: dict[str, grpc.aio.Channel], job_id: str) -> tuple[int, int]:
    """Sum of protocol steps done / expected over every node (each node's Status RPC)."""
    done = expected = 0
    for ch in channels.values():
        try:
            reply = await ch.unary_unary(
                "/netdp.v1.Peer/Status", request_serializer=peer_pb2.StatusRequest.SerializeToString,
                response_deserializer=peer_pb2.StatusReply.FromString,
            )(peer_pb2.StatusRequest(), timeout=2)
            for j in reply.jobs:
                if j.job_id == job_id:
                    done += j.progress
                    expected += j.expected
        except grpc.aio.AioRpcError:
            pass
    return done, expected


def _bar(done: int, total: int, width: int = 30) -> str:
    frac = 0.0 if total == 0 else min(1.0, done / total)
    return "[" + "#" * int(frac * width) + "." * (width - int(frac * width)) + f"] {done}/{total}"


async def _run(a: argparse.Namespace, cluster: LocalCluster, values: np.ndarray) -> dict[str, Any]:
    t0 = time.monotonic()
    data_files = {}
    for nid, v in zip(cluster.ids, values):
        f = cluster.workdir / "data" / f"{nid}.txt"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"{float(v)!r}\n")
        data_files[nid] = f
    extra = {nid: ["--seed", str(a.seed * 1000 + i)] for i, nid in enumerate(cluster.ids)} \
        if a.seed is not None else None
    _say(f"starting a bootstrap and {cluster.n} node processes on 127.0.0.1 "
         f"(work directory {cluster.workdir})")
    cluster.start(data=data_files, extra=extra, timeout=a.timeout)
    await cluster.wait_registered(cluster.ids, timeout=a.timeout)
    _say(f"{cluster.n} nodes registered with the bootstrap at {cluster.bootstrap_address}")
    startup = time.monotonic() - t0
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    op = cluster.operator
    channels = {nid: secure_channel(cluster.procs[nid].address, op) for nid in cluster.ids}
    try:
        params = {"rounds": a.rounds, "epsilon": a.epsilon, "delta": a.delta, "clip": a.clip,
                  "delta_prime": a.delta}
        job = await client.submit("ring-sum", params, participants=cluster.ids)
        _say(f"submitted job {job.job_id}: ring sum, K={a.rounds} rounds, per-window "
             f"ε={a.epsilon}, δ={a.delta}")
        t_job = time.monotonic()
        deadline = t0 + a.timeout
        last = ""
        while True:
            reply = await client.result(job.job_id)
            summary = result_summary(reply)
            if summary["complete"] or summary["failed"]:
                break
            done, expected = await _progress(channels, job.job_id)
            line = _bar(done, expected)
            if line != last:
                _say(f"  progress {line} node steps")
                last = line
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job.job_id} did not finish in {a.timeout:g}s")
            await asyncio.sleep(0.2)
        elapsed = time.monotonic() - t_job
    finally:
        await client.close()
        for ch in channels.values():
            await ch.close()
    if summary["state"] != "done":
        raise RuntimeError("the job did not complete:\n" + render_result(summary))
    spec_params = json.loads(job.params_json)
    util = ring_sum_utility({"participants": summary["participants"], "params": spec_params})
    contributors = set(summary["contributors"])
    clipped = {nid: float(np.clip(v, -a.clip, a.clip)) for nid, v in zip(cluster.ids, values)}
    truth = sum(clipped[n] for n in cluster.ids if n in contributors)
    estimate = float(summary["value"][0])
    privacy = []
    for nid in cluster.ids:
        rep = ledger_report(cluster.ledger(nid), delta_target=1e-5, job_id=job.job_id)
        j = rep["jobs"][0]
        privacy.append({"node": nid, "epsilon": j["epsilon"], "delta": j["delta"],
                        "contributed": j["contributed"], "contributions": j["contributions"],
                        "peers": j["peers"]})
    return {
        "algorithm": "ring-sum",
        "job_id": job.job_id,
        "nodes": cluster.n,
        "rounds": a.rounds,
        "epsilon_per_window": a.epsilon,
        "delta_per_window": a.delta,
        "sigma": spec_params["sigma"],
        "estimate": estimate,
        "truth": truth,
        "abs_error": abs(estimate - truth),
        "netdp_std": util["netdp_std"],
        "ldp_std": util["ldp_std"],
        "noise_additions": int(util["noise_additions"]),
        "contributors": sorted(contributors),
        "elapsed_s": elapsed,
        "startup_s": startup,
        "privacy": privacy,
        "workdir": str(cluster.workdir),
    }


def render(res: dict[str, Any]) -> str:
    lines = [
        "",
        f"private ring sum over {res['nodes']} node processes, {res['rounds']} rounds "
        f"(job {res['job_id']}: {res['elapsed_s']:.2f} s after {res['startup_s']:.1f} s of start-up)",
        f"  estimate  {res['estimate']:.4f}",
        f"  truth     {res['truth']:.4f}",
        f"  error     {res['abs_error']:.4f}",
        f"  noise std of the estimate: netdp {res['netdp_std']:.4f}  vs  local DP "
        f"{res['ldp_std']:.4f} for the same guarantee ({res['ldp_std'] / res['netdp_std']:.1f}x "
        f"less noise; {res['noise_additions']} noise additions instead of "
        f"{res['nodes'] * res['rounds']})",
        "",
        "privacy each node has incurred towards each other node, from its own ledger "
        f"(per-window ε={res['epsilon_per_window']}, δ={res['delta_per_window']}):",
    ]
    peers = [p["node"] for p in res["privacy"]]
    w = max(len(x) for x in peers)
    lines.append(f"  {'node':<{w}}  {'ε (worst)':>10}  {'δ':>9}  " + "  ".join(
        f"{p:>{w}}" for p in peers))
    for row in res["privacy"]:
        eps = {p["peer"]: p["epsilon"] for p in row["peers"]}
        cells = "  ".join(f"{(f'{eps[p]:.3f}' if p in eps else '-'):>{w}}" for p in peers)
        lines.append(f"  {row['node']:<{w}}  {row['epsilon']:>10.4f}  {row['delta']:>9.2g}  {cells}")
    if res["privacy"]:
        m = res["privacy"][0]["peers"][0]["method"] if res["privacy"][0]["peers"] else ""
        lines.append(f"  (method: {m}; Theorem 1 of Cyffers & Bellet 2022 with the exact Gaussian "
                     "window composition; see `netdp privacy report`)")
    return "\n".join(lines)


def run_demo(a: argparse.Namespace) -> int:
    if not 3 <= a.nodes <= 64:
        raise ConfigError("--nodes must be between 3 and 64")
    if a.rounds < 1:
        raise ConfigError("--rounds must be at least 1")
    if not 0 < a.epsilon < 1:
        raise ConfigError("--epsilon must be in (0, 1) (classic Gaussian calibration)")
    if a.data:
        values = load_values(a.data)
        if values.size != a.nodes:
            raise ConfigError(f"{a.data} holds {values.size} values; --nodes is {a.nodes} "
                              "(one value per node)")
    else:
        values = np.random.default_rng(a.seed).uniform(0.0, a.clip, size=a.nodes)
    keep = a.workdir is not None
    workdir = Path(a.workdir) if keep else Path(tempfile.mkdtemp(prefix="netdp-demo-"))
    if keep:
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            raise ConfigError(f"--workdir {workdir} is not empty")
    cluster = LocalCluster(workdir, a.nodes, log_level="info")
    code = 1
    try:
        res = asyncio.run(_run(a, cluster, values))
        if a.json:
            print(json.dumps(res, indent=2))
        else:
            print(render(res))
        code = 0
    except TimeoutError as e:
        _say(f"netdp demo: timeout: {e}")
        code = 5
    except RuntimeError as e:
        _say(f"netdp demo: {e}")
        code = 1
    finally:
        codes = cluster.stop()
        bad = {k: v for k, v in codes.items() if v not in (0, None)}
        if bad:
            _say(f"processes that did not exit cleanly: {bad}")
        _say(f"stopped {len(codes)} processes")
        if code != 0:
            _say(f"logs are in {workdir / 'logs'}")
        if not keep and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return code
