"""The bootstrap's CPU while N registered nodes sit idle, hosted in 2 processes, for two code trees
run alternately (paired): does it grow with the number of idle nodes?

    python benchmarks/bench_idle_bootstrap.py --variant before=/tmp/main-tree --variant after=-
    python benchmarks/bench_idle_bootstrap.py --sizes 100,500,1000 --idle 120 --pairs 2 ...
    python benchmarks/bench_idle_bootstrap.py --quick ...        # N = 40, 20 s idle, one pair

A variant is NAME=TREE: TREE ("-": this checkout) is put first on PYTHONPATH of every process the
run starts (the bootstrap and the hosts), so that another checkout, e.g. main, runs with the same
interpreter. The processes start in the run's own folder (`python -m` puts the current folder before
PYTHONPATH: started in a checkout, they would run that checkout), and every run checks that its
processes import netdp_node from TREE (`imported_from`). For each N and pair, each variant once,
their order alternating from pair to pair (ABBA): a fresh bootstrap (real mTLS on loopback, its
SQLite store), then 2 `netdp node --certs ...` processes of N/2 nodes each (the registration storm:
`startup_s`, from the first spawn until every node registered), `--settle` seconds for the start-up
to end, then `--idle` seconds in which nothing is submitted. Measured over the idle window, from
/proc: the CPU time (user + system) of the bootstrap (`bootstrap_cpu_s`, and per minute) and of the
two hosts. The long poll has its production length (25 s) in every variant. The load average is
recorded before and after each run. Writes benchmarks/results/idle_bootstrap.json (--quick:
idle_bootstrap-quick.json). Every process it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from netdp_node.cluster import LocalCluster
from netdp_node.waiting import cpu_ticks

TICK = os.sysconf("SC_CLK_TCK")
HERE = Path(__file__).resolve()
HOSTS = 2


def _variant(text: str) -> tuple[str, str]:
    name, sep, tree = text.partition("=")
    if not sep or not name or not tree:
        raise argparse.ArgumentTypeError(
            f"--variant takes NAME=TREE (TREE '-': this checkout), got {text!r}"
        )
    if tree != "-" and not (Path(tree) / "netdp_node" / "cli.py").is_file():
        raise argparse.ArgumentTypeError(f"--variant {text}: {tree} has no netdp_node/cli.py")
    return name, tree


def _tree(tree: str) -> Path:
    return HERE.parent.parent if tree == "-" else Path(tree).resolve()


def run_once(pki_dir: Path, n: int, tree: str, settle: float, idle: float) -> dict[str, Any]:
    """One run: a bootstrap and 2 hosts of n/2 nodes from `tree`, measured over `idle` seconds."""
    work = Path(tempfile.mkdtemp(prefix="netdp-bench-idle-"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(_tree(tree)) + (os.pathsep + old if old else "")
    cwd = os.getcwd()
    os.chdir(work)  # (see the module's docstring)
    c = LocalCluster(work, n, log_level="warning", poll_interval=0.5)
    try:
        imported = subprocess.run(
            [sys.executable, "-c", "import netdp_node; print(netdp_node.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if Path(imported).resolve().parent.parent != _tree(tree):
            raise RuntimeError(f"variant tree {_tree(tree)}, but the processes import {imported}")
        shutil.copytree(pki_dir, c.pki_dir)  # the same identities every run (node-1 .. node-n)
        load_before = common.load_average()
        c.wait_port(c.start_bootstrap(), 60)
        t0 = time.monotonic()
        hosts = []
        for k in range(HOSTS):
            part = c.ids[k * n // HOSTS : (k + 1) * n // HOSTS]
            hosts.append(c.start_host(f"host-{k + 1}", part))
        for h in hosts:
            c.wait_host(h, 300)
        startup = time.monotonic() - t0
        time.sleep(settle)
        pids = {"bootstrap": c.procs["bootstrap"].popen.pid}  # type: ignore[union-attr]
        pids |= {h.name: h.popen.pid for h in hosts}  # type: ignore[union-attr]
        before = {k: cpu_ticks(p) or 0 for k, p in pids.items()}
        w0 = time.monotonic()
        time.sleep(idle)
        after = {k: cpu_ticks(p) or 0 for k, p in pids.items()}
        window = time.monotonic() - w0
        alive = all(p.alive() for p in c.procs.values())
        cpu = {k: (after[k] - before[k]) / TICK for k in pids}
        return {
            "nodes": n,
            "imported_from": imported,
            "startup_s": round(startup, 2),
            "idle_s": round(window, 2),
            "bootstrap_cpu_s": round(cpu["bootstrap"], 3),
            "bootstrap_cpu_s_per_min": round(cpu["bootstrap"] * 60 / window, 3),
            "hosts_cpu_s": round(sum(v for k, v in cpu.items() if k != "bootstrap"), 3),
            "all_alive": alive,
            "loadavg_before": load_before,
            "loadavg_after": common.load_average(),
        }
    finally:
        codes = c.stop(grace=30)
        os.chdir(cwd)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        bad = {k: v for k, v in codes.items() if v != 0}
        if bad:
            print(f"  (exit codes {bad})", flush=True)
        shutil.rmtree(work, ignore_errors=True)


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{variant: {N: {"runs": the bootstrap's CPU-s per idle minute of each pair, "mean"}}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        cell = out.setdefault(r["variant"], {}).setdefault(str(r["nodes"]), {"runs": []})
        cell["runs"].append(r["bootstrap_cpu_s_per_min"])
        cell["mean"] = round(sum(cell["runs"]) / len(cell["runs"]), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--variant", type=_variant, action="append", required=True, metavar="NAME=TREE")
    ap.add_argument("--sizes", default="100,500,1000")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after start-up (30)")
    ap.add_argument("--idle", type=float, default=120.0, help="the measured window (120 s)")
    ap.add_argument("--quick", action="store_true", help="N = 40, 20 s idle, one pair")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    sizes = [40] if a.quick else [int(x) for x in a.sizes.split(",")]
    pairs = 1 if a.quick else a.pairs
    idle = 20.0 if a.quick else a.idle
    settle = 5.0 if a.quick else a.settle
    facts = common.machine(["grpcio"])
    trees = {name: str(_tree(tree)) for name, tree in a.variant}
    commits = {name: common.git(Path(t), "rev-parse", "HEAD") for name, t in trees.items()}
    pki_root = Path(tempfile.mkdtemp(prefix="netdp-bench-idle-pki-"))
    rows: list[dict[str, Any]] = []
    try:
        master = LocalCluster(pki_root, max(sizes))
        master.setup_pki()
        for n in sizes:
            for pair in range(pairs):
                order = a.variant if pair % 2 == 0 else list(reversed(a.variant))
                for name, tree in order:
                    row = {
                        "variant": name,
                        "pair": pair,
                        **run_once(master.pki_dir, n, tree, settle, idle),
                    }
                    rows.append(row)
                    print(
                        f"N={n:5d} pair {pair} {name:>8}: bootstrap {row['bootstrap_cpu_s']:7.2f} "
                        f"CPU-s in {row['idle_s']:.0f} s idle ({row['bootstrap_cpu_s_per_min']:.3f}"
                        f"/min), hosts {row['hosts_cpu_s']:.2f} CPU-s, start-up "
                        f"{row['startup_s']:.1f} s, load {row['loadavg_before'][0]:.1f}->"
                        f"{row['loadavg_after'][0]:.1f}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(pki_root, ignore_errors=True)
    summary = summarize(rows)
    res = {
        "benchmark": "idle_bootstrap",
        "machine": facts,
        "variants": {name: {"tree": trees[name], "commit": commits[name]} for name, _ in a.variant},
        "hosts": HOSTS,
        "long_poll_s": 25.0,
        "settle_s": settle,
        "rows": rows,
        "bootstrap_cpu_s_per_min": summary,
        "note": "the bootstrap's CPU over an idle window with N registered nodes hosted in 2 "
        "processes, variants alternated per pair (ABBA); the machine is shared (see loadavg)",
    }
    out = common.write_results("idle_bootstrap", res, a.quick, out=a.out)
    for name, by_n in summary.items():
        print(
            f"{name}: bootstrap CPU-s per idle minute (mean of the pairs) "
            + ", ".join(f"N={k}: {v['mean']}" for k, v in by_n.items())
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
