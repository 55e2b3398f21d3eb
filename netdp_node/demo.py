"""`netdp demo`: a bootstrap and N node daemons on loopback run a private job end to end.

`--algorithm ring-sum` (default), `walk-sum`, `walk-histogram`, `walk-sgd`, `rw-sgd`, `inca`
(with `--leave`/`--miss`: node processes that leave for good or drop out for a while, through the
node's fault flags), `muffliato` or `muffliato-random`. Prints progress on
stderr, then the result against the truth (sums, histograms) or the test accuracy beside the
local-DP and central-DP baselines (SGD), the noise netdp needed against local DP for the same
guarantee, and every node's privacy report read from its own ledger, with the threat model (who
the ε holds against; JSON key "threat_model"). With --seed the nodes' private RNGs are seeded
(reproducible, NOT PRIVATE): the output says so (JSON keys "seeded_rng", "not_private"). With
--json, one JSON object on stdout (keys in the README). Every process it started is
stopped on success, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from netdp.v1 import peer_pb2
from netdp_node import audit
from netdp_node.algorithms.inca.engine import central_dp_std
from netdp_node.algorithms.muffliato.engine import ldp_sigma
from netdp_node.algorithms.walk.engine import logistic_accuracy
from netdp_node.baselines import Mode, local_sgd_sigma, sgd_walk
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.data import load_values
from netdp_node.datasets import learning_split
from netdp_node.errors import ConfigError
from netdp_node.faults import inca_dropout_flags
from netdp_node.jobs import render_result, result_summary
from netdp_node.ledger import Ledger
from netdp_node.privacy import inca_audit
from netdp_node.privacy.accountant import INCA_AUDIT, ring_sum_utility
from netdp_node.privacy.inca_audit import execution_from_info
from netdp_node.privacy.muffliato_accountant import CONTINUOUS, JOINT_VIEW, PAPER, schedules
from netdp_node.privacy.network_dp_walk import bassily_central_sigma
from netdp_node.privacy.threat import NOT_PRIVATE, not_private_note
from netdp_node.privacy.walk_accountant import LEMMA1, ldp_sum_sigma, prospective_count
from netdp_node.report import ledger_report, threat_lines, wrap
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import secure_channel


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _progress(channels: dict[str, grpc.aio.Channel], job_id: str) -> tuple[int, int]:
    """Sum of protocol steps done / expected over every node (each node's Status RPC, at most 64
    at a time)."""
    limit = asyncio.Semaphore(64)

    async def one(ch: grpc.aio.Channel) -> tuple[int, int]:
        async with limit:
            try:
                reply = await ch.unary_unary(
                    "/netdp.v1.Peer/Status",
                    request_serializer=peer_pb2.StatusRequest.SerializeToString,
                    response_deserializer=peer_pb2.StatusReply.FromString,
                )(peer_pb2.StatusRequest(), timeout=5)
            except grpc.aio.AioRpcError:
                return 0, 0
        return (
            sum(j.progress for j in reply.jobs if j.job_id == job_id),
            sum(j.expected for j in reply.jobs if j.job_id == job_id),
        )

    got = await asyncio.gather(*(one(ch) for ch in channels.values()))
    return sum(g[0] for g in got), sum(g[1] for g in got)


def _bar(done: int, total: int, width: int = 30) -> str:
    if total == 0:  # no fixed number of steps (Poisson clocks, muffliato-random): a count
        return f"{done} so far (no fixed total)"
    frac = min(1.0, done / total)
    return "[" + "#" * int(frac * width) + "." * (width - int(frac * width)) + f"] {done}/{total}"


ALGORITHMS = (
    "ring-sum",
    "walk-sum",
    "walk-histogram",
    "walk-sgd",
    "rw-sgd",
    "inca",
    "muffliato",
    "muffliato-random",
)


@dataclass
class DemoData:
    """What each node gets as --data, and what the demo needs to judge the result."""

    files: dict[str, Path]
    values: dict[str, np.ndarray]
    split: Any = None  # walk-sgd: the train/test split (test accuracy, baselines)


def _write_data(
    a: argparse.Namespace, cluster: LocalCluster, values: np.ndarray | None
) -> DemoData:
    out: dict[str, np.ndarray] = {}
    split = None
    rng = np.random.default_rng(a.seed)
    if a.algorithm in ("walk-sgd", "rw-sgd"):
        split = learning_split(cluster.n, a.points, a.seed or 0, a.data_dir)
        out = dict(zip(cluster.ids, split.per_user(cluster.n, a.points)))
    elif a.algorithm == "walk-histogram":
        cats = values if values is not None else rng.integers(0, a.bins, size=cluster.n)
        out = {nid: np.array([float(c)]) for nid, c in zip(cluster.ids, cats)}
    else:
        vals = values if values is not None else rng.uniform(0.0, a.clip, size=cluster.n)
        out = {nid: np.array([float(v)]) for nid, v in zip(cluster.ids, vals)}
    files = {}
    for nid, v in out.items():
        f = cluster.workdir / "data" / f"{nid}.txt"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(" ".join(repr(float(x)) for x in v) + "\n")
        files[nid] = f
    return DemoData(files, out, split)


def _job_params(a: argparse.Namespace, n: int) -> dict[str, Any]:
    """The job's parameters from the flags; with --target-epsilon, the planner's noise
    (`netdp_node.plan.apply_target`, the choice kept in `a.planned` to be printed)."""
    params = _flag_params(a, n)
    target = getattr(a, "target_epsilon", None)
    if target is None:
        return params
    from netdp_node.plan import NOISE_PARAMS, apply_target  # lazy: start-up cost

    key = (n, a.algorithm, target)
    if getattr(a, "planned", None) is None or a.planned[0] != key:
        base = {k: v for k, v in params.items() if k not in NOISE_PARAMS}
        try:
            a.planned = (key, *apply_target(a.algorithm, base, n, target))
        except ConfigError as e:  # check_args names the flag of a ValueError
            raise ValueError(str(e)) from None
    return dict(a.planned[1])


def _flag_params(a: argparse.Namespace, n: int) -> dict[str, Any]:
    if a.algorithm.startswith("muffliato"):
        # a ring (hypercube when n is a power of two); σ for a mean loss (eq. 7) of ε at δ
        graph = "hypercube" if n & (n - 1) == 0 and n >= 4 else "ring"
        params: dict[str, Any] = {
            "graph": graph,
            "clip": a.clip,
            "delta": a.delta,
            "epsilon": 1.0 if a.epsilon is None else a.epsilon,
        }
        if a.algorithm == "muffliato" and a.steps:
            params["T"] = a.steps
        if a.algorithm == "muffliato-random":
            params.update({"duration_s": 5.0, "rate": 5.0})
        return params
    if a.algorithm == "ring-sum":
        eps = 0.5 if a.epsilon is None else a.epsilon
        return {
            "rounds": a.rounds,
            "epsilon": eps,
            "delta": a.delta,
            "clip": a.clip,
            "delta_prime": a.delta,
        }
    if a.algorithm == "inca":
        # σ_Δ is calibrated for the dropouts the flags will cause: --leave parties leave for
        # good, --miss parties are offline about a third of the time (2·round_s every 6·round_s)
        params = {
            "T": a.steps or 10,
            "k": a.k,
            "scheme": a.scheme,
            "threat": a.threat,
            "delta": a.delta,
            "hi": a.clip,
            "round_s": a.round_s,
            "expect_leave": a.leave,
            "expect_miss": a.miss / 3,
        }
        if a.epsilon is not None:
            params["epsilon"] = a.epsilon
        return params
    sgd = a.algorithm in ("walk-sgd", "rw-sgd")
    T = a.steps or (25 * n if sgd else 10 * n)
    params = {"T": T, "delta": a.delta, "custody_timeout_s": 60.0}
    if a.epsilon is not None:
        params["epsilon"] = a.epsilon
    if a.algorithm == "walk-sum":
        params["clip"] = a.clip
    elif a.algorithm == "walk-histogram":
        params["bins"] = a.bins
    else:
        params.update({"dim": 9, "lipschitz": 1.0, "eta": 0.1})
    return params


def _describe(algorithm: str, p: dict[str, Any], topology: str = "exponential") -> str:
    """The submitted job, from the parameters the bootstrap validated and calibrated."""
    if algorithm.startswith("muffliato"):
        rounds = (
            f"T={p['T']} rounds{' (Chebyshev)' if p.get('accelerated') else ''}"
            if "T" in p
            else f"{p['duration_s']:g} s of Poisson clocks"
        )
        return (
            f"{algorithm} gossip averaging on a {p['graph']}, {rounds}, σ={p['sigma']:.4g} "
            f"(mean loss ε={p.get('epsilon', 0):g} at δ={p['delta']:g})"
        )
    if algorithm == "ring-sum":
        return f"ring sum, K={p['rounds']} rounds, per-window ε={p['epsilon']}, δ={p['delta']}"
    if algorithm == "inca":
        return (
            f"IncA mean, T={p['T']} iterations, k={p['k']}, scheme {p['scheme']}, target "
            f"ε={p['epsilon']:g} at δ={p['delta']} against {p['threat']}, σ_η="
            f"{p['sigma_eta']:.3g}, σ_Δ={p['sigma_delta']:.3g} ({p['sigma_delta_source']})"
        )
    where = f"the {topology} graph" if algorithm == "rw-sgd" else "the complete graph"
    return (
        f"{algorithm} on {where}, T={p['T']} steps, target ε={p['epsilon']:g} per peer, "
        f"δ={p['delta']}, {p['regime']} regime"
    )


async def _run(
    a: argparse.Namespace, cluster: LocalCluster, values: np.ndarray | None
) -> dict[str, Any]:
    t0 = time.monotonic()
    data = _write_data(a, cluster, values)
    seeds = (
        {nid: a.seed * 1000 + i for i, nid in enumerate(cluster.ids)} if a.seed is not None else {}
    )
    faults = inca_fault_plan(a, cluster.ids) if a.algorithm == "inca" else {}
    workers = a.workers
    if workers:
        alone = f" (+{len(faults)} with fault flags, one process each)" if faults else ""
        _say(
            f"starting a bootstrap and {cluster.n} nodes in {min(workers, cluster.n)} host "
            f"process(es){alone} on 127.0.0.1 (work directory {cluster.workdir})"
        )
    else:
        _say(
            f"starting a bootstrap and {cluster.n} node processes on 127.0.0.1 "
            f"(work directory {cluster.workdir})"
        )
    # start-up is not part of --timeout: its waits fail only when the processes stop progressing
    # the nodes give up on the job a minute after the demo would (their default, 600 s, is too
    # short for 10,000 walk steps on a loaded machine)
    cluster.start(
        data=data.files,
        extra=faults,
        timeout=a.timeout,
        workers=workers,
        seeds=seeds,
        wait=False,
        common=["--job-deadline", f"{a.timeout + 60:g}"],
    )
    shown = [0.0]

    def registered(k: int, n: int) -> None:
        now = time.monotonic()
        if k == n or now - shown[0] >= 2.0:
            shown[0] = now
            _say(f"  start-up: {k}/{n} nodes registered ({now - t0:.0f} s)")

    await cluster.wait_registered(cluster.ids, timeout=a.timeout, on_progress=registered)
    await asyncio.get_running_loop().run_in_executor(None, cluster.wait_ready, a.timeout)
    _say(f"{cluster.n} nodes registered with the bootstrap at {cluster.bootstrap_address}")
    startup = time.monotonic() - t0
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    op = cluster.operator
    channels = {
        nid: secure_channel(cluster.address(nid), op, peer_name(nid)) for nid in cluster.ids
    }
    try:
        job = await client.submit(
            a.algorithm,
            _job_params(a, cluster.n),
            participants=cluster.ids,
            seed=a.seed or 0,
            topology=getattr(a, "topology", "") or "",
        )
        graph = getattr(a, "topology", "") or "exponential"
        _say(
            f"submitted job {job.job_id}: "
            f"{_describe(a.algorithm, json.loads(job.params_json), graph)}"
        )
        t_job = time.monotonic()
        deadline = t_job + a.timeout
        last = ""
        # every node's Status each time (load on the hosts): more nodes, fewer rounds of it
        every = 0.2 if cluster.n <= 64 else max(2.0, cluster.n / 100)
        next_progress = 0.0
        while True:
            reply = await client.result(job.job_id)
            summary = result_summary(reply)
            if summary["complete"] or summary["failed"]:
                break
            if time.monotonic() >= next_progress:
                done, expected = await _progress(channels, job.job_id)
                next_progress = time.monotonic() + every
                line = f"{_bar(done, expected)} node steps"
                if cluster.n > 64:
                    line += f", {len(reply.results)}/{cluster.n} nodes reported"
                if line != last:
                    _say(f"  progress {line} ({time.monotonic() - t_job:.0f} s)")
                    last = line
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job.job_id} did not finish in {a.timeout:g}s after start-up"
                )
            await asyncio.sleep(0.2 if cluster.n <= 64 else 0.5)
        elapsed = time.monotonic() - t_job
    finally:
        await client.close()
        for ch in channels.values():
            await ch.close()
    if summary["state"] != "done":
        raise RuntimeError("the job did not complete:\n" + render_result(summary))
    spec_params = json.loads(job.params_json)
    if a.algorithm in ("muffliato", "muffliato-random"):
        await _wait_schedules(cluster, job.job_id)
    privacy = []
    for nid in cluster.ids:
        rep = ledger_report(cluster.ledger(nid), delta_target=1e-5, job_id=job.job_id)
        j = rep["jobs"][0]
        privacy.append(
            {
                "node": nid,
                "epsilon": j["epsilon"],
                "delta": j["delta"],
                "contributed": j["contributed"],
                "contributions": j["contributions"],
                "peers": j["peers"],
                "baselines": j["baselines"],
                "seeded_rng": j["seeded_rng"],
                **({"incoming": j["incoming"]} if "incoming" in j else {}),
            }
        )
    seeded = sorted(set(summary["seeded_rng"]) | {r["node"] for r in privacy if r["seeded_rng"]})
    res: dict[str, Any] = {
        "algorithm": a.algorithm,
        "job_id": job.job_id,
        "nodes": cluster.n,
        "workers": len({cluster.host_of[nid] for nid in cluster.ids}) if workers else 0,
        "params": spec_params,
        "contributors": sorted(summary["contributors"]),
        "contributions": summary["contributions"],
        "elapsed_s": elapsed,
        "startup_s": startup,
        "privacy": privacy,
        "threat_model": summary["threat_model"],
        "seeded_rng": seeded,
        "not_private": not_private_note(seeded) if seeded else None,
        "workdir": str(cluster.workdir),
    }
    value = np.asarray(summary["value"], dtype=np.float64)
    if a.algorithm == "ring-sum":
        res.update(_ring_outcome(a, cluster, summary, spec_params, data, value))
    elif a.algorithm == "walk-sum":
        res.update(_walk_sum_outcome(a, summary, spec_params, data, value))
    elif a.algorithm == "walk-histogram":
        res.update(_walk_histogram_outcome(summary, data, value))
    elif a.algorithm == "inca":
        res.update(_inca_outcome(cluster, job.job_id, data, faults, privacy))
    elif a.algorithm.startswith("muffliato"):
        res.update(_gossip_outcome(a, cluster, job.job_id, summary, spec_params, data, privacy))
    else:  # walk-sgd, rw-sgd
        res.update(_walk_sgd_outcome(a, cluster.n, spec_params, data, value))
    return res


def inca_fault_plan(a: argparse.Namespace, ids: list[str]) -> dict[str, list[str]]:
    """Node fault flags for `--leave` / `--miss` (`faults.inca_dropout_flags`), seeded by --seed."""
    return inca_dropout_flags(
        ids,
        leave=a.leave,
        miss=a.miss,
        seed=a.seed or 0,
        T=a.steps or 10,
        k=a.k,
        round_s=a.round_s,
        horizon=a.timeout + 60,
    )


async def _wait_schedules(cluster: LocalCluster, job_id: str, bound: float = 20.0) -> None:
    """Muffliato: the public end-of-job schedules still travel after the job is done; wait (at most
    `bound` seconds) until every node's ledger holds them, so that the labelled joint-view and paper
    figures can be computed for every node (the guarantee itself does not need them)."""
    waiting = list(cluster.ids)
    deadline = time.monotonic() + bound
    while waiting and time.monotonic() < deadline:
        still = []
        for nid in waiting:
            led = Ledger.open_readonly(cluster.ledger(nid))
            try:
                spec = next((j.spec for j in led.jobs() if j.job_id == job_id), None)
                known = (
                    spec is not None and schedules(spec, led.entries(job_id), nid)[0] is not None
                )
            finally:
                led.close()
            if not known:
                still.append(nid)
        waiting = still
        if waiting:
            await asyncio.sleep(0.2)


def _inca_outcome(
    cluster: LocalCluster,
    job_id: str,
    data: DemoData,
    faults: dict[str, list[str]],
    privacy: list[dict[str, Any]],
) -> dict[str, Any]:
    """The result the stayers released (read from their ledgers), the true mean, the central-DP
    error at the privacy the execution achieved, the share check (Eq. 8) over the merged ledgers,
    and what the leavers took away (`inca_audit.estimate_terms`)."""
    nodes = audit.load([cluster.ledger(nid) for nid in cluster.ids])
    rows = {n.node: next(j for j in n.jobs if j.job_id == job_id) for n in nodes}
    results = {nid: r.result for nid, r in rows.items() if r.result and r.result.get("value")}
    ref_node = max(results, key=lambda nid: len(results[nid]["info"]["final"]))
    info = results[ref_node]["info"]
    spec = rows[ref_node].spec
    p = spec["params"]
    n = len(cluster.ids)
    est = np.asarray(results[ref_node]["value"], float)
    lo, hi = float(p["lo"]), float(p["hi"])
    truth = np.mean([np.clip(data.values[nid], lo, hi) for nid in cluster.ids], axis=0)
    ex = execution_from_info(spec, info)
    terms = inca_audit.estimate_terms(ex)
    drop = inca_audit.dropout_summary(ex, float(p["sigma_delta"]))
    w = terms["omega_total"]
    finals = set(info["final"])
    # the audit of this execution against sampled adversaries (labelled, not a guarantee: the
    # guarantee the nodes report is the local-DP level of η, inca.md §2)
    stayer_eps = [
        row["baselines"][INCA_AUDIT]["epsilon"]
        for row in privacy
        if row["node"] in finals and INCA_AUDIT in row["baselines"]
    ]
    eps_exec = max(stayer_eps) if stayer_eps else float("nan")
    shares = audit.check_inca_shares(nodes)
    leavers = sorted(nid for nid, f in faults.items() if "--fault-leave-at-step" in f)
    missers = sorted(nid for nid, f in faults.items() if "--fault-offline" in f)
    agree = all(
        np.allclose(results[nid]["value"], est, atol=1e-12)
        for nid in results
        if set(results[nid]["info"]["final"]) == finals
    )
    return {
        "estimate": est.tolist(),
        "truth": truth.tolist(),
        # what Σy/Σω estimates without noise: the values weighted by their share in the finals
        "truth_weighted": (
            terms["c_u"] @ np.stack([np.clip(data.values[nid], lo, hi) for nid in cluster.ids]) / w
        ).tolist(),
        "abs_error": float(np.abs(est - truth).max()),
        "final": sorted(finals),
        "missing": info["missing"],
        "lost_messages": info["lost"],
        "stayers_agree": agree,
        "leavers": leavers,
        "missers": missers,
        "missed_iterations": {
            nid: int((~ex.online[:, cluster.ids.index(nid)]).sum()) for nid in missers
        },
        "epsilon_execution": eps_exec,
        "epsilon_target": float(p["epsilon"]),
        "central_dp_std": central_dp_std(eps_exec, float(p["delta"]), float(p["sensitivity"]), n)
        if stayer_eps
        else None,
        "central_dp_std_target": central_dp_std(
            float(p["epsilon"]), float(p["delta"]), float(p["sensitivity"]), n
        ),
        "std_from_eta": float(p["sigma_eta"]) * float(np.linalg.norm(terms["c_u"])) / w,
        "uncancelled_noise_std": drop["uncancelled_noise_std"],
        "uncancelled_terms": int(np.count_nonzero(np.abs(terms["c_delta"]) > 1e-12)),
        "value_share_released": drop["value_share_released"],
        "values_lost": float(n - terms["c_u"].sum()),
        "sum_omega": info["sum_omega"],
        "shares_ok": shares.ok,
        "shares_details": shares.details,
        "sigma_eta": float(p["sigma_eta"]),
        "sigma_delta": float(p["sigma_delta"]),
        "T": int(p["T"]),
        "k": int(p["k"]),
        "threat": p["threat"],
    }


def _ring_outcome(
    a: argparse.Namespace,
    cluster: LocalCluster,
    summary: dict[str, Any],
    p: dict[str, Any],
    data: DemoData,
    value: np.ndarray,
) -> dict[str, Any]:
    util = ring_sum_utility({"participants": summary["participants"], "params": p})
    contributors = set(summary["contributors"])
    clipped = {nid: float(np.clip(v[0], -a.clip, a.clip)) for nid, v in data.values.items()}
    truth = sum(clipped[n] for n in cluster.ids if n in contributors)
    estimate = float(value[0])
    return {
        "rounds": a.rounds,
        "epsilon_per_window": p["epsilon"],
        "delta_per_window": a.delta,
        "sigma": p["sigma"],
        "estimate": estimate,
        "truth": truth,
        "abs_error": abs(estimate - truth),
        "netdp_std": util["netdp_std"],
        "ldp_std": util["ldp_std"],
        "noise_additions": int(util["noise_additions"]),
    }


def _walk_sum_outcome(
    a: argparse.Namespace,
    summary: dict[str, Any],
    p: dict[str, Any],
    data: DemoData,
    value: np.ndarray,
) -> dict[str, Any]:
    counts = summary["contributions"]
    truth = sum(
        counts.get(nid, 0) * float(np.clip(v[0], -a.clip, a.clip)) for nid, v in data.values.items()
    )
    steps = int(p["T"])
    sigma_ldp = ldp_sum_sigma(p, prospective_count(p, len(data.values)))
    return {
        "sigma": p["sigma"],
        "epsilon0": p["epsilon0"],
        "estimate": float(value[0]),
        "truth": truth,
        "abs_error": abs(float(value[0]) - truth),
        "netdp_std": steps**0.5 * p["sigma"],
        "ldp_std": steps**0.5 * sigma_ldp,
        "steps": steps,
    }


def _gossip_outcome(
    a: argparse.Namespace,
    cluster: LocalCluster,
    job_id: str,
    summary: dict[str, Any],
    p: dict[str, Any],
    data: DemoData,
    privacy: list[dict[str, Any]],
) -> dict[str, Any]:
    """Every node's estimate against the true mean of the contributors' clipped values, and the
    noise std of the mean beside local DP and a trusted curator for the guarantee the nodes
    report (the worst pair; spec §1.1 baselines). The estimates are private to each node (never
    reported to the bootstrap): the demo, which runs every node, reads them from their ledgers."""
    n = len(summary["participants"])
    contributors = set(summary["contributors"])
    truth = (
        sum(
            float(np.clip(v[0], -a.clip, a.clip))
            for nid, v in data.values.items()
            if nid in contributors
        )
        / n
    )
    est = {}
    for nid in cluster.ids:
        led = Ledger.open_readonly(cluster.ledger(nid))
        try:
            row = led.job(job_id)
        finally:
            led.close()
        if row is not None and row.result and row.result.get("value") is not None:
            est[nid] = float(row.result["value"][0])
    err = {k: abs(v - truth) for k, v in est.items()}
    worst_row = max(privacy, key=lambda row: row["epsilon"], default=None)
    worst = worst_row["epsilon"] if worst_row is not None else 0.0
    out: dict[str, Any] = {
        "sigma": p["sigma"],
        "truth": truth,
        "estimates": est,
        "estimate": float(np.mean(list(est.values()))),
        "abs_error_max": max(err.values()),
        "abs_error_mean": float(np.mean(list(err.values()))),
        "netdp_std": p["sigma"] / np.sqrt(n),
        "guarantee_epsilon": worst,
    }
    if worst_row is not None and worst > 0:
        # the σ local DP needs for the same guarantee, at the δ that guarantee is stated at
        s_ldp = ldp_sigma(worst, float(worst_row["delta"]), p["sensitivity"], 1)
        out["ldp_std"] = s_ldp / np.sqrt(n)  # everyone publishes x + N(0, σ²), average
        out["central_std"] = s_ldp / n  # a trusted curator: the mean's sensitivity is Δ/n
    return out


def _walk_histogram_outcome(
    summary: dict[str, Any], data: DemoData, value: np.ndarray
) -> dict[str, Any]:
    counts = summary["contributions"]
    truth = np.zeros(len(value))
    for nid, v in data.values.items():
        truth[int(v[0])] += counts.get(nid, 0)
    return {
        "estimate": value.tolist(),
        "truth": truth.tolist(),
        "abs_error": float(np.abs(value - truth).max()),
    }


def _walk_sgd_outcome(
    a: argparse.Namespace, n: int, p: dict[str, Any], data: DemoData, value: np.ndarray
) -> dict[str, Any]:
    split = data.split
    users = split.user_arrays(n, a.points)
    acc = logistic_accuracy(value, split.X_test, split.y_test)
    eps, delta, lip, T = p["epsilon"], p["delta"], p["lipschitz"], int(p["T"])
    sig_loc = local_sgd_sigma(p["cap"], eps, delta, lip)
    sig_cen = bassily_central_sigma(n, T, eps, delta, lip)
    base = {}
    by_mode: tuple[tuple[Mode, float], ...] = (("local", sig_loc), ("central", sig_cen))
    for mode, sig in by_mode:
        accs = [
            logistic_accuracy(
                sgd_walk(
                    users,
                    T,
                    sig,
                    p["eta"],
                    lip,
                    mode,
                    np.random.default_rng([a.seed or 0, r]),
                    cap=p["cap"],
                    per_example=True,
                ).w,
                split.X_test,
                split.y_test,
            )
            for r in range(5)
        ]
        base[mode] = {"sigma": sig, "test_accuracy": float(np.mean(accs))}
    return {
        "sigma": p["sigma"],
        "test_accuracy": acc,
        "data": split.source,
        "baselines": base,
        "model": value.tolist(),
    }


def render(res: dict[str, Any]) -> str:
    lines = [""]
    alg = res["algorithm"]
    head = (
        f"(job {res['job_id']}: {res['elapsed_s']:.2f} s after {res['startup_s']:.1f} s of "
        "start-up)"
    )
    if alg == "ring-sum":
        lines += [
            f"private ring sum over {res['nodes']} {_where(res)}, {res['rounds']} rounds {head}",
            f"  estimate  {res['estimate']:.4f}",
            f"  truth     {res['truth']:.4f}",
            f"  error     {res['abs_error']:.4f}",
            f"  noise std of the estimate: netdp {res['netdp_std']:.4f}  vs  local DP "
            f"{res['ldp_std']:.4f} for the same guarantee ({res['ldp_std'] / res['netdp_std']:.1f}x "
            f"less noise; {res['noise_additions']} noise additions instead of "
            f"{res['nodes'] * res['rounds']})",
        ]
    elif alg == "walk-sum":
        lines += [
            f"private sum by a token walk on the complete graph over {res['nodes']} {_where(res)}, "
            f"{res['steps']} steps {head}",
            f"  estimate  {res['estimate']:.4f}",
            f"  truth     {res['truth']:.4f}   (Σ over nodes of contributions × value; "
            f"contributions per node: {_counts(res)})",
            f"  error     {res['abs_error']:.4f}",
            f"  noise std of the sum: netdp {res['netdp_std']:.4f}  vs  local DP "
            f"{res['ldp_std']:.4f} for the same guarantee "
            f"({res['ldp_std'] / res['netdp_std']:.2f}x)",
        ]
        if res["ldp_std"] <= res["netdp_std"] * 1.001:
            lines.append(
                "  (with this few nodes the walk amplifies less than the exact local-DP "
                "composition gains; the accountant uses the better bound, so the walk "
                "needs as much noise as local DP; try `netdp simulate --nodes 2048`)"
            )
    elif alg.startswith("muffliato"):
        lines += [
            f"private gossip averaging ({alg}) over {res['nodes']} {_where(res)} {head}",
            f"  estimate  {res['estimate']:.4f}  (mean of the nodes' estimates)",
            f"  truth     {res['truth']:.4f}   (mean of the clipped values of the contributors)",
            f"  error     max {res['abs_error_max']:.4f}, mean {res['abs_error_mean']:.4f} over "
            "nodes",
        ]
        if "ldp_std" in res:
            lines.append(
                f"  noise std of the mean: netdp {res['netdp_std']:.4f}  vs  local DP "
                f"{res['ldp_std']:.4f} and a trusted curator {res['central_std']:.4f} for the "
                f"guarantee the nodes report (worst pair ε={res['guarantee_epsilon']:.3g})"
            )
            if res["ldp_std"] <= res["netdp_std"] * 1.001:
                lines.append(
                    "  (with this few nodes every node can solve its view for the others' "
                    "noisy values: no gain over local DP; try `netdp simulate "
                    "--algorithm muffliato --nodes 1024 --param graph=hypercube`)"
                )
        lines.append(
            "  the guarantee below is the local-DP level of each node's discrete-Gaussian "
            "release (proven for the noise sampled)"
        )
        for key, what in (
            (JOINT_VIEW, "joint view on the realised schedule"),
            (PAPER, "paper bound eq. (6)"),
        ):
            vals = [
                row["baselines"][key]["epsilon"]
                for row in res["privacy"]
                if key in row["baselines"]
            ]
            if vals:
                lines.append(
                    f"  {what}, worst pair: ε={max(vals):.4g} ({CONTINUOUS}; NOT a guarantee)"
                )
    elif alg == "walk-histogram":
        lines += [
            f"private histogram by a token walk over {res['nodes']} {_where(res)} {head}",
            f"  estimate  {np.round(res['estimate'], 2).tolist()}",
            f"  truth     {res['truth']}   (contributions per node: {_counts(res)})",
        ]
    elif alg == "inca":
        lines += [
            f"IncA private mean over {res['nodes']} {_where(res)}, T={res['T']} iterations, "
            f"k={res['k']} {head}",
            f"  estimate  {np.round(res['estimate'], 4).tolist()}  (Σy/Σω over the "
            f"{len(res['final'])} parties online at T: {', '.join(res['final'])})",
            f"  truth     {np.round(res['truth'], 4).tolist()}  (mean of every node's value)",
            f"  error     {res['abs_error']:.4f}   central DP at the audited ε of sampled "
            f"adversaries (ε={res['epsilon_execution']:.3g}, not a guarantee): "
            f"std {res['central_dp_std'] or float('nan'):.4f}"
            f"; at the target ε={res['epsilon_target']:g}: {res['central_dp_std_target']:.4f}",
            f"  noise of the estimate: from η std {res['std_from_eta']:.4f}, from the correlated "
            f"noise the leavers took away std {res['uncancelled_noise_std']:.4f} "
            f"({res['uncancelled_terms']} uncancelled Δ terms); values lost "
            f"{res['values_lost']:.2f} of {res['nodes']}",
        ]
        if res["leavers"] or res["missers"]:
            lines.append(
                f"  left for good: {', '.join(res['leavers']) or '-'}; dropped out for "
                f"a while: "
                + (
                    ", ".join(
                        f"{k} ({v} iterations missed)" for k, v in res["missed_iterations"].items()
                    )
                    or "-"
                )
            )
        verdict = "yes" if res["shares_ok"] else "NO: " + "; ".join(res["shares_details"])
        lines.append(
            f"  every party that stayed to the end injected exactly its share (Eq. 8, "
            f"merged ledgers): {verdict}"
        )
    else:
        b = res["baselines"]
        lines += [
            f"private logistic regression by a token walk ({alg}) over {res['nodes']} "
            f"{_where(res)}, data {res['data']} {head}",
            f"  test accuracy: netdp {res['test_accuracy']:.4f} (σ={res['sigma']:.3g})   local DP "
            f"{b['local']['test_accuracy']:.4f} (σ={b['local']['sigma']:.3g})   central DP "
            f"{b['central']['test_accuracy']:.4f} (σ={b['central']['sigma']:.3g}, trusted "
            "curator)   [baselines: same data, steps and ε, mean of 5 in-process runs]",
        ]
        if alg == "walk-sgd":
            lines.append(
                "  walk-sgd's amplification (Lemma 1, by iteration) is proven for "
                "continuous noise only; netdp charges the local-DP level of each node's "
                "discrete-Gaussian releases (so no gain over local DP is claimed)"
            )
            vals = [
                row["baselines"][LEMMA1]["epsilon"]
                for row in res["privacy"]
                if LEMMA1 in row["baselines"]
            ]
            if vals:
                lines.append(
                    f"  Lemma 1 figure, worst pair: ε={max(vals):.4g} (continuous-noise "
                    "analysis; not proven for discrete noise; NOT a guarantee)"
                )
    lines += [""]
    if res.get("not_private"):
        lines += wrap(res["not_private"], "")
    lines += [
        "privacy each node has incurred towards each other node, from its own ledger"
        + (f" ({NOT_PRIVATE})" if res.get("not_private") else "")
        + ":"
    ]
    peers = [p["node"] for p in res["privacy"]]
    w = max(len(x) for x in peers)
    show = peers if len(peers) <= 10 else []
    lines.append(
        f"  {'node':<{w}}  {'ε (worst)':>10}  {'δ':>9}  " + "  ".join(f"{p:>{w}}" for p in show)
    )
    for row in res["privacy"]:
        eps = {p["peer"]: p["epsilon"] for p in row["peers"]}
        cells = "  ".join(f"{(f'{eps[p]:.3f}' if p in eps else '-'):>{w}}" for p in show)
        lines.append(
            f"  {row['node']:<{w}}  {row['epsilon']:>10.4f}  {row['delta']:>9.2g}  {cells}"
            + (f"  {NOT_PRIVATE}" if row.get("seeded_rng") else "")
        )
    methods = sorted({p["method"] for row in res["privacy"] for p in row["peers"]})
    lines.append(f"  (method: {'; '.join(methods)}; see `netdp privacy report`)")
    if res.get("threat_model"):
        lines += threat_lines(res["threat_model"], "  ")
    return "\n".join(lines)


def _where(res: dict[str, Any]) -> str:
    w = res.get("workers", 0)
    return "node processes" if not w else f"nodes in {w} host process{'es' if w > 1 else ''}"


def _counts(res: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(res["contributions"].items()))


#: Most nodes `netdp demo` runs: one process each (--workers 0), or packed in host processes.
MAX_PROCESS_NODES = 64
MAX_HOSTED_NODES = 2000


def default_workers() -> int:
    """--workers default: one host process per core."""
    return max(1, os.cpu_count() or 1)


#: The demo flag each job parameter comes from (to name it in an error).
PARAM_FLAGS = {
    "delta": "--delta",
    "delta_prime": "--delta",
    "epsilon": "--epsilon",
    "target": "--target-epsilon",
    "rounds": "--rounds",
    "T": "--steps",
    "clip": "--clip",
    "hi": "--clip",
    "bins": "--bins",
    "k": "--k",
    "scheme": "--scheme",
    "threat": "--threat",
    "round_s": "--round-s",
    "expect_leave": "--leave",
    "expect_miss": "--miss",
}


def check_args(a: argparse.Namespace) -> dict[str, Any]:
    """Every flag, then the job they make, checked as the bootstrap checks a submission
    (`Algorithm.validate`), before anything is created or started: a mistake is a ConfigError
    (exit 2) naming the flag, not a failure after the processes started. Returns the job's
    validated parameters."""
    from netdp_node.algorithms import get_algorithm  # lazy: start-up cost

    if a.algorithm not in ALGORITHMS:
        raise ConfigError(
            f"--algorithm must be one of {', '.join(ALGORITHMS)}, not {a.algorithm!r}"
        )
    if getattr(a, "workers", None) is None:
        a.workers = default_workers()
    if a.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (0: one process per node), not {a.workers}")
    most = MAX_HOSTED_NODES if a.workers else MAX_PROCESS_NODES
    if not 3 <= a.nodes <= most:
        raise ConfigError(
            f"--nodes must be between 3 and {most}"
            + ("" if a.workers else " with --workers 0 (one process per node)")
            + f", not {a.nodes}"
        )
    if a.rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, not {a.rounds}")
    if a.steps < 0:
        raise ConfigError(f"--steps must be >= 0 (0: the default), not {a.steps}")
    if not 0 < a.delta < 1:
        raise ConfigError(f"--delta must be in (0, 1), not {a.delta:g}")
    if a.epsilon is not None and not 0 < a.epsilon < math.inf:
        raise ConfigError(f"--epsilon must be a finite number > 0, not {a.epsilon:g}")
    target = getattr(a, "target_epsilon", None)
    if target is not None and a.epsilon is not None:
        raise ConfigError("--target-epsilon sets the noise of the job: do not also give --epsilon")
    if target is not None and not 0 < target < math.inf:
        raise ConfigError(f"--target-epsilon must be a finite number > 0, not {target:g}")
    if a.algorithm == "walk-histogram" and a.bins < 2:
        raise ConfigError(f"--bins must be at least 2, not {a.bins}")
    if a.algorithm in ("walk-sgd", "rw-sgd") and a.points < 1:
        raise ConfigError(f"--points must be at least 1, not {a.points}")
    if a.algorithm == "inca":
        if a.k < 1:
            raise ConfigError(f"--k must be at least 1, not {a.k}")
        if not (0 <= a.leave < 1 and 0 <= a.miss < 1 and a.leave + a.miss < 1):
            raise ConfigError("--leave and --miss must be fractions in [0, 1) with a sum below 1")
    if a.algorithm == "rw-sgd" and a.topology:
        from netdp_bootstrap.topology import KINDS  # lazy: start-up cost

        if a.topology not in KINDS:
            raise ConfigError(
                f"--topology {a.topology!r} is not a kind the bootstrap serves: {', '.join(KINDS)}"
            )
    try:
        return get_algorithm(a.algorithm).validate(_job_params(a, a.nodes), a.nodes)
    except (ValueError, KeyError, TypeError) as e:
        text = str(e)
        flags = sorted(
            {
                f
                for k, f in PARAM_FLAGS.items()
                if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text)
            }
        )
        named = f" (set by {', '.join(flags)})" if flags else ""
        raise ConfigError(
            f"the {a.algorithm} job these flags make is invalid: {text}{named}"
        ) from None


#: Seconds every process gets to stop after SIGTERM before it is SIGKILLed (it needs its
#: --shutdown-grace, 2 s, at most, plus its exit).
STOP_GRACE = 8.0


def run_demo(a: argparse.Namespace) -> int:
    check_args(a)
    if getattr(a, "planned", None) is not None:
        _say(a.planned[2])  # what --target-epsilon chose, before anything starts
    values = None
    if a.data:
        if a.algorithm in ("walk-sgd", "rw-sgd"):
            raise ConfigError("SGD reads the housing data (--data-dir) or makes synthetic data")
        values = load_values(a.data)
        if values.size != a.nodes:
            raise ConfigError(
                f"{a.data} holds {values.size} values; --nodes is {a.nodes} (one value per node)"
            )
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
        # a host process stops its nodes together (each: server grace, links, ledger): more time
        most = max((len(cluster.hosted(h)) for h in set(cluster.host_of.values())), default=1)
        grace = STOP_GRACE + 0.15 * most
        codes = cluster.stop(grace=grace)
        killed = sorted(k for k, v in codes.items() if v == -signal.SIGKILL)
        if killed:  # a healthy process stops well within the grace: never expected
            _say(
                f"warning: {', '.join(killed)} did not stop within {grace:g} s of SIGTERM "
                f"and had to be killed (SIGKILL); see {workdir / 'logs'}"
            )
            keep = True
        bad = {k: v for k, v in codes.items() if v not in (0, None) and k not in killed}
        if bad:
            _say(f"processes that did not exit cleanly: {bad}")
        _say(f"stopped {len(codes)} processes")
        if code != 0:
            _say(f"logs are in {workdir / 'logs'}")
        if not keep and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return code
