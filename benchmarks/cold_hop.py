"""CPU of the receiver's critical path of one token hop, in one process, with cold caches.

    python benchmarks/cold_hop.py [--hops 400] [--threads 0] [--warm]

On the 2-vCPU machine a ring of 8 node processes runs each node once every 8 hops: by then the
other processes have evicted its code and data from the CPU caches, and its Python runs about ten
times slower than in a loop (envelope_to_message: 8 us warm, 97 us after a 64 MB memcpy). This
measures the receiver's path as the ring runs it: node B (the second) of an 8-node ring-sum job (the real
NodeRuntime, engine and SQLite ledger; `PeerService._process` as the Link handler calls it) gets
token after token; before each, the caches are flushed (a 64 MB copy) and the previous forward is
acknowledged. Per hop: the CPU time of the event loop's thread and the wall time from the
frame's bytes to the forward's envelope handed to the transport (a stand-in that encodes it as
`GrpcTransport.submit` does and records the time), i.e. critical_path.py's `decode` .. `wake`
without the task switch to the Link writer. The ledger commits with synchronous=NORMAL by default
(no fsync: the path's CPU without the disk's; `--synchronous FULL` as the product). Compare
checkouts with PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import numpy as np

from netdp.v1 import peer_pb2
from netdp_node.algorithms import get_algorithm
from netdp_node.ledger import Ledger, write_pool
from netdp_node.protocols.base import JobContext, Message
from netdp_node.runtime import NodeRuntime
from netdp_node.security.identity import PeerIdentity
from netdp_node.security.mtls import AccessPolicy
from netdp_node.transport.grpc import PeerService
from netdp_node.wire import message_to_envelope

IDS = [f"node-{i}" for i in range(1, 9)]  # the ring of bench_transport.py
ME = "node-2"


class StandIn:
    """The transport: encodes the message as GrpcTransport.submit does, records when, and leaves
    its acknowledgement to the driver."""

    def __init__(self) -> None:
        self.sent_at: list[tuple[int, int]] = []
        self.pending: list[tuple[asyncio.Future[bool], Any]] = []

    def prepare(self, to: str) -> None:
        pass

    def submit(self, to: str, job_id: str, msg: Message, on_done: Any = None) -> Any:
        env = message_to_envelope(job_id, msg)
        env.msg_id = len(self.sent_at) + 1
        self.sent_at.append((time.perf_counter_ns(), time.thread_time_ns()))
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((fut, on_done))
        return fut

    def ack_all(self) -> None:
        for fut, on_done in self.pending:
            fut.set_result(False)
            if on_done is not None:
                on_done(fut)
        self.pending.clear()


async def run(
    hops: int, threads: int, warm: bool, workdir: Path, synchronous: str
) -> dict[str, Any]:
    ledger = Ledger(workdir / "ledger", ME, executor=write_pool(threads) if threads else None)
    ledger._db.execute(f"PRAGMA synchronous={synchronous}")
    transport = StandIn()
    rt = NodeRuntime(ME, ledger, transport, data=np.array([0.3]))  # type: ignore[arg-type]
    job = "job-cold-hop"
    wire = {"rounds": hops + 10, "epsilon": 0.5, "delta": 1e-6, "delta_prime": 1e-6, "clip": 1.0}
    params = get_algorithm("ring-sum").prepare(wire, len(IDS))
    ctx = JobContext(job, "ring-sum", ME, IDS, params, 7)
    await rt.add_job(ctx)
    svc = PeerService(ME, rt.handle, peer_pb2.StatusReply, AccessPolicy())
    who = PeerIdentity("node-1", "node", 1, dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc))
    big = bytearray(64 << 20)
    src = bytes(64 << 20)
    cpu_us: list[float] = []
    wall_us: list[float] = []
    for r in range(1, hops + 1):
        tau = np.array([0.1 * r])
        env = message_to_envelope(job, Message("token", payload=tau, walk="ring", seq=r))
        env.msg_id = r
        raw = peer_pb2.Frame(envelope=env).SerializeToString()
        transport.ack_all()
        for _ in range(3):
            await asyncio.sleep(0)
        await asyncio.sleep(0.002)  # the acked note's commit (with a write thread: settled)
        if not warm:
            big[:] = src  # flush the caches, as 7 other nodes' hops do
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        frame = peer_pb2.Frame()  # as the Link handler: the frame's bytes, parsed, then handled
        frame.ParseFromString(raw)
        ack = await svc._process(who.node_id, who.serial, frame.envelope)
        if ack.code != 0:
            raise RuntimeError(f"hop {r} refused: {ack.detail}")
        t1, c1 = transport.sent_at[-1]
        wall_us.append((t1 - t0) / 1e3)
        cpu_us.append((c1 - c0) / 1e3)
    ledger.close()
    skip = min(20, hops // 10)  # the first hops load the job's code once
    return {
        "cpu_us_median": statistics.median(cpu_us[skip:]),
        "wall_us_median": statistics.median(wall_us[skip:]),
        "cpu_us_p90": sorted(cpu_us[skip:])[int(0.9 * (len(cpu_us) - skip - 1))],
        "hops": hops - skip,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hops", type=int, default=400)
    ap.add_argument("--threads", type=int, default=0, help="ledger write threads (0: on the loop)")
    ap.add_argument("--warm", action="store_true", help="no cache flush between hops")
    ap.add_argument(
        "--synchronous",
        default="NORMAL",
        choices=("NORMAL", "FULL"),
        help="the ledger's SQLite synchronous mode (default NORMAL: no fsync, so that the disk, "
        "shared with other work, does not drown the CPU of the path; FULL as the product)",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netdp-cold-hop-") as d:
        res = asyncio.run(run(a.hops, a.threads, a.warm, Path(d), a.synchronous))
    res["load"] = common.load_average()
    if a.json:
        print(json.dumps(res))
    else:
        print(
            f"receiver's path, {'warm' if a.warm else 'cold'}, {a.threads} write threads: "
            f"CPU {res['cpu_us_median']:.0f} us (p90 {res['cpu_us_p90']:.0f}), wall "
            f"{res['wall_us_median']:.0f} us, load {res['load'][0]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
