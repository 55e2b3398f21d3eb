"""What `netdp demo`, `simulate`, `compose` and `audit` ask IncA (`algorithms.hooks`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from netdp_node.algorithms.catalog import DEMOS
from netdp_node.algorithms.hooks import (
    CONTINUOUS,
    INCA_SHARES,
    NO_GAIN_PROVEN,
    DemoFlags,
    DemoRun,
    Hooks,
    PlanCase,
    PlanFigures,
    PlanKnob,
    PlanTarget,
    SimRun,
    check_dropouts,
    plan_on_complete,
)
from netdp_node.algorithms.inca.accountant import INCA_AUDIT
from netdp_node.algorithms.inca.engine import central_dp_std
from netdp_node.algorithms.inca.states import node_states
from netdp_node.errors import ConfigError
from netdp_node.faults import inca_dropout_flags
from netdp_node.privacy import inca_audit
from netdp_node.privacy.inca_audit import execution_from_info

#: Most nodes whose per-node audits `netdp simulate` runs (each is a linear system of n(T+1)).
SIM_AUDIT_NODES = 64


@dataclass(frozen=True)
class IncaHooks(Hooks):
    demo: str | None = DEMOS["inca"]
    composed: bool = True
    audit_checks: frozenset[str] = frozenset({INCA_SHARES})
    # an undelivered MIX or CLOSE is part of the protocol (the receiver was down or had mixed)
    undelivered_expected: bool = True

    # -- demo
    def check_demo_flags(self, flags: DemoFlags) -> None:
        if flags.k < 1:
            raise ConfigError(f"--k must be at least 1, not {flags.k}")
        check_dropouts(flags.leave, flags.miss)

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        # σ_Δ is calibrated for the dropouts the flags will cause: --leave parties leave for
        # good, --miss parties are offline about a third of the time (2·round_s every 6·round_s)
        params: dict[str, Any] = {
            "T": flags.steps or 10,
            "k": flags.k,
            "scheme": flags.scheme,
            "threat": flags.threat,
            "delta": flags.delta,
            "hi": flags.clip,
            "round_s": flags.round_s,
            "expect_leave": flags.leave,
            "expect_miss": flags.miss / 3,
        }
        if flags.epsilon is not None:
            params["epsilon"] = flags.epsilon
        return params

    def demo_faults(self, flags: DemoFlags, ids: Sequence[str]) -> dict[str, list[str]]:
        """Node fault flags for `--leave` / `--miss` (`faults.inca_dropout_flags`), seeded by
        --seed."""
        return inca_dropout_flags(
            ids,
            leave=flags.leave,
            miss=flags.miss,
            seed=flags.seed or 0,
            T=flags.steps or 10,
            k=flags.k,
            round_s=flags.round_s,
            horizon=flags.timeout + 60,
        )

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        p = params
        return (
            f"IncA mean, T={p['T']} iterations, k={p['k']}, scheme {p['scheme']}, target "
            f"ε={p['epsilon']:g} at δ={p['delta']} against {p['threat']}, σ_η="
            f"{p['sigma_eta']:.3g}, σ_Δ={p['sigma_delta']:.3g} ({p['sigma_delta_source']})"
        )

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        """The result the stayers released (read from their ledgers), the true mean, the
        central-DP error at the privacy the execution achieved, the share check (Eq. 8) over the
        merged ledgers, and what the leavers took away (`inca_audit.estimate_terms`)."""
        ids, values, privacy = run.ids, run.values, run.privacy
        rows = run.job_rows()
        results = {nid: r.result for nid, r in rows.items() if r.result and r.result.get("value")}
        ref_node = max(results, key=lambda nid: len(results[nid]["info"]["final"]))
        info = results[ref_node]["info"]
        spec = rows[ref_node].spec
        p = spec["params"]
        n = len(ids)
        est = np.asarray(results[ref_node]["value"], float)
        lo, hi = float(p["lo"]), float(p["hi"])
        truth = np.mean([np.clip(values[nid], lo, hi) for nid in ids], axis=0)
        ex = execution_from_info(spec, info)
        terms = inca_audit.estimate_terms(ex)
        drop = inca_audit.dropout_summary(ex, float(p["sigma_delta"]))
        w = terms["omega_total"]
        finals = set(info["final"])
        # the audit of this execution against sampled adversaries (labelled, not a guarantee:
        # the guarantee the nodes report is the local-DP level of η; docs/algorithms/inca.md)
        stayer_eps = [
            row["baselines"][INCA_AUDIT]["epsilon"]
            for row in privacy
            if row["node"] in finals and INCA_AUDIT in row["baselines"]
        ]
        eps_exec = max(stayer_eps) if stayer_eps else float("nan")
        shares_ok, shares_details = run.check(INCA_SHARES)
        # each node's state from the execution the result states, not from the planned faults (a
        # planned departure may come after T, a planned offline window may miss no iteration)
        states = node_states(ex, ids)
        agree = all(
            np.allclose(results[nid]["value"], est, atol=1e-12)
            for nid in results
            if set(results[nid]["info"]["final"]) == finals
        )
        return {
            "estimate": est.tolist(),
            "truth": truth.tolist(),
            # what Σy/Σω estimates without noise: the values weighted by their share in the finals
            "truth_weighted": (
                terms["c_u"] @ np.stack([np.clip(values[nid], lo, hi) for nid in ids]) / w
            ).tolist(),
            "abs_error": float(np.abs(est - truth).max()),
            "final": sorted(finals),
            "missing": info["missing"],
            "lost_messages": info["lost"],
            "stayers_agree": agree,
            "stayed": states.stayed,
            "leavers": states.gone,
            "missers": states.rejoined,
            "missed_iterations": states.missed,
            "epsilon_execution": eps_exec,
            "epsilon_target": float(p["epsilon"]),
            "central_dp_std": central_dp_std(
                eps_exec, float(p["delta"]), float(p["sensitivity"]), n
            )
            if stayer_eps
            else None,
            "central_dp_std_target": central_dp_std(
                float(p["epsilon"]), float(p["delta"]), float(p["sensitivity"]), n
            ),
            "std_from_eta": float(p["sigma_eta"]) * float(np.linalg.norm(terms["c_u"])) / w,
            # local DP for the guarantee the nodes report (the local-DP level of η): each node
            # releases x + η once, the mean of the n releases
            "ldp_std": float(p["sigma_eta"]) / np.sqrt(n),
            "uncancelled_noise_std": drop["uncancelled_noise_std"],
            "uncancelled_terms": int(np.count_nonzero(np.abs(terms["c_delta"]) > 1e-12)),
            "value_share_released": drop["value_share_released"],
            "values_lost": float(n - terms["c_u"].sum()),
            "sum_omega": info["sum_omega"],
            "shares_ok": shares_ok,
            "shares_details": shares_details,
            "sigma_eta": float(p["sigma_eta"]),
            "sigma_delta": float(p["sigma_delta"]),
            "T": int(p["T"]),
            "k": int(p["k"]),
            "threat": p["threat"],
        }

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        lines = [
            f"IncA private mean over {res['nodes']} {where}, T={res['T']} iterations, "
            f"k={res['k']} {head}",
            f"  estimate  {np.round(res['estimate'], 4).tolist()} ± {res['std_from_eta']:.4f} "
            f"(noise std from η)  (Σy/Σω over the "
            f"{len(res['final'])} parties online at T: {', '.join(res['final'])})",
            f"  truth     {np.round(res['truth'], 4).tolist()}  (mean of every node's value)",
            f"  error     {res['abs_error']:.4f}   central DP at the audited ε of sampled "
            f"adversaries (ε={res['epsilon_execution']:.3g}, not a guarantee): "
            f"std {res['central_dp_std'] or float('nan'):.4f}"
            f"; at the target ε={res['epsilon_target']:g}: {res['central_dp_std_target']:.4f}",
            f"  noise of the estimate: from η std {res['std_from_eta']:.4f}, from the correlated "
            f"noise the leavers took away std {res['uncancelled_noise_std']:.4f} "
            f"({res['uncancelled_terms']} uncancelled Δ terms); values lost "
            f"{res['values_lost']:.2f} of {res['nodes']}",
        ]
        if res["leavers"] or res["missers"]:
            lines.append(
                f"  gone by T (left for good, or record never arrived): "
                f"{', '.join(res['leavers']) or '-'}; dropped out for a while, back at T: "
                + (
                    ", ".join(
                        f"{k} ({v} iterations missed)" for k, v in res["missed_iterations"].items()
                    )
                    or "-"
                )
            )
        if "ldp_std" in res:
            lines.append(
                f"  noise std of the mean: netdp {res['std_from_eta']:.4f} (from η) vs local DP "
                f"{res['ldp_std']:.4f} for the same per-peer guarantee"
            )
        lines.append(NO_GAIN_PROVEN.format(name="IncA"))
        verdict = "yes" if res["shares_ok"] else "NO: " + "; ".join(res["shares_details"])
        lines.append(
            f"  every party that stayed to the end injected exactly its share (Eq. 8, "
            f"merged ledgers): {verdict}"
        )
        return lines

    # -- simulate
    def sim_param_defaults(self, leave: float, miss: float) -> dict[str, Any]:
        # calibrate σ_Δ for the dropouts --leave / --miss cause (the missed share is taken
        # larger than one iteration in T: conservative)
        return {"expect_leave": leave, "expect_miss": miss / 2}

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        rng = np.random.default_rng([seed, 7])
        vals = rng.uniform(params["lo"], params["hi"], size=(len(ids), int(params["dim"])))
        return {nid: vals[i] for i, nid in enumerate(ids)}, None

    def dropout_flags(
        self, ids: Sequence[str], params: Mapping[str, Any], leave: float, miss: float, seed: int
    ) -> dict[str, list[str]] | None:
        """The flags `netdp demo --algorithm inca --leave --miss` gives its node processes
        (`faults.inca_dropout_flags`: leavers --fault-leave-at-step in the mixing phase, missers
        --fault-offline windows of 2 iterations every 6)."""
        round_s = float(params.get("round_s", 2.0))
        return inca_dropout_flags(
            ids,
            leave=leave,
            miss=miss,
            seed=seed,
            T=int(params["T"]),
            k=int(params["k"]),
            round_s=round_s,
            horizon=float(params["T"]) * round_s * 4 + 60,
        )

    outcome_reads_entries = False  # `sim_outcome` reads the outputs only

    def sim_privacy_skipped(self, n: int) -> str | None:
        if n <= SIM_AUDIT_NODES:
            return None
        return (
            f"per-node audits skipped above {SIM_AUDIT_NODES} nodes (each is a linear system of "
            "size n(T+1)); use `netdp demo --algorithm inca` or inca_audit directly"
        )

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """Estimate vs true mean, the central-DP error at the job's target privacy, the finals,
        and the correlated noise left uncancelled by leavers (`inca_audit.estimate_terms`)."""
        ids, params = run.ids, run.params
        outs = [o for o in run.outputs.values() if o.value is not None]
        first = max(outs, key=lambda o: len(o.info["final"])) if outs else None
        lo, hi = float(params["lo"]), float(params["hi"])
        truth = np.mean([np.clip(np.asarray(run.data[i], float), lo, hi) for i in ids], axis=0)
        o: dict[str, Any] = {"truth": truth.tolist()}
        if first is None:
            return {**o, "estimate": None}
        ex = execution_from_info(run.spec, first.info)
        terms = inca_audit.estimate_terms(ex)
        w = terms["omega_total"]
        est = np.asarray(first.value)
        o.update(
            {
                "estimate": est.tolist(),
                "abs_error": float(np.abs(est - truth).max()),
                "final": len(first.info["final"]),
                "missing": first.info["missing"],
                "lost_messages": len(first.info["lost"]),
                "sum_omega": first.info["sum_omega"],
                "central_dp_std": central_dp_std(
                    float(params["epsilon"]),
                    float(params["delta"]),
                    float(params["sensitivity"]),
                    len(ids),
                ),
                "inca_std_eta": float(params["sigma_eta"])
                * float(np.linalg.norm(terms["c_u"]))
                / w,
                "uncancelled_noise_std": inca_audit.dropout_summary(
                    ex, float(params["sigma_delta"])
                )["uncancelled_noise_std"],
                "values_lost": float(len(ids) - terms["c_u"].sum()),
                "noise_std": float(params["sigma_eta"]) * float(np.linalg.norm(terms["c_u"])) / w,
                "ldp_std": float(params["sigma_eta"]) / np.sqrt(len(ids)),
                "std_of": "the mean (from η)",
                "gain_note": NO_GAIN_PROVEN.format(name="IncA").strip(),
            }
        )
        return o

    # -- compose
    def compose_job(self, rounds: int, nodes: int, topology: str) -> list[str]:
        return ["--param", f"T={rounds}"]  # IncA iterations

    # -- netdp plan
    def target_knob(self) -> PlanKnob | None:
        # σ_η: the search starts from the paper's calibration at ε = target, and keeps the
        # calibrated Δ noise (it does not change the loss)
        return PlanKnob(
            "sigma_eta",
            increasing=False,
            keep=("sigma_delta",),
            moved="σ_η raised above the paper's calibration to the local-DP level of the target",
        )

    def plan_order(self) -> int:
        return 1  # after the walks and the gossip

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        return plan_on_complete(t)

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        p: dict[str, Any] = {"dim": t.dim, "lo": -t.clip, "hi": t.clip, "delta": t.delta}
        if t.colluders > 1:  # the paper's calibration (shown, labelled) against that share
            p["threat"] = f"collude:{t.colluders / t.n:.6g}"
        return p

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        n, p = case.target.n, case.params
        T, k = int(p["T"]), int(p["k"])
        sigma = float(p["sigma_eta"])
        it, it_how = case.costs["inca-iteration"]
        return PlanFigures(
            sigma=sigma,
            steps=f"T={T} iterations, k={k}",
            caps=f"σ_Δ={float(p['sigma_delta']):.4g} (correlated, cancels)",
            release_std=sigma / math.sqrt(n),
            mean_std=sigma / math.sqrt(n),
            std_how="σ_η/√n: the mean of the n releases x + η (the Δ terms cancel)",
            messages=float(T * k),
            messages_how="T × k direct messages (dissemination relays not counted)",
            time_s=T * it,
            time_how=f"{T} iterations × {it_how}",
        )

    def plan_paper(self, case: PlanCase, used: Mapping[str, Any]) -> dict[str, Any]:
        try:
            q = case.prepare({**used, "epsilon": case.target.epsilon})
        except ConfigError:
            return {}
        return {
            "sigma": float(q["sigma_eta"]),
            "what": f"σ_η of the paper's calibration against {q['threat']}, " + CONTINUOUS,
        }
