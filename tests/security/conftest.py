"""Fixtures shared by the tests of who answers a call (test_server_identity, test_server_revocation):
a real netdp CA on disk with one certificate per identity they use."""

from __future__ import annotations

from pathlib import Path

import pytest

from netdp_node.security import pki

#: node certificates of the test CA (default hosts 127.0.0.1 and localhost: the address passes)
NODES = ("node-4", "node-5", "node-6", "node-7")


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    """A CA with an operator certificate and one for each of NODES."""
    root = tmp_path / "pki"
    pki.init_ca(root)
    pki.issue(root, "operator", role="operator", hosts=())
    for nid in NODES:
        pki.issue(root, nid)
    return root
