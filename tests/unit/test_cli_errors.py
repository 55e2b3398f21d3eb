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
    return subprocess.run(
        [sys.executable, "-m", "netdp_node.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
    r = run(
        "job",
        "submit",
        "--bootstrap",
        "127.0.0.1:1",
        "--certs",
        "c",
        "--algo",
        "walk-sum",
        "--check",
    )
    one_line_error(r, 2, "unrecognized arguments: --algo")


@pytest.mark.parametrize(
    "value, words", [("31", "must be at most 30"), ("0", "must be positive"), ("x", "invalid")]
)
def test_node_long_poll_is_checked(capsys, value, words):
    base = ["node", "--certs", "c", "--bootstrap", "127.0.0.1:1", "--ledger", "l"]
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*base, "--long-poll", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --long-poll" in err and words in err, err
    assert build_parser().parse_args(base).long_poll == 25.0  # the default
    assert build_parser().parse_args([*base, "--long-poll", "30"]).long_poll == 30.0


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
@pytest.mark.parametrize(
    "flags, words",
    [
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
    ],
)
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
    from netdp_node.algorithms import get_algorithm
    from netdp_node.demo import ALGORITHMS, _job_params, check_args

    for alg in ALGORITHMS:
        a = build_parser().parse_args(["demo", "--algorithm", alg])
        assert check_args(a) == get_algorithm(alg).validate(_job_params(a, a.nodes), a.nodes)
        a.delta = 1.5
        with pytest.raises(ValueError):
            get_algorithm(alg).validate(_job_params(a, a.nodes), a.nodes)
        from netdp_node.errors import ConfigError

        with pytest.raises(ConfigError, match="--delta"):
            check_args(a)


# -- --param names the parameter ----------------------------------------------------------------
def test_job_submit_names_a_bad_param_without_contacting_the_bootstrap(tmp_path, capsys):
    # --check and a real submission both refuse it before any call (the bootstrap address is a
    # closed port and the certificate folder does not exist: a call would fail differently)
    base = ["job", "submit", "--bootstrap", "127.0.0.1:1", "--certs", str(tmp_path / "op")]
    cases = [
        (["--param", "rounds=abc", "--check"], ["--param", "rounds", "'abc'"]),
        (["--param", "rounds=abc"], ["--param", "rounds", "'abc'"]),
        (["--participants", "a,b,c", "--param", "epsilon=abc", "--check"], ["--param", "epsilon"]),
        (["--participants", "a,b,c", "--param", "delta=2", "--check"], ["--param", "delta"]),
        (["--algorithm", "ring-summ", "--check"], ["--algorithm", "ring-summ"]),
    ]
    for flags, words in cases:
        assert main([*base, *flags]) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith("netdp: configuration error: ") and err.count("\n") == 1, err
        for w in words:
            assert w in err, (w, err)


def test_simulate_names_a_bad_param(capsys):
    assert (
        main(
            [
                "simulate",
                "--algorithm",
                "ring-sum",
                "--nodes",
                "4",
                "--param",
                "rounds=abc",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "rounds" in err and "'abc'" in err and err.count("\n") == 1, err


# -- certificates of the wrong role ---------------------------------------------------------------
@pytest.fixture
def pki_dir(tmp_path):
    from netdp_node.security import pki

    d = tmp_path / "pki"
    pki.init_ca(d)
    pki.issue(d, "operator", role="operator", hosts=())
    pki.issue(d, "node-1")
    pki.issue(d, "bootstrap", role="bootstrap")
    return d


def test_bootstrap_refuses_a_node_certificate(pki_dir, tmp_path, capsys):
    for extra in (["--check"], []):
        assert (
            main(
                [
                    "bootstrap",
                    "--certs",
                    str(pki_dir / "node-1"),
                    "--state",
                    str(tmp_path / "s"),
                    *extra,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "holds a node certificate" in err and "needs a bootstrap certificate" in err, err
    assert not (tmp_path / "s").exists()


def test_node_refuses_a_bootstrap_or_operator_certificate(pki_dir, tmp_path, capsys):
    for who, role in (("bootstrap", "a bootstrap"), ("operator", "an operator")):
        for extra in (["--check"], []):
            assert (
                main(
                    [
                        "node",
                        "--certs",
                        str(pki_dir / who),
                        "--bootstrap",
                        "127.0.0.1:1",
                        "--ledger",
                        str(tmp_path / "l"),
                        *extra,
                    ]
                )
                == 2
            )
            err = capsys.readouterr().err
            assert err.count("\n") == 1, err
            assert f"holds {role} certificate" in err and "needs a node certificate" in err, err
    assert not (tmp_path / "l").exists()  # refused before the ledger was created


# -- a busy port ---------------------------------------------------------------------------------
def test_a_busy_port_is_one_line_naming_the_address(pki_dir, tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        # a process: its whole stderr is one line (no traceback, no line of grpc's core)
        r = run(
            "bootstrap",
            "--certs",
            str(pki_dir / "bootstrap"),
            "--state",
            str(tmp_path / "s"),
            "--listen",
            addr,
        )
        err = one_line_error(r, 2, f"cannot listen on {addr}", "already in use")
        assert err.count("\n") == 1, err
        assert (
            main(
                [
                    "node",
                    "--certs",
                    str(pki_dir / "node-1"),
                    "--bootstrap",
                    "127.0.0.1:1",
                    "--ledger",
                    str(tmp_path / "l"),
                    "--listen",
                    addr,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert f"cannot listen on {addr}" in err and "already in use" in err, err


# -- unknown jobs ---------------------------------------------------------------------------------
def test_privacy_report_of_an_unknown_job(tmp_path, capsys):
    from netdp_node.ledger import Entry, Ledger

    led = Ledger(tmp_path / "l", "node-1")
    led.commit([Entry(job_id="job-a", direction="local", event="fault", params={"fault": "x"})])
    led.close()
    assert main(["privacy", "report", "--ledger", str(tmp_path / "l"), "--job", "nojob"]) == 2
    err = capsys.readouterr().err
    assert "--job nojob: no such job" in err and err.count("\n") == 1, err
    assert main(["privacy", "report", "--ledger", str(tmp_path / "l")]) == 0


def test_job_result_of_an_unknown_job(pki_dir, tmp_path, capsys):
    """`job result` and `privacy report` agree: an unknown job is a user input error (exit 2).
    A real bootstrap (mTLS gRPC on 127.0.0.1) runs in a thread of this process."""
    import asyncio
    import threading

    from netdp_bootstrap.server import BootstrapConfig, run_bootstrap

    loop = asyncio.new_event_loop()
    ready: asyncio.Future[int] = loop.create_future()
    stop = asyncio.Event()
    cfg = BootstrapConfig(certs=pki_dir / "bootstrap", state=tmp_path / "s", listen="127.0.0.1:0")
    thread = threading.Thread(
        target=loop.run_until_complete, args=(run_bootstrap(cfg, ready, stop),), daemon=True
    )
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(asyncio.shield(ready), 30), loop
        ).result(timeout=40)
        assert (
            main(
                [
                    "job",
                    "result",
                    "nojob",
                    "--bootstrap",
                    f"127.0.0.1:{port}",
                    "--certs",
                    str(pki_dir / "operator"),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert "no job 'nojob'" in err and f"127.0.0.1:{port}" in err, err
        assert err.count("\n") == 1, err
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=20)


# -- a bootstrap that is down --------------------------------------------------------------------
def test_a_node_whose_bootstrap_is_down_says_so_and_gives_up(pki_dir, tmp_path, caplog, capsys):
    import logging
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    caplog.set_level(logging.INFO)
    assert (
        main(
            [
                "node",
                "--certs",
                str(pki_dir / "node-1"),
                "--bootstrap",
                addr,
                "--ledger",
                str(tmp_path / "l"),
                "--bootstrap-timeout",
                "1.5",
                "--poll-interval",
                "0.1",
            ]
        )
        == 5
    )
    retries = [
        r.getMessage() for r in caplog.records if "cannot reach the bootstrap" in r.getMessage()
    ]
    assert len(retries) >= 2, [r.getMessage() for r in caplog.records]
    assert all(m.startswith("[node=node-1] ") and addr in m for m in retries), retries
    err = capsys.readouterr().err
    assert f"netdp: timeout: could not reach the bootstrap at {addr}" in err, err
    assert "--bootstrap-timeout" in err and "Traceback" not in err


def test_retry_tells_every_retry():
    import asyncio

    from netdp_node.retry import Backoff, retry

    told: list[tuple[str, int]] = []
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise ConnectionError(f"down {calls}")
        return "up"

    out = asyncio.run(
        retry(
            flaky,
            Backoff(initial=0.001, maximum=0.002, give_up_after=0),
            lambda e: isinstance(e, ConnectionError),
            lambda e, attempt, delay: told.append((str(e), attempt)),
        )
    )
    assert out == "up" and told == [("down 1", 1), ("down 2", 2), ("down 3", 3)]
