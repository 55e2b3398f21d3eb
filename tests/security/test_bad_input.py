"""Bad input on the wire, against a real node daemon in the middle of a job.

The test process itself is a participant: it holds a certificate for "node-t" from the cluster's CA,
registers with the bootstrap at the address of an in-process mTLS Peer server (which only records
what it receives), and is placed first in the ring of a job with three real node processes:

    node-t -> node-1 -> node-2 -> node-3 -> node-t

So the test is node-1's true predecessor and sends node-1 tokens itself: first bad ones (each must
get a precise gRPC status while node-1 keeps serving), then the real round-1 token, an exact
duplicate of it (acknowledged as a duplicate, not applied twice) and a conflicting one (refused).
Finally it plays its part to the end (forwarding every token it receives, then the release) and
the three real nodes must finish with the same released value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import grpc
import grpc.aio
import numpy as np
import pytest
import pytest_asyncio

from netdp.v1 import common_pb2, peer_pb2
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.limits import MAX_MESSAGE_BYTES
from netdp_node.protocols.base import Message
from netdp_node.security import pki
from netdp_node.security.mtls import AccessPolicy, start_server
from netdp_node.security.pki import Identity
from netdp_node.transport.grpc import PeerService
from netdp_node.wire import envelope_to_message

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

JOB = "bad-input"
ROUNDS = 3
ME = "node-t"
TARGET = "node-1"  # the test's ring successor
LAST = "node-3"  # the test's ring predecessor


class FakePeer:
    """The test's own Peer server: records every message (sender, job, Message) and acks it."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.got: list[tuple[str, str, Message]] = []
        self.server: grpc.aio.Server | None = None
        self.address = ""

    async def handle(self, sender: str, job_id: str, msg: Message) -> bool:
        self.got.append((sender, job_id, msg))
        return False

    async def start(self) -> None:
        svc = PeerService(ME, self.handle, lambda: peer_pb2.StatusReply(node_id=ME), AccessPolicy())
        self.server, port = await start_server(
            self.identity,
            "127.0.0.1:0",
            lambda s: s.add_generic_rpc_handlers((svc.generic_handler(),)),
        )
        self.address = f"127.0.0.1:{port}"

    def token(self, seq: int) -> Message | None:
        for sender, job, msg in self.got:
            if sender == LAST and job == JOB and msg.kind == "token" and msg.seq == seq:
                return msg
        return None


@dataclass
class Ring:
    cluster: LocalCluster
    me: Identity
    peer: FakePeer
    first_token: bytes = b""  # the exact bytes of the round-1 token node-1 acknowledged

    @property
    def target(self) -> str:
        return self.cluster.procs[TARGET].address

    def log(self, proc: str = TARGET) -> str:
        return self.cluster.procs[proc].log_text()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ring(module_clusters, nd):
    cluster = module_clusters(3, values=[0.25, 0.5, 0.75])
    pki.issue(cluster.pki_dir, ME)
    me = pki.load_identity(cluster.certs(ME))
    peer = FakePeer(me)
    await peer.start()
    as_me = BootstrapClient(cluster.bootstrap_address, me)
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    try:
        await as_me.register(ME, peer.address)
        await cluster.wait_registered([*cluster.ids, ME])
        job = await op.submit(
            "ring-sum", {"rounds": ROUNDS}, participants=[ME, *cluster.ids], job_id=JOB
        )
        assert [p.node_id for p in job.participants] == [ME, "node-1", "node-2", "node-3"]

        async def joined() -> bool:
            st = await nd.job_status(cluster.procs[TARGET].address, cluster.operator, JOB)
            return st is not None and st.state == "running"

        await nd.await_until(joined, 30, f"{TARGET} to join {JOB}")
        yield Ring(cluster, me, peer)
    finally:
        await as_me.close()
        await op.close()
        assert peer.server is not None
        await peer.server.stop(0)


async def assert_serving(r: Ring, nd) -> None:
    """node-1 is alive, answers Status, the job is still running there, and no refused message
    made it into its ledger (only the real round-1 token, once it was sent)."""
    assert r.cluster.procs[TARGET].alive()
    assert len(received_from_me(r, nd)) == (1 if r.first_token else 0)
    st = await nd.job_status(r.target, r.cluster.operator, JOB)
    assert st is not None and st.state == "running", st


def received_from_me(r: Ring, nd) -> list:
    return [
        e
        for e in nd.entries(r.cluster.ledger(TARGET), JOB)
        if e.direction == "received" and e.peer == ME
    ]


async def refused(
    r: Ring, nd, raw: bytes, code: grpc.StatusCode, *, logs: str = "", options=None
) -> str:
    """Deliver `raw` as node-t; it must fail with `code`, and node-1 must log one more `logs`
    line. Returns the status details."""
    before = r.log().count(logs)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await nd.deliver_raw(r.target, r.me, raw, options=options)
    assert err.value.code() == code, (err.value.code(), err.value.details())
    if logs:
        nd.wait_until(lambda: r.log().count(logs) > before, 5, f"{TARGET} to log {logs!r}")
    return err.value.details() or ""


async def send_first_token(r: Ring, nd) -> bytes:
    """The real round-1 token, sent once (the tests below may run alone)."""
    if not r.first_token:
        raw = nd.envelope(JOB, "token", seq=1, payload=[0.125], msg_id=41).SerializeToString()
        ack = await nd.deliver_raw(r.target, r.me, raw)
        assert ack.code == 0 and not ack.duplicate and ack.msg_id == 41, ack
        r.first_token = raw
    return r.first_token


# -- refused input ------------------------------------------------------------------------------
@pytest.mark.timeout(90)
async def test_malformed_bytes_are_invalid_argument(ring, nd):
    details = await refused(
        ring,
        nd,
        b"\xff\xff\xff\xff not a protobuf",
        grpc.StatusCode.INVALID_ARGUMENT,
        logs=f"refused malformed bytes from {ME}",
    )
    assert "malformed Envelope" in details
    await assert_serving(ring, nd)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_non_finite_payload_is_invalid_argument(ring, nd, bad):
    raw = nd.envelope(JOB, "token", seq=1, payload=[bad]).SerializeToString()
    details = await refused(
        ring,
        nd,
        raw,
        grpc.StatusCode.INVALID_ARGUMENT,
        logs=f"refused bad envelope from {ME} for job {JOB}: tensor contains NaN or infinite",
    )
    assert "NaN or infinite" in details
    await assert_serving(ring, nd)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "payload",
    [[0.1, 0.2], [[0.1]], 0.1, None],
    ids=["2-vector", "1x1-matrix", "scalar", "no-payload"],
)
async def test_wrong_shape_is_invalid_argument(ring, nd, payload):
    raw = nd.envelope(JOB, "token", seq=1, payload=payload).SerializeToString()
    details = await refused(
        ring,
        nd,
        raw,
        grpc.StatusCode.INVALID_ARGUMENT,
        logs=f"refused token from {ME}: token payload has shape",
    )
    assert "expects (1,)" in details, details
    await assert_serving(ring, nd)


@pytest.mark.timeout(30)
async def test_tensor_bytes_not_matching_its_shape_is_invalid_argument(ring, nd):
    env = nd.envelope(JOB, "token", seq=1, payload=None)
    env.payload.CopyFrom(common_pb2.Tensor(dtype="float64", shape=[3], data=b"\0" * 8))
    details = await refused(
        ring,
        nd,
        env.SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        logs=f"refused bad envelope from {ME} for job {JOB}: tensor bytes",
    )
    assert "do not match" in details
    await assert_serving(ring, nd)


@pytest.mark.timeout(30)
async def test_oversized_message_is_resource_exhausted(ring, nd):
    n = MAX_MESSAGE_BYTES // 8 + 1024  # a little over 4 MiB of float64
    raw = nd.envelope(JOB, "token", seq=1, payload=np.zeros(n)).SerializeToString()
    assert len(raw) > MAX_MESSAGE_BYTES
    big = [
        ("grpc.max_send_message_length", 4 * MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", 4 * MAX_MESSAGE_BYTES),
    ]
    await refused(ring, nd, raw, grpc.StatusCode.RESOURCE_EXHAUSTED, options=big)
    await assert_serving(ring, nd)


@pytest.mark.timeout(30)
async def test_unknown_job_is_not_found(ring, nd):
    raw = nd.envelope("no-such-job", "token", seq=1, payload=[0.1]).SerializeToString()
    details = await refused(
        ring,
        nd,
        raw,
        grpc.StatusCode.NOT_FOUND,
        logs=f"refused message from {ME}: job 'no-such-job' is unknown to node {TARGET}",
    )
    assert "no-such-job" in details
    await assert_serving(ring, nd)


# -- re-sends -----------------------------------------------------------------------------------
@pytest.mark.timeout(30)
async def test_duplicate_is_acknowledged_and_conflict_refused(ring, nd):
    await assert_serving(ring, nd)
    raw = await send_first_token(ring, nd)

    # An exact re-send: OK, flagged as a duplicate, not applied again.
    line = f"exact duplicate of token ring seq=1 from {ME} acknowledged, not applied"
    before = ring.log().count(line)
    ack = await nd.deliver_raw(ring.target, ring.me, raw)
    assert ack.code == 0 and ack.duplicate and ack.msg_id == 41, ack
    nd.wait_until(lambda: ring.log().count(line) > before, 5, f"{TARGET} to log {line!r}")

    # Same walk/seq from the true predecessor with another payload: ALREADY_EXISTS.
    env = peer_pb2.Envelope.FromString(raw)
    env.payload.data = np.array([0.875], dtype="<f8").tobytes()
    details = await refused(
        ring,
        nd,
        env.SerializeToString(),
        grpc.StatusCode.ALREADY_EXISTS,
        logs=f"refused token from {ME}: token ring/0 seq=1 round=0 from {ME} conflicts",
    )
    assert "conflicts with the one already stored" in details

    # The ledger holds the first token once, with its digest, and one contribution for round 1.
    entries = nd.entries(ring.cluster.ledger(TARGET), JOB)
    got = [e for e in entries if e.direction == "received" and e.peer == ME]
    assert len(got) == 1 and got[0].seq == 1
    assert got[0].digest == envelope_to_message(peer_pb2.Envelope.FromString(raw)).digest()
    contributions = [e for e in entries if e.event == "contribute"]
    assert [e.params["round"] for e in contributions] == [1]
    forwarded = [e for e in entries if e.direction == "sent"]
    assert [(e.peer, e.kind, e.seq) for e in forwarded] == [("node-2", "token", 1)]
    await assert_serving(ring, nd)


# -- and the node kept working ------------------------------------------------------------------
@pytest.mark.timeout(60)
async def test_job_completes_after_bad_input(ring, nd):
    await send_first_token(ring, nd)
    tau = None
    for k in range(1, ROUNDS + 1):

        async def arrived(k: int = k) -> Message | None:
            return ring.peer.token(k)  # the in-process server runs on this loop: await, not block

        msg = await nd.await_until(arrived, 20, f"token {k} from {LAST}")
        tau = np.asarray(msg.payload, dtype=np.float64)
        kind, seq = ("token", k + 1) if k < ROUNDS else ("release", 1)
        ack = await nd.deliver(ring.target, ring.me, nd.envelope(JOB, kind, seq=seq, payload=tau))
        assert ack.code == 0 and not ack.duplicate, ack
    op = BootstrapClient(ring.cluster.bootstrap_address, ring.cluster.operator)
    try:
        results = await nd.wait_reports(op, JOB, ring.cluster.ids, timeout=30)
    finally:
        await op.close()
    for nid, res in results.items():
        assert res.state == "done" and res.contributions == ROUNDS, (nid, res.state, res.detail)
        out = np.frombuffer(res.output.data, dtype="<f8")
        np.testing.assert_array_equal(out, tau / ROUNDS)  # the released token, over K
