"""The job parameters of the token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet,
AISTATS 2022) and of random-walk SGD (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024): one frozen
class per algorithm (`protocols.base.Params`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from netdp_node.privacy.discrete_gaussian import accounted_sensitivity, calibrate_on_grid
from netdp_node.privacy.rw_sgd import ldp_noise_multiplier
from netdp_node.privacy.walk_accountant import calibrate_histogram, calibrate_sgd, calibrate_sum
from netdp_node.protocols.base import Params


def _finite(name: str, v: Any) -> float:
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number")
    return x


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
            raise ValueError(f"a walk needs at least 3 participants, got {n}")
        T = int(raw.get("T", 10 * n))
        out: dict[str, Any] = {
            "T": T,
            "epsilon": _finite("epsilon", raw.get("epsilon", cls.default("epsilon"))),
            "delta": _finite("delta", raw.get("delta", cls.default("delta"))),
            "delta_prime": _finite(
                "delta_prime", raw.get("delta_prime", cls.default("delta_prime"))
            ),
            "delta_hat": _finite("delta_hat", raw.get("delta_hat", cls.default("delta_hat"))),
            "cap": int(raw.get("cap", cls.default_cap(T, n))),
            "regime": str(raw.get("regime", cls.default("regime"))),
            "edge_cap": int(raw.get("edge_cap", cls.default("edge_cap"))),
            "colluders": int(raw.get("colluders", cls.default("colluders"))),
            "stop": str(raw.get("stop", cls.default("stop"))),
            "custody_timeout_s": _finite(
                "custody_timeout_s", raw.get("custody_timeout_s", cls.default("custody_timeout_s"))
            ),
        }
        if not 1 <= T <= 10**8:
            raise ValueError("T must be between 1 and 10^8")
        if out["epsilon"] <= 0:
            raise ValueError("epsilon must be positive")
        for k in ("delta", "delta_prime", "delta_hat"):
            if not 0 < out[k] < 1:
                raise ValueError(f"{k} must be in (0, 1)")
        cls.check_delta(out["delta"])
        if out["cap"] < 0 or out["edge_cap"] < 0:
            raise ValueError("cap and edge_cap must be >= 0")
        if out["regime"] not in ("edge-cap", "lemma2"):
            raise ValueError(
                "regime must be 'edge-cap' (a per-edge contribution cap) or 'lemma2' "
                "(Cyffers & Bellet, AISTATS 2022, App. G)"
            )
        if out["stop"] not in ("counter", "geometric"):
            raise ValueError("stop must be 'counter' or 'geometric'")
        if not 1 <= out["colluders"] < n:
            raise ValueError(f"colluders must be between 1 and n - 1 = {n - 1}")
        if out["custody_timeout_s"] <= 0:
            raise ValueError("custody_timeout_s must be positive")
        return out

    @classmethod
    def check_delta(cls, delta: float) -> None:
        """A further condition of the algorithm's theorem on delta (none here)."""


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
        out["dim"] = int(raw.get("dim", cls.default("dim")))
        out["clip"] = _finite("clip", raw.get("clip", cls.default("clip")))
        if not 1 <= out["dim"] <= 1 << 20 or not out["clip"] > 0:
            raise ValueError("dim must be in 1..2^20 and clip positive")
        noise = calibrate_sum(out, n)
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
        out["bins"] = int(raw.get("bins", cls.default("bins")))
        if not 2 <= out["bins"] <= 1 << 16:
            raise ValueError("bins must be in 2..65536")
        noise = calibrate_histogram(out, n)
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
            raise ValueError("walk-sgd needs delta < 1/2 (Theorem 4)")

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> WalkSgdParams:
        out = cls.prepare_walk(raw, n)
        out["dim"] = int(raw.get("dim", cls.default("dim")))
        out["lipschitz"] = _finite("lipschitz", raw.get("lipschitz", cls.default("lipschitz")))
        out["eta"] = _finite("eta", raw.get("eta", cls.default("eta")))
        out["dp"] = str(raw.get("dp", cls.default("dp")))
        if not 1 <= out["dim"] <= 1 << 16 or out["lipschitz"] <= 0 or out["eta"] <= 0:
            raise ValueError("dim must be in 1..65536, lipschitz and eta positive")
        if out["dp"] not in ("network", "local"):
            raise ValueError("dp must be 'network' or 'local' (the local-DP-SGD baseline)")
        if out["dp"] == "local" and not out["cap"]:
            raise ValueError("local DP-SGD needs a contribution cap (cap >= 1)")
        noise = calibrate_sgd(out, n)
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
            raise ValueError("rw-sgd needs at least 2 participants")
        T = int(raw.get("T", 10 * n))
        cap = int(raw.get("cap", cls.default_cap(T, n)))
        epsilon = _finite("epsilon", raw.get("epsilon", cls.default("epsilon")))
        delta = _finite("delta", raw.get("delta", cls.default("delta")))
        lipschitz = _finite("lipschitz", raw.get("lipschitz", cls.default("lipschitz")))
        eta = _finite("eta", raw.get("eta", cls.default("eta")))
        dim = int(raw.get("dim", cls.default("dim")))
        weights = str(raw.get("weights", cls.default("weights")))
        stop = str(raw.get("stop", cls.default("stop")))
        custody_timeout_s = _finite(
            "custody_timeout_s", raw.get("custody_timeout_s", cls.default("custody_timeout_s"))
        )
        mc_walks = int(raw.get("mc_walks", cls.default("mc_walks")))
        objective = str(raw.get("objective", cls.default("objective")))
        burn_in = int(raw.get("burn_in", cls.default("burn_in")))
        try:
            groups = [sorted({int(i) for i in g}) for g in raw.get("collusion_groups", [])]
        except (TypeError, ValueError):
            raise ValueError(
                "collusion_groups must be a list of lists of participant indices"
            ) from None
        if any(len(g) < 2 or not all(0 <= i < n for i in g) for g in groups):
            raise ValueError(f"each collusion group needs >= 2 participant indices in 0..{n - 1}")
        if objective not in ("logistic", "mean"):
            raise ValueError(
                "objective must be 'logistic' (logistic regression) or 'mean' (the averaging case)"
            )
        if not 0 <= burn_in <= 10**7:
            raise ValueError("burn_in must be in 0..10^7 steps")
        if burn_in and stop != "counter":
            raise ValueError("burn_in needs stop='counter' (the token must carry the step)")
        if objective == "mean" and eta > 2.0:
            raise ValueError(
                "the averaging case needs eta <= 2 (non-expansive steps; Cyffers, Bellet & "
                "Upadhyay, ICML 2024, eq. (8))"
            )
        if not 1 <= T <= 10**8 or cap < 1 or epsilon <= 0:
            raise ValueError("T in 1..10^8, cap >= 1 and epsilon > 0 are required")
        if not 10 <= mc_walks <= 10**6:
            raise ValueError(
                "mc_walks (simulated walks of the per-trajectory accountant) must be in 10..10^6"
            )
        if not 0 < delta < 1 or lipschitz <= 0 or eta <= 0:
            raise ValueError("delta in (0, 1), lipschitz and eta positive are required")
        if weights not in ("coded", "paper") or stop not in ("counter", "geometric"):
            raise ValueError("weights must be 'coded' or 'paper', stop 'counter' or 'geometric'")
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
            collusion_groups=tuple(tuple(g) for g in groups),
            sensitivity=sensitivity,
            sigma=sigma,
            noise_multiplier=sigma / charged,
        )
