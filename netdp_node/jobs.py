"""Operator-side view of a job's released result (`netdp job result`, the demo)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np

from netdp.v1 import bootstrap_pb2, common_pb2
from netdp_node.algorithms import get_algorithm, threat_model
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.privacy.threat import NOT_PRIVATE, not_private_note
from netdp_node.report import threat_lines, wrap
from netdp_node.wire import tensor_to_ndarray


def result_summary(reply: bootstrap_pb2.GetResultReply) -> dict[str, Any]:
    """Merge the participants' reports: the released value, who contributed, who declined.

    Also: threat_model {observers, colluders, statement} (who the job's ε holds against,
    `privacy.threat`), seeded_rng (the participants that ran it with a seeded private RNG, `netdp
    node --seed`) and not_private (null, or the NOT PRIVATE (seeded) sentence naming them)."""
    job = reply.job
    participants = [p.node_id for p in job.participants]
    reported = {r.node_id: r for r in reply.results}
    outputs = [tensor_to_ndarray(r.output) for r in reply.results if r.HasField("output")]
    value = outputs[0] if outputs else None
    agree = bool(outputs) and all(np.array_equal(o, outputs[0]) for o in outputs)
    failed = {n: r.detail for n, r in reported.items() if r.state == "failed"}
    missing = [p for p in participants if p not in reported]
    state = "failed" if failed else ("done" if not missing else "running")
    seeded = sorted(n for n, r in reported.items() if r.seeded_rng)
    return {
        "job_id": job.job_id,
        "algorithm": job.algorithm,
        "participants": participants,
        "complete": not missing,
        "state": state,
        "value": None if value is None else value.tolist(),
        "outputs_agree": agree,
        "contributors": [n for n, r in reported.items() if r.contributed],
        "declined": {n: r.detail for n, r in reported.items() if not r.contributed},
        "failed": failed,
        "missing": missing,
        "contributions": {n: r.contributions for n, r in reported.items()},
        "seeded_rng": seeded,
        "not_private": not_private_note(seeded) if seeded else None,
        "threat_model": _threat(job),
        "std": _std(job),
        # participants that came back with a new ledger after the job was submitted
        "warnings": list(reply.warnings),
    }


def _std(job: common_pb2.JobSpec) -> dict[str, Any] | None:
    """{std, how}: the released value's noise std from the job's public parameters, or None."""
    try:
        params = json.loads(job.params_json) if job.params_json else {}
        std = get_algorithm(job.algorithm).accountant.estimate_std
        spec = {
            "algorithm": job.algorithm,
            "participants": [p.node_id for p in job.participants],
            "params": params,
        }
        got = None if std is None else std(spec)
    except (ValueError, KeyError, TypeError):
        return None
    return None if got is None else {"std": got[0], "how": got[1]}


def _threat(job: common_pb2.JobSpec) -> dict[str, Any] | None:
    try:
        params = json.loads(job.params_json) if job.params_json else {}
        spec = {
            "algorithm": job.algorithm,
            "participants": [p.node_id for p in job.participants],
            "params": params,
        }
        return threat_model(spec).as_dict()
    except (ValueError, KeyError, TypeError):
        return None  # a job the bootstrap does not know (empty spec) or an unknown algorithm


async def wait_result(
    client: BootstrapClient, job_id: str, wait: float, poll: float = 0.25
) -> bootstrap_pb2.GetResultReply:
    """Poll the bootstrap until every participant reported, one reported a failure (a failed job
    is over), or `wait` seconds passed."""
    deadline = time.monotonic() + wait
    while True:
        reply = await client.result(job_id)
        done = {r.node_id for r in reply.results}
        if (
            all(p.node_id in done for p in reply.job.participants)
            or any(r.state == "failed" for r in reply.results)
            or time.monotonic() >= deadline
        ):
            return reply
        await asyncio.sleep(poll)


async def wait_nodes(
    client: BootstrapClient, count: int, wait: float, poll: float = 0.5
) -> list[str]:
    """Wait until at least `count` nodes are registered (bounded by `wait` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        ids = [n.node_id for n in await client.list_nodes()]
        if len(ids) >= count:
            return ids
        if time.monotonic() >= deadline:
            raise TimeoutError(f"only {len(ids)} of {count} nodes registered after {wait:g}s")
        await asyncio.sleep(poll)


def render_result(s: dict[str, Any]) -> str:
    lines = [
        f"job {s['job_id']} ({s['algorithm']}): {s['state']}"
        + (f"  {NOT_PRIVATE}" if s.get("not_private") else "")
    ]
    if s.get("not_private"):
        lines += wrap(s["not_private"], "  ")
    if s["value"] is not None:
        std = s.get("std")
        shown = (
            ", ".join(f"{v:.6g}" for v in s["value"])
            if isinstance(s["value"], list) and len(s["value"]) <= 8
            else str(s["value"])
        )
        lines.append(
            f"  released result: {shown}"
            + (f" ± {std['std']:.4g} (noise std)" if std else "")
            + ("" if s["outputs_agree"] else "  (WARNING: participants disagree)")
        )
        if std:
            lines.append(
                f"    noise std {std['std']:.4g} per coordinate, from the public "
                f"parameters: {std['how']}"
            )
        else:
            lines.append(
                f"    noise std: no closed form for {s['algorithm']} from the public "
                "parameters (see the nodes' privacy reports)"
            )
    lines.append(
        f"  contributors ({len(s['contributors'])}/{len(s['participants'])}): "
        f"{', '.join(s['contributors']) or '-'}"
    )
    for n, why in s["declined"].items():
        lines.append(f"  declined: {n}: {why}")
    for n, why in s["failed"].items():
        lines.append(f"  failed: {n}: {why}")
    for w in s.get("warnings", []):
        lines.append(f"  WARNING: {w}")
    if s["missing"]:
        lines.append(f"  not reported yet: {', '.join(s['missing'])}")
    if s.get("threat_model"):
        lines += threat_lines(s["threat_model"], "  ")
    return "\n".join(lines)
