"""`netdp watch JOB`: a live view of a running job for the operator.

Every `interval` seconds it asks the bootstrap for the job and the participants' reports
(GetResult) and every participant for its progress (the Peer service's operator-only Status RPC,
at the address the job spec lists), and shows per node: state, protocol steps done of expected,
whether it contributes, its contributions and why it failed or declined. On a terminal the table
refreshes in place (rich); otherwise it prints a line whenever something changed. It returns when
the job is over (0: done, 1: failed), raises TimeoutError after `timeout` seconds; Ctrl-C stops it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

import grpc
import grpc.aio

from netdp.v1 import bootstrap_pb2, peer_pb2
from netdp_node.algorithms import get_algorithm
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.jobs import render_result, result_summary
from netdp_node.progress import is_tty, live
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import secure_channel
from netdp_node.security.pki import Identity

#: how long one Status call may take before the node counts as unreachable for this refresh
STATUS_TIMEOUT_S = 2.0


#: states of a node that reported its end to the bootstrap
REPORTED = ("done", "failed", "declined")


@dataclass
class NodeView:
    node: str
    state: str  # running, done, failed, declined, waiting (not started), unreachable
    progress: int = 0
    expected: int = 0
    contributed: bool | None = None
    contributions: int | None = None
    detail: str = ""

    def steps(self) -> str:
        if self.expected and self.progress <= self.expected:
            return f"{self.progress}/{self.expected}"
        return f"{self.progress}" if self.progress or self.state != "unreachable" else "-"

    def line(self) -> str:
        c = {None: "", True: ", contributes", False: ", noise only"}[self.contributed]
        n = "" if self.contributions is None else f", {self.contributions} contributions"
        steps = "" if self.state in REPORTED and not self.expected else f", {self.steps()} steps"
        return f"{self.node}: {self.state}{steps}{c}{n}" + (
            f" ({self.detail})" if self.detail else ""
        )


async def node_status(
    address: str, identity: Identity, node: str, job_id: str
) -> peer_pb2.JobStatus | None | str:
    """The node's JobStatus of `job_id`; None if it does not know the job (yet); a reason string
    if it cannot be asked (down, refused)."""
    ch = secure_channel(address, identity, peer_name(node))
    try:
        reply = await ch.unary_unary(
            "/netdp.v1.Peer/Status",
            request_serializer=peer_pb2.StatusRequest.SerializeToString,
            response_deserializer=peer_pb2.StatusReply.FromString,
        )(peer_pb2.StatusRequest(), timeout=STATUS_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:
        return e.code().name
    finally:
        await ch.close()
    return next((j for j in reply.jobs if j.job_id == job_id), None)


def spend(reply: bootstrap_pb2.GetResultReply) -> tuple[float, float] | None:
    """What the job costs a node that contributes fully, towards its worst peer (the accountant's
    prospective loss, the one the budget check uses), as (ε, δ); None if it cannot say."""
    job = reply.job
    parts = [p.node_id for p in job.participants]
    try:
        spec = {
            "algorithm": job.algorithm,
            "participants": parts,
            "params": json.loads(job.params_json or "{}"),
        }
        losses = get_algorithm(job.algorithm).accountant.prospective(spec, parts[0])
    except (KeyError, ValueError, TypeError, IndexError, ArithmeticError):
        return None
    worst = max(losses.values(), key=lambda x: x.epsilon, default=None)
    return None if worst is None else (worst.epsilon, worst.delta)


async def snapshot(
    client: BootstrapClient, identity: Identity, job_id: str
) -> tuple[dict[str, Any], list[NodeView], tuple[float, float] | None]:
    """One look: the operator's summary, a view of every participant, and the job's spend."""
    reply = await client.result(job_id)
    summary = result_summary(reply)
    reports = {r.node_id: r for r in reply.results}
    views: list[NodeView] = []
    pending = [p for p in reply.job.participants if p.node_id not in reports]
    asked = await asyncio.gather(
        *(node_status(p.address, identity, p.node_id, job_id) for p in pending)
    )
    status = {p.node_id: s for p, s in zip(pending, asked)}
    for p in reply.job.participants:
        r = reports.get(p.node_id)
        if r is not None:
            state = r.state if r.contributed or r.state == "failed" else "declined"
            views.append(
                NodeView(
                    p.node_id,
                    state,
                    contributed=r.contributed,
                    contributions=r.contributions,
                    detail=r.detail,
                )
            )
            continue
        s = status[p.node_id]
        if isinstance(s, str):
            views.append(NodeView(p.node_id, "unreachable", detail=s))
        elif s is None:
            views.append(NodeView(p.node_id, "waiting", detail="has not joined yet"))
        else:
            views.append(
                NodeView(
                    p.node_id,
                    s.state or "running",
                    int(s.progress),
                    int(s.expected),
                    s.contributed,
                    detail=s.detail,
                )
            )
    return summary, views, spend(reply)


def header(
    summary: dict[str, Any], views: list[NodeView], cost: tuple[float, float] | None, elapsed: float
) -> str:
    done = sum(1 for v in views if v.state in ("done", "declined"))
    failed = sum(1 for v in views if v.state == "failed")
    down = sum(1 for v in views if v.state == "unreachable")
    steps = sum(v.progress for v in views)
    expected = sum(v.expected for v in views)
    steps_s = (f", steps {steps}" + (f"/{expected}" if expected else "")) if steps else ""
    cost_s = (
        f"; a contributing node spends ε = {cost[0]:.4g} at δ = {cost[1]:.3g} towards its "
        "worst peer"
        if cost
        else ""
    )
    return (
        f"job {summary['job_id']} ({summary['algorithm']}) {summary['state']} after "
        f"{elapsed:.0f} s: {done}/{len(views)} nodes finished, {failed} failed, {down} "
        f"unreachable{steps_s}" + cost_s
    )


def table_of(
    summary: dict[str, Any], views: list[NodeView], cost: tuple[float, float] | None, elapsed: float
) -> Any:
    from rich.table import Table  # lazy: start-up cost

    t = Table(title=header(summary, views, cost, elapsed), title_justify="left")
    for c in ("node", "state", "steps", "contributes", "contributions", "detail"):
        t.add_column(c, justify="right" if c in ("steps", "contributions") else "left")
    style = {"done": "green", "failed": "red", "unreachable": "red", "declined": "yellow"}
    for v in views:
        t.add_row(
            v.node,
            f"[{style.get(v.state, '')}]{v.state}[/]" if v.state in style else v.state,
            v.steps(),
            {None: "", True: "yes", False: "no"}[v.contributed],
            "" if v.contributions is None else str(v.contributions),
            v.detail,
        )
    return t


async def watch(
    client: BootstrapClient,
    identity: Identity,
    job_id: str,
    *,
    interval: float = 1.0,
    timeout: float = 3600.0,
    stream: IO[str] | None = None,
    tty: bool | None = None,
) -> int:
    """Follow the job until it is over: 0 done, 1 failed (see the module docstring)."""
    out = sys.stdout if stream is None else stream
    t = is_tty(out) if tty is None else tty
    t0 = time.monotonic()
    deadline = t0 + timeout
    last: dict[str, str] = {}
    last_head = ""
    with live(out, tty=t) as show:
        while True:
            summary, views, cost = await snapshot(client, identity, job_id)
            over = summary["failed"] or summary["complete"]
            elapsed = time.monotonic() - t0
            if t:
                show(table_of(summary, views, cost, elapsed))
            else:
                # plain: the lines that changed (a node's progress, state), the header on change
                head = header(summary, views, None, 0.0)  # what changed, not the clock
                if head != last_head:
                    show(f"[{elapsed:6.1f}s] " + header(summary, views, cost, elapsed))
                    last_head = head
                for v in views:
                    if last.get(v.node) != v.line():
                        show(f"[{elapsed:6.1f}s]   {v.line()}")
                        last[v.node] = v.line()
            if over:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job_id} still {summary['state']} after {timeout:g}s "
                    "(netdp watch --timeout)"
                )
            await asyncio.sleep(interval)
    out.write(render_result(summary) + "\n")
    out.flush()
    return 0 if summary["state"] == "done" else 1
