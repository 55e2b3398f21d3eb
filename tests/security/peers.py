"""Helpers of the tests of who answers a call (test_server_identity, test_server_revocation): a
fake Peer server with a real certificate, identities of the test CA, bounded waits, and the
teardown of a node under test.

`FakePeer` is a bare grpc.aio server in the test process with a real certificate of the test's CA
(the one of the node it claims to be, or another's): it acknowledges every envelope and keeps it,
as a node that still serves would (a revoked one, or an impostor on another's address).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import grpc.aio

from netdp.v1 import peer_pb2
from netdp_node.runtime import NodeRuntime
from netdp_node.security import pki
from netdp_node.security.mtls import start_server

#: the longest a node's teardown may take in these tests (a close that never returns left the
#: pytest process unable to exit: grpc servers and channels outlived their event loop)
CLOSE_S = 15.0


def ident(ca: Path, name: str) -> pki.Identity:
    return pki.load_identity(ca / name)


class FakePeer:
    """Acknowledges every envelope (Link and Deliver) and keeps (job, kind, seq) of each."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, int]] = []
        self.server: grpc.aio.Server | None = None
        self.address = ""

    async def link(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for raw in requests:
            env = peer_pb2.Frame.FromString(raw).envelope
            self.received.append((env.job_id, env.kind, env.seq))
            yield peer_pb2.Frame(ack=peer_pb2.Ack(msg_id=env.msg_id)).SerializeToString()

    async def deliver(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        env = peer_pb2.Envelope.FromString(raw)
        self.received.append((env.job_id, env.kind, env.seq))
        return peer_pb2.Ack(msg_id=env.msg_id).SerializeToString()

    async def start(self, identity: pki.Identity) -> FakePeer:
        handler = grpc.method_handlers_generic_handler(
            "netdp.v1.Peer",
            {
                "Link": grpc.stream_stream_rpc_method_handler(self.link),
                "Deliver": grpc.unary_unary_rpc_method_handler(self.deliver),
            },
        )
        self.server, port = await start_server(
            identity, "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((handler,))
        )
        self.address = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(0)


async def until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"after {timeout}s: {what}")
        await asyncio.sleep(0.02)


async def close(rt: NodeRuntime, *servers: FakePeer) -> None:
    """Tear down the node under test and the fake servers, each step bounded (CLOSE_S): the
    servers are stopped and the ledger closed even if closing the node's transport fails."""
    try:
        await asyncio.wait_for(rt.close(), CLOSE_S)
        await asyncio.wait_for(rt.transport.close(), CLOSE_S)
    finally:
        try:
            for s in servers:
                await asyncio.wait_for(s.stop(), CLOSE_S)
        finally:
            rt.ledger.close()
