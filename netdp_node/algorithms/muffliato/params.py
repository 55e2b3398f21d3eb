"""The job parameters of Muffliato (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022): gossip
averaging (muffliato, synchronous; muffliato-random, randomized pairwise) and gossip gradient
descent (muffliato-gd). One frozen class per algorithm (`protocols.base.Params`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from netdp_node.privacy import gossip, gossip_paper_bound
from netdp_node.privacy.discrete_gaussian import calibrate_on_grid
from netdp_node.privacy.muffliato_accountant import GRAPHS, public_graph
from netdp_node.privacy.rw_sgd import ldp_noise_multiplier
from netdp_node.protocols.base import Params

#: Most rounds of a job (T × calls).
MAX_ROUNDS = 100_000

_COMMON_INPUTS = frozenset(
    {"dim", "sigma", "epsilon", "delta", "alpha", "calibrate", "graph", "p", "deadline_s"}
)
_SYNC_INPUTS = frozenset({"T", "accelerated", "spectral_gap", "round_timeout_s", "suspend_rounds"})


def degrees(n: int, edges: Sequence[tuple[int, int]]) -> np.ndarray:
    d = np.zeros(n, dtype=np.int64)
    for a, b in edges:
        d[a] += 1
        d[b] += 1
    return d


def ldp_sigma(epsilon: float, delta: float, sensitivity: float, count: int) -> float:
    """σ such that `count` Gaussian mechanisms of sensitivity Δ, composed in RDP, are (ε, δ)-DP:
    the local-DP level, the guarantee every pair has whatever the schedule."""
    return ldp_noise_multiplier(count, epsilon, delta) * sensitivity


def _num(raw: Mapping[str, Any], k: str, default: Any) -> float:
    x = float(raw.get(k, default))
    if not math.isfinite(x):
        raise ValueError(f"{k} must be a finite number")
    return x


@dataclass(frozen=True, kw_only=True)
class MuffliatoParams(Params):
    """What every Muffliato job has: dim, graph (ring | complete | hypercube | er (with p, default
    2 ln n / n) | topology), delta (1e-5), the noise std `sigma` per coordinate (given, or
    calibrated from `epsilon` (1.0) with calibrate = "mean" (default: σ such that the mean privacy
    loss of eq. (7), converted at δ, is ε: `gossip_paper_bound.sigma_for_mean_dp` with T_v = d_max·T, a
    SUMMARY, not a per-pair guarantee) or "ldp" (σ such that the local-DP level, the guarantee every
    pair has, is ε at δ)), the replace-one `sensitivity` (2·clip, or 2·lipschitz for GD), the gossip
    calls, the public graph's largest degree d_max, and an optional job deadline_s (kept as given).
    `epsilon` is absent when σ was given; `p` unless graph = er; `clip` for GD."""

    inputs: ClassVar[frozenset[str]] = _COMMON_INPUTS
    derived: ClassVar[frozenset[str]] = frozenset(
        {"gamma", "sensitivity", "calls", "d_max", "spectral_gap_used"}
    )
    #: the target ε when neither sigma nor epsilon is given
    default_epsilon: ClassVar[float] = 1.0

    deadline_s: float | None = None
    dim: int = 1
    graph: str = "ring"
    delta: float = 1e-5
    calibrate: str = "mean"
    p: float | None = None
    clip: float | None = None
    sensitivity: float
    calls: int
    d_max: int
    epsilon: float | None = None
    sigma: float

    # -- the steps of `prepare` each algorithm fills in ------------------------------------------
    @classmethod
    def _noise_input(cls, raw: Mapping[str, Any], out: dict[str, Any]) -> None:
        """What the noise is added to: the clipped input (clip B, Δ = 2B), one call."""
        out["clip"] = _num(raw, "clip", cls.default("clip"))
        if out["clip"] <= 0:
            raise ValueError("clip must be positive")
        out["sensitivity"] = 2.0 * out["clip"]
        out["calls"] = 1

    @classmethod
    def _timing(
        cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, edges: list[tuple[int, int]]
    ) -> int | None:
        """The algorithm's clocks; the expected exchanges of a node when known without T."""
        raise NotImplementedError

    @classmethod
    def _rounds(cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, d_max: int) -> None:
        """T, when the algorithm has rounds (none here)."""

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> MuffliatoParams:
        """Validate a Muffliato job's public parameters, fill defaults, choose T from the public
        bound and calibrate σ (`privacy.gossip_paper_bound`; docs/algorithms/muffliato.md)."""
        cls.check_known(raw)
        if n < 2:
            raise ValueError(f"{cls.algorithm} needs at least 2 participants, got {n}")
        out: dict[str, Any] = {k: raw[k] for k in ("deadline_s",) if k in raw}
        out["dim"] = int(raw.get("dim", cls.default("dim")))
        out["graph"] = str(raw.get("graph", cls.default("graph")))
        out["delta"] = _num(raw, "delta", cls.default("delta"))
        out["calibrate"] = str(raw.get("calibrate", cls.default("calibrate")))
        if out["graph"] not in GRAPHS:
            raise ValueError(f"graph must be one of {list(GRAPHS)}")
        if out["calibrate"] not in ("mean", "ldp"):
            raise ValueError("calibrate must be 'mean' (eq. 7, a summary) or 'ldp' (the guarantee)")
        if not 1 <= out["dim"] <= 1 << 16 or not 0 < out["delta"] < 1:
            raise ValueError("dim must be in 1..65536 and delta in (0, 1)")
        if out["graph"] == "er":
            out["p"] = _num(raw, "p", min(1.0, 2.0 * math.log(n) / n))
            if not 0 < out["p"] <= 1:
                raise ValueError("p must be in (0, 1]")
        cls._noise_input(raw, out)
        edges = [] if out["graph"] in ("topology", "er") else public_graph(out, n, 0, 0)
        # er: a fresh graph per call, any degree is possible: the bound n − 1
        d_max = int(degrees(n, edges).max()) if edges else n - 1
        out["d_max"] = d_max
        comms = cls._timing(raw, out, n, edges)
        sigma = raw.get("sigma")
        if sigma is None:
            eps = _num(raw, "epsilon", cls.default_epsilon)
            if eps <= 0:
                raise ValueError("epsilon must be positive")
            out["epsilon"] = eps
            # σ for the sensitivity charged on the noise grid (discrete_gaussian)
            if out["calibrate"] == "ldp":
                sigma = calibrate_on_grid(
                    lambda s: ldp_sigma(eps, out["delta"], s, out["calls"]),
                    out["sensitivity"],
                    out["dim"],
                )
            else:
                T_guess = int(raw.get("T", 0)) or 1
                comms_call = comms if comms is not None else max(1, d_max) * T_guess
                sigma = calibrate_on_grid(
                    lambda s: gossip_paper_bound.sigma_for_mean_dp(
                        eps,
                        out["delta"],
                        sensitivity=s,
                        n=n,
                        communications=comms_call * out["calls"],
                    ),
                    out["sensitivity"],
                    out["dim"],
                )
        out["sigma"] = float(sigma)
        if out["sigma"] <= 0:
            raise ValueError("sigma must be positive")
        cls._rounds(raw, out, n, d_max)
        return cls(**out)


@dataclass(frozen=True, kw_only=True)
class GossipParams(MuffliatoParams):
    """Synchronous rounds (Algorithms 1 and 3): T rounds per gossip call (default from
    `gossip.gossip_rounds` with the public spectral gap, or `spectral_gap` for er/topology,
    and `spread_bound` (default B², the largest spread of inputs in a ball of radius B)),
    accelerated (true; Chebyshev γ from the spectral gap, 1 when plain), round_timeout_s (5),
    suspend_rounds (4: rounds a neighbour whose link gave up is skipped)."""

    inputs: ClassVar[frozenset[str]] = _COMMON_INPUTS | _SYNC_INPUTS

    accelerated: bool = True
    round_timeout_s: float = 5.0
    suspend_rounds: int = 4
    spectral_gap_used: float
    gamma: float
    T: int

    @classmethod
    def _timing(
        cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, edges: list[tuple[int, int]]
    ) -> int | None:
        out["accelerated"] = bool(raw.get("accelerated", cls.default("accelerated")))
        out["round_timeout_s"] = _num(raw, "round_timeout_s", cls.default("round_timeout_s"))
        out["suspend_rounds"] = int(raw.get("suspend_rounds", cls.default("suspend_rounds")))
        if out["round_timeout_s"] <= 0 or out["suspend_rounds"] < 0:
            raise ValueError("round_timeout_s must be positive, suspend_rounds >= 0")
        if "spectral_gap" in raw:
            lam = _num(raw, "spectral_gap", 0.0)
        elif out["graph"] in ("er", "topology"):
            raise ValueError(f"graph={out['graph']} needs a public spectral_gap lower bound")
        elif out["graph"] in gossip.CLOSED_FORM_GRAPHS:  # `edges` is that public graph
            lam = gossip.metropolis_spectral_gap(out["graph"], n)
        else:
            lam = gossip.spectral_gap(gossip.metropolis_weights(n, edges))
        if not 0 < lam <= 1:
            raise ValueError(f"the spectral gap bound must be in (0, 1], got {lam}")
        out["spectral_gap_used"] = lam
        out["gamma"] = gossip.chebyshev_gamma(lam) if out["accelerated"] else 1.0
        return None

    @classmethod
    def _rounds(cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, d_max: int) -> None:
        if "T" in raw:
            out["T"] = int(raw["T"])
        else:
            spread = _num(raw, "spread_bound", (out.get("clip") or 1.0) ** 2)

            def rounds(sigma: float) -> int:
                return max(
                    1,
                    gossip.gossip_rounds(
                        out["spectral_gap_used"],
                        n,
                        sigma,
                        spread,
                        dim=out["dim"],
                        accelerated=out["accelerated"],
                    ),
                )

            out["T"] = rounds(out["sigma"])
            if "sigma" not in raw and out["calibrate"] == "mean":
                # σ (mean loss ∝ T/σ²) and T (Theorem 2, decreasing in σ) depend on each other:
                # raise T until it suffices for the σ it implies
                for _ in range(64):
                    out["sigma"] = gossip_paper_bound.sigma_for_mean_dp(
                        out["epsilon"],
                        out["delta"],
                        sensitivity=out["sensitivity"],
                        n=n,
                        communications=max(1, d_max) * out["T"] * out["calls"],
                    )
                    if rounds(out["sigma"]) <= out["T"]:
                        break
                    out["T"] += 1
        if not 1 <= out["T"] * out["calls"] <= MAX_ROUNDS:
            raise ValueError(f"T × steps must be in 1..{MAX_ROUNDS}")


@dataclass(frozen=True, kw_only=True)
class MuffliatoAverageParams(GossipParams):
    """Algorithm 1, gossip averaging: clip B (1.0; inputs clipped to L2 norm B, Δ = 2B), one call;
    spread_bound (B²) for the choice of T."""

    algorithm: ClassVar[str] = "muffliato"
    inputs: ClassVar[frozenset[str]] = GossipParams.inputs | {"clip", "spread_bound"}

    clip: float = 1.0


@dataclass(frozen=True, kw_only=True)
class MuffliatoGdParams(GossipParams):
    """Algorithm 3, gossip gradient descent: dim (9), steps (10: gossip calls, of T rounds each),
    eta (0.7), lipschitz L (0.4: the gradient clip, Δ = 2L)."""

    algorithm: ClassVar[str] = "muffliato-gd"
    inputs: ClassVar[frozenset[str]] = GossipParams.inputs | {"steps", "eta", "lipschitz"}

    dim: int = 9
    lipschitz: float = 0.4
    eta: float = 0.7
    steps: int = 10

    @classmethod
    def _noise_input(cls, raw: Mapping[str, Any], out: dict[str, Any]) -> None:
        out["lipschitz"] = _num(raw, "lipschitz", cls.default("lipschitz"))
        out["eta"] = _num(raw, "eta", cls.default("eta"))
        out["calls"] = out["steps"] = int(raw.get("steps", cls.default("steps")))
        if out["lipschitz"] <= 0 or out["eta"] <= 0 or not 1 <= out["steps"] <= 10_000:
            raise ValueError("lipschitz and eta must be positive, steps in 1..10000")
        out["sensitivity"] = 2.0 * out["lipschitz"]


@dataclass(frozen=True, kw_only=True)
class MuffliatoRandomParams(MuffliatoParams):
    """Algorithm 2, randomized pairwise gossip: clip B (1.0, Δ = 2B), rate (activations per second
    per node, 5), duration_s (10), grace_s (2), exchange_timeout_s (5)."""

    algorithm: ClassVar[str] = "muffliato-random"
    inputs: ClassVar[frozenset[str]] = _COMMON_INPUTS | {
        "clip",
        "rate",
        "duration_s",
        "grace_s",
        "exchange_timeout_s",
    }

    clip: float = 1.0
    rate: float = 5.0
    duration_s: float = 10.0
    grace_s: float = 2.0
    exchange_timeout_s: float = 5.0

    @classmethod
    def _timing(
        cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, edges: list[tuple[int, int]]
    ) -> int | None:
        for k in ("rate", "duration_s", "grace_s", "exchange_timeout_s"):
            out[k] = _num(raw, k, cls.default(k))
        if min(out["rate"], out["duration_s"], out["grace_s"], out["exchange_timeout_s"]) <= 0:
            raise ValueError("rate, duration_s, grace_s and exchange_timeout_s must be positive")
        return max(1, math.ceil(2 * out["rate"] * out["duration_s"]))  # expected exchanges
