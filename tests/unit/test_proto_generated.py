"""The committed generated code matches proto/ (regenerate with scripts/gen_proto.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The version stamps protoc and the gRPC plugin write into the generated code: the generator's own
# version, not the .proto's content. A newer grpcio-tools (pip resolves the newest) stamps its own
# version; the rest of the output must still match. The stamps are checked against pyproject's
# lower bounds below.
_STAMPS = [
    (re.compile(r"^# Protobuf Python Version: .*$", re.M), "# Protobuf Python Version: <v>"),
    (re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.M), "GRPC_GENERATED_VERSION = '<v>'"),
    (
        re.compile(
            r"(ValidateProtobufRuntimeVersion\(\n\s*_runtime_version\.Domain\.PUBLIC,\n)"
            r"\s*\d+,\n\s*\d+,\n\s*\d+,\n"
        ),
        r"\1<v>\n",
    ),
]


def _unstamped(text: str) -> str:
    for pattern, repl in _STAMPS:
        text = pattern.sub(repl, text)
    return text


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _floor(requirements: str, name: str) -> tuple[int, ...]:
    m = re.search(rf'"{re.escape(name)}>=([0-9.]+)', requirements)
    assert m, f"pyproject.toml: no lower bound for {name}"
    return _version(m.group(1))


def test_pyproject_floors_cover_the_generated_code():
    """pip must never pick a grpcio/protobuf that the committed stubs refuse at import
    (they raise below the versions they were generated with)."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    for f in sorted((ROOT / "netdp" / "v1").glob("*_pb2_grpc.py")):
        m = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", f.read_text(), re.M)
        assert m, f
        assert _floor(pyproject, "grpcio") >= _version(m.group(1)), f.name
        assert _floor(pyproject, "grpcio-tools") >= _version(m.group(1)), f.name
    for f in sorted((ROOT / "netdp" / "v1").glob("*_pb2.py")):
        m = re.search(
            r"ValidateProtobufRuntimeVersion\(\n\s*_runtime_version\.Domain\.PUBLIC,\n"
            r"\s*(\d+),\n\s*(\d+),\n\s*(\d+),",
            f.read_text(),
        )
        assert m, f
        gen = tuple(int(x) for x in m.groups())
        assert _floor(pyproject, "protobuf") >= gen, f.name
        assert re.search(rf'"protobuf>=[0-9.]+,<{gen[0] + 1}"', pyproject), f.name


@pytest.mark.timeout(60)
def test_generated_code_is_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools")
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["gen_proto"] = mod
    spec.loader.exec_module(mod)
    fresh = mod.generate(tmp_path)
    assert fresh
    for f in fresh:
        committed = ROOT / "netdp" / "v1" / f.name
        assert committed.exists(), f"{committed} missing: run scripts/gen_proto.py"
        assert _unstamped(committed.read_text()) == _unstamped(f.read_text()), (
            f"{f.name} is stale: run scripts/gen_proto.py"
        )


def test_only_the_version_stamps_are_ignored():
    text = (ROOT / "netdp" / "v1" / "peer_pb2.py").read_text()
    grpc_text = (ROOT / "netdp" / "v1" / "peer_pb2_grpc.py").read_text()
    newer = re.sub(r"(Domain\.PUBLIC,\n\s*)7,\n\s*35,", r"\g<1>7,\n    36,", text)
    newer = newer.replace("# Protobuf Python Version: 7.35.1", "# Protobuf Python Version: 7.36.0")
    assert newer != text and _unstamped(newer) == _unstamped(text)
    bumped = re.sub(
        r"GRPC_GENERATED_VERSION = '[0-9.]+'", "GRPC_GENERATED_VERSION = '9.9.9'", grpc_text
    )
    assert bumped != grpc_text and _unstamped(bumped) == _unstamped(grpc_text)
    edited = text.replace("netdp/v1/peer.proto", "netdp/v1/peer2.proto", 1)
    assert _unstamped(edited) != _unstamped(text)
