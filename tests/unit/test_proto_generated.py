"""The committed generated code matches proto/ (regenerate with scripts/gen_proto.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
        assert committed.read_text() == f.read_text(), f"{f.name} is stale: run scripts/gen_proto.py"
