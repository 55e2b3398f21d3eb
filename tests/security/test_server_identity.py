"""Callers check WHO answers (issue 13, defect 1), and who may ask a node for its Status.

Attack: node-5 is down and a valid node-7 serves on node-5's registered address. Before the fix,
TLS on outgoing calls checked only the address, which node-7's certificate (127.0.0.1) covers: node-4
handed node-5's ring token to node-7, which acknowledged it. Now every outgoing channel verifies the
identity name of the node it means to reach (``node-5.node.netdp.invalid``): node-7's certificate
fails the handshake, nothing reaches it, node-4 logs the refusal with both ids, and the message fails
at once (permanent, no 60 s of retries), so the ring job fails with that reason in the ledger.

The same for the bootstrap: a node certificate serving on the bootstrap's address gets no call from
a node (which stops, exit 3) or an operator (exit 3). Status is for operators only. A certificate
without the identity names (issued by an older netdp) stops `netdp node` and `netdp bootstrap` at
start (exit 2, re-issue), and a certificate that does not name the address a node advertises is
now fine.

The fake servers here are bare grpc.aio servers with a real certificate of the test's CA, in the
test process; the node under attack is a real NodeRuntime + GrpcTransport (in-process) or a real
`netdp node` process.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from peers import FakePeer, close, ident, until

from netdp.v1 import peer_pb2
from netdp_node.algorithms import get_algorithm
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.errors import ConfigError, ServerIdentityError
from netdp_node.ledger import Ledger
from netdp_node.protocols.base import JobContext
from netdp_node.retry import Backoff
from netdp_node.runtime import NodeRuntime
from netdp_node.security import pki
from netdp_node.security.identity import peer_name
from netdp_node.security.mtls import AccessPolicy, secure_channel, start_server, wrong_server
from netdp_node.transport.grpc import GrpcTransport, PeerService

pytestmark = pytest.mark.timeout(30)

JOB = "ring-at-the-wrong-door"
REPO = Path(__file__).resolve().parents[2]
STATUS = "/netdp.v1.Peer/Status"


async def ring_at(ca: Path, tmp: Path, node5_address: str) -> tuple[NodeRuntime, Any]:
    """node-4, first of the ring node-4 -> node-5 -> node-6, with node-5 at `node5_address`; it
    sends the round-1 token to node-5 as soon as it joins. Gives up on a silent peer after 60 s
    only, so a refusal seen within the test's timeout is not a retry running out."""
    transport = GrpcTransport(
        ident(ca, "node-4"),
        {"node-5": node5_address, "node-6": "127.0.0.1:9"},
        backoff=Backoff(give_up_after=60.0),
    )
    rt = NodeRuntime(
        "node-4",
        Ledger(tmp / "ledger-4", "node-4"),
        transport,
        data=np.array([0.4]),
        rng_factory=lambda job: np.random.default_rng(4),
    )
    ctx = JobContext(
        job_id=JOB,
        algorithm="ring-sum",
        me="node-4",
        participants=("node-4", "node-5", "node-6"),
        params=get_algorithm("ring-sum").prepare({"rounds": 2}, 3),
        public_seed=1,
    )
    runner = await rt.add_job(ctx)
    return rt, runner


# -- the attack on a peer link ------------------------------------------------------------------
async def test_another_node_at_the_peers_address_gets_nothing(ca, tmp_path, caplog):
    """node-7 (valid certificate) serves on node-5's address: node-4 refuses it, logs both ids,
    fails the token at once and the ring job fails with the reason, in the ledger too."""
    caplog.set_level(logging.INFO)
    impostor = await FakePeer().start(ident(ca, "node-7"))
    rt, runner = await ring_at(ca, tmp_path, impostor.address)
    try:
        await until(
            lambda: runner.state != "running" or bool(impostor.received),
            20,
            "node-4 to hand the token over or to give up",
        )
        assert impostor.received == [], "node-7 was handed node-5's token"
        why = f"expected node-5 at {impostor.address}, the server's certificate does not name it"
        assert runner.state == "failed"
        assert runner.detail.startswith(f"token to node-5 failed: UNAUTHENTICATED: {why}"), (
            runner.detail
        )
        line = f"[node=node-4 job={JOB}] refused the server at {impostor.address}: {why}"
        logged = [r for r in caplog.records if r.name == "netdp.grpc" and line in r.getMessage()]
        assert logged and logged[0].levelno == logging.ERROR, caplog.text
        row = rt.ledger.job(JOB)
        assert row is not None and row.state == "failed" and why in row.detail, row
        # node-4 wrote its intent to send before dialling (durable-before-send); nothing came
        # back and nobody received anything
        entries = rt.ledger.entries(JOB)
        assert [(e.direction, e.event, e.peer) for e in entries if e.direction != "local"] == [
            ("sent", "token", "node-5")
        ]
    finally:
        await close(rt, impostor)


async def test_a_walk_routes_around_the_impostor(ca, tmp_path):
    """The same attack on a random walk (node-7 serves on node-5's and node-6's addresses): each
    token node-4 hands to them is refused at once, recorded as a re-route naming the refused peer
    and why, never as delivered; the walk goes on without them and ends, and node-7 got nothing."""
    impostor = await FakePeer().start(ident(ca, "node-7"))
    transport = GrpcTransport(
        ident(ca, "node-4"),
        {"node-5": impostor.address, "node-6": impostor.address},
        backoff=Backoff(give_up_after=60.0),
    )
    rt = NodeRuntime(
        "node-4",
        Ledger(tmp_path / "ledger-4", "node-4"),
        transport,
        data=np.array([0.4]),
        rng_factory=lambda job: np.random.default_rng(4),
    )
    ids = ("node-4", "node-5", "node-6")
    ctx = JobContext(
        job_id=JOB,
        algorithm="walk-sum",
        me="node-4",
        participants=ids,
        params=get_algorithm("walk-sum").prepare({"T": 30}, 3),
        public_seed=0,
    )  # node-4 starts
    try:
        runner = await rt.add_job(ctx)
        await until(
            lambda: runner.state != "running" or bool(impostor.received),
            20,
            "the walk to end or to hand the token over",
        )
        assert impostor.received == [], "node-7 was handed a token meant for node-5 or node-6"
        assert runner.state == "done", runner.detail
        entries = rt.ledger.entries(JOB)
        reroutes = [e for e in entries if e.event == "reroute"]
        assert reroutes and {e.peer for e in reroutes} <= {"node-5", "node-6"}
        for e in reroutes:
            assert (
                f"UNAUTHENTICATED: expected {e.peer} at {impostor.address}, the server's "
                "certificate does not name it"
            ) in e.params["reason"], e.params
        assert not [e for e in entries if e.direction == "received"]
        assert runner.output is not None
        assert sorted(runner.output.info["excluded"]) == sorted({e.peer for e in reroutes})
    finally:
        await close(rt, impostor)


async def test_control_the_real_node_5_gets_the_token(ca, tmp_path):
    """The same fake server with node-5's own certificate receives the token and the job goes on:
    the refusal above is about whose certificate answered, nothing else."""
    real = await FakePeer().start(ident(ca, "node-5"))
    rt, runner = await ring_at(ca, tmp_path, real.address)
    try:
        await until(
            lambda: bool(real.received) or runner.state != "running",
            20,
            "node-5 to receive the token",
        )
        assert real.received == [(JOB, "token", 1)]
        assert runner.state == "running"
    finally:
        await close(rt, real)


async def test_names_ignore_case_but_ids_do_not(ca):
    """DNS names compare without regard to case: the certificate of NODE-5 must not pass for
    node-5 (the escaped identity name tells them apart)."""
    pki.issue(ca, "NODE-5")
    upper = await FakePeer().start(ident(ca, "NODE-5"))
    client = ident(ca, "node-4")
    raw = peer_pb2.Envelope(job_id=JOB, kind="token", seq=1, msg_id=1).SerializeToString()
    try:
        for expect, ok in (("node-5", False), ("NODE-5", True)):
            ch = secure_channel(upper.address, client, peer_name(expect))
            try:
                call = ch.unary_unary("/netdp.v1.Peer/Deliver")
                if ok:
                    await call(raw, timeout=10)
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await call(raw, timeout=10)
                    assert wrong_server(err.value), err.value
            finally:
                await ch.close()
        assert len(upper.received) == 1
    finally:
        await upper.stop()


def test_identity_names_differ_for_ids_that_differ_only_in_case():
    from netdp_node.security.identity import BOOTSTRAP_NAME, server_names

    ids = ["a_b", "aB", "a_B", "ab", "AB", "a__b", "A_b", "a.b", "a-b", "a._b"]
    names = [peer_name(i).lower() for i in ids]
    assert len(set(names)) == len(ids), names
    assert peer_name("aB") == "a_b.node.netdp.invalid"  # the escape, worked by hand
    assert peer_name("a_b") == "a__b.node.netdp.invalid"
    assert server_names("bootstrap", "netdp-bootstrap") == (
        "netdp-bootstrap.bootstrap.netdp.invalid",
        BOOTSTRAP_NAME,
    )


def test_no_certificate_may_claim_an_identity_name_as_a_host(ca):
    for host in (
        "*.node.netdp.invalid",
        "node-5.node.netdp.invalid",
        "bootstrap.netdp.invalid",
        "x.invalid",
    ):
        with pytest.raises(ConfigError, match="reserved"):
            pki.issue(ca, "node-8", hosts=(host,))


# -- Status: operators only ---------------------------------------------------------------------
async def test_status_is_for_operators_only(ca, caplog):
    caplog.set_level(logging.INFO)
    node5 = ident(ca, "node-5")
    service = PeerService(
        "node-5",
        lambda *a: None,
        lambda: peer_pb2.StatusReply(node_id="node-5"),
        AccessPolicy(owner="node=node-5"),
    )
    server, port = await start_server(
        node5, "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((service.generic_handler(),))
    )

    async def status(who: str) -> peer_pb2.StatusReply:
        ch = secure_channel(f"127.0.0.1:{port}", ident(ca, who), peer_name("node-5"))
        try:
            return await ch.unary_unary(
                STATUS,
                request_serializer=peer_pb2.StatusRequest.SerializeToString,
                response_deserializer=peer_pb2.StatusReply.FromString,
            )(peer_pb2.StatusRequest(), timeout=10)
        finally:
            await ch.close()

    try:
        assert (await status("operator")).node_id == "node-5"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await status("node-4")
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
        assert "a node certificate may not call Status" in (err.value.details() or "")
        assert "[node=node-5] refused Status from node-4: role node may not call it" in caplog.text
    finally:
        await server.stop(0)


# -- the bootstrap ------------------------------------------------------------------------------
class FakeBootstrap(grpc.GenericRpcHandler):
    """Answers every method with an empty reply, and keeps the list of calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        self.calls.append(details.method)

        async def empty(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return b""

        return grpc.unary_unary_rpc_method_handler(empty)


async def run_cli(
    *args: str, stop_when: Callable[[], bool], timeout: float = 25.0
) -> tuple[int | None, str]:
    """`netdp ARGS` as a process while this loop keeps serving; returns (exit code or None if it
    was still running when `stop_when` held or time ran out, its stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "netdp_node.cli",
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = asyncio.ensure_future(proc.stderr.read())
    exited = asyncio.ensure_future(proc.wait())
    code: int | None = None
    try:
        await until(lambda: exited.done() or stop_when(), timeout, f"netdp {args[0]} to exit")
        await asyncio.wait({exited}, timeout=0.5)  # a process that is about to exit
    except TimeoutError:
        pass
    if exited.done():
        code = exited.result()
    else:
        proc.kill()
        await exited
    return code, (await err).decode(errors="replace")


@pytest.mark.slow
async def test_a_node_certificate_at_the_bootstrap_address_gets_nothing(ca, tmp_path):
    """node-7 serves on the bootstrap's address: a starting node refuses to register with it (exit
    3, with the reason) and an operator's CLI call fails the same way; node-7 hears nothing."""
    fake = FakeBootstrap()
    server, port = await start_server(
        ident(ca, "node-7"), "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((fake,))
    )
    address = f"127.0.0.1:{port}"
    why = (
        f"refused the server at {address}: expected the bootstrap, the server's certificate "
        "does not name it"
    )
    try:
        code, err = await run_cli(
            "node",
            "--certs",
            str(ca / "node-4"),
            "--bootstrap",
            address,
            "--ledger",
            str(tmp_path / "ledger-4"),
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            "0.2",
            stop_when=lambda: bool(fake.calls),
            timeout=40,
        )
        assert fake.calls == [], f"the node called the impostor: {fake.calls}\n{err}"
        assert code == 3, err
        assert f"[node=node-4] {why} (every bootstrap certificate" in err, err
        assert f"netdp: security error: {why}" in err and "Traceback" not in err

        code, err = await run_cli(
            "job",
            "list",
            "--bootstrap",
            address,
            "--certs",
            str(ca / "operator"),
            stop_when=lambda: bool(fake.calls),
        )
        assert fake.calls == [] and code == 3, (fake.calls, code, err)
        assert f"netdp: security error: {why}" in err and "Traceback" not in err
    finally:
        await server.stop(0)


async def test_bootstrap_client_refuses_a_node_certificate_without_retrying(ca):
    fake = FakeBootstrap()
    server, port = await start_server(
        ident(ca, "node-7"), "127.0.0.1:0", lambda s: s.add_generic_rpc_handlers((fake,))
    )
    # the default backoff retries an unreachable bootstrap for 30 s: the refusal must not wait
    client = BootstrapClient(f"127.0.0.1:{port}", ident(ca, "node-4"))
    try:
        with pytest.raises(ServerIdentityError, match="expected the bootstrap"):
            await asyncio.wait_for(client.register("node-4", "127.0.0.1:7601"), 10)
        assert fake.calls == []
    finally:
        await client.close()
        await server.stop(0)


# -- the start-time check: certificates without the identity names ------------------------------
def old_style_certificate(ca: Path, node_id: str, role: str) -> Path:
    """A certificate as netdp issued it before identity names: CN, URI, 127.0.0.1 and localhost."""
    ca_cert = x509.load_pem_x509_certificate((ca / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((ca / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(f"netdp://{role}/{node_id}"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = ca / node_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (folder / "key.pem").chmod(0o600)
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "ca.pem").write_bytes((ca / "ca.pem").read_bytes())
    return folder


@pytest.mark.slow  # three CLI processes
def test_daemons_refuse_to_start_with_a_certificate_without_identity_names(ca, tmp_path, nd):
    node = old_style_certificate(ca, "node-old", "node")
    boot = old_style_certificate(ca, "boot-old", "bootstrap")
    pki.load_identity(node)  # a valid certificate otherwise
    runs = {
        "node": nd.netdp(
            "node",
            "--certs",
            str(node),
            "--bootstrap",
            "127.0.0.1:9",
            "--ledger",
            str(tmp_path / "ledger"),
            "--listen",
            "127.0.0.1:0",
            timeout=30,
        ),
        "node --check": nd.netdp(
            "node",
            "--certs",
            str(node),
            "--bootstrap",
            "127.0.0.1:9",
            "--ledger",
            str(tmp_path / "ledger"),
            "--check",
            timeout=30,
        ),
        "bootstrap": nd.netdp(
            "bootstrap",
            "--certs",
            str(boot),
            "--state",
            str(tmp_path / "state"),
            "--listen",
            "127.0.0.1:0",
            timeout=30,
        ),
    }
    for what, r in runs.items():
        assert r.returncode == 2, (what, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr, (what, r.stderr)
        assert r.stderr.startswith("netdp: configuration error: the certificate in"), r.stderr
    assert "lacks the identity name node-old.node.netdp.invalid" in runs["node"].stderr
    assert "netdp pki issue CA_DIR node-old --role node --force" in runs["node"].stderr
    assert (
        "lacks the identity names boot-old.bootstrap.netdp.invalid, bootstrap.netdp.invalid"
        in runs["bootstrap"].stderr
    )
    assert not (tmp_path / "ledger").exists() and not (tmp_path / "state").exists()


def test_pki_setup_reissues_certificates_without_identity_names(ca):
    old_style_certificate(ca, "node-1", "node")
    made = pki.setup(ca, nodes=["node-1", "node-2"])
    assert made == ["bootstrap", "node-1", "node-2"]  # the operator existed, with its names
    for name, role in (("node-1", "node"), ("node-2", "node"), ("bootstrap", "bootstrap")):
        identity = pki.load_identity(ca / name)
        pki.check_server_names(identity, ca / name)  # raises if a name is missing
        assert identity.role == role
    assert pki.setup(ca, nodes=["node-1", "node-2"]) == []  # idempotent


# -- addresses no longer matter -----------------------------------------------------------------
class NoAddressCluster(LocalCluster):
    """Every certificate names its identity only: no host, no IP, though everyone dials
    127.0.0.1."""

    def setup_pki(self) -> None:
        pki.init_ca(self.pki_dir, common_name="netdp demo CA")
        pki.issue(self.pki_dir, "operator", role="operator", hosts=())
        pki.issue(self.pki_dir, "bootstrap", role="bootstrap", hosts=())
        for nid in self.ids:
            pki.issue(self.pki_dir, nid, hosts=())


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_certificates_that_do_not_name_the_address_work(tmp_path, nd):
    cluster = NoAddressCluster(tmp_path / "cluster", 3, poll_interval=0.2)
    ok = False
    try:
        values = {nid: tmp_path / f"{nid}.txt" for nid in cluster.ids}
        for i, f in enumerate(values.values()):
            f.write_text(f"{0.1 * (i + 1)!r}\n")
        await asyncio.to_thread(cluster.start, values, None, 60.0)
        for nid in cluster.ids:
            san = x509.load_pem_x509_certificate((cluster.certs(nid) / "cert.pem").read_bytes())
            names = san.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert names.get_values_for_type(x509.IPAddress) == []
        client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
        try:
            job = await client.submit("ring-sum", {"rounds": 2}, participants=cluster.ids)
            results = await nd.wait_reports(client, job.job_id, cluster.ids, timeout=90)
        finally:
            await client.close()
        for nid, res in results.items():
            assert res.state == "done", (nid, res.state, res.detail)
        assert len({bytes(r.output.data) for r in results.values()}) == 1
        status = await nd.status(cluster.procs["node-1"].address, cluster.operator, "node-1")
        assert status.node_id == "node-1"
        ok = True
    finally:
        await asyncio.to_thread(cluster.stop)
        if not ok:
            for name, p in cluster.procs.items():
                sys.stderr.write(f"--- {name}\n{p.log_text()[-3000:]}\n")
