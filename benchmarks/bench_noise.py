"""Noise sampling benchmark (netdp issue 13, defect 6): the cost per sample of the exact discrete
Gaussian on the job's grid (`netdp_node.privacy.discrete_gaussian.gaussian_on_grid`, what the
engines release) against NumPy's floating-point `Generator.normal` (what they used before), both
on the node's generator (ChaCha20, randomgen), for several σ (so several grid scales σ/γ) and
batch sizes (a token's dimension).

    python benchmarks/bench_noise.py            # 5 repetitions, batches 1, 16, 1024, 65536
    python benchmarks/bench_noise.py --quick    # 2 repetitions, smaller batches

Each cell is the median over repetitions of (wall time of one call)/(samples in the call), after a
warm-up call; the machine (Python, platform, CPUs) and the load average before and after are
recorded. Writes benchmarks/results/noise.json (--quick: noise-quick.json).
"""

from __future__ import annotations

import argparse
import statistics
import time

import common
import numpy as np

from netdp_node.privacy.discrete_gaussian import GRID_BITS, gaussian_on_grid, grid_for
from netdp_node.runtime import private_rng


def per_sample(fn, size: int, reps: int) -> float:
    """Median seconds per sample of fn(size), at least ~20k samples per repetition."""
    calls = max(1, 20_000 // size)
    fn(size)  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(size)
        times.append((time.perf_counter() - t0) / (calls * size))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 2 if args.quick else 5
    sizes = [1, 16, 1024] if args.quick else [1, 16, 1024, 65536]
    sigmas = [1e-3, 1.0, 37.5, 1e6]
    facts = common.machine(["numpy", "randomgen"])
    rows = []
    for sigma in sigmas:
        grid = grid_for(sigma)
        for size in sizes:
            rng_d, rng_f = private_rng(), private_rng()
            x = np.linspace(-1.0, 1.0, size)
            disc = per_sample(
                lambda s, r=rng_d, x=x, sd=sigma, g=grid: gaussian_on_grid(r, x, sd, g), size, reps
            )
            flt = per_sample(
                lambda s, r=rng_f, x=x, sd=sigma: x + r.normal(0.0, sd, size=s), size, reps
            )
            rows.append(
                {
                    "sigma": sigma,
                    "grid": grid,
                    "scale_sigma_over_grid": sigma / grid,
                    "batch": size,
                    "discrete_us_per_sample": disc * 1e6,
                    "float_normal_us_per_sample": flt * 1e6,
                    "ratio": disc / flt,
                }
            )
            print(
                f"σ={sigma:<8g} σ/γ={sigma / grid:<12.6g} batch={size:<6d} "
                f"discrete {disc * 1e6:8.3f} µs  normal {flt * 1e6:8.4f} µs  ×{disc / flt:7.1f}",
                flush=True,
            )
    out = {
        "benchmark": "noise",
        "command": "python benchmarks/bench_noise.py" + (" --quick" if args.quick else ""),
        "grid_bits": GRID_BITS,
        "repetitions": reps,
        "rows": rows,
        "machine": facts,
    }
    path = common.write_results("noise", out, args.quick)
    print(
        f"load average before {facts['loadavg_at_start']}, after {facts['loadavg_at_end']}; "
        f"wrote {path}"
    )


if __name__ == "__main__":
    main()
