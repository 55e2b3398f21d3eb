"""The job parameters of the ring algorithms (ring-sum, ring-sum-r, ring-histogram), Cyffers &
Bellet (AISTATS 2022): one frozen class per algorithm (`protocols.base.Params`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from netdp_node.privacy.discrete_gaussian import calibrate_on_grid, discrete_gaussian_sigma
from netdp_node.privacy.ring import rr_gamma
from netdp_node.protocols.base import Params, given_first, integer, invalid, number

#: Most rounds of a ring job (n·K token hops, each one a durable ledger step at every node).
MAX_ROUNDS = 100_000
#: Largest epsilon0 of a randomized response (e^epsilon0 must be a float).
MAX_EPSILON0 = 700.0


@dataclass(frozen=True, kw_only=True)
class RingParams(Params):
    """What every ring job's token and ledger need: rounds K, the token's length `dim`, the L2
    bound `clip` of a value, the δ of one window and Theorem 1's δ', and the noise: std `sigma`
    for the replace-one `sensitivity`."""

    rounds: int = 10
    dim: int = 1
    clip: float = 1.0
    delta: float = 1e-6
    delta_prime: float = 1e-6
    sensitivity: float
    sigma: float

    #: what the participants' count check says ("the ring sum needs at least 3 participants")
    what: ClassVar[str] = "the ring sum"

    @classmethod
    def _rounds(cls, raw: Mapping[str, Any], n: int) -> int:
        if n < 3:
            raise invalid("participants", f"at least 3 for {cls.what}", n)
        rounds = integer(raw, "rounds", cls.default("rounds"))
        if not 1 <= rounds <= MAX_ROUNDS:
            raise invalid("rounds", f"in 1..{MAX_ROUNDS}", rounds)
        return rounds

    @staticmethod
    def _check_deltas(delta: float, delta_prime: float) -> None:
        for k, v in (("delta", delta), ("delta_prime", delta_prime)):
            if not 0 < v < 1:
                raise invalid(k, "in (0, 1)", v)

    @staticmethod
    def _check_windows(
        raw: Mapping[str, Any], rounds: int, delta: float, delta_prime: float
    ) -> None:
        """Theorem 1's δ over the K windows, rounds × delta + delta_prime, must be below 1 (at 1
        or more nothing is guaranteed, or accounted): the field named is the first of delta,
        delta_prime and rounds that the submission gave."""
        if rounds * delta + delta_prime < 1:
            return
        first, others = given_first(raw, "delta", "delta_prime", "rounds")
        bound = {
            "delta": f"< (1 - delta_prime) / rounds = {(1 - delta_prime) / rounds:g}",
            "delta_prime": f"< 1 - rounds × delta = {1 - rounds * delta:g}",
            "rounds": f"< (1 - delta_prime) / delta = {(1 - delta_prime) / delta:g}",
        }[first]
        got = {"delta": delta, "delta_prime": delta_prime, "rounds": rounds}[first]
        raise invalid(
            first,
            bound,
            got,
            f"rounds × delta + delta_prime, the guarantee's δ over the rounds, must be < 1; "
            f"or change {others}",
        )


@dataclass(frozen=True, kw_only=True)
class RingSumParams(RingParams):
    """Algorithm 1: rounds K ≥ 1 (10), dim ≥ 1 (1), clip B > 0 (1.0; values are clipped to L2
    norm B, so the replace-one sensitivity is Δ = 2B), the per-window epsilon > 0 (0.5), delta and
    delta_prime in (0, 1) (1e-6). σ makes one window's release (ε, δ)-DP for the sensitivity Δ'
    charged on the noise grid (`discrete_gaussian.discrete_gaussian_sigma`: the zCDP route proven
    for the discrete noise, CKS Theorem 4 and Proposition 12; `calibrate_on_grid`)."""

    algorithm: ClassVar[str] = "ring-sum"
    inputs: ClassVar[frozenset[str]] = frozenset(
        {"rounds", "dim", "clip", "epsilon", "delta", "delta_prime"}
    )
    derived: ClassVar[frozenset[str]] = frozenset({"sigma", "sensitivity"})

    epsilon: float = 0.5

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> RingSumParams:
        cls.check_known(raw)
        rounds = cls._rounds(raw, n)
        dim = integer(raw, "dim", cls.default("dim"))
        clip = number(raw, "clip", cls.default("clip"))
        epsilon = number(raw, "epsilon", cls.default("epsilon"))
        delta = number(raw, "delta", cls.default("delta"))
        delta_prime = number(raw, "delta_prime", cls.default("delta_prime"))
        if not 1 <= dim <= 1 << 20:
            raise invalid("dim", "in 1..2^20", dim)
        if not clip > 0:
            raise invalid("clip", "> 0", clip)
        cls._check_deltas(delta, delta_prime)
        cls._check_windows(raw, rounds, delta, delta_prime)
        sensitivity = 2.0 * clip
        if not epsilon > 0:
            raise invalid("epsilon", "> 0", epsilon)
        # calibrated for the sensitivity charged on the noise grid (discrete_gaussian)
        sigma = calibrate_on_grid(
            lambda s: discrete_gaussian_sigma(epsilon, delta, s), sensitivity, dim
        )
        return cls(
            rounds=rounds,
            dim=dim,
            clip=clip,
            epsilon=epsilon,
            delta=delta,
            delta_prime=delta_prime,
            sensitivity=sensitivity,
            sigma=sigma,
        )


@dataclass(frozen=True, kw_only=True)
class RingSumRParams(RingSumParams):
    """Algorithm 1-R (Remark 1): the parameters of Algorithm 1; the engine spreads σ over the
    visits."""

    algorithm: ClassVar[str] = "ring-sum-r"


@dataclass(frozen=True, kw_only=True)
class RingHistogramParams(RingParams):
    """Algorithm 2: rounds K (10), bins L (4), epsilon0 (the local level of each randomized
    response, 1.0), delta (the shuffle bound's δ, 1e-6), delta_prime (1e-6). γ = L/(e^ε0 + L − 1).
    No Gaussian noise: clip 1, sigma 0, sensitivity 1 (one report), and the token has L counts."""

    algorithm: ClassVar[str] = "ring-histogram"
    inputs: ClassVar[frozenset[str]] = frozenset(
        {"rounds", "bins", "epsilon0", "delta", "delta_prime"}
    )
    derived: ClassVar[frozenset[str]] = frozenset({"gamma"})
    what: ClassVar[str] = "the ring histogram"

    bins: int = 4
    epsilon0: float = 1.0
    gamma: float

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> RingHistogramParams:
        cls.check_known(raw)
        rounds = cls._rounds(raw, n)
        bins = integer(raw, "bins", cls.default("bins"))
        epsilon0 = number(raw, "epsilon0", cls.default("epsilon0"))
        delta = number(raw, "delta", cls.default("delta"))
        delta_prime = number(raw, "delta_prime", cls.default("delta_prime"))
        if not 2 <= bins <= 1 << 16:
            raise invalid("bins", "in 2..65536", bins)
        if not 0 < epsilon0 <= MAX_EPSILON0:
            raise invalid("epsilon0", f"in (0, {MAX_EPSILON0}]", epsilon0)
        cls._check_deltas(delta, delta_prime)
        return cls(
            rounds=rounds,
            bins=bins,
            epsilon0=epsilon0,
            delta=delta,
            delta_prime=delta_prime,
            gamma=rr_gamma(bins, epsilon0),
            clip=1.0,
            sigma=0.0,
            sensitivity=1.0,
            dim=bins,
        )
