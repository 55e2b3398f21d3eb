"""The on-disk CA, identity folders, peer identities and revocation lists."""

from __future__ import annotations

import ipaddress
import json
import shutil
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from netdp_node.errors import ConfigError, SecurityError
from netdp_node.security import (
    Identity,
    PeerIdentity,
    RevocationList,
    identity_from_pem,
    init_ca,
    issue,
    load_crl,
    load_identity,
    read_index,
    revoke,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "ca"
    init_ca(directory)
    return directory


@pytest.fixture
def other_ca_dir(tmp_path: Path) -> Path:
    """A second CA with the *same* common name: only its key tells it apart."""
    directory = tmp_path / "other-ca"
    init_ca(directory)
    return directory


def _sign_custom(ca_dir: Path, *, common_name: str, uris: list[str]) -> tuple[bytes, bytes]:
    """(cert PEM, key PEM) signed by the CA in `ca_dir` with arbitrary CN and URIs."""
    ca_cert = _cert(ca_dir / "ca.pem")
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
    )
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
    names.append(x509.DNSName("localhost"))
    builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert_pem = builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem


# --------------------------------------------------------------------------------------------------
# init_ca


def test_init_ca_creates_ca_crl_and_index(tmp_path: Path) -> None:
    directory = tmp_path / "ca"
    ca_path = init_ca(directory, common_name="test CA")

    assert ca_path == directory / "ca.pem"
    assert _mode(directory / "ca.key") == 0o600
    ca = _cert(ca_path)
    assert ca.subject == ca.issuer
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test CA"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    assert isinstance(ca.signature_hash_algorithm, hashes.SHA256)
    assert ca.not_valid_after_utc - ca.not_valid_before_utc > timedelta(days=3649)

    crl = RevocationList.from_pem((directory / "crl.pem").read_bytes(), ca_path.read_bytes())
    assert crl.number == 1
    assert crl.serials == frozenset()
    assert crl.next_update is not None
    assert crl.next_update - datetime.now(timezone.utc) > timedelta(days=3000)

    assert json.loads((directory / "index.json").read_text()) == {
        "version": 1,
        "certificates": [],
    }


def test_init_ca_refuses_to_overwrite_unless_forced(ca_dir: Path) -> None:
    before = (ca_dir / "ca.pem").read_bytes()
    with pytest.raises(SecurityError, match="already exists"):
        init_ca(ca_dir)
    assert (ca_dir / "ca.pem").read_bytes() == before

    init_ca(ca_dir, force=True)
    assert (ca_dir / "ca.pem").read_bytes() != before


# --------------------------------------------------------------------------------------------------
# issue / load_identity


def test_issue_and_load(ca_dir: Path) -> None:
    folder = issue(ca_dir, "alice")

    assert folder == ca_dir / "alice"
    assert {p.name for p in folder.iterdir()} == {"ca.pem", "cert.pem", "key.pem"}
    assert _mode(folder / "key.pem") == 0o600
    assert (folder / "ca.pem").read_bytes() == (ca_dir / "ca.pem").read_bytes()

    identity = load_identity(folder)
    cert = _cert(folder / "cert.pem")
    assert isinstance(identity, Identity)
    assert identity.node_id == "alice"
    assert identity.role == "node"
    assert identity.serial == cert.serial_number
    assert identity.not_after == cert.not_valid_after_utc
    assert identity.cert_pem == (folder / "cert.pem").read_bytes()
    assert identity.key_pem == (folder / "key.pem").read_bytes()
    assert identity.ca_pem == (ca_dir / "ca.pem").read_bytes()
    remaining = identity.not_after - datetime.now(timezone.utc)
    assert timedelta(days=364) < remaining <= timedelta(days=365)


def test_identity_repr_does_not_leak_the_key(ca_dir: Path) -> None:
    identity = load_identity(issue(ca_dir, "alice"))
    text = repr(identity)
    assert "alice" in text
    assert "PRIVATE KEY" not in text
    assert "key_pem" not in text


def test_issue_to_out_dir_with_role(ca_dir: Path, tmp_path: Path) -> None:
    folder = issue(ca_dir, "boot-1", role="bootstrap", out_dir=tmp_path / "elsewhere")
    assert folder == tmp_path / "elsewhere"
    identity = load_identity(folder)
    assert (identity.node_id, identity.role) == ("boot-1", "bootstrap")


def test_san_contents(ca_dir: Path) -> None:
    folder = issue(
        ca_dir,
        "node-7.eu_west",
        role="operator",
        hosts=("10.0.0.7", "node7.example.org", "::1", "localhost", "10.0.0.7"),
    )
    cert = _cert(folder / "cert.pem")

    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node-7.eu_west"
    assert cert.issuer == _cert(ca_dir / "ca.pem").subject
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
        "netdp://operator/node-7.eu_west"
    ]
    # the identity name first ("_" escaped as "__": DNS names ignore case, ids do not), then hosts
    assert san.get_values_for_type(x509.DNSName) == [
        "node-7.eu__west.operator.netdp.invalid",
        "node7.example.org",
        "localhost",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.7"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca is False
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    public_key = cert.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    cert.verify_directly_issued_by(_cert(ca_dir / "ca.pem"))


def test_default_hosts(ca_dir: Path) -> None:
    san = (
        _cert(issue(ca_dir, "alice") / "cert.pem")
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert san.get_values_for_type(x509.DNSName) == ["alice.node.netdp.invalid", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_serials_are_random_and_distinct(ca_dir: Path) -> None:
    serials = {load_identity(issue(ca_dir, f"n{i}")).serial for i in range(5)}
    assert len(serials) == 5
    assert all(s > 2**64 for s in serials)


def test_missing_files_detected(ca_dir: Path) -> None:
    folder = issue(ca_dir, "alice")
    (folder / "key.pem").unlink()
    with pytest.raises(SecurityError, match=r"missing key\.pem"):
        load_identity(folder)
    with pytest.raises(SecurityError, match="missing ca.pem, cert.pem, key.pem"):
        load_identity(ca_dir / "nobody")


def test_unparsable_file_named(ca_dir: Path) -> None:
    folder = issue(ca_dir, "alice")
    (folder / "cert.pem").write_text("not a certificate\n")
    with pytest.raises(SecurityError, match=r"cert\.pem is not a PEM X\.509 certificate"):
        load_identity(folder)


def test_key_mismatch_detected(ca_dir: Path) -> None:
    alice = issue(ca_dir, "alice")
    bob = issue(ca_dir, "bob")
    shutil.copy(bob / "key.pem", alice / "key.pem")
    with pytest.raises(SecurityError, match=r"key\.pem does not match .*cert\.pem"):
        load_identity(alice)


def test_foreign_ca_detected(ca_dir: Path, other_ca_dir: Path) -> None:
    # Our certificate, but the folder trusts another CA (same name, different key).
    alice = issue(ca_dir, "alice")
    shutil.copy(other_ca_dir / "ca.pem", alice / "ca.pem")
    with pytest.raises(SecurityError, match=r"cert\.pem .* is not signed by the CA in .*ca\.pem"):
        load_identity(alice)

    # A certificate from another CA placed next to our ca.pem.
    mallory = issue(other_ca_dir, "mallory")
    shutil.copy(ca_dir / "ca.pem", mallory / "ca.pem")
    with pytest.raises(SecurityError, match="is not signed by the CA"):
        load_identity(mallory)


def test_expired_detected(ca_dir: Path) -> None:
    now = datetime.now(timezone.utc)
    folder = issue(
        ca_dir, "old", not_before=now - timedelta(days=10), not_after=now - timedelta(days=1)
    )
    with pytest.raises(SecurityError, match=r"cert\.pem expired at"):
        load_identity(folder)


def test_not_yet_valid_detected(ca_dir: Path) -> None:
    now = datetime.now(timezone.utc)
    folder = issue(
        ca_dir, "future", not_before=now + timedelta(days=1), not_after=now + timedelta(days=10)
    )
    with pytest.raises(SecurityError, match="not valid yet"):
        load_identity(folder)
    # ... and it loads at a moment inside its window.
    assert load_identity(folder, now=now + timedelta(days=2)).node_id == "future"


def test_certificate_without_netdp_uri_refused(ca_dir: Path) -> None:
    folder = issue(ca_dir, "alice")
    cert_pem, key_pem = _sign_custom(ca_dir, common_name="alice", uris=["https://example.org/a"])
    (folder / "cert.pem").write_bytes(cert_pem)
    (folder / "key.pem").write_bytes(key_pem)
    with pytest.raises(SecurityError, match=r"cert\.pem has no netdp identity"):
        load_identity(folder)


def test_identity_from_pem(ca_dir: Path) -> None:
    folder = issue(ca_dir, "alice", role="bootstrap")
    pem = (folder / "cert.pem").read_bytes()
    peer = identity_from_pem(pem)
    assert peer == PeerIdentity(
        node_id="alice",
        role="bootstrap",
        serial=_cert(folder / "cert.pem").serial_number,
        not_after=_cert(folder / "cert.pem").not_valid_after_utc,
    )
    assert identity_from_pem(pem) is peer  # cached


@pytest.mark.parametrize(
    ("common_name", "uris", "message"),
    [
        ("alice", [], "no netdp identity"),
        ("alice", ["netdp://admin/alice"], "no netdp identity"),  # unknown role
        ("alice", ["netdp://node/al ice"], "no netdp identity"),  # invalid id
        ("alice", ["netdp://node/alice/x"], "no netdp identity"),
        ("mallory", ["netdp://node/alice"], "common name is 'mallory'"),
        ("alice", ["netdp://node/alice", "netdp://operator/alice"], "several netdp identities"),
    ],
)
def test_identity_from_pem_refuses(
    ca_dir: Path, common_name: str, uris: list[str], message: str
) -> None:
    with pytest.raises(SecurityError, match=message):
        identity_from_pem(_sign_custom(ca_dir, common_name=common_name, uris=uris)[0])


def test_identity_from_pem_garbage() -> None:
    with pytest.raises(SecurityError, match="not a valid PEM"):
        identity_from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")


# --------------------------------------------------------------------------------------------------
# index.json


def test_index_json_contents(ca_dir: Path) -> None:
    alice = issue(ca_dir, "alice", hosts=("10.1.2.3", "Alice.Example"))
    issue(ca_dir, "ops", role="operator", hosts=())
    cert = _cert(alice / "cert.pem")

    index = json.loads((ca_dir / "index.json").read_text())
    assert index == read_index(ca_dir)
    entries = index["certificates"]
    assert [e["id"] for e in entries] == ["alice", "ops"]
    entry = entries[0]
    assert entry["role"] == "node"
    assert entry["serial"] == str(cert.serial_number)  # decimal string: no float rounding in JSON
    assert isinstance(entry["serial"], str)
    assert entry["hosts"] == ["10.1.2.3", "alice.example"]
    assert datetime.fromisoformat(entry["not_after"]) == cert.not_valid_after_utc
    assert datetime.fromisoformat(entry["not_before"]) == cert.not_valid_before_utc
    assert entry["revoked"] is False
    assert entry["revoked_at"] is None
    assert entries[1]["role"] == "operator"
    assert entries[1]["hosts"] == []


def test_reissue_needs_force(ca_dir: Path) -> None:
    first = load_identity(issue(ca_dir, "alice"))
    with pytest.raises(SecurityError, match="already has a certificate"):
        issue(ca_dir, "alice")
    second = load_identity(issue(ca_dir, "alice", force=True))
    assert second.serial != first.serial
    serials = [e["serial"] for e in read_index(ca_dir)["certificates"] if e["id"] == "alice"]
    assert serials == [str(first.serial), str(second.serial)]


def test_reissue_after_revoke_needs_no_force(ca_dir: Path) -> None:
    first = load_identity(issue(ca_dir, "alice"))
    revoke(ca_dir, "alice")
    second = load_identity(issue(ca_dir, "alice"))
    assert second.serial != first.serial
    assert load_crl(ca_dir).is_revoked(first.serial)
    assert not load_crl(ca_dir).is_revoked(second.serial)


def test_out_dir_holding_another_identity_is_not_overwritten(ca_dir: Path) -> None:
    alice = issue(ca_dir, "alice")
    with pytest.raises(SecurityError, match="refusing to overwrite"):
        issue(ca_dir, "bob", out_dir=alice)
    assert load_identity(alice).node_id == "alice"


def test_reissue_after_replacing_the_ca(ca_dir: Path) -> None:
    old = load_identity(issue(ca_dir, "alice"))
    init_ca(ca_dir, force=True)
    assert read_index(ca_dir)["certificates"] == []
    new = load_identity(issue(ca_dir, "alice"))  # the old CA's certificate is simply replaced
    assert new.serial != old.serial
    assert new.ca_pem == (ca_dir / "ca.pem").read_bytes() != old.ca_pem


def test_issue_without_ca(tmp_path: Path) -> None:
    with pytest.raises(SecurityError, match="no CA in"):
        issue(tmp_path, "alice")


@pytest.mark.parametrize(
    "node_id",
    ["", "-alice", ".alice", "_alice", "a/b", "../x", "a b", "alicé", "a" * 64, "a:b", "a\n"],
)
def test_invalid_ids_refused(ca_dir: Path, node_id: str) -> None:
    with pytest.raises(ConfigError, match="invalid node id"):
        issue(ca_dir, node_id)
    assert read_index(ca_dir)["certificates"] == []


@pytest.mark.parametrize("node_id", ["a", "7", "a" * 63, "node-1.eu_west", "A.B-C_D"])
def test_valid_ids_accepted(ca_dir: Path, node_id: str) -> None:
    assert load_identity(issue(ca_dir, node_id)).node_id == node_id


def test_reserved_folder_names_refused(ca_dir: Path) -> None:
    with pytest.raises(ConfigError, match="clashes"):
        issue(ca_dir, "index.json")


def test_invalid_role_and_hosts_refused(ca_dir: Path) -> None:
    with pytest.raises(ConfigError, match="invalid role"):
        issue(ca_dir, "alice", role="admin")
    with pytest.raises(ConfigError, match="invalid host"):
        issue(ca_dir, "alice", hosts=("bad host",))
    with pytest.raises(ConfigError, match="hosts must be a list"):
        issue(ca_dir, "alice", hosts="localhost")
    with pytest.raises(ConfigError, match="before it starts"):
        now = datetime.now(timezone.utc)
        issue(ca_dir, "alice", not_before=now, not_after=now - timedelta(seconds=1))


# --------------------------------------------------------------------------------------------------
# revoke / RevocationList


def test_revoke(ca_dir: Path) -> None:
    alice = load_identity(issue(ca_dir, "alice"))
    bob = load_identity(issue(ca_dir, "bob"))
    ca_pem = (ca_dir / "ca.pem").read_bytes()
    initial = load_crl(ca_dir)
    assert initial.number == 1

    crl_pem = revoke(ca_dir, "alice")
    assert crl_pem == (ca_dir / "crl.pem").read_bytes()
    crl = RevocationList.from_pem(crl_pem, ca_pem)
    assert crl.number == 2
    assert crl.serials == {alice.serial}
    assert crl.is_revoked(alice.serial)
    assert not crl.is_revoked(bob.serial)
    assert crl.pem == crl_pem
    assert crl.newer_than(initial)
    assert not initial.newer_than(crl)

    raw = x509.load_pem_x509_crl(crl_pem)
    assert raw.get_revoked_certificate_by_serial_number(alice.serial) is not None
    assert raw.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 2

    entries = {e["id"]: e for e in read_index(ca_dir)["certificates"]}
    assert entries["alice"]["revoked"] is True
    assert entries["alice"]["revoked_at"] is not None
    assert entries["bob"]["revoked"] is False

    later = RevocationList.from_pem(revoke(ca_dir, "bob"), ca_pem)
    assert later.number == 3
    assert later.serials == {alice.serial, bob.serial}
    assert later.newer_than(crl)


def test_revoke_every_certificate_of_the_id(ca_dir: Path) -> None:
    first = load_identity(issue(ca_dir, "alice"))
    second = load_identity(issue(ca_dir, "alice", force=True))
    revoke(ca_dir, "alice")
    assert load_crl(ca_dir).serials == {first.serial, second.serial}
    assert all(e["revoked"] for e in read_index(ca_dir)["certificates"])


def test_revoke_unknown_id(ca_dir: Path) -> None:
    with pytest.raises(SecurityError, match="no certificate was issued for node id 'nobody'"):
        revoke(ca_dir, "nobody")


def test_crl_signed_by_another_ca_is_rejected(
    ca_dir: Path, other_ca_dir: Path, tmp_path: Path
) -> None:
    ca_pem = (ca_dir / "ca.pem").read_bytes()
    issue(other_ca_dir, "alice")
    forged = revoke(other_ca_dir, "alice")  # same issuer name as ours, different key
    with pytest.raises(SecurityError, match="signature does not verify"):
        RevocationList.from_pem(forged, ca_pem)

    renamed = tmp_path / "renamed-ca"
    init_ca(renamed, common_name="someone else")
    with pytest.raises(SecurityError, match="issued by 'CN=someone else'"):
        RevocationList.from_pem((renamed / "crl.pem").read_bytes(), ca_pem)

    with pytest.raises(SecurityError, match="not a valid PEM X.509 CRL"):
        RevocationList.from_pem(b"garbage", ca_pem)


def test_empty_revocation_list() -> None:
    empty = RevocationList.empty()
    assert empty.number == 0
    assert empty.serials == frozenset()
    assert not empty.is_revoked(1)
    assert not empty.newer_than(RevocationList.empty())


def test_new_ca_crl_is_newer_than_empty(ca_dir: Path) -> None:
    assert load_crl(ca_dir).newer_than(RevocationList.empty())


# --------------------------------------------------------------------------------------------------
# issue_many


def test_issue_many_gives_what_issue_gives(ca_dir: Path, tmp_path: Path) -> None:
    from netdp_node.security.pki import Request, issue_many

    one = tmp_path / "one"
    init_ca(one)
    issue(one, "alice", hosts=("alice.example",))
    issue(one, "op", role="operator", hosts=())
    folders = issue_many(
        ca_dir,
        [Request("alice", hosts=("alice.example",)), Request("op", role="operator", hosts=())],
    )
    assert folders == [ca_dir / "alice", ca_dir / "op"]
    for name in ("alice", "op"):
        a, b = load_identity(ca_dir / name), load_identity(one / name)
        assert (a.node_id, a.role) == (b.node_id, b.role)
        cert, ref = _cert(ca_dir / name / "cert.pem"), _cert(one / name / "cert.pem")
        assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value == (
            ref.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        )
        cert.verify_directly_issued_by(_cert(ca_dir / "ca.pem"))
        assert _mode(ca_dir / name / "key.pem") == 0o600
    strip = ("serial", "issued_at", "not_before", "not_after")
    assert [
        {k: v for k, v in e.items() if k not in strip} for e in read_index(ca_dir)["certificates"]
    ] == [{k: v for k, v in e.items() if k not in strip} for e in read_index(one)["certificates"]]
    assert not [p for p in ca_dir.rglob("*.tmp")]


def test_issue_many_is_all_or_nothing(ca_dir: Path) -> None:
    from netdp_node.security.pki import Request, issue_many

    issue(ca_dir, "bob")
    before = read_index(ca_dir)
    with pytest.raises(SecurityError, match="bob"):
        issue_many(ca_dir, [Request("carol"), Request("bob")])  # bob has a valid certificate
    assert read_index(ca_dir) == before
    assert not (ca_dir / "carol" / "cert.pem").exists()
    assert not [p for p in ca_dir.rglob("*.tmp")]
    with pytest.raises(SecurityError, match="dave"):
        issue_many(ca_dir, [Request("dave"), Request("dave")])  # twice in one batch
    assert read_index(ca_dir) == before
