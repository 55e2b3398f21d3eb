"""The Transport interface the runtime sends through, and the errors it reports."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from typing import Protocol

from netdp_node.protocols.base import Message


class DeliveryError(Exception):
    """A message was refused by its receiver (permanent) or could not be delivered in time.

    `code` is a grpc.StatusCode name ("PERMISSION_DENIED", "UNAVAILABLE", ...)."""

    def __init__(self, peer: str, code: str, detail: str) -> None:
        super().__init__(f"{peer} refused or did not take the message: {code}: {detail}")
        self.peer = peer
        self.code = code
        self.detail = detail


class Receiver(Protocol):
    """The receiving end a transport hands each message to (`NodeRuntime.handle`): returns True
    for an exact duplicate; raises `Refused`, `errors.UnknownJob` or `errors.NodeUnavailable`."""

    async def handle(self, sender: str, job_id: str, msg: Message) -> bool: ...


class Transport(abc.ABC):
    """Sends one job message to one participant and returns once the receiver acknowledged it,
    i.e. once the message is durably in the receiver's ledger. Messages to the same peer are
    delivered in the order of the `send` calls. Transient failures are retried inside (the receiver
    recognises exact re-sends); a refusal or giving up raises DeliveryError."""

    @abc.abstractmethod
    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        """Returns True if the receiver reported the message as an exact duplicate."""

    def submit(
        self,
        to: str,
        job_id: str,
        msg: Message,
        on_done: Callable[[asyncio.Future[bool]], None] | None = None,
    ) -> asyncio.Future[bool]:
        """`send` as a future, started now (call on the event loop); `on_done(future)` is called
        once it is done. Calls to `submit` are delivered in call order, as `send` calls are.
        Transports may override it to avoid a task per message, and call `on_done` directly
        (not through the loop) as soon as the outcome is known."""
        fut = asyncio.ensure_future(self.send(to, job_id, msg))
        if on_done is not None:
            fut.add_done_callback(on_done)
        return fut

    def prepare(self, to: str) -> None:  # noqa: B027 - optional hook
        """A message to `to` is about to be sent (its step is being made durable): a transport may
        set up what it needs to reach `to` meanwhile (dial, handshake). Sends nothing."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        return None


class Bulletin(abc.ABC):
    """A job's public bulletin (the bootstrap's over gRPC, `netdp_node.daemon`; in memory in the
    simulator and tests, `transport.memory.MemoryBulletin`): one entry per (job, participant,
    message kind), put there by that participant only (its channel authenticates it), read by
    every participant.

    `publish` stores this node's entry (an identical re-publication is accepted, another one is
    refused with DeliveryError FAILED_PRECONDITION). `read(job, kind, after, wait)` returns the
    entries stored after position `after` (0: from the start) as (publisher, message) pairs, the
    position to ask after next time, and whether nothing more will come (every participant
    published that kind, or the bulletin was closed); with no new entry it waits up to `wait`
    seconds for one. Transient
    failures raise DeliveryError UNAVAILABLE (the caller retries, bounded)."""

    @abc.abstractmethod
    async def publish(self, job_id: str, msg: Message) -> None: ...

    @abc.abstractmethod
    async def read(
        self, job_id: str, kind: str, after: int, wait: float
    ) -> tuple[list[tuple[str, Message]], int, bool]: ...
