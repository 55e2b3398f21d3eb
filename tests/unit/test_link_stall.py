"""A gRPC link whose peer neither fails nor acknowledges (a link that went down under an open
stream: TCP notices only after tens of seconds) gives up after the give-up time, as it does when
its stream keeps failing; a peer that acknowledges keeps the link alive."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from netdp_node.protocols.base import Message
from netdp_node.retry import Backoff
from netdp_node.security import pki
from netdp_node.security.mtls import AccessPolicy, start_server
from netdp_node.transport.base import DeliveryError
from netdp_node.transport.grpc import GrpcTransport, PeerService

pytestmark = pytest.mark.timeout(60)


async def _peer(tmp_path, handle):
    pki.init_ca(tmp_path / "pki")
    for nid in ("a", "b"):
        pki.issue(tmp_path / "pki", nid, hosts=("127.0.0.1",))
    a, b = (pki.load_identity(tmp_path / "pki" / nid) for nid in ("a", "b"))
    service = PeerService("b", handle, lambda: None, AccessPolicy())  # type: ignore[arg-type]
    server, port = await start_server(
        b, "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((service.generic_handler(),))
    )
    return a, server, f"127.0.0.1:{port}"


async def test_a_link_whose_peer_never_answers_gives_up(tmp_path):
    never = asyncio.Event()
    handled: list[int] = []

    async def handle(sender: str, job: str, msg: Message) -> bool:
        handled.append(msg.round)
        await never.wait()  # the stream stays open, no acknowledgement ever comes
        return False

    ident, server, addr = await _peer(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, backoff=Backoff(give_up_after=1.0))
    try:
        fut = t.submit("b", "j", Message("value", payload=np.zeros(1), round=3))
        with pytest.raises(DeliveryError) as err:
            await asyncio.wait_for(fut, 30)  # (bounded: without the stall rule it hangs)
        assert err.value.code == "UNAVAILABLE"
        assert "no acknowledgement for 1s" in err.value.detail, err.value.detail
        assert handled == [3]  # it did arrive: only the acknowledgement never came
    finally:
        never.set()
        await t.close()
        await server.stop(0)


async def test_a_slow_but_answering_peer_is_not_given_up(tmp_path):
    """Acknowledgements that keep coming are progress: 6 messages acknowledged 0.3 s apart take
    longer than the give-up time (1 s) in all, and none is given up."""

    async def handle(sender: str, job: str, msg: Message) -> bool:
        await asyncio.sleep(0.3)
        return False

    ident, server, addr = await _peer(tmp_path, handle)
    t = GrpcTransport(ident, {"b": addr}, backoff=Backoff(give_up_after=1.0))
    try:
        futs = [
            t.submit("b", "j", Message("value", payload=np.zeros(1), round=r)) for r in range(6)
        ]
        assert await asyncio.wait_for(asyncio.gather(*futs), 30) == [False] * 6
    finally:
        await t.close()
        await server.stop(0)
