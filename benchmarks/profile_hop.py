"""Where does a netdp token hop's time go? Companion to bench_transport.py.

    python benchmarks/profile_hop.py [--rounds 300] [--only cpu,transport,micro,whatif,pyspy,cprofile]

Parts (each on a fresh LocalCluster of 8 node processes, or in-process for `micro`):

  cpu        CPU seconds per hop of every process (from /proc/<pid>/stat) during a single walk,
             minus the same processes' CPU over an idle interval of the same length (the bootstrap
             polling), next to the hop's wall time: is a hop CPU-bound?
  transport  the netdp gRPC transport alone (GrpcTransport -> PeerService with a handler that does
             nothing) between two processes, one message at a time: the transport's share of a hop.
  micro      in-process timings of the Python steps of one hop (envelope encode/decode, digests,
             the engine step, the ledger lookup and commit with synchronous FULL vs NORMAL).
  whatif     the single-walk hop rate with the ledger at synchronous=NORMAL (node processes run as
             node_variant.py, not as the product) and/or the bootstrap polled every 5 s
  pyspy      py-spy (--native, all threads) on one mid-ring node during a single walk: self and
             inclusive time per hop of the hot frames. Needs `pip install py-spy`.
  cprofile   every node under `python -m cProfile` during a single walk: per-hop cost and call
             counts of the runtime/transport functions (cProfile inflates Python-heavy code; read
             it for call counts and relative weight, py-spy for absolute time).

Writes benchmarks/results/profile_hop.json and profile_hop.txt (or --out and its .txt), and raw
profiles under benchmarks/results/profile/. Stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_transport as bt
import common
import numpy as np

from netdp_node.cluster import LocalCluster, Proc

RAW = common.RESULTS / "profile"
NODE_VARIANT = Path(__file__).resolve().parent / "node_variant.py"
_TICK = os.sysconf("SC_CLK_TCK")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        data = fh.read()
    rest = data[data.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / _TICK


# ------------------------------------------------------------------------------------------------
# a cluster whose node processes may run under cProfile


class ProfiledCluster(LocalCluster):
    """LocalCluster whose node processes may run under cProfile, or as node_variant.py with the
    ledger's synchronous mode of a what-if (the product code is not changed)."""

    cprofile_dir: Path | None = None
    ledger_synchronous: str | None = None

    def _spawn(self, name: str, args: list[str]) -> Proc:
        variant = self.ledger_synchronous
        if (self.cprofile_dir is None and not variant) or not name.startswith("node-"):
            return super()._spawn(name, args)
        port_file = self.workdir / "ports" / name
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        log = self.logs / f"{name}.log"
        tail = [*args, "--port-file", str(port_file), "--log-level", self.log_level]
        if self.cprofile_dir is not None:
            full = [
                sys.executable,
                "-m",
                "cProfile",
                "-o",
                str(self.cprofile_dir / f"{name}.prof"),
                "-m",
                "netdp_node.cli",
                *tail,
            ]
        else:
            full = [
                sys.executable,
                str(NODE_VARIANT),
                f"--ledger-synchronous={variant}",
                "--",
                *tail,
            ]
        with open(log, "ab") as fh:
            popen = subprocess.Popen(
                full,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        p = Proc(name, full, log, port_file, popen)
        self.procs[name] = p
        return p


def start_cluster(
    workdir: Path,
    n: int,
    cprofile_dir: Path | None = None,
    ledger_synchronous: str | None = None,
    poll_interval: float = 0.2,
) -> ProfiledCluster:
    c = ProfiledCluster(workdir, n, log_level="info", poll_interval=poll_interval)
    c.cprofile_dir = cprofile_dir
    c.ledger_synchronous = ledger_synchronous
    data = common.ring_values(c)
    c.start(data=data, timeout=60)
    return c


async def submit_and_wait(c: LocalCluster, rounds: int, timeout: float = 300) -> tuple[str, float]:
    """Submit one ring-sum job; wait (watching the ledgers, not the bootstrap) until every message
    was received. Returns (job id, seconds)."""
    client = bt.BootstrapClient(c.bootstrap_address, c.operator)
    progress = bt.Progress(c)
    try:
        t0 = time.monotonic()
        jid = await bt._submit(client, c.ids, rounds)
        expected = c.n * rounds + c.n - 1
        while progress.received([jid]) < expected:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"job {jid} not done after {timeout}s")
            await asyncio.sleep(0.05)
        return jid, time.monotonic() - t0
    finally:
        progress.close()
        await client.close()


async def ready(c: LocalCluster) -> None:
    await c.wait_registered(c.ids, timeout=60)
    await submit_and_wait(c, 5)  # warm-up: opens every link


# ------------------------------------------------------------------------------------------------
# cpu: CPU per hop of every process


def part_cpu(workdir: Path, rounds: int) -> dict[str, Any]:
    c = start_cluster(workdir / "cpu", 8)
    try:

        async def run() -> dict[str, Any]:
            await ready(c)
            pids = {name: p.popen.pid for name, p in c.procs.items() if p.popen}
            # the job, timed
            before = {k: proc_cpu(p) for k, p in pids.items()}
            jid, secs = await submit_and_wait(c, rounds)
            after = {k: proc_cpu(p) for k, p in pids.items()}
            a = bt.analyse_job(c, jid, c.ids, rounds)
            # an idle interval of the same length: background cost (bootstrap polling, keepalives)
            b2 = {k: proc_cpu(p) for k, p in pids.items()}
            await asyncio.sleep(secs)
            a2 = {k: proc_cpu(p) for k, p in pids.items()}
            msgs = c.n * rounds + c.n - 1
            per = {}
            for k in pids:
                busy, idle = after[k] - before[k], a2[k] - b2[k]
                per[k] = {
                    "cpu_s": busy,
                    "idle_cpu_s_same_interval": idle,
                    "net_cpu_ms_per_hop_at_node": (busy - idle) / (msgs / c.n) * 1e3,
                }
            nodes = [k for k in pids if k.startswith("node-")]
            total = sum(after[k] - before[k] for k in nodes)
            idle_total = sum(a2[k] - b2[k] for k in nodes)
            return {
                "rounds": rounds,
                "messages": msgs,
                "job_seconds": secs,
                "hops_per_s": a.get("steady_hops_per_s"),
                "wall_ms_per_hop": 1e3 / a["steady_hops_per_s"],
                "node_cpu_ms_per_hop_total": total / msgs * 1e3,
                "node_cpu_ms_per_hop_net_of_idle": (total - idle_total) / msgs * 1e3,
                "bootstrap_cpu_s_during_job": after["bootstrap"] - before["bootstrap"],
                "bootstrap_cpu_s_idle_same_interval": a2["bootstrap"] - b2["bootstrap"],
                "per_process": per,
                "note": "each hop's work is done by the receiver (handle+commit+send) and, for "
                "the ack and stream teardown, the sender: node CPU per hop sums both",
            }

        return asyncio.run(run())
    finally:
        c.stop()


# ------------------------------------------------------------------------------------------------
# whatif: the single-walk hop rate with one cost removed (node_variant.py, for measuring)

#: (variant, the nodes' ledger synchronous mode (None: the product's FULL), bootstrap poll interval)
WHATIF: list[tuple[str, str | None, float]] = [
    ("as is (synchronous=FULL, poll 0.2 s)", None, 0.2),
    (
        "ledger synchronous=NORMAL (WAL: no fsync per commit; survives a process kill, not power "
        "loss)",
        "NORMAL",
        0.2,
    ),
    ("bootstrap poll every 5 s instead of 0.2 s", None, 5.0),
    ("both", "NORMAL", 5.0),
]


def part_whatif(workdir: Path, rounds: int, reps: int = 4) -> dict[str, Any]:
    """Variants interleaved (v1 v2 v3 v4, v1 v2 ...) so that a change in the machine's load hits
    them alike; a fresh cluster per run, one job of `rounds` rounds after a warm-up."""
    rates: dict[str, list[float]] = {name: [] for name, _, _ in WHATIF}
    p50: dict[str, list[float]] = {name: [] for name, _, _ in WHATIF}
    foreign: dict[str, list[float]] = {name: [] for name, _, _ in WHATIF}
    for rep in range(reps):
        for i, (name, sync, poll) in enumerate(WHATIF):
            c = start_cluster(
                workdir / f"whatif-{rep}-{i}", 8, ledger_synchronous=sync, poll_interval=poll
            )
            try:

                async def run(c: ProfiledCluster = c) -> dict[str, Any]:
                    await ready(c)
                    jid, _ = await submit_and_wait(c, rounds)
                    return bt.analyse_job(c, jid, c.ids, rounds)

                with bt.CpuMeter() as m:
                    a = asyncio.run(run())
                rates[name].append(float(a["steady_hops_per_s"]))
                p50[name].append(float(np.median(a["hop_latencies"])) * 1e3)
                foreign[name].append(m.result["foreign_share_of_machine"])
            finally:
                c.stop()
            say(
                f"  rep {rep + 1}: {rates[name][-1]:7.1f} hops/s, p50 hop {p50[name][-1]:.3f} ms, "
                f"others used {foreign[name][-1]:.0%} of the machine  {name}"
            )
    return {
        "rounds": rounds,
        "reps": reps,
        "variants": [
            {
                "variant": name,
                "hops_per_s": float(np.median(rates[name])),
                "p50_hop_ms": float(np.median(p50[name])),
                "runs_hops_per_s": rates[name],
                "runs_p50_hop_ms": p50[name],
                "foreign_share_of_machine": foreign[name],
            }
            for name, _, _ in WHATIF
        ],
    }


# ------------------------------------------------------------------------------------------------
# transport: GrpcTransport -> PeerService, nothing else


def _transport_server_child(certs: str, conn: Any) -> None:
    asyncio.run(_transport_server(Path(certs), conn))


async def _transport_server(certs: Path, conn: Any) -> None:
    from netdp.v1 import peer_pb2
    from netdp_node.security.mtls import AccessPolicy, start_server
    from netdp_node.security.pki import load_identity
    from netdp_node.transport.grpc import PeerService

    ident = load_identity(certs)

    async def handle(sender: str, job_id: str, msg: Any) -> bool:
        return False

    svc = PeerService(ident.node_id, handle, lambda: peer_pb2.StatusReply(), AccessPolicy())
    server, port = await start_server(
        ident, "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((svc.generic_handler(),))
    )
    conn.send(port)
    await asyncio.get_running_loop().run_in_executor(None, bt._wait_stop, conn)
    await server.stop(0.5)


def part_transport(workdir: Path, count: int, seconds: float) -> dict[str, Any]:
    import multiprocessing as mp

    from netdp_node.protocols.base import Message
    from netdp_node.security.pki import load_identity
    from netdp_node.transport.grpc import GrpcTransport

    srv, cli = bt.issue_pair(workdir / "transport-pki")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_transport_server_child, args=(str(srv), child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(60):
            raise TimeoutError("transport server did not start")
        port = parent.recv()

        async def run() -> dict[str, Any]:
            t = GrpcTransport(load_identity(cli), {"bench-server": f"127.0.0.1:{port}"})
            payload = np.array([0.5])
            seq = [0]

            async def one() -> None:
                seq[0] += 1
                await t.send(
                    "bench-server",
                    "job",
                    Message("token", payload=payload, walk="ring", seq=seq[0]),
                )

            try:
                reps = [await bt.timed_loop(one, 50, count, seconds) for _ in range(3)]
            finally:
                await t.close()
            return bt.summarize_reps(reps)

        return {
            "netdp_grpc_transport_one_at_a_time": asyncio.run(run()),
            "definition": "GrpcTransport.send of a 1-element token, awaited until acked, one "
            "at a time; the server's handler does nothing (no ledger, no "
            "engine)",
        }
    finally:
        try:
            parent.send("stop")
        except OSError:
            pass
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


# ------------------------------------------------------------------------------------------------
# micro: the Python steps of one hop, in-process


def _time(fn: Any, n: int) -> float:
    for _ in range(min(200, n)):
        fn()
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return float(np.median(best))


def part_micro(workdir: Path) -> dict[str, Any]:
    from netdp.v1 import peer_pb2
    from netdp_node.algorithms import get_algorithm
    from netdp_node.algorithms.ring.engine import RingSum
    from netdp_node.algorithms.ring.params import MAX_ROUNDS
    from netdp_node.ledger import Entry, Ledger
    from netdp_node.protocols.base import JobContext, Message
    from netdp_node.security.identity import identity_from_pem
    from netdp_node.wire import envelope_to_message, message_to_envelope

    ids = [f"node-{i}" for i in range(1, 9)]
    # the most rounds ring-sum accepts: the timed steps below never reach the end of the walk
    params = get_algorithm("ring-sum").prepare(bt._ring_params(MAX_ROUNDS), 8)
    ctx = JobContext(
        job_id="job-x",
        algorithm="ring-sum",
        me="node-2",
        participants=tuple(ids),
        params=params,
        public_seed=1,
        edges=(),
    )
    msg = Message("token", payload=np.array([0.25]), walk="ring", seq=1)
    raw = message_to_envelope("job-x", msg, 7).SerializeToString()
    out: dict[str, float] = {}
    out["message_to_envelope+serialize"] = _time(
        lambda: message_to_envelope("job-x", msg, 7).SerializeToString(), 20000
    )

    def decode() -> None:
        env = peer_pb2.Envelope()
        env.ParseFromString(raw)
        envelope_to_message(env)

    out["parse+envelope_to_message"] = _time(decode, 20000)
    out["Message.digest"] = _time(msg.digest, 20000)
    out["Ack serialize+parse"] = _time(
        lambda: peer_pb2.Ack.FromString(peer_pb2.Ack(msg_id=7).SerializeToString()), 20000
    )

    eng = RingSum(ctx, np.array([0.3]), np.random.default_rng(1))
    k = [0]

    def step() -> None:
        k[0] += 1
        eng.received = k[0] - 1
        eng.on_message("node-1", Message("token", payload=np.array([0.25]), walk="ring", seq=k[0]))

    out["RingSum.on_message"] = _time(step, 20000)

    srv, _ = bt.issue_pair(workdir / "micro-pki")
    pem = (srv / "cert.pem").read_bytes()
    from cryptography import x509

    out["x509 parse of the peer certificate (uncached)"] = _time(
        lambda: x509.load_pem_x509_certificate(pem), 2000
    )
    out["identity_from_pem (as called per stream)"] = _time(lambda: identity_from_pem(pem), 2000)
    out["json.dumps(params, sort_keys)"] = _time(
        lambda: json.dumps(
            {
                "round": 1,
                "data": True,
                "mechanism": "none",
                "sigma": 0.0,
                "sensitivity": 2.0,
                "clip": 1.0,
            },
            sort_keys=True,
        ),
        20000,
    )

    for sync in ("FULL", "NORMAL"):
        led = Ledger(workdir / f"micro-ledger-{sync}", "node-2")
        led._db.execute(f"PRAGMA synchronous={sync}")  # an experiment on a private ledger
        s = [0]

        def hop(led: Ledger = led, s: list[int] = s) -> None:
            s[0] += 1
            led.received_digest("job-x", "node-1", ("token", "ring", 0, s[0], 0))
            led.commit(
                [
                    Entry(
                        job_id="job-x",
                        direction="received",
                        event="token",
                        peer="node-1",
                        kind="token",
                        walk="ring",
                        seq=s[0],
                        digest="ab" * 32,
                    ),
                    Entry(
                        job_id="job-x",
                        direction="local",
                        event="contribute",
                        params={
                            "round": s[0],
                            "data": True,
                            "mechanism": "none",
                            "sigma": 0.0,
                            "sensitivity": 2.0,
                            "clip": 1.0,
                        },
                    ),
                    Entry(
                        job_id="job-x",
                        direction="sent",
                        event="token",
                        peer="node-3",
                        kind="token",
                        walk="ring",
                        seq=s[0],
                        digest="cd" * 32,
                    ),
                ]
            )

        out[f"Ledger lookup+commit of one hop, synchronous={sync}"] = _time(hop, 500)
        led.close()
    return {"us": out}


# ------------------------------------------------------------------------------------------------
# pyspy: sample one node


def _poll_line() -> int:
    """The line of selectors.EpollSelector.select that blocks in epoll (the idle event loop)."""
    import inspect
    import selectors

    src, first = inspect.getsourcelines(selectors.EpollSelector.select)
    return next(first + i for i, line in enumerate(src) if "self._selector.poll(" in line)


# Exclusive attribution of a busy main-thread sample: the first category with a matching frame.
CATEGORIES = [
    ("ledger COMMIT (sqlite commit + WAL fsync)", r"__exit__ \(netdp_node/ledger"),
    (
        "ledger commit: BEGIN + inserts + json",
        r"(commit|__enter__|_update_job) \(netdp_node/ledger",
    ),
    ("ledger lookup (received_digest)", r"received_digest \(netdp_node/ledger"),
    (
        "wire decode (Envelope parse, tensor checks)",
        r"(envelope_to_message|tensor_to_ndarray|ParseFromString) \(",
    ),
    ("wire encode (Envelope build)", r"(message_to_envelope|ndarray_to_tensor) \("),
    ("Message.digest (sha256)", r"digest \(netdp_node/protocols"),
    ("engine (RingSum, noise)", r"netdp_node/protocols/ring|netdp_node/privacy"),
    ("fault-injection hooks", r"netdp_node/faults"),
    ("logging", r"\(logging/"),
    ("grpc aio call.write (C-core: HTTP/2 + TLS + sendmsg, inline)", r"_?write \(grpc/aio/_call"),
    ("grpc aio call.read", r"_?read \(grpc/aio/_call"),
    (
        "bootstrap polling (daemon._poll, bootstrap client)",
        r"_poll \(netdp_node/daemon|netdp_node/bootstrap_client|_report \(netdp_node/daemon",
    ),
    ("runtime (handle, deliver, _apply, _send: the rest)", r"netdp_node/runtime"),
    ("netdp transport (PeerService, Link: the rest)", r"netdp_node/transport"),
    ("grpc (other: server streaming, cython callbacks)", r"grpc/|cygrpc"),
    ("asyncio machinery", r"asyncio/|selectors\.py"),
]


def summarise_collapsed(paths: list[Path], rate: int, hops: int) -> dict[str, Any]:
    """Wall time per hop of the profiled nodes' event-loop thread, by category (py-spy --idle
    samples, Python frames). Idle = the loop blocked in epoll with nothing to do."""
    idle_rx = re.compile(rf"select \(selectors\.py:{_poll_line()}\)$")
    cats = [(name, re.compile(p)) for name, p in CATEGORIES]
    by_cat: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = idle = other_threads = 0
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, cnt = line.rpartition(" ")
            if not stack or not cnt.isdigit():
                continue
            n = int(cnt)
            frames = stack.split(";")
            if "MainThread" not in frames[0]:
                other_threads += n  # the grpc poller thread: blocked in C, mostly idle
                continue
            total += n
            if idle_rx.search(frames[-1]):
                idle += n
                continue
            for name, rx in cats:
                if any(rx.search(f) for f in frames[1:]):
                    by_cat[name] += n
                    break
            else:
                by_cat["other"] += n
            leaf[frames[-1]] += n

    def ms(samples: int) -> float:
        return samples / rate * 1e3 / hops

    busy = total - idle
    return {
        "rate_hz": rate,
        "hops_at_profiled_nodes": hops,
        "main_thread_samples": total,
        "idle_samples": idle,
        "other_thread_samples": other_threads,
        "main_thread_busy_ms_per_hop": ms(busy),
        "main_thread_idle_ms_per_hop": ms(idle),
        "busy_ms_per_hop_by_category": {k: ms(v) for k, v in by_cat.most_common()},
        "busy_share_by_category": {k: v / busy for k, v in by_cat.most_common()} if busy else {},
        "busy_leaf_frames_ms_per_hop": [(k, ms(v)) for k, v in leaf.most_common(25)],
    }


def part_pyspy(
    workdir: Path, rounds: int, nodes: tuple[str, ...] = ("node-3", "node-6"), rate: int = 1000
) -> dict[str, Any]:
    exe = shutil.which("py-spy")
    if exe is None:
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    c = start_cluster(workdir / "pyspy", 8)
    RAW.mkdir(parents=True, exist_ok=True)
    outs = [RAW / f"pyspy-{n}.txt" for n in nodes]
    spies: list[subprocess.Popen[bytes]] = []
    try:

        async def run() -> dict[str, Any]:
            await ready(c)
            for n, out in zip(nodes, outs):
                pid = c.procs[n].popen.pid  # type: ignore[union-attr]
                spies.append(
                    subprocess.Popen(
                        [
                            exe,
                            "record",
                            "--pid",
                            str(pid),
                            "--idle",
                            "--nonblocking",
                            "--threads",
                            "--rate",
                            str(rate),
                            "--format",
                            "raw",
                            "--output",
                            str(out),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            await asyncio.sleep(1.5)  # attached
            jid, secs = await submit_and_wait(c, rounds)
            for spy in spies:
                spy.send_signal(signal.SIGINT)
            for spy in spies:
                spy.wait(60)
            a = bt.analyse_job(c, jid, c.ids, rounds)
            res = summarise_collapsed(outs, rate, (rounds + 1) * len(nodes))
            res.update(
                {
                    "nodes": list(nodes),
                    "rounds": rounds,
                    "job_seconds": secs,
                    "hops_per_s_while_sampled": a["steady_hops_per_s"],
                    "wall_ms_per_hop_while_sampled": 1e3 / a["steady_hops_per_s"],
                    "raw": [str(o) for o in outs],
                    "note": "wall time of the profiled nodes' event-loop thread per token "
                    "they received (py-spy --idle --nonblocking, Python frames: "
                    "native time shows under the Python caller)",
                }
            )
            return res

        return asyncio.run(run())
    finally:
        for spy in spies:
            if spy.poll() is None:
                spy.kill()
                spy.wait(10)
        c.stop()


# ------------------------------------------------------------------------------------------------
# cprofile: every node under cProfile


def part_cprofile(workdir: Path, rounds: int) -> dict[str, Any]:
    RAW.mkdir(parents=True, exist_ok=True)
    pdir = RAW / "cprofile"
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.mkdir(parents=True)
    c = start_cluster(workdir / "cprofile", 8, cprofile_dir=pdir)
    try:

        async def run() -> dict[str, Any]:
            await ready(c)
            jid, secs = await submit_and_wait(c, rounds)
            return {
                "job_seconds": secs,
                "hops_per_s": bt.analyse_job(c, jid, c.ids, rounds)["steady_hops_per_s"],
            }

        res = asyncio.run(run())
    finally:
        c.stop(grace=30)
    files = sorted(str(p) for p in pdir.glob("node-*.prof"))
    if not files:
        return {"skipped": "no profile written", **res}
    st = pstats.Stats(*files)
    # messages received by the profiled nodes: the measured job + the warm-up job (K=5), per node
    msgs = (8 * (rounds + 5) + 2 * 7) * len(files) / 8
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        if (
            "netdp_node" in file or "netdp_bootstrap" in file or "grpc" in file
        ) and nc / msgs >= 0.3:  # per-message code, not start-up
            rows.append(
                {
                    "func": f"{fn} ({file.split('site-packages/')[-1].split('/work/main/')[-1]}"
                    f":{line})",
                    "calls": nc,
                    "calls_per_msg": nc / msgs,
                    "self_us_per_msg": tt / msgs * 1e6,
                    "cum_us_per_msg": ct / msgs * 1e6,
                }
            )
    builtins = []
    for (file, _line, fn), (_cc, nc, tt, _ct, _) in st.stats.items():  # type: ignore[attr-defined]
        if file == "~" and nc / msgs >= 0.3:
            builtins.append(
                {"func": fn, "calls_per_msg": nc / msgs, "self_us_per_msg": tt / msgs * 1e6}
            )
    rows.sort(key=lambda r: -r["cum_us_per_msg"])
    builtins.sort(key=lambda r: -r["self_us_per_msg"])
    missing = sorted(set(c.ids) - {Path(f).stem for f in files})
    res.update(
        {
            "messages_profiled": msgs,
            "profiles": files,
            "nodes_without_profile": missing,  # killed before they could write it
            "netdp_and_grpc_by_cumulative": rows[:45],
            "builtins_by_self": builtins[:20],
            "note": "totals over all 8 nodes for the whole process life (start-up, warm-up "
            "job, polling included), divided by the messages of both jobs",
        }
    )
    return res


# ------------------------------------------------------------------------------------------------


def render(r: dict[str, Any]) -> str:
    L: list[str] = [
        f"netdp hop profile, {r['machine']['date']}, {r['machine']['cpus_usable']} CPU(s) "
        f"{r['machine']['cpu_model']}"
    ]
    if "cpu" in r:
        c = r["cpu"]
        L += [
            "",
            f"[cpu] single walk K={c['rounds']}: {c['hops_per_s']:.0f} hops/s = "
            f"{c['wall_ms_per_hop']:.2f} ms wall per hop; node CPU per hop (all nodes) "
            f"{c['node_cpu_ms_per_hop_total']:.2f} ms, net of idle "
            f"{c['node_cpu_ms_per_hop_net_of_idle']:.2f} ms; bootstrap "
            f"{c['bootstrap_cpu_s_during_job']:.2f} s CPU during the job "
            f"({c['bootstrap_cpu_s_idle_same_interval']:.2f} s idle)",
        ]
    if "transport" in r:
        t = r["transport"]["netdp_grpc_transport_one_at_a_time"]
        L += [
            f"[transport] GrpcTransport alone, one message at a time: "
            f"{t['median_per_s']:.0f} msg/s ({t['median_us_per_op']:.0f} us per message)"
        ]
    if "whatif" in r:
        L += [
            "[what-if] single walk, hops/s (median of reps), one cost removed (node_variant.py "
            "or the poll interval):"
        ]
        L += [
            f"    {v['hops_per_s']:7.1f} hops/s, p50 hop {v['p50_hop_ms']:.3f} ms  {v['variant']}"
            for v in r["whatif"]["variants"]
        ]
    if "micro" in r:
        L += ["[micro] in-process, us per call:"]
        L += [f"    {v:9.1f}  {k}" for k, v in r["micro"]["us"].items()]
    if "pyspy" in r and "skipped" not in r["pyspy"]:
        p = r["pyspy"]
        L += [
            "",
            f"[py-spy] {', '.join(p['nodes'])}, K={p['rounds']}: "
            f"{p['hops_per_s_while_sampled']:.0f} hops/s while sampled "
            f"({p['wall_ms_per_hop_while_sampled']:.2f} ms wall per hop). Event-loop thread, per "
            f"token received: busy {p['main_thread_busy_ms_per_hop']:.3f} ms, idle "
            f"{p['main_thread_idle_ms_per_hop']:.3f} ms; busy time by category:",
        ]
        L += [
            f"    {v:7.3f} ms {p['busy_share_by_category'][k]:5.1%}  {k}"
            for k, v in p["busy_ms_per_hop_by_category"].items()
        ]
        L += ["  busy leaf frames (ms per hop):"]
        L += [f"    {v:7.3f}  {k[:110]}" for k, v in p["busy_leaf_frames_ms_per_hop"][:15]]
    if "cprofile" in r and "skipped" not in r["cprofile"]:
        p = r["cprofile"]
        L += [
            "",
            f"[cProfile] all nodes ({p['hops_per_s']:.0f} hops/s under the profiler), "
            "per message: calls, self us, cumulative us",
        ]
        L += [
            f"    {x['calls_per_msg']:6.2f} {x['self_us_per_msg']:8.1f} "
            f"{x['cum_us_per_msg']:9.1f}  {x['func'][:100]}"
            for x in p["netdp_and_grpc_by_cumulative"][:35]
        ]
    return "\n".join(L)


ALL_PARTS = ("cpu", "transport", "micro", "whatif", "pyspy", "cprofile")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--only", default=",".join(ALL_PARTS))
    ap.add_argument("--out", type=Path, help="result file (default results/profile_hop.json)")
    a = ap.parse_args()
    parts = a.only.split(",")
    with common.workdir("netdp-prof-") as workdir:
        r: dict[str, Any] = {"machine": bt.machine(workdir)}
        if "micro" in parts:
            say("micro ...")
            r["micro"] = part_micro(workdir)
        if "transport" in parts:
            say("transport ...")
            r["transport"] = part_transport(workdir, 5000, 3.0)
        if "cpu" in parts:
            say("cpu ...")
            with bt.CpuMeter() as m:
                r["cpu"] = part_cpu(workdir, a.rounds)
            r["cpu"]["machine_cpu"] = m.result
        if "whatif" in parts:
            say("what-if ...")
            r["whatif"] = part_whatif(workdir, min(a.rounds, 200))
        if "pyspy" in parts:
            say("py-spy ...")
            r["pyspy"] = part_pyspy(workdir, max(a.rounds, 600))
        if "cprofile" in parts:
            say("cProfile ...")
            r["cprofile"] = part_cprofile(workdir, a.rounds)
        previous = a.out or common.result_path("profile_hop")
        if previous.exists() and set(parts) != set(ALL_PARTS):
            # --only: update those parts of the last result, keep the others
            old = json.loads(previous.read_text())
            old.update(r)
            r = old
        common.write_results("profile_hop", r, out=a.out, text=render)
        print(render(r))
        return 0


if __name__ == "__main__":
    sys.exit(main())
