"""`netdp simulate`: the protocol engines for thousands of nodes in one process.

The same sans-IO engines the daemons run (`netdp_node.protocols`), driven by a discrete-event loop
in virtual time: a message arrives `latency` virtual seconds after it is sent and is acknowledged
as long again later; timers fire in virtual time; every node has its own seeded generator (derived
from `--seed` and its index), so a run is reproducible. There are no sockets and no SQLite in the
loop: each node's view is collected as ledger `Entry` objects (so the accountants run on it
unchanged), or only as the holder sequence (`record="walk"`) when n and T are large.

What it writes: `--trace FILE` (JSON lines, one per holding: t, holder, epoch, data) for
`netdp audit --trace`, and `--ledgers DIR` (one real ledger per node, written at the end).
"""

from __future__ import annotations

import heapq
import itertools
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from netdp_node.datasets import learning_split
from netdp_node.errors import ConfigError
from netdp_node.ledger import Entry, Ledger
from netdp_node.privacy import inca_audit
from netdp_node.privacy.accountant import JobView, per_job_losses
from netdp_node.privacy.empirical import GLOBAL_KNOWLEDGE_NOTE, audit_walk
from netdp_node.privacy.inca_audit import execution_from_info
from netdp_node.protocols import get_algorithm
from netdp_node.protocols.base import (
    Action,
    Engine,
    JobContext,
    Message,
    Output,
    Record,
    Refused,
    Send,
    SetTimer,
)
from netdp_node.protocols.inca import central_dp_std
from netdp_node.protocols.ring import clip_l2
from netdp_node.protocols.walk import HOLD_EVENTS, logistic_accuracy
from netdp_node.runtime import _jsonable, _result_dict

RecordMode = Literal["full", "walk", "none"]


@dataclass
class SimResult:
    algorithm: str
    n: int
    params: dict[str, Any]
    outputs: dict[str, Output]
    holders: list[int]  # index of the holder at every step, in order (the walk)
    data_steps: list[bool]  # whether that step carried data
    entries: dict[str, list[Entry]] = field(default_factory=dict)
    events: int = 0
    virtual_time: float = 0.0
    wall_s: float = 0.0
    refused: int = 0

    @property
    def value(self) -> np.ndarray | None:
        out = next(iter(self.outputs.values()), None)
        return None if out is None else out.value


class Simulator:
    """Runs one job of `algorithm` over participants `ids` with per-node `data`."""

    def __init__(self, algorithm: str, ids: Sequence[str], params: Mapping[str, Any],
                 data: Mapping[str, np.ndarray | None], *, seed: int = 0, public_seed: int = 0,
                 latency: float = 0.001, record: RecordMode = "full",
                 contribute: Mapping[str, bool] | None = None, job_id: str = "sim",
                 down: Callable[[str, float], bool] | None = None,
                 lose: Callable[[str, str, Message], str | None] | None = None) -> None:
        """`down(node, now)`: the node is unreachable at virtual time `now` (a dropout: messages
        from or to it are lost, with no outcome for the sender; its timers still fire, as a
        daemon's do). `lose(sender, to, msg)`: "msg" loses that message, "ack" its acknowledgement
        (the receiver took it, the sender never learns), None delivers both."""
        self.down = down or (lambda nid, now: False)
        self.lose = lose or (lambda sender, to, msg: None)
        self.algorithm = algorithm
        self.ids = list(ids)
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        self.params = dict(params)
        self.latency = latency
        self.record = record
        self.job_id = job_id
        algo = get_algorithm(algorithm)
        self.engines: dict[str, Engine] = {}
        for i, nid in enumerate(self.ids):
            ctx = JobContext(job_id, algorithm, nid, tuple(self.ids), self.params, public_seed)
            self.engines[nid] = algo.engine(
                ctx, data.get(nid), np.random.default_rng([seed, i]),
                contribute=(contribute or {}).get(nid, data.get(nid) is not None))
        self.now = 0.0
        self._inflight = 0  # messages and acknowledgements not yet delivered
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._tick = itertools.count()
        self.result = SimResult(algorithm, len(self.ids), self.params, {}, [], [])
        if record == "full":
            self.result.entries = {nid: [] for nid in self.ids}

    # -- event loop ----------------------------------------------------------------------------
    def _at(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        if fn != self._timer:
            self._inflight += 1
        heapq.heappush(self._heap, (self.now + delay, next(self._tick), fn, args))

    def _entry(self, nid: str, **kw: Any) -> None:
        if self.record == "full":
            self.result.entries[nid].append(Entry(job_id=self.job_id, **kw))

    def _apply(self, nid: str, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Record):
                if a.event in HOLD_EVENTS:
                    self.result.holders.append(self.index[nid])
                    self.result.data_steps.append(a.event == "contribute")
                self._entry(nid, direction="local", event=a.event, peer=a.peer,
                            params=dict(a.params))
            elif isinstance(a, Send):
                m = a.msg
                self._entry(nid, direction="sent", event=m.kind, peer=a.to, kind=m.kind,
                            walk=m.walk, epoch=m.epoch, seq=m.seq, round=m.round)
                verdict = self.lose(nid, a.to, m)
                if verdict != "msg" and not self.down(nid, self.now):
                    self._at(self.latency, self._deliver, nid, a.to, m, verdict == "ack")
            elif isinstance(a, SetTimer):
                self._at(a.delay, self._timer, nid, a.name)
            elif isinstance(a, Output):
                self.result.outputs[nid] = a
                self._entry(nid, direction="local", event="output",
                            params={"info": _jsonable(a.info)})

    def _deliver(self, sender: str, to: str, msg: Message, lose_ack: bool = False) -> None:
        if self.down(to, self.now):
            return
        try:
            actions = self.engines[to].on_message(sender, msg)
        except Refused as e:
            self.result.refused += 1
            out = self.engines[sender].on_undeliverable(to, msg, e.code.name, e.reason)
            self._apply(sender, out or [])
            return
        self._entry(to, direction="received", event=msg.kind, peer=sender, kind=msg.kind,
                    walk=msg.walk, epoch=msg.epoch, seq=msg.seq, round=msg.round)
        self._apply(to, actions)
        if not lose_ack:
            self._at(self.latency, self._ack, sender, to, msg)

    def _ack(self, sender: str, to: str, msg: Message) -> None:
        if self.down(sender, self.now):
            return
        self._apply(sender, self.engines[sender].on_delivered(to, msg))

    def _timer(self, nid: str, name: str) -> None:
        self._apply(nid, self.engines[nid].on_timer(name))

    def run(self, *, max_events: int = 50_000_000,
            progress: Callable[[int, int], None] | None = None) -> SimResult:
        t0 = time.perf_counter()
        for nid in self.ids:
            self._apply(nid, self.engines[nid].start())
        expected = int(self.params.get("T", 0))
        events = 0
        while self._heap and events < max_events:
            self.now, _, fn, args = heapq.heappop(self._heap)
            if fn != self._timer:
                self._inflight -= 1
            fn(*args)
            events += 1
            if progress is not None and events % 4096 == 0:
                progress(len(self.result.holders), expected)
            if len(self.result.outputs) == len(self.ids) and self._inflight == 0:
                break  # done everywhere, the last handoffs delivered; only timers are left
        if progress is not None:
            progress(len(self.result.holders), expected)
        self.result.events = events
        self.result.virtual_time = self.now
        self.result.wall_s = time.perf_counter() - t0
        return self.result


# -- inputs and outputs ------------------------------------------------------------------------------
def synthetic_data(algorithm: str, ids: Sequence[str], params: Mapping[str, Any], seed: int,
                   points_per_node: int = 8, data_dir: str | None = None) -> tuple[
                       dict[str, np.ndarray], Any]:
    """Per-node data for a simulation: values in [0, clip] (sums), categories (histograms), or
    logistic-regression rows (SGD: the housing data when found, else synthetic; returns the split
    too, for test accuracy)."""
    rng = np.random.default_rng([seed, 7])
    n = len(ids)
    if algorithm in ("walk-sum", "ring-sum", "muffliato", "muffliato-random"):
        dim = int(params.get("dim", 1))
        clip = float(params.get("clip", 1.0))
        vals = rng.uniform(0.0, clip / np.sqrt(dim), size=(n, dim))
        return {nid: vals[i] for i, nid in enumerate(ids)}, None
    if algorithm == "inca":
        vals = rng.uniform(params["lo"], params["hi"], size=(n, int(params["dim"])))
        return {nid: vals[i] for i, nid in enumerate(ids)}, None
    if algorithm == "walk-histogram":
        L = int(params["bins"])
        cats = rng.choice(L, size=n, p=np.arange(1, L + 1) / (L * (L + 1) / 2))
        return {nid: np.array([float(c)]) for nid, c in zip(ids, cats)}, None
    if algorithm in ("walk-sgd", "muffliato-gd"):
        split = learning_split(n, points_per_node, seed, data_dir)
        users = split.per_user(n, points_per_node)
        return dict(zip(ids, users)), split
    raise ValueError(f"no synthetic data for {algorithm!r}")


def inca_dropouts(sim: Simulator, ids: Sequence[str], T: int, leave: float, miss: float,
                  seed: int) -> Callable[[str, float], bool]:
    """A dropout scenario for `netdp simulate --algorithm inca`: round(leave·n) nodes leave for good
    at a uniform iteration 2..T, round(miss·n) others miss one uniform iteration 1..T-1 (defined on
    each node's own iteration, as a daemon's fault plan is on its own steps)."""
    if not (0 <= leave < 1 and 0 <= miss < 1 and leave + miss < 1):
        raise ConfigError("--leave and --miss must be fractions in [0, 1) with a sum below 1")
    rng = np.random.default_rng([seed, 13])
    n = len(ids)
    order = rng.permutation(n)
    nl, nm = int(round(leave * n)), int(round(miss * n))
    windows: dict[str, tuple[int, int]] = {}
    for i in order[:nl]:
        windows[ids[int(i)]] = (int(rng.integers(2, T + 1)) if T > 1 else 1, 10 ** 9)
    for i in order[nl:nl + nm]:
        t = int(rng.integers(1, T)) if T > 1 else 1
        windows[ids[int(i)]] = (t, t)

    def down(nid: str, now: float) -> bool:
        w = windows.get(nid)
        return w is not None and w[0] <= getattr(sim.engines[nid], "cur", 0) <= w[1]

    return down


def inca_summary(res: SimResult, ids: Sequence[str], params: Mapping[str, Any],
                 data: Mapping[str, np.ndarray], spec: Mapping[str, Any]) -> dict[str, Any]:
    """Estimate vs true mean, the central-DP error at the job's target privacy, the finals, and
    the correlated noise left uncancelled by leavers (`inca_audit.estimate_terms`)."""
    outs = [o for o in res.outputs.values() if o.value is not None]
    first = max(outs, key=lambda o: len(o.info["final"])) if outs else None
    lo, hi = float(params["lo"]), float(params["hi"])
    truth = np.mean([np.clip(np.asarray(data[i], float), lo, hi) for i in ids], axis=0)
    o: dict[str, Any] = {"truth": truth.tolist()}
    if first is None:
        return {**o, "estimate": None}
    ex = execution_from_info(spec, first.info)
    terms = inca_audit.estimate_terms(ex)
    w = terms["omega_total"]
    est = np.asarray(first.value)
    o.update({
        "estimate": est.tolist(), "abs_error": float(np.abs(est - truth).max()),
        "final": len(first.info["final"]), "missing": first.info["missing"],
        "lost_messages": len(first.info["lost"]), "sum_omega": first.info["sum_omega"],
        "central_dp_std": central_dp_std(float(params["epsilon"]), float(params["delta"]),
                                         float(params["sensitivity"]), len(ids)),
        "inca_std_eta": float(params["sigma_eta"]) * float(np.linalg.norm(terms["c_u"])) / w,
        "uncancelled_noise_std": inca_audit.dropout_summary(
            ex, float(params["sigma_delta"]))["uncancelled_noise_std"],
        "values_lost": float(len(ids) - terms["c_u"].sum()),
    })
    return o


def write_trace(res: SimResult, ids: Sequence[str], path: str | Path) -> None:
    """JSON lines: a header, then one line per holding (the walk, for `netdp audit --trace`)."""
    with open(path, "w") as f:
        f.write(json.dumps({"algorithm": res.algorithm, "n": res.n, "participants": list(ids),
                            "params": res.params}) + "\n")
        for t, (h, d) in enumerate(zip(res.holders, res.data_steps), start=1):
            f.write(json.dumps({"t": t, "holder": h, "data": d}) + "\n")


def read_trace(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    with open(path) as f:
        header = json.loads(f.readline())
        holders = [json.loads(line)["holder"] for line in f if line.strip()]
    return header, np.asarray(holders, dtype=np.int64)


def write_ledgers(res: SimResult, spec: Mapping[str, Any], root: str | Path) -> None:
    """One real ledger per node (as a daemon would have written it), for `netdp privacy report`
    and `netdp audit`."""
    for nid, entries in res.entries.items():
        led = Ledger(Path(root) / nid, nid)
        try:
            led.begin_job(spec["job_id"], spec["algorithm"], dict(spec), True)
            out = res.outputs.get(nid)
            update = None
            if out is not None:
                update = {"job_id": spec["job_id"], "state": "done", "result": _result_dict(out)}
            led.commit(entries, job_update=update)
        finally:
            led.close()


def progress_printer(stream: Any = sys.stderr, width: int = 30) -> Callable[[int, int], None]:
    last = [-1.0]

    def show(done: int, total: int) -> None:
        frac = min(1.0, done / total) if total else 0.0
        if frac - last[0] < 0.01 and frac < 1.0:
            return
        last[0] = frac
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        stream.write(f"\r  simulating [{bar}] {done}/{total or '?'} steps")
        if frac >= 1.0:
            stream.write("\n")
        stream.flush()
    return show


def walk_audit_dict(holders: np.ndarray, n: int, algorithm: str, params: Mapping[str, Any],
                    paper_compatible: bool = False) -> dict[str, Any]:
    """The walk-conditional audit (network-dp.md §4) of one walk, as a JSON-friendly summary."""
    if algorithm not in ("walk-sum", "walk-histogram"):
        raise ValueError(f"the walk-conditional audit covers walk-sum and walk-histogram, not "
                         f"{algorithm}")
    mode: Literal["gaussian", "histogram"] = (
        "gaussian" if algorithm == "walk-sum" else "histogram")
    a = audit_walk(holders, n, float(params["epsilon0"]), float(params["delta"]), mode=mode,
                   paper_compatible=paper_compatible)
    return {"algorithm": algorithm, "n": n, "T": int(len(holders)), "mode": mode,
            "paper_compatible": paper_compatible, "epsilon0": float(params["epsilon0"]),
            "delta": float(params["delta"]), "ndp_mean": a.ndp_mean, "ndp_min": a.ndp_min,
            "ndp_max": a.ndp_max, "ldp_mean": a.ldp_mean, "ldp_min": a.ldp_min,
            "ldp_max": a.ldp_max, "note": GLOBAL_KNOWLEDGE_NOTE}


def node_privacy(res: SimResult, ids: Sequence[str], spec: Mapping[str, Any]) -> dict[str, Any]:
    """Every node's own accountant on its simulated view: worst and mean ε over nodes (worst peer),
    and the method. With record="walk" the view is rebuilt from the node's contribution count, the
    only part of it the walk accountants read."""
    counts = np.bincount(np.asarray(res.holders, dtype=np.int64)[np.asarray(res.data_steps,
                                                                             dtype=bool)],
                         minlength=len(ids)) if res.holders else np.zeros(len(ids), dtype=int)
    cache: dict[int, Any] = {}
    worst: list[float] = []
    method = ""
    for i, nid in enumerate(ids):
        if res.entries:
            entries = res.entries[nid]
            key = None
        else:
            key = int(counts[i])
            entries = [Entry(job_id=spec["job_id"], direction="local", event="contribute")] * key
        if key is not None and key in cache:
            loss = cache[key]
        else:
            losses = per_job_losses(JobView(spec["job_id"], spec, entries), nid)
            loss = max(losses.values(), key=lambda x: x.epsilon)
            if key is not None:
                cache[key] = loss
        worst.append(loss.epsilon)
        if loss.method != "no-contribution":
            method = loss.method
    return {"epsilon_max": float(np.max(worst)), "epsilon_mean": float(np.mean(worst)),
            "method": method, "contributions_max": int(counts.max()),
            "contributions_mean": float(counts.mean())}


def run_simulation(a: Any) -> int:
    """`netdp simulate` (see the CLI help)."""
    n = int(a.nodes)
    if not 3 <= n <= 100_000:
        raise ConfigError("--nodes must be between 3 and 100000")
    ids = [f"node-{i}" for i in range(1, n + 1)]
    try:
        given = dict(a.param or [])
        if a.algorithm == "inca":  # calibrate σ_Δ for the dropouts --leave / --miss cause (the
            # missed share is taken larger than one iteration in T: conservative)
            given.setdefault("expect_leave", getattr(a, "leave", 0.0))
            given.setdefault("expect_miss", getattr(a, "miss", 0.0) / 2)
        params = get_algorithm(a.algorithm).validate(given, n)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    data, split = synthetic_data(a.algorithm, ids, params, a.seed, a.points, a.data_dir)
    record: RecordMode = a.record or ("full" if n <= 512 else "walk")
    if a.algorithm.startswith("muffliato"):
        record = "full"  # the gossip accountants read the rounds and published schedules
    if a.ledgers and record != "full":
        raise ConfigError("--ledgers needs --record full")
    sim = Simulator(a.algorithm, ids, params, data, seed=a.seed, public_seed=a.seed,
                    record=record)
    if a.algorithm == "inca":
        sim.down = inca_dropouts(sim, ids, int(params["T"]), getattr(a, "leave", 0.0),
                                 getattr(a, "miss", 0.0), a.seed)
    elif getattr(a, "leave", 0.0) or getattr(a, "miss", 0.0):
        raise ConfigError("--leave and --miss are for --algorithm inca")
    show = None if (a.quiet or a.json) else progress_printer()
    if show is not None:
        print(f"simulating {a.algorithm} over {n} nodes (seed {a.seed})", file=sys.stderr)
    res = sim.run(progress=show)
    if len(res.outputs) != n:
        raise RuntimeError(f"the simulated job did not finish ({len(res.outputs)}/{n} outputs)")
    spec = {"job_id": "sim", "algorithm": a.algorithm, "participants": ids, "params": params,
            "public_seed": a.seed, "edges": []}
    out: dict[str, Any] = {
        "algorithm": a.algorithm, "nodes": n, "seed": a.seed, "steps": len(res.holders),
        "data_steps": int(np.sum(res.data_steps)), "events": res.events,
        "virtual_time_s": res.virtual_time, "wall_s": res.wall_s,
        "params": {k: v for k, v in params.items()},
    }
    if a.algorithm != "inca":
        out["privacy"] = node_privacy(res, ids, spec)
    value = np.asarray(res.value)
    counts = np.bincount(np.asarray(res.holders)[np.asarray(res.data_steps, dtype=bool)],
                         minlength=n)
    if a.algorithm == "walk-sum":
        truth = sum(counts[i] * clip_l2(np.asarray(data[nid]), params["clip"])
                    for i, nid in enumerate(ids))
        out.update({"estimate": value.tolist(), "truth": np.asarray(truth).tolist(),
                    "noise_std": float(np.sqrt(len(res.holders)) * params["sigma"])})
    elif a.algorithm == "walk-histogram":
        truth = np.zeros(int(params["bins"]))
        for i, nid in enumerate(ids):
            truth[int(data[nid][0])] += counts[i]
        out.update({"estimate": value.tolist(), "truth": truth.tolist()})
    elif a.algorithm == "walk-sgd":
        out.update({"test_accuracy": logistic_accuracy(value, split.X_test, split.y_test),
                    "data": split.source, "model": value.tolist()})
    elif a.algorithm == "inca":
        out.update(inca_summary(res, ids, params, data, spec))
        out["privacy"] = node_privacy(res, ids, spec) if n <= 64 else {
            "note": "per-node audits skipped above 64 nodes (each is a linear system of size "
                    "n(T+1)); use `netdp demo --algorithm inca` or inca_audit directly"}
    elif a.algorithm.startswith("muffliato"):
        out.update(gossip_outcome(res, ids, params, data, split,
                                  gd=a.algorithm == "muffliato-gd"))
    if a.audit:
        out["audit"] = walk_audit_dict(np.asarray(res.holders), n, a.algorithm, params)
    if a.trace:
        write_trace(res, ids, a.trace)
        out["trace"] = a.trace
    if a.ledgers:
        write_ledgers(res, spec, a.ledgers)
        out["ledgers"] = a.ledgers
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(render_simulation(out))
    return 0


def gossip_outcome(res: SimResult, ids: Sequence[str], params: Mapping[str, Any],
                   data: Mapping[str, np.ndarray], split: Any, gd: bool) -> dict[str, Any]:
    """Muffliato: every node's estimate against the true mean of the (clipped) inputs, or the
    test accuracy of every node's model (GD)."""
    outs = np.array([np.asarray(res.outputs[v].value) for v in ids])
    if gd:
        accs = [logistic_accuracy(w, split.X_test, split.y_test) for w in outs]
        return {"test_accuracy": float(np.mean(accs)), "test_accuracy_min": float(np.min(accs)),
                "data": split.source, "model": outs.mean(axis=0).tolist()}
    truth = np.mean([clip_l2(np.asarray(data[v], dtype=float), params["clip"]) for v in ids],
                    axis=0)
    err = np.linalg.norm(outs - truth, axis=1)
    return {"estimate": outs.mean(axis=0).tolist(), "truth": truth.tolist(),
            "error_max": float(err.max()), "error_mean": float(err.mean()),
            "noise_std": float(params["sigma"] / np.sqrt(len(ids)))}


def render_simulation(o: dict[str, Any]) -> str:
    p = o["params"]
    lines = [f"{o['algorithm']} over {o['nodes']} simulated nodes: {o['steps']} steps "
             f"({o['data_steps']} with data), {o['events']} events, {o['wall_s']:.2f} s"]
    if "estimate" in o:
        lines.append(f"  estimate {np.round(o['estimate'], 4).tolist()}  truth "
                     f"{np.round(o['truth'], 4).tolist()}")
    if "error_max" in o:
        lines.append(f"  per-node error against the true mean: max {o['error_max']:.4g}, mean "
                     f"{o['error_mean']:.4g} (std of the mean of the noise σ/√n = "
                     f"{o['noise_std']:.4g})")
    elif "noise_std" in o:
        lines.append(f"  noise std of the sum {o['noise_std']:.4g} (σ={p['sigma']:.4g} per step)")
    if "central_dp_std" in o and o.get("estimate") is not None:
        lines.append(f"  finals {o['final']}/{o['nodes']} (missing {o['missing']}), lost messages "
                     f"{o['lost_messages']}; |error| {o['abs_error']:.4g} vs central-DP std "
                     f"{o['central_dp_std']:.4g} at the target ε; std from η "
                     f"{o['inca_std_eta']:.4g}, from uncancelled Δ "
                     f"{o['uncancelled_noise_std']:.4g}")
    if "test_accuracy" in o:
        lines.append(f"  test accuracy {o['test_accuracy']:.4f} on {o['data']}")
    pv = o["privacy"]
    target = f"target ε={p['epsilon']:g}" if "epsilon" in p else f"σ={p['sigma']:g}"
    lines.append(f"  each node's accountant ({target}): worst ε="
                 f"{pv['epsilon_max']:.4g}, mean ε={pv['epsilon_mean']:.4g} ({pv['method']}); "
                 f"contributions per node: max {pv['contributions_max']}, mean "
                 f"{pv['contributions_mean']:.2f}")
    if "audit" in o:
        au = o["audit"]
        lines.append(f"  walk-conditional audit (global knowledge): network DP mean ε="
                     f"{au['ndp_mean']:.4g} (max {au['ndp_max']:.4g}) vs local DP mean ε="
                     f"{au['ldp_mean']:.4g}")
    for k in ("trace", "ledgers"):
        if k in o:
            lines.append(f"  {k} written to {o[k]}")
    return "\n".join(lines)
