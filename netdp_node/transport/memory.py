"""In-process transport: every node's runtime lives in one event loop (tests, small simulations).

It goes through exactly the same runtime entry point (`NodeRuntime.handle`) as the gRPC servicer,
including validation, ledger writes and refusals, only without sockets.
"""

from __future__ import annotations

import asyncio

from netdp_node.errors import NodeUnavailable, UnknownJob
from netdp_node.protocols.base import Message, Refused
from netdp_node.transport.base import DeliveryError, Receiver, Transport
from netdp_node.wire import WireError


class MemoryNetwork:
    """The set of nodes reachable in-process, by id. A node missing from `nodes` (stopped, not yet
    restarted) or answering NodeUnavailable is retried every `retry_every` seconds for up to
    `give_up_after` seconds, as the gRPC links do; then the send fails with UNAVAILABLE."""

    def __init__(self, give_up_after: float = 10.0, retry_every: float = 0.05) -> None:
        self.nodes: dict[str, Receiver] = {}
        self.delivered = 0
        self.give_up_after = give_up_after
        self.retry_every = retry_every

    def transport(self, me: str) -> MemoryTransport:
        return MemoryTransport(self, me)


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, me: str) -> None:
        self.network = network
        self.me = me
        self._locks: dict[str, asyncio.Lock] = {}

    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.network.give_up_after
        lock = self._locks.setdefault(to, asyncio.Lock())
        async with lock:  # per-link ordering, as a stream gives it
            while True:
                await asyncio.sleep(0)
                node = self.network.nodes.get(to)
                try:
                    if node is None:
                        raise NodeUnavailable(f"no node {to!r} in this in-memory network")
                    dup = await node.handle(self.me, job_id, msg)
                    break
                except Refused as e:
                    raise DeliveryError(to, e.code.name, e.reason) from e
                except UnknownJob as e:
                    raise DeliveryError(to, "NOT_FOUND", str(e)) from e
                except WireError as e:
                    raise DeliveryError(to, "INVALID_ARGUMENT", str(e)) from e
                except NodeUnavailable as e:
                    if loop.time() >= give_up:
                        raise DeliveryError(to, "UNAVAILABLE", f"gave up on {to}: {e}") from e
                    await asyncio.sleep(self.network.retry_every)
        self.network.delivered += 1
        return dup
