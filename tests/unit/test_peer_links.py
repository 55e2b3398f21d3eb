"""Incoming link streams (PeerService.Link) on real mTLS gRPC over loopback: each message is
answered in order on the stream, and `stop_links` ends the streams, an idle one at once with status
OK, a busy one after it answered the message it is handling."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
import warnings

import grpc
import grpc.aio
import numpy as np
import pytest

from netdp.v1 import peer_pb2
from netdp_node.protocols.base import Message
from netdp_node.security import pki
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import AccessPolicy, secure_channel, start_server
from netdp_node.transport.grpc import PEER_SERVICE, GrpcTransport, PeerService
from netdp_node.wire import message_to_envelope

pytestmark = pytest.mark.timeout(60)


async def _serve(tmp_path, handle):
    pki.init_ca(tmp_path / "pki")
    for nid in ("a", "b"):
        pki.issue(tmp_path / "pki", nid, hosts=("127.0.0.1",))
    a, b = (pki.load_identity(tmp_path / "pki" / nid) for nid in ("a", "b"))
    service = PeerService("b", handle, lambda: None, AccessPolicy())  # type: ignore[arg-type]
    server, port = await start_server(
        b, "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((service.generic_handler(),))
    )
    return a, service, server, f"127.0.0.1:{port}"


def _open_link(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamCall:
    return channel.stream_stream(
        f"/{PEER_SERVICE}/Link",
        request_serializer=lambda env: peer_pb2.Frame(envelope=env).SerializeToString(),
        response_deserializer=lambda raw: peer_pb2.Frame.FromString(raw).ack,
    )()


def _env(msg_id: int, rnd: int) -> peer_pb2.Envelope:
    return message_to_envelope("j", Message("value", payload=np.zeros(1), round=rnd), msg_id)


async def _wait_for(cond, what: str) -> None:
    for _ in range(200):  # bounded: 10 s
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_stop_links_ends_idle_and_busy_streams_after_answering(tmp_path):
    release = asyncio.Event()
    handled: list[int] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        handled.append(msg.round)
        if msg.round == 99:  # the busy link's message: held until released
            await release.wait()
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    ch_idle = secure_channel(addr, ident, peer_name("b"))
    ch_busy = secure_channel(addr, ident, peer_name("b"))
    try:
        idle, busy = _open_link(ch_idle), _open_link(ch_busy)
        # the idle link: two messages answered in order, then it waits for the next one
        for mid, rnd in ((1, 10), (2, 11)):
            await idle.write(_env(mid, rnd))
            ack = await asyncio.wait_for(idle.read(), 10)
            assert (ack.msg_id, ack.code) == (mid, 0)
        await busy.write(_env(7, 99))
        await _wait_for(lambda: 99 in handled, "the busy link's message to be handled")
        await _wait_for(lambda: len(service._idle) == 1, "the idle link to wait for more")

        service.stop_links()

        # the idle stream ends at once, with status OK (not cancelled, not an error)
        assert await asyncio.wait_for(idle.read(), 10) is grpc.aio.EOF
        assert await asyncio.wait_for(idle.code(), 10) == grpc.StatusCode.OK
        # the busy one answers the message it is handling first, then ends the same way
        release.set()
        ack = await asyncio.wait_for(busy.read(), 10)
        assert (ack.msg_id, ack.code) == (7, 0)
        assert await asyncio.wait_for(busy.read(), 10) is grpc.aio.EOF
        assert await asyncio.wait_for(busy.code(), 10) == grpc.StatusCode.OK
        assert handled == [10, 11, 99]
        assert not service._idle
        # a new link after stop_links is ended at once, nothing handled
        late = _open_link(ch_idle)
        # (the server may end the stream before the write: then the write fails, as it should)
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await late.write(_env(3, 12))
        assert await asyncio.wait_for(late.read(), 10) is grpc.aio.EOF
        assert handled == [10, 11, 99]
    finally:
        release.set()
        await ch_idle.close()
        await ch_busy.close()
        await server.stop(0)


def _link_sockets(port: int) -> int:
    """This process's TCP connections from or to `port` (not the listening socket): both ends of
    a link to a server of this process. Counted from /proc rather than as all open descriptors,
    which other tests' leftovers closing meanwhile would skew."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            local, remote, state, inode = f[1], f[2], f[3], f[9]
            ports = {int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)}
            if inode in inodes and state != "0A" and port in ports:  # 0A: LISTEN
                count += 1
    return count


@pytest.mark.skipif(not os.path.isfile("/proc/net/tcp"), reason="needs /proc/net/tcp")
async def test_an_idle_link_closes_its_channel_and_a_later_message_dials_again(tmp_path):
    handled: list[int] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        handled.append(msg.round)
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, idle_close_after=0.5)
    try:
        port = int(addr.rsplit(":", 1)[1])
        assert _link_sockets(port) == 0  # the server listens; no link yet
        assert (
            await asyncio.wait_for(t.submit("b", "j", Message("value", np.zeros(1), round=1)), 10)
            is False
        )
        link = t.links["b"]
        first = link.channel
        assert first is not None
        assert _link_sockets(port) == 2  # the link's socket and the server's end of it
        # nothing more to send: after the idle bound the channel is closed, the sockets go
        await _wait_for(lambda: link.channel is None, "the idle link to close its channel")
        await _wait_for(lambda: _link_sockets(port) == 0, "the link's sockets to close")
        assert not service._idle  # the server's end of the stream ended too
        # a later message dials again, on a new channel, and is delivered
        assert (
            await asyncio.wait_for(t.submit("b", "j", Message("value", np.zeros(1), round=2)), 10)
            is False
        )
        assert link.channel is not None and link.channel is not first
        assert handled == [1, 2]
        assert _link_sockets(port) == 2
    finally:
        await t.close()
        await server.stop(0)


async def test_a_link_in_use_is_not_closed_as_idle(tmp_path):
    """Messages every 0.2 s keep a link with a 0.5 s idle bound open: one channel throughout."""

    async def handle(sender: str, job: str, msg: Message) -> bool:
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, idle_close_after=0.5)
    try:
        channels = set()
        for r in range(8):
            fut = t.submit("b", "j", Message("value", np.zeros(1), round=r))
            assert await asyncio.wait_for(fut, 10) is False
            channels.add(id(t.links["b"].channel))
            await asyncio.sleep(0.2)
        assert len(channels) == 1
    finally:
        await t.close()
        await server.stop(0)


async def test_a_link_opened_after_stop_links_leaves_no_unstarted_request_iterator(tmp_path):
    """A link refused while stopping ends without asking grpc for its request iterator: an async
    generator grpc creates on `__aiter__` and nobody starts warns "coroutine
    '_MessageReceiver._async_message_receiver' was never awaited" when it is collected (it did,
    at some later test's garbage collection)."""
    handled: list[int] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        handled.append(msg.round)
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    channel = secure_channel(addr, ident, peer_name("b"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            service.stop_links()
            for _ in range(2):  # (no write: the stream may have ended before it, see above)
                late = _open_link(channel)
                assert await asyncio.wait_for(late.read(), 10) is grpc.aio.EOF
                assert await asyncio.wait_for(late.code(), 10) == grpc.StatusCode.OK
            del late
        finally:
            await channel.close()
            await server.stop(0)
        gc.collect()  # the handlers' objects are garbage now: any such generator warns here
    assert handled == []
    never_awaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert never_awaited == []


async def test_an_idle_link_does_not_wake_the_loop_until_its_deadline(tmp_path):
    """A host of 500 nodes keeps thousands of links open: an idle link must cost nothing until
    its idle deadline (it once ran a watchdog task per link, waking every 0.5 s). After its
    message is acknowledged, 1.5 s of quiet schedule no timer on the loop."""

    async def handle(sender: str, job: str, msg: Message) -> bool:
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, idle_close_after=30.0)
    loop = asyncio.get_running_loop()
    scheduled: list[str] = []
    call_at = loop.call_at

    def counting_call_at(when, callback, *args, **kwargs):  # type: ignore[no-untyped-def]
        scheduled.append(getattr(callback, "__qualname__", repr(callback)))
        return call_at(when, callback, *args, **kwargs)

    try:
        fut = t.submit("b", "j", Message("value", np.zeros(1), round=1))
        assert await asyncio.wait_for(fut, 10) is False
        loop.call_at = counting_call_at  # type: ignore[method-assign]
        # watch the loop for 1.5 s without a timer of our own (a thread sleeps)
        await loop.run_in_executor(None, time.sleep, 1.5)
        loop.call_at = call_at  # type: ignore[method-assign]
        assert t.links["b"].channel is not None  # still open: idle for less than 30 s
        assert scheduled == []
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]
        await t.close()
        await server.stop(0)


async def test_prepare_dials_ahead_and_sends_nothing(tmp_path):
    """`prepare` (the runtime calls it while the step that sends is being written) connects the
    link's channel, mTLS handshake included, but delivers nothing; the message itself then goes
    on that same channel once submitted."""
    handled: list[int] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        handled.append(msg.round)
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr})
    try:
        t.prepare("b")
        t.prepare("nobody")  # no address: nothing to dial, nothing raised (submit reports it)
        assert "nobody" not in t.links
        channel = t.links["b"].channel
        assert channel is not None
        await _wait_for(
            lambda: channel.get_state() == grpc.ChannelConnectivity.READY,
            "the prepared channel to be connected",
        )
        assert handled == [] and not service._idle  # connected, no stream, nothing delivered
        fut = t.submit("b", "j", Message("value", np.zeros(1), round=5))
        assert await asyncio.wait_for(fut, 10) is False
        assert handled == [5]
        assert t.links["b"].channel is channel
    finally:
        await t.close()
        await server.stop(0)


async def test_a_channel_dialled_ahead_but_never_used_is_closed(tmp_path):
    """The step that was to send may never be written (a ledger error fails the job): the channel
    `prepare` dialled closes after the idle bound like any idle link."""

    async def handle(sender: str, job: str, msg: Message) -> bool:
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, idle_close_after=0.5)
    try:
        t.prepare("b")
        link = t.links["b"]
        assert link.channel is not None
        await _wait_for(lambda: link.channel is None, "the unused channel to close")
        # the peer is still reachable afterwards: a message dials again
        fut = t.submit("b", "j", Message("value", np.zeros(1), round=1))
        assert await asyncio.wait_for(fut, 10) is False
    finally:
        await t.close()
        await server.stop(0)


async def test_large_and_small_messages_cross_a_link_without_bdp_probing(tmp_path):
    """The links' channels and servers do not probe the bandwidth-delay product (a PING and its
    ACK on data received, every 0.1 s or more on a young connection): the stream window stays at
    its initial size and grows to each message being read, so a message of almost the largest
    size allowed still arrives whole, between small ones, in order."""
    from netdp_node.limits import MAX_MESSAGE_BYTES
    from netdp_node.security.mtls import CHANNEL_OPTIONS, SERVER_OPTIONS

    assert ("grpc.http2.bdp_probe", 0) in CHANNEL_OPTIONS
    assert ("grpc.http2.bdp_probe", 0) in SERVER_OPTIONS
    got: list[Message] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        got.append(msg)
        return False

    ident, service, server, addr = await _serve(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr})
    big = (MAX_MESSAGE_BYTES - 4096) // 8  # floats: the largest payload under the limit
    rng = np.random.default_rng(7)
    sent = [
        Message("value", payload=rng.normal(size=n), round=i)
        for i, n in enumerate([1, big, 3, big // 3, 1])
    ]
    try:
        for m in sent:
            await asyncio.wait_for(t.send("b", "j", m), 30)
        assert [m.round for m in got] == [m.round for m in sent]
        assert [m.digest() for m in got] == [m.digest() for m in sent]
    finally:
        await t.close()
        await server.stop(0)
