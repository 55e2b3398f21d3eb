"""What `netdp demo`, `simulate`, `compose` and `audit` ask the token walks (`algorithms.hooks`):
walk-sum, walk-histogram, walk-sgd (Cyffers & Bellet, AISTATS 2022) and rw-sgd (Cyffers, Bellet &
Upadhyay, ICML 2024)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.catalog import DEMOS
from netdp_node.algorithms.hooks import (
    GAIN_MIN,
    NO_GAIN_PROVEN,
    DemoFlags,
    DemoRun,
    Hooks,
    PlanCase,
    PlanFigures,
    PlanKnob,
    PlanTarget,
    SimRun,
    SyntheticData,
    WalkAuditMode,
    categories,
    contribution_counts,
    gain_line,
    gain_ratio,
    gain_starts_at,
    plan_on_complete,
    uniform_values,
)
from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.baselines import Mode, local_sgd_sigma, sgd_walk
from netdp_node.algorithms.walk.engine import logistic_accuracy
from netdp_node.algorithms.walk.params import WalkSumParams
from netdp_node.datasets import learning_split
from netdp_node.errors import ConfigError
from netdp_node.privacy.muffliato_accountant import CONTINUOUS
from netdp_node.privacy.ring import rr_gamma
from netdp_node.privacy.token_walk import bassily_central_sigma
from netdp_node.privacy.walk_accountant import (
    HISTOGRAM,
    LEMMA1,
    _bisect_largest,
    ldp_sum_sigma,
    prospective_count,
)


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


def sum_std_ratio(raw: Mapping[str, Any], n: int) -> tuple[float, float]:
    """walk-sum's noise std of the released sum at n participants for the job `raw` (T steps, each
    with its own N(0, σ²)), and local DP's for the same per-peer guarantee (each contribution
    calibrated so that a node's `prospective_count` of them compose to ε): both from the
    registry's calibration (`WalkSumParams.prepare`) and the walk accountant."""
    return _sum_stds(tuple(sorted(raw.items())), n)


@functools.lru_cache(maxsize=256)
def _sum_stds(raw: tuple[tuple[str, Any], ...], n: int) -> tuple[float, float]:
    p = WalkSumParams.prepare(dict(raw), n).to_wire()
    steps = int(p["T"])
    return (
        steps**0.5 * float(p["sigma"]),
        steps**0.5 * ldp_sum_sigma(p, prospective_count(p, n)),
    )


def sum_gain_starts_at(raw_at: Callable[[int], Mapping[str, Any]], lo: int) -> int | None:
    """The n from which walk-sum's std is `GAIN_MIN` times below local DP's (`gain_starts_at`),
    for the job `raw_at(n)` at n participants."""

    def ratio(n: int) -> float:
        netdp, ldp = sum_std_ratio(raw_at(n), n)
        return gain_ratio(ldp, netdp)

    return gain_starts_at(ratio, lo)


def rr_count_std(gamma: float, bins: int, truth: np.ndarray, reports: int) -> np.ndarray:
    """The std of each debiased count (τ − γR/L)/(1 − γ) of a randomized-response histogram: `truth`
    real contributions per category, answered truly with probability 1 − γ, else uniformly, and
    `reports` − Σ truth noise-only (uniform) reports."""
    q = gamma / bins
    t = np.asarray(truth, dtype=float)
    real = float(t.sum())
    p_own = 1.0 - gamma + q
    var = t * p_own * (1 - p_own) + (real - t) * q * (1 - q)
    var += max(0.0, reports - real) * (1.0 / bins) * (1 - 1.0 / bins)
    return np.sqrt(var) / (1.0 - gamma)


def histogram_ldp_gamma(params: Mapping[str, Any], n: int) -> float:
    """γ of local DP's randomized response for the same per-peer guarantee: the largest ε0 whose
    `prospective_count` responses compose (the walk accountant's local-DP bound) to ε."""
    count = prospective_count(params, n)
    target = float(params["epsilon"])
    e0 = _bisect_largest(
        lambda e: HISTOGRAM.local({**params, "epsilon0": e}, count).epsilon <= target, 1e-9, 5.0
    )
    return rr_gamma(int(params["bins"]), e0)


#: what the histogram demos say beside a negative debiased count
NEGATIVE_COUNTS = (
    "negative counts are noise (the debiased estimate is unbiased, not clamped); "
    "post-processed, clamped at 0: "
)


def _clamped(est: np.ndarray) -> str:
    return ", ".join(f"{max(0.0, float(e)):.1f}" for e in est)


def histogram_stds(params: Mapping[str, Any], n: int, truth: np.ndarray) -> dict[str, Any]:
    """The noise std of each debiased count of walk-histogram (γ of the job) and of local DP's
    randomized response for the same per-peer guarantee (`histogram_ldp_gamma`), at the true
    counts, with the job's T reports."""
    bins, reports = int(params["bins"]), int(params["T"])
    g_ldp = histogram_ldp_gamma(params, n)
    return {
        "netdp_std": rr_count_std(float(params["gamma"]), bins, truth, reports).tolist(),
        "ldp_std": rr_count_std(g_ldp, bins, truth, reports).tolist(),
        "gamma": float(params["gamma"]),
        "ldp_gamma": g_ldp,
    }


@dataclass(frozen=True)
class WalkSumHooks(Hooks):
    synthetic: ClassVar[SyntheticData | None] = uniform_values

    demo: str | None = DEMOS["walk-sum"]
    composed: bool = True
    counts_suffice: bool = True
    walk_audit: WalkAuditMode | None = "gaussian"
    #: the walk gains over local DP from n ≈ 40 (ε 1, δ 1e-6, 10 steps per node): 128 nodes show
    #: it (1.5x less noise) in about 1.5 minutes on two cores (`sum_gain_starts_at`)
    demo_nodes: int = 128

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
        n = len(run.values)
        sigma_ldp = ldp_sum_sigma(p, prospective_count(p, n))
        netdp_std, ldp_std = steps**0.5 * p["sigma"], steps**0.5 * sigma_ldp
        starts = None
        if gain_ratio(ldp_std, netdp_std) < GAIN_MIN:  # from what n it would: the same job's flags
            starts = sum_gain_starts_at(lambda m: self.demo_params(a, m), n)
        return {
            "sigma": p["sigma"],
            "epsilon0": p["epsilon0"],
            "estimate": float(run.value[0]),
            "truth": truth,
            "abs_error": abs(float(run.value[0]) - truth),
            "netdp_std": netdp_std,
            "ldp_std": ldp_std,
            "steps": steps,
            "gain_starts_at": starts,
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        ratio = gain_ratio(res["ldp_std"], res["netdp_std"])
        lines = [
            f"private sum by a token walk on the complete graph over {res['nodes']} {where}, "
            f"{res['steps']} steps {head}",
            f"  estimate  {res['estimate']:.4f} ± {res['netdp_std']:.4f} (noise std, from the "
            "accountant's σ)",
            f"  truth     {res['truth']:.4f}   (Σ over nodes of contributions × value; "
            f"contributions per node: {contribution_counts(res)})",
            f"  error     {res['abs_error']:.4f} ({res['abs_error'] / res['netdp_std']:.2f} std)",
            f"  noise std of the sum: netdp {res['netdp_std']:.4f}  vs  local DP "
            f"{res['ldp_std']:.4f} for the same per-peer guarantee ({ratio:.2f}x "
            + ("less noise)" if ratio >= GAIN_MIN else "no real gain)"),
        ]
        line = gain_line(
            "the walk",
            res["nodes"],
            res["ldp_std"],
            res["netdp_std"],
            res.get("gain_starts_at"),
            "--nodes",
        )
        if line is not None:
            lines.append(line)
        return lines

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        params = run.params
        truth = sum(
            run.counts[i] * clip_l2(np.asarray(run.data[nid]), params["clip"])
            for i, nid in enumerate(run.ids)
        )
        n = len(run.ids)
        ldp = float(np.sqrt(run.steps) * ldp_sum_sigma(params, prospective_count(params, n)))
        netdp = float(np.sqrt(run.steps) * params["sigma"])
        out: dict[str, Any] = {
            "estimate": run.value.tolist(),
            "truth": np.asarray(truth).tolist(),
            "noise_std": netdp,
            "ldp_std": ldp,
        }
        if gain_ratio(ldp, netdp) < GAIN_MIN:
            raw = {k: params[k] for k in WalkSumParams.inputs if k in params and k != "T"}
            steps_per_node = int(params["T"]) / n
            out["gain_starts_at"] = sum_gain_starts_at(
                lambda m: {**raw, "T": max(1, round(steps_per_node * m))}, n
            )
        return out

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
    synthetic: ClassVar[SyntheticData | None] = categories

    demo: str | None = DEMOS["walk-histogram"]
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
            **histogram_stds(run.params, len(run.values), truth),
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        est, std = np.asarray(res["estimate"]), np.asarray(res["netdp_std"])
        ratio = gain_ratio(float(np.mean(res["ldp_std"])), float(np.mean(std)))
        lines = [
            f"private histogram by a token walk over {res['nodes']} {where} {head}",
            "  estimate  "
            + ", ".join(f"{e:.1f} ± {s:.1f}" for e, s in zip(est, std))
            + "   (debiased counts ± noise std; randomized response)",
            f"  truth     {res['truth']}   (contributions per node: {contribution_counts(res)})",
            f"  noise std of each count: netdp {np.mean(std):.2f}  vs  local DP "
            f"{np.mean(res['ldp_std']):.2f} for the same per-peer guarantee ({ratio:.2f}x"
            + (" less noise)" if ratio >= GAIN_MIN else ", no real gain)"),
        ]
        if np.any(est < 0):
            lines.append("  " + NEGATIVE_COUNTS + _clamped(est))
        return lines

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        truth = np.zeros(int(run.params["bins"]))
        for i, nid in enumerate(run.ids):
            truth[int(run.data[nid][0])] += run.counts[i]
        stds = histogram_stds(run.params, len(run.ids), truth)
        return {
            "estimate": run.value.tolist(),
            "truth": truth.tolist(),
            "noise_std": float(np.mean(stds["netdp_std"])),
            "ldp_std": float(np.mean(stds["ldp_std"])),
            "std_of": "each count",
            **(
                {"estimate_note": NEGATIVE_COUNTS + _clamped(run.value)}
                if np.any(run.value < 0)
                else {}
            ),
        }

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


def learning_rows(
    ids: Sequence[str], params: Mapping[str, Any], seed: int, points: int, data_dir: str | None
) -> tuple[dict[str, np.ndarray], Any]:
    """`learning_data` as `Hooks.synthetic` (the rows do not depend on the parameters)."""
    return learning_data(ids, seed, points, data_dir)


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

    def acc(x: Mapping[str, Any]) -> str:
        runs = int(x.get("runs", 1))
        sd = f" ± {x['test_accuracy_std']:.4f}" if runs > 1 and "test_accuracy_std" in x else ""
        return f"{x['test_accuracy']:.4f}{sd} (σ={x['sigma']:.3g}, {runs} run{'s' * (runs > 1)})"

    return [
        f"private logistic regression by {how} ({alg}) over {res['nodes']} "
        f"{where}, data {res['data']} {head}",
        f"  test accuracy: netdp {res['test_accuracy']:.4f} (σ={res['sigma']:.3g}, 1 run: this "
        f"job); at the same per-peer guarantee ({same}; ± std over the runs):",
        f"    local DP {acc(b['local'])}",
        f"    central DP {acc(b['central'])}, a trusted curator"
        + (
            " (its σ, Bassily et al.'s bound, is loose at this n: above local DP's)"
            if b["central"]["sigma"] > b["local"]["sigma"]
            else ""
        ),
    ]


#: in-process runs of each SGD baseline (local DP, central DP) a demo averages
BASELINE_RUNS = 5


@dataclass(frozen=True)
class WalkSgdHooks(Hooks):
    """walk-sgd (the complete graph) and rw-sgd (--topology)."""

    synthetic: ClassVar[SyntheticData | None] = learning_rows

    name: str = "walk-sgd"
    demo: str | None = DEMOS["walk-sgd"]
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
                for r in range(BASELINE_RUNS)
            ]
            base[mode] = {
                "sigma": sig,
                "test_accuracy": float(np.mean(accs)),
                "test_accuracy_std": float(np.std(accs, ddof=1)),
                "runs": len(accs),
            }
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
        lines.append(NO_GAIN_PROVEN.format(name=self.name))
        if self.lemma1:
            lines.append(
                "  (walk-sgd's amplification is Lemma 1, by iteration; netdp charges the "
                "local-DP level of each node's discrete-Gaussian releases)"
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
    demo: str | None = DEMOS["rw-sgd"]
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
        return super().synthetic_data(ids, params, seed, points_per_node, data_dir)

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
