"""The CLI explains itself and validates configuration without starting anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from netdp_node.cli import build_parser, main
from netdp_node.security import pki

pytestmark = pytest.mark.timeout(60)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "netdp_node.cli", *args], capture_output=True, text=True, timeout=50
    )


def test_every_command_has_help(capsys):
    for cmd in (
        ["demo"],
        ["pki", "init"],
        ["pki", "issue"],
        ["pki", "revoke"],
        ["bootstrap"],
        ["node"],
        ["job", "submit"],
        ["job", "result"],
        ["privacy", "report"],
    ):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args([*cmd, "--help"])
        assert e.value.code == 0
        assert "usage: netdp" in capsys.readouterr().out


def test_check_validates_without_starting(tmp_path):
    pki.init_ca(tmp_path / "pki")
    pki.issue(tmp_path / "pki", "node-1")
    pki.issue(tmp_path / "pki", "bootstrap", role="bootstrap")
    (tmp_path / "v.txt").write_text("0.5\n")
    r = run(
        "node",
        "--certs",
        str(tmp_path / "pki" / "node-1"),
        "--bootstrap",
        "127.0.0.1:7600",
        "--ledger",
        str(tmp_path / "l"),
        "--data",
        str(tmp_path / "v.txt"),
        "--check",
    )
    assert r.returncode == 0, r.stderr
    assert "ok: node" in r.stderr and "node certificate of node-1" in r.stderr
    assert not (tmp_path / "l").exists()
    r = run(
        "bootstrap",
        "--certs",
        str(tmp_path / "pki" / "bootstrap"),
        "--state",
        str(tmp_path / "s"),
        "--check",
    )
    assert r.returncode == 0, r.stderr


def test_exit_codes(tmp_path):
    # --check accepts a certificate folder that does not exist yet (created later by the pki
    # service), but refuses a broken one; starting without certificates is a security error (3)
    assert (
        main(
            [
                "node",
                "--certs",
                str(tmp_path / "none"),
                "--bootstrap",
                "127.0.0.1:1",
                "--ledger",
                str(tmp_path / "l"),
                "--check",
            ]
        )
        == 0
    )
    (tmp_path / "broken").mkdir()
    assert (
        main(
            [
                "node",
                "--certs",
                str(tmp_path / "broken"),
                "--bootstrap",
                "127.0.0.1:1",
                "--ledger",
                str(tmp_path / "l"),
                "--check",
            ]
        )
        == 3
    )
    assert (
        main(
            [
                "node",
                "--certs",
                str(tmp_path / "none"),
                "--bootstrap",
                "127.0.0.1:1",
                "--ledger",
                str(tmp_path / "l"),
            ]
        )
        == 3
    )
    assert not (tmp_path / "l").exists()
    # bad data file: configuration error (2)
    pki.init_ca(tmp_path / "pki")
    pki.issue(tmp_path / "pki", "node-1")
    (tmp_path / "bad.txt").write_text("1.0 nan\n")
    assert (
        main(
            [
                "node",
                "--certs",
                str(tmp_path / "pki" / "node-1"),
                "--bootstrap",
                "127.0.0.1:1",
                "--ledger",
                str(tmp_path / "l"),
                "--data",
                str(tmp_path / "bad.txt"),
                "--check",
            ]
        )
        == 2
    )
    # bad flag value: argparse usage error (2)
    r = run("node", "--certs", "x", "--bootstrap", "nohostport", "--ledger", "l")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    # demo with too few nodes
    assert main(["demo", "--nodes", "2"]) == 2
