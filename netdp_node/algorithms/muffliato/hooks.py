"""What `netdp demo`, `simulate`, `compose` and `audit` ask Muffliato (`algorithms.hooks`):
gossip averaging (muffliato, muffliato-random) and gradient descent (muffliato-gd); Cyffers, Even,
Bellet & Massoulié, NeurIPS 2022."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.catalog import DEMOS
from netdp_node.algorithms.hooks import (
    GOSSIP_MASS,
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
    uniform_values,
)
from netdp_node.algorithms.muffliato.engine import ldp_sigma
from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.engine import logistic_accuracy, logistic_gradient
from netdp_node.algorithms.walk.hooks import (
    BASELINE_RUNS,
    check_learning_flags,
    learning_data,
    learning_rows,
    render_accuracy,
)
from netdp_node.errors import ConfigError
from netdp_node.privacy.muffliato_accountant import CONTINUOUS, JOINT_VIEW, PAPER

#: the graphs whose public spectral gap Muffliato's preparation computes (its rounds T)
_PLAN_GRAPHS = ("ring", "complete", "hypercube")


def _graph(n: int) -> str:
    """The demo's gossip graph: a hypercube when n is a power of two, else a ring."""
    return "hypercube" if n & (n - 1) == 0 and n >= 4 else "ring"


def _worst(privacy: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The worst ε the nodes report, at its δ (None: no node reports a loss)."""
    row = max(privacy, key=lambda r: r["epsilon"], default=None)
    if row is None or not 0 < row["epsilon"] < float("inf"):
        return None
    return float(row["epsilon"]), float(row["delta"])


def _guarantee_lines(res: Mapping[str, Any], guarantee: str) -> list[str]:
    lines = [f"  the guarantee below is {guarantee} (proven for the noise sampled)"]
    for key, what in (
        (JOINT_VIEW, "joint view on the realised schedule"),
        (PAPER, "paper bound eq. (6)"),
    ):
        vals = [
            row["baselines"][key]["epsilon"] for row in res["privacy"] if key in row["baselines"]
        ]
        if vals:
            lines.append(f"  {what}, worst pair: ε={max(vals):.4g} ({CONTINUOUS}; NOT a guarantee)")
    return lines


def _node_values(run: DemoRun) -> dict[str, np.ndarray]:
    """Each node's own result, read from its ledger (gossip results are never reported to the
    bootstrap: the demo, which runs every node, reads them there)."""
    rows = run.job_rows()
    out = {}
    for nid in run.ids:
        row = rows.get(nid)
        if row is not None and row.result and row.result.get("value") is not None:
            out[nid] = np.asarray(row.result["value"], dtype=float)
    return out


def _check_compose_graph(topology: str) -> None:
    if topology not in ("ring", "complete", "hypercube"):
        raise ConfigError(
            f"--topology must be ring, complete or hypercube for muffliato, not {topology!r}"
        )


@dataclass(frozen=True)
class GossipHooks(Hooks):
    """muffliato (synchronous rounds) and muffliato-random (Poisson clocks)."""

    synthetic: ClassVar[SyntheticData | None] = uniform_values

    name: str = "muffliato"
    demo: str | None = None
    #: the demo's job runs on Poisson clocks for 5 s (muffliato-random); else --steps rounds
    poisson: bool = False
    demo_waits_for_schedules: bool = True
    audit_checks: frozenset[str] = frozenset({GOSSIP_MASS})

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        # a ring (hypercube when n is a power of two); σ for a mean loss (eq. 7) of ε at δ
        params: dict[str, Any] = {
            "graph": _graph(n),
            "clip": flags.clip,
            "delta": flags.delta,
            "epsilon": 1.0 if flags.epsilon is None else flags.epsilon,
        }
        if self.poisson:
            params.update({"duration_s": 5.0, "rate": 5.0})
        elif flags.steps:
            params["T"] = flags.steps
        return params

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        p = params
        rounds = (
            f"T={p['T']} rounds{' (Chebyshev)' if p.get('accelerated') else ''}"
            if "T" in p
            else f"{p['duration_s']:g} s of Poisson clocks"
        )
        return (
            f"{self.name} gossip averaging on a {p['graph']}, {rounds}, σ={p['sigma']:.4g} "
            f"(mean loss ε={p.get('epsilon', 0):g} at δ={p['delta']:g})"
        )

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        """Every node's estimate against the true mean of the contributors' clipped values, and
        the noise std of the mean beside local DP and a trusted curator for the guarantee the
        nodes report (the worst pair; the baselines of Cyffers et al., NeurIPS 2022, §2)."""
        a, p = run.flags, run.params
        n = len(run.summary["participants"])
        contributors = set(run.summary["contributors"])
        truth = (
            sum(
                float(np.clip(v[0], -a.clip, a.clip))
                for nid, v in run.values.items()
                if nid in contributors
            )
            / n
        )
        est = {nid: float(v[0]) for nid, v in _node_values(run).items()}
        err = {k: abs(v - truth) for k, v in est.items()}
        worst_row = max(run.privacy, key=lambda row: row["epsilon"], default=None)
        worst = worst_row["epsilon"] if worst_row is not None else 0.0
        out: dict[str, Any] = {
            "sigma": p["sigma"],
            "truth": truth,
            "estimates": est,
            "estimate": float(np.mean(list(est.values()))),
            "abs_error_max": max(err.values()),
            "abs_error_mean": float(np.mean(list(err.values()))),
            "netdp_std": p["sigma"] / np.sqrt(n),
            "guarantee_epsilon": worst,
        }
        if worst_row is not None and worst > 0:
            # the σ local DP needs for the same guarantee, at the δ that guarantee is stated at
            s_ldp = ldp_sigma(worst, float(worst_row["delta"]), p["sensitivity"], 1)
            out["ldp_std"] = s_ldp / np.sqrt(n)  # everyone publishes x + N(0, σ²), average
            out["central_std"] = s_ldp / n  # a trusted curator: the mean's sensitivity is Δ/n
        return out

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        lines = [
            f"private gossip averaging ({self.name}) over {res['nodes']} {where} {head}",
            f"  estimate  {res['estimate']:.4f} ± {res['netdp_std']:.4f}  (mean of the nodes' "
            "estimates ± the noise std of the mean at consensus, σ/√n)",
            f"  truth     {res['truth']:.4f}   (mean of the clipped values of the contributors)",
            f"  error     max {res['abs_error_max']:.4f}, mean {res['abs_error_mean']:.4f} over "
            "nodes",
        ]
        if "ldp_std" in res:
            lines.append(
                f"  noise std of the mean: netdp {res['netdp_std']:.4f}  vs  local DP "
                f"{res['ldp_std']:.4f} and a trusted curator {res['central_std']:.4f} for the "
                f"guarantee the nodes report (worst pair ε={res['guarantee_epsilon']:.3g})"
            )
        lines.append(NO_GAIN_PROVEN.format(name=self.name))
        return lines + _guarantee_lines(
            res, "the local-DP level of each node's discrete-Gaussian release"
        )

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """Every finished node's estimate against the true mean of the (clipped) inputs of all
        nodes (a node that left, `--leave`, has no estimate; its value was mixed in before)."""
        ids, params = run.ids, run.params
        done = [v for v in ids if v in run.outputs]
        truth = np.mean(
            [clip_l2(np.asarray(run.data[v], dtype=float), params["clip"]) for v in ids], axis=0
        )
        err = np.array([np.linalg.norm(np.asarray(run.outputs[v].value) - truth) for v in done])
        estimate = (
            np.mean([np.asarray(run.outputs[v].value) for v in done], axis=0).tolist()
            if done
            else None
        )
        return {
            "estimate": estimate,
            "truth": truth.tolist(),
            "nodes_with_estimate": len(done),
            "error_max": float(err.max()) if done else None,
            "error_mean": float(err.mean()) if done else None,
            "noise_std": float(params["sigma"] / np.sqrt(len(ids))),
            # the guarantee is the local-DP level of σ: local DP needs the same σ for it
            "ldp_std": float(params["sigma"] / np.sqrt(len(ids))),
            "std_of": "the mean",
            "gain_note": NO_GAIN_PROVEN.format(name=self.name).strip(),
        }

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        # the guarantee, not the paper's mean loss (docs/accountants.md)
        return PlanKnob(
            "epsilon",
            fixed=(("calibrate", "ldp"),),
            note="calibrate=ldp: σ for the local-DP level each pair is guaranteed",
        )

    def plan_reuses_spectral_gap(self) -> bool:
        return not self.poisson  # its rounds T come from the gap (Poisson clocks: a duration)

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        # the public spectral gap of its graph sets T
        topo = t.topology
        if topo is None:
            return _graph(t.n), ""
        if topo in _PLAN_GRAPHS:
            if topo == "hypercube" and t.n & (t.n - 1):
                return None, "a hypercube needs n a power of two"
            return topo, ""
        return None, (
            f"its rounds T come from the public spectral gap of ring, complete or hypercube; "
            f"for {topo} submit graph=topology with a spectral_gap bound"
        )

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        return {"graph": topology, "dim": t.dim, "delta": t.delta, "clip": t.clip}

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        n, p = case.target.n, case.params
        sigma = float(p["sigma"])
        out = PlanFigures(sigma=sigma, caps=f"graph {case.topology}")
        if self.poisson:
            d = float(p["duration_s"])
            out.steps = f"{d:g} s of Poisson clocks, rate {p['rate']:g}/s"
            out.messages = 2 * float(p["rate"]) * d * 2
            out.messages_how = "≈ 2·rate·duration exchanges, 2 messages each"
            out.time_s, out.time_how = d + float(p["grace_s"]), "duration_s + grace_s"
        else:
            deg = int(p.get("d_max", 2))
            T = int(p["T"]) * int(p.get("calls", 1))
            out.steps = f"T={T} gossip rounds" + (
                f" ({p['steps']} GD steps)" if "steps" in p else ""
            )
            rnd, rnd_how = case.costs["gossip-round"]
            out.messages, out.messages_how = float(T * deg), f"T × degree ({deg})"
            out.time_s, out.time_how = T * rnd, f"{T} rounds × {rnd_how}"
        out.release_std = sigma / math.sqrt(n)
        out.mean_std = out.release_std
        out.std_how = "σ/√n: each node's estimate at consensus (a lower bound: larger before it)"
        return out

    def plan_paper(self, case: PlanCase, used: Mapping[str, Any]) -> dict[str, Any]:
        try:
            q = case.prepare({**used, "epsilon": case.target.epsilon, "calibrate": "mean"})
        except ConfigError:
            return {}
        return {
            "sigma": float(q["sigma"]),
            "what": "σ for the paper's mean loss ε (eq. 7), " + CONTINUOUS,
        }


@dataclass(frozen=True)
class MuffliatoSyncHooks(GossipHooks):
    demo: str | None = DEMOS["muffliato"]
    composed: bool = True
    compose_topology: bool = False

    def compose_job(self, rounds: int, nodes: int, topology: str) -> list[str]:
        # the gossip graph is the job's `graph` parameter (the job's topology stays the ring)
        _check_compose_graph(topology)
        return ["--param", f"T={rounds}", "--param", f"graph={topology}"]  # gossip rounds


def gd_exact_average(
    users: Sequence[tuple[np.ndarray, np.ndarray]],
    steps: int,
    eta: float,
    lipschitz: float,
    mean_noise_std: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gradient descent with the exact average of the users' clipped full local gradients and
    N(0, mean_noise_std²) on that average per step (θ⁰ = 0): the baselines of muffliato-gd
    (Algorithm 3 without the gossip error)."""
    dim = users[0][0].shape[1]
    theta = np.zeros(dim)
    labels = [(X, np.where(y > 0, 1.0, -1.0)) for X, y in users]
    for _ in range(steps):
        g = np.mean([clip_l2(logistic_gradient(theta, X, y), lipschitz) for X, y in labels], axis=0)
        theta = theta - eta * (g + rng.normal(0.0, mean_noise_std, size=dim))
    return theta


@dataclass(frozen=True)
class MuffliatoGdHooks(GossipHooks):
    """muffliato-gd: logistic regression, every node's model against the local-DP and central-DP
    baselines at the guarantee the nodes report."""

    synthetic: ClassVar[SyntheticData | None] = learning_rows

    name: str = "muffliato-gd"
    demo: str | None = DEMOS["muffliato-gd"]
    demo_takes_values: bool = False
    demo_waits_for_schedules: bool = False

    def check_demo_flags(self, flags: DemoFlags) -> None:
        check_learning_flags(flags)

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        # σ for a mean loss (eq. 7) of ε at δ over every step (ε 10 by default, as walk-sgd)
        params: dict[str, Any] = {
            "graph": _graph(n),
            "delta": flags.delta,
            "epsilon": 10.0 if flags.epsilon is None else flags.epsilon,
        }
        if flags.steps:
            params["steps"] = flags.steps
        return params

    def demo_data(
        self, flags: DemoFlags, ids: Sequence[str], values: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], Any]:
        return learning_data(ids, flags.seed or 0, flags.points, flags.data_dir)

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        p = params
        return (
            f"muffliato-gd gradient descent on a {p['graph']}, {p['steps']} steps of T={p['T']} "
            f"gossip rounds{' (Chebyshev)' if p.get('accelerated') else ''}, σ={p['sigma']:.4g} "
            f"(mean loss ε={p.get('epsilon', 0):g} at δ={p['delta']:g})"
        )

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        """The test accuracy of every node's model (mean and worst), beside gradient descent on
        the exact average of the same noisy steps at the local-DP level of the guarantee the
        nodes report (local DP: each node's step is itself that private, so averaging them
        exactly costs nothing more) and a trusted curator at the same guarantee (noise on the
        mean gradient, whose sensitivity is Δ/n)."""
        a, p, split, n = run.flags, run.params, run.split, len(run.ids)
        models = _node_values(run)
        accs = [logistic_accuracy(w, split.X_test, split.y_test) for w in models.values()]
        out: dict[str, Any] = {
            "sigma": p["sigma"],
            "test_accuracy": float(np.mean(accs)),
            "test_accuracy_min": float(np.min(accs)),
            "data": split.source,
            "model": np.mean(list(models.values()), axis=0).tolist(),
            "baselines": {},
        }
        worst = _worst(run.privacy)
        if worst is None:
            return out
        eps, delta = worst
        out["guarantee_epsilon"] = eps
        steps, eta, lip = int(p["steps"]), float(p["eta"]), float(p["lipschitz"])
        s_ldp = ldp_sigma(eps, delta, float(p["sensitivity"]), steps)
        users = split.user_arrays(n, a.points)
        for mode, mean_std in (("local", s_ldp / np.sqrt(n)), ("central", s_ldp / n)):
            accs = [
                logistic_accuracy(
                    gd_exact_average(
                        users, steps, eta, lip, mean_std, np.random.default_rng([a.seed or 0, r])
                    ),
                    split.X_test,
                    split.y_test,
                )
                for r in range(BASELINE_RUNS)
            ]
            out["baselines"][mode] = {
                "sigma": s_ldp if mode == "local" else s_ldp / n,
                "test_accuracy": float(np.mean(accs)),
                "test_accuracy_std": float(np.std(accs, ddof=1)),
                "runs": len(accs),
            }
        return out

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        if not res["baselines"]:
            lines = [
                f"private logistic regression by gossip gradient descent ({self.name}) over "
                f"{res['nodes']} {where}, data {res['data']} {head}",
                f"  test accuracy: netdp {res['test_accuracy']:.4f} (σ={res['sigma']:.3g}); no "
                "node reports a loss, so no baseline",
            ]
        else:
            lines = render_accuracy(
                self.name,
                res,
                where,
                head,
                "gossip gradient descent",
                f"same data and steps at the guarantee the nodes report (worst pair "
                f"ε={res['guarantee_epsilon']:.3g}), exact averaging",
            )
            lines.append(
                f"  netdp's accuracy is the mean over the nodes' own models (worst node "
                f"{res['test_accuracy_min']:.4f}); local DP averages the same noisy steps exactly, "
                "so with the local-DP level as the guarantee netdp gains nothing over it here"
            )
            lines.append(NO_GAIN_PROVEN.format(name=self.name))
        return lines + _guarantee_lines(
            res, "the local-DP composition of each node's discrete-Gaussian steps"
        )

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """The test accuracy of every node's model."""
        split = run.split
        outs = np.array([np.asarray(run.outputs[v].value) for v in run.ids])
        accs = [logistic_accuracy(w, split.X_test, split.y_test) for w in outs]
        return {
            "test_accuracy": float(np.mean(accs)),
            "test_accuracy_min": float(np.min(accs)),
            "data": split.source,
            "model": outs.mean(axis=0).tolist(),
        }

    # -- netdp plan
    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        return {"graph": topology, "dim": t.dim, "delta": t.delta, "lipschitz": t.clip}

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        out = super().plan_figures(case)
        out.release_std = out.mean_std = None
        out.std_how = "n/a: no closed form for the accuracy of private GD here"
        return out
