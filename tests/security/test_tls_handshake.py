"""Real mutual-TLS handshakes between a grpc.aio server and client using certificates from pki.

No netdp daemon is involved: a bare grpc.aio server with a generic handler answers the caller's
node id, read from ``context.auth_context()["x509_pem_cert"][0]`` with identity_from_pem. Each
failure case gets its own certificate folder, issued once per module.

What gRPC (grpcio 1.85) really reports: every refused handshake, whichever side refuses, surfaces at
the client as ``StatusCode.UNAVAILABLE`` ("failed to connect to all addresses; ..."); the handler is
never reached. When the *server* refuses (no/foreign/expired client certificate) the client only
sees "Socket closed"; when the *client* refuses (expired server certificate, wrong host name,
unusable own key) the details carry the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import grpc.aio
import pytest

from netdp_node.security import (
    PeerIdentity,
    RevocationList,
    identity_from_pem,
    init_ca,
    issue,
    load_crl,
    revoke,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

SERVICE = "netdp.test.Echo"
METHOD = "WhoAmI"
CALL_TIMEOUT = 10.0


@dataclass(frozen=True)
class Pki:
    ca: Path  # the deployment's CA directory
    other_ca: Path  # an unrelated CA with the same common name

    def folder(self, name: str) -> Path:
        return self.ca / name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("tls")
    ca, other = root / "ca", root / "other-ca"
    init_ca(ca)
    init_ca(other)  # same CN "netdp CA": only the key differs
    now = datetime.now(timezone.utc)
    expired = {"not_before": now - timedelta(days=10), "not_after": now - timedelta(days=1)}

    issue(ca, "server")
    issue(ca, "client")
    issue(ca, "expired-client", **expired)
    issue(ca, "expired-server", **expired)
    issue(ca, "otherhost-server", hosts=("otherhost",))
    issue(ca, "revoked-client")
    revoke(ca, "revoked-client")
    # A valid certificate paired with somebody else's private key.
    issue(ca, "mismatched-key")
    issue(ca, "spare")
    shutil.copy(ca / "spare" / "key.pem", ca / "mismatched-key" / "key.pem")
    # Same node id as the real client, but issued by the other CA.
    issue(other, "client")
    return Pki(ca=ca, other_ca=other)


@dataclass
class Running:
    port: int
    calls: list[PeerIdentity] = field(default_factory=list)


@contextlib.asynccontextmanager
async def serving(folder: Path, crl: RevocationList | None = None) -> AsyncIterator[Running]:
    """A grpc.aio mTLS server with the identity in `folder`; always stopped on exit."""
    running = Running(port=0)

    async def who_am_i(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        peer = identity_from_pem(context.auth_context()["x509_pem_cert"][0])
        running.calls.append(peer)
        if crl is not None and crl.is_revoked(peer.serial):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"certificate of {peer.node_id} is revoked"
            )
        return peer.node_id.encode()

    # No (de)serializers: requests and responses are raw bytes.
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(who_am_i)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    credentials = grpc.ssl_server_credentials(
        [((folder / "key.pem").read_bytes(), (folder / "cert.pem").read_bytes())],
        root_certificates=(folder / "ca.pem").read_bytes(),
        require_client_auth=True,
    )
    try:
        running.port = server.add_secure_port("127.0.0.1:0", credentials)
        assert running.port != 0
        await server.start()
        yield running
    finally:
        await server.stop(None)


def client_credentials(folder: Path | None, ca_pem: bytes) -> grpc.ChannelCredentials:
    if folder is None:
        return grpc.ssl_channel_credentials(root_certificates=ca_pem)
    return grpc.ssl_channel_credentials(
        root_certificates=ca_pem,
        private_key=(folder / "key.pem").read_bytes(),
        certificate_chain=(folder / "cert.pem").read_bytes(),
    )


async def call(
    port: int,
    credentials: grpc.ChannelCredentials,
    *,
    host: str = "127.0.0.1",
) -> bytes:
    async with grpc.aio.secure_channel(f"{host}:{port}", credentials) as channel:
        method = channel.unary_unary(f"/{SERVICE}/{METHOD}")
        response = await method(b"", timeout=CALL_TIMEOUT)
        assert isinstance(response, bytes)
        return response


async def refused(port: int, credentials: grpc.ChannelCredentials) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(port, credentials)
    return info.value


# --------------------------------------------------------------------------------------------------
# accepted


async def test_valid_client_gets_its_own_id(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        response = await call(server.port, client_credentials(pki.folder("client"), ca_pem))
    assert response == b"client"
    assert [(p.node_id, p.role) for p in server.calls] == [("client", "node")]


async def test_dns_name_san_is_accepted(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        response = await call(
            server.port, client_credentials(pki.folder("client"), ca_pem), host="localhost"
        )
    assert response == b"client"


async def test_revoked_client_passes_tls_and_must_be_refused_by_the_crl_check(pki: Pki) -> None:
    """TLS does not consult the CRL: the application has to (here: the handler)."""
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    crl = load_crl(pki.ca)
    async with serving(pki.folder("server"), crl=crl) as server:
        error = await refused(server.port, client_credentials(pki.folder("revoked-client"), ca_pem))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert [p.node_id for p in server.calls] == ["revoked-client"]


# --------------------------------------------------------------------------------------------------
# refused by the server


async def test_no_client_certificate_is_refused(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        error = await refused(server.port, client_credentials(None, ca_pem))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert server.calls == []


async def test_client_certificate_from_another_ca_is_refused(pki: Pki) -> None:
    # The foreign client trusts our CA (so it would accept our server) but its own certificate
    # comes from the other CA, which has the same name.
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        error = await refused(server.port, client_credentials(pki.other_ca / "client", ca_pem))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert server.calls == []


async def test_expired_client_certificate_is_refused(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        error = await refused(server.port, client_credentials(pki.folder("expired-client"), ca_pem))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert server.calls == []


# --------------------------------------------------------------------------------------------------
# refused by the client


async def test_expired_server_certificate_is_refused_by_the_client(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("expired-server")) as server:
        error = await refused(server.port, client_credentials(pki.folder("client"), ca_pem))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "expired" in (error.details() or "")
    assert server.calls == []


async def test_server_name_mismatch_is_refused_by_the_client(pki: Pki) -> None:
    # The server certificate names only "otherhost"; the client dials 127.0.0.1.
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("otherhost-server")) as server:
        error = await refused(server.port, client_credentials(pki.folder("client"), ca_pem))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "Hostname Verification" in (error.details() or "")
    assert server.calls == []


async def test_client_key_not_matching_its_certificate_fails(pki: Pki) -> None:
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    async with serving(pki.folder("server")) as server:
        try:
            credentials = client_credentials(pki.folder("mismatched-key"), ca_pem)
        except Exception:  # noqa: BLE001 - some gRPC versions may check the pair up front
            return
        # grpcio 1.85 accepts the pair here and fails when building the TLS handshaker.
        error = await refused(server.port, credentials)
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert server.calls == []


# --------------------------------------------------------------------------------------------------
# logging of refused handshakes


@pytest.mark.skipif(
    os.environ.get("GRPC_VERBOSITY", "").upper() in {"ERROR", "WARNING", "NONE"},
    reason="gRPC logs refused handshakes at INFO level; GRPC_VERBOSITY hides them",
)
async def test_server_side_refusal_is_written_to_stderr(
    pki: Pki, capfd: pytest.CaptureFixture[str]
) -> None:
    """gRPC core (not Python logging) writes one INFO line to fd 2 per refused handshake.

    In a two-process experiment only the server wrote this line for a foreign client certificate;
    the client wrote nothing. It names the reason but not the peer address.
    """
    ca_pem = (pki.ca / "ca.pem").read_bytes()
    capfd.readouterr()
    text = ""
    async with serving(pki.folder("server")) as server:
        error = await refused(server.port, client_credentials(pki.other_ca / "client", ca_pem))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        for _ in range(40):
            text += capfd.readouterr().err
            if "Handshake failed" in text:
                break
            await asyncio.sleep(0.05)
    assert "Handshake failed" in text
    assert "CERTIFICATE_VERIFY_FAILED" in text
