"""What a start-up imports (netdp issue 15): `netdp --help`, every command's `--help` and a node's
import, each in a fresh interpreter, checked by the modules it leaves in ``sys.modules`` (never by
timings). The command line's help needs none of gRPC, numpy, X.509, protobuf or asyncio; a node
imports the algorithm registry's families (engines, parameters, hooks) at its first job, not at
start-up. The catalog that the help reads instead of the registry is checked against it here."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from netdp_node.algorithms import ALGORITHMS, catalog
from netdp_node.cli import build_parser
from netdp_node.errors import NetdpError

ROOT = Path(__file__).resolve().parents[2]

#: what no `--help` may import: each costs tens of ms of CPU (numpy ~0.1 s, asyncio ~0.08 s)
NOT_FOR_HELP = (
    "grpc",
    "numpy",
    "cryptography",
    "google.protobuf",
    "asyncio",
    "scipy",
    "matplotlib",
    "networkx",
    "randomgen",
    "rich",
    "netdp_node.algorithms.record",
)
#: the registry's families: a node imports them when it meets its first job
FAMILIES = tuple(
    f"netdp_node.algorithms.{family}" for family in ("ring", "walk", "inca", "muffliato")
)
#: what only the dataset download uses (`datasets.download_housing`): not even the registry loads it
WEB = ("urllib.request", "http.client", "tarfile")
#: what a node's import does not load: its registry's families, the datasets
NOT_FOR_A_NODE = (
    "scipy",
    "matplotlib",
    "networkx",
    "netdp_node.algorithms.record",
    "netdp_node.datasets",
    *WEB,
    *FAMILIES,
)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command path of the parser: (), ("demo",), ("job", "submit"), ..."""
    out = [list(path)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*path, name))
    return out


def _run(code: str) -> dict[str, object]:
    """Run `code` in a fresh interpreter (this checkout first on the path); its last stdout line
    is JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_every_help_imports_no_heavy_module():
    """`netdp --help` and every command's `--help`, through `main` as the `netdp` script runs it,
    all in one fresh interpreter: none of the heavy modules is imported, and every help printed."""
    commands = _commands(build_parser())
    assert ["demo"] in commands and ["job", "submit"] in commands and len(commands) > 15
    code = (
        "import contextlib, io, json, sys\n"
        "from netdp_node.cli import main\n"
        "codes, sizes = [], []\n"
        f"for path in {commands!r}:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            main([*path, '--help'])\n"
        "        except SystemExit as e:\n"
        "            codes.append(e.code)\n"
        "    sizes.append(len(buf.getvalue()))\n"
        f"heavy = [m for m in {NOT_FOR_HELP!r} if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'sizes': sizes, 'heavy': heavy}))\n"
    )
    got = _run(code)
    assert got["codes"] == [0] * len(commands)
    assert all(isinstance(n, int) and n > 100 for n in got["sizes"])  # type: ignore[attr-defined]
    assert got["heavy"] == []


def test_the_netdp_script_help_imports_no_heavy_module():
    """The same through the interpreter's own start (`python -m netdp_node.cli --help` and `demo
    --help`, which lists the algorithms), as a user's `netdp --help` starts."""
    code = (
        "import json, runpy, sys, contextlib, io\n"
        "codes = []\n"
        "for argv in (['--help'], ['demo', '--help']):\n"
        "    sys.argv = ['netdp', *argv]\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
        "        try:\n"
        "            runpy.run_module('netdp_node.cli', run_name='__main__')\n"
        "        except SystemExit as e:\n"
        "            codes.append(e.code)\n"
        "    assert 'usage: netdp' in buf.getvalue()\n"
        f"print(json.dumps({{'codes': codes, 'heavy': [m for m in {NOT_FOR_HELP!r} "
        "if m in sys.modules]}))\n"
    )
    assert _run(code) == {"codes": [0, 0], "heavy": []}


def test_a_node_imports_the_families_at_its_first_job():
    """A node's import (the daemon, the host of several nodes) and the bootstrap's leave the
    registry's families, the datasets and scipy, matplotlib, networkx out; the first
    `get_algorithm` (a job) brings the families in, and still not the dataset download's HTTP."""
    code = (
        "import json, sys\n"
        "import netdp_node.daemon, netdp_node.host, netdp_bootstrap.server\n"
        f"before = [m for m in {NOT_FOR_A_NODE!r} if m in sys.modules]\n"
        "from netdp_node.algorithms import get_algorithm\n"
        "engine = get_algorithm('walk-sum').engine.__module__\n"
        f"after = [m for m in {FAMILIES!r} if m in sys.modules]\n"
        f"web = [m for m in {WEB!r} if m in sys.modules]\n"
        "print(json.dumps({'before': before, 'engine': engine, 'after': after, 'web': web}))\n"
    )
    assert _run(code) == {
        "before": [],
        "engine": "netdp_node.algorithms.walk.engine",
        "after": list(FAMILIES),
        "web": [],
    }


#: what a node's import does not load at all: numpy waits for the first job (engines, arrays on the
#: wire, the custody arrays of the ledger), scipy, matplotlib and networkx for the code using them;
#: fractions (and decimal, which it imports) for the exact gossip weights of an accountant, tempfile
#: (and shutil, bz2, lzma under it) for a CA's files and the rare probe of a wrong server; the
#: privacy accounting of a job (its budget check, the contributions of its report, the threat
#: model's marks of a seeded node) for the first job
JOB_TIME = (
    "netdp_node.algorithms.accounting",
    "netdp_node.algorithms.budget",
    "netdp_node.privacy.composition",
    "netdp_node.privacy.threat",
)
NOT_FOR_A_NODE_START = (
    "numpy",
    "scipy",
    "matplotlib",
    "networkx",
    "fractions",
    "decimal",
    "tempfile",
    "shutil",
    "bz2",
    "lzma",
    *JOB_TIME,
)


@pytest.mark.parametrize("module", ["netdp_node.daemon", "netdp_node.host"])
def test_a_node_imports_numpy_at_its_first_use(module):
    """`import netdp_node.daemon` (a node) and `import netdp_node.host` (the process hosting
    several), each alone in a fresh interpreter, load none of `NOT_FOR_A_NODE_START` (numpy is
    about 0.1 s of a node's start-up CPU; fractions and tempfile a few ms each). The first use
    of an array, as a job's first message does (a tensor off the wire), imports numpy, and the
    array decoded is the one sent."""
    code = (
        "import json, struct, sys\n"
        f"import {module}\n"
        f"before = [m for m in {NOT_FOR_A_NODE_START!r} if m in sys.modules]\n"
        "from netdp.v1 import common_pb2\n"
        "from netdp_node.wire import tensor_to_ndarray\n"
        "t = common_pb2.Tensor(dtype='float64', shape=[3], data=struct.pack('<3d', 1.5, -2.0, 7.25))\n"
        "arr = tensor_to_ndarray(t)\n"
        "print(json.dumps({'before': before, 'numpy': 'numpy' in sys.modules, "
        "'type': type(arr).__module__ + '.' + type(arr).__name__, 'values': arr.tolist()}))\n"
    )
    assert _run(code) == {
        "before": [],
        "numpy": True,
        "type": "numpy.ndarray",
        "values": [1.5, -2.0, 7.25],
    }


def test_a_node_imports_the_job_accounting_at_its_first_use():
    """The runtime and the daemon name the job-time modules (`JOB_TIME`) lazily: a node's import
    loads none of them, their first use loads them and gives what the modules hold (a budget
    check that declines a job over the budget, the contributions of a report, the seeded mark)."""
    code = (
        "import json, sys\n"
        "import netdp_node.daemon as d, netdp_node.runtime as r\n"
        f"before = [m for m in {JOB_TIME!r} if m in sys.modules]\n"
        "from netdp_node.ledger import Entry\n"
        "entries = [Entry('j', 'local', 'contribute'), Entry('j', 'local', 'contribute'),\n"
        "           Entry('j', 'local', 'fenced', params={'discarded': 1})]\n"
        "got = {'not_run': r.accounting.NOT_RUN, 'check': r.budgets.check_budget.__module__,\n"
        "       'events': list(d.accounting.CONTRIBUTION_EVENTS),\n"
        "       'contributions': d.accounting.contributions_in_result(entries),\n"
        "       'seeded': d.threat.SEEDED_RNG_EVENT}\n"
        f"after = [m for m in {JOB_TIME!r} if m in sys.modules]\n"
        "print(json.dumps({'before': before, 'got': got, 'after': after}))\n"
    )
    assert _run(code) == {
        "before": [],
        "got": {
            "not_run": "cannot-run",
            "check": "netdp_node.algorithms.budget",
            "events": ["contribute", "fenced"],
            "contributions": 1,
            "seeded": "seeded-rng",
        },
        "after": list(JOB_TIME),
    }


def test_the_catalog_is_the_registry():
    """The names the help reads (catalog) are the registry's, in its order, and each demo line is
    the one its record's hooks give `netdp demo`."""
    assert list(catalog.NAMES) == list(ALGORITHMS)
    assert dict(catalog.DEMOS) == {k: a.hooks.demo for k, a in ALGORITHMS.items()}
    assert any(catalog.DEMOS.values()) and not all(catalog.DEMOS.values())


def test_a_catalog_that_drifted_is_refused():
    """Building the registry checks the catalog: a missing, extra or reordered name, or another
    demo line, is an error naming the catalog."""
    records = [(k, a.hooks.demo) for k, a in ALGORITHMS.items()]
    catalog.check_registry(records)
    for bad in (
        records[:-1],
        [*records, ("walk-new", None)],
        [records[1], records[0], *records[2:]],
        [(records[0][0], "another line"), *records[1:]],
    ):
        with pytest.raises(NetdpError, match="catalog.DEMOS does not match the registry"):
            catalog.check_registry(bad)


def test_help_texts_name_every_algorithm():
    """`netdp demo --help` lists every algorithm of the registry (with a demo, or under "no
    demo"); the list `netdp simulate --help` gives for --algorithm names them all too."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    demo_help = subs.choices["demo"].format_help()
    for name, what in catalog.DEMOS.items():
        if what:
            assert re.search(rf"^  {re.escape(name)} +\S", demo_help, re.M), name
    no_demo = demo_help.split("no demo", 1)[1].split("\n\n", 1)[0]
    assert sorted(k for k, w in catalog.DEMOS.items() if not w) == sorted(
        k for k in ALGORITHMS if re.search(rf"\b{re.escape(k)}\b(?!-)", no_demo)
    )
    sim = next(
        a for a in subs.choices["simulate"]._actions if "--algorithm" in a.option_strings
    ).help
    assert sim is not None
    listed = sim.split(":", 1)[1].split("(default")[0]
    assert sorted(re.findall(r"[a-z][a-z0-9-]*[a-z0-9]", listed.replace(" or ", ", "))) == sorted(
        ALGORITHMS
    )


def test_long_lived_imports_spare_the_collector():
    """Inside `long_lived_imports` a node's imports run with no collection at all, the objects
    they made are frozen after (out of every later collection's reach), and the collector is on
    again after, or stays off if it was off. Each in a fresh interpreter; the same imports without
    it run dozens of collections."""
    count = (
        "import gc, json\n"
        "from netdp_node.lazy import long_lived_imports\n"
        "runs = []\n"
        "gc.callbacks.append(lambda phase, info: runs.append(1) if phase == 'start' else None)\n"
    )
    code = count + (
        "with long_lived_imports():\n"
        "    import netdp_node.host\n"
        "inside, frozen, on = len(runs), gc.get_freeze_count(), gc.isenabled()\n"
        "gc.disable()\n"
        "with long_lived_imports():\n"
        "    import netdp_node.simulate\n"
        "print(json.dumps({'inside': inside, 'frozen': frozen, 'on': on, 'off': gc.isenabled(), "
        "'more': gc.get_freeze_count() > frozen}))\n"
    )
    got = _run(code)
    assert got["frozen"] > 10_000  # type: ignore[operator]  # the modules' functions, classes, dicts
    assert got == {"inside": 0, "frozen": got["frozen"], "on": True, "off": False, "more": True}
    without = _run(count + "import netdp_node.host\nprint(json.dumps({'runs': len(runs)}))\n")
    assert without["runs"] > 5  # type: ignore[operator]  # what the same imports collect otherwise


#: a command line that imports what the daemon runs on and stops after checking its configuration
_STOPS_AT_CONFIG = {
    "node": ["node", "--bootstrap", "127.0.0.1:1", "--ledger", "/nonexistent/netdp/l.db"],
    "bootstrap": ["bootstrap", "--state", "/nonexistent/netdp/state"],
}


@pytest.mark.parametrize("command", sorted(_STOPS_AT_CONFIG))
def test_a_daemon_command_freezes_its_imports(command):
    """`netdp node` and `netdp bootstrap` import what they run on inside `long_lived_imports`: even
    `--check` (of a certificate folder not there yet), which returns before serving, has frozen
    them, with the collector on again."""
    argv = [*_STOPS_AT_CONFIG[command], "--certs", "/nonexistent/netdp/certs", "--check"]
    code = (
        "import gc, json, contextlib, io\n"
        "from netdp_node.cli import main\n"
        "before = gc.get_freeze_count()\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        "    try:\n"
        f"        code = main({argv!r})\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        "print(json.dumps({'code': code, 'err': err.getvalue(), 'before': before, "
        "'after': gc.get_freeze_count(), 'on': gc.isenabled()}))\n"
    )
    got = _run(code)
    assert got["code"] == 0 and "not present yet" in got["err"]  # type: ignore[operator]
    assert got["before"] == 0 and got["on"] is True
    assert got["after"] > 10_000  # type: ignore[operator]
