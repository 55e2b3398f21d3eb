"""A small certificate authority on disk, and loading a node's identity folder.

CA directory layout (created by :func:`init_ca`)::

    ca.pem        the CA certificate (ECDSA P-256, self-signed)
    ca.key        the CA private key (mode 0600; keep it off the nodes)
    crl.pem       the current certificate revocation list, signed by the CA
    index.json    every certificate issued: id, role, serial, hosts, validity, revoked flag
    <node id>/    identity folders written by :func:`issue` (unless ``out_dir`` is given)
    hosts/<host>/<node id>/
                  copies of the identity folders of the nodes one host process runs, one folder
                  per host (:func:`lay_out_hosts`): what that host mounts, and nothing else

Identity folder layout (what a node needs, read by :func:`load_identity`)::

    ca.pem        the CA certificate (the trust root)
    cert.pem      the node's certificate
    key.pem       the node's private key (mode 0600)

Certificates carry the node id as subject CN and as a SAN URI ``netdp://<role>/<node id>``, its
identity DNS names (``<id>.<role>.netdp.invalid``, and ``bootstrap.netdp.invalid`` for the
bootstrap: what a netdp caller verifies, see :mod:`netdp_node.security.identity`), plus a DNS name
or IP address SAN for each host it is reachable at, if any (for other TLS clients: netdp itself
never checks addresses, which may change while the identity may not). They are valid for both TLS
server and client authentication, so one certificate serves both ends of mutual TLS.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Union

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from netdp_node.errors import ConfigError, SecurityError
from netdp_node.security.identity import (
    NAME_DOMAIN,
    NODE_ID_PATTERN,
    ROLES,
    RevocationList,
    identity_uri,
    is_valid_node_id,
    missing_server_names,
    read_certificate_identity,
    server_names,
)

__all__ = [
    "CA_CERT_FILE",
    "CA_KEY_FILE",
    "CERT_FILE",
    "CRL_FILE",
    "HOSTS_DIR",
    "INDEX_FILE",
    "KEY_FILE",
    "Identity",
    "check_server_names",
    "host_groups",
    "init_ca",
    "Request",
    "issue",
    "issue_many",
    "lay_out_hosts",
    "load_crl",
    "load_identity",
    "read_index",
    "revoke",
    "revoked_ids",
]

StrPath = Union[str, "os.PathLike[str]"]

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
CRL_FILE = "crl.pem"
INDEX_FILE = "index.json"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"

INDEX_VERSION = 1
CRL_VALIDITY = timedelta(days=3650)
CLOCK_SKEW = timedelta(minutes=5)  # certificates start this long before "now"
HOSTS_DIR = "hosts"
_RESERVED_NAMES = frozenset({CA_CERT_FILE, CA_KEY_FILE, CRL_FILE, INDEX_FILE, HOSTS_DIR})
_HOSTNAME = re.compile(
    r"^(?=.{1,253}\.?$)(\*\.)?[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)


@dataclass(frozen=True)
class Identity:
    """A node's own validated credentials, ready for ``grpc.ssl_*_credentials``."""

    node_id: str
    role: str
    cert_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)  # never in repr: identities end up in logs
    ca_pem: bytes = field(repr=False)
    serial: int
    not_after: datetime


# --------------------------------------------------------------------------------------------------
# helpers


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _stage(path: Path, data: bytes, mode: int) -> tuple[str, Path, int]:
    """Write `data` to a temporary file beside `path` (not yet synced nor in place)."""
    import tempfile  # lazy: start-up cost (a node writes no CA file)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        _discard([(tmp, path, mode)])
        raise
    return tmp, path, mode


def _discard(staged: Iterable[tuple[str, Path, int]]) -> None:
    for tmp, _, _ in staged:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _commit(staged: list[tuple[str, Path, int]]) -> None:
    """fsync every staged file, then move each in place: a crash leaves each target either as it
    was or complete. Syncing a batch after writing it all costs about one journal commit, not one
    per file (`issue_many`)."""
    try:
        for tmp, _, _ in staged:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        _discard(staged)
        raise
    for tmp, path, mode in staged:
        os.replace(tmp, path)
        os.chmod(path, mode)


def _write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` via a synced temporary file in the same directory (with `mode`)."""
    _commit([_stage(path, data, mode)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _public_der(key: Any) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _check_node_id(node_id: str) -> None:
    if not is_valid_node_id(node_id):
        raise ConfigError(
            f"invalid node id {node_id!r}: use 1-63 characters, letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (pattern {NODE_ID_PATTERN.pattern})"
        )


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ConfigError(f"invalid role {role!r}: must be one of {sorted(ROLES)}")


def _san_hosts(hosts: Iterable[str]) -> tuple[list[str], list[x509.GeneralName]]:
    """Normalised host strings and their SAN entries (IPAddress for IPs, DNSName otherwise)."""
    if isinstance(hosts, str):
        raise ConfigError(f"hosts must be a list of host names or IPs, not the string {hosts!r}")
    names: list[str] = []
    entries: list[x509.GeneralName] = []
    for raw in hosts:
        host = str(raw).strip()
        if host.startswith("[") and host.endswith("]"):  # "[::1]"
            host = host[1:-1]
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            if not _HOSTNAME.fullmatch(host):
                raise ConfigError(
                    f"invalid host {raw!r}: expected an IP address or a DNS name "
                    "(letters, digits, '-', '_' and dots)"
                ) from None
            host = host.lower()
            if host.rstrip(".") == "invalid" or host.rstrip(".").endswith(".invalid"):
                # a host such as *.node.netdp.invalid would let its holder pass for any node
                raise ConfigError(
                    f"invalid host {raw!r}: the .invalid domain is reserved (netdp puts the "
                    f"identity names, under {NAME_DOMAIN}, into every certificate itself)"
                ) from None
            entry: x509.GeneralName = x509.DNSName(host)
        else:
            host = str(ip)
            entry = x509.IPAddress(ip)
        if host not in names:
            names.append(host)
            entries.append(entry)
    return names, entries


def _empty_index() -> dict[str, Any]:
    return {"version": INDEX_VERSION, "certificates": []}


def read_index(directory: StrPath) -> dict[str, Any]:
    """The CA's ``index.json``: ``{"version": 1, "certificates": [{"id", "role", ...}, ...]}``.

    Each certificate entry has ``id``, ``role``, ``serial`` (decimal string), ``hosts``,
    ``issued_at``, ``not_before``, ``not_after`` (ISO 8601, UTC), ``revoked`` and ``revoked_at``.
    """
    path = Path(directory) / INDEX_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SecurityError(
            f"{path} is missing: {directory} is not a netdp CA directory (create one with init_ca)"
        ) from None
    except (OSError, ValueError) as exc:
        raise SecurityError(f"{path} cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("certificates"), list):
        raise SecurityError(f"{path} is not a netdp certificate index (no 'certificates' list)")
    return data


def _write_index(directory: Path, index: dict[str, Any]) -> None:
    text = json.dumps(index, indent=2, sort_keys=True) + "\n"
    _write_atomic(directory / INDEX_FILE, text.encode("utf-8"), mode=0o644)


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    missing = [str(p) for p in (cert_path, key_path) if not p.is_file()]
    if missing:
        raise SecurityError(
            f"no CA in {directory}: missing {', '.join(missing)} (create one with init_ca)"
        )
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except ValueError as exc:
        raise SecurityError(f"{cert_path} is not a PEM X.509 certificate: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise SecurityError(f"{key_path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SecurityError(f"{key_path} is not an ECDSA key")
    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        raise SecurityError(f"{key_path} does not match the CA certificate {cert_path}")
    return cert, key


def _build_crl(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    number: int,
    revoked: Sequence[tuple[int, datetime]],
) -> bytes:
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now)
        .next_update(now + CRL_VALIDITY)
        .add_extension(x509.CRLNumber(number), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    for serial, revoked_at in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(serial)
            .revocation_date(revoked_at)
            .build()
        )
    crl = builder.sign(ca_key, hashes.SHA256())
    return crl.public_bytes(serialization.Encoding.PEM)


# --------------------------------------------------------------------------------------------------
# the CA


def init_ca(
    directory: StrPath,
    *,
    common_name: str = "netdp CA",
    days: int = 3650,
    force: bool = False,
) -> Path:
    """Create a CA in `directory`: ``ca.pem``, ``ca.key`` (0600), an empty ``crl.pem`` (number 1)
    and an empty ``index.json``. Returns the path of ``ca.pem``.

    Refuses (SecurityError) if a CA already exists there, unless ``force=True``, which replaces it
    and starts a new, empty index (certificates of the old CA stop being trusted).
    """
    if days <= 0:
        raise ConfigError(f"CA validity must be at least one day, got days={days}")
    if not common_name:
        raise ConfigError("CA common name must not be empty")
    root = Path(directory)
    existing = [name for name in (CA_CERT_FILE, CA_KEY_FILE) if (root / name).exists()]
    if existing and not force:
        raise SecurityError(
            f"a CA already exists in {root} ({', '.join(existing)}); refusing to overwrite it "
            "(pass force=True to replace it: every certificate it issued stops being trusted)"
        )
    root.mkdir(parents=True, exist_ok=True)

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_atomic(root / CA_KEY_FILE, _key_pem(key), mode=0o600)
    _write_atomic(root / CA_CERT_FILE, _cert_pem(cert), mode=0o644)
    _write_atomic(root / CRL_FILE, _build_crl(cert, key, 1, []), mode=0o644)
    _write_index(root, _empty_index())
    return root / CA_CERT_FILE


def issue(
    directory: StrPath,
    node_id: str,
    *,
    hosts: Iterable[str] = ("127.0.0.1", "localhost"),
    role: str = "node",
    days: int = 365,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
    out_dir: StrPath | None = None,
    force: bool = False,
) -> Path:
    """Issue a certificate for `node_id` from the CA in `directory`; returns the identity folder.

    The folder (default ``directory/<node_id>/``) receives ``ca.pem``, ``cert.pem`` and ``key.pem``
    (0600). The certificate names the identity (CN, URI, identity DNS names: what netdp callers
    verify); `hosts` become extra DNS-name or IP-address SANs (optional: for other TLS clients).
    `not_before`/`not_after` override the validity window (default: now - 5 min .. now + `days`).
    Re-issuing an id that has a non-revoked certificate needs ``force=True`` (the old certificate
    stays valid until it expires or is revoked).
    """
    root = Path(directory)
    ca_cert, ca_key = _load_ca(root)
    index = read_index(root)
    staged: list[tuple[str, Path, int]] = []
    try:
        folder = _issue_into(
            root,
            ca_cert,
            ca_key,
            index,
            staged,
            node_id,
            hosts=hosts,
            role=role,
            days=days,
            not_before=not_before,
            not_after=not_after,
            out_dir=out_dir,
            force=force,
        )
    except BaseException:
        _discard(staged)
        raise
    _commit(staged)
    _write_index(root, index)
    return folder


@dataclass(frozen=True)
class Request:
    """One certificate for :func:`issue_many` (the arguments of :func:`issue`)."""

    node_id: str
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    role: str = "node"
    force: bool = False


def issue_many(directory: StrPath, requests: Iterable[Request], *, days: int = 365) -> list[Path]:
    """Issue several certificates as :func:`issue` does, reading the CA and its index once, syncing
    the files together and writing the index once: 1,000 identities cost seconds, not one index
    rewrite and four syncs each. All or nothing: a refused request issues none. Returns the
    identity folders, in order."""
    root = Path(directory)
    ca_cert, ca_key = _load_ca(root)
    index = read_index(root)
    staged: list[tuple[str, Path, int]] = []
    try:
        folders = [
            _issue_into(
                root,
                ca_cert,
                ca_key,
                index,
                staged,
                r.node_id,
                hosts=r.hosts,
                role=r.role,
                days=days,
                force=r.force,
            )
            for r in requests
        ]
    except BaseException:
        _discard(staged)
        raise
    _commit(staged)
    _write_index(root, index)
    return folders


def _issue_into(
    root: Path,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    index: dict[str, Any],
    staged: list[tuple[str, Path, int]],
    node_id: str,
    *,
    hosts: Iterable[str],
    role: str,
    days: int,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
    out_dir: StrPath | None = None,
    force: bool = False,
) -> Path:
    """Build one certificate, stage its files in `staged` and add it to `index` (written by the
    caller)."""
    _check_node_id(node_id)
    _check_role(role)
    host_names, host_entries = _san_hosts(hosts)

    active = [
        entry
        for entry in index["certificates"]
        if entry.get("id") == node_id and not entry.get("revoked", False)
    ]
    if active and not force:
        raise SecurityError(
            f"node id {node_id!r} already has a certificate that is not revoked "
            f"(serial {active[-1].get('serial')}); revoke it first or pass force=True to re-issue"
        )

    folder = Path(out_dir) if out_dir is not None else root / node_id
    if out_dir is None and node_id in _RESERVED_NAMES:
        raise ConfigError(
            f"node id {node_id!r} clashes with the CA's own file {root / node_id}; "
            "choose another id or pass out_dir"
        )
    if folder.exists() and not folder.is_dir():
        raise SecurityError(f"cannot write the identity folder {folder}: it exists and is a file")
    if not force:
        _check_overwrite(folder / CERT_FILE, ca_cert, index)

    now = _now()
    start = _utc(not_before) if not_before is not None else now - CLOCK_SKEW
    if not_after is not None:
        end = _utc(not_after)
    else:
        if days <= 0:
            raise ConfigError(f"certificate validity must be at least one day, got days={days}")
        end = now + timedelta(days=days)
    start, end = start.replace(microsecond=0), end.replace(microsecond=0)  # X.509 has whole seconds
    if end <= start:
        raise ConfigError(
            f"certificate would end ({end.isoformat()}) before it starts ({start.isoformat()})"
        )

    key = ec.generate_private_key(ec.SECP256R1())
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(identity_uri(role, node_id)),
                    *(x509.DNSName(name) for name in server_names(role, node_id)),
                    *host_entries,
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    folder.mkdir(parents=True, exist_ok=True)
    staged.append(_stage(folder / KEY_FILE, _key_pem(key), 0o600))
    staged.append(_stage(folder / CERT_FILE, _cert_pem(cert), 0o644))
    staged.append(_stage(folder / CA_CERT_FILE, _cert_pem(ca_cert), 0o644))

    index["certificates"].append(
        {
            "id": node_id,
            "role": role,
            "serial": str(serial),
            "hosts": host_names,
            "issued_at": now.isoformat(),
            "not_before": start.isoformat(),
            "not_after": end.isoformat(),
            "revoked": False,
            "revoked_at": None,
        }
    )
    return folder


def _check_overwrite(cert_path: Path, ca_cert: x509.Certificate, index: dict[str, Any]) -> None:
    """Refuse to overwrite `cert_path` if it holds a live (unrevoked) certificate of this CA.

    Certificates of a replaced CA (``init_ca(force=True)``), revoked ones and unreadable files may
    be overwritten.
    """
    if not cert_path.exists():
        return
    try:
        existing = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError):
        return
    if not _signed_by(existing, ca_cert):
        return
    revoked_serials = {
        entry.get("serial") for entry in index["certificates"] if entry.get("revoked", False)
    }
    if str(existing.serial_number) not in revoked_serials:
        raise SecurityError(
            f"{cert_path} already holds a live certificate of this CA "
            f"({existing.subject.rfc4514_string()}, serial {existing.serial_number}); refusing "
            "to overwrite it (revoke it first, choose another out_dir, or pass force=True)"
        )


def load_crl(directory: StrPath) -> RevocationList:
    """The CA's current ``crl.pem``, verified against its ``ca.pem``."""
    root = Path(directory)
    crl_path, ca_path = root / CRL_FILE, root / CA_CERT_FILE
    for path in (crl_path, ca_path):
        if not path.is_file():
            raise SecurityError(f"{path} is missing: {root} is not a netdp CA directory")
    return RevocationList.from_pem(crl_path.read_bytes(), ca_path.read_bytes())


def revoke(directory: StrPath, node_id: str) -> bytes:
    """Revoke every certificate of `node_id` and write a new ``crl.pem`` (CRL number + 1).

    Returns the new CRL (PEM), which lists every certificate revoked so far. Unknown id →
    SecurityError. Revoking an id whose certificates are all already revoked just re-signs the CRL.
    """
    root = Path(directory)
    ca_cert, ca_key = _load_ca(root)
    index = read_index(root)
    entries = [entry for entry in index["certificates"] if entry.get("id") == node_id]
    if not entries:
        raise SecurityError(
            f"no certificate was issued for node id {node_id!r} by the CA in {root}"
        )
    current = load_crl(root)

    now = _now()
    for entry in entries:
        if not entry.get("revoked", False):
            entry["revoked"] = True
            entry["revoked_at"] = now.isoformat()

    revoked: list[tuple[int, datetime]] = []
    for entry in index["certificates"]:
        if entry.get("revoked", False):
            when = entry.get("revoked_at")
            revoked.append((int(entry["serial"]), datetime.fromisoformat(when) if when else now))
    crl_pem = _build_crl(ca_cert, ca_key, current.number + 1, revoked)
    # Index first: if we crash before the CRL is written, running revoke again re-signs a CRL
    # with every revoked serial, so the two files converge.
    _write_index(root, index)
    _write_atomic(root / CRL_FILE, crl_pem, mode=0o644)
    return crl_pem


# --------------------------------------------------------------------------------------------------
# loading a node's identity


def load_identity(folder: StrPath, *, now: datetime | None = None) -> Identity:
    """Load and validate the identity folder `folder` (``ca.pem``, ``cert.pem``, ``key.pem``).

    Raises SecurityError, naming the file at fault, if a file is missing or unparsable, the key does
    not match the certificate, the certificate was not signed by the folder's ``ca.pem``, it is
    expired or not yet valid (at `now`, default the current time), or it carries no netdp identity.
    """
    root = Path(folder)
    ca_path, cert_path, key_path = root / CA_CERT_FILE, root / CERT_FILE, root / KEY_FILE
    missing = [p.name for p in (ca_path, cert_path, key_path) if not p.is_file()]
    if missing:
        raise SecurityError(
            f"identity folder {root} is incomplete: missing {', '.join(missing)} "
            f"(it needs {CA_CERT_FILE}, {CERT_FILE} and {KEY_FILE}, as written by pki.issue)"
        )
    ca_pem, cert_pem, key_pem = ca_path.read_bytes(), cert_path.read_bytes(), key_path.read_bytes()

    try:
        cas = x509.load_pem_x509_certificates(ca_pem)
    except ValueError as exc:
        raise SecurityError(f"{ca_path} is not a PEM X.509 certificate: {exc}") from exc
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise SecurityError(f"{cert_path} is not a PEM X.509 certificate: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SecurityError(f"{key_path} is not an unencrypted PEM private key: {exc}") from exc

    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        raise SecurityError(
            f"{key_path} does not match {cert_path}: the private key belongs to another "
            "certificate (re-issue the identity, or put the matching key.pem back)"
        )

    if not any(_signed_by(cert, ca) for ca in cas):
        subjects = ", ".join(f"'{ca.subject.rfc4514_string()}'" for ca in cas)
        raise SecurityError(
            f"{cert_path} (issuer '{cert.issuer.rfc4514_string()}') is not signed by the CA in "
            f"{ca_path} ({subjects}): the certificate comes from another CA, or ca.pem is the "
            "wrong file; copy the issuing CA's ca.pem into the folder or re-issue the certificate"
        )

    moment = _utc(now) if now is not None else _now()
    if moment < cert.not_valid_before_utc:
        raise SecurityError(
            f"{cert_path} is not valid yet: valid from {cert.not_valid_before_utc.isoformat()}, "
            f"now is {moment.isoformat()} (check this machine's clock)"
        )
    if moment > cert.not_valid_after_utc:
        raise SecurityError(
            f"{cert_path} expired at {cert.not_valid_after_utc.isoformat()} "
            f"(now is {moment.isoformat()}); issue a new certificate for this node"
        )

    peer = read_certificate_identity(cert, source=str(cert_path))
    return Identity(
        node_id=peer.node_id,
        role=peer.role,
        cert_pem=cert_pem,
        key_pem=key_pem,
        ca_pem=ca_pem,
        serial=peer.serial,
        not_after=peer.not_after,
    )


def check_role(identity: Identity, folder: StrPath, role: str, command: str) -> None:
    """Refuse (ConfigError, exit 2) an identity folder whose certificate is valid but of another
    role than `command` runs as (a node certificate given to the bootstrap, or the reverse)."""
    if identity.role != role:

        def a(word: str) -> str:
            return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"

        raise ConfigError(
            f"{folder} holds {a(identity.role)} certificate ({identity.node_id}); `{command}` "
            f"needs {a(role)} certificate (`netdp pki issue CA_DIR ID --role {role}`)"
        )


def check_server_names(identity: Identity, folder: StrPath) -> None:
    """Refuse (ConfigError) to serve with a certificate that lacks its identity DNS names.

    Callers verify a node or bootstrap by those names (not by its address), so a certificate
    issued before netdp did would fail every caller's handshake; say so at start instead.
    """
    cert = x509.load_pem_x509_certificate(identity.cert_pem)
    missing = missing_server_names(cert, identity.role, identity.node_id)
    if missing:
        raise ConfigError(
            f"the certificate in {folder} ({identity.role} {identity.node_id!r}) lacks the "
            f"identity name{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which callers "
            "verify: it "
            "was issued by an older netdp. Re-issue it with the same CA: `netdp pki issue CA_DIR "
            f"{identity.node_id} --role {identity.role} --force` (`netdp pki setup CA_DIR ...` "
            "re-issues such certificates by itself)"
        )


def _lacks_server_names(folder: Path) -> bool:
    """True if `folder` holds a readable certificate without its identity DNS names."""
    try:
        cert = x509.load_pem_x509_certificate((folder / CERT_FILE).read_bytes())
        peer = read_certificate_identity(cert)
    except (OSError, ValueError, SecurityError):
        return False
    return bool(missing_server_names(cert, peer.role, peer.node_id))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def setup(
    directory: StrPath,
    *,
    nodes: Iterable[str],
    bootstrap_hosts: Iterable[str] = (),
    operator: str = "operator",
    node_host_suffix: str = "",
    per_host: int = 0,
    host_prefix: str = "host-",
) -> list[str]:
    """Idempotent one-shot set-up (the certificate service of docker compose): a CA if there is
    none, then an operator, a bootstrap and one certificate per node, each only if missing or
    issued by an older netdp without its identity names (then re-issued). A node's certificate
    also names the host `<id><node_host_suffix>` (its compose service name), or with `per_host`
    the host process that runs it. With `per_host` = M > 0, the nodes are also laid out M per host
    (:func:`host_groups`, :func:`lay_out_hosts`): ``directory/hosts/<host>/<node id>/``, revoked
    nodes left out. Returns the ids issued by this call."""
    root = Path(directory)
    nodes = list(nodes)
    groups = host_groups(nodes, per_host, host_prefix) if per_host else {}
    host_of = {n: h for h, members in groups.items() for n in members}
    made: list[str] = []
    if not (root / CA_CERT_FILE).exists():
        init_ca(root)
    wanted: list[tuple[str, str, tuple[str, ...]]] = [
        (operator, "operator", ()),
        ("bootstrap", "bootstrap", tuple(bootstrap_hosts) or ("bootstrap",)),
    ]
    wanted += [(n, "node", (f"{host_of.get(n, n)}{node_host_suffix}",)) for n in nodes]
    requests = []
    for ident, role, hosts in wanted:
        old = (root / ident / CERT_FILE).exists()
        if old and not _lacks_server_names(root / ident):
            continue
        requests.append(Request(ident, role=role, hosts=hosts, force=old))
        made.append(ident)
    issue_many(root, requests)
    if per_host:
        # a revoked node is left out of its host's folder (the others keep their hosts): the
        # bootstrap would refuse it, and a node that cannot start stops its whole host process
        revoked = revoked_ids(root)
        lay_out_hosts(root, {h: [n for n in m if n not in revoked] for h, m in groups.items()})
    return made


def revoked_ids(directory: StrPath) -> set[str]:
    """The ids of the CA folder's index whose every certificate is revoked."""
    entries = read_index(directory)["certificates"]
    live = {e["id"] for e in entries if not e.get("revoked", False)}
    return {e["id"] for e in entries if e.get("revoked", False)} - live


def host_groups(
    nodes: Sequence[str], per_host: int, prefix: str = "host-", first: int = 1
) -> dict[str, list[str]]:
    """The nodes in their order, `per_host` to a host: {<prefix><first>: the first per_host nodes,
    <prefix><first + 1>: the next ..., the last host takes what is left}."""
    if per_host < 1:
        raise ConfigError(f"--per-host must be at least 1, not {per_host}")
    groups = {
        f"{prefix}{first + k}": list(nodes[i : i + per_host])
        for k, i in enumerate(range(0, len(nodes), per_host))
    }
    for host in groups:
        _check_node_id(host)  # a host name is a folder and a DNS label, as a node id
    return groups


def lay_out_hosts(directory: StrPath, groups: dict[str, list[str]]) -> Path:
    """Copy each node's identity folder ``directory/<node>/`` to ``directory/hosts/<host>/<node>/``
    for the host that runs it, so that a host process can be given (mounted) the folder of its
    own nodes and no other key. Idempotent: a copy is rewritten only when it differs; anything else
    under ``hosts/`` (a node another host runs now, a host no longer in `groups`) is removed, so
    that each host folder holds exactly its nodes. The CA key is never copied. Returns the
    ``hosts`` folder."""
    root = Path(directory)
    base = root / HOSTS_DIR
    seen: dict[str, str] = {}
    for host, members in groups.items():
        _check_node_id(host)
        for node in members:
            _check_node_id(node)
            if node in seen:
                raise ConfigError(f"node {node} is in two hosts: {seen[node]} and {host}")
            seen[node] = host
            if not (root / node / CERT_FILE).is_file():
                raise ConfigError(f"no identity folder {root / node} to lay out on host {host}")
    for host, members in groups.items():
        for node in members:
            for name, mode in ((CA_CERT_FILE, 0o644), (CERT_FILE, 0o644), (KEY_FILE, 0o600)):
                data = (root / node / name).read_bytes()
                dest = base / host / node / name
                if not dest.is_file() or dest.read_bytes() != data:
                    _write_atomic(dest, data, mode=mode)
    if base.is_dir():
        for host_dir in list(base.iterdir()):
            if host_dir.name not in groups:
                _remove(host_dir)
                continue
            for entry in list(host_dir.iterdir()):
                if entry.name not in groups[host_dir.name]:
                    _remove(entry)
    return base


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil  # lazy: start-up cost (a node removes no CA file)

        shutil.rmtree(path)
    else:
        path.unlink()
