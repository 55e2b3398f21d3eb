"""Every mistake a user can make on the command line is caught before anything starts and
explained in one line naming what is wrong, with the README's exit code, and no traceback.

In-process (`main`) where nothing is started, a `python -m netdp_node.cli` subprocess where the
exact output matters (argparse errors, a daemon that fails at start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from netdp_node.cli import build_parser, main

pytestmark = pytest.mark.timeout(60)


def run(*args: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netdp_node.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The command failed with `code`, said so without a traceback, and named every word."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


# -- argparse: no prefix matching ----------------------------------------------------------------
def test_a_prefix_of_a_flag_is_an_unknown_flag():
    # `--node 4` was taken as `--nodes 4`; now it is refused, naming the argument
    r = run("demo", "--node", "4")
    one_line_error(r, 2, "unrecognized arguments: --node 4")
    r = run("job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", "c", "--algo", "walk-sum",
            "--check")
    one_line_error(r, 2, "unrecognized arguments: --algo")


def test_every_parser_refuses_abbreviations():
    seen = 0
    stack = [build_parser()]
    while stack:
        parser = stack.pop()
        assert parser.allow_abbrev is False, parser.prog
        seen += 1
        for action in parser._actions:
            if action.choices and isinstance(action.choices, dict):
                stack.extend(action.choices.values())
    assert seen > 15  # every command and sub-command was visited
