"""What `netdp demo`, `simulate` and `compose` ask the ring algorithms (`algorithms.hooks`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.hooks import (
    GAIN_MIN,
    DemoFlags,
    DemoRun,
    Hooks,
    PlanCase,
    PlanFigures,
    PlanKnob,
    PlanTarget,
    SimRun,
    SyntheticData,
    categories,
    gain_ratio,
    uniform_values,
)
from netdp_node.algorithms.ring.accountant import ring_sum_utility
from netdp_node.algorithms.ring.engine import RingSumR, clip_l2


def recorded_noise_std(entries: Mapping[str, Sequence[Any]], ids: Sequence[str]) -> float:
    """The std of all the noise the nodes' ledgers say they added (√ of the sum of the recorded
    σ² of every step): read from the ledgers, not from the engines."""
    var = 0.0
    for v in ids:
        for e in entries.get(v, []):
            if e.direction == "local" and "sigma" in e.params:
                var += float(e.params["sigma"]) ** 2
    return float(np.sqrt(var))


@dataclass(frozen=True)
class RingSumHooks(Hooks):
    """ring-sum (with a demo) and ring-sum-r."""

    synthetic: ClassVar[SyntheticData | None] = uniform_values

    demo: str | None = None
    composed: bool = True

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        eps = 0.5 if flags.epsilon is None else flags.epsilon
        return {
            "rounds": flags.rounds,
            "epsilon": eps,
            "delta": flags.delta,
            "clip": flags.clip,
            "delta_prime": flags.delta,
        }

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        p = params
        return f"ring sum, K={p['rounds']} rounds, per-window ε={p['epsilon']}, δ={p['delta']}"

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        a, p = run.flags, run.params
        util = ring_sum_utility({"participants": run.summary["participants"], "params": p})
        contributors = set(run.summary["contributors"])
        clipped = {nid: float(np.clip(v[0], -a.clip, a.clip)) for nid, v in run.values.items()}
        truth = sum(clipped[n] for n in run.ids if n in contributors)
        estimate = float(run.value[0])
        return {
            "rounds": a.rounds,
            "epsilon_per_window": p["epsilon"],
            "delta_per_window": a.delta,
            "sigma": p["sigma"],
            "estimate": estimate,
            "truth": truth,
            "abs_error": abs(estimate - truth),
            "netdp_std": util["netdp_std"],
            "ldp_std": util["ldp_std"],
            "noise_additions": int(util["noise_additions"]),
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        lines = [
            f"private ring sum over {res['nodes']} {where}, {res['rounds']} rounds {head}",
            f"  estimate  {res['estimate']:.4f} ± {res['netdp_std']:.4f} (noise std, from the "
            "accountant)",
            f"  truth     {res['truth']:.4f}",
            f"  error     {res['abs_error']:.4f}",
            f"  noise std of the estimate: netdp {res['netdp_std']:.4f}  vs  local DP "
            f"{res['ldp_std']:.4f} for the same guarantee ({res['ldp_std'] / res['netdp_std']:.1f}x "
            f"less noise; {res['noise_additions']} noise additions instead of "
            f"{res['nodes'] * res['rounds']})",
        ]
        if gain_ratio(res["ldp_std"], res["netdp_std"]) < GAIN_MIN:
            lines.append(
                f"  no real gain over local DP at n = {res['nodes']} with {res['rounds']} rounds "
                "(`netdp plan --nodes N --epsilon E` compares other sizes)"
            )
        return lines

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """The released estimate (the token over K) against the true sum of the clipped inputs,
        with the std of the noise the ledgers recorded."""
        ids, params = run.ids, run.params
        out = run.outputs.get(ids[0]) or next(iter(run.outputs.values()))
        est = np.asarray(out.value, dtype=float)
        truth = np.sum(
            [clip_l2(np.asarray(run.data[v], dtype=float), params["clip"]) for v in ids], axis=0
        )
        util = ring_sum_utility({"participants": list(ids), "params": dict(params)})
        return {
            "estimate": est.tolist(),
            "truth": truth.tolist(),
            "noise_std": recorded_noise_std(run.entries, ids) / int(params["rounds"]),
            "ldp_std": float(util["ldp_std"]),  # the accountant's, for the same guarantee
            "netdp_std_accountant": float(util["netdp_std"]),
        }

    def compose_job(self, rounds: int, nodes: int, topology: str) -> list[str]:
        return ["--param", f"rounds={rounds}"]

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        return PlanKnob("epsilon")  # per window

    def plan_amplified(self) -> bool:
        return True

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        if t.topology in (None, "ring", "complete"):
            return "ring", ""
        return None, (
            f"needs a ring of all participants (topology ring or complete), not {t.topology}"
        )

    def plan_refusal(self, t: PlanTarget) -> str:
        if t.threat_kind != "single":
            return "its ε holds against each single node only (neighbours together learn a value)"
        return ""

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        return {
            "rounds": t.rounds,
            "dim": t.dim,
            "clip": t.clip,
            "delta": t.delta,
            "delta_prime": t.delta,
        }

    def plan_release_std(self, case: PlanCase) -> tuple[float, str]:
        """The noise std of the released sum, and how it is obtained: the accountant's."""
        got = case.estimate_std()
        assert got is not None
        return got

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        n, p = case.target.n, case.params
        K = int(p["rounds"])
        hop, hop_how = case.costs["hop"]
        std, how = self.plan_release_std(case)
        return PlanFigures(
            sigma=float(p["sigma"]),
            steps=f"K={K} rounds ({n * K} hops + release)",
            caps=f"{K} contributions per node",
            release_std=std,
            mean_std=std / n,
            std_how=how + "; released value: the sum of the n values",
            messages=K + 1.0,
            messages_how="K tokens + 1 release",
            time_s=(n * K + n) * hop,
            time_how=f"{n * K + n} sequential hops × {hop_how}",
        )


@dataclass(frozen=True)
class RingHistogramHooks(Hooks):
    synthetic: ClassVar[SyntheticData | None] = categories

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """The debiased counts against the true ones."""
        ids = run.ids
        out = run.outputs.get(ids[0]) or next(iter(run.outputs.values()))
        est = np.asarray(out.value, dtype=float)
        truth = np.bincount([int(run.data[v][0]) for v in ids], minlength=int(run.params["bins"]))
        return {"estimate": est.tolist(), "truth": truth.astype(float).tolist()}

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        return PlanKnob("epsilon0")  # per randomized response

    def plan_skipped(self) -> str | None:
        return "releases a histogram (randomized response), not a sum or mean"


@dataclass(frozen=True)
class RingSumRHooks(RingSumHooks):
    """ring-sum-r: ring-sum's hooks, with the released std from its engine."""

    def plan_release_std(self, case: PlanCase) -> tuple[float, str]:
        eng = case.engine()
        assert isinstance(eng, RingSumR)
        std = float(eng.total_noise_std()) / int(case.params["rounds"])
        return std, "the engine's total noise std over K (Remark 1's schedule + release)"
