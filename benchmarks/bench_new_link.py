"""CPU of a new peer link against a message on a link already open, client and server side.

    python benchmarks/bench_new_link.py                    # 16 servers x 16 callers, 3 reps
    python benchmarks/bench_new_link.py --variant NAME ... # only these variants (see VARIANTS)
    python benchmarks/bench_new_link.py --quick

A server process hosts S node servers (netdp's `PeerService` over `start_server`: mTLS, the
caller-identity check, one certificate each, a handler that does nothing); a client process holds C
`GrpcTransport`s (one certificate each) and, one message at a time as a walk does, sends one token
from every caller to every server: S x C new links (TCP, TLS handshake, HTTP/2, the Link stream,
the first message and its ack). Then the same again over the links now open. The CPU time (user +
system, all threads) of each process over each phase, divided by the number of messages, gives the
CPU of a new link and of a linked message; their difference is what opening a link costs.

A second part times the steps of a new link with grpc.aio directly (the same options and
credentials), each over every pair at once, client and server CPU: making the channel, connecting
it (TCP + TLS handshake + HTTP/2 settings), opening the Link stream with its first message and ack
(the server's handler set-up and caller-identity check), a second message, closing.

Variants change grpc options in both processes (channel options of the callers, server options of
the servers) or netdp's code paths; their runs alternate (ABAB...) so that a shared machine loads
them alike. Writes benchmarks/results/new_link.json (--quick: new_link-quick.json).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

import common

# name -> (extra channel options, extra server options, environment)
VARIANTS: dict[str, tuple[list[tuple[str, Any]], list[tuple[str, Any]], dict[str, str]]] = {
    "default": ([], [], {}),
    "no-bdp": ([("grpc.http2.bdp_probe", 0)], [("grpc.http2.bdp_probe", 0)], {}),
    "local-pool": ([("grpc.use_local_subchannel_pool", 1)], [], {}),
    "no-retries": ([("grpc.enable_retries", 0)], [], {}),
    "no-svc-config": (
        [("grpc.service_config_disable_resolution", 1), ("grpc.enable_retries", 0)],
        [],
        {},
    ),
    "poll-epoll1": ([], [], {"GRPC_POLL_STRATEGY": "epoll1"}),
    "poll-poll": ([], [], {"GRPC_POLL_STRATEGY": "poll"}),
    "no-event-engine": (
        [],
        [],
        {"GRPC_EXPERIMENTS": "-event_engine_client,-event_engine_listener,-event_engine_dns"},
    ),
    "no-keepalive-ping": ([("grpc.keepalive_time_ms", 60_000)], [], {}),
    "all-opts": (
        [
            ("grpc.http2.bdp_probe", 0),
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.service_config_disable_resolution", 1),
            ("grpc.enable_retries", 0),
        ],
        [("grpc.http2.bdp_probe", 0)],
        {},
    ),
}


def _frame(env: Any) -> bytes:
    from netdp.v1 import peer_pb2

    return peer_pb2.Frame(envelope=env).SerializeToString()


def _ack(raw: bytes) -> Any:
    from netdp.v1 import peer_pb2

    return peer_pb2.Frame.FromString(raw).ack


def _apply(variant: str) -> None:
    """In a child: add the variant's options to netdp's option lists (read at each call)."""
    from netdp_node.security import mtls

    chan, srv, _ = VARIANTS[variant]
    mtls.CHANNEL_OPTIONS.extend(chan)
    mtls.SERVER_OPTIONS.extend(srv)


def _cpu() -> float:
    return time.process_time()  # user + system of every thread of this process


# -- server process ---------------------------------------------------------------------------------
def _server_child(variant: str, folders: list[str], conn: Any) -> None:
    _apply(variant)
    asyncio.run(_servers(folders, conn))


async def _servers(folders: list[str], conn: Any) -> None:
    from netdp.v1 import peer_pb2
    from netdp_node.security.mtls import AccessPolicy, start_server
    from netdp_node.security.pki import load_identity
    from netdp_node.transport.grpc import PeerService

    async def handle(sender: str, job_id: str, msg: Any) -> bool:
        return False

    servers, ports = [], {}
    for f in folders:
        ident = load_identity(f)
        svc = PeerService(ident.node_id, handle, lambda: peer_pb2.StatusReply(), AccessPolicy())
        server, port = await start_server(
            ident,
            "127.0.0.1:0",
            lambda s, svc=svc: s.add_generic_rpc_handlers((svc.generic_handler(),)),
        )
        servers.append((svc, server))
        ports[ident.node_id] = port
    conn.send(ports)
    loop = asyncio.get_running_loop()
    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd == "cpu":
            conn.send(_cpu())
        else:
            break
    for svc, _ in servers:
        svc.stop_links()
    await asyncio.gather(*(server.stop(0.5) for _, server in servers))


# -- client process ---------------------------------------------------------------------------------
def _client_child(variant: str, folders: list[str], ports: dict[str, int], conn: Any) -> None:
    _apply(variant)
    conn.send(asyncio.run(_clients(folders, ports, conn)))


async def _clients(folders: list[str], ports: dict[str, int], conn: Any) -> dict[str, Any]:
    import numpy as np

    from netdp_node.protocols.base import Message
    from netdp_node.security.pki import load_identity
    from netdp_node.transport.grpc import GrpcTransport

    addresses = {nid: f"127.0.0.1:{p}" for nid, p in ports.items()}
    transports = [GrpcTransport(load_identity(f), addresses) for f in folders]
    payload = np.array([0.5])
    seq = [0]

    def server_cpu() -> float:
        conn.send("cpu")
        return float(conn.recv())

    async def phase() -> tuple[float, float, int]:
        s0, c0, n = server_cpu(), _cpu(), 0
        for t in transports:
            for peer in addresses:
                seq[0] += 1
                await t.send(peer, "job", Message("token", payload=payload, walk="w", seq=seq[0]))
                n += 1
        c1, s1 = _cpu(), server_cpu()
        return c1 - c0, s1 - s0, n

    await asyncio.sleep(0.2)
    new_c, new_s, n = await phase()
    linked_c, linked_s, _ = await phase()
    for t in transports:
        await t.close()
    steps = await _client_steps(folders, ports, server_cpu)
    return {
        "messages": n,
        "new_client_ms": 1e3 * new_c / n,
        "new_server_ms": 1e3 * new_s / n,
        "linked_client_ms": 1e3 * linked_c / n,
        "linked_server_ms": 1e3 * linked_s / n,
        "link_client_ms": 1e3 * (new_c - linked_c) / n,
        "link_server_ms": 1e3 * (new_s - linked_s) / n,
        "client_steps_ms": steps,
    }


async def _client_steps(
    folders: list[str], ports: dict[str, int], server_cpu: Any
) -> dict[str, dict[str, float]]:
    """The steps of a new link with grpc.aio directly, each over every (caller, server) pair at
    once: CPU per link (ms) of the client and the server process in each step."""
    import numpy as np

    from netdp_node.protocols.base import Message
    from netdp_node.security.identity import peer_name
    from netdp_node.security.mtls import channel_credentials, secure_channel
    from netdp_node.security.pki import load_identity
    from netdp_node.transport.grpc import PEER_SERVICE
    from netdp_node.wire import message_to_envelope

    env = message_to_envelope("job", Message("token", payload=np.array([0.5]), walk="w", seq=1))
    idents = [load_identity(f) for f in folders]
    creds = [channel_credentials(i) for i in idents]
    pairs = [(k, nid, port) for k in range(len(idents)) for nid, port in ports.items()]
    out: dict[str, dict[str, float]] = {}

    async def step(name: str, fn: Any) -> list[Any]:
        s0, c0 = server_cpu(), _cpu()
        got = [await fn(i, p) for i, p in enumerate(pairs)]
        c1, s1 = _cpu(), server_cpu()
        out[name] = {
            "client_ms": 1e3 * (c1 - c0) / len(pairs),
            "server_ms": 1e3 * (s1 - s0) / len(pairs),
        }
        return got

    async def make(i: int, p: tuple[int, str, int]) -> Any:
        k, nid, port = p
        return secure_channel(f"127.0.0.1:{port}", idents[k], peer_name(nid), creds[k])

    channels = await step("channel", make)

    async def connect(i: int, p: Any) -> None:
        await channels[i].channel_ready()  # TCP, TLS handshake, HTTP/2 settings

    await step("connect", connect)

    async def first(i: int, p: Any) -> Any:
        call = channels[i].stream_stream(
            f"/{PEER_SERVICE}/Link",
            request_serializer=_frame,
            response_deserializer=_ack,
        )()
        env.msg_id = 1
        await call.write(env)
        await call.read()
        return call

    calls = await step("stream_first_message", first)

    async def again(i: int, p: Any) -> None:
        env.msg_id = 2
        await calls[i].write(env)
        await calls[i].read()

    await step("second_message", again)

    async def close(i: int, p: Any) -> None:
        calls[i].cancel()
        await channels[i].close()

    await step("close", close)

    # as a Link does it: dial (get_state(try_to_connect=True)) and open the stream at once,
    # without waiting for the channel to be ready
    async def dial_and_send(i: int, p: tuple[int, str, int]) -> tuple[Any, Any]:
        k, nid, port = p
        ch = secure_channel(f"127.0.0.1:{port}", idents[k], peer_name(nid), creds[k])
        ch.get_state(try_to_connect=True)
        call = ch.stream_stream(
            f"/{PEER_SERVICE}/Link",
            request_serializer=_frame,
            response_deserializer=_ack,
        )()
        env.msg_id = 1
        await call.write(env)
        await call.read()
        return ch, call

    both = await step("dial_and_first_message", dial_and_send)
    for ch, call in both:
        call.cancel()
        await ch.close()
    return out


def run_variant(variant: str, srv: list[str], cli: list[str]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    env = VARIANTS[variant][2]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the children inherit it (grpc reads it at import)
    try:
        sp, sc = ctx.Pipe()
        server = ctx.Process(target=_server_child, args=(variant, srv, sc), daemon=True)
        server.start()
        sc.close()
        if not sp.poll(120):
            raise TimeoutError("servers did not start")
        ports = sp.recv()
        cp, cc = ctx.Pipe()
        client = ctx.Process(target=_client_child, args=(variant, cli, ports, cc), daemon=True)
        client.start()
        cc.close()
        # relay the client's CPU questions to the server until the client's result comes
        deadline = time.monotonic() + 1800
        result: dict[str, Any] | None = None
        while result is None and time.monotonic() < deadline:
            if not cp.poll(1.0):
                if not client.is_alive():
                    raise RuntimeError("the client process died")
                continue
            msg = cp.recv()
            if msg == "cpu":
                sp.send("cpu")
                cp.send(sp.recv())
            else:
                result = msg
        if result is None:
            raise TimeoutError("client did not finish")
        sp.send("stop")
        server.join(30)
        client.join(30)
        return result
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    from netdp_node.security import pki

    ap = common.parser(__doc__)
    ap.add_argument("--servers", type=int, default=16)
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    a = ap.parse_args()
    reps = common.repetitions(a)
    if a.quick:
        a.servers, a.callers = 6, 6
    variants = a.variant or ["default"]
    with common.workdir("netdp-bench-new-link") as work:
        pki.init_ca(work, common_name="bench CA")
        folders = pki.issue_many(
            work,
            [pki.Request(f"srv-{i}") for i in range(a.servers)]
            + [pki.Request(f"cli-{j}") for j in range(a.callers)],
        )
        srv = [str(f) for f in folders[: a.servers]]
        cli = [str(f) for f in folders[a.servers :]]
        runs = []
        for rep in range(reps):
            order = variants if rep % 2 == 0 else list(reversed(variants))
            for v in order:
                load = common.load_average()
                r = run_variant(v, srv, cli)
                r.update(variant=v, rep=rep, load_before=load, load_after=common.load_average())
                runs.append(r)
                print(
                    f"rep {rep} {v:>14}: new link client {r['link_client_ms']:.2f} ms, server "
                    f"{r['link_server_ms']:.2f} ms; linked message {r['linked_client_ms']:.2f} + "
                    f"{r['linked_server_ms']:.2f} ms; steps "
                    + ", ".join(
                        f"{k} {x['client_ms']:.2f}+{x['server_ms']:.2f}"
                        for k, x in r["client_steps_ms"].items()
                    )
                    + f"; load {load[0]}",
                    flush=True,
                )
    summary = {}
    for v in variants:
        rs = [r for r in runs if r["variant"] == v]
        summary[v] = {
            k: sorted(round(r[k], 3) for r in rs)
            for k in ("link_client_ms", "link_server_ms", "linked_client_ms", "linked_server_ms")
        }
    res = {
        "benchmark": "new_link",
        "machine": common.machine(["grpcio"]),
        "servers": a.servers,
        "callers": a.callers,
        "runs": runs,
        "summary": summary,
        "note": "CPU ms per message; link_* = new link minus linked message; ABAB order",
    }
    out = common.write_results("new_link", res, a.quick)
    print(json.dumps(summary, indent=1))
    print(f"written to {out}")


if __name__ == "__main__":
    sys.exit(main())
