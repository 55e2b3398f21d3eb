"""What the tools ask an algorithm: `netdp demo`, `netdp simulate`, `netdp compose` and `netdp
audit` look its behaviour up in its record (`get_algorithm(name).hooks`), never switch on its name.

Each algorithm's hooks live in its family's folder (`<family>/hooks.py`), one object per algorithm,
a subclass of `Hooks`. The defaults here say "not offered": no demo, no synthetic data, not run by
compose, no audit check of its own, no plan. The tools hand the hooks plain values (`DemoRun`,
`SimRun`, `PlanTarget`, `PlanCase`): the hooks never reach into processes, ledgers or transports."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from netdp_node.errors import ConfigError
from netdp_node.privacy import muffliato_accountant
from netdp_node.protocols.base import Output

#: The audit checks an algorithm can ask for (`netdp audit`; names as the audit reports them).
INCA_SHARES = "inca-shares"
GOSSIP_MASS = "gossip-mass-conserved"

WalkAuditMode = Literal["gaussian", "histogram"]

#: the data of a simulation: (ids, the job's prepared parameters, seed, points per node,
#: --data-dir) -> (node -> its data, the train/test split or None)
SyntheticData = Callable[
    [Sequence[str], Mapping[str, Any], int, int, "str | None"], tuple[dict[str, np.ndarray], Any]
]


class DemoFlags(Protocol):
    """The `netdp demo` flags the hooks read (an argparse namespace)."""

    nodes: int
    seed: int | None
    clip: float
    delta: float
    epsilon: float | None
    steps: int
    rounds: int
    bins: int
    points: int
    data_dir: str | None
    k: int
    scheme: str
    threat: str
    round_s: float
    leave: float
    miss: float
    timeout: float
    topology: str


class JobRecord(Protocol):
    """A node's row of a job in its ledger (`ledger.JobRow`)."""

    @property
    def spec(self) -> dict[str, Any]: ...

    @property
    def result(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class DemoRun:
    """A demo job that ended `done`, as `netdp demo` hands it to the hooks."""

    flags: DemoFlags
    ids: list[str]
    summary: Mapping[str, Any]  # the bootstrap's result (`jobs.result_summary`)
    params: dict[str, Any]  # the job's parameters as the bootstrap prepared them
    values: Mapping[str, np.ndarray]  # each node's --data
    split: Any  # the train/test split (SGD), else None
    value: np.ndarray  # the released value (empty when the result stays on the nodes)
    privacy: list[dict[str, Any]]  # each node's privacy report row, from its own ledger
    faults: Mapping[str, list[str]]  # the fault flags nodes were started with
    #: every node's row of the job, read from its ledger (nodes whose ledger has none omitted)
    job_rows: Callable[[], Mapping[str, JobRecord]]
    #: an audit check (INCA_SHARES, ...) over the merged ledgers of the nodes: (ok, details)
    check: Callable[[str], tuple[bool, list[str]]]


@dataclass(frozen=True)
class SimRun:
    """A finished `netdp simulate` run, as it hands it to the hooks."""

    ids: Sequence[str]
    params: Mapping[str, Any]
    spec: Mapping[str, Any]  # the job spec the nodes ran (participants, params, ...)
    data: Mapping[str, np.ndarray]  # each node's input
    split: Any  # the train/test split (SGD), else None
    outputs: Mapping[str, Output]  # node -> its output (nodes that finished)
    counts: np.ndarray  # data-carrying steps of each node (in `ids` order)
    steps: int  # steps of the walk (holdings), 0 for the others
    entries: Mapping[str, Sequence[Any]]  # node -> its ledger entries (`ledger.Entry`)

    @property
    def value(self) -> np.ndarray:
        """The value of the first output (the released result of a walk or a ring)."""
        out = next(iter(self.outputs.values()), None)
        return np.asarray(None if out is None else out.value)


#: the label of a figure proven for continuous noise only (as the reports print it)
CONTINUOUS = muffliato_accountant.CONTINUOUS


def parse_threat(threat: str, n: int) -> tuple[str, int]:
    """ "single" -> ("single", 1); "collude:C" -> ("collude", C); "any" -> ("any", n)."""
    if threat == "single":
        return "single", 1
    if threat == "any":
        return "any", n
    kind, sep, c = threat.partition(":")
    if kind == "collude" and sep:
        try:
            k = int(c)
        except ValueError:
            k = 0
        if 1 <= k < n:
            return "collude", k
        raise ConfigError(
            f"--threat must be collude:C with an integer C in 1..n-1 = 1..{n - 1}, not {threat!r}"
        )
    raise ConfigError(f"--threat must be single, collude:C or any, not {threat!r}")


def check_dropouts(leave: float, miss: float) -> None:
    """`--leave` and `--miss` (`netdp demo`, `netdp simulate`): fractions in [0, 1) with a sum
    below 1; a ConfigError naming the flag to change first (--miss, when the sum is the fault)."""
    for name, v in (("--leave", leave), ("--miss", miss)):
        if not 0 <= v < 1:
            raise ConfigError(f"{name} must be a fraction in [0, 1), not {v:g}")
    if not leave + miss < 1:
        raise ConfigError(
            f"--miss must be below 1 - --leave = {1 - leave:g}, not {miss:g} (the fractions "
            "--leave and --miss must sum below 1; or lower --leave)"
        )


@dataclass(frozen=True)
class PlanTarget:
    """What a plan is for (`netdp plan`)."""

    n: int
    epsilon: float
    delta: float
    topology: str | None = None  # None: each algorithm's own
    threat: str = "single"
    clip: float = 1.0
    dim: int = 1
    rounds: int = 10  # ring: rounds K
    steps: int = 0  # walks: T (0: the algorithm's default, 10·n)

    @property
    def threat_kind(self) -> str:
        """ "single", "collude" or "any" (ConfigError when --threat is malformed)."""
        return parse_threat(self.threat, self.n)[0]

    @property
    def colluders(self) -> int:
        """The colluding set of a "collude:C" threat (C), else 1."""
        kind, c = parse_threat(self.threat, self.n)
        return c if kind == "collude" else 1


@dataclass(frozen=True)
class PlanKnob:
    """The job parameter that sets an algorithm's noise: `netdp plan` and `--target-epsilon`
    search it until the accountant's per-peer ε meets the target."""

    param: str
    #: the loss grows with it (an ε); False: it falls (a σ), and the search starts from the
    #: algorithm's own calibration at ε = target
    increasing: bool = True
    #: parameters a target sets besides the knob (as (name, value)), and the note that says so
    fixed: tuple[tuple[str, str], ...] = ()
    note: str = ""
    #: parameters of the starting calibration kept through the search (they do not change the loss)
    keep: tuple[str, ...] = ()
    #: the note when the search moved the knob past its starting calibration
    moved: str = ""


@dataclass(frozen=True)
class PlanCase:
    """One algorithm planned for a target, as `netdp plan` hands it to the hooks."""

    target: PlanTarget
    topology: str  # the one `plan_topology` chose
    params: Mapping[str, Any]  # the job's parameters as the registry prepared them
    #: seconds per sequential step and where the figure comes from ("hop", "gossip-round",
    #: "inca-iteration")
    costs: Mapping[str, tuple[float, str]]
    #: the registry's preparation of other parameters for the same n (ConfigError naming a field)
    prepare: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: the accountant's closed-form noise std of the released value, and how (None: it has none)
    estimate_std: Callable[[], tuple[float, str] | None]
    #: the engine of the first participant for these parameters (a sans-IO object, not run)
    engine: Callable[[], Any]


@dataclass
class PlanFigures:
    """What a plan predicts for one algorithm (the columns of `netdp plan`)."""

    sigma: float | None = None  # noise std of one addition (σ_η for IncA)
    steps: str = ""
    caps: str = ""
    release_std: float | None = None  # noise std of the released value (per coordinate)
    mean_std: float | None = None  # ... expressed as the std of an estimate of the mean
    std_how: str = ""
    messages: float | None = None  # per node
    messages_how: str = ""
    time_s: float | None = None
    time_how: str = ""


class Hooks:
    """An algorithm's answers to the tools. Subclasses (frozen dataclasses, one per algorithm in
    the family's `hooks.py`) override what their algorithm offers."""

    # -- netdp demo ---------------------------------------------------------------------------
    #: one line for `netdp demo --help`; None: the algorithm has no demo
    demo: str | None = None
    #: the demo takes --data (one value per node); False: it makes its own (SGD)
    demo_takes_values: bool = True
    #: the job's graph is --topology (a kind the bootstrap serves)
    demo_topology: bool = False
    #: after the job, wait until every ledger holds the public end-of-job schedules
    demo_waits_for_schedules: bool = False
    #: the demo's --nodes when not given (a size where the method shows its gain, when it has one)
    demo_nodes: int = 8

    def check_demo_flags(self, flags: DemoFlags) -> None:
        """The algorithm's own flags: a ConfigError naming the flag."""

    def demo_params(self, flags: DemoFlags, n: int) -> dict[str, Any]:
        """The job parameters the demo submits for these flags."""
        raise NotImplementedError(f"{type(self).__name__} has no demo")

    def demo_data(
        self, flags: DemoFlags, ids: Sequence[str], values: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], Any]:
        """Each node's --data (from --data `values` or synthetic, seeded by --seed), and the
        train/test split (SGD) or None. Default: one value per node, uniform in [0, clip]."""
        rng = np.random.default_rng(flags.seed)
        vals = values if values is not None else rng.uniform(0.0, flags.clip, size=len(ids))
        return {nid: np.array([float(v)]) for nid, v in zip(ids, vals)}, None

    def demo_faults(self, flags: DemoFlags, ids: Sequence[str]) -> dict[str, list[str]]:
        """Node -> the fault flags it is started with."""
        return {}

    def describe(self, params: Mapping[str, Any], topology: str) -> str:
        """The submitted job in one line, from its prepared parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no demo")

    def demo_outcome(self, run: DemoRun) -> dict[str, Any]:
        """The result against the truth or the baselines (keys of the demo's JSON)."""
        raise NotImplementedError(f"{type(self).__name__} has no demo")

    def render_demo(self, res: Mapping[str, Any], where: str, head: str) -> list[str]:
        """The lines the demo prints about the result (`where`: "node processes" or "nodes in W
        host processes"; `head`: the job id and times)."""
        raise NotImplementedError(f"{type(self).__name__} has no demo")

    # -- netdp simulate -----------------------------------------------------------------------
    #: its accountant reads no more than each node's contributions (`--record walk` suffices)
    counts_suffice: bool = False
    #: its `sim_outcome` reads the nodes' ledger entries (`SimRun.entries`); when it does not and
    #: the per-node accountants are skipped (`sim_privacy_skipped`), no view is kept
    outcome_reads_entries: bool = True

    def sim_privacy_skipped(self, n: int) -> str | None:
        """Why `netdp simulate` skips the per-node accountants over n nodes (None: it runs them)."""
        return None

    def sim_param_defaults(self, leave: float, miss: float) -> dict[str, Any]:
        """Parameters set from `--leave`/`--miss` unless --param gives them."""
        return {}

    #: how its simulations make each node's data (`uniform_values`, `categories`, ...); None: the
    #: algorithm has none, or overrides `synthetic_data`
    synthetic: ClassVar[SyntheticData | None] = None

    def synthetic_data(
        self,
        ids: Sequence[str],
        params: Mapping[str, Any],
        seed: int,
        points_per_node: int,
        data_dir: str | None,
    ) -> tuple[dict[str, np.ndarray], Any]:
        """Per-node data of a simulation, and the train/test split (SGD) or None: `synthetic`'s."""
        make = type(self).synthetic
        if make is None:
            raise ValueError(f"no synthetic data for {type(self).__name__}")
        return make(ids, params, seed, points_per_node, data_dir)

    def uses_edges(self, params: Mapping[str, Any]) -> bool:
        """The job runs on a bootstrap topology (its edges are part of the job spec)."""
        return params.get("graph") == "topology"

    def dropout_flags(
        self, ids: Sequence[str], params: Mapping[str, Any], leave: float, miss: float, seed: int
    ) -> dict[str, list[str]] | None:
        """The daemon fault flags for `--leave`/`--miss`; None: the generic plan (leavers at their
        first or second step, no --miss)."""
        return None

    def sim_outcome(self, run: SimRun) -> dict[str, Any]:
        """The result against the truth (keys of the simulation's JSON)."""
        return {}

    # -- netdp compose ------------------------------------------------------------------------
    #: `netdp compose` deploys it (one value per node)
    composed: bool = False
    #: the job's topology is compose's --topology (else the algorithm takes it as a parameter)
    compose_topology: bool = True

    def compose_job(self, rounds: int, nodes: int, topology: str) -> list[str]:
        """The `job submit` flags of a compose deployment's job (without --algorithm and
        --topology): its length from --rounds. A ConfigError names a flag compose cannot use."""
        raise NotImplementedError(f"{type(self).__name__} is not deployed by compose")

    # -- netdp audit --------------------------------------------------------------------------
    #: the audit checks of its own (INCA_SHARES, GOSSIP_MASS)
    audit_checks: frozenset[str] = frozenset()
    #: a message sent and never received is part of the protocol (not a lost token)
    undelivered_expected: bool = False
    #: the walk-conditional audit of its realised walk (Cyffers & Bellet, AISTATS 2022, §5.1), or None
    walk_audit: WalkAuditMode | None = None

    # -- netdp plan and --target-epsilon ------------------------------------------------------
    def target_knob(self) -> PlanKnob | None:
        """The parameter that sets its noise for a per-peer target ε (None: no planner)."""
        return None

    def plan_skipped(self) -> str | None:
        """Why `netdp plan` does not compare it (None: it does, through the `plan_*` hooks)."""
        return None if self.target_knob() is not None else "the planner does not cover it"

    def plan_order(self) -> int:
        """Its rank among the rows of `netdp plan` (equal ranks: the registry's order)."""
        return 0

    def plan_amplified(self) -> bool:
        """Its guarantee can be below local DP's (amplification proven for the noise drawn)."""
        return False

    def plan_reuses_spectral_gap(self) -> bool:
        """Its preparation computes the public spectral gap of its `graph` (`spectral_gap_used`, a
        function of the graph and n only), which a plan may hand back as `spectral_gap`."""
        return False

    def plan_topology(self, t: PlanTarget, own: str) -> tuple[str | None, str]:
        """The topology it would run on for the target (`own`: its record's default), or None
        with the reason it cannot."""
        raise NotImplementedError(f"{type(self).__name__} has no plan")

    def plan_refusal(self, t: PlanTarget) -> str:
        """Why its ε does not hold against the target's threat ("" when it does)."""
        return ""

    def plan_params(self, t: PlanTarget, topology: str) -> dict[str, Any]:
        """The job parameters of the target, without the noise (the planner searches the knob)."""
        raise NotImplementedError(f"{type(self).__name__} has no plan")

    def plan_figures(self, case: PlanCase) -> PlanFigures:
        """σ, steps, caps, predicted std, messages and time of the planned job."""
        raise NotImplementedError(f"{type(self).__name__} has no plan")

    def plan_paper(self, case: PlanCase, used: Mapping[str, Any]) -> dict[str, Any]:
        """The paper's continuous-noise figure at the target, labelled, never the plan ({}: none);
        `used`: the planned parameters without the noise."""
        return {}


#: The hooks of an algorithm that offers none (and of a name no record has).
NO_HOOKS = Hooks()


def plan_on_complete(t: PlanTarget) -> tuple[str | None, str]:
    """`Hooks.plan_topology` of an algorithm whose theorems assume the complete graph."""
    if t.topology in (None, "complete"):
        return "complete", ""
    return None, f"runs on the complete graph (its theorems assume it), not {t.topology}"


def contribution_counts(res: Mapping[str, Any]) -> str:
    counts = res["contributions"]
    if len(counts) > 16:  # a summary: the full list is in the JSON
        v = list(counts.values())
        return f"min {min(v)}, mean {sum(v) / len(v):.1f}, max {max(v)} over {len(v)} nodes"
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# -- where a method gains over local DP -------------------------------------------------------------
#: the least noise reduction the demos call a gain over local DP: local DP's std at least this
#: many times netdp's for the same per-peer guarantee
GAIN_MIN = 1.05
#: the largest n `gain_starts_at` looks at (`netdp plan` plans more; a demo runs 2000 at most)
GAIN_SEARCH_MAX = 10_000

#: the line of the methods that enforce the local-DP level (amplification proven for continuous
#: noise only): they cannot gain over local DP at any size under the proven accounting
NO_GAIN_PROVEN = (
    "  no gain over local DP at any n under the proven accounting: {name} enforces the local-DP "
    "level of its discrete-Gaussian noise (its amplification is proven for continuous noise only)"
)


def gain_ratio(ldp_std: float, netdp_std: float) -> float:
    """Local DP's noise std over netdp's for the same guarantee (> 1: netdp needs less noise)."""
    return ldp_std / netdp_std if netdp_std > 0 else float("inf")


def gain_starts_at(
    ratio: Callable[[int], float], lo: int, hi: int = GAIN_SEARCH_MAX, rel: float = 0.05
) -> int | None:
    """The smallest n in [lo, hi] (to within `rel`) where `ratio(n)`, local DP's std over netdp's
    for the same guarantee at n participants (from the accountant's calibration), is at least
    `GAIN_MIN`, for a ratio that grows with n: doubling from lo, then bisection. None: not even at
    hi."""
    if ratio(lo) >= GAIN_MIN:
        return lo
    bad, n = lo, lo
    while True:
        n = min(hi, 2 * n)
        if ratio(n) >= GAIN_MIN:
            break
        if n >= hi:
            return None
        bad = n
    good = n
    while good - bad > max(1, int(rel * good)):
        mid = (good + bad) // 2
        if ratio(mid) >= GAIN_MIN:
            good = mid
        else:
            bad = mid
    return good


def gain_line(
    name: str, n: int, ldp_std: float, netdp_std: float, starts_at: int | None, flag: str
) -> str | None:
    """The demo's one line when the method does not gain over local DP at its n (None: it does):
    from what n it would (`gain_starts_at`), with the flag to try it."""
    if gain_ratio(ldp_std, netdp_std) >= GAIN_MIN:
        return None
    if starts_at is None:
        return (
            f"  no gain over local DP at n = {n} (netdp's std is not {GAIN_MIN:g}x below local "
            f"DP's up to n = {GAIN_SEARCH_MAX})"
        )
    return (
        f"  no gain over local DP at n = {n}: {name} gains over local DP from n ≈ {starts_at} "
        f"(try {flag} {starts_at})"
    )


# -- synthetic data shared by several algorithms --------------------------------------------------
def uniform_values(
    ids: Sequence[str],
    params: Mapping[str, Any],
    seed: int,
    points_per_node: int = 1,
    data_dir: str | None = None,
) -> tuple[dict[str, np.ndarray], Any]:
    """Vectors of `dim` coordinates in [0, clip/√dim] (L2 norm at most clip)."""
    rng = np.random.default_rng([seed, 7])
    dim = int(params.get("dim", 1))
    clip = float(params.get("clip", 1.0))
    vals = rng.uniform(0.0, clip / np.sqrt(dim), size=(len(ids), dim))
    return {nid: vals[i] for i, nid in enumerate(ids)}, None


def categories(
    ids: Sequence[str],
    params: Mapping[str, Any],
    seed: int,
    points_per_node: int = 1,
    data_dir: str | None = None,
) -> tuple[dict[str, np.ndarray], Any]:
    """One category in 0..bins-1 per node, category c drawn with weight c + 1."""
    rng = np.random.default_rng([seed, 7])
    L = int(params["bins"])
    cats = rng.choice(L, size=len(ids), p=np.arange(1, L + 1) / (L * (L + 1) / 2))
    return {nid: np.array([float(c)]) for nid, c in zip(ids, cats)}, None
