"""In-process transport: every node's runtime lives in one event loop (tests, small simulations).

It goes through exactly the same runtime entry point (`NodeRuntime.handle`) as the gRPC servicer,
including validation, ledger writes and refusals, only without sockets.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from netdp_node.protocols.base import Message, Refused
from netdp_node.transport.base import DeliveryError, Transport

if TYPE_CHECKING:
    from netdp_node.runtime import NodeRuntime


class MemoryNetwork:
    """The set of nodes reachable in-process, by id."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRuntime] = {}
        self.delivered = 0

    def transport(self, me: str) -> MemoryTransport:
        return MemoryTransport(self, me)


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, me: str) -> None:
        self.network = network
        self.me = me
        self._locks: dict[str, asyncio.Lock] = {}

    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        from netdp_node.runtime import UnknownJob
        from netdp_node.wire import WireError

        node = self.network.nodes.get(to)
        if node is None:
            raise DeliveryError(to, "UNAVAILABLE", f"no node {to!r} in this in-memory network")
        lock = self._locks.setdefault(to, asyncio.Lock())
        async with lock:  # per-link ordering, as a stream gives it
            await asyncio.sleep(0)
            try:
                dup = await node.handle(self.me, job_id, msg)
            except Refused as e:
                raise DeliveryError(to, e.code.name, e.reason) from e
            except UnknownJob as e:
                raise DeliveryError(to, "NOT_FOUND", str(e)) from e
            except WireError as e:
                raise DeliveryError(to, "INVALID_ARGUMENT", str(e)) from e
        self.network.delivered += 1
        return dup
