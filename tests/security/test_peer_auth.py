"""Peer authentication against real daemons: who may talk to a node, and to the bootstrap.

A bootstrap and 5 node processes run a 200-round ring sum. Once the token has reached node-4, node-2
is frozen (SIGSTOP) so the job is provably still running at every node while the attacks arrive;
it is thawed at the end and the job must still complete with every node agreeing.

Attacks on node-4, whose ring predecessor is node-3:
  (a) no client certificate, (b) a certificate of another CA, (c) an expired certificate of the
      right CA: the TLS handshake fails (gRPC reports UNAVAILABLE to the client);
  (d) a valid certificate whose id is not in the job, (e) a participant that is not the
      predecessor: PERMISSION_DENIED from the node, with a log line;
  (f) node-2's certificate registering as node-3 at the bootstrap: PERMISSION_DENIED, logged.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.security import pki

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ROUNDS = 200
JOB = "auth-ring"
TARGET = "node-4"  # attacked node
PRED = "node-3"  # its ring predecessor
FROZEN = "node-2"  # holds the token while the attacks arrive


@dataclass
class Running:
    cluster: LocalCluster
    job_id: str
    tmp: Path

    @property
    def target(self) -> str:
        return self.cluster.procs[TARGET].address

    def log_has(self, proc: str, text: str) -> bool:
        return text in self.cluster.procs[proc].log_text()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(module_clusters, nd, tmp_path_factory):
    cluster = module_clusters(5, values=[0.1, 0.2, 0.3, 0.4, 0.5])
    op = cluster.operator
    client = BootstrapClient(cluster.bootstrap_address, op)
    try:
        job = await client.submit(
            "ring-sum", {"rounds": ROUNDS}, participants=cluster.ids, job_id=JOB
        )
    finally:
        await client.close()
    assert [p.node_id for p in job.participants] == cluster.ids  # ring order node-1 .. node-5

    async def target_progressed() -> bool:
        st = await nd.job_status(cluster.procs[TARGET].address, op, JOB)
        return st is not None and st.state == "running" and st.progress >= 1

    await nd.await_until(target_progressed, 30, f"{TARGET} to take part in {JOB}")
    cluster.procs[FROZEN].popen.send_signal(signal.SIGSTOP)  # thawed by the last test / finalizer
    yield Running(cluster, JOB, tmp_path_factory.mktemp("attackers"))


async def assert_still_running(r: Running, nd) -> None:
    st = await nd.job_status(r.target, r.cluster.operator, r.job_id)
    assert st is not None and st.state == "running", st


def received_from(r: Running, nd, sender: str) -> list:
    return [
        e
        for e in nd.entries(r.cluster.ledger(TARGET), r.job_id)
        if e.direction == "received" and e.peer == sender
    ]


def token(r: Running, nd, seq: int = 1) -> bytes:
    return nd.envelope(r.job_id, "token", seq=seq, payload=[0.5]).SerializeToString()


# -- (a)-(c): the TLS handshake refuses ---------------------------------------------------------
def tls_client(ca_pem: bytes, folder: Path | None) -> grpc.ChannelCredentials:
    if folder is None:
        return grpc.ssl_channel_credentials(root_certificates=ca_pem)
    return grpc.ssl_channel_credentials(
        root_certificates=ca_pem,
        private_key=(folder / "key.pem").read_bytes(),
        certificate_chain=(folder / "cert.pem").read_bytes(),
    )


async def assert_handshake_refused(
    r: Running, nd, creds: grpc.ChannelCredentials, reason: str
) -> None:
    before = r.cluster.procs[TARGET].log_text().count(reason)
    code, details = await nd.deliver_code(r.target, creds, token(r, nd))
    # grpcio reports a handshake the server refused as UNAVAILABLE; the servicer never runs.
    assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
    # gRPC core at the node logs why it refused the handshake (an INFO line of
    # ssl_transport_security.cc; GRPC_VERBOSITY=ERROR/NONE in the environment would hide it).
    nd.wait_until(
        lambda: r.cluster.procs[TARGET].log_text().count(reason) > before,
        5,
        f"{TARGET} to log the refused handshake ({reason})",
    )
    await assert_still_running(r, nd)


@pytest.mark.timeout(90)
async def test_control_the_real_predecessor_gets_past_tls(running, nd):
    """The same client code with the real node-3 certificate reaches the node: the refusals below
    come from the server's TLS checks, not from the test's channel. (Its token for round 1
    conflicts with the one node-4 stored, so the node refuses it.)"""
    ca = (running.cluster.pki_dir / "ca.pem").read_bytes()
    creds = tls_client(ca, running.cluster.certs(PRED))
    code, details = await nd.deliver_code(running.target, creds, token(running, nd, seq=1))
    assert code == grpc.StatusCode.ALREADY_EXISTS, (code, details)


@pytest.mark.timeout(30)
async def test_a_no_client_certificate(running, nd):
    ca = (running.cluster.pki_dir / "ca.pem").read_bytes()
    await assert_handshake_refused(
        running, nd, tls_client(ca, None), "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    )


@pytest.mark.timeout(30)
async def test_b_certificate_of_another_ca(running, nd):
    other = running.tmp / "other-ca"
    pki.init_ca(other, common_name="netdp demo CA")  # same name as the real CA, other key
    folder = pki.issue(other, PRED)  # claims to be the true predecessor
    ca = (running.cluster.pki_dir / "ca.pem").read_bytes()
    await assert_handshake_refused(
        running, nd, tls_client(ca, folder), "unable to get local issuer certificate"
    )


@pytest.mark.timeout(30)
async def test_c_expired_certificate_of_the_right_ca(running, nd):
    now = datetime.now(timezone.utc)
    folder = pki.issue(
        running.cluster.pki_dir,
        PRED,
        not_before=now - timedelta(days=10),
        not_after=now - timedelta(days=1),
        out_dir=running.tmp / "expired",
        force=True,
    )
    ca = (running.cluster.pki_dir / "ca.pem").read_bytes()
    await assert_handshake_refused(running, nd, tls_client(ca, folder), "certificate has expired")


# -- (d), (e): the node refuses -----------------------------------------------------------------
@pytest.mark.timeout(30)
async def test_d_valid_certificate_not_in_the_topology(running, nd):
    cluster = running.cluster
    pki.issue(cluster.pki_dir, "intruder")  # issued after the job started
    intruder = pki.load_identity(cluster.certs("intruder"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await nd.deliver_raw(running.target, intruder, token(running, nd))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
    assert "not a participant" in err.value.details()
    line = f"refused token from intruder: intruder is not a participant of job {JOB}"
    nd.wait_until(lambda: running.log_has(TARGET, line), 5, f"{TARGET} to log {line!r}")
    assert received_from(running, nd, "intruder") == []
    await assert_still_running(running, nd)


@pytest.mark.timeout(30)
async def test_e_participant_that_is_not_the_predecessor(running, nd):
    cluster = running.cluster
    node1 = pki.load_identity(cluster.certs("node-1"))  # a participant, not node-4's predecessor
    before = len(received_from(running, nd, "node-1"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await nd.deliver_raw(running.target, node1, token(running, nd, seq=2))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
    assert f"only {PRED}" in err.value.details()
    line = f"refused token from node-1: only {PRED} (the ring predecessor of {TARGET})"
    nd.wait_until(lambda: running.log_has(TARGET, line), 5, f"{TARGET} to log {line!r}")
    assert before == 0 and received_from(running, nd, "node-1") == []
    await assert_still_running(running, nd)


# -- (f): the bootstrap refuses -----------------------------------------------------------------
@pytest.mark.timeout(30)
async def test_f_register_under_another_nodes_id(running, nd):
    cluster = running.cluster
    real = cluster.procs["node-3"].address
    node2 = BootstrapClient(cluster.bootstrap_address, pki.load_identity(cluster.certs("node-2")))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node2.register("node-3", "127.0.0.1:9")
    finally:
        await node2.close()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
    line = "refused registration of 'node-3' by node-2: a node may only register its own id"
    nd.wait_until(lambda: running.log_has("bootstrap", line), 5, f"bootstrap to log {line!r}")
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    try:
        nodes = {n.node_id: n.address for n in await op.list_nodes()}
    finally:
        await op.close()
    assert nodes["node-3"] == real  # the registry was not changed


# -- and the job still completes ----------------------------------------------------------------
@pytest.mark.timeout(90)
async def test_job_completes_after_the_attacks(running, nd):
    cluster = running.cluster
    await assert_still_running(running, nd)
    cluster.procs[FROZEN].popen.send_signal(signal.SIGCONT)
    client = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    try:
        results = await nd.wait_reports(client, JOB, cluster.ids, timeout=75)
    finally:
        await client.close()
    for nid, res in results.items():
        assert res.state == "done" and res.contributions == ROUNDS, (nid, res.state, res.detail)
    outputs = {bytes(res.output.data) for res in results.values()}
    assert len(outputs) == 1, "participants released different values"
    # node-4 only ever accepted tokens (and the release) from its predecessor.
    peers = {e.peer for e in nd.entries(cluster.ledger(TARGET), JOB) if e.direction == "received"}
    assert peers == {PRED}
