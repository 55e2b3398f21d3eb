"""What `netdp demo`, `simulate`, `compose` and `audit` ask the token walks (`algorithms.hooks`):
walk-sum, walk-histogram, walk-sgd (Cyffers & Bellet, AISTATS 2022) and rw-sgd (Cyffers, Bellet &
Upadhyay, ICML 2024)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from netdp_node.algorithms.hooks import (
    DemoFlags,
    DemoRun,
    Hooks,
    PlanCase,
    PlanFigures,
    PlanKnob,
    PlanTarget,
    SimRun,
    WalkAuditMode,
    categories,
    contribution_counts,
    plan_on_complete,
    uniform_values,
)
from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.baselines import Mode, local_sgd_sigma, sgd_walk
from netdp_node.algorithms.walk.engine import logistic_accuracy
from netdp_node.datasets import learning_split
from netdp_node.errors import ConfigError
from netdp_node.privacy.muffliato_accountant import CONTINUOUS
from netdp_node.privacy.token_walk import bassily_central_sigma
from netdp_node.privacy.walk_accountant import LEMMA1, ldp_sum_sigma, prospective_count


def _walk_params(flags: DemoFlags, n: int, steps_per_node: int) -> dict[str, Any]:
    T = flags.steps or steps_per_node * n
    params: dict[str, Any] = {"T": T, "delta": flags.delta, "custody_timeout_s": 60.0}
    if flags.epsilon is not None:
        params["epsilon"] = flags.epsilon
    return params


def _walk_plan(case: PlanCase) -> PlanFigures:
    """What `netdp plan` predicts for a walk of T steps (the released std left to the caller)."""
    n, p = case.target.n, case.params
    T = int(p["T"])
    cap = int(p.get("cap", 0))
    hop, hop_how = case.costs["hop"]
    return PlanFigures(
        sigma=float(p["sigma"]),
        steps=f"T={T} steps",
        caps=(f"cap {cap}" if cap else "no cap")
        + (f", edge_cap {p['edge_cap']}" if p.get("regime") == "edge-cap" else ""),
        messages=2 * T / n + (n - 1) / n,
        messages_how="2T/n on average (token + custody handoff per hop) + the release",
        time_s=T * hop,
        time_how=f"{T} sequential hops × {hop_how}",
    )


def _describe_walk(name: str, p: Mapping[str, Any], where: str) -> str:
    return (
        f"{name} on {where}, T={p['T']} steps, target ε={p['epsilon']:g} per peer, "
        f"δ={p['delta']}, {p['regime']} regime"
    )


@dataclass(frozen=True)
class WalkSumHooks(Hooks):
    demo: str | None = "private sum by a token walk on the complete graph"
    composed: bool = True
    counts_suffice: bool = True
    walk_audit: WalkAuditMode | None = "gaussian"

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        return {**_walk_params(flags, n, 10), "clip": flags.clip}

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        return _describe_walk("walk-sum", params, "the complete graph")

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        a, p = run.flags, run.params
        counts = run.summary["contributions"]
        truth = sum(
            counts.get(nid, 0) * float(np.clip(v[0], -a.clip, a.clip))
            for nid, v in run.values.items()
        )
        steps = int(p["T"])
        sigma_ldp = ldp_sum_sigma(p, prospective_count(p, len(run.values)))
        return {
            "sigma": p["sigma"],
            "epsilon0": p["epsilon0"],
            "estimate": float(run.value[0]),
            "truth": truth,
            "abs_error": abs(float(run.value[0]) - truth),
            "netdp_std": steps**0.5 * p["sigma"],
            "ldp_std": steps**0.5 * sigma_ldp,
            "steps": steps,
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        lines = [
            f"private sum by a token walk on the complete graph over {res['nodes']} {where}, "
            f"{res['steps']} steps {head}",
            f"  estimate  {res['estimate']:.4f}",
            f"  truth     {res['truth']:.4f}   (Σ over nodes of contributions × value; "
            f"contributions per node: {contribution_counts(res)})",
            f"  error     {res['abs_error']:.4f}",
            f"  noise std of the sum: netdp {res['netdp_std']:.4f}  vs  local DP "
            f"{res['ldp_std']:.4f} for the same guarantee "
            f"({res['ldp_std'] / res['netdp_std']:.2f}x)",
        ]
        if res["ldp_std"] <= res["netdp_std"] * 1.001:
            lines.append(
                "  (with this few nodes the walk amplifies less than the exact local-DP "
                "composition gains; the accountant uses the better bound, so the walk "
                "needs as much noise as local DP; try `netdp simulate --nodes 2048`)"
            )
        return lines

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        return uniform_values(ids, params, seed)

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        params = run.params
        truth = sum(
            run.counts[i] * clip_l2(np.asarray(run.data[nid]), params["clip"])
            for i, nid in enumerate(run.ids)
        )
        return {
            "estimate": run.value.tolist(),
            "truth": np.asarray(truth).tolist(),
            "noise_std": float(np.sqrt(run.steps) * params["sigma"]),
        }

    def compose_job(self, rounds: int, nodes: int, topology: str) -> list[str]:
        return ["--param", f"T={rounds * nodes}"]  # as many steps as K rounds of the ring

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        return PlanKnob("epsilon")

    def plan_amplified(self) -> bool:
        return True

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        return plan_on_complete(t)

    def plan_refusal(self, t: PlanTarget) -> str:
        if t.threat_kind == "any":
            return "its ε holds against single nodes or up to c colluders, not any observer"
        return ""

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        p: dict[str, Any] = {"dim": t.dim, "clip": t.clip, "delta": t.delta}
        if t.steps:
            p["T"] = t.steps
        if t.colluders > 1:
            p["colluders"] = t.colluders
        return p

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        out = _walk_plan(case)
        got = case.estimate_std()
        assert got is not None
        out.release_std, out.std_how = got
        out.mean_std = out.release_std / int(case.params["T"])
        out.std_how += (
            "; released value: the sum of the T visited values (÷T estimates the mean, "
            "plus the walk's sampling error, not counted)"
        )
        return out


@dataclass(frozen=True)
class WalkHistogramHooks(Hooks):
    demo: str | None = "private histogram by a token walk (--bins categories)"
    counts_suffice: bool = True
    walk_audit: WalkAuditMode | None = "histogram"

    def check_demo_flags(self, flags: DemoFlags) -> None:
        if flags.bins < 2:
            raise ConfigError(f"--bins must be at least 2, not {flags.bins}")

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        return {**_walk_params(flags, n, 10), "bins": flags.bins}

    def demo_data(
        self, flags: DemoFlags, ids: Sequence[str], values: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], Any]:
        rng = np.random.default_rng(flags.seed)
        cats = values if values is not None else rng.integers(0, flags.bins, size=len(ids))
        return {nid: np.array([float(c)]) for nid, c in zip(ids, cats)}, None

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        return _describe_walk("walk-histogram", params, "the complete graph")

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        counts = run.summary["contributions"]
        truth = np.zeros(len(run.value))
        for nid, v in run.values.items():
            truth[int(v[0])] += counts.get(nid, 0)
        return {
            "estimate": run.value.tolist(),
            "truth": truth.tolist(),
            "abs_error": float(np.abs(run.value - truth).max()),
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        return [
            f"private histogram by a token walk over {res['nodes']} {where} {head}",
            f"  estimate  {np.round(res['estimate'], 2).tolist()}",
            f"  truth     {res['truth']}   (contributions per node: {contribution_counts(res)})",
        ]

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        return categories(ids, params, seed)

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        truth = np.zeros(int(run.params["bins"]))
        for i, nid in enumerate(run.ids):
            truth[int(run.data[nid][0])] += run.counts[i]
        return {"estimate": run.value.tolist(), "truth": truth.tolist()}

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        return PlanKnob("epsilon")

    def plan_skipped(self) -> str | None:
        return "releases a histogram (randomized response), not a sum or mean"


def learning_data(
    ids: Sequence[str], seed: int, points_per_node: int, data_dir: str | None
) -> tuple[dict[str, np.ndarray], Any]:
    """Logistic-regression rows per node (the housing data when found, else synthetic) and the
    split (for test accuracy)."""
    split = learning_split(len(ids), points_per_node, seed, data_dir)
    return dict(zip(ids, split.per_user(len(ids), points_per_node))), split


def check_learning_flags(flags: DemoFlags) -> None:
    if flags.points < 1:
        raise ConfigError(f"--points must be at least 1, not {flags.points}")


def learning_outcome(value: np.ndarray, split: Any) -> dict[str, Any]:
    return {
        "test_accuracy": logistic_accuracy(value, split.X_test, split.y_test),
        "data": split.source,
        "model": value.tolist(),
    }


def render_accuracy(
    alg: str, res: Mapping[str, Any], where: str, head: str, how: str, same: str
) -> list[str]:
    """The SGD demos' line: netdp's test accuracy beside the local-DP and central-DP baselines
    (`how` the job learns, `same`: what the baselines share with it)."""
    b = res["baselines"]
    return [
        f"private logistic regression by {how} ({alg}) over {res['nodes']} "
        f"{where}, data {res['data']} {head}",
        f"  test accuracy: netdp {res['test_accuracy']:.4f} (σ={res['sigma']:.3g})   local DP "
        f"{b['local']['test_accuracy']:.4f} (σ={b['local']['sigma']:.3g})   central DP "
        f"{b['central']['test_accuracy']:.4f} (σ={b['central']['sigma']:.3g}, trusted "
        f"curator)   [baselines: {same}, mean of 5 in-process "
        "runs]",
    ]


@dataclass(frozen=True)
class WalkSgdHooks(Hooks):
    """walk-sgd (the complete graph) and rw-sgd (--topology)."""

    name: str = "walk-sgd"
    demo: str | None = "private logistic regression by a token walk on the complete graph"
    demo_takes_values: bool = False
    counts_suffice: bool = True
    #: say that the amplification by iteration (Lemma 1) is not charged, and show its figure
    lemma1: bool = True

    def check_demo_flags(self, flags: DemoFlags) -> None:
        check_learning_flags(flags)

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        return {**_walk_params(flags, n, 25), "dim": 9, "lipschitz": 1.0, "eta": 0.1}

    def demo_data(
        self, flags: DemoFlags, ids: Sequence[str], values: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], Any]:
        return learning_data(ids, flags.seed or 0, flags.points, flags.data_dir)

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        where = f"the {topology} graph" if self.demo_topology else "the complete graph"
        return _describe_walk(self.name, params, where)

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        a, p, split, n = run.flags, run.params, run.split, len(run.ids)
        users = split.user_arrays(n, a.points)
        acc = logistic_accuracy(run.value, split.X_test, split.y_test)
        eps, delta, lip, T = p["epsilon"], p["delta"], p["lipschitz"], int(p["T"])
        sig_loc = local_sgd_sigma(p["cap"], eps, delta, lip)
        sig_cen = bassily_central_sigma(n, T, eps, delta, lip)
        base = {}
        by_mode: tuple[tuple[Mode, float], ...] = (("local", sig_loc), ("central", sig_cen))
        for mode, sig in by_mode:
            accs = [
                logistic_accuracy(
                    sgd_walk(
                        users,
                        T,
                        sig,
                        p["eta"],
                        lip,
                        mode,
                        np.random.default_rng([a.seed or 0, r]),
                        cap=p["cap"],
                        per_example=True,
                    ).w,
                    split.X_test,
                    split.y_test,
                )
                for r in range(5)
            ]
            base[mode] = {"sigma": sig, "test_accuracy": float(np.mean(accs))}
        return {
            "sigma": p["sigma"],
            "test_accuracy": acc,
            "data": split.source,
            "baselines": base,
            "model": run.value.tolist(),
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        lines = render_accuracy(
            self.name, res, where, head, "a token walk", "same data, steps and ε"
        )
        if self.lemma1:
            lines.append(
                "  walk-sgd's amplification (Lemma 1, by iteration) is proven for "
                "continuous noise only; netdp charges the local-DP level of each node's "
                "discrete-Gaussian releases (so no gain over local DP is claimed)"
            )
            vals = [
                row["baselines"][LEMMA1]["epsilon"]
                for row in res["privacy"]
                if LEMMA1 in row["baselines"]
            ]
            if vals:
                lines.append(
                    f"  Lemma 1 figure, worst pair: ε={max(vals):.4g} (continuous-noise "
                    "analysis; not proven for discrete noise; NOT a guarantee)"
                )
        return lines

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        return learning_data(ids, seed, points_per_node, data_dir)

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        return learning_outcome(run.value, run.split)

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        return PlanKnob("epsilon")

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        return plan_on_complete(t)

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        p: dict[str, Any] = {"dim": t.dim, "lipschitz": t.clip, "delta": t.delta}
        if t.steps:
            p["T"] = t.steps
        return p

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        out = _walk_plan(case)
        out.std_how = "n/a: no closed form for the accuracy of private SGD here"
        return out

    def plan_paper(self, case: PlanCase, used: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "what": "amplification by iteration (the paper's gain) is a "
            + CONTINUOUS
            + "; see `netdp privacy report` after a run",
        }


@dataclass(frozen=True)
class RwSgdHooks(WalkSgdHooks):
    """rw-sgd: the walk-sgd demo on a bootstrap topology; `objective=mean` averages vectors."""

    name: str = "rw-sgd"
    demo: str | None = "private logistic regression by a random walk on --topology"
    demo_topology: bool = True
    counts_suffice: bool = False
    lemma1: bool = False

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        if params.get("objective") == "mean":  # the averaging case: any vectors (the mean is
            # the optimum); drawn after the uniform values, as before
            rng = np.random.default_rng([seed, 7])
            dim = int(params.get("dim", 1))
            rng.uniform(0.0, float(params.get("clip", 1.0)) / np.sqrt(dim), size=(len(ids), dim))
            vals = rng.normal(0.0, 1.0, size=(len(ids), dim))
            return {nid: vals[i] for i, nid in enumerate(ids)}, None
        return learning_data(ids, seed, points_per_node, data_dir)

    def uses_edges(self, params: Mapping[str, Any]) -> bool:
        return True

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        if run.params.get("objective", "logistic") == "mean":
            truth = np.mean([np.asarray(run.data[v], dtype=float) for v in run.ids], axis=0)
            return {"estimate": run.value.tolist(), "truth": truth.tolist()}
        return learning_outcome(run.value, run.split)

    # -- netdp plan
    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        return t.topology or own, ""
