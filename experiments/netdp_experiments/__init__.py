"""`netdp reproduce NAME`: the papers' experiments, each writing NAME.json and NAME.png.

Registry of experiments: name -> (module, one-line description). Each module has
`run(args) -> dict` (JSON-friendly: parameters, the numbers, reference numbers beside them, notes)
and `plot(result, path)`. Results and the machine they ran on are quoted in docs/reproductions.md.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from netdp_node.errors import ConfigError

EXPERIMENTS: dict[str, tuple[str, str]] = {
    "network-dp-fig1a": (
        "fig1a",
        "Cyffers & Bellet (AISTATS 2022) Fig. 1(a), §5.1: theoretical bounds, real summation",
    ),
    "network-dp-fig1b": (
        "fig1b",
        "Cyffers & Bellet Fig. 1(b), §5.1: walk-conditional audit of simulated walks, "
        "real summation",
    ),
    "network-dp-fig3": ("fig1b", "Cyffers & Bellet Fig. 3 (App. H): the same audit for histograms"),
    "network-dp-fig2": (
        "fig2",
        "Cyffers & Bellet Fig. 2, §5.2: logistic regression, central / local / network "
        "DP-SGD, as the authors' code ran it and as the theorems require",
    ),
    "random-walks-fig1": (
        "rw_fig1",
        "Cyffers, Bellet & Upadhyay (ICML 2024) Fig. 1, §7: loss vs distance, random "
        "walk vs gossip, anonymous sender, n ≈ 2048",
    ),
    "random-walks-fig4": (
        "rw_fig1",
        "Cyffers, Bellet & Upadhyay Fig. 4 (App. B.1): the same with a known sender",
    ),
    "random-walks-fig2": (
        "rw_fig2",
        "Cyffers, Bellet & Upadhyay Fig. 2, §7: logistic regression, 2048 users × 8, "
        "central / local / random-walk DP-SGD at ε = 1 on three graphs",
    ),
    "random-walks-table1": (
        "rw_table1",
        "Cyffers, Bellet & Upadhyay Table 1, §7: accuracy at mean loss 0.5 / 1 / 2, "
        "random walk vs Muffliato-GD on four graphs",
    ),
    "random-walks-fig3": (
        "rw_fig3",
        "Cyffers, Bellet & Upadhyay Fig. 3, §7: privacy loss vs communicability and "
        "centrality on Davis and other networkx graphs",
    ),
    "muffliato-fig1a": (
        "muffliato_fig1a",
        "Muffliato (Cyffers et al., NeurIPS 2022) Fig. 1(a), §5: loss vs shortest-path "
        "length, paper eq. (6) and the exact joint view",
    ),
    "muffliato-fig1b": (
        "muffliato_fig1b",
        "Muffliato Fig. 1(b), §5: loss from one node on social "
        "graphs networkx ships (the Facebook ego graphs are not offline)",
    ),
    "inca-fig2": (
        "inca",
        "IncA (Sabater, Ben Mokhtar & Ramon 2025) Fig. 1, §5: MSE against the fraction "
        "of colluders beside central DP, local DP and Muffliato",
    ),
    "inca-fig3": (
        "inca",
        "IncA (Sabater et al. 2025) Fig. 2, §5: probability that Theorem 4.5's "
        "precondition holds against k and T",
    ),
    "inca-fig4": (
        "inca",
        "IncA (Sabater et al. 2025) Fig. 4, §5: MSE under permanent dropouts, early vs "
        "incremental injection and a GOPA-style baseline (docs/errata.md)",
    ),
    "muffliato-fig1c": (
        "muffliato_fig1c",
        "Muffliato Fig. 1(c) / Table 2 (§5, App. H.5): Muffliato-GD on a fresh "
        "ER graph per step vs a trusted aggregator, housing data",
    ),
    "muffliato-fig6": (
        "muffliato_fig6",
        "Muffliato Fig. 6 / Table 3 (appendix): averaging with dropout on "
        "fresh sparse ER graphs, total privacy loss of node 0",
    ),
}


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run(name: str, args: Any) -> dict[str, Any]:
    if name not in EXPERIMENTS:
        raise KeyError(name)
    mod = importlib.import_module(f"netdp_experiments.{EXPERIMENTS[name][0]}")
    from netdp_experiments import engine_runs  # lazy: start-up cost

    impl = engine_runs.implementation(name, args)
    if getattr(args, "implementation", None) and not impl:
        raise ConfigError(
            f"{name} has one implementation (no --engine/--vectorised choice); the choice is "
            f"for {', '.join(engine_runs.ENGINE_RUNS)}"
        )
    t0 = time.perf_counter()
    if impl == engine_runs.ENGINE:
        result = engine_runs.ENGINE_RUNS[name](name, args)
    else:
        result = mod.run(name, args)
    if impl:
        result["implementation"] = impl
    result["experiment"] = name
    result["description"] = EXPERIMENTS[name][1]
    result["wall_s"] = time.perf_counter() - t0
    result["machine"] = machine()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-engine" if impl == engine_runs.ENGINE else name  # beside the default's files
    result["files"] = stem
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    plot = mod.plot
    if impl == engine_runs.ENGINE:
        plot = engine_runs.ENGINE_PLOTS.get(name, mod.plot)
    plot(result, out / f"{stem}.png")
    return result


def require_matplotlib() -> None:
    """The experiments draw their figures with matplotlib, an optional dependency (the
    `experiments` extra: a node does not need it). Raises ConfigError saying how to install it."""
    try:
        import matplotlib  # noqa: F401  # lazy: start-up cost; optional (the experiments extra)
    except ImportError:
        raise ConfigError(
            "netdp reproduce draws its figures with matplotlib, which is not "
            "installed: pip install 'netdp[experiments]'"
        ) from None


def cmd_reproduce(args: Any) -> int:
    if args.name == "list" or args.name not in EXPERIMENTS:
        if args.name != "list":
            print(f"netdp reproduce: unknown experiment {args.name!r}", file=sys.stderr)
        for k, (_, d) in EXPERIMENTS.items():
            print(f"  {k:<20} {d}")
        return 0 if args.name == "list" else 2
    require_matplotlib()
    res = run(args.name, args)
    impl = f" ({res['implementation']})" if res.get("implementation") else ""
    print(
        f"{args.name}{impl}: done in {res['wall_s']:.1f} s; wrote {args.out}/{res['files']}.json "
        "and .png"
    )
    for line in res.get("summary", []):
        print(f"  {line}")
    return 0
