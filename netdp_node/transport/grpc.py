"""The gRPC transport: mutually-authenticated TLS, grpc.aio, one long-lived stream per link.

Server side (`PeerService`): the servicer methods are thin. Each call reads the caller's identity from
the TLS auth context (the certificate the handshake verified against our CA), refuses revoked and
non-node callers, decodes the raw bytes itself (so malformed bytes get INVALID_ARGUMENT, not a
crash) and hands the message to `NodeRuntime.handle`. There is no insecure port and no fallback.

Client side (`GrpcTransport`): one `Link` per peer: a bidirectional stream on which envelopes are
pipelined and acknowledged in order. A message stays in the link's pending list until its Ack
arrives; if the stream breaks, the link reconnects with backoff and re-sends everything pending (the
receiver acknowledges exact re-sends without applying them twice).

Links are duplex (`peer_pb2.Frame`: an envelope or an Ack, in either direction). A node with
something to send to a peer that has a Link stream open to it sends it there (`Inbound`) instead
of dialling: a walk's hand-off goes back to the token's sender on the stream the token came on, so
a hop of a walk on the complete graph costs one new connection, not two (a new link is a TLS
handshake and an HTTP/2 set-up on both sides, several ms of CPU). Envelopes that come back on a
stream a node opened are handled as on its server (`PeerService.answer`: fault gate, revocation,
decoding, `NodeRuntime.handle`) and answered on that stream. Their sender is the identity the
server's certificate was verified for when the stream opened; messages sent on a peer's stream go
to the identity its client certificate proved. When such a stream ends, what was pending on it is
re-sent at once on another one (dialled if none is open).

Every outgoing channel verifies that the server's certificate names the identity the caller means
to reach (`netdp_node.security.mtls.secure_channel`, shared with the bootstrap), not the address it
dials. A valid certificate of another node serving on a peer's address fails the
handshake, and the link fails the messages for that peer at once with a permanent DeliveryError
(UNAUTHENTICATED), logged.

The caller also refuses a server whose certificate is revoked, as the server refuses a revoked
caller. grpc Python never shows a caller the certificate of its channel, so while the node's
revocation list is not empty, a link reads it from a TLS handshake of its own with the peer's
address (`netdp_node.security.mtls.server_certificate`: our CA, the peer's identity name) each time
it opens its stream, before any message goes out, and keeps it for that stream (no cost per
message). A revoked one fails everything pending for that peer at once (PERMISSION_DENIED, logged
with node and jobs): nothing is delivered to it, and the engines go on as with a peer they cannot
reach. A newer revocation list (`GrpcTransport.revocations_changed`) re-checks the open links.
Limit: this checks the server that answers the check; an attacker on the network path holding a
revoked key could let the check reach the real node and answer the gRPC connection itself (closing
that needs the certificate of the gRPC connection, which grpc Python does not expose).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from netdp.v1 import peer_pb2
from netdp_node.errors import NodeUnavailable, UnknownJob
from netdp_node.faults import FaultInjector
from netdp_node.protocols.base import Message, RefusalCode, Refused
from netdp_node.retry import Backoff
from netdp_node.security.identity import PeerIdentity, RevocationList, peer_name
from netdp_node.security.mtls import (
    AccessPolicy,
    Unauthorized,
    WrongServer,
    channel_credentials,
    probe_context,
    secure_channel,
    server_certificate,
    wrong_server,
)
from netdp_node.security.pki import Identity
from netdp_node.transport.base import DeliveryError, Transport
from netdp_node.waiting import stop_tasks
from netdp_node.wire import WireError, envelope_to_message, message_to_envelope

log = logging.getLogger("netdp.grpc")

PEER_SERVICE = "netdp.v1.Peer"

_REFUSAL_STATUS = {
    RefusalCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    RefusalCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    RefusalCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    RefusalCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
}


# -- server side --------------------------------------------------------------------------------
class PeerService:
    """The Peer gRPC service of a node daemon. `handle` is NodeRuntime.handle."""

    def __init__(
        self,
        node_id: str,
        handle: Callable[[str, str, Message], Any],
        status: Callable[[], peer_pb2.StatusReply],
        policy: AccessPolicy,
        gate: Callable[[str], str | None] | None = None,
        links: GrpcTransport | None = None,
    ) -> None:
        self.node_id = node_id
        self.handle = handle
        self.status = status
        self.policy = policy
        # Fault injection: why traffic from a peer is refused right now (offline, partition), or None.
        self.gate = gate
        self.log = logging.LoggerAdapter(log, {})
        self._stopping = asyncio.Event()
        # the Link handlers waiting for their next message (`stop_links` ends them)
        self._idle: set[asyncio.Task[Any]] = set()
        # The node's own transport: it may send to a caller on the caller's open Link stream
        # (`Inbound`), and it hands what arrives on its own links' streams to `answer`.
        self.links = links
        if links is not None:
            links.service = self

    def stop_links(self) -> None:
        """The daemon is stopping: end every incoming link stream between two messages (a message
        being handled is answered first) and refuse new ones. Without this an idle link, which
        never ends by itself, held `server.stop(grace)` for the whole grace period, and since every
        node's outgoing links close only after its own server stopped, a cluster stopped at once
        always waited the full grace (the demo SIGKILLed nodes on a loaded machine). The sender
        re-sends whatever it has not had acknowledged, as after any broken stream."""
        self._stopping.set()
        for task in list(self._idle):
            task.cancel()

    def generic_handler(self) -> grpc.GenericRpcHandler:
        ident = None  # raw bytes in: we decode ourselves
        return grpc.method_handlers_generic_handler(
            PEER_SERVICE,
            {
                "Link": grpc.stream_stream_rpc_method_handler(
                    self.Link, request_deserializer=ident, response_serializer=ident
                ),
                "Deliver": grpc.unary_unary_rpc_method_handler(
                    self.Deliver,
                    request_deserializer=ident,
                    response_serializer=peer_pb2.Ack.SerializeToString,
                ),
                "Status": grpc.unary_unary_rpc_method_handler(
                    self.Status,
                    request_deserializer=ident,
                    response_serializer=peer_pb2.StatusReply.SerializeToString,
                ),
            },
        )

    def _logline(self, msg: str, *args: Any) -> None:
        log.warning(f"[node={self.node_id}] " + msg, *args)

    async def _process(
        self, sender: str, serial: int | None, env: peer_pb2.Envelope
    ) -> peer_pb2.Ack:
        """Handle one envelope from `sender` (its certificate's serial; None: a server certificate
        not read because nothing was revoked); refusals come back as an Ack with a non-zero code."""
        ack = peer_pb2.Ack(msg_id=env.msg_id)
        if serial is not None and self.policy.is_revoked(serial):
            self._logline("refused message from %s: certificate revoked", sender)
            ack.code = grpc.StatusCode.PERMISSION_DENIED.value[0]
            ack.detail = f"the certificate of {sender} has been revoked"
            return ack
        try:
            msg = envelope_to_message(env)
            ack.duplicate = bool(await self.handle(sender, env.job_id, msg))
        except WireError as e:
            self._logline("refused bad envelope from %s for job %s: %s", sender, env.job_id, e)
            ack.code, ack.detail = grpc.StatusCode.INVALID_ARGUMENT.value[0], str(e)
        except Refused as e:
            ack.code, ack.detail = _REFUSAL_STATUS[e.code].value[0], e.reason
        except Exception as e:  # noqa: BLE001 - the node keeps serving; the type says what
            if isinstance(e, NodeUnavailable):
                raise
            if isinstance(e, UnknownJob):
                self._logline("refused message from %s: %s", sender, e)
                ack.code, ack.detail = grpc.StatusCode.NOT_FOUND.value[0], str(e)
            else:
                log.exception(
                    "[node=%s] internal error handling a message from %s", self.node_id, sender
                )
                ack.code = grpc.StatusCode.INTERNAL.value[0]
                ack.detail = f"internal error at {self.node_id}: {type(e).__name__}: {e}"
        return ack

    async def answer(self, sender: str, serial: int | None, env: peer_pb2.Envelope) -> peer_pb2.Ack:
        """The Ack for one envelope from `sender`, whichever side opened the stream it came on.
        Raises NodeUnavailable when this node takes no traffic from `sender` right now (fault
        injection: offline, partition; or the runtime's own): the caller ends the call or stream,
        as a machine that is down would, and the sender retries."""
        blocked = self.gate(sender) if self.gate is not None else None
        if blocked:
            raise NodeUnavailable(blocked)
        return await self._process(sender, serial, env)

    async def _unavailable(self, context: grpc.aio.ServicerContext, reason: str) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"{self.node_id} is unavailable: {reason}")

    async def _handle_one(
        self, who: PeerIdentity, env: peer_pb2.Envelope, context: grpc.aio.ServicerContext
    ) -> peer_pb2.Ack:
        """`answer`; an unavailable node aborts the call."""
        try:
            return await self.answer(who.node_id, who.serial, env)
        except NodeUnavailable as e:
            await self._unavailable(context, str(e))
            raise  # unreachable: abort raises

    def _malformed(self, who: PeerIdentity, what: str, e: Exception) -> peer_pb2.Ack:
        self._logline("refused malformed bytes from %s: %s", who.node_id, e)
        return peer_pb2.Ack(
            code=grpc.StatusCode.INVALID_ARGUMENT.value[0], detail=f"malformed {what}: {e}"
        )

    async def Deliver(self, raw: bytes, context: grpc.aio.ServicerContext) -> peer_pb2.Ack:
        try:
            who = self.policy.check(context, ("node",), "Deliver")
        except Unauthorized as e:
            await context.abort(e.code, e.reason)
        env = peer_pb2.Envelope()
        try:
            env.ParseFromString(raw)
        except DecodeError as e:
            ack = self._malformed(who, "Envelope", e)
        else:
            ack = await self._handle_one(who, env, context)
        if ack.code != 0:
            await context.abort(status_code(ack.code), ack.detail)
        return ack

    async def Link(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        """A peer's link stream: answer each of its envelopes in order, and pass the Acks of this
        node's own envelopes sent on it (`Inbound`) to this node's transport."""
        try:
            who = self.policy.check(context, ("node",), "Link")
        except Unauthorized as e:
            await context.abort(e.code, e.reason)
        # One await per message on the request stream itself (no task, no asyncio.wait per
        # message: they cost two event-loop hand-offs on every hop). `stop_links` cancels the
        # handlers that are waiting for their next message; one handling a message answers it,
        # then sees `_stopping` and ends.
        if self._stopping.is_set():
            # a link opened after `stop_links`: end it at once, before asking for the request
            # iterator (grpc makes it an async generator on `__aiter__`; one never started warns
            # "coroutine '_MessageReceiver._async_message_receiver' was never awaited" when it is
            # collected). From here to the first `__anext__` nothing awaits: it always starts.
            return
        it = requests.__aiter__()
        task = asyncio.current_task()
        assert task is not None
        inbound = Inbound(who, context)
        links = self.links
        if links is not None:
            links.attach(inbound)
        try:
            while not self._stopping.is_set():
                self._idle.add(task)
                try:
                    raw = await it.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not self._stopping.is_set():
                        raise
                    if hasattr(task, "uncancel"):  # Python >= 3.11: the cancel is consumed
                        task.uncancel()
                    return  # stopping while idle: end the stream (status OK)
                finally:
                    self._idle.discard(task)
                frame = peer_pb2.Frame()
                try:
                    frame.ParseFromString(raw)
                except DecodeError as e:
                    await inbound.write(_ack_frame(self._malformed(who, "Frame", e)))
                    continue
                body = frame.WhichOneof("body")
                if body == "ack":
                    if links is not None:
                        links.acknowledged(who.node_id, frame.ack)
                    continue
                if body != "envelope":
                    err = ValueError("neither an envelope nor an ack")
                    await inbound.write(_ack_frame(self._malformed(who, "Frame", err)))
                    continue
                ack = await self._handle_one(who, frame.envelope, context)
                await inbound.write(_ack_frame(ack))
        except InboundEnded:
            return  # the call ended under a write (the caller went away): nothing to answer
        finally:
            self._idle.discard(task)
            inbound.end()
            if links is not None:
                links.detach(inbound)

    async def Status(self, raw: bytes, context: grpc.aio.ServicerContext) -> peer_pb2.StatusReply:
        try:
            self.policy.check(context, ("operator",), "Status")
        except Unauthorized as e:
            await context.abort(e.code, e.reason)
        return self.status()


def _ack_frame(ack: peer_pb2.Ack) -> bytes:
    frame = peer_pb2.Frame()
    frame.ack.CopyFrom(ack)
    return frame.SerializeToString()


def _envelope_frame(env: peer_pb2.Envelope) -> bytes:
    frame = peer_pb2.Frame()
    frame.envelope.CopyFrom(env)
    return frame.SerializeToString()


class InboundEnded(ConnectionError):
    """The Link stream a peer opened to this node ended (or failed under a write)."""


class Inbound:
    """A Link stream a peer opened to this node, seen from this node's server: the peer (`who`, its
    client certificate as the handshake verified it) answers on it the envelopes this node's
    transport sends it there (`GrpcTransport.attach`), as it would on a stream this node opened.
    Writes are serialised: grpc takes one write at a time per call, and both the handler (its
    Acks) and the node's link to that peer (its envelopes) write here."""

    def __init__(self, who: PeerIdentity, context: grpc.aio.ServicerContext) -> None:
        self.who = who
        self.context = context
        self._lock = asyncio.Lock()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def open(self) -> bool:
        return not self.ended.done()

    async def write(self, data: bytes) -> None:
        if self.ended.done():
            raise InboundEnded(f"the link {self.who.node_id} opened has ended")
        async with self._lock:
            try:
                await self.context.write(data)
            except Exception as e:  # noqa: BLE001 - any failure of a write: the call is over
                self.end()
                raise InboundEnded(f"the link {self.who.node_id} opened has ended: {e}") from e

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


def status_code(value: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN


# -- client side --------------------------------------------------------------------------------
# Stream-level failures that retrying cannot cure. INTERNAL is not one of them: grpc's core raises
# "Internal error from Core" when a write races a peer that just died (seen in the e2e SIGKILL
# test); a peer's verdict on a message comes in its acknowledgement, not as a stream error.
PERMANENT = {
    "PERMISSION_DENIED",
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "ALREADY_EXISTS",
    "UNAUTHENTICATED",
    "RESOURCE_EXHAUSTED",
}


def _settle(
    entry: tuple[Any, asyncio.Future[bool], Callable[[asyncio.Future[bool]], None] | None],
    duplicate: bool,
    error: DeliveryError | None,
) -> None:
    """A pending message's outcome: its future, then its `on_done`, at once (no loop callback)."""
    _, fut, on_done = entry
    if fut.done():
        return
    if error is None:
        fut.set_result(duplicate)
    else:
        fut.set_exception(error)
    if on_done is not None:
        try:
            on_done(fut)
        except Exception:  # noqa: BLE001 - the sender's bug must not break the link
            log.exception("outcome callback of a message failed")


async def _first_error(tasks: set[asyncio.Future[None]]) -> BaseException | None:
    """Wait until one of a stream's tasks ends; its error (the reader's first: it carries the
    peer's status), or None."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    errors = [e for t in done if not t.cancelled() and (e := t.exception()) is not None]
    errors.sort(key=lambda e: not isinstance(e, grpc.aio.AioRpcError))
    return errors[0] if errors else None


class Stalled(ConnectionError):
    """A link's stream has had messages pending and no acknowledgement for the give-up time."""


class IdleLink(Exception):
    """A link has had nothing to send for `GrpcTransport.idle_close_after`: its channel closes."""


class ServerRevoked(ConnectionError):
    """The certificate the peer's server presents is revoked."""

    def __init__(self, server: PeerIdentity) -> None:
        super().__init__(f"the certificate of {server.node_id} (serial {server.serial}) is revoked")
        self.server = server


class _Writes:
    """The writes of a Link stream this node opened, one at a time (grpc takes one write at a time
    per call): our envelopes and our Acks of the peer's envelopes."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self._lock = asyncio.Lock()

    async def write(self, data: bytes) -> None:
        async with self._lock:
            await self.call.write(data)


class NoAddress(ConnectionError):
    """Nothing to send on: the peer's own stream ended and no address of it is known."""


async def _until_ended(inbound: Inbound) -> None:
    """Wait for the end of a peer's stream a link sends on; it ends the link's stream."""
    await asyncio.shield(inbound.ended)
    raise InboundEnded(f"the link {inbound.who.node_id} opened has ended")


class Reverify(Exception):
    """A newer revocation list arrived: the link re-checks its server before it goes on."""


#: The longest `Link.close` waits for the link's task to end (seconds), cancelling it again every
#: LINK_CLOSE_RETRY_S (a cancellation can be lost, see `Link.close`).
LINK_CLOSE_S = 5.0
LINK_CLOSE_RETRY_S = 0.1


class Link:
    """One peer: a long-lived bidirectional stream with pipelined, in-order acknowledged envelopes.

    The stream stays open while idle (one HTTP/2 stream per link, not per message). Everything not
    yet acknowledged stays in `pending`; when the stream breaks the link reconnects with backoff and
    re-sends it in order, until the peer acknowledges or the give-up time passes without progress.
    A stream that neither fails nor acknowledges (a peer behind a link that went down: TCP only
    notices after tens of seconds, a connect hangs) is progress neither: once nothing pending has
    been acknowledged for the give-up time, the link gives up (`Stalled`) as it would on errors.
    A link with nothing pending for `idle_close_after` closes its stream and channel (its socket:
    a host of many nodes does not keep every channel it ever opened); the next message dials again.
    While the peer has a Link stream open to this node, the link sends on that one and dials
    nothing (`_stream_once`); it also answers the envelopes the peer sends back on a stream it
    opened (`_read`).
    """

    def __init__(self, transport: GrpcTransport, peer: str, address: str) -> None:
        self.t = transport
        self.peer = peer
        self.address = address
        self.channel: grpc.aio.Channel | None = None
        self.next_id = 1
        # msg_id -> (envelope, its future, called with the future once it is done)
        self.pending: dict[
            int,
            tuple[
                peer_pb2.Envelope,
                asyncio.Future[bool],
                Callable[[asyncio.Future[bool]], None] | None,
            ],
        ] = {}
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.work = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.not_found_retries: dict[int, int] = {}
        self.progress = False  # an ack arrived since the last failure
        self.last_progress = time.monotonic()  # the last ack, or new work on an idle link
        # while a stream runs: its give-up/idle outcome (`_check_clock` sets it) and the timer
        self._expiry: asyncio.Future[None] | None = None
        self._clock: asyncio.TimerHandle | None = None
        self._clock_when = 0.0  # the deadline the timer waits for
        # the certificate the server presented when this stream opened (None: not checked)
        self.server: PeerIdentity | None = None
        self.closed = False  # `close` was called: the task ends, nothing more is sent

    def submit(
        self, env: peer_pb2.Envelope, on_done: Callable[[asyncio.Future[bool]], None] | None = None
    ) -> asyncio.Future[bool]:
        env.msg_id = self.next_id
        self.next_id += 1
        if not self.pending:  # the stall clock counts from the first message not acknowledged
            self.last_progress = time.monotonic()
            if self._expiry is not None:
                self._arm_clock(sooner=True)  # an idle stream's deadline is now the give-up time
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.closed:  # (the transport dropped this link: nothing would ever send it)
            fut.set_exception(
                DeliveryError(self.peer, "UNAVAILABLE", f"the link to {self.peer} is closed")
            )
            if on_done is not None:
                fut.add_done_callback(on_done)  # later: the caller is still sending
            return fut
        self.pending[env.msg_id] = (env, fut, on_done)
        self.queue.put_nowait(env.msg_id)
        self.work.set()
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())
        return fut

    async def _run(self) -> None:
        backoff = self.t.backoff.delays()
        while not self.closed:  # (a closed link ends here even if its cancellation was lost)
            if not self.pending:
                self.work.clear()
                await self.work.wait()
                if self.closed:
                    return
                # New work on an idle link: the give-up clock starts now, not at an old failure.
                backoff, self.progress = self.t.backoff.delays(), False
            try:
                await self._stream_once()
            except asyncio.CancelledError:
                raise
            except IdleLink:
                await self._close_channel()
                log.debug(
                    "[node=%s] link to %s (%s) idle for %gs: channel closed",
                    self.t.me,
                    self.peer,
                    self.address,
                    self.t.idle_close_after,
                )
                continue  # (a message submitted meanwhile is pending: it dials again at once)
            except Reverify:
                continue  # re-check the server's certificate, then re-send what is pending
            except InboundEnded:
                # the peer's stream we sent on ended (it went idle, or the peer stops): re-send
                # what is pending at once on another stream, dialled if none is open
                self._requeue_pending()
                continue
            except NoAddress as e:
                self._fail_all("UNAVAILABLE", str(e))
                continue
            except Exception as e:  # noqa: BLE001 - any stream failure: reconnect and re-send
                # (grpc raises InvalidStateError when writing to a stream that just finished)
                if isinstance(e, ServerRevoked):
                    self._refuse_revoked(e.server)
                    continue
                code = e.code().name if isinstance(e, grpc.aio.AioRpcError) else "UNAVAILABLE"
                detail = (
                    e.details()
                    if isinstance(e, grpc.aio.AioRpcError)
                    else f"{type(e).__name__}: {e}"
                ) or ""
                if wrong_server(e) or isinstance(e, WrongServer):
                    self._refuse_server(detail)
                    continue
                if isinstance(e, Stalled):  # no progress for the give-up time: give up now
                    log.info(
                        "[node=%s] link to %s (%s) broke: %s; giving up",
                        self.t.me,
                        self.peer,
                        self.address,
                        detail,
                    )
                    self._fail_all(
                        "UNAVAILABLE", f"gave up on {self.peer} at {self.address}: {detail}"
                    )
                    continue
                if code in PERMANENT:
                    self._fail_all(code, detail)
                    continue
                if self.progress:
                    backoff, self.progress = self.t.backoff.delays(), False
                if not self.pending:
                    continue  # an idle stream ended: reconnect when there is work
                log.info(
                    "[node=%s] link to %s (%s) broke: %s %s; retrying",
                    self.t.me,
                    self.peer,
                    self.address,
                    code,
                    detail,
                )
                if not await backoff.sleep():
                    self._fail_all(
                        "UNAVAILABLE",
                        f"gave up on {self.peer} at {self.address} after "
                        f"{self.t.backoff.give_up_after:g}s: {detail}",
                    )
                    continue
                self._requeue_pending()

    def _requeue_pending(self) -> None:
        """Everything still pending is sent again, in order, on the next stream."""
        self.queue = asyncio.Queue()
        for mid in sorted(self.pending):
            self.queue.put_nowait(mid)

    def connect(self) -> grpc.aio.Channel:
        """The link's channel, made (and asked to connect: grpc's own threads run the TCP and TLS
        handshakes) if there is none."""
        if self.channel is None:
            self.channel = secure_channel(
                self.address, self.t.identity, peer_name(self.peer), self.t.credentials()
            )
            self.channel.get_state(try_to_connect=True)
        return self.channel

    def close_if_unused(self) -> None:
        """Close a channel dialled ahead (`GrpcTransport.prepare`) that no stream ever used."""
        if self.channel is not None and not self.pending and self._expiry is None:
            asyncio.ensure_future(self._close_channel())

    def _check_reachable(self) -> None:
        faults = self.t.faults
        why = faults.blocked(self.peer) if faults is not None else None
        if why:
            raise ConnectionError(f"{self.t.me} cannot reach {self.peer}: {why}")

    async def _verify_server(self) -> None:
        """Before a stream opens: read the server's certificate and refuse it if it is revoked
        (`ServerRevoked`). Skipped while nothing is revoked (no list, or an empty one)."""
        self.server = None
        crl = self.t.crl()
        if crl is None or not crl.serials:
            return
        self.server = await server_certificate(
            self.address, peer_name(self.peer), self.t.probe_context()
        )
        if crl.is_revoked(self.server.serial):
            raise ServerRevoked(self.server)

    def reverify(self) -> None:
        """A newer revocation list: a running stream whose server is revoked, or was never
        checked, ends (`Reverify`) and is checked again before anything more is sent."""
        crl = self.t.crl()
        expiry = self._expiry
        if crl is None or expiry is None or expiry.done():
            return
        if self.server is None or crl.is_revoked(self.server.serial):
            expiry.set_exception(Reverify())

    async def _stream_once(self) -> None:
        """Run one stream until it fails (raises) or the peer ends it: the Link stream the peer
        opened to this node if one is open (no new connection: a walk's hand-off goes back to its
        sender on the stream the token came on), else one this link opens."""
        self._check_reachable()
        inbound = self.t.inbound(self.peer)
        call: Any = None
        if inbound is not None:
            self.server = inbound.who  # the peer's client certificate, as its handshake verified
            crl = self.t.crl()
            if crl is not None and crl.is_revoked(inbound.who.serial):
                raise ServerRevoked(inbound.who)
            write = inbound.write
            side = asyncio.ensure_future(_until_ended(inbound))
        else:
            if not self.address:
                raise NoAddress(f"no address known for {self.peer}")
            await self._verify_server()
            call = self.connect().stream_stream(f"/{PEER_SERVICE}/Link")()
            write = _Writes(call).write
            side = asyncio.ensure_future(self._read(call, write))
        faults = self.t.faults
        loop = asyncio.get_running_loop()

        async def writer(write: Callable[[bytes], Awaitable[None]]) -> None:
            while True:
                mid = await self.queue.get()
                entry = self.pending.get(mid)
                if entry is None:
                    continue
                env = entry[0]
                if faults is not None:
                    self._check_reachable()
                    delay = faults.delay_s()
                    if delay:
                        await asyncio.sleep(delay)
                    if faults.drop():
                        # Lost on the wire: no ack will come; the link retransmits it later.
                        self.t.on_fault("drop", self.peer, env.job_id)
                        loop.call_later(self.t.retransmit_after, self.queue.put_nowait, mid)
                        continue
                await write(_envelope_frame(env))

        # The give-up and idle clocks: one timer at the next deadline (`_check_clock`), not a task
        # waking every half second per open link (a host of 500 nodes keeps thousands open).
        expiry: asyncio.Future[None] = loop.create_future()
        self._expiry = expiry
        self._arm_clock()
        tasks = {asyncio.ensure_future(writer(write)), side, expiry}
        try:
            err = await _first_error(tasks)
        finally:
            self._expiry = None
            if self._clock is not None:
                self._clock.cancel()
                self._clock = None
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if call is not None:
                call.cancel()
            # No reference cycle may keep the call (even cancelled, it holds its channel's
            # connection open) until the cycle collector runs: the tasks and the call go now, and
            # the error raised below does not keep this frame (see the `finally`).
            tasks.clear()
            del call, expiry, side, write
        if err is not None:
            try:
                raise err
            finally:
                del err

    async def _read(self, call: Any, write: Callable[[bytes], Awaitable[None]]) -> None:
        """The stream this link opened, read: Acks of our envelopes, and the peer's own envelopes,
        each answered in order after the node handled it (`GrpcTransport.answer`)."""
        loop = asyncio.get_running_loop()
        while True:
            raw = await call.read()
            if raw is grpc.aio.EOF:
                raise ConnectionError("stream closed by peer")
            frame = peer_pb2.Frame()
            try:
                frame.ParseFromString(raw)
            except DecodeError as e:
                raise ConnectionError(f"malformed frame from {self.peer}: {e}") from e
            body = frame.WhichOneof("body")
            if body == "ack":
                self._on_ack(frame.ack, loop)
            elif body == "envelope":
                if not self.pending:  # traffic the other way: the link is not idle
                    self.last_progress = time.monotonic()
                await write(_ack_frame(await self.t.answer(self, frame.envelope)))
            else:
                raise ConnectionError(f"a frame from {self.peer} with neither envelope nor ack")

    def _deadline(self) -> float | None:
        """When the running stream's clock runs out (monotonic): the give-up time after the last
        progress while messages are pending, the idle time after it while none are; None if that
        clock is off (<= 0)."""
        limit = self.t.backoff.give_up_after if self.pending else self.t.idle_close_after
        return self.last_progress + limit if limit > 0 else None

    def _arm_clock(self, *, sooner: bool = False) -> None:
        """Set the timer of the running stream to its current deadline (`sooner`: only if that is
        earlier than the one the timer waits for; a later one is found when it fires)."""
        when = self._deadline()
        if self._clock is not None:
            if sooner and (when is None or self._clock_when <= when):
                return
            self._clock.cancel()
            self._clock = None
        if when is not None and self._expiry is not None and not self._expiry.done():
            delay = max(0.0, when - time.monotonic())
            self._clock = self._expiry.get_loop().call_later(delay, self._check_clock)
            self._clock_when = when

    def _check_clock(self) -> None:
        """The timer fired: fail the stream (Stalled, IdleLink) if its deadline has passed; else
        (an ack or new work moved it later) wait for the new one. `submit` and the acks that leave
        nothing pending re-arm it when the deadline moves sooner."""
        self._clock = None
        expiry = self._expiry
        if expiry is None or expiry.done():
            return
        when = self._deadline()
        if when is None:
            return
        if time.monotonic() < when:
            self._arm_clock()
        elif self.pending:
            g = self.t.backoff.give_up_after
            expiry.set_exception(
                Stalled(f"no acknowledgement for {g:g}s (the stream neither failed nor answered)")
            )
        else:
            expiry.set_exception(IdleLink())

    def _on_ack(self, ack: peer_pb2.Ack, loop: asyncio.AbstractEventLoop) -> None:
        entry = self.pending.get(ack.msg_id)
        if entry is None:
            return
        self.progress = True
        self.last_progress = time.monotonic()
        if ack.code == 0:
            del self.pending[ack.msg_id]
            self._idle_clock()
            _settle(entry, ack.duplicate, None)
            return
        code = status_code(ack.code).name
        tries = self.not_found_retries.get(ack.msg_id, 0)
        if code == "NOT_FOUND" and tries < 20:
            # The receiver may not know the job yet: try again a little later.
            self.not_found_retries[ack.msg_id] = tries + 1
            loop.call_later(0.25, self.queue.put_nowait, ack.msg_id)
            return
        del self.pending[ack.msg_id]
        self._idle_clock()
        _settle(entry, False, DeliveryError(self.peer, code, ack.detail))

    def _idle_clock(self) -> None:
        """After an ack: a stream left with nothing pending now has the idle deadline."""
        if not self.pending and self._expiry is not None:
            self._arm_clock(sooner=True)

    def _refuse_server(self, detail: str) -> None:
        """The server at our peer's address is somebody else: fail everything pending at once (a
        retry would only hand the same messages to the same server if its handshake passed)."""
        why = (
            f"expected {self.peer} at {self.address}, the server's certificate does not name "
            f"it (TLS name {peer_name(self.peer)})"
        )
        self._refuse("UNAUTHENTICATED", why, f" ({detail})")

    def _refuse_revoked(self, server: PeerIdentity) -> None:
        """The server at our peer's address presents a revoked certificate: fail everything pending
        at once, as the server side refuses a revoked caller (not delivered, never retried)."""
        why = (
            f"the certificate of {server.node_id} at {self.address} (serial {server.serial}) is "
            "revoked"
        )
        self._refuse("PERMISSION_DENIED", why)

    def _refuse(self, code: str, why: str, detail: str = "") -> None:
        """Log the refused server (naming node and jobs) and fail everything pending with `code`."""
        jobs = ",".join(sorted({entry[0].job_id for entry in self.pending.values()}))
        log.error(
            "[node=%s job=%s] refused the server at %s: %s; %d message(s) to %s not sent%s",
            self.t.me,
            jobs,
            self.address,
            why,
            len(self.pending),
            self.peer,
            detail,
        )
        self._fail_all(code, why)

    def _fail_all(self, code: str, detail: str) -> None:
        entries = list(self.pending.values())
        self.pending.clear()  # (an on_done may submit again)
        for entry in entries:
            _settle(entry, False, DeliveryError(self.peer, code, detail))

    async def _close_channel(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        """Stop the link's task, then close its channel; bounded (LINK_CLOSE_S). Messages still
        pending are not settled (the node is stopping, or the peer moved: `learn`).

        One cancellation of the task is not enough: it can be lost. `asyncio.wait_for` before
        Python 3.12, which the probe of the server's certificate uses (`_verify_server`), returns
        the result of an awaitable that completed just as the cancellation arrived, and the task
        goes on (it then waited for work that never came, and this close with it, forever). So the
        link is marked closed (its loop ends at its next turn) and the task is cancelled again
        until it has ended."""
        self.closed = True
        self.work.set()  # a task waiting for work wakes up and ends
        task = self.task
        if task is not None:
            if await stop_tasks({task}, LINK_CLOSE_S, LINK_CLOSE_RETRY_S):
                log.warning(
                    "[node=%s] the link to %s (%s) did not stop within %gs; left behind",
                    self.t.me,
                    self.peer,
                    self.address,
                    LINK_CLOSE_S,
                )
        await self._close_channel()


#: Seconds a link to a peer may have nothing to send before its channel (and socket) is closed; the
#: next message to that peer dials again (one TLS handshake). A walk on the complete graph uses
#: almost every link once (a token, then its hand-off back): 1,000 nodes in two hosts at 50 hops/s
#: kept ~12,000 idle connections open with 120 s (two descriptors each, keepalive pings).
IDLE_CLOSE_AFTER = 30.0


class GrpcTransport(Transport):
    """Sends to participants over mTLS links. `addresses` maps node id -> host:port."""

    def __init__(
        self,
        identity: Identity,
        addresses: Mapping[str, str] | None = None,
        backoff: Backoff | None = None,
        faults: FaultInjector | None = None,
        on_fault: Callable[[str, str, str], None] | None = None,
        retransmit_after: float = 0.5,
        idle_close_after: float = IDLE_CLOSE_AFTER,
        revocations: Callable[[], RevocationList] | None = None,
    ) -> None:
        self.identity = identity
        # the node's current revocation list (None: servers' certificates are not checked for it)
        self.revocations = revocations
        self._probe_context: ssl.SSLContext | None = None
        # a link with nothing to send for this long closes its channel (<= 0: never)
        self.idle_close_after = idle_close_after
        self.me = identity.node_id
        self.addresses: dict[str, str] = dict(addresses or {})
        self.backoff = backoff or Backoff(give_up_after=60.0)
        self.links: dict[str, Link] = {}
        self.faults = faults
        # on_fault(kind, peer, job_id): record an injected fault (the daemon writes it to the ledger)
        self.on_fault = on_fault or (lambda kind, peer, job: None)
        self.retransmit_after = retransmit_after
        self._credentials: grpc.ChannelCredentials | None = None
        # The node's own Peer service (`PeerService(links=...)` sets it): envelopes a peer sends
        # on a stream this node opened are answered by it, as on the node's server.
        self.service: PeerService | None = None
        # the Link streams peers opened to this node and that are still open, newest last
        self._inbound: dict[str, list[Inbound]] = {}

    def crl(self) -> RevocationList | None:
        """The newest revocation list this node knows (None: none, or no source of lists)."""
        return self.revocations() if self.revocations is not None else None

    def credentials(self) -> grpc.ChannelCredentials:
        """This node's mTLS channel credentials (its certificate and key, our CA), made once and
        shared by all its channels: grpc then parses the PEMs and builds its TLS context once, not
        for every peer it dials."""
        if self._credentials is None:
            self._credentials = channel_credentials(self.identity)
        return self._credentials

    def probe_context(self) -> ssl.SSLContext:
        """The TLS context that reads servers' certificates (`Link._verify_server`), made once."""
        if self._probe_context is None:
            self._probe_context = probe_context(self.identity)
        return self._probe_context

    def revocations_changed(self) -> None:
        """The node accepted a newer revocation list: open links re-check their servers."""
        for link in self.links.values():
            link.reverify()

    def _link(self, to: str) -> Link | None:
        """The link to `to`, made if needed (None: no address known and no stream from `to`)."""
        link = self.links.get(to)
        if link is None:
            addr = self.addresses.get(to)
            if addr is None and to not in self._inbound:
                return None
            link = self.links[to] = Link(self, to, addr or "")
        return link

    # -- streams peers opened to this node (see `Inbound`) --
    def attach(self, inbound: Inbound) -> None:
        """A peer opened a Link stream to this node: messages to it may go there."""
        self._inbound.setdefault(inbound.who.node_id, []).append(inbound)

    def detach(self, inbound: Inbound) -> None:
        streams = self._inbound.get(inbound.who.node_id)
        if streams is not None and inbound in streams:
            streams.remove(inbound)
            if not streams:
                del self._inbound[inbound.who.node_id]

    def inbound(self, peer: str) -> Inbound | None:
        """The newest open stream `peer` opened to this node, if any."""
        streams = self._inbound.get(peer)
        if streams:
            for inbound in reversed(streams):
                if inbound.open:
                    return inbound
        return None

    def acknowledged(self, peer: str, ack: peer_pb2.Ack) -> None:
        """`peer` acknowledged, on a stream it opened, an envelope this node sent there."""
        link = self.links.get(peer)
        if link is not None:
            link._on_ack(ack, asyncio.get_running_loop())

    async def answer(self, link: Link, env: peer_pb2.Envelope) -> peer_pb2.Ack:
        """The Ack for an envelope the peer of `link` sent on the stream this node opened: its
        sender is the identity the server's certificate was verified for when the stream opened
        (`secure_channel`), and it is handled as on this node's server (`PeerService.answer`).
        Raises ConnectionError (the stream ends, the peer re-sends later) when this node takes no
        traffic from that peer now, or when a revocation list arrived since the stream opened and
        its server was not yet checked against it (`Link.reverify` is ending the stream)."""
        service = self.service
        if service is None:
            return peer_pb2.Ack(
                msg_id=env.msg_id,
                code=grpc.StatusCode.UNIMPLEMENTED.value[0],
                detail=f"{self.me} takes no messages on the links it opens",
            )
        server = link.server
        if server is None:
            crl = self.crl()
            if crl is not None and crl.serials:
                raise ConnectionError(f"the server of {link.peer} is being checked again")
        try:
            return await service.answer(link.peer, None if server is None else server.serial, env)
        except NodeUnavailable as e:
            raise ConnectionError(f"{self.me} takes no traffic from {link.peer} now: {e}") from e

    def prepare(self, to: str) -> None:
        """A message to `to` will follow soon (once the step that sends it is durable): dial now, so
        that grpc's threads run the TCP and TLS handshakes while this node writes its ledger. No
        message goes out before `submit`; an unknown peer is left to `submit` to report."""
        faults = self.faults
        if faults is not None and faults.blocked(to):
            return
        if self.inbound(to) is not None:
            return  # the message will go on the stream `to` opened to this node
        link = self._link(to)
        if link is None or link.channel is not None or not link.address:
            return
        link.connect()
        if self.idle_close_after > 0 and not link.pending:
            # the step may never be written (a ledger error fails the job): then nothing is sent
            # and the dialled channel must not stay open for good
            asyncio.get_running_loop().call_later(self.idle_close_after, link.close_if_unused)

    def learn(self, addresses: Mapping[str, str]) -> None:
        for peer, addr in addresses.items():
            if self.addresses.get(peer) != addr:
                self.addresses[peer] = addr
                old = self.links.pop(peer, None)
                if old is not None:
                    asyncio.ensure_future(old.close())

    async def send(self, to: str, job_id: str, msg: Message) -> bool:
        return await self.submit(to, job_id, msg)

    def submit(
        self,
        to: str,
        job_id: str,
        msg: Message,
        on_done: Callable[[asyncio.Future[bool]], None] | None = None,
    ) -> asyncio.Future[bool]:
        """Queue the message on the peer's link; the future is its acknowledgement (no task), and
        `on_done` is called from the link as soon as it is known."""
        link = self._link(to)
        if link is None:
            fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            fut.set_exception(DeliveryError(to, "UNAVAILABLE", f"no address known for {to}"))
            if on_done is not None:
                fut.add_done_callback(on_done)  # later: the caller is still sending
            return fut
        return link.submit(message_to_envelope(job_id, msg), on_done)

    async def close(self) -> None:
        await asyncio.gather(
            *(link.close() for link in self.links.values()), return_exceptions=True
        )
        self.links.clear()
