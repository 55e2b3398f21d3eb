"""Transport benchmark: netdp token hops over mTLS against bare references on the same machine.

    python benchmarks/bench_transport.py            # full run (a few minutes)
    python benchmarks/bench_transport.py --quick    # smoke test (< 60 s)

Measures, in one run:

1. netdp single token walk: a LocalCluster (bootstrap + 8 node processes on loopback, mTLS), a
   ring-sum job with many rounds (default K=300 -> 2400 token hops). Timed from the nodes' own
   ledgers (every hop is a durable ledger commit at the receiver): hops/s, per-hop latency, and the
   per-hop distribution (sender's ledger commit -> receiver's ledger commit, matched per hop).
2. netdp aggregate: 8 ring-sum jobs submitted at once on the same cluster (8 token walks in flight,
   each starting at a different node); total token hops / wall time.
3. References between two processes (a child process serves, this process drives), 1 KiB messages,
   the same kind of mTLS certificates (netdp_node.security.pki, ECDSA P-256, client cert required):
   (a) grpc.aio unary ping-pong, (b) grpc.aio bidi-stream ping-pong, (c) asyncio TLS TCP ping-pong
   with length-prefixed frames (the transport floor), (d) one SQLite WAL commit (synchronous=FULL)
   of one small row, plus netdp's own Ledger.commit of one hop's three entries.
4. The target: netdp single-walk hop rate >= 0.4 x the asyncio TLS floor (c) of the same run.

Every measurement: a warm-up, then a run bounded in count and in time; the median of 3 repetitions.
Writes benchmarks/results/transport.json (--quick: transport-quick.json, so a smoke test does not
overwrite a full result) and prints a summary. Every process it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import sqlite3
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.jobs import result_summary
from netdp_node.ledger import Entry, Ledger
from netdp_node.security import pki

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MSG_BYTES = 1024
TARGET_RATIO = 0.4
ECHO_SERVICE = "bench.Echo"


# ------------------------------------------------------------------------------------------------
# machine description

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fs_type(path: Path) -> str:
    """File system type of the mount holding `path` (from /proc/mounts)."""
    best, kind = "", "unknown"
    try:
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/")
                                                                             + "/")):
                if len(parts[1]) >= len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(workdir: Path) -> dict[str, Any]:
    import google.protobuf
    import numpy

    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
        "numpy": numpy.__version__,
        "openssl": ssl.OPENSSL_VERSION,
        "sqlite": sqlite3.sqlite_version,
        "kernel": platform.release(),
        "platform": platform.platform(),
        "workdir_fs": _fs_type(workdir),
        "loadavg_at_start": list(os.getloadavg()),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


# ------------------------------------------------------------------------------------------------
# helpers

def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


async def timed_loop(op: Callable[[], Awaitable[None]], warmup: int, count: int,
                     max_seconds: float) -> dict[str, float]:
    """Warm up, then run `op` until `count` calls or `max_seconds`; rate in calls per second."""
    for _ in range(warmup):
        await op()
    done = 0
    t0 = time.perf_counter()
    deadline = t0 + max_seconds
    while done < count:
        await op()
        done += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return {"count": done, "seconds": elapsed, "per_s": done / elapsed,
            "us_per_op": elapsed / done * 1e6}


def summarize_reps(reps: list[dict[str, float]]) -> dict[str, Any]:
    return {"median_per_s": _median([r["per_s"] for r in reps]),
            "median_us_per_op": _median([r["us_per_op"] for r in reps]),
            "reps": reps}


def issue_pair(pki_dir: Path) -> tuple[Path, Path]:
    """A CA and two node identities (server, client), as netdp issues them."""
    pki.init_ca(pki_dir, common_name="bench CA")
    srv = pki.issue(pki_dir, "bench-server", hosts=("127.0.0.1", "localhost"))
    cli = pki.issue(pki_dir, "bench-client", hosts=("127.0.0.1", "localhost"))
    return srv, cli


def _read_ident(folder: Path) -> tuple[bytes, bytes, bytes]:
    return ((folder / "ca.pem").read_bytes(), (folder / "cert.pem").read_bytes(),
            (folder / "key.pem").read_bytes())


# ------------------------------------------------------------------------------------------------
# reference servers (run in a child process)

def _ref_server_child(kind: str, certs: str, conn: Any) -> None:
    asyncio.run(_ref_server(kind, Path(certs), conn))


async def _ref_server(kind: str, certs: Path, conn: Any) -> None:
    ca, cert, key = _read_ident(certs)
    loop = asyncio.get_running_loop()
    if kind == "grpc":
        async def unary(req: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
            return req

        async def stream(reqs: Any, ctx: grpc.aio.ServicerContext) -> Any:
            async for r in reqs:
                yield r

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(ECHO_SERVICE, {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.stream_stream_rpc_method_handler(stream),
        }),))
        creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                            require_client_auth=True)
        port = server.add_secure_port("127.0.0.1:0", creds)
        await server.start()
        conn.send(port)
        await loop.run_in_executor(None, _wait_stop, conn)
        await server.stop(0.5)
        return
    if kind == "tls":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: the client must present a certificate
        ctx.load_cert_chain(certs / "cert.pem", certs / "key.pem")

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await r.readexactly(4)
                    (n,) = struct.unpack("!I", head)
                    body = await r.readexactly(n)
                    w.write(head + body)
                    await w.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                pass
            finally:
                w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        conn.send(srv.sockets[0].getsockname()[1])
        await loop.run_in_executor(None, _wait_stop, conn)
        srv.close()
        return
    raise ValueError(kind)


def _wait_stop(conn: Any) -> None:
    try:
        conn.recv()
    except (EOFError, OSError):
        pass  # parent went away: stop too


class ChildServer:
    """A reference server in a spawned child process; `stop()` always ends it."""

    def __init__(self, kind: str, certs: Path) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=_ref_server_child, args=(kind, str(certs), child_conn),
                                daemon=True, name=f"ref-{kind}")
        self.proc.start()
        child_conn.close()
        if not self.conn.poll(60):
            self.stop()
            raise TimeoutError(f"reference server {kind} did not start")
        self.port: int = self.conn.recv()

    def stop(self) -> None:
        try:
            self.conn.send("stop")
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()


# ------------------------------------------------------------------------------------------------
# reference clients

async def bench_grpc(port: int, client: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    ca, cert, key = _read_ident(client)
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                         certificate_chain=cert)
    payload = os.urandom(MSG_BYTES)
    out: dict[str, Any] = {}
    ch = grpc.aio.secure_channel(f"127.0.0.1:{port}", creds)
    try:
        unary = ch.unary_unary(f"/{ECHO_SERVICE}/Unary")

        async def unary_op() -> None:
            r = await unary(payload, timeout=10)
            assert len(r) == MSG_BYTES

        reps = [await timed_loop(unary_op, cfg["warmup"], cfg["count"], cfg["seconds"])
                for _ in range(cfg["reps"])]
        out["grpc_unary"] = summarize_reps(reps)

        call = ch.stream_stream(f"/{ECHO_SERVICE}/Stream")()

        async def stream_op() -> None:
            await call.write(payload)
            r = await call.read()
            assert len(r) == MSG_BYTES

        reps = [await timed_loop(stream_op, cfg["warmup"], cfg["count"], cfg["seconds"])
                for _ in range(cfg["reps"])]
        out["grpc_stream"] = summarize_reps(reps)
        await call.done_writing()
        call.cancel()
    finally:
        await ch.close()
    return out


async def bench_tls(port: int, client: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    ca, _, _ = _read_ident(client)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca.decode())
    ctx.load_cert_chain(client / "cert.pem", client / "key.pem")
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    payload = os.urandom(MSG_BYTES)
    frame = struct.pack("!I", len(payload)) + payload
    tls_version = w.get_extra_info("ssl_object").version()
    try:
        async def op() -> None:
            w.write(frame)
            await w.drain()
            (n,) = struct.unpack("!I", await r.readexactly(4))
            body = await r.readexactly(n)
            assert len(body) == MSG_BYTES

        reps = [await timed_loop(op, cfg["warmup"], cfg["count"], cfg["seconds"])
                for _ in range(cfg["reps"])]
    finally:
        w.close()
        try:
            await w.wait_closed()
        except (ConnectionError, ssl.SSLError):
            pass
    res = summarize_reps(reps)
    res["tls_version"] = tls_version
    return res


def bench_sqlite(workdir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """(d) One synchronous WAL commit of one small row; and netdp's Ledger.commit of one hop."""
    d = workdir / "sqlite"
    d.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(d / "bare.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, ts REAL NOT NULL, v TEXT NOT NULL)")

    def bare() -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (ts, v) VALUES (?, ?)", (time.time(), "x" * 64))
        db.execute("COMMIT")

    ledger = Ledger(d / "ledger", "node-1")
    seq = [0]

    def hop() -> None:
        # What NodeRuntime does per token hop: look the message up, then one commit of
        # (received, local contribute record, sent).
        seq[0] += 1
        s = seq[0]
        ledger.received_digest("bench-job", "node-8", ("token", "ring", 0, s, 0))
        params = {"round": s, "data": True, "mechanism": "none", "sigma": 0.0,
                  "sensitivity": 2.0, "clip": 1.0}
        ledger.commit([
            Entry(job_id="bench-job", direction="received", event="token", peer="node-8",
                  kind="token", walk="ring", seq=s, digest="ab" * 32),
            Entry(job_id="bench-job", direction="local", event="contribute", params=params),
            Entry(job_id="bench-job", direction="sent", event="token", peer="node-2",
                  kind="token", walk="ring", seq=s, digest="cd" * 32),
        ])

    def run(fn: Callable[[], None]) -> list[dict[str, float]]:
        reps = []
        for _ in range(cfg["reps"]):
            for _ in range(cfg["warmup"]):
                fn()
            done, t0 = 0, time.perf_counter()
            while done < cfg["count"]:
                fn()
                done += 1
                if time.perf_counter() - t0 >= cfg["seconds"]:
                    break
            el = time.perf_counter() - t0
            reps.append({"count": done, "seconds": el, "per_s": done / el,
                         "us_per_op": el / done * 1e6})
        return reps

    try:
        bare_reps = run(bare)
        hop_reps = run(hop)
    finally:
        db.close()
        ledger.close()
    return {"bare_wal_commit": summarize_reps(bare_reps),
            "netdp_ledger_hop_commit": summarize_reps(hop_reps)}


def run_references(workdir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    srv, cli = issue_pair(workdir / "ref-pki")
    out: dict[str, Any] = {"message_bytes": MSG_BYTES, "config": cfg}
    servers: list[ChildServer] = []
    try:
        g = ChildServer("grpc", srv)
        servers.append(g)
        out.update(asyncio.run(bench_grpc(g.port, cli, cfg)))
        g.stop()
        servers.remove(g)
        t = ChildServer("tls", srv)
        servers.append(t)
        out["asyncio_tls"] = asyncio.run(bench_tls(t.port, cli, cfg))
        t.stop()
        servers.remove(t)
    finally:
        for s in servers:
            s.stop()
    out["sqlite"] = bench_sqlite(workdir, cfg["sqlite"])
    return out


# ------------------------------------------------------------------------------------------------
# netdp on a LocalCluster

def _ring_params(rounds: int) -> dict[str, Any]:
    return {"rounds": rounds, "epsilon": 0.5, "delta": 1e-6, "delta_prime": 1e-6, "clip": 1.0}


async def _wait_done(client: BootstrapClient, job_ids: list[str], timeout: float) -> float:
    """Poll the bootstrap until every participant of every job reported; returns monotonic time."""
    deadline = time.monotonic() + timeout
    pending = set(job_ids)
    while pending:
        for j in list(pending):
            s = result_summary(await client.result(j))
            if s["failed"]:
                raise RuntimeError(f"job {j} failed: {s['failed']}")
            if s["complete"]:
                if s["state"] != "done":
                    raise RuntimeError(f"job {j} ended {s['state']}: {s}")
                pending.discard(j)
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs {sorted(pending)} not finished after {timeout:g}s")
        await asyncio.sleep(0.05)
    return time.monotonic()


def analyse_job(cluster: LocalCluster, job_id: str, order: list[str], rounds: int) -> dict[str, Any]:
    """Hop timing of one ring-sum job from the nodes' ledgers (commit timestamps, time.time())."""
    sent: dict[tuple[str, str, str, int], float] = {}
    recv: dict[tuple[str, str, str, int], float] = {}
    all_ts: list[float] = []
    for nid in order:
        led = Ledger.open_readonly(cluster.ledger(nid))
        try:
            for e in led.entries(job_id):
                all_ts.append(e.ts)
                if e.direction == "sent":
                    sent[(nid, e.peer, e.kind, e.seq)] = e.ts
                elif e.direction == "received":
                    recv[(e.peer, nid, e.kind, e.seq)] = e.ts
        finally:
            led.close()
    n = len(order)
    first, second = order[0], order[1]
    token_recv = [k for k in recv if k[2] == "token"]
    if len(token_recv) != n * rounds:
        raise RuntimeError(f"job {job_id}: {len(token_recv)} token receipts in the ledgers, "
                           f"expected {n * rounds}")
    t_first = sent[(first, second, "token", 1)]
    t_last = recv[(order[-1], first, "token", rounds)]
    hop_lat = [recv[k] - t for k, t in sent.items() if k in recv]
    res: dict[str, Any] = {
        "job_id": job_id,
        "token_hops": n * rounds,
        "messages": len(recv),  # token hops + release hops
        "t_first": t_first,
        "t_last_token": t_last,
        "t_end": max(all_ts),
        "token_seconds": t_last - t_first,
        "token_hops_per_s": n * rounds / (t_last - t_first),
        "all_messages_per_s": len(recv) / (max(all_ts) - min(all_ts)),
        "hop_latencies": hop_lat,
        "token_receipt_ts": sorted(recv[k] for k in token_recv),
    }
    if rounds >= 2:  # steady state: round 1 may include a node fetching the job from the bootstrap
        t2 = sent[(first, second, "token", 2)]
        res["steady_hops"] = n * (rounds - 1)
        res["steady_seconds"] = t_last - t2
        res["steady_hops_per_s"] = n * (rounds - 1) / (t_last - t2)
    return res


async def _submit(client: BootstrapClient, order: list[str], rounds: int) -> str:
    job = await client.submit("ring-sum", _ring_params(rounds), participants=order)
    return job.job_id


async def netdp_runs(cluster: LocalCluster, cfg: dict[str, Any]) -> dict[str, Any]:
    ids = cluster.ids
    n = len(ids)
    out: dict[str, Any] = {"nodes": n, "poll_interval_s": cluster.poll_interval,
                           "log_level": cluster.log_level}
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    try:
        # Warm-up: one short job opens every ring link (TLS handshakes) and warms the processes.
        t0 = time.monotonic()
        wid = await _submit(client, ids, cfg["warmup_rounds"])
        await _wait_done(client, [wid], cfg["timeout"])
        out["warmup"] = {"rounds": cfg["warmup_rounds"],
                         "submit_to_done_s": time.monotonic() - t0}

        # 1. a single token walk, `reps` times
        single = []
        for _ in range(cfg["reps"]):
            t0 = time.monotonic()
            jid = await _submit(client, ids, cfg["rounds"])
            t1 = await _wait_done(client, [jid], cfg["timeout"])
            a = analyse_job(cluster, jid, ids, cfg["rounds"])
            a["submit_to_done_s"] = t1 - t0
            single.append(a)
        lat = [x for a in single for x in a["hop_latencies"]]
        rate_key = "steady_hops_per_s" if cfg["rounds"] >= 2 else "token_hops_per_s"
        rate = _median([a[rate_key] for a in single])
        out["single_walk"] = {
            "rounds": cfg["rounds"],
            "token_hops_per_job": n * cfg["rounds"],
            "hops_per_s": rate,
            "hops_per_s_definition": (
                "token hops of rounds 2..K / (node-1 ledger: received round-K token - sent round-2"
                " token); median over reps" if rate_key == "steady_hops_per_s" else
                "token hops / (last - first token ledger commit); median over reps"),
            "per_hop_ms": 1e3 / rate,
            "hops_per_s_incl_round1": _median([a["token_hops_per_s"] for a in single]),
            "all_messages_per_s_first_to_last_entry": _median(
                [a["all_messages_per_s"] for a in single]),
            "hop_latency_ms": {"p50": _pct(lat, 0.5) * 1e3, "p90": _pct(lat, 0.9) * 1e3,
                               "p99": _pct(lat, 0.99) * 1e3, "max": max(lat) * 1e3,
                               "definition": "sender ledger commit -> receiver ledger commit, per"
                                             " hop, pooled over reps"},
            "reps": [{k: v for k, v in a.items() if k not in ("hop_latencies", "token_receipt_ts")}
                     for a in single],
        }

        # 2. `walks` token walks in flight at once, each starting at a different node
        orders = [ids[i % n:] + ids[:i % n] for i in range(cfg["walks"])]
        conc = []
        for _ in range(cfg["conc_reps"]):
            t0 = time.monotonic()
            jids = await asyncio.gather(*(_submit(client, o, cfg["conc_rounds"]) for o in orders))
            t1 = await _wait_done(client, list(jids), cfg["timeout"] * cfg["walks"])
            per = [analyse_job(cluster, j, o, cfg["conc_rounds"]) for j, o in zip(jids, orders)]
            total = sum(a["token_hops"] for a in per)
            start = min(a["t_first"] for a in per)
            end = max(a["t_last_token"] for a in per)
            # the window in which every walk was in flight
            w0, w1 = max(a["t_first"] for a in per), min(a["t_last_token"] for a in per)
            in_win = sum(1 for a in per for ts in a["token_receipt_ts"] if w0 < ts <= w1)
            conc.append({
                "total_token_hops": total,
                "wall_s": end - start,
                "aggregate_hops_per_s": total / (end - start),
                "all_in_flight_window_s": w1 - w0,
                "all_in_flight_hops_per_s": in_win / (w1 - w0) if w1 > w0 else float("nan"),
                "per_walk_hops_per_s": [a["token_hops_per_s"] for a in per],
                "submit_to_done_s": t1 - t0,
            })
        out["concurrent_walks"] = {
            "walks": cfg["walks"],
            "rounds_per_walk": cfg["conc_rounds"],
            "aggregate_hops_per_s": _median([c["aggregate_hops_per_s"] for c in conc]),
            "aggregate_definition": "sum of token hops of all walks / (first token ledger commit of"
                                    " any walk -> last token receipt of any walk)",
            "all_in_flight_hops_per_s": _median([c["all_in_flight_hops_per_s"] for c in conc]),
            "reps": conc,
        }
    finally:
        await client.close()
    return out


def run_netdp(workdir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    cluster = LocalCluster(workdir / "cluster", cfg["nodes"], log_level=cfg["log_level"])
    try:
        data = {}
        for i, nid in enumerate(cluster.ids):
            f = cluster.workdir / "data" / f"{nid}.txt"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(f"{0.1 * (i + 1)!r}\n")
            data[nid] = f
        t0 = time.monotonic()
        cluster.start(data=data, timeout=60)

        async def main() -> dict[str, Any]:
            await cluster.wait_registered(cluster.ids, timeout=60)
            setup = time.monotonic() - t0
            res = await netdp_runs(cluster, cfg)
            res["cluster_setup_s"] = setup
            return res

        return asyncio.run(main())
    except BaseException:
        for name, p in cluster.procs.items():
            tail = p.log_text()[-1500:]
            if tail:
                print(f"--- {name} log tail ---\n{tail}", file=sys.stderr)
        raise
    finally:
        codes = cluster.stop()
        left = [n for n, p in cluster.procs.items() if p.alive()]
        if left:
            print(f"WARNING: still alive after stop(): {left}", file=sys.stderr)
        del codes


# ------------------------------------------------------------------------------------------------
# main

FULL = {
    "refs": {"warmup": 500, "count": 20_000, "seconds": 4.0, "reps": 3,
             "sqlite": {"warmup": 50, "count": 2_000, "seconds": 3.0, "reps": 3}},
    "netdp": {"nodes": 8, "log_level": "info", "warmup_rounds": 10, "rounds": 300, "reps": 3,
              "walks": 8, "conc_rounds": 150, "conc_reps": 3, "timeout": 120.0},
}
QUICK = {
    "refs": {"warmup": 50, "count": 1_000, "seconds": 0.5, "reps": 3,
             "sqlite": {"warmup": 5, "count": 100, "seconds": 0.5, "reps": 3}},
    "netdp": {"nodes": 8, "log_level": "info", "warmup_rounds": 2, "rounds": 10, "reps": 1,
              "walks": 8, "conc_rounds": 5, "conc_reps": 1, "timeout": 30.0},
}


def render(res: dict[str, Any]) -> str:
    m, r, nd, t = res["machine"], res["references"], res["netdp"], res["target"]
    sw, cw = nd["single_walk"], nd["concurrent_walks"]
    sq = r["sqlite"]
    lines = [
        f"netdp transport benchmark ({res['mode']}), {m['date']}",
        f"  machine: {m['nproc']} CPU(s), {m['cpu_model']}; Python {m['python']}, "
        f"grpcio {m['grpcio']}, {m['openssl']}, workdir fs {m['workdir_fs']}",
        "",
        f"1. netdp single token walk, {nd['nodes']} node processes, mTLS, K={sw['rounds']} "
        f"({sw['token_hops_per_job']} hops/job, {len(sw['reps'])} rep(s))",
        f"     {sw['hops_per_s']:9.1f} hops/s   ({sw['per_hop_ms']:.3f} ms per hop; per-hop "
        f"p50 {sw['hop_latency_ms']['p50']:.3f} / p90 {sw['hop_latency_ms']['p90']:.3f} / "
        f"p99 {sw['hop_latency_ms']['p99']:.3f} ms)",
        f"2. netdp {cw['walks']} walks in flight (K={cw['rounds_per_walk']} each)",
        f"     {cw['aggregate_hops_per_s']:9.1f} hops/s aggregate "
        f"({cw['all_in_flight_hops_per_s']:.1f} hops/s while all {cw['walks']} were in flight)",
        f"3. references, 2 processes, {r['message_bytes']} B messages, mTLS (median of "
        f"{r['config']['reps']})",
        f"   (a) grpc.aio unary        {r['grpc_unary']['median_per_s']:9.1f} round trips/s "
        f"({r['grpc_unary']['median_us_per_op']:.0f} us)",
        f"   (b) grpc.aio bidi stream  {r['grpc_stream']['median_per_s']:9.1f} round trips/s "
        f"({r['grpc_stream']['median_us_per_op']:.0f} us)",
        f"   (c) asyncio TLS TCP       {r['asyncio_tls']['median_per_s']:9.1f} round trips/s "
        f"({r['asyncio_tls']['median_us_per_op']:.0f} us, {r['asyncio_tls']['tls_version']})",
        f"   (d) SQLite WAL commit, synchronous=FULL, 1 row: "
        f"{sq['bare_wal_commit']['median_us_per_op']:.0f} us",
        f"       netdp Ledger per hop (lookup + commit of 3 entries): "
        f"{sq['netdp_ledger_hop_commit']['median_us_per_op']:.0f} us",
        "",
        f"4. target: netdp hops/s >= {TARGET_RATIO} x asyncio TLS floor: ratio "
        f"{t['ratio']:.4f} ({sw['hops_per_s']:.1f} / {r['asyncio_tls']['median_per_s']:.1f}) -> "
        f"{'MET' if t['target_met'] else 'NOT MET'}"
        f" (needs {t['required_hops_per_s']:.0f} hops/s)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny counts: a smoke test (< 60 s)")
    ap.add_argument("--out", type=Path, help="result file (default benchmarks/results/"
                    "transport.json, or transport-quick.json with --quick)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (ledgers, logs)")
    a = ap.parse_args(argv)
    cfg = QUICK if a.quick else FULL
    out = a.out or RESULTS / ("transport-quick.json" if a.quick else "transport.json")

    # SIGTERM -> SystemExit, so that the finally blocks stop every process we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="netdp-bench-"))
    t_start = time.monotonic()
    try:
        res: dict[str, Any] = {"mode": "quick" if a.quick else "full",
                               "machine": machine(workdir), "config": cfg}
        print("references (2 processes) ...", file=sys.stderr, flush=True)
        res["references"] = run_references(workdir, cfg["refs"])
        print("netdp on a LocalCluster ...", file=sys.stderr, flush=True)
        res["netdp"] = run_netdp(workdir, cfg["netdp"])
        floor = res["references"]["asyncio_tls"]["median_per_s"]
        hops = res["netdp"]["single_walk"]["hops_per_s"]
        res["target"] = {
            "definition": f"netdp single-walk hops/s >= {TARGET_RATIO} x asyncio TLS ping-pong "
                          "round trips/s (reference c) of the same run",
            "ratio": hops / floor,
            "required_ratio": TARGET_RATIO,
            "required_hops_per_s": TARGET_RATIO * floor,
            "target_met": hops / floor >= TARGET_RATIO,
        }
        res["ratio"] = res["target"]["ratio"]
        res["target_met"] = res["target"]["target_met"]
        res["elapsed_s"] = time.monotonic() - t_start
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2) + "\n")
        print(render(res))
        print(f"\nwritten to {out} ({res['elapsed_s']:.0f} s)")
        return 0
    finally:
        if a.keep:
            print(f"work directory kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
