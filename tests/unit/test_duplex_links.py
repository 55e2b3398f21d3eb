"""Duplex links on real mTLS gRPC over loopback: a node sends to a peer on the Link stream that peer
opened to it (no connection of its own), the peer handles and acknowledges those messages as on its
server, and what was pending there is re-sent on a dialled stream when that stream ends. Identity
holds both ways: a message coming back on a stream is the dialled server's (its certificate was
checked against the name dialled), revoked peers get nothing, and a walk's hand-offs travel back
on the streams their tokens came on."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.protocols.base import Message
from netdp_node.retry import Backoff
from netdp_node.security import pki
from netdp_node.security.identity import RevocationList
from netdp_node.security.mtls import AccessPolicy, start_server
from netdp_node.transport.base import DeliveryError
from netdp_node.transport.grpc import GrpcTransport, Link, PeerService

pytestmark = pytest.mark.timeout(90)


class Node:
    """A transport and its Peer service on loopback, with a recording handler."""

    def __init__(self, ident: pki.Identity, crl: list[RevocationList]) -> None:
        self.ident = ident
        self.got: list[tuple[str, int]] = []  # (sender, round)
        self.hold: asyncio.Event | None = None  # set: handling waits for it
        self.held = 0  # messages waiting for `hold` now
        self.blocked: set[str] = set()
        self.crl = crl
        self.transport = GrpcTransport(
            ident,
            backoff=Backoff(initial=0.05, maximum=0.2, give_up_after=3.0),
            revocations=lambda: self.crl[0],
        )
        self.service = PeerService(
            ident.node_id,
            self.handle,
            lambda: None,  # type: ignore[arg-type,return-value]
            AccessPolicy(is_revoked=lambda s: self.crl[0].is_revoked(s)),
            gate=lambda peer: "offline (test)" if peer in self.blocked else None,
            links=self.transport,
        )
        self.server: Any = None
        self.address = ""

    async def handle(self, sender: str, job: str, msg: Message) -> bool:
        if self.hold is not None:
            self.held += 1
            try:
                await self.hold.wait()
            finally:
                self.held -= 1
        self.got.append((sender, msg.round))
        return False

    async def start(self) -> Node:
        svc = self.service
        self.server, port = await start_server(
            self.ident,
            "127.0.0.1:0",
            lambda s: s.add_generic_rpc_handlers((svc.generic_handler(),)),
        )
        self.address = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        self.service.stop_links()
        await self.transport.close()
        await self.server.stop(0)


def _msg(rnd: int) -> Message:
    return Message("value", payload=np.zeros(1), round=rnd)


async def _until(cond: Any, what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def _pair(tmp_path: Any, *, b_knows_a: bool = False) -> tuple[Node, Node]:
    pki.init_ca(tmp_path / "pki")
    for nid in ("a", "b"):
        pki.issue(tmp_path / "pki", nid, hosts=("127.0.0.1",))
    crl = [RevocationList(0, frozenset())]
    a = await Node(pki.load_identity(tmp_path / "pki" / "a"), crl).start()
    b = await Node(pki.load_identity(tmp_path / "pki" / "b"), [crl[0]]).start()
    a.transport.learn({"b": b.address})
    if b_knows_a:
        b.transport.learn({"a": a.address})
    return a, b


def _dialled(t: GrpcTransport, peer: str) -> bool:
    link = t.links.get(peer)
    return link is not None and link.channel is not None


async def test_a_reply_goes_back_on_the_stream_the_peer_opened(tmp_path):
    """b knows no address of a, so its message can only travel on a's stream, and a handles it
    as a message from b (the identity of the server a dialled)."""
    a, b = await _pair(tmp_path)
    try:
        assert await asyncio.wait_for(a.transport.send("b", "j", _msg(1)), 10) is False
        assert b.got == [("a", 1)]
        assert await asyncio.wait_for(b.transport.send("a", "j", _msg(2)), 10) is False
        assert a.got == [("b", 2)]
        assert not _dialled(b.transport, "a")  # no connection of b's own
        # both ways keep working, in order, on the one stream
        futs = [b.transport.submit("a", "j", _msg(r)) for r in range(3, 8)]
        futs += [a.transport.submit("b", "j", _msg(r)) for r in range(10, 13)]
        await asyncio.wait_for(asyncio.gather(*futs), 10)
        assert a.got == [("b", r) for r in range(2, 8)]
        assert b.got == [("a", 1)] + [("a", r) for r in range(10, 13)]
        assert not _dialled(b.transport, "a")
    finally:
        await a.stop()
        await b.stop()


async def _held_on_as_stream(a: Node, b: Node) -> asyncio.Future[bool]:
    """a opens its stream to b; b sends a message back on it, which a takes but does not answer
    yet (`a.hold`): b's message, pending."""
    await asyncio.wait_for(a.transport.send("b", "j", _msg(1)), 10)
    a.hold = asyncio.Event()
    fut = b.transport.submit("a", "j", _msg(2))
    await _until(lambda: a.held == 1, "a to take b's message")
    return fut


async def test_pending_messages_move_to_a_dialled_stream_when_the_peers_stream_ends(tmp_path):
    a, b = await _pair(tmp_path, b_knows_a=True)
    try:
        fut = await _held_on_as_stream(a, b)
        assert not fut.done() and not _dialled(b.transport, "a")
        # a's link to b goes away (a closes it, as after its idle time): b re-sends on a stream of
        # its own, which a answers once it handles again
        await a.transport.links["b"].close()
        a.hold.set()
        assert await asyncio.wait_for(fut, 10) in (False, True)
        assert _dialled(b.transport, "a")
        assert ("b", 2) in a.got
    finally:
        a.hold = None
        await a.stop()
        await b.stop()


async def test_a_stream_that_ends_with_no_address_known_fails_the_message(tmp_path):
    a, b = await _pair(tmp_path)  # b knows no address of a
    try:
        fut = await _held_on_as_stream(a, b)
        await a.transport.links["b"].close()
        with pytest.raises(DeliveryError) as err:
            await asyncio.wait_for(fut, 10)
        assert err.value.code == "UNAVAILABLE" and "no address known" in err.value.detail
    finally:
        if a.hold is not None:
            a.hold.set()
        await a.stop()
        await b.stop()


async def test_a_node_offline_to_its_peer_refuses_what_comes_back_on_its_own_stream(tmp_path):
    a, b = await _pair(tmp_path, b_knows_a=True)
    try:
        await asyncio.wait_for(a.transport.send("b", "j", _msg(1)), 10)
        a.blocked.add("b")  # a takes no traffic from b (fault injection: partition)
        with pytest.raises(DeliveryError) as err:
            await asyncio.wait_for(b.transport.send("a", "j", _msg(2)), 15)
        assert err.value.code == "UNAVAILABLE"
        assert a.got == []
        a.blocked.clear()
        await asyncio.wait_for(b.transport.send("a", "j", _msg(3)), 15)
        assert a.got == [("b", 3)]
    finally:
        await a.stop()
        await b.stop()


async def test_revoked_peers_get_nothing_back_on_their_streams(tmp_path):
    """Both directions: b refuses to send to a revoked a on a's stream, and a, once b is revoked,
    takes nothing from b on the stream a opened."""
    a, b = await _pair(tmp_path)
    try:
        await asyncio.wait_for(a.transport.send("b", "j", _msg(1)), 10)
        # b learns that a is revoked: nothing goes to a, not even on a's own open stream
        b.crl[0] = RevocationList(1, frozenset({a.ident.serial}))
        b.transport.revocations_changed()
        with pytest.raises(DeliveryError) as err:
            await asyncio.wait_for(b.transport.send("a", "j", _msg(2)), 10)
        assert err.value.code == "PERMISSION_DENIED"
        assert a.got == []
    finally:
        await a.stop()
        await b.stop()


async def test_a_revoked_server_cannot_send_back_on_the_stream_it_was_dialled_on(tmp_path):
    a, b = await _pair(tmp_path)
    try:
        await asyncio.wait_for(a.transport.send("b", "j", _msg(1)), 10)
        a.crl[0] = RevocationList(1, frozenset({b.ident.serial}))  # a learns b is revoked
        a.transport.revocations_changed()
        with pytest.raises(DeliveryError):
            await asyncio.wait_for(b.transport.send("a", "j", _msg(2)), 15)
        assert a.got == []
    finally:
        await a.stop()
        await b.stop()


async def test_a_walks_handoffs_go_back_on_the_streams_their_tokens_came_on(tmp_path, monkeypatch):
    """A walk-sum job over gRPC: a node dials a peer only to send it a token, a fence or the
    release, never for a hand-off (it goes back to the token's sender on the stream the token
    came on). Before duplex links almost every hop dialled twice."""
    ids = [f"n{i}" for i in range(6)]
    dials: list[tuple[str, str]] = []
    sent: set[tuple[str, str]] = set()  # (sender, receiver) of every message but a hand-off
    connect = Link.connect

    def counting_connect(self: Link) -> Any:
        if self.channel is None:
            dials.append((self.t.me, self.peer))
        return connect(self)

    monkeypatch.setattr(Link, "connect", counting_connect)
    submit = GrpcTransport.submit

    def recording_submit(self: GrpcTransport, to: str, job: str, msg: Message, on_done=None):
        if msg.kind != "handoff":
            sent.add((self.me, to))
        return submit(self, to, job, msg, on_done)

    monkeypatch.setattr(GrpcTransport, "submit", recording_submit)
    data = {nid: np.array([float(i)]) for i, nid in enumerate(ids)}
    net = await make_net("grpc", ids, tmp_path / "net", data=data, seed=3)
    try:
        params = get_algorithm("walk-sum").validate({"T": 60, "edge_cap": 100}, len(ids))
        await net.run_job(contexts("j", "walk-sum", ids, params, seed=1))
        for _ in range(500):  # the hand-offs after the last hop; bounded
            if not any(
                lk.pending for rt in net.nodes.values() for lk in rt.transport.links.values()
            ):  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.02)
    finally:
        await net.close()
    assert dials, "no link was dialled"
    handoff_only = [d for d in dials if d not in sent]
    assert handoff_only == [], f"dialled only to send hand-offs: {handoff_only}"
