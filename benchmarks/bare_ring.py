"""A token around a ring of bare processes: what a hop costs with nothing of netdp but the wire.

    python benchmarks/bare_ring.py [--nodes 8] [--rounds 300] [--reps 2] [--modes grpc,grpc+commit]
                                   [--hosts W] [--floor]

The reference for bench_transport.py's single walk (8 node processes on this machine): the same
ring, each process forwarding the token to its successor, with no engine, no runtime, no netdp
ledger. Modes:

  grpc          grpc.aio, netdp's channel and server options, mTLS (the cluster's certificates),
                one long-lived bidirectional stream per link as netdp's `Link`: each hop writes
                the token's Envelope (as `message_to_envelope` encodes a ring-sum token) on the
                stream to the successor, whose handler forwards it, then answers with an Ack.
  grpc+commit   the same, and each hop first commits one row to the node's own SQLite file
                (WAL, synchronous=FULL) before it forwards and acknowledges: a durable hop.
  grpc+ledger   the same with netdp's own Ledger instead of the one row: the four entries a
                ring-sum hop commits (received token, contribution, sent token, the previous
                hop's ack note) in one transaction, as the node's runtime does.
  tls           asyncio mTLS streams (length-prefixed frames, an ack frame back), as the
                ping-pong of bench_transport.py's floor.
  tls+commit    the same with the commit.

Modes run alternately (`--reps` times each), each on fresh processes; per run the hop rate
(process 0's clock: K laps of N hops), the load and the share of the machine other processes used.
`--hosts W`: the N nodes run in W processes (contiguous slices, each node its own server, channel
and SQLite file on the process's one event loop), as `netdp demo` packs node daemons; 0 (default):
a process per node. `--floor`: before each run, bench_transport.py's durable-hop floor (an asyncio
mTLS round trip + one synchronous=FULL commit), so each run has its own hop/floor ratio.
Writes benchmarks/results/bare_ring.json and .txt (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sqlite3
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_transport as bt
import common
import grpc
import grpc.aio
import numpy as np

from netdp.v1 import peer_pb2
from netdp_node.ledger import Entry, Ledger
from netdp_node.protocols.base import Message
from netdp_node.security import pki
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import CHANNEL_OPTIONS, SERVER_OPTIONS
from netdp_node.wire import message_to_envelope

SERVICE = "bench.BareRing"
MODES = ("grpc", "grpc+commit", "grpc+ledger", "tls", "tls+commit")


#: commits before the walk, enough for the WAL to pass its checkpoint size (1,000 pages) once
WAL_WARMUP_COMMITS = 1_200


class Commit:
    """One synchronous=FULL WAL commit of one row per hop, in this process's own file."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS hops (seq INTEGER, ts REAL)")
        # As a node's ledger after its first few hundred commits: the WAL has grown to its
        # checkpoint size and is reused from its start, so a commit no longer extends the file
        # (an fsync that must also write the file's new size costs about twice as much).
        for i in range(WAL_WARMUP_COMMITS):
            self(-i)

    def __call__(self, seq: int) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("INSERT INTO hops VALUES (?, ?)", (seq, time.time()))
        self.db.execute("COMMIT")


class LedgerCommit:
    """A ring-sum hop's four entries committed with netdp's Ledger (the node's own file)."""

    JOB = "job-bare-ring"

    def __init__(self, directory: Path, node_id: str, succ: str, pred: str) -> None:
        self.ledger = Ledger(directory, node_id)
        self.ledger.begin_job(self.JOB, "ring-sum", {}, True)
        self.succ, self.pred = succ, pred
        self.params = {"clip": 1.0, "mechanism": "gaussian", "sensitivity": 2.0, "sigma": 17.35}
        for i in range(WAL_WARMUP_COMMITS // 4):
            self(-i - 1)

    def __call__(self, seq: int) -> None:
        digest = f"{seq:064x}"
        self.ledger.commit(
            [
                Entry(
                    self.JOB, "local", "acked", self.succ, "token", "ring", 0, seq - 1, 0, digest
                ),
                Entry(self.JOB, "received", "token", self.pred, "token", "ring", 0, seq, 0, digest),
                Entry(self.JOB, "local", "contribute", params={**self.params, "round": seq}),
                Entry(self.JOB, "sent", "token", self.succ, "token", "ring", 0, seq, 0, digest),
            ]
        )


def _child(mode: str, indices: list[int], n: int, rounds: int, pki_dir: str, work: str) -> None:
    """The nodes `indices` on this process's one event loop."""

    async def run() -> None:
        await asyncio.gather(
            *(_node(mode, i, n, rounds, Path(pki_dir), Path(work)) for i in indices)
        )

    asyncio.run(run())
    os._exit(0)  # (no orderly shutdown: the driver only needs the result)


async def _wait_file(path: Path, limit: float = 60.0) -> str:
    t0 = time.monotonic()
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() - t0 > limit:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(0.02)
    return path.read_text().strip()


async def _node(mode: str, me: int, n: int, rounds: int, pki_dir: Path, work: Path) -> None:
    nid = f"node-{me + 1}"
    succ = f"node-{(me + 1) % n + 1}"
    certs = pki_dir / nid
    ca, cert, key = ((certs / f).read_bytes() for f in ("ca.pem", "cert.pem", "key.pem"))
    commit: Commit | LedgerCommit | None = None
    if mode.endswith("+commit"):
        commit = Commit(work / f"{nid}.sqlite")
    elif mode.endswith("+ledger"):
        commit = LedgerCommit(work / nid, nid, succ, f"node-{(me - 1) % n + 1}")
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    times: list[float] = []
    forward: Any = None  # set once the link to the successor is open

    def on_token(seq: int) -> int | None:
        """The hop's work at this process: the seq to forward, or None (the walk ended)."""
        if commit is not None:
            commit(seq)
        if me == 0:
            times.append(time.perf_counter())
            if seq >= rounds:
                if not done.done():
                    done.set_result(times[-1])
                return None
            return seq + 1
        return seq

    if mode.startswith("grpc"):
        templates: dict[int, bytes] = {}

        def envelope(seq: int) -> bytes:
            raw = templates.get(seq)
            if raw is None:
                msg = Message("token", payload=np.array([0.1 * seq]), walk="ring", seq=seq)
                env = message_to_envelope("job-bare-ring", msg)
                env.msg_id = seq
                raw = templates[seq] = env.SerializeToString()
            return raw

        async def link(requests: Any, context: Any) -> Any:
            async for raw in requests:
                env = peer_pb2.Envelope.FromString(raw)
                nxt = on_token(env.seq)
                if nxt is not None:
                    await forward(envelope(nxt))
                yield peer_pb2.Ack(msg_id=env.msg_id)

        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        "Link": grpc.stream_stream_rpc_method_handler(
                            link, response_serializer=peer_pb2.Ack.SerializeToString
                        )
                    },
                ),
            )
        )
        creds = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )
        port = server.add_secure_port("127.0.0.1:0", creds)
        await server.start()
        (work / f"{nid}.port").write_text(str(port))
        succ_port = await _wait_file(work / f"{succ}.port")
        channel = grpc.aio.secure_channel(
            f"127.0.0.1:{succ_port}",
            grpc.ssl_channel_credentials(ca, key, cert),
            options=[*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", peer_name(succ))],
        )
        call = channel.stream_stream(f"/{SERVICE}/Link")()
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        async def writer() -> None:  # as netdp's Link: a writer task fed by a queue
            while True:
                await call.write(await queue.get())

        async def reader() -> None:
            while await call.read() is not grpc.aio.EOF:
                pass

        async def put(raw: bytes) -> None:
            queue.put_nowait(raw)

        forward = put
        keep = [asyncio.ensure_future(writer()), asyncio.ensure_future(reader())]
    else:
        sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca.decode())
        sctx.verify_mode = ssl.CERT_REQUIRED
        sctx.load_cert_chain(certs / "cert.pem", certs / "key.pem")
        frame = b"\0" * 180  # about an Envelope's size

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while True:
                    (seq,) = struct.unpack("!Q", await r.readexactly(8))
                    await r.readexactly(len(frame))
                    nxt = on_token(seq)
                    if nxt is not None:
                        await forward(nxt)
                    w.write(b"A")  # the ack
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                pass

        srv = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=sctx)
        (work / f"{nid}.port").write_text(str(srv.sockets[0].getsockname()[1]))
        succ_port = await _wait_file(work / f"{succ}.port")
        cctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca.decode())
        cctx.check_hostname = False
        cctx.load_cert_chain(certs / "cert.pem", certs / "key.pem")
        reader_, writer_ = await asyncio.open_connection("127.0.0.1", int(succ_port), ssl=cctx)

        async def send(seq: int) -> None:
            writer_.write(struct.pack("!Q", seq) + frame)

        async def acks() -> None:
            while await reader_.read(4096):
                pass

        forward = send
        keep = [asyncio.ensure_future(acks())]
    (work / f"{nid}.ready").write_text("1")
    for i in range(n):
        await _wait_file(work / f"node-{i + 1}.ready")
    if me == 0:
        await asyncio.sleep(0.2)
        t0 = time.perf_counter()
        await forward(envelope(1) if mode.startswith("grpc") else 1)
        t_end = await asyncio.wait_for(done, 600)
        (work / "result.json").write_text(json.dumps({"seconds": t_end - t0, "hops": n * rounds}))
    await _wait_file(work / "stop", 900)
    del keep


def one_run(
    mode: str, n: int, rounds: int, pki_dir: Path, work: Path, hosts: int = 0
) -> dict[str, Any]:
    work.mkdir(parents=True)
    ctx = mp.get_context("spawn")
    w = hosts if 0 < hosts < n else n
    parts = [list(range(k * n // w, (k + 1) * n // w)) for k in range(w)]
    procs = [
        ctx.Process(target=_child, args=(mode, p, n, rounds, str(pki_dir), str(work)), daemon=True)
        for p in parts
    ]
    load0 = os.getloadavg()[0]
    try:
        with bt.CpuMeter() as m:
            for p in procs:
                p.start()
            t0 = time.monotonic()
            while not (work / "result.json").exists():
                if time.monotonic() - t0 > 600 or not all(p.is_alive() for p in procs):
                    raise RuntimeError(f"{mode}: the ring did not finish")
                time.sleep(0.1)
        r = json.loads((work / "result.json").read_text())
    finally:
        (work / "stop").write_text("1")
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    return {
        "mode": mode,
        "processes": len(procs),
        "hops_per_s": r["hops"] / r["seconds"],
        "hop_us": r["seconds"] / r["hops"] * 1e6,
        "load_start": load0,
        "foreign_share_of_machine": m.result["foreign_share_of_machine"],
    }


def _line(r: dict[str, Any]) -> str:
    floor = r.get("floor")
    tail = (
        ""
        if floor is None
        else f", floor {floor['floor_per_s']:.0f} (round trip {floor['pingpong_us']:.0f} us + "
        f"commit {floor['commit_us']:.0f} us): hop/floor {r['ratio_to_floor']:.3f}"
        f"{' (floor starved)' if floor['starved'] else ''}"
    )
    return (
        f"{r['mode']:12s} {r['hops_per_s']:7.0f} hops/s ({r['hop_us']:.0f} us per hop), "
        f"load {r['load_start']:.1f}, others {r['foreign_share_of_machine']:.0%}{tail}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--hosts", type=int, default=0, help="pack the nodes in W processes (0: one each)"
    )
    ap.add_argument("--floor", action="store_true", help="measure the durable-hop floor per run")
    ap.add_argument("--out", type=Path, default=common.result_path("bare_ring"))
    a = ap.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (known: {', '.join(MODES)})")
    with tempfile.TemporaryDirectory(prefix="netdp-bare-ring-") as d:
        base = Path(d)
        pki_dir = base / "pki"
        pki.init_ca(pki_dir, common_name="bench CA")
        for i in range(a.nodes):
            pki.issue(pki_dir, f"node-{i + 1}", hosts=("127.0.0.1", "localhost"))
        runs = []
        probe = None
        if a.floor:
            bt.issue_pair(base / "ref-pki")
            probe = bt.FloorProbe(base, bt.FULL["netdp"]["floor"])
        try:
            for rep in range(a.reps):
                for mode in modes:
                    floor = None if probe is None else asyncio.run(probe.measure())
                    r = one_run(mode, a.nodes, a.rounds, pki_dir, base / f"{mode}-{rep}", a.hosts)
                    if floor is not None:
                        r["floor"] = {k: v for k, v in floor.items() if not k.endswith("_cpu")}
                        r["ratio_to_floor"] = r["hops_per_s"] / floor["floor_per_s"]
                    runs.append(r)
                    print(f"  {_line(r)}", file=sys.stderr)
        finally:
            if probe is not None:
                probe.close()
    res = {
        "machine": common.machine(["grpcio"]),
        "nodes": a.nodes,
        "processes": runs[0]["processes"] if runs else 0,
        "rounds": a.rounds,
        "runs": runs,
        "median_hops_per_s": {
            m: float(np.median([r["hops_per_s"] for r in runs if r["mode"] == m])) for m in modes
        },
    }
    a.out.write_text(json.dumps(res, indent=1))
    if a.floor:
        res["median_ratio_to_floor"] = {
            m: float(np.median([r["ratio_to_floor"] for r in runs if r["mode"] == m]))
            for m in modes
        }
    lines = [
        f"bare ring of {a.nodes} nodes in {res['processes']} processes, K = {a.rounds}, "
        f"{res['machine']['date']}"
    ]
    lines += [f"  {_line(r)}" for r in runs]
    for m, v in res.get("median_ratio_to_floor", {}).items():
        lines.append(f"  median hop/floor {m}: {v:.3f}")
    a.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
