"""The bounds of the complete-graph token walks (walk-sum, walk-histogram, walk-sgd) as a node's
accountant applies them, their calibration, and their local-DP baselines.

Pure functions of (public job parameters, the number of participants, the node's number of
contributions): one `Bounds` per algorithm (`SUM`, `HISTOGRAM`, `SGD`); the theorems themselves
are in `network_dp_walk` (Cyffers & Bellet, AISTATS 2022). What reads the node's ledger is
`netdp_node/algorithms/walk/accountant.py`. What a node's report uses:

* its REAL number N_u of data contributions (its ledger) where the theorem composes over them
  (Theorem 4 / Lemma 1 for SGD; Lemma 2's trials; the local-DP baseline), marked "counts=ledger";
* the high-probability bound N_v on an observer's visits (exact binomial quantile, erratum E15)
  where the theorem needs what only the observer knows (Theorems 3 and 6), marked "counts=bound";
* the known-sender regime (App. G), always, because mTLS reveals who sent a
  token and who receives it: either netdp's per-edge contribution cap B (deterministic, "edge-cap")
  or Lemma 2 with correction E14 ("lemma2"), ADDED to the amplified bound (basic composition);
* the release of the final token to everyone as one more observation (docs/errata.md, "The
  released result leaks the last steps"):
  one more fictive cycle (T + n_eff) for Theorems 3/6, one more contribution for Lemma 1;
* the better of that network bound and the local-DP composition of the node's own N_u
  contributions (each contribution is (ε0, δ)-LDP, so the local-DP bound always holds), per peer;
* n minus the participants the walk was re-routed around (the walk accountant's
  `live_participants`), after a crash.

walk-sgd is the exception: its network bound (Theorem 4 via Lemma 1) rests on privacy
amplification by iteration (Feldman, Mironov, Talwar, Thakurta, FOCS 2018), whose shift-reduction
lemma needs noise that absorbs arbitrary REAL shifts (a continuous Gaussian). The noise sampled is
a discrete Gaussian on a grid (`discrete_gaussian`) and the gradient step is nonlinear, so the
iterates of two neighbouring runs differ by non-lattice amounts: the lemma is not proven for it.
What a walk-sgd node enforces, records and reports towards every peer is therefore the proven
bound: the RDP composition of its own N_u discrete Gaussian releases (sensitivity Δ' charged on
the grid; CKS Theorem 4, converted by CKS Proposition 12; the final model and everything else an
observer sees is post-processing of them), i.e. the local-DP level (`_sgd_ldp`), and the default
calibration targets it. The Lemma-1 figure is shown beside it (the walk accountant's
`sgd_baselines`), labelled "continuous-noise analysis; not proven for discrete noise", never as it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from netdp_node.privacy.amplification import count_bound
from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    gaussian_rdp,
    rdp_to_dp,
)
from netdp_node.privacy.discrete_gaussian import (
    calibrate_on_grid,
    charged_sensitivity,
    discrete_gaussian_sigma,
    release_epsilon,
)
from netdp_node.privacy.muffliato_accountant import CONTINUOUS
from netdp_node.privacy.ring import rr_gamma
from netdp_node.privacy.token_walk import (
    sgd_alpha_max,
    spotted_loss,
    spotted_loss_capped,
    walk_histogram_loss,
    walk_sum_loss,
)


def walk_horizon(params: Mapping[str, Any]) -> tuple[int, float]:
    """(T used by the accountant, extra δ). With the hop counter the walk has exactly T steps; with
    the geometric stop the length exceeds T_hi = ⌈ln δ_T / ln(1 − 1/T)⌉ with probability ≤ δ_T."""
    T = int(params["T"])
    if params.get("stop", "counter") == "counter":
        return T, 0.0
    d = float(params["delta_hat"])
    return max(T, math.ceil(math.log(d) / math.log1p(-1.0 / T))) if T > 1 else 1, d


def _regime_loss(
    params: Mapping[str, Any], n: int, n_u: float, eps0: float, delta0: float
) -> tuple[float, float, str]:
    """The loss of spotted contributions, App. G: (ε, δ, label)."""
    if params["regime"] == "edge-cap":
        # c colluders see the real contributions adjacent to any of them: up to c·B (§4.3)
        c = int(params.get("colluders", 1))
        b = min(c * int(params["edge_cap"]), math.ceil(n_u))
        s = spotted_loss_capped(b, eps0, delta0, params["delta_prime"])
        return s.epsilon, s.delta, f"edge-cap(B={params['edge_cap']})"
    s = spotted_loss(
        n_u,
        n,
        eps0,
        params["delta_hat"],
        params["delta_prime"],
        True,
        delta=delta0,
        colluders=int(params.get("colluders", 1)),
    )
    return s.epsilon, s.delta, "lemma2"


def _ldp(
    eps0: float,
    delta0: float,
    count: int,
    delta_prime: float,
    rdp: tuple[tuple[float, ...], tuple[float, ...]] | None,
) -> PrivacyLoss:
    """Local DP over `count` contributions: the better of basic and advanced composition."""
    if count == 0:
        return PrivacyLoss(0.0, 0.0, "no-contribution", rdp)
    be, bd = count * eps0, count * delta0
    ae, ad = advanced_composition(eps0, delta0, count, delta_prime)
    if ae < be:
        return PrivacyLoss(ae, min(1.0, ad), "ldp-advanced", rdp)
    return PrivacyLoss(be, min(1.0, bd), "ldp-basic", rdp)


def _best(network: PrivacyLoss | None, local: PrivacyLoss) -> PrivacyLoss:
    """The better of a PROVEN network bound and the local-DP bound; `None`: no network bound is
    proven for the noise sampled (walk-sgd, module docstring), the local-DP bound is the loss."""
    if network is None:
        return local
    return network if network.epsilon < local.epsilon else local


# -- walk-sum: Theorem 3 ---------------------------------------------------------------------------
def sum_eps0(params: Mapping[str, Any]) -> float:
    """ε0 of one walk-sum contribution: the (ε, δ) of the discrete Gaussian release at δ for the
    sensitivity charged on the noise grid (`discrete_gaussian.release_epsilon`: zCDP converted by
    CKS Proposition 12, proven for the noise sampled; the classic Gaussian tail bound is not), and
    at least the ε0 the calibration chose."""
    return max(float(params["epsilon0"]), release_epsilon(params))


def sgd_ratio(params: Mapping[str, Any]) -> float:
    """σ/L of walk-sgd with the sensitivity charged on the noise grid: 2σ/Δ', Δ' ≥ 2L."""
    return (
        2.0
        * float(params["sigma"])
        / charged_sensitivity(params, sensitivity=2.0 * float(params["lipschitz"]))
    )


def sum_network_loss(params: Mapping[str, Any], n: int, n_u: float) -> PrivacyLoss:
    """Theorem 3 (tight cycle, exact counts; App. D formula with E7) + spotted loss + release."""
    eps0 = sum_eps0(params)
    T, d_extra = walk_horizon(params)
    c = int(params.get("colluders", 1))
    b = walk_sum_loss(
        n,
        T + math.ceil(n / c),
        eps0,
        params["delta"],
        params["delta_prime"],
        params["delta_hat"],
        cycle="tight",
        counts="exact",
        colluders=c,
    )
    se, sd, label = _regime_loss(params, n, n_u, eps0, params["delta"])
    return PrivacyLoss(
        b.epsilon + se, min(1.0, b.delta + sd + d_extra), f"theorem3-tight+{label}, counts=bound"
    )


def _sum_ldp(p: Mapping[str, Any], count: int) -> PrivacyLoss:
    """Local DP of `count` Gaussian contributions (multiplier σ/Δ), all seen by the observer: the
    best of basic and advanced composition of the per-release (ε0, δ) and the exact RDP
    composition of the Gaussians converted at δ (usually the smallest)."""
    z = float(p["sigma"]) / charged_sensitivity(p)
    curve = (DEFAULT_ORDERS, tuple(gaussian_rdp(z, DEFAULT_ORDERS, count).tolist()))
    classic = _ldp(sum_eps0(p), float(p["delta"]), count, float(p["delta_prime"]), curve)
    if count == 0:
        return classic
    eps, _ = rdp_to_dp(curve[0], curve[1], float(p["delta"]))
    rdp = PrivacyLoss(eps, float(p["delta"]), "ldp-gaussian-rdp", curve)
    return rdp if rdp.epsilon < classic.epsilon else classic


def ldp_sum_sigma(params: Mapping[str, Any], count: int) -> float:
    """The local-DP baseline of walk-sum: the σ each contribution would need so that `count` of
    them, seen together by one observer, stay within the job's ε (`_sum_ldp`: the best of the
    compositions of the per-release ε0 and the exact Gaussian RDP)."""
    target, delta = float(params["epsilon"]), float(params["delta"])
    sens = 2.0 * float(params["clip"])

    def sigma_of(e0: float) -> float:  # for the sensitivity charged on the noise grid
        return calibrate_on_grid(
            lambda s: discrete_gaussian_sigma(e0, delta, s), sens, int(params.get("dim", 1))
        )

    def ok(e0: float) -> bool:
        p = {**params, "epsilon0": e0, "sensitivity": sens, "sigma": sigma_of(e0)}
        return _sum_ldp(p, count).epsilon <= target

    return sigma_of(_bisect_largest(ok, 1e-6, 1.0 - 1e-9))


def prospective_count(params: Mapping[str, Any], n: int) -> int:
    """Contributions a node may make: the cap, else the exact binomial quantile of Bin(T, 1/n)."""
    if int(params.get("cap", 0)):
        return int(params["cap"])
    T, _ = walk_horizon(params)
    return int(count_bound(T, 1.0 / n, params["delta_hat"], exact=True))


# -- walk-histogram: Theorem 6 ----------------------------------------------------------------------
def rr_epsilon(L: int, gamma: float) -> float:
    """ε0 of L-ary randomized response with randomization probability γ (inverse of `rr_gamma`)."""
    return math.log(L / gamma - L + 1.0)


def histogram_network_loss(params: Mapping[str, Any], n: int, n_u: float) -> PrivacyLoss:
    """Theorem 6 (Remark 4 numeric cycle bound, E8) + spotted loss (pure ε, δ = 0) + release."""
    eps0 = float(params["epsilon0"])
    T, d_extra = walk_horizon(params)
    c = int(params.get("colluders", 1))
    b = walk_histogram_loss(
        n,
        T + math.ceil(n / c),
        eps0,
        params["delta"],
        params["delta_prime"],
        params["delta_hat"],
        cycle="numeric",
        counts="exact",
        colluders=c,
    )
    se, sd, label = _regime_loss(params, n, n_u, eps0, 0.0)
    return PrivacyLoss(
        b.epsilon + se, min(1.0, b.delta + sd + d_extra), f"theorem6-numeric+{label}, counts=bound"
    )


# -- walk-sgd: Theorem 4 / Lemma 1 -----------------------------------------------------------------
def sgd_network_rdp(
    params: Mapping[str, Any], n: int, n_u: float
) -> tuple[tuple[float, ...], tuple[float, ...], str]:
    """The RDP curve towards any observer: Lemma 1 over n_u + 1 contributions (the +1 is the release
    of the final model; E10's exact ln n/(n − 1)) plus the Gaussian RDP of the spotted contributions
    (sensitivity 2L: α·2/(σ/L)² each), at the orders 1 < α ≤ α_max(σ/L) where Lemma 1 holds (+inf
    above). Both are RDP bounds, so they add (Mironov 2017, Prop. 1). Lemma 1 rests on amplification
    by iteration, which needs every holder's update to be non-expansive: `WalkSgd` makes it so
    (per-example clipping to L, rows bounded by sqrt(8/η); proof in its docstring)."""
    s = sgd_ratio(params)
    c = int(params.get("colluders", 1))
    ne = n / c
    amax = sgd_alpha_max(s)
    a_iter = 4.0 * (n_u + 1) * math.log(ne) / ((ne - 1.0) * s * s)
    if params["regime"] == "edge-cap":
        spotted = float(min(c * int(params["edge_cap"]), math.ceil(n_u)))  # c colluders: c·B
        label = f"edge-cap(B={params['edge_cap']})"
    else:
        # Lemma 2's count bound N_s (exact binomial quantile), its δ̃ is added by the caller
        spotted = spotted_loss(
            n_u, n, 1.0, params["delta_hat"], params["delta_prime"], True, colluders=c
        ).n_spotted
        label = "lemma2"
    a_spot = spotted * 2.0 / (s * s)
    values = tuple((a_iter + a_spot) * a if a <= amax else math.inf for a in DEFAULT_ORDERS)
    return DEFAULT_ORDERS, values, label


def sgd_network_loss(params: Mapping[str, Any], n: int, n_u: float) -> PrivacyLoss:
    orders, values, label = sgd_network_rdp(params, n, n_u)
    delta = float(params["delta"])
    extra = float(params["delta_hat"]) if label == "lemma2" else 0.0
    eps = _linear_rdp_to_dp(values[0] / orders[0], sgd_alpha_max(sgd_ratio(params)), delta)
    visible = ", counter-visible (A3)" if params.get("stop") == "counter" else ""
    return PrivacyLoss(
        eps,
        min(1.0, delta + extra),
        f"lemma1-rdp+{label}, counts=ledger{visible}",
        None if extra else (orders, values),
    )


def _linear_rdp_to_dp(slope: float, alpha_max: float, delta: float) -> float:
    """ε of an (α, slope·α)-RDP guarantee valid for 1 < α ≤ alpha_max, at δ: the conversion of
    `rdp_to_dp` (Balle et al. 2020) minimised over a fine grid of α up to alpha_max itself (a
    coarse grid of orders would make the result jump as α_max moves, and calibration by
    bisection needs it monotone in σ)."""
    hi = max(alpha_max, 1.0 + 1e-6)
    alphas = np.concatenate([1.0 + np.geomspace(1e-3, hi - 1.0, 4000), [hi]])
    alphas = alphas[(alphas > 1.0) & (alphas <= hi)]
    rdp = slope * alphas
    eps = rdp + np.log1p(-1.0 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1.0)
    eps = np.where(delta**2 + np.expm1(-rdp) > 0.0, 0.0, eps)
    return float(max(0.0, eps.min()))


#: the method of walk-sgd's enforced loss: the local-DP level, RDP composition of the node's
#: discrete Gaussian releases (CKS Theorem 4, converted by CKS Proposition 12; module docstring)
SGD_GUARANTEE = "ldp-gaussian-rdp"
#: the label of the Lemma-1 figure shown beside it (continuous-noise analysis)
LEMMA1 = f"Cyffers & Bellet Theorem 4 / Lemma 1 ({CONTINUOUS}; not a guarantee)"


def _sgd_ldp(p: Mapping[str, Any], count: int) -> PrivacyLoss:
    """The proven loss of `count` walk-sgd contributions towards any observer: each is one discrete
    Gaussian release of a gradient of sensitivity 2L, with noise multiplier z = σ/Δ' (Δ' ≥ 2L the
    sensitivity charged on the grid), ρ-zCDP with ρ = 1/(2z²) (CKS Theorem 4); composed in RDP
    (adaptively: later gradients are taken at iterates that depend on earlier releases) and
    converted at δ by CKS Proposition 12 (`rdp_to_dp`)."""
    z = sgd_ratio(p) / 2.0
    curve = gaussian_rdp(z, DEFAULT_ORDERS, count)
    eps, _ = rdp_to_dp(DEFAULT_ORDERS, curve, float(p["delta"])) if count else (0.0, 0.0)
    return PrivacyLoss(
        eps,
        float(p["delta"]) if count else 0.0,
        SGD_GUARANTEE,
        (DEFAULT_ORDERS, tuple(curve.tolist())),
    )


def sgd_walk_loss(params: Mapping[str, Any], n: int, n_u: float) -> PrivacyLoss:
    """walk-sgd's Lemma-1 network figure (a continuous-noise analysis, module docstring: shown as a
    labelled baseline, never enforced); the local-DP-SGD baseline (dp=local) claims none."""
    if params.get("dp", "network") == "local":
        return PrivacyLoss(math.inf, 0.0, "none (local DP-SGD)")
    return sgd_network_loss(params, n, n_u)


def _sgd_proven_network(params: Mapping[str, Any], n: int, n_u: float) -> PrivacyLoss | None:
    """No network bound of walk-sgd is proven for discrete noise (module docstring): `_best`
    takes the local-DP level."""
    return None


def _histogram_ldp(p: Mapping[str, Any], count: int) -> PrivacyLoss:
    return _ldp(float(p["epsilon0"]), 0.0, count, float(p["delta_prime"]), None)


@dataclass(frozen=True)
class Bounds:
    """One walk algorithm's bounds, functions of (params, n, N_u): the PROVEN network bound (or
    None where none is proven for the noise sampled) and the local-DP bound of N_u contributions.
    The loss towards every peer is the better of the two (`_best`)."""

    network: Callable[[Mapping[str, Any], int, float], PrivacyLoss | None]
    local: Callable[[Mapping[str, Any], int], PrivacyLoss]

    def loss(self, params: Mapping[str, Any], n: int, count: int) -> PrivacyLoss:
        """The loss towards any peer of `count` contributions among `n` live participants."""
        local = self.local(params, count)
        if count == 0:
            return PrivacyLoss(0.0, 0.0, "no-contribution", local.rdp)
        return _best(self.network(params, n, count), local)

    def prospective(self, params: Mapping[str, Any], n: int) -> PrivacyLoss:
        """The loss if the node makes its maximum number of contributions (`prospective_count`):
        the budget check and the calibration."""
        return self.loss(params, n, prospective_count(params, n))


#: walk-sum: Theorem 3 (+ App. G, the release) or the local-DP composition of the Gaussians
SUM = Bounds(sum_network_loss, _sum_ldp)
#: walk-histogram: Theorem 6 (+ App. G, the release) or the local-DP composition of the responses
HISTOGRAM = Bounds(histogram_network_loss, _histogram_ldp)
#: walk-sgd: the local-DP level of the discrete Gaussian releases (no network bound proven)
SGD = Bounds(_sgd_proven_network, _sgd_ldp)


# -- calibration ------------------------------------------------------------------------------------
def _bisect_largest(ok: Callable[[float], bool], lo: float, hi: float, iters: int = 80) -> float:
    """Largest x in [lo, hi] with ok(x), for ok monotone (true below a threshold)."""
    if ok(hi):
        return hi
    if not ok(lo):
        raise ValueError(
            "no noise level reaches the target epsilon (lower the target's demands: "
            "more participants, fewer steps, a smaller cap, or a larger epsilon)"
        )
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def calibrate_sum(params: dict[str, Any], n: int) -> dict[str, Any]:
    """Fill walk-sum's noise parameters so that the loss a node's report will show towards every
    peer (the better of the PROVEN network bound and the local-DP bound, `SUM`) for a node making
    `prospective_count` contributions is at most params["epsilon"]: ε0 and
    σ = `discrete_gaussian_sigma(ε0, δ, 2·clip)` on the grid."""
    target = float(params["epsilon"])
    sens = 2.0 * float(params["clip"])

    def with_e0(e0: float) -> dict[str, Any]:
        # σ of ε0 for the sensitivity charged on the noise grid (discrete_gaussian)
        return {
            **params,
            "epsilon0": e0,
            "sensitivity": sens,
            "sigma": calibrate_on_grid(
                lambda s: discrete_gaussian_sigma(e0, params["delta"], s),
                sens,
                int(params.get("dim", 1)),
            ),
        }

    # ε0 ≥ 1e-6: far smaller ones would need σ beyond the grid's reach (discrete_gaussian)
    return with_e0(
        _bisect_largest(
            lambda e0: SUM.prospective(with_e0(e0), n).epsilon <= target, 1e-6, 1 - 1e-9
        )
    )


def calibrate_histogram(params: dict[str, Any], n: int) -> dict[str, Any]:
    """walk-histogram's calibration (as `calibrate_sum`, with `HISTOGRAM`): ε0 and
    γ = L/(e^ε0 + L − 1)."""
    target = float(params["epsilon"])
    out = dict(params)
    e0 = _bisect_largest(
        lambda e: HISTOGRAM.prospective({**params, "epsilon0": e}, n).epsilon <= target, 1e-9, 5.0
    )
    out["epsilon0"] = e0
    out["gamma"] = rr_gamma(int(params["bins"]), e0)
    return out


def calibrate_sgd(params: dict[str, Any], n: int) -> dict[str, Any]:
    """walk-sgd's calibration (as `calibrate_sum`, with `SGD`): σ = (σ/L)·L for the enforced bound,
    the local-DP level of the cap's discrete Gaussian releases (module docstring; Lemma 1 is not
    proven for them)."""
    target = float(params["epsilon"])
    out = dict(params)
    lip = float(params["lipschitz"])
    # monotone in 1/s = L/σ
    inv = _bisect_largest(
        lambda i: SGD.prospective({**params, "sigma": lip / i}, n).epsilon <= target, 1e-6, 10.0
    )
    out["sigma"] = lip / inv
    return out
