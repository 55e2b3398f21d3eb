"""Fig. 1(a) of Cyffers & Bellet (AISTATS 2022, §5.1): the theoretical privacy loss of real
summation on the complete graph against n, with T = 100n, ε0 = 0.1, δ = δ' = δ̂ = 1e-7.

Curves, as the authors' `fig1/main_a.py` draws them: `opti(e, δ, k) = min(adv(e, δ, k),
k·e)` (adv only for k ≥ 1e5) with
* LDP: e = ε0, k = N_v; NDP: e = 3ε0/√n, k = N_v + T/n;
* N_v as the code computes it, T/n + sqrt(1.5·T·ln(1/δ)) (erratum E20), and as the paper writes it,
  T/n + sqrt((3T/n) ln(1/δ̂)); fixed-contribution curves with N_v = 100.
Plus what netdp's accountant would report for the same walk (Theorem 3 with the tight cycle bound
and the exact binomial count, App. D formula with E7), for n ≤ 1e6.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from netdp_node.privacy.amplification import chernoff_count_bound
from netdp_node.privacy.token_walk import _adv, walk_sum_loss

EPS0, DELTA = 0.1, 1e-7
# independently computed reference values: n -> (LDP code, NDP code, LDP paper, NDP paper,
# LDP fixed, NDP fixed)
SPEC_ROWS = {
    1.0: (8.503, 53.04, 9.176, 56.25, 6.729, 45.08),
    10.83: (11.94, 13.00, 9.176, 10.84, 6.729, 9.062),
    23.95: (14.06, 9.014, 9.176, 6.759, 6.729, 5.697),
    117.2: (20.93, 4.828, 9.176, 2.793, 6.729, 2.381),
    1269: (43.90, 2.251, 9.176, 0.8042, 6.729, 0.6905),
    1.374e4: (105.1, 1.161, 9.176, 0.2403, 6.729, 0.2068),
    1.487e5: (278.9, 0.6230, 9.176, 0.07267, 6.729, 0.06258),
    1e10: (52970, 0.03781, 9.176, 2.796e-4, 6.729, 2.409e-4),
}
KEYS = ("ldp_code", "ndp_code", "ldp_paper", "ndp_paper", "ldp_fixed", "ndp_fixed")


def opti(e: float, delta: float, k: float) -> float:
    adv = _adv(e, delta, k, delta)[0]
    return adv if k >= 1e5 else min(adv, k * e)


def curves(n: float) -> dict[str, float]:
    T = 100.0 * n
    nv_code = T / n + math.sqrt(1.5 * T * math.log(1 / DELTA))
    nv_paper = (
        chernoff_count_bound(int(round(T)), min(1 / n, 1 - 1e-12), DELTA)
        if n > 1
        else T / n + math.sqrt(3 * T / n * math.log(1 / DELTA))
    )
    e_net = 3 * EPS0 / math.sqrt(n)
    return {
        "ldp_code": opti(EPS0, DELTA, nv_code),
        "ndp_code": opti(e_net, DELTA, nv_code + T / n),
        "ldp_paper": opti(EPS0, DELTA, nv_paper),
        "ndp_paper": opti(e_net, DELTA, nv_paper + T / n),
        "ldp_fixed": opti(EPS0, DELTA, 100),
        "ndp_fixed": opti(e_net, DELTA, 100 + T / n),
    }


def run(name: str, args: Any) -> dict[str, Any]:
    grid = np.logspace(0, 10, 30)
    rows = []
    for n in grid:
        row: dict[str, Any] = {"n": float(n), **curves(float(n))}
        ni = int(round(n))
        if 2 <= ni <= 10**6:
            b = walk_sum_loss(
                ni, 100 * ni, EPS0, DELTA, DELTA, DELTA, cycle="tight", counts="exact"
            )
            row["netdp_theorem3"] = b.epsilon
        rows.append(row)
    spec_check = []
    for n, vals in SPEC_ROWS.items():
        ours = curves(n)
        spec_check.append({"n": n, **{k: {"ours": ours[k], "spec": v} for k, v in zip(KEYS, vals)}})
    crossover = {}
    for lbl, (ldp, ndp) in {
        "code": ("ldp_code", "ndp_code"),
        "paper": ("ldp_paper", "ndp_paper"),
        "fixed": ("ldp_fixed", "ndp_fixed"),
    }.items():
        crossover[lbl] = next(n for n in range(2, 1000) if curves(n)[ndp] < curves(n)[ldp])
    return {
        "params": {"epsilon0": EPS0, "delta": DELTA, "T": "100 n", "grid": "logspace(0, 10, 30)"},
        "rows": rows,
        "spec_check": spec_check,
        "crossover": crossover,
        "crossover_spec": {"code": 13, "paper": 15, "fixed": 18},
        "summary": [
            f"first n with NDP < LDP: code N_v {crossover['code']} (spec 13), paper N_v "
            f"{crossover['paper']} (spec 15), fixed {crossover['fixed']} (spec 18)"
        ],
    }


def plot(res: dict[str, Any], path: Any) -> None:
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    rows = res["rows"]
    n = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    style = {
        "ldp_code": ("tab:blue", "-", "LDP (code N_v)"),
        "ndp_code": ("tab:green", "-", "NDP (code N_v)"),
        "ldp_paper": ("tab:blue", ":", "LDP (paper N_v)"),
        "ndp_paper": ("tab:green", ":", "NDP (paper N_v)"),
        "ldp_fixed": ("tab:blue", "--", "LDP fixed contribution"),
        "ndp_fixed": ("tab:green", "--", "NDP fixed contribution"),
    }
    for k, (c, ls, lbl) in style.items():
        ax.plot(n, [r[k] for r in rows], color=c, ls=ls, label=lbl)
    ours = [(r["n"], r["netdp_theorem3"]) for r in rows if "netdp_theorem3" in r]
    ax.plot(
        *zip(*ours), color="tab:red", marker=".", ls="-", label="netdp accountant (Thm 3 tight)"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n")
    ax.set_ylabel("privacy loss ε")
    ax.set_title("Fig. 1(a): real summation, T = 100n, ε0 = 0.1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
