"""Import cost benchmark (netdp issue 15): the CPU time and memory a process spends before it does
anything, for the commands a node or an operator starts:

* ``python -c "import netdp_node.daemon"``: what every node daemon loads;
* ``python -c "import netdp_bootstrap.server"``: what the bootstrap service loads;
* ``netdp --help`` and ``python -m netdp_node.cli node --help``: the command line;
* ``python -c "pass"``: the interpreter alone, the floor under every other line;
* the third-party packages a node cannot start without (numpy, grpc, cryptography, protobuf,
  asyncio), imported alone: the floor under a node's import.

    python benchmarks/bench_import.py            # 7 runs per command
    python benchmarks/bench_import.py --quick    # 3 runs per command
    python benchmarks/bench_import.py --out FILE # write FILE instead of results/import.json
    python benchmarks/bench_import.py --no-bytecode-cache  # compile every module at every run

Each command runs as a child process of this one; its CPU time (user + system) and peak resident
set size come from the kernel's accounting of that child (`os.wait4`, the per-child form of
``resource.getrusage(RUSAGE_CHILDREN)``), so the figures do not depend on wall-clock time or on
how busy the machine is (the load average before and after is recorded all the same). The children
import the checkout this script belongs to (PYTHONPATH) and, as an installed package does, read
compiled bytecode: it is cached in a temporary PYTHONPYCACHEPREFIX by a warm-up run (so the
figures hold even where PYTHONDONTWRITEBYTECODE is set; --no-bytecode-cache measures compiling
too). Per command
the minimum and median over runs are reported, and which heavy third-party packages (scipy,
matplotlib, networkx, ...) the import left in ``sys.modules``. Writes
benchmarks/results/import.json (--quick: import-quick.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parent.parent
HEAVY = (
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
        "import netdp_node.daemon": [py, "-c", "import netdp_node.daemon"],
        "import netdp_bootstrap.server": [py, "-c", "import netdp_bootstrap.server"],
        "python -m netdp_node.cli node --help": [py, "-m", "netdp_node.cli", "node", "--help"],
    }
    if netdp:
        out["netdp --help"] = [netdp, "--help"]
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
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netdp-bench-import-") as pycache:
        measure(args, None if args.no_bytecode_cache else pycache)


def measure(args: argparse.Namespace, pycache: str | None) -> None:
    runs = args.runs or (3 if args.quick else 7)
    env = child_env(pycache)
    out_path = args.out or common.result_path("import", args.quick)
    facts = common.machine()
    results = {}
    for name, cmd in commands().items():
        run_once(cmd, env)  # warm the file cache and the bytecode cache
        cpu, rss = zip(*(run_once(cmd, env) for _ in range(runs)))
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
            f"{name[:40]:40s} CPU min {min(cpu):.3f} s  median {statistics.median(cpu):.3f} s  "
            f"RSS median {statistics.median(rss):.0f} MiB"
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
        "machine": facts,
        "commands": results,
        "heavy_modules_loaded": loaded,
    }
    print(f"wrote {common.write_results('import', report, out=out_path)}")


if __name__ == "__main__":
    main()
