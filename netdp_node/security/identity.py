"""Who is on the other end of a connection, and whether their certificate was revoked.

Every netdp certificate carries its identity twice: the subject common name is the node id, and
the subject alternative name holds a URI ``netdp://<role>/<node id>`` (role is ``node``,
``bootstrap`` or ``operator``).

It also carries the identity as DNS names, which is what the *caller* checks. gRPC Python gives a
client no way to read the server's certificate, but it does verify the server's name, and the
channel option ``grpc.ssl_target_name_override`` sets the name to verify. So every certificate
holds :func:`identity_dns_name` ``<id>.<role>.netdp.invalid`` (``.invalid`` is reserved: it never
resolves, and nobody outside netdp can own it), a bootstrap certificate also :data:`BOOTSTRAP_NAME`
``bootstrap.netdp.invalid``, and every outgoing channel verifies the name of the identity it
means to reach, not the address it dials (:func:`server_names`). DNS names compare without regard
to case while node ids do not, so upper-case letters and ``_`` are escaped (``A`` -> ``_a``,
``_`` -> ``__``): two ids never share a name.

On the server side, the TLS layer (gRPC with mutual TLS) has already checked the caller's chain and
validity dates before any of this code runs, so :func:`identity_from_pem` only *reads* the identity
out of the peer's certificate; it is cached because the server calls it on every RPC with the PEM
from ``context.auth_context()["x509_pem_cert"][0]``.

:class:`RevocationList` is a verified, immutable view of the CA's CRL. TLS does not consult it, so
the transport checks ``is_revoked(peer.serial)`` itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from netdp_node.errors import SecurityError

__all__ = [
    "BOOTSTRAP_NAME",
    "NAME_DOMAIN",
    "NODE_ID_PATTERN",
    "ROLES",
    "URI_SCHEME",
    "PeerIdentity",
    "RevocationList",
    "identity_dns_name",
    "identity_from_pem",
    "identity_uri",
    "is_valid_node_id",
    "missing_server_names",
    "peer_name",
    "parse_identity_uri",
    "read_certificate_identity",
    "role_dns_name",
    "server_names",
]

ROLES: frozenset[str] = frozenset({"node", "bootstrap", "operator"})
"""The roles a certificate can carry (the host part of its ``netdp://`` URI)."""

NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
"""A node id: 1-63 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit."""

URI_SCHEME = "netdp://"

NAME_DOMAIN = "netdp.invalid"
"""The DNS domain of identity names (under ``.invalid``, reserved by RFC 2606: never resolves)."""


def is_valid_node_id(node_id: str) -> bool:
    """True if `node_id` can be used as a netdp node id."""
    return isinstance(node_id, str) and NODE_ID_PATTERN.fullmatch(node_id) is not None


def identity_uri(role: str, node_id: str) -> str:
    """The SAN URI that names `node_id` with `role`: ``netdp://<role>/<node_id>``."""
    return f"{URI_SCHEME}{role}/{node_id}"


def parse_identity_uri(uri: str) -> tuple[str, str] | None:
    """``(role, node_id)`` from a ``netdp://<role>/<node_id>`` URI, or None if it is not one."""
    if not uri.startswith(URI_SCHEME):
        return None
    parts = uri[len(URI_SCHEME) :].split("/")
    if len(parts) != 2:
        return None
    role, node_id = parts
    if role not in ROLES or not is_valid_node_id(node_id):
        return None
    return role, node_id


def _escape_label(node_id: str) -> str:
    """`node_id` with upper-case letters and ``_`` escaped (``A`` -> ``_a``, ``_`` -> ``__``), so
    that two ids that differ only in case (which DNS name comparison ignores) get different names.
    The result is lower-case, and decodes from the left uniquely: the map is injective."""
    out = []
    for ch in node_id:
        if ch == "_":
            out.append("__")
        elif "A" <= ch <= "Z":
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def identity_dns_name(role: str, node_id: str) -> str:
    """The DNS name a certificate of `node_id` with `role` carries and a caller verifies:
    ``<id>.<role>.netdp.invalid`` (the id escaped, see the module doc)."""
    return f"{_escape_label(node_id)}.{role}.{NAME_DOMAIN}"


def peer_name(node_id: str) -> str:
    """The name a node's certificate carries and its callers verify."""
    return identity_dns_name("node", node_id)


def role_dns_name(role: str) -> str:
    """The DNS name every certificate of `role` carries (used for the bootstrap only)."""
    return f"{role}.{NAME_DOMAIN}"


BOOTSTRAP_NAME = role_dns_name("bootstrap")
"""The name a node or operator verifies when it calls the bootstrap. Any bootstrap-role certificate
of the CA carries it: a node knows its bootstrap's address, not its id (``bootstrap`` from
``netdp pki setup``, ``netdp-bootstrap`` in deploy/k8s), and only the CA issues that role."""


def server_names(role: str, node_id: str) -> tuple[str, ...]:
    """The identity DNS names :func:`netdp_node.security.pki.issue` puts in a certificate."""
    names = (identity_dns_name(role, node_id),)
    return (*names, BOOTSTRAP_NAME) if role == "bootstrap" else names


def missing_server_names(cert: x509.Certificate, role: str, node_id: str) -> list[str]:
    """The identity DNS names (:func:`server_names`) that `cert` lacks; empty if it has them all.
    A certificate issued before netdp verified servers by identity lacks them."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {name.lower() for name in san.get_values_for_type(x509.DNSName)}
    except x509.ExtensionNotFound:
        have = set()
    return [name for name in server_names(role, node_id) if name.lower() not in have]


@dataclass(frozen=True)
class PeerIdentity:
    """The authenticated identity of a peer, as read from its (already verified) certificate."""

    node_id: str
    role: str
    serial: int
    not_after: datetime


def read_certificate_identity(
    cert: x509.Certificate, *, source: str = "certificate"
) -> PeerIdentity:
    """Read the netdp identity out of a parsed certificate.

    Raises SecurityError (mentioning `source`) if the certificate has no ``netdp://<role>/<id>``
    URI, has more than one, or its common name is not the same id.
    """
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    found = [parsed for parsed in map(parse_identity_uri, uris) if parsed is not None]
    if not found:
        raise SecurityError(
            f"{source} has no netdp identity: expected a subject alternative name URI "
            f"'netdp://<role>/<node id>' with role one of {sorted(ROLES)}; "
            "issue the certificate with the netdp CA (netdp_node.security.pki.issue)"
        )
    if len(set(found)) > 1:
        raise SecurityError(
            f"{source} names several netdp identities "
            f"{sorted(identity_uri(r, n) for r, n in found)}; a certificate must carry exactly one"
        )
    role, node_id = found[0]
    common_names = [attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if common_names != [node_id]:
        raise SecurityError(
            f"{source} is inconsistent: its URI names node {node_id!r} but its subject common "
            f"name is {common_names[0] if common_names else None!r}"
        )
    return PeerIdentity(
        node_id=node_id, role=role, serial=cert.serial_number, not_after=cert.not_valid_after_utc
    )


@functools.lru_cache(maxsize=4096)
def identity_from_pem(cert_pem: bytes) -> PeerIdentity:
    """The netdp identity in a PEM certificate (cached; failures are not cached).

    Meant for the peer certificate of an authenticated gRPC call::

        identity_from_pem(context.auth_context()["x509_pem_cert"][0])

    It does not check signatures or dates: the TLS handshake has done that.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise SecurityError(
            f"peer certificate is not a valid PEM X.509 certificate: {exc}"
        ) from exc
    return read_certificate_identity(cert, source="peer certificate")


@dataclass(frozen=True)
class RevocationList:
    """A verified certificate revocation list of the netdp CA.

    ``number`` is the CRL number (0 for the empty list), ``serials`` the revoked certificate
    serials, ``pem`` the signed CRL as received, kept so it can be passed on to other nodes
    unchanged, ``next_update`` the date the CA promised a newer list by (informational).
    """

    number: int
    serials: frozenset[int]
    pem: bytes = field(default=b"", repr=False)
    next_update: datetime | None = None

    @classmethod
    def empty(cls) -> RevocationList:
        """The list that revokes nothing; older than any CRL the CA signs."""
        return cls(number=0, serials=frozenset(), pem=b"", next_update=None)

    @classmethod
    def from_pem(cls, crl_pem: bytes, ca_pem: bytes) -> RevocationList:
        """Parse `crl_pem` and verify that the CA in `ca_pem` signed it.

        Raises SecurityError if either does not parse, the CRL was issued by another CA, its
        signature is invalid, or it has no CRL number.
        """
        try:
            crl = x509.load_pem_x509_crl(crl_pem)
        except ValueError as exc:
            raise SecurityError(f"revocation list is not a valid PEM X.509 CRL: {exc}") from exc
        try:
            ca = x509.load_pem_x509_certificate(ca_pem)
        except ValueError as exc:
            raise SecurityError(
                f"CA certificate is not a valid PEM X.509 certificate: {exc}"
            ) from exc
        if crl.issuer != ca.subject:
            raise SecurityError(
                f"revocation list was issued by '{crl.issuer.rfc4514_string()}', "
                f"not by the CA '{ca.subject.rfc4514_string()}'; refusing it"
            )
        public_key = ca.public_key()
        if not isinstance(public_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
            raise SecurityError("CA certificate has an unsupported key type for verifying a CRL")
        try:
            valid = crl.is_signature_valid(public_key)
        except (InvalidSignature, TypeError, ValueError):
            valid = False
        if not valid:
            raise SecurityError(
                "revocation list signature does not verify against the CA certificate "
                f"'{ca.subject.rfc4514_string()}' (forged, corrupted, or from another CA with the "
                "same name); refusing it"
            )
        try:
            number = crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number
        except x509.ExtensionNotFound as exc:
            raise SecurityError("revocation list has no CRL number extension; refusing it") from exc
        return cls(
            number=number,
            serials=frozenset(revoked.serial_number for revoked in crl),
            pem=crl_pem,
            next_update=crl.next_update_utc,
        )

    def is_revoked(self, serial: int) -> bool:
        """True if the certificate with this serial number is revoked."""
        return serial in self.serials

    def newer_than(self, other: RevocationList) -> bool:
        """True if this list supersedes `other` (a strictly higher CRL number)."""
        return self.number > other.number
