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


# -- demo: every flag and the job they make are checked before any process starts ---------------
@pytest.mark.parametrize("flags, words", [
    (["--delta", "2"], ["--delta", "(0, 1)"]),
    (["--rounds", "0"], ["--rounds"]),
    (["--steps", "-1"], ["--steps"]),
    (["--algorithm", "walk-sum", "--epsilon", "-1"], ["--epsilon"]),
    (["--algorithm", "inca", "--threat", "bogus"], ["threat", "--threat"]),
    (["--algorithm", "inca", "--k", "100"], ["k must be", "--k"]),
    (["--algorithm", "inca", "--leave", "0.6", "--miss", "0.6"], ["--leave", "--miss"]),
    (["--algorithm", "muffliato", "--steps", "1000000000"], ["--steps"]),
    (["--algorithm", "rw-sgd", "--topology", "blob"], ["--topology", "blob"]),
    (["--algorithm", "nope"], ["--algorithm", "nope"]),
])
def test_demo_refuses_bad_flags_before_starting_anything(tmp_path, capsys, flags, words):
    work = tmp_path / "work"
    assert main(["demo", "--workdir", str(work), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netdp: configuration error: "), err
    assert err.count("\n") == 1, err  # one line
    for w in words:
        assert w in err, (w, err)
    assert "starting" not in err
    assert not work.exists()  # no certificate, ledger or process was made


def test_demo_checks_the_job_as_the_bootstrap_does():
    """The demo's check is the bootstrap's (`Algorithm.validate`): what one refuses the other
    refuses, for every algorithm of the demo at its defaults and with a bad δ."""
    from netdp_node.demo import ALGORITHMS, _job_params, check_args
    from netdp_node.protocols import get_algorithm

    for alg in ALGORITHMS:
        a = build_parser().parse_args(["demo", "--algorithm", alg])
        assert check_args(a) == get_algorithm(alg).validate(_job_params(a, a.nodes), a.nodes)
        a.delta = 1.5
        with pytest.raises(ValueError):
            get_algorithm(alg).validate(_job_params(a, a.nodes), a.nodes)
        from netdp_node.errors import ConfigError

        with pytest.raises(ConfigError, match="--delta"):
            check_args(a)


# -- --param names the parameter -------------------------------------------------------------------
def test_job_submit_names_a_bad_param_without_contacting_the_bootstrap(tmp_path):
    # --check and a real submission both refuse it before any call (the bootstrap address is a
    # closed port: a call would fail differently)
    for extra in (["--check"], []):
        r = run("job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", str(tmp_path / "op"),
                "--param", "rounds=abc", *extra)
        one_line_error(r, 2, "--param", "rounds", "'abc'")
    r = run("job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", str(tmp_path / "op"),
            "--participants", "a,b,c", "--param", "epsilon=abc", "--check")
    one_line_error(r, 2, "--param", "epsilon")
    r = run("job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", str(tmp_path / "op"),
            "--participants", "a,b,c", "--param", "delta=2", "--check")
    one_line_error(r, 2, "--param", "delta")
    r = run("job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", str(tmp_path / "op"),
            "--algorithm", "ring-summ", "--check")
    one_line_error(r, 2, "--algorithm", "ring-summ")


def test_simulate_names_a_bad_param(capsys):
    assert main(["simulate", "--algorithm", "ring-sum", "--nodes", "4", "--param", "rounds=abc",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "rounds" in err and "'abc'" in err and err.count("\n") == 1, err
