"""Callers refuse a server whose certificate is revoked (the trust issue, client side).

A node serving gRPC refuses revoked callers; before this, a caller checked only that the server's
certificate names the peer it dialled, so a revoked node that kept serving was still handed tokens
(and they counted as delivered). Now a caller whose revocation list is not empty reads the
certificate each peer's server presents when it opens the link's stream, and refuses a revoked one:
nothing is sent, the messages fail at once (PERMISSION_DENIED, logged with node and job), and the
job goes on as with a peer it cannot reach (a ring fails with the reason, a walk re-routes).

Everything here is real: the netdp CA on disk (`pki.revoke` signs the list), TLS on 127.0.0.1. The
revoked node is a bare grpc.aio server (`peers.FakePeer`) with its own (revoked) certificate that
acknowledges every envelope and keeps it, as a revoked node that still serves would; the caller is
a real NodeRuntime with a GrpcTransport.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from peers import FakePeer, close, ident, until

from netdp_node.algorithms import get_algorithm
from netdp_node.ledger import Ledger
from netdp_node.protocols.base import JobContext, Message
from netdp_node.retry import Backoff
from netdp_node.runtime import NodeRuntime
from netdp_node.security import pki
from netdp_node.security.identity import PeerIdentity, RevocationList
from netdp_node.transport import grpc as grpc_transport
from netdp_node.transport.base import DeliveryError
from netdp_node.transport.grpc import GrpcTransport

pytestmark = pytest.mark.timeout(40)

JOB = "ring-to-a-revoked-node"


class Crl:
    """The caller's current revocation list (the daemon's `revocations`)."""

    def __init__(self, ca: Path) -> None:
        self.ca = ca
        self.current = RevocationList.empty()

    def revoke(self, node_id: str) -> None:
        self.current = RevocationList.from_pem(
            pki.revoke(self.ca, node_id), ident(self.ca, "node-4").ca_pem
        )

    def __call__(self) -> RevocationList:
        return self.current


def runtime(ca: Path, tmp: Path, addresses: dict[str, str], crl: Crl) -> NodeRuntime:
    """node-4 (a real NodeRuntime over gRPC); gives up on a silent peer after 60 s only, so a
    refusal seen within the test's timeout is not a retry running out."""
    transport = GrpcTransport(
        ident(ca, "node-4"), addresses, backoff=Backoff(give_up_after=60.0), revocations=crl
    )
    return NodeRuntime(
        "node-4",
        Ledger(tmp / "ledger-4", "node-4"),
        transport,
        data=np.array([0.4]),
        rng_factory=lambda job: np.random.default_rng(4),
    )


async def test_a_revoked_node_that_still_serves_gets_no_token(ca, tmp_path, caplog):
    """node-5 is revoked and still serves with its certificate (valid for TLS, right name):
    node-4 refuses it, logs node, job and serial, and the ring job fails with that reason."""
    caplog.set_level(logging.INFO)
    crl = Crl(ca)
    crl.revoke("node-5")
    serial = ident(ca, "node-5").serial
    revoked = await FakePeer().start(ident(ca, "node-5"))
    rt = runtime(ca, tmp_path, {"node-5": revoked.address, "node-6": "127.0.0.1:9"}, crl)
    ctx = JobContext(
        job_id=JOB,
        algorithm="ring-sum",
        me="node-4",
        participants=("node-4", "node-5", "node-6"),
        params=get_algorithm("ring-sum").prepare({"rounds": 2}, 3),
        public_seed=1,
    )
    try:
        runner = await rt.add_job(ctx)
        await until(
            lambda: runner.state != "running" or bool(revoked.received),
            25,
            "node-4 to hand the token over or to refuse node-5",
        )
        assert revoked.received == [], "the revoked node-5 was handed the token"
        why = f"the certificate of node-5 at {revoked.address} (serial {serial}) is revoked"
        assert runner.state == "failed", runner.detail
        assert runner.detail == f"token to node-5 failed: PERMISSION_DENIED: {why}"
        line = f"[node=node-4 job={JOB}] refused the server at {revoked.address}: {why}"
        logged = [r for r in caplog.records if r.name == "netdp.grpc" and line in r.getMessage()]
        assert logged and logged[0].levelno == logging.ERROR, caplog.text
        row = rt.ledger.job(JOB)
        assert row is not None and row.state == "failed" and why in row.detail, row
        entries = rt.ledger.entries(JOB)
        assert not [e for e in entries if e.event == "acked"], "a refused token counted as acked"
    finally:
        await close(rt, revoked)


async def test_a_walk_routes_around_revoked_nodes(ca, tmp_path):
    """A walk over node-4, node-5, node-6 with node-5 and node-6 revoked but serving: every token
    node-4 hands them is refused, recorded as a re-route naming the peer and why, never as
    delivered; the walk ends at node-4 alone and they got nothing."""
    crl = Crl(ca)
    crl.revoke("node-5")
    crl.revoke("node-6")
    five = await FakePeer().start(ident(ca, "node-5"))
    six = await FakePeer().start(ident(ca, "node-6"))
    rt = runtime(ca, tmp_path, {"node-5": five.address, "node-6": six.address}, crl)
    ctx = JobContext(
        job_id=JOB,
        algorithm="walk-sum",
        me="node-4",
        participants=("node-4", "node-5", "node-6"),
        params=get_algorithm("walk-sum").prepare({"T": 30}, 3),
        public_seed=0,
    )
    try:
        runner = await rt.add_job(ctx)
        await until(lambda: runner.state != "running", 25, "the walk to end")
        assert five.received == [] and six.received == []
        assert runner.state == "done", runner.detail
        entries = rt.ledger.entries(JOB)
        reroutes = [e for e in entries if e.event == "reroute"]
        assert reroutes and {e.peer for e in reroutes} <= {"node-5", "node-6"}
        for e in reroutes:
            assert f"PERMISSION_DENIED: the certificate of {e.peer} at " in e.params["reason"]
            assert "is revoked" in e.params["reason"], e.params
        assert not [e for e in entries if e.event == "acked"]
        assert runner.output is not None
        assert sorted(runner.output.info["excluded"]) == sorted({e.peer for e in reroutes})
    finally:
        await close(rt, five, six)


@pytest.mark.parametrize("before", ["empty list", "another node revoked"])
async def test_a_newer_list_stops_an_open_link(ca, before):
    """node-4's link to node-5 is open and has delivered (with an empty list: the server was never
    checked; with node-7 revoked: it was checked and passed). Then node-5 is revoked: after
    `revocations_changed` the next message is refused, not delivered."""
    crl = Crl(ca)
    if before == "another node revoked":
        crl.revoke("node-7")
    five = await FakePeer().start(ident(ca, "node-5"))
    t = GrpcTransport(
        ident(ca, "node-4"),
        {"node-5": five.address},
        backoff=Backoff(give_up_after=60.0),
        revocations=crl,
    )
    try:
        assert await t.send("node-5", JOB, Message(kind="token", seq=1)) is False
        assert five.received == [(JOB, "token", 1)]
        crl.revoke("node-5")
        t.revocations_changed()
        with pytest.raises(DeliveryError) as err:
            await asyncio.wait_for(t.send("node-5", JOB, Message(kind="token", seq=2)), 20)
        assert err.value.code == "PERMISSION_DENIED", err.value
        assert (
            "the certificate of node-5 at" in err.value.detail and "is revoked" in err.value.detail
        )
        assert five.received == [(JOB, "token", 1)]
    finally:
        await t.close()
        await five.stop()


async def test_closing_a_link_whose_cancellation_was_lost_returns(ca, monkeypatch):
    """The transport's close while a link probes a revoked server (the defect behind the walk test
    above timing out in one run of three: its teardown, not the walk, never ended). The probe's
    `asyncio.wait_for` (Python < 3.12) returns the handshake's result when the cancellation of
    `close` arrives just as the handshake completed: the cancellation is lost, the link refused
    the server and then waited for work forever, and `close` with it. Here the probe loses the
    first cancellation every time; close must still return, having sent nothing."""
    crl = Crl(ca)
    crl.revoke("node-5")
    five = await FakePeer().start(ident(ca, "node-5"))
    real = grpc_transport.server_certificate
    probing = asyncio.Event()
    lost: list[str] = []

    async def probe(*args: Any) -> PeerIdentity:
        handshake = asyncio.ensure_future(real(*args))
        probing.set()
        try:
            return await asyncio.shield(handshake)
        except asyncio.CancelledError:  # lost, as wait_for loses it
            lost.append("cancel")
            return await handshake

    monkeypatch.setattr(grpc_transport, "server_certificate", probe)
    t = GrpcTransport(
        ident(ca, "node-4"),
        {"node-5": five.address},
        backoff=Backoff(give_up_after=60.0),
        revocations=crl,
    )
    closing: asyncio.Future[None] | None = None
    try:
        sent = t.submit("node-5", JOB, Message(kind="token", seq=1))
        link = t.links["node-5"]
        await asyncio.wait_for(probing.wait(), 10)
        closing = asyncio.ensure_future(t.close())
        await asyncio.wait({closing}, timeout=20)
        assert lost == ["cancel"]
        assert closing.done(), "the transport's close did not return"
        assert link.task is not None and link.task.done()
        assert five.received == []
        if sent.done():  # refused if the probe ended before the second cancellation
            assert isinstance(sent.exception(), DeliveryError)
    finally:
        if closing is not None and not closing.done():
            closing.cancel()
        await five.stop()
