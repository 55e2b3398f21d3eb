"""`netdp plan`: which algorithm, with which noise, for a per-peer (ε, δ) target.

Given the number of participants n, a topology, a threat model, the per-peer target (ε, δ) and the
data bounds (clip, dim), the planner evaluates every algorithm that applies and compares it with
local DP and central DP at the same per-peer guarantee: the calibrated noise σ, the steps, the
caps, the predicted noise std of the released estimate, the messages and the time per node.

Nothing here re-implements a calibration. Each algorithm's parameters are prepared by the registry
(`get_algorithm(name).validate(params, n)`, what the bootstrap runs at submission) and the loss a
node contributing its maximum would incur towards each peer is the accountant's
(`get_algorithm(name).accountant.prospective`, what a node checks its budget with before a job). Where an
algorithm's noise parameter is not the per-peer target itself (the ring's per-window ε, IncA's σ_η),
the planner searches that parameter until the accountant's per-peer ε is at most the target
(`params_for_target`); `netdp demo --target-epsilon` and `netdp job submit --target-epsilon` use
the same function, so a plan and a run cannot disagree.

What differs between algorithms is asked of each record's hooks (`get_algorithm(name).hooks`,
`algorithms/hooks.py`): the parameter that sets its noise (`target_knob`), the topology and job
parameters of a target (`plan_topology`, `plan_params`), whether its ε holds against the target's
threat (`plan_refusal`), its row's figures (`plan_figures`) and the paper's figure
(`plan_paper`); the planner keeps the search, the baselines and the output.

Algorithms whose amplification is proven only for continuous Gaussian noise (all Muffliato
variants, walk-sgd, rw-sgd, IncA: docs/noise.md) are planned at the local-DP level they enforce;
the paper's continuous-noise figure is shown beside them, labelled, never as the plan.

Time per node comes from measured costs (docs/performance.md; `COSTS`): a job's wall time is its
sequential hops, rounds or iterations times the measured cost of one on the 2-vCPU development
machine, real processes, mTLS and durable ledgers. They are orders of magnitude, not promises.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netdp_node.algorithms import ALGORITHMS, get_algorithm
from netdp_node.algorithms.hooks import CONTINUOUS, PlanCase, PlanTarget, parse_threat
from netdp_node.errors import ConfigError
from netdp_node.privacy.discrete_gaussian import calibrate_on_grid, discrete_gaussian_sigma
from netdp_node.protocols.base import JobContext
from netdp_node.report import DEFAULT_DELTA, at_delta

#: Measured costs (docs/performance.md, "Over the network"): seconds per sequential step.
COSTS: dict[str, tuple[float, str]] = {
    "hop": (
        1 / 234,
        "one token hop, ring of 8 node processes, ledger included: 234 hops/s "
        "(docs/performance.md)",
    ),
    "gossip-round": (
        1 / 28.2,
        "one synchronous Muffliato round, 16 node processes: 28.2 rounds/s (docs/performance.md)",
    ),
    "inca-iteration": (
        1 / 6.1,
        "one IncA iteration, 16 node processes, k = 3: 6.1 iterations/s (docs/performance.md)",
    ),
}

#: the threat models a plan may ask for
THREATS = ("single", "collude:C", "any")

#: the algorithms the planner compares, in the order of its rows (each record's hooks say whether
#: and where: `plan_skipped`, `plan_order`)
PLANNED = tuple(
    sorted(
        (k for k, a in ALGORITHMS.items() if a.hooks.plan_skipped() is None),
        key=lambda k: ALGORITHMS[k].hooks.plan_order(),
    )
)
#: the planned algorithms whose guarantee can be below local DP's (proven for the discrete noise)
AMPLIFIED = tuple(k for k in PLANNED if ALGORITHMS[k].hooks.plan_amplified())
#: the algorithms the planner does not compare, and why
NOT_PLANNED = {k: why for k, a in ALGORITHMS.items() if (why := a.hooks.plan_skipped()) is not None}

#: The parameter that sets an algorithm's noise, and whether the loss grows with it
#: (`Hooks.target_knob`). `epsilon` of the walks, rw-sgd and Muffliato (calibrate=ldp) is already
#: the per-peer target; the ring's is per window, IncA's knob is σ_η.
KNOBS: dict[str, tuple[str, bool]] = {
    k: (knob.param, knob.increasing)
    for k, a in ALGORITHMS.items()
    if (knob := a.hooks.target_knob()) is not None
}
#: parameters the target replaces (given alongside --target-epsilon they would contradict it)
NOISE_PARAMS = ("epsilon", "epsilon0", "sigma", "sigma_eta", "calibrate", "noise_multiplier")

_TOL = 1e-9

#: What a plan is for (n, ε, δ, topology, threat, clip, dim, rounds, steps).
Target = PlanTarget


@dataclass
class Loss:
    epsilon: float
    delta: float
    method: str


@dataclass
class Planned:
    """The parameters `params_for_target` chose and what the accountant says they cost."""

    algorithm: str
    n: int
    params: dict[str, Any]  # to submit (raw: the bootstrap re-prepares them)
    prepared: dict[str, Any]  # as the registry prepared them
    loss: Loss  # worst per-peer loss of a node contributing its maximum
    knob: str
    note: str = ""

    def describe(self) -> str:
        v = self.params[self.knob]
        return (
            f"{self.algorithm}: {self.knob}={v:.6g} (per-peer ε {self.loss.epsilon:.4g} at "
            f"δ {self.loss.delta:.3g}, {self.loss.method})"
            + (f"; σ={self.prepared['sigma']:.6g}" if "sigma" in self.prepared else "")
        )


@functools.lru_cache(maxsize=8)
def _ids(n: int) -> tuple[str, ...]:
    return tuple(f"node-{i}" for i in range(1, n + 1))


def _spec(algorithm: str, n: int, params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "job_id": "plan",
        "algorithm": algorithm,
        "participants": list(_ids(n)),
        "params": dict(params),
        "public_seed": 0,
        "edges": [],
    }


def worst_loss(
    algorithm: str, prepared: Mapping[str, Any], n: int, delta: float | None = None
) -> Loss:
    """The largest per-peer loss of a node contributing its maximum (the accountant's prospective
    loss, the node's budget check before a job), stated at `delta` as `netdp privacy report`
    states it (`report.at_delta`; its own δ when it cannot be stated at `delta`), or at the
    accountant's own δ when `delta` is None."""
    spec = _spec(algorithm, n, prepared)
    # most accountants give every peer the same loss object: state each distinct one once
    distinct = {
        id(x): x for x in get_algorithm(algorithm).accountant.prospective(spec, _ids(n)[0]).values()
    }
    losses = list(distinct.values())
    if delta is not None:
        losses = [at_delta(x, delta) for x in losses]
    w = max(losses, key=lambda x: (x.epsilon, x.delta))
    return Loss(float(w.epsilon), float(w.delta), w.method)


#: prepared parameters by (algorithm, raw parameters, n): a plan prepares the same job several
#: times (the search, the paper's figure) and some preparations cost seconds at large n (the
#: public spectral gap of Muffliato's graph)
_PREPARED: dict[tuple[str, str, int], dict[str, Any]] = {}
_PREPARED_MAX = 256
#: Muffliato's preparation computes the public spectral gap of its graph (ring, complete,
#: hypercube: a function of the graph and n only) by a dense eigen-decomposition, seconds at
#: n = 2000: a plan computes it once and gives the value back to the later preparations
_GAPS: dict[tuple[str, int], float] = {}


def _validate(algorithm: str, raw: Mapping[str, Any], n: int) -> dict[str, Any]:
    key = (algorithm, json.dumps(raw, sort_keys=True, default=repr), n)
    hit = _PREPARED.get(key)
    if hit is not None:
        return copy.deepcopy(hit)
    call = dict(raw)
    gap_key = (str(raw.get("graph")), n)
    reuse = get_algorithm(algorithm).hooks.plan_reuses_spectral_gap()
    if reuse and "spectral_gap" not in raw and gap_key in _GAPS:
        call["spectral_gap"] = _GAPS[gap_key]  # the value its preparation computed before
    try:
        out = get_algorithm(algorithm).validate(call, n)
    except ValueError as e:
        raise ConfigError(f"{e} (planning {algorithm})") from None
    if reuse and "spectral_gap" not in raw and "spectral_gap_used" in out:
        _GAPS[gap_key] = float(out["spectral_gap_used"])
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.pop(next(iter(_PREPARED)))
    _PREPARED[key] = copy.deepcopy(out)
    return out


def params_for_target(
    algorithm: str,
    params: Mapping[str, Any],
    n: int,
    target_epsilon: float,
    target_delta: float = DEFAULT_DELTA,
) -> Planned:
    """The job parameters `params` with the noise set so that a node contributing its maximum
    loses at most (`target_epsilon`, `target_delta`) towards every peer, as `netdp privacy report`
    states a loss at one δ (default 1e-5, the reports' default). The noise parameter (`KNOBS`) is
    searched through the registry's calibration; the job's δ parameters are lowered when the
    per-peer δ cannot be stated at `target_delta` (the ring's grows with the rounds, the walk's
    with T). Raises ConfigError naming the field if nothing works."""
    if not 0 < target_delta < 1:
        raise ConfigError(f"target delta must be in (0, 1), got {target_delta!r}")
    b = dict(params)
    planned = _search(algorithm, b, n, target_epsilon, target_delta)
    for _ in range(8):
        if planned.loss.delta <= target_delta * (1 + _TOL):
            return planned
        f = 0.98 * target_delta / planned.loss.delta
        for k in ("delta", "delta_prime", "delta_hat"):
            if k in planned.prepared:
                b[k] = float(planned.prepared[k]) * f
        planned = _search(algorithm, b, n, target_epsilon, target_delta)
    if planned.loss.delta <= target_delta * (1 + _TOL):
        return planned
    raise ConfigError(
        f"target delta must be one the {algorithm} delta parameters can meet, got "
        f"{target_delta:g} (the per-peer δ stays at {planned.loss.delta:g})"
    )


def _search(
    algorithm: str, params: Mapping[str, Any], n: int, target_epsilon: float, delta: float
) -> Planned:
    """The ε half of `params_for_target`: the noise parameter (`KNOBS`) for which the worst
    per-peer ε, stated at `delta`, is at most the target (geometric bisection)."""
    if not 0 < target_epsilon < math.inf:
        raise ConfigError(f"target epsilon must be a finite number > 0, got {target_epsilon!r}")
    a = ALGORITHMS.get(algorithm)
    how = None if a is None else a.hooks.target_knob()
    if how is None:
        raise ConfigError(
            f"algorithm must be one the planner covers ({', '.join(sorted(KNOBS))}), "
            f"got {algorithm!r}"
        )
    given = sorted(set(params) & set(NOISE_PARAMS))
    if given:
        also = f" (nor {', '.join(given[1:])})" if given[1:] else ""
        raise ConfigError(
            f"{given[0]} must not be given with a target epsilon, got {given[0]}="
            f"{params[given[0]]!r}{also}: the target sets the noise of the job"
        )
    knob, increasing = how.param, how.increasing
    raw = dict(params)
    raw.update(how.fixed)  # e.g. Muffliato's calibrate=ldp (the guarantee, not the mean loss)
    note = how.note

    def attempt(v: float) -> tuple[dict[str, Any], dict[str, Any], Loss]:
        r = {**raw, knob: v}
        p = _validate(algorithm, r, n)
        return r, p, worst_loss(algorithm, p, n, delta)

    def ok(loss: Loss) -> bool:
        return loss.epsilon <= target_epsilon * (1 + _TOL)

    if not increasing:  # a σ: start from the algorithm's calibration at ε = target
        raw["epsilon"] = target_epsilon
        base = _validate(algorithm, raw, n)
        for k in how.keep:  # calibrated parameters that do not change the loss
            if k in base:
                raw[k] = base[k]
        start = float(base[knob])
    else:
        start = target_epsilon
    # widen by 4 (towards more noise) until a value meets the target, then bisect (geometric)
    step = 4.0 if not increasing else 0.25
    bad: float | None = None
    v = start
    got = attempt(v)
    for _ in range(60):  # 4^60: far beyond any usable noise
        if ok(got[2]):
            break
        bad, v = v, v * step
        got = attempt(v)
    else:
        raise ConfigError(
            f"target epsilon must be one that some {knob} of {algorithm} meets per peer, got "
            f"{target_epsilon:g}"
        )
    if bad is not None:
        good = v
        for _ in range(60):
            mid = math.sqrt(good * bad)
            trial = attempt(mid)
            if ok(trial[2]):
                good, got = mid, trial
            else:
                bad = mid
            if max(good, bad) / min(good, bad) < 1 + 1e-6:
                break
        if how.moved:
            note = how.moved
    r, p, loss = got
    return Planned(algorithm, n, r, p, loss, knob, note)


# -- the comparison ---------------------------------------------------------------------------------
@dataclass
class Row:
    algorithm: str
    applies: bool
    reason: str = ""  # why not, when it does not apply
    guarantee: str = ""  # what the per-peer ε rests on (the method), or the threat it holds against
    sigma: float | None = None  # noise std of one addition (σ_η for IncA)
    steps: str = ""
    caps: str = ""
    epsilon: float | None = None  # per-peer ε the accountant gives (≤ target)
    delta: float | None = None
    release_std: float | None = None  # noise std of the released value (per coordinate)
    mean_std: float | None = None  # ... expressed as the std of an estimate of the mean
    std_how: str = ""
    messages: float | None = None  # per node
    messages_how: str = ""
    time_s: float | None = None
    time_how: str = ""
    paper: dict[str, Any] = field(default_factory=dict)  # continuous-noise figure, labelled
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def _engine(algorithm: str, p: Mapping[str, Any], n: int) -> Any:
    """The engine of the first participant for the prepared parameters `p` (not run)."""
    ids = _ids(n)
    return get_algorithm(algorithm).engine(
        JobContext("plan", algorithm, ids[0], tuple(ids), dict(p), 0),
        None,
        np.random.default_rng(0),
        False,
    )


def _case(algorithm: str, t: Target, topo: str, p: Mapping[str, Any]) -> PlanCase:
    n = t.n
    return PlanCase(
        target=t,
        topology=topo,
        params=p,
        costs=COSTS,
        prepare=lambda raw: _validate(algorithm, raw, n),
        estimate_std=lambda: _estimate_std(algorithm, _spec(algorithm, n, p)),
        engine=lambda: _engine(algorithm, p, n),
    )


def baselines(t: Target) -> dict[str, Row]:
    """Local DP (each node releases its value once, N(0, σ²) for the target at Δ = 2·clip) and
    central DP (a trusted curator releases the sum once, with the same σ), per coordinate; σ from
    `discrete_gaussian_sigma` on the noise grid, as the algorithms calibrate."""
    sens = 2.0 * t.clip
    s = calibrate_on_grid(lambda d: discrete_gaussian_sigma(t.epsilon, t.delta, d), sens, t.dim)
    local = Row(
        "local DP",
        True,
        guarantee="each node's release is (ε, δ)-DP: holds against anyone",
        sigma=s,
        steps="1 release per node",
        caps="1 contribution",
        epsilon=t.epsilon,
        delta=t.delta,
        release_std=s * math.sqrt(t.n),
        mean_std=s / math.sqrt(t.n),
        std_how="σ·√n on the sum of n releases (σ/√n on the mean)",
        messages=1.0,
        messages_how="one release",
        time_s=COSTS["hop"][0],
        time_how="one hop",
    )
    central = Row(
        "central DP",
        True,
        guarantee="a trusted curator sees every value (a trust assumption, not a protocol)",
        sigma=s,
        steps="1 release",
        caps="1 contribution",
        epsilon=t.epsilon,
        delta=t.delta,
        release_std=s,
        mean_std=s / t.n,
        std_how="σ on the sum (σ/n on the mean)",
        messages=1.0,
        messages_how="the value to the curator",
        time_s=2 * COSTS["hop"][0],
        time_how="two hops",
    )
    return {"local-dp": local, "central-dp": central}


def check_target(t: Target) -> None:
    if not 3 <= t.n <= 100_000:
        raise ConfigError(f"--nodes must be between 3 and 100000, not {t.n}")
    if not 0 < t.epsilon < math.inf:
        raise ConfigError(f"--epsilon must be a finite number > 0, not {t.epsilon!r}")
    if not 0 < t.delta < 1:
        raise ConfigError(f"--delta must be in (0, 1), not {t.delta!r}")
    if not 0 < t.clip < math.inf:
        raise ConfigError(f"--clip must be a finite number > 0, not {t.clip!r}")
    if not 1 <= t.dim <= 1 << 16:
        raise ConfigError(f"--dim must be in 1..65536, not {t.dim}")
    if t.rounds < 1:
        raise ConfigError(f"--rounds must be at least 1, not {t.rounds}")
    if t.steps < 0:
        raise ConfigError(f"--steps must be >= 0 (0: the default), not {t.steps}")
    if t.topology is not None:
        from netdp_bootstrap.topology import KINDS  # lazy: start-up cost

        if t.topology not in KINDS:
            raise ConfigError(f"--topology must be one of {', '.join(KINDS)}, not {t.topology!r}")
    parse_threat(t.threat, t.n)


def plan(t: Target, algorithms: Sequence[str] = PLANNED) -> dict[str, Any]:
    """Evaluate every algorithm of `algorithms` for the target (see the module docstring)."""
    check_target(t)
    rows: list[Row] = []
    for alg in algorithms:
        rec = get_algorithm(alg)
        hooks = rec.hooks
        skipped = hooks.plan_skipped()
        if skipped is not None:
            rows.append(Row(alg, False, reason=skipped))
            continue
        topo, why = hooks.plan_topology(t, rec.topology)
        why = why or hooks.plan_refusal(t)
        if topo is None or why:
            rows.append(Row(alg, False, reason=why))
            continue
        base = hooks.plan_params(t, topo)
        try:
            planned = params_for_target(alg, base, t.n, t.epsilon, t.delta)
        except ConfigError as e:
            rows.append(Row(alg, False, reason=str(e)))
            continue
        p = planned.prepared
        row = Row(
            alg,
            True,
            guarantee=planned.loss.method,
            epsilon=planned.loss.epsilon,
            delta=planned.loss.delta,
            params=planned.params,
            note=planned.note,
        )
        case = _case(alg, t, topo, p)
        for f in dataclasses.fields(figures := hooks.plan_figures(case)):
            setattr(row, f.name, getattr(figures, f.name))
        used = {k: v for k, v in planned.params.items() if k not in NOISE_PARAMS}
        row.paper = hooks.plan_paper(case, used)
        rows.append(row)
    listed = {r.algorithm for r in rows}
    for alg, why in NOT_PLANNED.items():
        if alg not in listed:
            rows.append(Row(alg, False, reason=why))
    base_rows = baselines(t)
    return {
        "target": {
            "nodes": t.n,
            "epsilon": t.epsilon,
            "delta": t.delta,
            "topology": t.topology,
            "threat": t.threat,
            "clip": t.clip,
            "dim": t.dim,
        },
        "algorithms": [r.as_dict() for r in rows],
        "baselines": {k: r.as_dict() for k, r in base_rows.items()},
        "costs": {k: {"seconds": v, "source": s} for k, (v, s) in COSTS.items()},
        "notes": [
            "σ, steps and caps come from the registry's calibration (what the bootstrap runs); "
            "ε and δ are the accountant's per-peer loss of a node contributing its maximum",
            "std: noise only, per coordinate, of the released value and of the mean it estimates",
            "Muffliato, walk-sgd, rw-sgd and IncA enforce the local-DP level (their "
            "amplification is proven for continuous noise only): no gain over local DP is "
            "claimed; the paper's figure is shown beside them, labelled",
        ],
    }


# -- output -----------------------------------------------------------------------------------------
def _num(v: float | None, fmt: str = ".4g") -> str:
    return "n/a" if v is None else format(v, fmt)


def render(res: Mapping[str, Any]) -> str:
    from netdp_node.progress import table  # lazy: start-up cost

    t = res["target"]
    head = (
        f"plan for n={t['nodes']}, per-peer target ε={t['epsilon']:g}, δ={t['delta']:g}, threat "
        f"{t['threat']}, topology {t['topology'] or '(each algorithm its own)'}, clip "
        f"{t['clip']:g}, dim {t['dim']}"
    )
    cols = ("algorithm", "σ", "steps", "caps", "ε", "δ", "std (mean)", "msgs/node", "time")
    rows = []
    every = [*res["algorithms"], *res["baselines"].values()]
    for r in every:
        if not r["applies"]:
            continue
        rows.append(
            (
                r["algorithm"],
                _num(r["sigma"]),
                r["steps"],
                r["caps"],
                _num(r["epsilon"]),
                _num(r["delta"], ".2g"),
                _num(r["mean_std"]),
                _num(r["messages"], ".3g"),
                "n/a" if r["time_s"] is None else f"{r['time_s']:.3g} s",
            )
        )
    out = [head, "", table(cols, rows, right=("σ", "ε", "δ", "std (mean)", "msgs/node", "time"))]
    out.append("")
    out.append("  guarantee and predicted std:")
    for r in every:
        if r["applies"]:
            out.append(f"    {r['algorithm']}: {r['guarantee']}; std: {r['std_how']}")
    paper = [r for r in res["algorithms"] if r.get("paper")]
    if paper:
        out.append("  the papers' continuous-noise figures (NOT a guarantee for the noise drawn):")
        for r in paper:
            s = r["paper"].get("sigma")
            out.append(
                f"    {r['algorithm']}: "
                + (f"σ={s:.4g} " if s is not None else "")
                + f"({r['paper']['what']})"
            )
    skipped = [r for r in res["algorithms"] if not r["applies"]]
    if skipped:
        out.append("  not applicable:")
        for r in skipped:
            out.append(f"    {r['algorithm']}: {r['reason']}")
    out.append("  time: " + "; ".join(f"{k} {v['source']}" for k, v in res["costs"].items()))
    return "\n".join(out)


def plot(res: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """A PNG: the predicted std of the mean estimate of each algorithm that has one, beside local
    DP and central DP at the same per-peer guarantee (log scale). Imports matplotlib here only
    (ImportError if absent). Returns {bars: {name: std}, size: (w, h) pixels}."""
    import matplotlib  # lazy: start-up cost

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up cost

    bars = {
        r["algorithm"]: r["mean_std"]
        for r in res["algorithms"]
        if r["applies"] and r["mean_std"] is not None
    }
    base = {r["algorithm"]: r["mean_std"] for r in res["baselines"].values()}
    t = res["target"]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    names = list(bars)
    colours = ["#4c72b0" if a in AMPLIFIED else "#999999" for a in names]
    ax.bar(names, [bars[a] for a in names], color=colours)
    styles = {"local DP": ("#c44e52", "--"), "central DP": ("#55a868", ":")}
    for name, v in base.items():
        col, ls = styles.get(name, ("black", "-"))
        ax.axhline(v, color=col, linestyle=ls, label=f"{name} ({v:.3g})")
    ax.set_yscale("log")
    lowest = min([*bars.values(), *base.values()])
    ax.set_ylim(bottom=lowest / 2)
    ax.set_ylabel("noise std of the mean estimate")
    ax.set_title(
        f"n={t['nodes']}, per-peer ε={t['epsilon']:g}, δ={t['delta']:g}, threat {t['threat']} "
        "(grey: local-DP level enforced)",
        fontsize=9,
    )
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    w, h = fig.canvas.get_width_height()
    plt.close(fig)
    return {"bars": bars, "baselines": base, "size": (w, h)}


def target_line(planned: Planned) -> str:
    """What `--target-epsilon` chose, printed before the job starts."""
    return f"planned for a per-peer target: {planned.describe()}" + (
        f" [{planned.note}]" if planned.note else ""
    )


def apply_target(
    algorithm: str, params: Mapping[str, Any], n: int, target_epsilon: float
) -> tuple[dict[str, Any], str]:
    """For `--target-epsilon`: the parameters to submit and the line to print."""
    planned = params_for_target(algorithm, params, n, target_epsilon)
    return planned.params, target_line(planned)


__all__: list[str] = [
    "CONTINUOUS",
    "COSTS",
    "PLANNED",
    "Planned",
    "Target",
    "apply_target",
    "baselines",
    "params_for_target",
    "parse_threat",
    "plan",
    "plot",
    "render",
    "worst_loss",
]


def _estimate_std(algorithm: str, spec: Mapping[str, Any]) -> tuple[float, str] | None:
    """The accountant's closed-form noise std of the released value (None: it has none)."""
    std = get_algorithm(algorithm).accountant.estimate_std
    return None if std is None else std(spec)
