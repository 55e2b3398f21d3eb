"""Regenerate netdp/v1/*_pb2*.py from proto/netdp/v1/*.proto.

The generated modules are committed so that a plain `pip install .` gives importable code with no
extra step; tests/unit/test_proto_generated.py fails when they drift from the .proto files.
Run: python scripts/gen_proto.py   (needs grpcio-tools, part of the [test] extra)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc

    protos = sorted((ROOT / "proto" / "netdp" / "v1").glob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT / 'proto'}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted((out_dir / "netdp" / "v1").glob("*_pb2*.py*"))


def main() -> None:
    out = generate(ROOT)
    for p in out:
        print(p.relative_to(ROOT))


if __name__ == "__main__":
    sys.exit(main())
