"""Mutual TLS over gRPC, shared by the node daemon and the bootstrap service: credentials from an
`Identity` (netdp_node.security.pki), channels that verify the identity of the server they reach,
the caller's identity and access policy on the server side, and `start_server` (an mTLS-only
grpc.aio server: there is no insecure port and no fallback).

Every outgoing channel verifies that the server's certificate names the identity the caller means
to reach (`secure_channel`'s `server_name`: an identity DNS name, netdp_node.security.identity), not
the address it dials; `wrong_server` tells that failure from a server that is down.

`server_certificate` reads the certificate a server presents, which grpc Python never shows a
caller: the transport checks it against the revocation list before it opens a link's stream.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from cryptography import x509

from netdp_node.errors import ConfigError, SecurityError
from netdp_node.limits import MAX_MESSAGE_BYTES
from netdp_node.security.identity import PeerIdentity, identity_from_pem, read_certificate_identity
from netdp_node.security.pki import Identity

log = logging.getLogger("netdp.grpc")

# No bandwidth-delay-product probing: on data received, grpc's BDP estimator sends a PING (and
# the peer its ACK) to size the flow-control window, every 0.1 s or more on a young connection;
# netdp's messages are small and a link lives for seconds (idle links close), so the probes cost
# CPU in grpc's threads at both ends (about 25 us per token hop of a walk, 283 -> 258 us,
# benchmarks/compare_hop.py) and buy nothing. The stream window is then the initial one, extended
# to each message as it is read: a message of the largest size allowed still arrives whole.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.http2.bdp_probe", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.http2.bdp_probe", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.so_reuseport", 0),
]


# -- credentials --------------------------------------------------------------------------------
def server_credentials(identity: Identity) -> grpc.ServerCredentials:
    """mTLS server credentials: the client must present a certificate signed by our CA."""
    return grpc.ssl_server_credentials(
        [(identity.key_pem, identity.cert_pem)],
        root_certificates=identity.ca_pem,
        require_client_auth=True,
    )


def channel_credentials(identity: Identity) -> grpc.ChannelCredentials:
    """mTLS client credentials: verify the server against our CA, present ours. (The name the
    server's certificate must carry is a channel option: see `secure_channel`.)"""
    return grpc.ssl_channel_credentials(
        root_certificates=identity.ca_pem,
        private_key=identity.key_pem,
        certificate_chain=identity.cert_pem,
    )


def secure_channel(
    address: str,
    identity: Identity,
    server_name: str,
    credentials: grpc.ChannelCredentials | None = None,
    options: dict[str, Any] | None = None,
) -> grpc.aio.Channel:
    """An mTLS channel to `address` that accepts only a server whose certificate carries the DNS
    name `server_name`: `peer_name(node_id)` for a node, `identity.BOOTSTRAP_NAME` for the
    bootstrap. TLS checks that name instead of the address (which need not be in the
    certificate). `credentials`: `channel_credentials(identity)` made once by a caller that opens
    many channels (else made here). `options`: channel options that replace those of
    CHANNEL_OPTIONS with the same name (or add to them)."""
    merged = dict(CHANNEL_OPTIONS) | (options or {})
    return grpc.aio.secure_channel(
        address,
        credentials if credentials is not None else channel_credentials(identity),
        options=[*merged.items(), ("grpc.ssl_target_name_override", server_name)],
    )


# What grpc reports when the server's certificate does not carry the name the channel verifies
# (grpcio >= 1.5x: "Hostname Verification Check failed"; older: "Peer name X is not in peer
# certificate"). The call fails UNAVAILABLE, like a server that is down, so only the text tells.
_NAME_MISMATCH = ("Hostname Verification Check failed", "is not in peer certificate")


def wrong_server(e: BaseException) -> bool:
    """True if `e` is a call that failed because the server's certificate does not name the
    identity the channel expected (someone else answers at that address)."""
    if not isinstance(e, grpc.aio.AioRpcError) or e.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = e.details() or ""
    return any(text in details for text in _NAME_MISMATCH)


# -- the server's certificate, as a caller sees it --------------------------------------------------
class WrongServer(ConnectionError):
    """The server at an address does not present a certificate naming the identity expected."""


def probe_context(identity: Identity) -> ssl.SSLContext:
    """A TLS client context for `server_certificate`: trusts our CA only, verifies the server's
    name, presents this identity's certificate (the server requires one), offers HTTP/2 as grpc
    does. Made once per transport. The ssl module loads a key from a file only: the PEMs are
    written to a private temporary directory (mode 0700) and removed at once."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=identity.ca_pem.decode("ascii"))
    import tempfile  # lazy: start-up cost (a probe is rare: a server that may be the wrong one)

    with tempfile.TemporaryDirectory(prefix="netdp-probe-") as tmp:
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(identity.key_pem)
        with open(cert, "wb") as f:
            f.write(identity.cert_pem)
        ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    return ctx


async def server_certificate(
    address: str, server_name: str, context: ssl.SSLContext, timeout: float = 10.0
) -> PeerIdentity:
    """The identity (with its serial) in the certificate the server at `address` presents, read
    from a TLS handshake of our own (grpc Python gives a caller no access to the certificate of its
    channel). The chain is verified against our CA and the certificate must carry `server_name`
    (else `WrongServer`); no request is sent. Connection failures raise OSError/TimeoutError."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context, server_hostname=server_name),
            timeout,
        )
    except ssl.SSLCertVerificationError as e:
        raise WrongServer(f"{address}: {e.verify_message or e}") from e
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.transport.abort()  # no TLS close_notify exchange: the server speaks HTTP/2 first
    if not der:
        raise WrongServer(f"{address}: the server presented no certificate")
    try:
        return read_certificate_identity(
            x509.load_der_x509_certificate(der), source=f"the certificate of {address}"
        )
    except (ValueError, SecurityError) as e:
        raise WrongServer(f"{address}: {e}") from e


# -- caller identity ----------------------------------------------------------------------------
class Unauthorized(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def caller_identity(context: grpc.aio.ServicerContext) -> PeerIdentity:
    """The verified identity of the caller, from the certificate of the TLS session."""
    auth = context.auth_context()
    pems = list(auth.get("x509_pem_cert") or [])
    if not pems:
        raise Unauthorized(grpc.StatusCode.UNAUTHENTICATED, "no client certificate")
    try:
        return identity_from_pem(pems[0])
    except SecurityError as e:
        raise Unauthorized(
            grpc.StatusCode.UNAUTHENTICATED, f"unusable client certificate: {e}"
        ) from e


@dataclass
class AccessPolicy:
    """Who may call: a callable telling whether a certificate serial is revoked. `owner` names the
    refusing process in its log lines ("node=node-3", "bootstrap")."""

    is_revoked: Callable[[int], bool] = lambda serial: False
    owner: str = ""

    def check(
        self,
        context: grpc.aio.ServicerContext,
        roles: tuple[str, ...],
        what: str,
        logger: logging.Logger | logging.LoggerAdapter[Any] = log,
    ) -> PeerIdentity:
        tag = f"[{self.owner}] " if self.owner else ""
        try:
            who = caller_identity(context)
        except Unauthorized as e:
            logger.warning("%srefused %s from %s: %s", tag, what, context.peer(), e.reason)
            raise
        if self.is_revoked(who.serial):
            logger.warning(
                "%srefused %s from %s (%s): certificate serial %d is revoked",
                tag,
                what,
                who.node_id,
                context.peer(),
                who.serial,
            )
            raise Unauthorized(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the certificate of {who.node_id} has been revoked",
            )
        if who.role not in roles:
            logger.warning(
                "%srefused %s from %s: role %s may not call it", tag, what, who.node_id, who.role
            )
            raise Unauthorized(
                grpc.StatusCode.PERMISSION_DENIED, f"a {who.role} certificate may not call {what}"
            )
        return who


# -- server ------------------------------------------------------------------------------------
async def start_server(
    identity: Identity, listen: str, add_services: Callable[[grpc.aio.Server], None]
) -> tuple[grpc.aio.Server, int]:
    """Start a grpc.aio server with mTLS only (no insecure port). Returns (server, bound port)."""
    # a taken or foreign address: say so in one line (grpc's core would log its own error first)
    problem = _bind_problem(listen)
    if problem:
        raise ConfigError(f"cannot listen on {listen}: {problem} (--listen)")
    server = grpc.aio.server(options=SERVER_OPTIONS)
    add_services(server)
    try:
        port = server.add_secure_port(listen, server_credentials(identity))
    except RuntimeError:  # grpc: "Failed to bind to address ..." (older versions return 0)
        port = 0
    if port == 0:
        why = _bind_problem(listen) or "grpc could not bind it"
        raise ConfigError(f"cannot listen on {listen}: {why} (--listen)")
    await server.start()
    return server, port


def _bind_problem(listen: str) -> str:
    """Why `listen` cannot be bound ("" if it can), from the OS: address in use, or not an address
    of this host. Binds as grpc does (SO_REUSEADDR: a port whose old connections linger in
    TIME_WAIT can be bound) and releases it at once."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, ValueError) as e:
        return f"cannot resolve {host!r}: {e}"
    for family, kind, proto, _, addr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "the address is already in use (another process listens on it)"
            return os.strerror(e.errno) if e.errno else str(e)
    return ""
