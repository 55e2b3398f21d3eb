"""`netdp simulate --algorithm inca` before and after a change, paired: CPU seconds and peak RSS.

    python benchmarks/bench_inca_sim.py --before /tmp/base --nodes 256 512 --pairs 2
    python benchmarks/bench_inca_sim.py --nodes 2048 --pairs 1 --only after

`--before DIR` is a source tree of the code to compare with (e.g. `git archive main | tar -x -C
DIR`): its cases run with DIR first on PYTHONPATH, the others with the installed checkout. Each
case is the command line a user types (`netdp simulate --algorithm inca --nodes N --json --quiet
--seed S`, plus `--leave`/`--miss` when given), in a fresh process under an address-space cap
(`--max-memory-gb`, 9 by default), one at a time; the two versions alternate (before, after; then
after, before; ...), so that the machine's load falls on both alike. Records per case the CPU time
and peak resident set of that process (os.wait4), the wall time, the events (messages delivered)
and virtual time the command reports, the load average before and after, and whether its output
equals the other version's output of the same pair but for `wall_s`, `events` and
`virtual_time_s` (the estimate, the finals and the privacy must be the same). Appends to
benchmarks/results/inca_sim.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import common

#: what may differ between two versions' outputs of the same job (the protocol's traffic)
TRAFFIC = ("wall_s", "events", "virtual_time_s")


def run(
    version: str, before: str, n: int, seed: int, extra: list[str], gb: float, timeout: float
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "netdp_node.cli", "simulate", "--algorithm", "inca"]
    cmd += ["--nodes", str(n), "--json", "--quiet", "--seed", str(seed), *extra]
    env = dict(os.environ)
    if version == "before":
        env["PYTHONPATH"] = before + os.pathsep + env.get("PYTHONPATH", "")
    load = common.load_average()
    r = common.run_capped(cmd, cwd=tempfile.gettempdir(), env=env, gb=gb, timeout=timeout)
    case: dict[str, Any] = {
        "version": version,
        "n": n,
        "seed": seed,
        "args": " ".join(cmd[3:]),
        "cpu_s": r.cpu_s,
        "peak_rss_mb": r.peak_rss_mb,
        "wall_s": r.wall_s,
        "exit": r.code,
        "timed_out": r.timed_out,
        "load_avg_before": load,
        "load_avg_after": common.load_average(),
    }
    if r.code == 0 and not r.timed_out:
        res = json.loads(r.stdout)
        case["events"] = res["events"]
        case["virtual_time_s"] = round(float(res["virtual_time_s"]), 3)
        case["estimate"] = res.get("estimate")
        case["final"] = res.get("final")
        case["_output"] = {k: v for k, v in res.items() if k not in TRAFFIC}
    else:
        case["stderr_tail"] = r.stderr.decode(errors="replace")[-600:]
    return case


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, nargs="+", default=[256, 512])
    common.before_after(ap)
    ap.add_argument("--pairs", type=int, default=1, help="alternating pairs per size (1)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--leave", type=float, default=0.0)
    ap.add_argument("--miss", type=float, default=0.0)
    ap.add_argument("--max-memory-gb", type=float, default=9.0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    versions = common.versions(ap, a)
    extra = []
    if a.leave or a.miss:
        extra = ["--leave", str(a.leave), "--miss", str(a.miss)]
    path = common.RESULTS / "inca_sim.json"
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    run_ = {
        "label": a.label,
        "machine": common.machine(["numpy"]),
        "before_tree": a.before or None,
        "cases": [],
    }
    data["runs"].append(run_)
    data["benchmark"] = __doc__.strip().splitlines()[0]
    for n in a.nodes:
        for k in range(a.pairs):
            order = versions if k % 2 == 0 else versions[::-1]
            pair = []
            for v in order:
                case = run(v, a.before, n, a.seed, extra, a.max_memory_gb, a.timeout)
                case["pair"] = k
                pair.append(case)
                shown = {x: y for x, y in case.items() if not x.startswith("_")}
                print(json.dumps(shown), flush=True)
            outs = [c.get("_output") for c in pair]
            if len(pair) == 2 and all(o is not None for o in outs):
                same = outs[0] == outs[1]
                for c in pair:
                    c["same_output_as_pair"] = same
                print(json.dumps({"n": n, "pair": k, "same_output": same}), flush=True)
            for c in pair:
                c.pop("_output", None)
                run_["cases"].append(c)
            run_["machine"]["loadavg_at_end"] = common.load_average()
            common.write_results("inca_sim", common.finite(data), out=path)


if __name__ == "__main__":
    main()
