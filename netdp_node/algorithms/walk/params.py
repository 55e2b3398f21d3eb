"""The job parameters of the token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet,
AISTATS 2022) and of random-walk SGD (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024): one frozen
class per algorithm (`protocols.base.Params`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from netdp_node.privacy.discrete_gaussian import accounted_sensitivity, calibrate_on_grid
from netdp_node.privacy.rw_sgd import ldp_noise_multiplier
from netdp_node.privacy.walk_accountant import calibrate_histogram, calibrate_sgd, calibrate_sum
from netdp_node.protocols.base import (
    Params,
    beyond_reach,
    given_first,
    integer,
    invalid,
    number,
    word,
)

#: what the noise's calibration depends on, the one to change first leading
_NOISE_FIELDS = (
    "epsilon",
    "cap",
    "T",
    "delta",
    "delta_prime",
    "delta_hat",
    "edge_cap",
    "colluders",
)
#: how a walk stops (`stop`)
STOPS = ("counter", "geometric")


@dataclass(frozen=True, kw_only=True)
class WalkParams(Params):
    """What every walk's engine reads: the walk length T (mean length with stop=geometric), the
    per-user contribution cap (0: none), the target epsilon and delta, the contribution regime, how
    the walk stops, and the custody timeout. `edge_cap` (complete-graph walks) and `dp` (SGD) are
    None where the algorithm has none (and then absent from the wire)."""

    T: int
    cap: int = 0
    epsilon: float = 1.0
    delta: float = 1e-6
    regime: str = "edge-cap"
    edge_cap: int | None = None
    dp: str | None = None
    stop: str = "counter"
    custody_timeout_s: float = 120.0

    @classmethod
    def default_cap(cls, T: int, n: int) -> int:
        """The cap when none is given: none (0); SGD ⌈1.2·T/n⌉ (the paper's §5.2)."""
        return int(cls.default("cap"))


@dataclass(frozen=True, kw_only=True)
class CompleteWalkParams(WalkParams):
    """Walks on the complete graph: T (10·n), epsilon
    (target, 1.0; SGD 10), delta (per contribution / conversion) 1e-6, delta_prime, delta_hat 1e-6,
    cap (per-user contributions, 0 = none; SGD ⌈1.2·T/n⌉, §5.2), regime "edge-cap"
    (netdp's, with edge_cap B, default 2) or "lemma2" (App. G), colluders c (§4.3) 1, stop
    "counter" (sum, histogram) or "geometric" (SGD default; with stop=counter an SGD token carries
    t, which Theorem 4's proof does not discuss: the report labels
    it "counter-visible"), custody_timeout_s 120. The noise is calibrated
    (`walk_accountant.calibrate_sum` / `_histogram` / `_sgd`) so that every node's loss towards
    every peer is at most `epsilon` (per job, δ-terms summed)."""

    inputs: ClassVar[frozenset[str]] = frozenset(
        {
            "T",
            "epsilon",
            "delta",
            "delta_prime",
            "delta_hat",
            "cap",
            "regime",
            "edge_cap",
            "colluders",
            "stop",
            "custody_timeout_s",
        }
    )
    derived: ClassVar[frozenset[str]] = frozenset({"sigma", "epsilon0", "gamma", "sensitivity"})

    delta_prime: float = 1e-6
    delta_hat: float = 1e-6
    edge_cap: int = 2
    colluders: int = 1

    @classmethod
    def prepare_walk(cls, raw: Mapping[str, Any], n: int) -> dict[str, Any]:
        """The checked common parameters (before the algorithm's own and the calibration)."""
        cls.check_known(raw)
        if n < 3:
            raise invalid("participants", "at least 3 for a walk", n)
        T = integer(raw, "T", 10 * n)
        if not 1 <= T <= 10**8:
            raise invalid("T", "in 1..10^8", T)
        out: dict[str, Any] = {"T": T}
        for k in ("epsilon", "delta", "delta_prime", "delta_hat", "custody_timeout_s"):
            out[k] = number(raw, k, cls.default(k))
        out["cap"] = integer(raw, "cap", cls.default_cap(T, n))
        out["edge_cap"] = integer(raw, "edge_cap", cls.default("edge_cap"))
        out["colluders"] = integer(raw, "colluders", cls.default("colluders"))
        if out["epsilon"] <= 0:
            raise invalid("epsilon", "> 0", out["epsilon"])
        for k in ("delta", "delta_prime", "delta_hat"):
            if not 0 < out[k] < 1:
                raise invalid(k, "in (0, 1)", out[k])
        cls.check_delta(out["delta"])
        for k in ("cap", "edge_cap"):
            if out[k] < 0:
                raise invalid(k, ">= 0", out[k])
        out["regime"] = word(raw, "regime", cls.default("regime"), ("edge-cap", "lemma2"))
        out["stop"] = word(raw, "stop", cls.default("stop"), STOPS)
        if not 1 <= out["colluders"] < n:
            raise invalid("colluders", f"in 1..n-1 = 1..{n - 1}", out["colluders"])
        if out["custody_timeout_s"] <= 0:
            raise invalid("custody_timeout_s", "> 0", out["custody_timeout_s"])
        return out

    @classmethod
    def check_delta(cls, delta: float) -> None:
        """A further condition of the algorithm's theorem on delta (none here)."""

    @staticmethod
    def calibrated(
        calibrate: Callable[[dict[str, Any], int], dict[str, Any]],
        raw: Mapping[str, Any],
        out: dict[str, Any],
        n: int,
    ) -> dict[str, Any]:
        """`calibrate(out, n)`; a target it cannot meet is an error naming the parameter to change
        first (of those the submission gave)."""
        try:
            return calibrate(out, n)
        except (ArithmeticError, ValueError) as e:
            raise beyond_reach(raw, e, *_NOISE_FIELDS) from None


@dataclass(frozen=True, kw_only=True)
class WalkSumParams(CompleteWalkParams):
    """Algorithm 3: dim (1), clip (L2 bound, 1.0; Δ = 2·clip); calibrated: epsilon0, the local
    level of one contribution, and σ = `discrete_gaussian_sigma(ε0, δ, Δ)` on the grid."""

    algorithm: ClassVar[str] = "walk-sum"
    inputs: ClassVar[frozenset[str]] = CompleteWalkParams.inputs | {"dim", "clip"}

    dim: int = 1
    clip: float = 1.0
    epsilon0: float
    sensitivity: float
    sigma: float

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> WalkSumParams:
        out = cls.prepare_walk(raw, n)
        out["dim"] = integer(raw, "dim", cls.default("dim"))
        out["clip"] = number(raw, "clip", cls.default("clip"))
        if not 1 <= out["dim"] <= 1 << 20:
            raise invalid("dim", "in 1..2^20", out["dim"])
        if not out["clip"] > 0:
            raise invalid("clip", "> 0", out["clip"])
        noise = cls.calibrated(calibrate_sum, raw, out, n)
        return cls(
            **out,
            epsilon0=noise["epsilon0"],
            sensitivity=noise["sensitivity"],
            sigma=noise["sigma"],
        )


@dataclass(frozen=True, kw_only=True)
class WalkHistogramParams(CompleteWalkParams):
    """Algorithm 5: bins (L ≥ 2, 4); calibrated: epsilon0 and γ = L/(e^ε0 + L − 1)."""

    algorithm: ClassVar[str] = "walk-histogram"
    inputs: ClassVar[frozenset[str]] = CompleteWalkParams.inputs | {"bins"}

    bins: int = 4
    epsilon0: float
    gamma: float

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> WalkHistogramParams:
        out = cls.prepare_walk(raw, n)
        out["bins"] = integer(raw, "bins", cls.default("bins"))
        if not 2 <= out["bins"] <= 1 << 16:
            raise invalid("bins", "in 2..65536", out["bins"])
        noise = cls.calibrated(calibrate_histogram, raw, out, n)
        return cls(**out, epsilon0=noise["epsilon0"], gamma=noise["gamma"])


@dataclass(frozen=True, kw_only=True)
class WalkSgdParams(CompleteWalkParams):
    """Algorithm 4: dim (9), lipschitz (per-example gradient clip L, 1.0), eta (step size, 0.05;
    rows longer than sqrt(8/η) are scaled down to it, so that steps are non-expansive), dp
    ("network", or "local": the local-DP-SGD baseline, no amplification claimed); epsilon 10, stop
    "geometric", cap ⌈1.2·T/n⌉ by default. σ: the local-DP level of the cap's discrete Gaussian
    releases (Lemma 1 is proven for continuous noise only; `walk_accountant` module docstring)."""

    algorithm: ClassVar[str] = "walk-sgd"
    inputs: ClassVar[frozenset[str]] = CompleteWalkParams.inputs | {
        "dim",
        "lipschitz",
        "eta",
        "dp",
    }
    #: the walk-sgd engine's objective (rw-sgd also has "mean")
    objective: ClassVar[str] = "logistic"

    epsilon: float = 10.0
    stop: str = "geometric"
    dim: int = 9
    lipschitz: float = 1.0
    eta: float = 0.05
    dp: str = "network"
    sigma: float

    @classmethod
    def default_cap(cls, T: int, n: int) -> int:
        return math.ceil(1.2 * T / n)

    @classmethod
    def check_delta(cls, delta: float) -> None:
        if not delta < 0.5:
            raise invalid("delta", "< 1/2 for walk-sgd (Theorem 4)", delta)

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> WalkSgdParams:
        out = cls.prepare_walk(raw, n)
        out["dim"] = integer(raw, "dim", cls.default("dim"))
        out["lipschitz"] = number(raw, "lipschitz", cls.default("lipschitz"))
        out["eta"] = number(raw, "eta", cls.default("eta"))
        if not 1 <= out["dim"] <= 1 << 16:
            raise invalid("dim", "in 1..65536", out["dim"])
        for k in ("lipschitz", "eta"):
            if not out[k] > 0:
                raise invalid(k, "> 0", out[k])
        # "local": the local-DP-SGD baseline
        out["dp"] = word(raw, "dp", cls.default("dp"), ("network", "local"))
        if out["dp"] == "local" and not out["cap"]:
            first, other = given_first(raw, "cap", "dp")
            if first == "cap":
                raise invalid("cap", ">= 1 with dp='local'", out["cap"], "or change dp")
            raise invalid("dp", "'network' with cap=0", out["dp"], "or give cap >= 1")
        noise = cls.calibrated(calibrate_sgd, raw, out, n)
        return cls(**out, sigma=noise["sigma"])


@dataclass(frozen=True, kw_only=True)
class RwSgdParams(WalkParams):
    """Random-walk DP-SGD on any graph: T (10·n), cap (⌈1.2·T/n⌉), epsilon (10), delta (1e-6),
    lipschitz C (1, the gradient clip; Δ = 2C), eta (0.05), dim (9), weights ("coded" or "paper"),
    stop ("counter"), custody_timeout_s (120), mc_walks (1000: simulated walks of the sound
    accountant, docs/accountants.md), collusion_groups ([]: lists of participant indices known to
    pool their views, e.g. one organisation's nodes; each node's report adds its loss towards every
    group, §4.2), objective ("logistic", or "mean": the averaging special case of eq. (8), node data
    a vector y_v of `dim` numbers, f_v(x) = ½‖x − y_v‖², constant step eta ≤ 2 as Alg. 1 and the
    accountant assume), burn_in (0: steps the token walks first without any update, to get near π).
    The noise multiplier σ/Δ' is calibrated so that the always-valid bound (local DP over the cap's
    contributions) is at most `epsilon` towards everyone."""

    algorithm: ClassVar[str] = "rw-sgd"
    inputs: ClassVar[frozenset[str]] = frozenset(
        {
            "T",
            "cap",
            "epsilon",
            "delta",
            "lipschitz",
            "eta",
            "dim",
            "weights",
            "stop",
            "custody_timeout_s",
            "mc_walks",
            "objective",
            "burn_in",
            "collusion_groups",
        }
    )
    derived: ClassVar[frozenset[str]] = frozenset(
        {"sigma", "noise_multiplier", "sensitivity", "regime"}
    )

    epsilon: float = 10.0
    regime: str = "graph"
    dp: str = "network"
    lipschitz: float = 1.0
    eta: float = 0.05
    dim: int = 9
    weights: str = "coded"
    mc_walks: int = 1000
    objective: str = "logistic"
    burn_in: int = 0
    collusion_groups: tuple[tuple[int, ...], ...] = ()
    sensitivity: float
    sigma: float
    noise_multiplier: float

    @classmethod
    def default_cap(cls, T: int, n: int) -> int:
        return math.ceil(1.2 * T / n)

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> RwSgdParams:
        cls.check_known(raw)
        if n < 2:
            raise invalid("participants", "at least 2 for rw-sgd", n)
        T = integer(raw, "T", 10 * n)
        if not 1 <= T <= 10**8:
            raise invalid("T", "in 1..10^8", T)
        cap = integer(raw, "cap", cls.default_cap(T, n))
        if cap < 1:
            raise invalid("cap", ">= 1", cap)
        epsilon = number(raw, "epsilon", cls.default("epsilon"))
        if not epsilon > 0:
            raise invalid("epsilon", "> 0", epsilon)
        delta = number(raw, "delta", cls.default("delta"))
        if not 0 < delta < 1:
            raise invalid("delta", "in (0, 1)", delta)
        lipschitz = number(raw, "lipschitz", cls.default("lipschitz"))
        eta = number(raw, "eta", cls.default("eta"))
        for k, v in (("lipschitz", lipschitz), ("eta", eta)):
            if not v > 0:
                raise invalid(k, "> 0", v)
        dim = integer(raw, "dim", cls.default("dim"))
        if not 1 <= dim <= 1 << 16:
            raise invalid("dim", "in 1..65536", dim)
        weights = word(raw, "weights", cls.default("weights"), ("coded", "paper"))
        stop = word(raw, "stop", cls.default("stop"), STOPS)
        custody_timeout_s = number(raw, "custody_timeout_s", cls.default("custody_timeout_s"))
        if not custody_timeout_s > 0:
            raise invalid("custody_timeout_s", "> 0", custody_timeout_s)
        mc_walks = integer(raw, "mc_walks", cls.default("mc_walks"))
        if not 10 <= mc_walks <= 10**6:
            # simulated walks of the per-trajectory accountant
            raise invalid("mc_walks", "in 10..10^6", mc_walks)
        # "logistic" (logistic regression) or "mean" (the averaging case)
        objective = word(raw, "objective", cls.default("objective"), ("logistic", "mean"))
        burn_in = integer(raw, "burn_in", cls.default("burn_in"))
        if not 0 <= burn_in <= 10**7:
            raise invalid("burn_in", "in 0..10^7 steps", burn_in)
        if burn_in and stop != "counter":
            # the token must carry the step
            first, _ = given_first(raw, "burn_in", "stop")
            if first == "burn_in":
                raise invalid(
                    "burn_in", "0 with stop='geometric'", burn_in, "or give stop='counter'"
                )
            raise invalid("stop", "'counter' with burn_in > 0", stop, "the token carries the step")
        if objective == "mean" and eta > 2.0:
            first, _ = given_first(raw, "eta", "objective")
            why = "non-expansive steps; Cyffers, Bellet & Upadhyay, ICML 2024, eq. (8)"
            if first == "eta":
                raise invalid("eta", "<= 2 with objective='mean'", eta, why)
            raise invalid("objective", "'logistic' with eta > 2", objective, why)
        groups = _collusion_groups(raw.get("collusion_groups", []), n)
        multiplier = ldp_noise_multiplier(cap, epsilon, delta)
        sensitivity = 2.0 * lipschitz
        # the absolute noise std the engine adds, for the sensitivity charged on the noise grid
        sigma = calibrate_on_grid(lambda s: multiplier * s, sensitivity, dim)
        charged = accounted_sensitivity(sensitivity, sigma, dim)
        return cls(
            T=T,
            cap=cap,
            epsilon=epsilon,
            delta=delta,
            lipschitz=lipschitz,
            eta=eta,
            dim=dim,
            weights=weights,
            stop=stop,
            custody_timeout_s=custody_timeout_s,
            mc_walks=mc_walks,
            objective=objective,
            burn_in=burn_in,
            collusion_groups=groups,
            sensitivity=sensitivity,
            sigma=sigma,
            noise_multiplier=sigma / charged,
        )


def _collusion_groups(v: Any, n: int) -> tuple[tuple[int, ...], ...]:
    """`collusion_groups`: lists of >= 2 participant indices in 0..n-1 (each sorted, deduplicated)."""
    rule = "a list of lists of participant indices"
    if not isinstance(v, (list, tuple)):
        raise invalid("collusion_groups", rule, v)
    groups = []
    for g in v:
        if not isinstance(g, (list, tuple)):
            raise invalid("collusion_groups", rule, v)
        try:
            members = sorted({integer({"i": i}, "i", None) for i in g})
        except ValueError:
            raise invalid("collusion_groups", rule, v) from None
        if len(members) < 2 or not all(0 <= i < n for i in members):
            raise invalid("collusion_groups", f"groups of >= 2 indices in 0..{n - 1}", g)
        groups.append(tuple(members))
    return tuple(groups)
