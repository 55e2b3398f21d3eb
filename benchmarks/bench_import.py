"""Import cost benchmark (netdp issue 15): the CPU time and memory a process spends before it does
anything, for the commands a node or an operator starts:

* ``python -c "import netdp_node.daemon"``: what every node daemon loads;
* the same and then the algorithm registry (``get_algorithm``), which a node builds when it meets
  its first job (every family's engines, parameters, accountants and hooks);
* ``python -c "import netdp_bootstrap.server"``: what the bootstrap service loads;
* ``netdp --help``, ``netdp demo --help`` (the algorithms listed) and ``python -m netdp_node.cli
  node --help``: the command line;
* ``python -c "pass"``: the interpreter alone, the floor under every other line;
* the node's import and the floor again, ended by ``os._exit(0)``: the import without the
  interpreter's teardown (a starting node does not pay it; every other line does);
* ``import netdp_node.host`` as ``netdp node`` runs it (`netdp_node.lazy.long_lived_imports`: no
  garbage collection during the imports, their objects frozen after, out of the teardown's way);
* the third-party packages a node cannot start without (numpy, grpc, cryptography, protobuf,
  asyncio), imported together, the floor under a node's import, and each alone;
* a hosted node (``netdp node``, as `netdp_node.cluster` starts one) with a real bootstrap on
  loopback: its CPU time until it has registered and serves (its port file), per fresh process
  (``--no-served`` skips it).

    python benchmarks/bench_import.py            # 7 runs per command
    python benchmarks/bench_import.py --quick    # 3 runs per command
    python benchmarks/bench_import.py --out FILE # write FILE instead of results/import.json
    python benchmarks/bench_import.py --no-bytecode-cache  # compile every module at every run

Each command runs as a child process of this one, the commands in turn (run 1 of every command,
then run 2, ...: a load that changes during the benchmark weighs on all of them alike); its CPU
time (user + system) and peak resident set size come from the kernel's accounting of that child
(`os.wait4`, the per-child form of ``resource.getrusage(RUSAGE_CHILDREN)``), so the figures do not
count time spent waiting for a CPU; a loaded machine still inflates them (shared caches, SMT
siblings), so compare lines of one run, and read the load average recorded before and after. The
children import the checkout this script belongs to (PYTHONPATH) and, as an installed package
does, read compiled bytecode: it is cached in a temporary PYTHONPYCACHEPREFIX by a warm-up run (so
the figures hold even where PYTHONDONTWRITEBYTECODE is set; --no-bytecode-cache measures compiling
too). Per command the minimum and median over runs are reported, and which heavy third-party
packages (asyncio, grpc, numpy, scipy, ...) the import left in ``sys.modules``. Writes
benchmarks/results/import.json (--quick: import-quick.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parent.parent
HEAVY = (
    "asyncio",
    "google.protobuf",
    "rich",
    "scipy",
    "scipy.stats",
    "scipy.sparse",
    "matplotlib",
    "networkx",
    "randomgen",
    "grpc",
    "cryptography",
    "numpy",
)
#: the third-party packages of the floor, each measured alone too
FLOOR = ("numpy", "grpc, grpc.aio", "cryptography.x509", "google.protobuf", "asyncio")
TARGET_CPU_S = 0.3  # issue 15: a node's import and `netdp --help` under 0.3 s of CPU


def commands() -> dict[str, list[str]]:
    py = sys.executable
    netdp = shutil.which("netdp", path=str(Path(py).parent)) or shutil.which("netdp")
    out = {
        "python (interpreter only)": [py, "-c", "pass"],
        # what a node cannot start without (numpy, gRPC, X.509, protobuf, asyncio): the floor
        "third-party floor (numpy, grpc, cryptography, protobuf, asyncio)": [
            py,
            "-c",
            "import numpy, grpc, grpc.aio, cryptography.x509, google.protobuf, asyncio",
        ],
        **{f"floor: import {m}": [py, "-c", f"import {m}"] for m in FLOOR},
        "import netdp_node.daemon": [py, "-c", "import netdp_node.daemon"],
        # the import alone: a starting node never pays the interpreter's teardown (about 0.1 s
        # with numpy, grpc and cryptography loaded), which every line above includes
        "third-party floor, then os._exit (no teardown)": [
            py,
            "-c",
            "import numpy, grpc, grpc.aio, cryptography.x509, google.protobuf, asyncio, os; "
            "os._exit(0)",
        ],
        "import netdp_node.daemon, then os._exit (no teardown)": [
            py,
            "-c",
            "import netdp_node.daemon, os; os._exit(0)",
        ],
        # as `netdp node` imports them: the collector off during the imports, their objects frozen
        # after (netdp_node.lazy.long_lived_imports), so neither the imports nor the teardown
        # collect over them
        "import netdp_node.host as `netdp node` does (long_lived_imports)": [
            py,
            "-c",
            "from netdp_node.lazy import long_lived_imports\n"
            "with long_lived_imports():\n"
            "    import netdp_node.host",
        ],
        "import netdp_node.daemon + the registry (a node's first job)": [
            py,
            "-c",
            "import netdp_node.daemon; from netdp_node.algorithms import get_algorithm; "
            "get_algorithm('ring-sum')",
        ],
        "import netdp_bootstrap.server": [py, "-c", "import netdp_bootstrap.server"],
        "python -m netdp_node.cli node --help": [py, "-m", "netdp_node.cli", "node", "--help"],
    }
    if netdp:
        out["netdp --help"] = [netdp, "--help"]
        out["netdp demo --help"] = [netdp, "demo", "--help"]
    return out


def child_env(pycache: str | None) -> dict[str, str]:
    # The subject is this checkout's import cost, so the children import ROOT by the ordinary path
    # finder (as from a non-editable install), whatever copy of netdp this Python has installed.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MiB) of one run of `argv`, from the kernel's account of the
    child."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    # ru_maxrss is in KiB on Linux
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def heavy_modules(module: str, env: dict[str, str]) -> list[str]:
    code = (
        f"import sys, json, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env, cwd=ROOT
    )
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 runs per command instead of 7")
    ap.add_argument("--runs", type=int, default=None, help="runs per command")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile the sources at every run (no .pyc)",
    )
    ap.add_argument(
        "--no-served",
        action="store_true",
        help="skip the hosted node's CPU until it serves (certificates, a bootstrap, N nodes)",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netdp-bench-import-") as pycache:
        measure(args, None if args.no_bytecode_cache else pycache)


def served(runs: int, env: dict[str, str]) -> list[float]:
    """CPU seconds (user + system, /proc) each of `runs` fresh `netdp node` processes has used when
    it has registered with a real bootstrap and serves (its port file), one after the other on
    loopback after a warm-up node; every process is stopped before this returns."""
    from netdp_node.cluster import LocalCluster
    from netdp_node.waiting import cpu_ticks

    tick = os.sysconf("SC_CLK_TCK")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the cluster's children import this checkout, as the commands do
    work = Path(tempfile.mkdtemp(prefix="netdp-bench-import-served-"))
    c = LocalCluster(work, runs + 1, log_level="warning")
    cpu = []
    try:
        c.setup_pki()
        c.wait_port(c.start_bootstrap(), 120)
        for i, nid in enumerate(c.ids):
            p = c.start_node(nid)
            c.ports[nid] = c.wait_port(p, 120)
            assert p.popen is not None
            ticks = cpu_ticks(p.popen.pid)
            p.popen.send_signal(signal.SIGTERM)
            p.popen.wait(timeout=60)
            if i and ticks is not None:
                cpu.append(ticks / tick)
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)
    return cpu


def measure(args: argparse.Namespace, pycache: str | None) -> None:
    runs = args.runs or (3 if args.quick else 7)
    env = child_env(pycache)
    out_path = args.out or common.result_path("import", args.quick)
    facts = common.machine()
    cmds = commands()
    for cmd in cmds.values():
        run_once(cmd, env)  # warm the file cache and the bytecode cache
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):  # in turn: a changing load weighs on every command alike
        for name, cmd in cmds.items():
            samples[name].append(run_once(cmd, env))
    results = {}
    for name, cmd in cmds.items():
        cpu, rss = zip(*samples[name])
        results[name] = {
            "argv": [Path(cmd[0]).name, *cmd[1:]],
            "runs": runs,
            "cpu_s": {
                "min": round(min(cpu), 4),
                "median": round(statistics.median(cpu), 4),
                "max": round(max(cpu), 4),
            },
            "rss_mib": {"min": round(min(rss), 1), "median": round(statistics.median(rss), 1)},
        }
        print(
            f"{name[:44]:44s} CPU min {min(cpu):.3f} s  median {statistics.median(cpu):.3f} s  "
            f"RSS median {statistics.median(rss):.0f} MiB"
        )
    serving = None
    if not args.no_served:
        cpu_served = served(runs, env)
        serving = {
            "what": "netdp node (one node, a real bootstrap on loopback): CPU until registered "
            "and serving (port file), per fresh process",
            "runs": len(cpu_served),
            "cpu_s": {
                "min": round(min(cpu_served), 3),
                "median": round(statistics.median(cpu_served), 3),
                "max": round(max(cpu_served), 3),
            },
        }
        print(
            f"{'netdp node: until registered and serving':44s} CPU min {min(cpu_served):.3f} s  "
            f"median {statistics.median(cpu_served):.3f} s"
        )
    loaded = {
        m: heavy_modules(m, env)
        for m in ("netdp_node.daemon", "netdp_bootstrap.server", "netdp_node.cli")
    }
    for m, mods in loaded.items():
        print(f"import {m} loads: {', '.join(mods) or 'none of ' + ', '.join(HEAVY)}")
    report = {
        "benchmark": "import cost (CPU time and peak RSS of a fresh process)",
        "target_cpu_s": TARGET_CPU_S,
        "bytecode": "cached (.pyc, as installed)" if pycache else "compiled at every run",
        "checkout": str(ROOT.name),
        "commit": common.git(ROOT, "rev-parse", "--short", "HEAD"),
        "machine": facts,
        "commands": results,
        "hosted_node_until_serving": serving,
        "heavy_modules_loaded": loaded,
    }
    print(f"wrote {common.write_results('import', report, out=out_path)}")


if __name__ == "__main__":
    main()
