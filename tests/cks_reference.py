"""Independent reference computations for the discrete Gaussian's (ε, δ), used by tests only.

Written from the statements, not from netdp's code:

* `cks_epsilon`: ρ-zCDP with ρ = 1/(2z²) (Canonne, Kamath, Steinke, NeurIPS 2020, Theorem 4)
  converted by their Proposition 12, ε(α) = αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1), minimised
  over the CONTINUOUS order α > 1 by scipy (a scan for the bracket, then Brent's method);
* `exact_discrete_delta`: the exact privacy profile of the 1-D discrete Gaussian N_Z(0, σ²) with an
  integer shift Δ (CKS Theorem 7): δ(ε) = P[Z > εσ²/Δ − Δ/2] − e^ε·P[Z > εσ²/Δ + Δ/2], by summing
  exp(−k²/(2σ²)) with its normaliser (in exact-enough float: the terms are summed from the tail
  inwards, up to |k| ≤ 60σ where they underflow).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar


def cks_epsilon(z: float, delta: float) -> float:
    """min over α > 1 of the CKS Prop. 12 conversion of ρ = 1/(2z²)-zCDP at δ."""
    rho = 1.0 / (2.0 * z * z)

    def eps(t: float) -> float:  # α = 1 + e^t
        a = 1.0 + math.exp(t)
        return a * rho + math.log1p(-1.0 / a) - (math.log(delta) + math.log(a)) / (a - 1.0)

    ts = np.linspace(math.log(1e-6), math.log(1e10), 2001)
    vals = [eps(float(t)) for t in ts]
    i = int(np.argmin(vals))
    lo, hi = float(ts[max(i - 1, 0)]), float(ts[min(i + 1, len(ts) - 1)])
    res = minimize_scalar(
        eps, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12, "maxiter": 500}
    )
    return max(0.0, min(float(res.fun), vals[i]))


def exact_discrete_delta(sigma: float, shift: int, epsilon: float) -> float:
    """CKS Theorem 7: the smallest δ for which adding N_Z(0, σ²) to an integer query of
    sensitivity `shift` is (ε, δ)-DP."""
    top = math.ceil(60.0 * sigma) + abs(shift) + 10
    ks = np.arange(-top, top + 1)
    w = np.exp(-(ks.astype(np.float64) ** 2) / (2.0 * sigma * sigma))
    w /= w.sum()
    a = epsilon * sigma * sigma / shift - shift / 2.0
    b = epsilon * sigma * sigma / shift + shift / 2.0
    tail_a = float(np.sort(w[ks > a]).sum())  # ascending: small terms first
    tail_b = float(np.sort(w[ks > b]).sum())
    return max(0.0, tail_a - math.exp(epsilon) * tail_b)
