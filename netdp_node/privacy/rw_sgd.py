"""Network DP of random-walk DP-SGD on any graph: pure functions of the public graph, the walk
parameters and a node's contribution count.

Cyffers, Bellet & Upadhyay, "Differentially Private Decentralized Learning with Random Walks",
ICML 2024. `paper_epsilon` is the paper's accountant (Lemma 2 composed over the contributions,
known-sender form of App. B.1); it is NOT a guarantee in general (docs/errata.md), so netdp shows
it labelled, never alone. A node reports min(`sound_epsilon`, `ldp_epsilon`): netdp's certified
per-trajectory accountant (Monte Carlo over data-independent walks with Hoeffding's bound;
docs/accountants.md) and the always-valid local-DP bound. Also: the exact communicability
`S_uv(T) = Σ_{t≤T} (W^t)_uv/t` (the paper's §6), closed forms (ring, Theorem 5 corrected;
hypercube; star) and the paper's mean-loss calibration (§7).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from math import comb
from typing import Any, Literal

import numpy as np

from netdp_node.privacy.composition import DEFAULT_ORDERS, gaussian_rdp, rdp_to_dp, smallest_scale

WeightRule = Literal["coded", "paper"]


def weight_rule(value: object) -> WeightRule:
    """A job's `weights` parameter as a WeightRule (ValueError for anything else)."""
    if value == "coded":
        return "coded"
    if value == "paper":
        return "paper"
    raise ValueError(f"rule must be 'coded' or 'paper', got {value!r}")


def transition_matrix(
    n: int, edges: Iterable[tuple[int, int]], rule: WeightRule = "coded"
) -> np.ndarray:
    """Symmetric doubly-stochastic W on the undirected graph ({0..n−1}, edges): off-diagonal
    1/(max(d_u, d_v) + 1) ("coded", always lazy and aperiodic) or 1/max(d_u, d_v) ("paper"; periodic
    on even rings and hypercubes), diagonal 1 − Σ. Self-loops in `edges` are ignored."""
    adj = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        if a != b:
            adj[a, b] = adj[b, a] = True
    deg = adj.sum(axis=1)
    if np.any(deg == 0):
        raise ValueError("every node needs at least one neighbour")
    bump = 1 if rule == "coded" else 0
    if rule not in ("coded", "paper"):
        raise ValueError("rule must be 'coded' or 'paper'")
    mx = np.maximum.outer(deg, deg) + bump
    W = np.where(adj, 1.0 / mx, 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    if np.any(np.diag(W) < -1e-12):
        raise ValueError("negative self-weight: use the 'coded' rule")
    return W


def communicability(W: np.ndarray, u: int, T: int) -> np.ndarray:
    """S_u·(T) = Σ_{t=1..T} (W^t)_{u,·}/t for every v (row iteration).
    Example: ring n = 16, W = (I + A)/3, T = 1600, u = 0: S_{0,8} = 0.255255, S_{0,1} = 1.082558;
    complete J/16, T = 1000: H_T/16 = 0.467842 for every pair."""
    if T < 1:
        raise ValueError("T must be >= 1")
    Wt = W.T  # dense or scipy.sparse: r_v = (W^t)_{uv}
    r = np.zeros(W.shape[0])
    r[u] = 1.0
    S = np.zeros_like(r)
    for t in range(1, T + 1):
        r = Wt @ r
        S += r / t
    return S


def communicability_interval(
    W: Any, u: int, T: int, t0: int, lam_star: float
) -> tuple[np.ndarray, np.ndarray]:
    """What node u computes locally in O(t0·|E|): the row iteration up to t0, then the
    stationary part (H_T − H_t0)/n and a certified tail ±λ*^{t0+1}/((t0+1)(1 − λ*)), λ* the
    largest |λ_i|, i ≥ 2, of the public symmetric doubly-stochastic W (Cauchy–Schwarz). Returns
    (lower, upper) bounds on S_u·(T). Examples: ring16, T = 1600, t0 = 200: S_{0,8} in
    [0.25525291, 0.25525848]."""
    if not 0 <= lam_star < 1 or not 1 <= t0 <= T:
        raise ValueError("need 0 <= λ* < 1 and 1 <= t0 <= T")
    n = W.shape[0]
    mid = communicability(W, u, t0) + (harmonic(T) - harmonic(t0)) / n
    tail = lam_star ** (t0 + 1) / ((t0 + 1) * (1 - lam_star)) if t0 < T else 0.0
    return mid - tail, mid + tail


def known_sender(S_u: np.ndarray, u: int, neighbours: Sequence[Sequence[int]]) -> np.ndarray:
    """App. B.1: an observer v that knows who sent it the token learns at least what
    its most exposed neighbour w would: S̃_uv = max_{w∈N(v)} S_uw, with S_uu := 1/2 (so the
    neighbours of u get the LDP level). `neighbours[v]` lists v's neighbours (self excluded)."""
    S = S_u.copy()
    S[u] = 0.5
    return np.array([max((S[w] for w in neighbours[v]), default=0.0) for v in range(len(S))])


def alpha_max(sigma: float, cap: Literal["paper", "c1", "none"] = "paper") -> float:
    """The largest Rényi order Lemma 1 allows: σ² ≥ 2α(α − 1) ("paper":
    (1 + √(1 + 2σ²))/2), or c ≤ 1 ("c1": (1 + √(1 + 8σ²))/2), or no cap."""
    if cap == "paper":
        return (1.0 + math.sqrt(1.0 + 2.0 * sigma * sigma)) / 2.0
    if cap == "c1":
        return (1.0 + math.sqrt(1.0 + 8.0 * sigma * sigma)) / 2.0
    return math.inf


def linear_rdp_to_dp(rho: float, delta: float, amax: float = math.inf) -> float:
    """min over 1 < α ≤ amax of αρ + ln(1/δ)/(α − 1) (the paper's conversion): the
    unconstrained optimum α* = 1 + √(ln(1/δ)/ρ) gives ρ + 2√(ρ ln(1/δ)); past the cap, α = amax.
    Examples: ρ = 0.01, σ = 10 → 0.753384 unconstrained, 2.172729 (paper cap), 1.158563 (c ≤ 1)."""
    if rho <= 0:
        return 0.0
    L = math.log(1.0 / delta)
    a = 1.0 + math.sqrt(L / rho)
    if a > amax:
        a = amax
    return a * rho + L / (a - 1.0)


def paper_epsilon(
    S: np.ndarray,
    n_u: float,
    sigma: float,
    delta: float,
    *,
    cap: Literal["paper", "c1", "none"] = "paper",
) -> np.ndarray:
    """The paper's per-pair (ε, δ)-values: ρ_v = N_u·min(S_v, 1/2)/σ² (RDP ε = αρ), converted with
    the α cap. NOT a guarantee in general (module docstring)."""
    amax = alpha_max(sigma, cap)
    rho = n_u * np.minimum(S, 0.5) / (sigma * sigma)
    return np.array([linear_rdp_to_dp(float(r), delta, amax) for r in rho])


def ldp_epsilon(n_u: int, sigma: float, delta: float) -> float:
    """The always-valid bound: n_u Gaussian mechanisms with noise multiplier σ (noise σΔ for
    sensitivity Δ) composed in RDP, converted at δ."""
    if n_u <= 0:
        return 0.0
    curve = gaussian_rdp(sigma, DEFAULT_ORDERS, int(n_u))
    return rdp_to_dp(DEFAULT_ORDERS, curve, delta)[0]


def ldp_noise_multiplier(n_u: int, epsilon: float, delta: float) -> float:
    """The smallest noise multiplier σ with which n_u Gaussian mechanisms are (ε, δ)-DP towards
    an observer who sees them all (`ldp_epsilon`): the local-DP calibration."""
    return smallest_scale(lambda z: ldp_epsilon(n_u, z, delta), epsilon, "noise multiplier")


def neighbour_lists(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    nb: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            nb[a].add(b)
            nb[b].add(a)
    return [sorted(x) for x in nb]


def transition_row(
    n: int,
    edges: Iterable[tuple[int, int]],
    u: int,
    rule: WeightRule = "coded",
    nb: Sequence[Sequence[int]] | None = None,
) -> tuple[list[int], list[float]]:
    """Row u of `transition_matrix` without building the matrix: (columns, probabilities), u's
    neighbours in increasing order then u itself (the self-loop). `nb`: `neighbour_lists(n,
    edges)` when the caller has it already (e.g. shared by the engines of a job)."""
    if nb is None:
        nb = neighbour_lists(n, edges)
    if not nb[u]:
        raise ValueError(f"node {u} has no neighbour")
    bump = 1 if rule == "coded" else 0
    probs = [1.0 / (max(len(nb[u]), len(nb[w])) + bump) for w in nb[u]]
    self_p = 1.0 - sum(probs)
    if self_p < -1e-12:
        raise ValueError("negative self-weight: use the 'coded' rule")
    return [*nb[u], u], [*probs, max(0.0, self_p)]


def transition_row_exact(
    n: int,
    edges: Iterable[tuple[int, int]],
    u: int,
    rule: WeightRule = "coded",
    nb: Sequence[Sequence[int]] | None = None,
) -> tuple[list[int], list[Fraction]]:
    """`transition_row` in exact rationals: 1/(max(d_u, d_w) + 1) ("coded") or 1/max(d_u, d_w)
    ("paper") to each neighbour w, then the self-loop 1 − Σ. A walk's holder draws its next hop
    by these (`exact_draws.weighted_index`): the accountant's W, not its float rounding."""
    if nb is None:
        nb = neighbour_lists(n, edges)
    if not nb[u]:
        raise ValueError(f"node {u} has no neighbour")
    if rule not in ("coded", "paper"):
        raise ValueError("rule must be 'coded' or 'paper'")
    bump = 1 if rule == "coded" else 0
    du = len(nb[u])
    probs = [Fraction(1, max(du, len(nb[w])) + bump) for w in nb[u]]
    return [*nb[u], u], [*probs, 1 - sum(probs, Fraction(0))]


def communicability_sparse(
    n: int, edges: Iterable[tuple[int, int]], u: int, T: int, rule: WeightRule = "coded"
) -> np.ndarray:
    """`communicability` with a sparse W (cost O(T·|E|)), for large graphs."""
    from scipy import sparse  # lazy: start-up cost

    es = list(edges)
    rows, cols, vals = [], [], []
    for v in range(n):
        c, p = transition_row(n, es, v, rule)
        rows += [v] * len(c)
        cols += c
        vals += p
    return communicability(sparse.csr_matrix((vals, (rows, cols)), shape=(n, n)), u, T)


# -- the sound per-trajectory accountant -----------------------------------------------
def live_law(W: np.ndarray, dead: Iterable[int]) -> np.ndarray:
    """W conditioned on liveness: every row renormalised over the columns not in
    `dead` (a row keeps its self-loop: a node never skips itself); dead rows are left as they are
    (the walk never reaches them)."""
    gone = sorted(set(dead))
    if not gone:
        return W
    W2 = np.array(W, dtype=np.float64, copy=True)
    W2[:, gone] = 0.0
    for g in gone:
        W2[g, g] = W[g, g]  # unreachable; keeps the row stochastic
    rows = W2.sum(axis=1, keepdims=True)
    if np.any(rows <= 0):
        raise ValueError("a live node has no live neighbour and no self-loop")
    return W2 / rows


def simulate_walks(
    W: np.ndarray,
    T: int,
    walks: int,
    rng: np.random.Generator,
    *,
    start: int | None = None,
    phases: Sequence[tuple[int, np.ndarray]] = (),
    chunk: int = 1000,
) -> Iterable[np.ndarray]:
    """Trajectories of the data-independent walk: yields arrays of shape
    (T, r) (r ≤ chunk walks each, `walks` in all), entry [t, k] the holder at step t of walk k
    (it contributes at step t; step 0 is the start). `start`: the public start holder, or None for
    a π-distributed (uniform) start. `phases`: (step, W') pairs: from that step on the holder draws
    its next hop from W' instead (a custody re-route changes the law)."""
    n = W.shape[0]
    if W.shape != (n, n) or T < 1 or walks < 1:
        raise ValueError("W must be square, T >= 1 and walks >= 1")

    def cum(M: Any) -> tuple[np.ndarray, np.ndarray]:
        """Row r's CDF over its nonzero entries, shifted into [r, r + 1], and their columns."""
        from scipy import sparse  # lazy: start-up cost

        C = sparse.csr_matrix(M)
        C.eliminate_zeros()
        if np.any(np.diff(C.indptr) == 0):
            raise ValueError("every row of W needs a positive entry")
        rows = np.repeat(np.arange(n), np.diff(C.indptr))
        c = np.cumsum(C.data)
        start = np.concatenate([[0.0], c])[C.indptr[:-1]]
        tot = c[C.indptr[1:] - 1] - start
        flat = (c - start[rows]) / tot[rows] + rows
        flat[C.indptr[1:] - 1] = np.arange(n) + 1.0  # exact row ends
        return flat, C.indices.astype(np.int32)

    laws = sorted([(0, cum(W))] + [(int(s), cum(M)) for s, M in phases], key=lambda x: x[0])
    done = 0
    while done < walks:
        r = min(chunk, walks - done)
        path = np.empty((T, r), dtype=np.int32)
        path[0] = rng.integers(n, size=r) if start is None else start
        li = 0
        for t in range(1, T):
            while li + 1 < len(laws) and laws[li + 1][0] <= t:
                li += 1
            flat, cols = laws[li][1]
            # the hop from step t − 1 to step t: position of cur + U in the shifted CDFs
            # (U ≤ 1 − 1e−9: r + U must stay below r + 1 after rounding)
            u01 = np.minimum(rng.random(r), 1.0 - 1e-9)
            path[t] = cols[np.searchsorted(flat, path[t - 1] + u01, side="right")]
        done += r
        yield path


def excursion_q(contrib: np.ndarray, obs: np.ndarray) -> float:
    """Σ_j Σ_k a_k² (docs/accountants.md) for one trajectory (the per-trajectory RDP is D(τ) =
    α/(2σ²)·q): `contrib` the steps at which u contributes (sorted), `obs` the steps at which the
    observer sees the token (sorted; its visits, plus T if the final model is published). Excursion
    j is the steps strictly between two observations (r_0 := −1); its shift profile is u's
    contributions in it; a = increments of the greatest convex minorant of (k, S_k) pinned at (0, 0)
    and (m_j, S_{m_j}); a contribution after the last observation is never seen.
    Examples: one contribution i draws before the observation gives 1/i; K consecutive right before it
    give K; contributions at steps 1 and 3 of 4 give 1."""
    if len(contrib) == 0 or len(obs) == 0:
        return 0.0
    which = np.searchsorted(obs, contrib, side="right")  # index of the observation that ends it
    q = 0.0
    j0 = 0
    K = len(contrib)
    while j0 < K:
        j = int(which[j0])
        j1 = j0
        while j1 < K and which[j1] == j:
            j1 += 1
        if j >= len(obs):
            break  # after the observer's last look
        start = int(obs[j - 1]) if j > 0 else -1
        end = int(obs[j])
        m = end - start - 1
        if j1 - j0 == 1:
            q += 1.0 / (end - int(contrib[j0]))
        else:
            # lower corners of the staircase: (p_i − 1, i − 1) for p_i the position in 1..m
            xs = [0.0] + [float(c - start - 1) for c in contrib[j0:j1]] + [float(m)]
            ys = [0.0] + [float(i) for i in range(j1 - j0)] + [float(j1 - j0)]
            hull: list[tuple[float, float]] = []
            for p in zip(xs, ys):
                while len(hull) >= 2:
                    (x1, y1), (x2, y2) = hull[-2], hull[-1]
                    if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:
                        hull.pop()  # hull[-1] lies on or above the chord: not a vertex
                    else:
                        break
                hull.append(p)
            q += sum(
                (y2 - y1) ** 2 / (x2 - x1) for (x1, y1), (x2, y2) in zip(hull, hull[1:]) if x2 > x1
            )
        j0 = j1
    return q


def sound_q(
    W: np.ndarray,
    u: int,
    observers: Sequence[int],
    T: int,
    cap: int,
    walks: int,
    rng: np.random.Generator,
    *,
    start: int | None = None,
    release: bool = True,
    phases: Sequence[tuple[int, np.ndarray]] = (),
    extra_obs: Mapping[Any, Sequence[int]] | None = None,
    burn_in: int = 0,
) -> dict[Any, np.ndarray]:
    """q(τ) of `excursion_q` for `walks` simulated trajectories and each observer v:
    u contributes at its first `cap` visits from step `burn_in` on (0: every visit; Remark 5), v
    observes at its visits, at step T if the final model is published (`release` item
    4) and at `extra_obs[v]` (e.g. a crashed receiver that saw a re-sent copy).
    T counts every step, burn-in included. An observer may be a tuple of nodes: a colluding set
    F pooling its views, i.e. F contracted into one super-node whose visits are its members'
    ("collusion as a modification of the graph")."""
    out = {v: np.empty(walks) for v in observers}
    k = 0
    for path in simulate_walks(W, T, walks, rng, start=start, phases=phases):
        pu_w, pu_t = np.nonzero(path.T == u)
        if burn_in:
            keep = pu_t >= burn_in
            pu_w, pu_t = pu_w[keep], pu_t[keep]
        for v in observers:
            members = list(v) if isinstance(v, tuple) else [v]
            if u in members:
                raise ValueError("the observer must differ from the contributor")
            pv_w, pv_t = np.nonzero(np.isin(path.T, members))
            extra = sorted(int(x) for x in (extra_obs or {}).get(v, ()))
            su = np.searchsorted(pu_w, np.arange(path.shape[1] + 1))
            sv = np.searchsorted(pv_w, np.arange(path.shape[1] + 1))
            for w in range(path.shape[1]):
                c = pu_t[su[w] : su[w + 1]]
                if cap:
                    c = c[:cap]
                o = pv_t[sv[w] : sv[w + 1]]
                if extra or release:
                    o = np.unique(np.concatenate([o, extra, [T] if release else []])).astype(int)
                out[v][k + w] = excursion_q(c, o)
        k += path.shape[1]
    return out


def sound_rdp(
    q: np.ndarray, sigma: float, cap: int, beta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> np.ndarray:
    """The certified per-trajectory view bound (docs/accountants.md) as an RDP curve:
    ε(α) ≤ ln UCB_β[E_τ exp((α − 1) D(τ))]/(α − 1), D(τ) = α q(τ)/(2σ²), with Hoeffding's upper
    confidence bound on the mean of exp((α − 1)D) ∈ [1, exp((α − 1)α·cap/(2σ²))] (q ≤ cap: every
    slope is ≤ 1), β split evenly over the orders (union bound); never above the local-DP level
    α·cap/(2σ²). Valid with probability ≥ 1 − β over the simulation, for any σ (no α cap: no Lemma
    1 here) and for anonymous and known senders alike (the trajectory is revealed)."""
    if cap < 1 or not 0 < beta < 1 or len(q) == 0:
        raise ValueError("cap >= 1, 0 < beta < 1 and at least one trajectory are required")
    a = np.asarray(orders, dtype=np.float64)
    R = len(q)
    h = math.sqrt(math.log(len(a) / beta) / (2.0 * R))
    x = (a - 1.0) * a / (2.0 * sigma * sigma)  # exp(x·q) = exp((α − 1) D)
    log_mean = np.array([np.logaddexp.reduce(xi * q) - math.log(R) for xi in x])
    top = x * cap
    log_range = np.where(top > 30, top, np.log(np.expm1(np.clip(top, 1e-300, 30))))
    log_ucb = np.logaddexp(log_mean, log_range + math.log(h))
    return np.minimum(log_ucb / (a - 1.0), a * cap / (2.0 * sigma * sigma))


def sound_epsilon(
    q: np.ndarray, sigma: float, cap: int, delta: float, beta_share: float = 0.1
) -> tuple[float, float, np.ndarray]:
    """(ε, δ) from `sound_rdp`: δ splits into β = beta_share·δ for the Monte Carlo confidence and
    the rest for the RDP conversion. Returns (ε, δ, the RDP curve)."""
    beta = beta_share * delta
    curve = sound_rdp(q, sigma, cap, beta)
    return rdp_to_dp(DEFAULT_ORDERS, curve, delta - beta)[0], delta, curve


# -- closed forms, the spectral pairwise matrix, mean loss ----------------
def harmonic(T: int) -> float:
    return float(np.sum(1.0 / np.arange(1, T + 1)))


def power_sums(lams: np.ndarray, T: int) -> np.ndarray:
    """s_T(λ) = Σ_{t=1..T} λ^t/t for every λ (s_T(1) = H_T), by direct summation (exact;
    stops once every |λ|^t < 1e−20 below the unit eigenvalues, which then get H_T − H_t more)."""
    lam = np.asarray(lams, dtype=np.float64)
    unit = np.abs(lam - 1.0) < 1e-12
    s = np.zeros_like(lam)
    p = np.ones_like(lam)
    for t in range(1, T + 1):
        p = p * lam
        s += p / t
        if t % 64 == 0 and (not np.any(~unit) or np.max(np.abs(p[~unit])) < 1e-20):
            s[unit] += harmonic(T) - harmonic(t)
            break
    return s


def pairwise_matrix(W: np.ndarray, T: int) -> np.ndarray:
    """The whole matrix S(T) = Φ diag(s_T(λ)) Φᵀ from one eigendecomposition of the symmetric W:
    S_uv = Σ_t (W^t)_uv/t for every pair at once."""
    if not np.allclose(W, W.T, atol=1e-12):
        raise ValueError(
            "the spectral form needs a symmetric W (Assumption 2); use "
            "communicability (Lemma 2) instead"
        )
    lam, phi = np.linalg.eigh(W)
    return (phi * power_sums(lam, T)) @ phi.T


def ring_closed_form(n: int, d: int, T: int | None, kappa: float = 1.0 / 3.0) -> float:
    """The corrected ring formula (docs/errata.md; the paper's Theorem 5 has the wrong index, a
    spurious factor 2 and cos(πak/n)): lazy ring W = κI + (1 − κ)(P + Pᵀ)/2,
    λ_k = κ + (1 − κ)cos(2πk/n), S_uv(T) = (1/n)[H_T + Σ_{k=1..n−1} cos(2πkd/n) s_T(λ_k)] for
    ring distance d; with T=None the infinite-horizon
    L_uv = (1/n) Σ_k cos(2πkd/n)·(−ln((1 − κ)(1 − cos(2πk/n)))) (the code's logW).
    Examples: n = 16, κ = 1/3, T = 1000: d = 1 → 1.053194, L_01 = 0.585352."""
    if not 0 <= kappa < 1 or n < 3:
        raise ValueError("kappa in [0, 1) and n >= 3 are required")
    k = np.arange(1, n)
    w = np.cos(2 * np.pi * k * d / n)
    if T is None:
        return float(np.sum(w * -np.log((1 - kappa) * (1 - np.cos(2 * np.pi * k / n)))) / n)
    lam = kappa + (1 - kappa) * np.cos(2 * np.pi * k / n)
    return float((harmonic(T) + np.sum(w * power_sums(lam, T))) / n)


def hypercube_closed_form(dim: int, j: int, T: int) -> float:
    """Coded Hamilton weights on Q_dim, W = (I + A)/(dim + 1) ("Hypercube"):
    S_uv(T) = (1/n) Σ_k K_k(j) s_T(λ_k), λ_k = (dim + 1 − 2k)/(dim + 1), K_k the Krawtchouk
    polynomial, j the Hamming distance. Examples: dim = 4, T = 1000, j = 0..4: 0.70563783, 0.63454369,
    0.41057376, 0.35989062, 0.33865324."""
    lam = np.array([(dim + 1 - 2 * k) / (dim + 1) for k in range(dim + 1)])
    K = np.array(
        [
            sum((-1) ** m * comb(j, m) * comb(dim - j, k - m) for m in range(k + 1))
            for k in range(dim + 1)
        ],
        dtype=np.float64,
    )
    return float(np.sum(K * power_sums(lam, T)) / 2**dim)


def star_communicability(n: int, T: int, rule: WeightRule = "coded") -> dict[str, float]:
    """The star (centre 0) computed with Lemma 2 on a genuine walk (the paper's Theorem 4
    sums powers of the sub-stochastic A/(n − 1) and bounds nothing Alg. 1 runs; not implemented).
    Returns S for leaf→leaf, centre→leaf and leaf→centre. Example: n = 16, T = 1000, paper weights:
    0.287036 / 0.471876 / 0.471876."""
    star = [(0, i) for i in range(1, n)]
    W = transition_matrix(n, star, rule)
    S_leaf = communicability(W, 1, T)
    return {
        "leaf->leaf": float(S_leaf[2]),
        "centre->leaf": float(communicability(W, 0, T)[1]),
        "leaf->centre": float(S_leaf[0]),
    }


def first_hit(W: np.ndarray, u: int, targets: Sequence[int], T: int) -> float:
    """S^first_uF(T) = Σ_{i≤T} P_u(τ_F = i)/i, the first-hit form of eq. (12) by the taboo iteration
    r ← rW; S += r_F/t; r_F ← 0, for one observer (F = {v}) or a
    colluding set F (eq. (17)). Valid for a SINGLE contribution only."""
    F = list(targets)
    r = np.zeros(W.shape[0])
    r[u] = 1.0
    S = 0.0
    for t in range(1, T + 1):
        r = r @ W
        S += float(r[F].sum()) / t
        r[F] = 0.0
    return S


def mean_pair_s(W: np.ndarray, T: int) -> float:
    """mean_{u≠v} S_uv(T) = (n H_T − Σ_i s_T(λ_i))/(n(n − 1)) for symmetric doubly-stochastic W;
    ≤ H_T/(n − 1). Examples: ring16, T = 1600: 0.45164708; complete J/2048, T = 20480:
    0.00512912."""
    n = W.shape[0]
    lam = np.linalg.eigvalsh(W)
    return float((n * harmonic(T) - np.sum(power_sums(lam, T))) / (n * (n - 1)))


def sigma_for_mean_loss(
    mean_s: float,
    contributions: float,
    epsilon: float,
    delta: float,
    cap: Literal["paper", "c1", "none"] = "paper",
) -> float:
    """σ such that the (ε, δ) of the mean RDP, ρ = N·mean_S/σ² (ε_RDP = αρ), converted with the α
    cap of `alpha_max`, equals `epsilon` (the paper sets σ from the mean loss; netdp
    converts the mean RDP, as the authors' ba.py does). Example: complete J/2048, N = 10, δ = 1e-6,
    ε̄ = 1: 1.714 (no cap), 20.27 (paper cap), 10.19 (c ≤ 1). The paper's accountant: not a
    guarantee."""
    return smallest_scale(
        lambda s: linear_rdp_to_dp(contributions * mean_s / (s * s), delta, alpha_max(s, cap)),
        epsilon,
        "σ",
    )


def mixing_time(W: np.ndarray, iota: float = 0.25, t_max: int = 100_000) -> int:
    """τ_mix(ι) = min{t : max_v ½‖(W^t)_v· − 1/n‖₁ ≤ ι} (Def. 5, doubly stochastic
    W). Example: ring16 κ = 1/3 → 18, hypercube Q_4 (I + A)/5 → 3, J/16 → 1."""
    n = W.shape[0]
    P = np.eye(n)
    for t in range(1, t_max + 1):
        P = P @ W
        if 0.5 * np.abs(P - 1.0 / n).sum(axis=1).max() <= iota:
            return t
    raise ValueError(f"the walk does not mix to {iota} within {t_max} steps")


def contract(W: np.ndarray, F: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """Collusion as a modification of the graph: the colluding set F becomes one
    super-node f (the last index), entered from w with probability Σ_{v∈F} W_wv; f leaves like the
    stationary mix of its members (any rule: only the first hit of f matters). The first-hit time
    of f in the contracted chain equals that of F in W, so single-observer accountants that allow a
    non-symmetric chain (Lemma 2 / first-hit forms, `sound_q`) apply with v := f. Returns (W', the
    old indices of the kept nodes in order)."""
    n = W.shape[0]
    Fs = sorted(set(F))
    keep = [i for i in range(n) if i not in Fs]
    if not Fs or not keep:
        raise ValueError("F must be a non-empty proper subset of the nodes")
    out = np.zeros((len(keep) + 1, len(keep) + 1))
    out[:-1, :-1] = W[np.ix_(keep, keep)]
    out[:-1, -1] = W[np.ix_(keep, Fs)].sum(axis=1)
    out[-1, :-1] = W[np.ix_(Fs, keep)].mean(axis=0)
    out[-1, -1] = W[np.ix_(Fs, Fs)].sum() / len(Fs)
    return out, keep
