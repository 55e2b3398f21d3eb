"""IncA's job parameters, typed: `IncaParams.prepare(raw, n)` at submission (defaults, checks
naming the field, calibration of σ_η and σ_Δ), `to_wire()` for the job spec, `from_wire` at every
node and accountant (no calibration, no randomness). The calibration follows Theorems 4.1
and 4.5 of the paper and runs before the job starts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from netdp_node.privacy import inca_audit
from netdp_node.privacy.discrete_gaussian import (
    calibrate_on_grid,
    charged_sensitivity,
    discrete_gaussian_sigma,
    release_epsilon,
)
from netdp_node.privacy.inca_audit import parse_threat
from netdp_node.protocols.base import (
    Params,
    beyond_reach,
    given_first,
    integer,
    invalid,
    number,
    unknown_names,
    word,
)

#: the parameters a user may give (the others are computed by `prepare`)
KNOWN = frozenset(
    {
        "T",
        "k",
        "scheme",
        "dim",
        "lo",
        "hi",
        "epsilon",
        "delta",
        "threat",
        "kappa",
        "sigma_eta",
        "sigma_delta",
        "round_s",
        "gossip_s",
        "fanout",
        "deadline_s",
        "expect_leave",
        "expect_miss",
        "calibration_runs",
    }
)
COMPUTED = frozenset({"sensitivity", "sigma_delta_source"})
#: what the noise's calibration depends on, the one to change first leading
_NOISE_FIELDS = ("sigma_eta", "epsilon", "delta", "hi", "lo", "kappa", "dim")
CALIBRATION_MAX_ROWS = 700  # n(T+1) above which σ_Δ is not calibrated at submission (too slow)


@dataclass(frozen=True)
class IncaParams(Params):
    """The prepared parameters of an IncA job (see `prepare` for their meaning)."""

    algorithm: ClassVar[str] = "inca"
    inputs: ClassVar[frozenset[str]] = KNOWN
    derived: ClassVar[frozenset[str]] = COMPUTED

    T: int
    k: int
    scheme: str
    dim: int
    lo: float
    hi: float
    epsilon: float
    delta: float
    threat: str
    kappa: float
    round_s: float
    fanout: int
    expect_leave: float
    expect_miss: float
    calibration_runs: int
    gossip_s: float
    deadline_s: float | None
    sensitivity: float
    sigma_eta: float
    sigma_delta: float
    sigma_delta_source: str

    @classmethod
    def prepare(cls, raw: Mapping[str, Any], n: int) -> IncaParams:
        """Validate an IncA job's public parameters, fill defaults and calibrate the noise.

        T (10), k (2), scheme ("inc" or "early"), dim (1), lo/hi (the box domain, 0 and 1;
        values are clipped into it, Δ_x = (hi − lo)·√dim), epsilon (1.0) and delta (1e-5): the
        target, met by every node's guarantee on whatever execution happens (any dropouts, any
        placement of the adversary): the local-DP level of its discrete η (its accountant,
        `inca.accountant`). So σ_η is the smallest noise (on its grid) whose local-DP level is at
        most ε (CKS Theorem 4 and Proposition 12) and that is at least the paper's
        √κ·σ_η*, σ_η*² = c²Δ_x²/(ε² n_H) (Theorem 4.5; kappa 2.0, c² = 2 ln(1.25/δ),
        n_H the honest parties of `threat`, "eavesdrop:0.5" or "collude:ρ"). A given sigma_eta
        whose local-DP level exceeds ε is refused (ValueError naming sigma_eta). sigma_delta:
        calibrated by `calibrate_sigma_delta` (Theorem 4.1, before the run) at the paper's σ_η on
        executions sampled with the expected dropouts expect_leave (0) and expect_miss (0),
        calibration_runs (4) of them: it shapes the labelled audit, not the guarantee. Either σ
        may be given explicitly. round_s (iteration deadline, 2 s), gossip_s (dissemination
        window, 2·round_s), fanout (peers a node asks per dissemination round, 2). Re-preparing
        prepared parameters gives them back unchanged."""
        unknown_names("inca", set(raw) - KNOWN - COMPUTED, KNOWN)
        if n < 3:
            raise invalid("participants", "at least 3 for IncA", n)
        T, k = integer(raw, "T", 10), integer(raw, "k", 2)
        if not 1 <= T <= 10_000:
            raise invalid("T", "in 1..10000", T)
        if not 1 <= k <= n - 1:
            raise invalid("k", f"in 1..n-1 = 1..{n - 1}", k)
        # "inc" (Example 3.2) or "early" (Example 3.1)
        scheme = word(raw, "scheme", "inc", ("inc", "early"))
        dim = integer(raw, "dim", 1)
        if not 1 <= dim <= 1 << 16:
            raise invalid("dim", "in 1..65536", dim)
        lo, hi = number(raw, "lo", 0.0), number(raw, "hi", 1.0)
        if not lo < hi:
            first, _ = given_first(raw, "hi", "lo")
            if first == "hi":
                raise invalid("hi", f"> lo = {lo:g}", hi, "the domain [lo, hi]")
            raise invalid("lo", f"< hi = {hi:g}", lo, "the domain [lo, hi]")
        epsilon, delta = number(raw, "epsilon", 1.0), number(raw, "delta", 1e-5)
        if not epsilon > 0:
            raise invalid("epsilon", "> 0", epsilon)
        if not 0 < delta < 1:
            raise invalid("delta", "in (0, 1)", delta)
        threat = raw.get("threat", "eavesdrop:0.5")
        if not isinstance(threat, str):
            raise invalid("threat", "eavesdrop:P or collude:RHO", threat)
        kappa = number(raw, "kappa", 2.0)
        if not kappa >= 1:
            raise invalid("kappa", ">= 1", kappa)
        round_s, fanout = number(raw, "round_s", 2.0), integer(raw, "fanout", 2)
        if not round_s > 0:
            raise invalid("round_s", "> 0", round_s)
        if fanout < 1:
            raise invalid("fanout", ">= 1", fanout)
        gossip_s = number(raw, "gossip_s", 2 * round_s)
        if not gossip_s > 0:
            raise invalid("gossip_s", "> 0", gossip_s)
        expect_leave = number(raw, "expect_leave", 0.0)
        if not 0 <= expect_leave <= 1:
            raise invalid("expect_leave", "in [0, 1]", expect_leave)
        expect_miss = number(raw, "expect_miss", 0.0)
        if not 0 <= expect_miss < 1:
            raise invalid("expect_miss", "in [0, 1)", expect_miss)
        runs = integer(raw, "calibration_runs", 4)
        if not 1 <= runs <= 1000:
            raise invalid("calibration_runs", "in 1..1000", runs)
        deadline_s = number(raw, "deadline_s", None) if "deadline_s" in raw else None
        parse_threat(threat, n)
        try:
            sens, sigma_eta = cls._sigma_eta(raw, epsilon, delta, kappa, lo, hi, dim, threat, n)
        except ArithmeticError as e:
            raise beyond_reach(raw, e, *_NOISE_FIELDS) from None
        p = cls(
            T=T,
            k=k,
            scheme=scheme,
            dim=dim,
            lo=lo,
            hi=hi,
            epsilon=epsilon,
            delta=delta,
            threat=threat,
            kappa=kappa,
            round_s=round_s,
            fanout=fanout,
            expect_leave=expect_leave,
            expect_miss=expect_miss,
            calibration_runs=runs,
            gossip_s=gossip_s,
            deadline_s=deadline_s,
            sensitivity=sens,
            sigma_eta=sigma_eta,
            sigma_delta=0.0,
            sigma_delta_source="",
        )
        if "sigma_delta" in raw:
            sd = number(raw, "sigma_delta", None)
            source = str(raw.get("sigma_delta_source", "given"))
        else:
            try:
                sd, source = calibrate_sigma_delta(p, n, paper_sigma_eta(p, n))
            except ArithmeticError as e:
                raise beyond_reach(raw, e, *_NOISE_FIELDS) from None
        if not sd >= 0:
            raise invalid("sigma_delta", ">= 0", sd)
        return dataclasses.replace(p, sigma_delta=sd, sigma_delta_source=source)

    @staticmethod
    def _sigma_eta(
        raw: Mapping[str, Any],
        epsilon: float,
        delta: float,
        kappa: float,
        lo: float,
        hi: float,
        dim: int,
        threat: str,
        n: int,
    ) -> tuple[float, float]:
        """The sensitivity Δ_x and σ_η (given or calibrated), refused when its guarantee exceeds
        epsilon."""
        sens = (hi - lo) * math.sqrt(dim)
        if "sigma_eta" in raw:
            sigma_eta = number(raw, "sigma_eta", None)
            if not sigma_eta > 0:
                raise invalid("sigma_eta", "> 0", sigma_eta)
        else:
            sigma_eta = _calibrate_sigma_eta(epsilon, delta, kappa, sens, dim, threat, n)
        # the guarantee every node reports (its accountant, `inca.accountant.inca_ldp`): the
        # local-DP level of its discrete η, whatever the execution; the job is refused when it
        # would exceed the ε asked for
        got = release_epsilon(
            {"sigma_eta": sigma_eta, "sensitivity": sens, "dim": dim, "delta": delta},
            sigma_key="sigma_eta",
        )
        if not got <= epsilon:
            need = _calibrate_sigma_eta(epsilon, delta, 1.0, sens, dim, threat, n)
            raise invalid(
                "sigma_eta",
                f">= {need:.6g} for epsilon = {epsilon:g}, or left out to have it calibrated",
                sigma_eta,
                f"it gives each node the guarantee ε = {got:.4g} at δ = {delta:g}, above epsilon = "
                f"{epsilon:g}: the local-DP level of its η, which holds whatever the execution "
                "and the dropouts",
            )
        return sens, sigma_eta

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> IncaParams:
        """The prepared parameters of a job spec. Keys the class does not know are refused."""
        return super().from_wire({"deadline_s": None, **wire})

    def to_wire(self) -> dict[str, Any]:
        """The JSON object of the job spec (fields left at None are omitted)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


def _calibrate_sigma_eta(
    epsilon: float, delta: float, kappa: float, sens: float, dim: int, threat: str, n: int
) -> float:
    """The smallest σ_η (on its grid) meeting both: the local-DP level of the discrete η is at
    most ε (the guarantee, `discrete_gaussian_sigma`: CKS Theorem 4 and Proposition 12, for the
    sensitivity charged on the grid), and σ_η ≥ √κ·σ_η* (the paper's calibration, Theorem 4.5)."""
    kind, frac = parse_threat(threat, n)
    n_h = n - (round(frac * n) if kind == "collude" else 0)
    c2 = 2 * math.log(1.25 / delta)

    def rule(s: float) -> float:
        return max(
            discrete_gaussian_sigma(epsilon, delta, s),
            math.sqrt(kappa * c2 * s**2 / (epsilon**2 * n_h)),
        )

    try:
        return calibrate_on_grid(rule, sens, dim)
    except ValueError as e:
        raise invalid("epsilon", f"reachable at delta = {delta:g}", epsilon, str(e)) from None


def paper_sigma_eta(p: IncaParams, n: int) -> float:
    """The paper's σ_η = √κ·σ_η*, σ_η*² = c²Δ_x²/(ε² n_H) (Theorem 4.5), for the
    sensitivity charged on its grid: the η the correlated noise is calibrated against."""
    kind, frac = parse_threat(p.threat, n)
    n_h = n - (round(frac * n) if kind == "collude" else 0)
    c2 = 2 * math.log(1.25 / p.delta)
    return calibrate_on_grid(
        lambda s: math.sqrt(p.kappa * c2 * s**2 / (p.epsilon**2 * n_h)), p.sensitivity, p.dim
    )


def calibrate_sigma_delta(p: IncaParams, n: int, sigma_eta: float) -> tuple[float, str]:
    """σ_Δ by the exact covariance condition of Theorem 4.1 (`inca_audit.calibrate`, analytic
    Gaussian ε) at the paper's `sigma_eta` (`paper_sigma_eta`): the worst case over
    `calibration_runs` executions sampled with the job's n, k, T, scheme and expected dropouts
    (`expect_leave` parties leave for good, `expect_miss` of the party-iterations are missed;
    `inca_audit.dropout_history`), each against one adversary of the job's threat, from a fixed seed
    (so every submission of the same job gets the same σ_Δ). Returns (σ_Δ, how it was obtained);
    10·Δ_x (the paper's range) with the reason when calibration is too large or infeasible. σ_Δ
    shapes the labelled audit and the noise leavers leave behind; the guarantee does not depend on
    it (it is met by η alone, `IncaParams.prepare`)."""
    default = 10.0 * p.sensitivity
    T, k = p.T, p.k
    if n * (T + 1) > CALIBRATION_MAX_ROWS:
        return default, (
            f"default 10·Δ_x (n(T+1) = {n * (T + 1)} > {CALIBRATION_MAX_ROWS}: not "
            "calibrated at submission)"
        )
    kind, frac = parse_threat(p.threat, n)
    rng = np.random.default_rng(0x1CA)
    views = []
    for r in range(p.calibration_runs):
        on = inca_audit.dropout_history(
            n, T, rng, permanent=p.expect_leave, temporary=p.expect_miss
        )
        ex = inca_audit.make_execution(n, k, T, r, p.scheme, online=on)
        adversary = (
            {"observed": inca_audit.sample_observed(ex, frac, rng)}
            if kind == "eavesdrop"
            else {"corrupted": inca_audit.sample_corrupted(n, round(frac * n), rng)}
        )
        views.append(inca_audit.linear_view(ex, **adversary))
    try:
        cal = inca_audit.calibrate(
            views,
            epsilon=p.epsilon,
            delta=p.delta,
            sigma_eta=sigma_eta,
            sensitivity=charged_sensitivity(
                {"sensitivity": p.sensitivity, "sigma_eta": sigma_eta, "dim": p.dim},
                sigma_key="sigma_eta",
            ),
            method="analytic",
        )
    except ValueError as e:
        return default, f"default 10·Δ_x (calibration infeasible: {e})"
    return cal.sigma_delta, (
        f"calibrated (Theorem 4.1 audit at the paper's σ_η = {sigma_eta:.4g}) on {len(views)} "
        f"sampled executions against {p.threat}, expect_leave={p.expect_leave}, "
        f"expect_miss={p.expect_miss}"
    )


def prepare(raw: Mapping[str, Any], n: int) -> dict[str, Any]:
    """The record's `prepare`: `IncaParams.prepare(raw, n).to_wire()`."""
    return IncaParams.prepare(raw, n).to_wire()
