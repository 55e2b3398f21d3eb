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
from netdp_node.protocols.base import Params, beyond_reach, boolean, integer, invalid, number, word

#: Most rounds of a job (T × calls).
MAX_ROUNDS = 100_000

# ("alpha", accepted before and never read, is refused: it set nothing)
_COMMON_INPUTS = frozenset(
    {"dim", "sigma", "epsilon", "delta", "calibrate", "graph", "p", "deadline_s"}
)
#: what the noise's calibration depends on, the one to change first leading
_NOISE_FIELDS = ("sigma", "epsilon", "delta", "clip", "lipschitz", "steps", "T", "spectral_gap")
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
        out["clip"] = number(raw, "clip", cls.default("clip"))
        if out["clip"] <= 0:
            raise invalid("clip", "> 0", out["clip"])
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
            raise invalid("participants", f"at least 2 for {cls.algorithm}", n)
        out: dict[str, Any] = {k: raw[k] for k in ("deadline_s",) if k in raw}
        if "deadline_s" in out:
            number(raw, "deadline_s", None)  # a number (the runtime reads it; <= 0: none)
        out["dim"] = integer(raw, "dim", cls.default("dim"))
        if not 1 <= out["dim"] <= 1 << 16:
            raise invalid("dim", "in 1..65536", out["dim"])
        out["graph"] = word(raw, "graph", cls.default("graph"), GRAPHS)
        out["delta"] = number(raw, "delta", cls.default("delta"))
        if not 0 < out["delta"] < 1:
            raise invalid("delta", "in (0, 1)", out["delta"])
        # "mean" (eq. 7, a summary) or "ldp" (the guarantee)
        out["calibrate"] = word(raw, "calibrate", cls.default("calibrate"), ("mean", "ldp"))
        if out["graph"] == "er" or "p" in raw:  # (p is read with graph='er' only)
            p = number(raw, "p", min(1.0, 2.0 * math.log(n) / n))
            if not 0 < p <= 1:
                raise invalid("p", "in (0, 1]", p)
            if out["graph"] == "er":
                out["p"] = p
        cls._noise_input(raw, out)
        edges = [] if out["graph"] in ("topology", "er") else public_graph(out, n, 0, 0)
        # er: a fresh graph per call, any degree is possible: the bound n − 1
        d_max = int(degrees(n, edges).max()) if edges else n - 1
        out["d_max"] = d_max
        comms = cls._timing(raw, out, n, edges)
        try:
            cls._noise(raw, out, n, d_max, comms)
        except (ArithmeticError, ValueError) as e:
            if str(e).split(" ", 1)[0] in cls.inputs:
                raise  # a check naming its field
            raise beyond_reach(raw, e, *_NOISE_FIELDS) from None
        return cls(**out)

    @classmethod
    def _noise(
        cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, d_max: int, comms: int | None
    ) -> None:
        """σ (given, or calibrated from epsilon) and T, for the algorithm that has rounds."""
        sigma = raw.get("sigma")
        if sigma is None:
            eps = number(raw, "epsilon", cls.default_epsilon)
            if eps <= 0:
                raise invalid("epsilon", "> 0", eps)
            out["epsilon"] = eps
            # σ for the sensitivity charged on the noise grid (discrete_gaussian)
            if out["calibrate"] == "ldp":
                sigma = calibrate_on_grid(
                    lambda s: ldp_sigma(eps, out["delta"], s, out["calls"]),
                    out["sensitivity"],
                    out["dim"],
                )
            else:
                T_guess = integer(raw, "T", 0) or 1
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
        out["sigma"] = number({"sigma": sigma}, "sigma", None)
        if out["sigma"] <= 0:
            raise invalid("sigma", "> 0", out["sigma"])
        cls._rounds(raw, out, n, d_max)


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
        out["accelerated"] = boolean(raw, "accelerated", cls.default("accelerated"))
        out["round_timeout_s"] = number(raw, "round_timeout_s", cls.default("round_timeout_s"))
        out["suspend_rounds"] = integer(raw, "suspend_rounds", cls.default("suspend_rounds"))
        if out["round_timeout_s"] <= 0:
            raise invalid("round_timeout_s", "> 0", out["round_timeout_s"])
        if out["suspend_rounds"] < 0:
            raise invalid("suspend_rounds", ">= 0", out["suspend_rounds"])
        if "T" in raw and not integer(raw, "T", None) >= 1:
            raise invalid("T", ">= 1", raw["T"])
        if "spectral_gap" in raw:
            lam = number(raw, "spectral_gap", None)
        elif out["graph"] in ("er", "topology"):
            raise ValueError(
                f"spectral_gap must be given with graph={out['graph']} (a public lower bound)"
            )
        elif out["graph"] in gossip.CLOSED_FORM_GRAPHS:  # `edges` is that public graph
            lam = gossip.metropolis_spectral_gap(out["graph"], n)
        else:
            lam = gossip.spectral_gap(gossip.metropolis_weights(n, edges))
        if not 0 < lam <= 1:
            raise invalid("spectral_gap", "in (0, 1]", lam)
        out["spectral_gap_used"] = lam
        out["gamma"] = gossip.chebyshev_gamma(lam) if out["accelerated"] else 1.0
        return None

    @classmethod
    def _rounds(cls, raw: Mapping[str, Any], out: dict[str, Any], n: int, d_max: int) -> None:
        if "T" in raw:
            out["T"] = integer(raw, "T", None)
        else:
            spread = number(raw, "spread_bound", (out.get("clip") or 1.0) ** 2)
            if not spread > 0:
                if "spread_bound" in raw:
                    raise invalid("spread_bound", "> 0", spread)
                raise invalid(
                    "clip", "large enough for clip² > 0", out["clip"], "or give spread_bound or T"
                )

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
        most = MAX_ROUNDS // out["calls"]  # T × steps rounds in all
        if not 1 <= out["T"] <= most:
            note = f"T × steps must be in 1..{MAX_ROUNDS}" if out["calls"] > 1 else ""
            if "T" in raw:
                raise invalid("T", f"in 1..{most}", out["T"], note)
            if "spectral_gap" in raw:
                raise invalid(
                    "spectral_gap",
                    f"large enough for the derived T = {out['T']} to be in 1..{most}",
                    raw["spectral_gap"],
                    "or give T",
                )
            raise invalid("T", f"in 1..{most}", out["T"], "derived (Theorem 2): give T")


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
        out["lipschitz"] = number(raw, "lipschitz", cls.default("lipschitz"))
        out["eta"] = number(raw, "eta", cls.default("eta"))
        out["calls"] = out["steps"] = integer(raw, "steps", cls.default("steps"))
        for k in ("lipschitz", "eta"):
            if out[k] <= 0:
                raise invalid(k, "> 0", out[k])
        if not 1 <= out["steps"] <= 10_000:
            raise invalid("steps", "in 1..10000", out["steps"])
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
            out[k] = number(raw, k, cls.default(k))
            if out[k] <= 0:
                raise invalid(k, "> 0", out[k])
        return max(1, math.ceil(2 * out["rate"] * out["duration_s"]))  # expected exchanges
