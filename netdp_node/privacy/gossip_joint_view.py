"""The exact pairwise network-DP loss of gossip: the joint view of an observer set.

The view of observers O is `Y = K_O (x + η)` (`gossip.knowledge_matrix`), a Gaussian vector, so
the Rényi divergence when `x_u` moves by Δ is exactly `ε_LDP · ||Π_{rowspace K_O} e_u||²`
(`joint_view`). This replaces the Muffliato paper's eq. (6) (Cyffers, Even, Bellet & Massoulié,
NeurIPS 2022), which is not a bound on a node's whole view (docs/errata.md). Proven for
CONTINUOUS Gaussian noise only: netdp's discrete Gaussian noise (`discrete_gaussian`) is not covered
(the node's accountant charges the local-DP level and shows this value beside it). Ranks and
membership are decided exactly (`exact_linalg`); the projector is computed in floating point with
a margin, or exactly for small graphs. Losses compose over jobs by adding RDP curves
(`composition.compose_losses`), without covering adaptivity between rounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from netdp_node.lazy import lazy_module
from netdp_node.privacy.checks import int_at_least
from netdp_node.privacy.exact_linalg import (
    PRIMES,
    ModEchelon,
    NullSpaceProjector,
    RationalProjector,
    rational_reconstruction,
    round_up,
)
from netdp_node.privacy.gossip import (
    FloatArith,
    FracArith,
    GossipSchedule,
    ModArith,
    is_fixed,
    message_rows,
    node_index,
    node_set,
    observer_requests,
    published_nodes,
    same_rational,
)

sp = lazy_module("scipy.sparse")  # lazy: start-up cost

#: Default tolerance of the joint-view accountant: a new direction of the row space (relative to
#: its block) counts as resolved when it exceeds `DEFAULT_RTOL` (1e-9 or below is
#: recommended).
DEFAULT_RTOL = 1e-10

#: Graphs up to this many nodes get the exact rational fallback when the floating-point rank is not
#: resolved (`joint_view(exact=None)`).
EXACT_MAX_NODES = 32

_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True, eq=False)
class JointView:
    """Result of `joint_view` for an observer set O.

    Attributes:
        observers: O (sorted node indices).
        leakage: for every u, `||Π_{rowspace K_O} e_u||²`, the exact Rényi divergence of O's view
            in units of ε_LDP (1.0 for u ∈ O), rounded UP by `margin` for non-members.
        full: boolean mask, True where `e_u ∈ rowspace(K_O)` (O can solve its view for
            `x_u + η_u`; leakage exactly 1), decided in exact modular arithmetic.
        rank: exact rank of K_O (modular).
        numeric_rank: dimension of the float basis of the row space.
        resolved: whether the exact rank is resolved in double precision (then `leakage` is the
            float value plus `margin`); if not, see `method`.
        method: "float" (resolved), "exact" (rational arithmetic), "nullspace" (fixed schedule,
            float part disagreeing, exact values from a null-space certificate; `joint_view`
            step 5) or "conservative" (unresolved and too large for rational arithmetic; see
            `joint_view` step 4).
        margin: the perturbation margin added to every non-member's float value.
        rows: number of rows of K_O (= |O| + messages received, + outputs if included).
        estimate: the plain floating-point projection `||Q e_u||²` (no margin; a lower estimate
            when the float basis misses directions), for diagnostics.
    """

    observers: tuple[int, ...]
    leakage: np.ndarray
    full: np.ndarray
    rank: int
    numeric_rank: int
    resolved: bool
    method: str
    margin: float
    rows: int
    estimate: np.ndarray = field(repr=False)
    _basis: Any = field(default=None, repr=False, compare=False)


def _krylov_echelon(
    schedule: GossipSchedule, obs: Sequence[int], published: Sequence[int], p: int
) -> ModEchelon | None:
    """rowspace(K_O) modulo p for a FIXED schedule, by an incremental block Krylov basis over F_p.

    The rows of K_O are `e_vᵀ` (v ∈ O), `e_wᵀ M_t` (w ∈ N(O)∖O, t < T) and the published outputs
    `e_wᵀ M_T`, with `M_t` a polynomial in W of degree t whose leading coefficient is
    `∏_{s<t} c_s`. When no `c_s` vanishes mod p the change of basis between `{e_wᵀ M_s : s ≤ t}` and
    `{e_wᵀ W^s : s ≤ t}` is triangular and invertible over F_p, so the message rows span the block
    Krylov space `S_{T−1}`, `S_t = span{e_wᵀ W^s : s ≤ t}`, exactly as K_O mod p does (returns None
    otherwise; the caller then reduces K_O itself). `S_{t+1} = S_0 + S_t W = S_t + (C_t W)` for any
    complement C_t of S_{t−1} in S_t, so W is applied only to the new basis rows of each step, and
    the loop stops once a step adds nothing (then `S_t W ⊆ S_t`). Raises ZeroDivisionError if p
    divides a weight's denominator (as `ModArith`).
    """
    arith = ModArith(schedule, p)
    if any(arith.coef(t) % p == 0 for t in range(schedule.T)):
        return None
    n = schedule.n
    obs_set = set(obs)
    nbrs = sorted(
        {b if a in obs_set else a for a, b in schedule.edges[0] if (a in obs_set) != (b in obs_set)}
    )
    ech = ModEchelon(n, p)
    if schedule.T >= 1 and nbrs:
        V = ech.add(arith.units(nbrs))
        for _t in range(1, schedule.T):
            if V.shape[0] == 0:
                break
            V = ech.add(arith.right_mul(V.astype(np.int64), 0))
    ech.add(arith.units(list(obs)))
    pub = [w for w in published if w not in obs_set]
    if pub:
        ech.add(message_rows(schedule, [(schedule.T, w) for w in pub], arith, accelerated=True))
    return ech


def _modular_rowspace(
    schedule: GossipSchedule,
    req: Sequence[tuple[int, int]],
    p: int,
    *,
    observers: Sequence[int] | None = None,
    published: Sequence[int] = (),
) -> ModEchelon | None:
    """rowspace(K) modulo p in RREF (`ModEchelon`), or None if p divides a weight's denominator.

    For a fixed schedule with `observers` given (K = K_O of `observer_requests(schedule,
    observers, published=published)`, i.e. `req`), the incremental Krylov basis
    (`_krylov_echelon`); otherwise the rows of K mod p (`message_rows`) reduced by blocks."""
    try:
        if observers is not None and is_fixed(schedule) and same_rational(schedule):
            ech = _krylov_echelon(schedule, observers, published, p)
            if ech is not None:
                return ech
        K = message_rows(schedule, req, ModArith(schedule, p), accelerated=True)
    except ZeroDivisionError:
        return None
    ech = ModEchelon(schedule.n, p)
    ech.add(K)
    return ech


def _rank_and_members(echelons: Sequence[ModEchelon | None], n: int) -> tuple[int, np.ndarray]:
    """Combine primes: the largest rank is kept, and a node counts as solvable if it is under a
    prime achieving that rank (see `_exact_rank_and_members`)."""
    best_rank = -1
    full = np.zeros(n, dtype=bool)
    for ech in echelons:
        if ech is None:
            continue
        r, mem = ech.rank, ech.members()
        if r > best_rank:
            best_rank, full = r, mem
        elif r == best_rank:
            full = full | mem
    if best_rank < 0:
        raise ValueError("the schedule's weights are not invertible modulo the fixed primes")
    return best_rank, full


def _exact_rank_and_members(
    schedule: GossipSchedule,
    req: Sequence[tuple[int, int]],
    primes: Sequence[int] = PRIMES,
    *,
    observers: Sequence[int] | None = None,
    published: Sequence[int] = (),
) -> tuple[int, np.ndarray]:
    """Exact rank of K and membership of every e_u (`e_u ∈ rowspace K`), modulo fixed primes.

    Over a prime field, `rank_p ≤ rank_Q`, with equality unless p divides every maximal non-zero
    minor (the entries are rationals whose denominators divide products of the Metropolis
    denominators 1 + max d ≤ n < p and of γ's power-of-two denominator; a prime dividing a custom
    weight's denominator is skipped). When `rank_p = rank_Q`, `e_u ∈ rowspace_Q K` implies
    `e_u ∈ rowspace_p K` (the rank of `[K; e_u]` cannot grow mod p), so no full leak is missed;
    the converse may fail only for a bad prime. The largest rank is kept, and a node counts as
    solvable if it is under a prime achieving that rank. `joint_view` uses the first prime and adds
    the second whenever the result disagrees with the floating-point computation (unless the
    null-space certificate of its step 5 proves the first prime's answer); a wrong answer then
    needs both primes to be bad for the same matrix. Failures are on the conservative side: a
    full leak where there is none, or a rank too small (the float part is then declared
    unresolved). Each prime is computed by `_modular_rowspace` (exact F_p elimination; the Krylov
    form for a fixed schedule when `observers` is given).
    """
    echs = [
        _modular_rowspace(schedule, req, p, observers=observers, published=published)
        for p in primes
    ]
    return _rank_and_members(echs, schedule.n)


#: Limits of `_lift_null_space` (beyond them `joint_view` stays "conservative").
_LIFT_MAX_DIM = 1024  # null-space dimension n − rank
_LIFT_MAX_NNZ = 50_000  # non-zeros of the null-space basis
_LIFT_MAX_WORK = 2_000_000  # Fraction operations: Σ_x Σ_{j ∈ supp x} |W[:, j]| (the products
#                              W x), and Σ over components of |C|²·|support(C)| (Gram solves)


def _lift_null_space(
    schedule: GossipSchedule, req: Sequence[tuple[int, int]], ech: ModEchelon
) -> NullSpaceProjector | None:
    """Exact null space of K over Q from its RREF modulo p, for a FIXED schedule; None if it
    cannot be proven (then nothing is claimed).

    Candidate: the RREF null-space basis mod p (x_j = 1 at its free column j, −R[i, j] at pivot
    column i, 0 elsewhere), each entry lifted to a small fraction (`rational_reconstruction`).
    Proof, in exact rational arithmetic, for the d = n − rank_p candidates X:
      (a) x_w = 0 for every w heading a row of K (`e_wᵀ M_t`, M_0 = I for the e_v rows);
      (b) W X ⊆ span_Q X (the coefficients are forced: x_k has 1 at free column k and 0 at the
          other free columns, so W x must equal `Σ_k (W x)_{free_k} x_k`, checked exactly).
    With one W in every round, every row of K is `e_wᵀ M_t(W)` with M_t a polynomial in W, so by
    (b) `M_t x ∈ span X` and by (a) `e_wᵀ M_t x = 0`: X ⊆ null_Q(K). X is independent (the unit
    pattern on the free columns), so `rank_Q K ≤ n − d = rank_p K ≤ rank_Q K`: the rank is exact,
    `null_Q(K) = span X` and `rowspace(K) = X^⊥` (over R too: same rational matrix). Hence
    `||Π e_u||² = 1 − ||Π_X e_u||²`, computed exactly by `NullSpaceProjector`.
    """
    if not (is_fixed(schedule) and same_rational(schedule)):
        return None
    n, p = schedule.n, ech.p
    piv = np.asarray(ech.pivots, dtype=np.int64)
    free = ech.free_columns
    if len(free) > _LIFT_MAX_DIM:
        return None
    heads = {w for _, w in req}
    if heads.intersection(free.tolist()):
        return None
    cols = ech.free_part()  # basis[:, free]
    if np.count_nonzero(cols) + len(free) > _LIFT_MAX_NNZ:
        return None
    bound = math.isqrt((p - 1) // 2)
    vecs: list[dict[int, Fraction]] = []
    for k, j in enumerate(free.tolist()):
        x = {j: Fraction(1)}
        for i in np.flatnonzero(cols[:, k]).tolist():
            f = rational_reconstruction(-int(cols[i, k]), p, bound)
            c = int(piv[i])
            if f is None or c in heads:
                return None
            x[c] = f
        vecs.append(x)
    by_col: dict[int, list[tuple[int, Fraction]]] = {}
    for (i, j), w in schedule.rational_matrix(0).items():
        if w != 0:
            by_col.setdefault(j, []).append((i, Fraction(w)))
    if sum(len(by_col.get(j, ())) for x in vecs for j in x) > _LIFT_MAX_WORK:
        return None  # the exact products W x would be too long
    free_pos = {int(j): k for k, j in enumerate(free.tolist())}
    for x in vecs:
        y: dict[int, Fraction] = {}
        for j, xj in x.items():
            for i, w in by_col.get(j, ()):
                y[i] = y.get(i, Fraction(0)) + w * xj
        z: dict[int, Fraction] = {}
        for i, yi in y.items():
            pos = free_pos.get(i)
            if pos is not None and yi != 0:
                for c, v in vecs[pos].items():
                    z[c] = z.get(c, Fraction(0)) + yi * v
        if any(y.get(c, 0) != z.get(c, 0) for c in set(y) | set(z)):
            return None
    try:
        return NullSpaceProjector(n, vecs, max_work=_LIFT_MAX_WORK)
    except ValueError:
        return None


@dataclass
class _FloatBasis:
    Q: np.ndarray  # (r, n) orthonormal rows spanning the computed row space
    margin: float


def _stable_rowspace(
    schedule: GossipSchedule, requests: Sequence[tuple[int, int]], rtol: float
) -> tuple[np.ndarray, float, bool]:
    """Orthonormal basis of rowspace(K) for the requested message rows, computed stably.

    Same backward propagation as `message_rows`, but the block of (a, b) pairs is replaced by an
    orthonormal basis of its row span (SVD) after every step. This is valid because the final row
    space depends only on the span of the pairs (`(a, b) ↦ a M_k + b M_{k−1}` is linear), and it
    avoids the monomial basis `e_wᵀ W^t`, whose rows all converge to `1ᵀ/n` (the source of the
    ill-conditioning): each step only loses what a single multiplication by W_t
    contracts. Directions below the float noise floor (`64·eps·sqrt(n)·s_max`) are dropped; any
    kept direction below `rtol·s_max` marks the result ambiguous.

    Returns:
        (Q, min_ratio, ambiguous): Q of shape (r, n) with orthonormal rows; the smallest kept
        singular value relative to its block's largest, over all steps; the ambiguity flag.
    """
    n = schedule.n
    if not requests:
        return np.zeros((0, n)), 1.0, False
    by_t: dict[int, list[int]] = {}
    for t, w in requests:
        by_t.setdefault(t, []).append(w)
    arith = FloatArith(schedule)
    noise = 64.0 * _EPS * math.sqrt(n)
    a = np.zeros((0, n))
    b: np.ndarray | None = None
    min_ratio, ambiguous = 1.0, False
    for k in range(max(by_t), -1, -1):
        new = by_t.get(k)
        if new:
            a = np.vstack([a, arith.units(sorted(set(new)))])
            if b is not None:
                b = np.vstack([b, np.zeros((len(set(new)), n))])
        if a.shape[0]:
            X = a if b is None else np.hstack([a, b])
            _, s, Vt = np.linalg.svd(X, full_matrices=False)
            keep = s > rtol * s[0]
            gray = (s > noise * s[0]) & ~keep
            ambiguous = ambiguous or bool(np.any(gray & (s > 1e-3 * rtol * s[0])))
            if np.any(keep):
                min_ratio = min(min_ratio, float(s[keep][-1] / s[0]))
            Vt = Vt[keep]
            a = Vt[:, :n]
            b = None if b is None else Vt[:, n:]
        if k == 0:
            break
        c = arith.coef(k - 1)
        new_a = arith.axpy(c, arith.right_mul(a, k - 1), b)
        b = None if c == 1.0 else (1.0 - c) * a
        a = new_a
    return a, min_ratio, ambiguous


def _krylov_rowspace(
    schedule: GossipSchedule, obs: Sequence[int], published: Sequence[int], rtol: float
) -> tuple[np.ndarray, float, bool]:
    """Orthonormal basis of rowspace(K_O) for a FIXED schedule, by block Lanczos/Arnoldi.

    With the same W and E in every round, the messages of a neighbour w span
    `span{e_wᵀ W^t : t < T}` (for accelerated runs too: `P_t` has degree t with leading coefficient
    `γ^{t−1} ≠ 0`), so rowspace(K_O) is the block Krylov space
    `K_T(Wᵀ, [e_w]_{w ∈ N(O)∖O})` plus `e_v` (v ∈ O) and the published outputs. The Krylov
    space is built by applying W only to the newest orthonormal block, with full
    re-orthogonalisation (twice); it never forms `W^t`, so it stays accurate where the monomial
    rows are numerically dependent (e.g. hypercubes and Erdős–Rényi graphs). New directions of norm
    ≤ rtol are deflated (dropping a direction that is exactly in the span is safe: its images stay
    in the span); a norm in (1e-3·rtol, rtol] marks the result ambiguous.
    """
    n = schedule.n
    W = schedule.matrices[0]
    WT = sp.csr_array(W.T)
    obs_set = set(obs)
    nbrs = sorted(
        {b if a in obs_set else a for a, b in schedule.edges[0] if (a in obs_set) != (b in obs_set)}
    )
    blocks: list[np.ndarray] = []
    state = {"min": 1.0, "ambiguous": False}

    def orthonormal_new(Z: np.ndarray) -> np.ndarray:
        if blocks:
            B = np.hstack(blocks)
            for _ in range(2):
                Z = Z - B @ (B.T @ Z)
        if Z.shape[1] == 0:
            return Z
        U, sv, _ = np.linalg.svd(Z, full_matrices=False)
        keep = sv > rtol
        if np.any(~keep & (sv > 1e-3 * rtol)):
            state["ambiguous"] = True
        if np.any(keep):
            state["min"] = min(state["min"], float(sv[keep][-1]))
        return U[:, keep]

    def units(nodes: Sequence[int]) -> np.ndarray:
        Z = np.zeros((n, len(nodes)))
        Z[list(nodes), np.arange(len(nodes))] = 1.0
        return Z

    if schedule.T >= 1 and nbrs:
        V = orthonormal_new(units(nbrs))
        blocks.append(V)
        for _t in range(1, schedule.T):
            if V.shape[1] == 0:
                break
            V = orthonormal_new(np.asarray(WT @ V))
            if V.shape[1]:
                blocks.append(V)
    extras = [units(obs)]
    pub = [w for w in published if w not in obs_set]
    if pub:
        out = message_rows(
            schedule, [(schedule.T, w) for w in pub], FloatArith(schedule), accelerated=True
        )
        extras.append(out.T)
    E = orthonormal_new(np.hstack(extras))
    if E.shape[1]:
        blocks.append(E)
    Q = np.hstack(blocks).T if blocks else np.zeros((0, n))
    return Q, state["min"], bool(state["ambiguous"])


def joint_view(
    schedule: GossipSchedule,
    observers: int | Iterable[int],
    *,
    published: Iterable[int] = (),
    rtol: float = DEFAULT_RTOL,
    exact: bool | None = None,
) -> JointView:
    """THE EXACT JOINT-VIEW ACCOUNTANT: what an observer set O learns about each u.

    `ε_{u→O} = ε_LDP · ||Π_{rowspace(K_O)} e_u||²` where K_O stacks `e_vᵀ` (v ∈ O) and the
    coefficient rows of every message O received (`knowledge_matrix`). Exact for Gaussian noise and
    linear views: fixing every input but `x_u`, O's view is `N(K x, σ² K Kᵀ)` and moving `x_u` by
    `δ_u` (|δ_u| ≤ Δ; L2 norm for vectors with i.i.d. noise per coordinate) gives
    `D_α = (α Δ²/(2σ²)) e_uᵀ Kᵀ (K Kᵀ)⁺ K e_u`. Single observer: O = {v}; colluders: O = V_c
    (Definition 6, the "merged node"); groups: `group_leakage`. For a time-varying, dropout or
    randomized run pass the realised schedule. Accelerated messages are used as they are (for a
    fixed W their row space equals the plain one).

    Numerics. In the monomial basis K is badly conditioned
    (rows converge to `1ᵀ/n`), and dropping a tiny singular value UNDER-states the leak (the value
    only grows as rtol shrinks, converging to the exact-arithmetic one). So:

    1. Exact part: the rank r of K and whether `e_u ∈ rowspace(K)` (O can solve its view for
       `x_u + η_u`: leak exactly 1) are computed in modular arithmetic (one prime, a second one
       when the float part disagrees and step 5 does not apply; see `_exact_rank_and_members`),
       not with a tolerance. The elimination over F_p is blocked (`ModEchelon`: RREF kept up to
       date with float64 BLAS products that are exact by construction, `matmul_mod`); on a fixed
       schedule the row space mod p is built as an incremental block Krylov basis
       (`_krylov_echelon`: W is applied only to the new basis rows of each step, and the loop
       stops when a step adds nothing), never forming the T·|N(O)| message rows.
    2. Float part: an orthonormal basis Q of the row space is built without ever forming the
       monomial rows `e_wᵀ W^t` (which all converge to `1ᵀ/n`): block Lanczos on a fixed schedule
       (`_krylov_rowspace`), a backward propagation re-orthonormalised after every round otherwise
       (`_stable_rowspace`; its errors grow with the contraction of each W_t, so long
       time-varying runs may end unresolved). Then `||Π e_u||² = ||Q e_u||²`.
    3. A perturbation margin `16·(T+2)·sqrt(mn)·eps / min_ratio` (backward-error estimate over the
       smallest relative singular value met, Wedin-style) is ADDED to every non-member; values are
       clipped at 1.
    4. `resolved` means the float basis has exactly the exact rank and no kept direction is below
       `rtol`. If not, the float basis cannot be trusted: with `exact=None` the projector is
       computed in exact rational arithmetic when n ≤ `EXACT_MAX_NODES` (method "exact");
       otherwise (method "conservative") a float basis larger than the exact rank is used as is (a
       superset of the row space over-states the leak), and a float basis missing directions
       reports 1 for every u (nothing smaller is provable), with the float value kept in
       `estimate`.
    5. Null-space certificate (fixed schedule, `exact=None`, n > `EXACT_MAX_NODES`, float part
       disagreeing with step 1): the null space mod p is lifted to small rationals and proven in
       exact arithmetic to be W-invariant and zero on every node heading a row of K
       (`_lift_null_space`). That proves `rank_Q K = rank_p K` and `null(K) = span X`, so
       `||Π e_u||² = 1 − ||Π_X e_u||²` is computed exactly (`NullSpaceProjector`, per component of
       disjoint supports; rounded up to float), method "nullspace", and the second prime is
       skipped (no prime can change a proven answer). If any check fails or a size cap is hit,
       nothing is claimed and steps 1-4 apply. Typical case: twin nodes (same closed
       neighbourhood and weights) outside N(O) ∪ O, whose differences `e_a − e_b` the observer
       never sees (random geometric graph of Fig. 1a: 65 null vectors, leaks 1/2, 1/3, 1/4).
    Example (Fig. 1a ER graph, n = 2048, T = 32, v = 0): the exact rank is 353,
    i.e. all 1 + 11·32 rows are independent, and the single distance-6 node leaks 0.990·ε_LDP (mean
    0.315 / 0.166 / 0.155 at distance 2 / 3 / 4). The values 0.986 and 0.259 / 0.095 / 0.080 are
    the monomial-basis SVD truncated at rtol = 1e-9 (numerical rank 200): under-estimates.

    Args:
        schedule: the (realised) schedule.
        observers: v or the colluding set V_c.
        published: nodes whose final output `x_w^T` the observers also see (e.g. `range(n)` when
            the outputs are made public).
        rtol: resolution threshold of step 4 (≤ 1e-9 recommended).
        exact: True forces rational arithmetic, False forbids it (also step 5), None (default)
            uses it only when the float part is unresolved and n ≤ EXACT_MAX_NODES, and the
            bounded null-space certificate of step 5 when n > EXACT_MAX_NODES.
    """
    obs = node_set("observers", observers, schedule.n)
    if not (0.0 < rtol < 1.0):
        raise ValueError(f"rtol must satisfy 0 < rtol < 1, got {rtol!r}")
    n = schedule.n
    pub = published_nodes(published, n)
    req = observer_requests(schedule, obs, published=pub)
    m = len(req)
    echs = [_modular_rowspace(schedule, req, PRIMES[0], observers=obs, published=pub)]
    rank, full = _rank_and_members(echs, n) if echs[0] is not None else (-1, np.zeros(n, bool))

    if is_fixed(schedule):
        Q, min_ratio, ambiguous = _krylov_rowspace(schedule, obs, pub, rtol)
    else:
        Q, min_ratio, ambiguous = _stable_rowspace(schedule, req, rtol)
    numeric_rank = Q.shape[0]
    float_value = np.sum(Q**2, axis=0)
    rational_path = exact is True or (exact is None and n <= EXACT_MAX_NODES)
    nproj: NullSpaceProjector | None = None
    if numeric_rank != rank or np.any(float_value[full] < 1.0 - 1e-6):
        # disagreement with the float part. First try to prove the first prime's answer exact
        # over Q (fixed schedules, step 5); a bad prime is the other explanation: add the second
        # one (the first prime's result is reused, not recomputed), unless the proof succeeded
        # (then no prime can give another rank or membership).
        if echs[0] is not None and exact is None and not rational_path:
            nproj = _lift_null_space(schedule, req, echs[0])
        if nproj is None:
            echs += [
                _modular_rowspace(schedule, req, p, observers=obs, published=pub)
                for p in PRIMES[1:]
            ]
            rank, full = _rank_and_members(echs, n)
    resolved = numeric_rank == rank and not ambiguous
    err = 16.0 * (schedule.T + 2) * math.sqrt(m * n) * _EPS
    margin = min(1.0, err / min_ratio)
    estimate = np.minimum(float_value, 1.0)
    estimate[full] = 1.0
    estimate[list(obs)] = 1.0

    if exact is True or (exact is None and not resolved and n <= EXACT_MAX_NODES):
        Kq = message_rows(schedule, req, FracArith(schedule), accelerated=True)
        proj = RationalProjector(Kq)
        diag = proj.diag()
        full = np.array([x == 1 for x in diag], dtype=bool)  # exact: authoritative
        leak = np.array([float(x) for x in diag])
        leak[list(obs)] = 1.0
        return JointView(
            obs, leak, full, proj.rank, numeric_rank, resolved, "exact", 0.0, m, estimate, proj
        )
    if nproj is not None:
        diag = nproj.diag()
        full = np.array([x == 1 for x in diag], dtype=bool)  # exact: authoritative
        leak = np.array([min(1.0, round_up(x)) for x in diag])
        leak[list(obs)] = 1.0
        return JointView(
            obs,
            leak,
            full,
            nproj.rank,
            numeric_rank,
            resolved,
            "nullspace",
            0.0,
            m,
            estimate,
            nproj,
        )
    if resolved:
        method = "float"
        values = estimate + margin
    else:
        method = "conservative"
        values = estimate + margin if numeric_rank > rank else np.ones(n)
    leak = np.where(full, 1.0, np.minimum(values, 1.0))
    leak[list(obs)] = 1.0
    return JointView(
        obs,
        leak,
        full,
        rank,
        numeric_rank,
        resolved,
        method,
        margin,
        m,
        estimate,
        _FloatBasis(Q, margin),
    )


def joint_view_leakage(
    schedule: GossipSchedule, observers: int | Iterable[int], **kwargs: Any
) -> np.ndarray:
    """`joint_view(...).leakage`: fractions of ε_LDP that the observers learnt about every u."""
    return joint_view(schedule, observers, **kwargs).leakage


def incoming_leakage(schedule: GossipSchedule, v: int, **kwargs: Any) -> np.ndarray:
    """INCOMING direction: what node v learnt about each other node u, from its own view (its
    messages and its own noisy input), `ε_{u→v}/ε_LDP` for every u (entry v is 1).

    The coefficients of v's messages depend on the whole schedule, not only on v's edges: with
    dropout or randomized gossip the realised schedule must be published after the run (or drawn
    from a public seed); otherwise only the mean bound `mean_loss_bound` (own T_v) is local."""
    return joint_view(schedule, node_index("v", v, schedule.n), **kwargs).leakage


def joint_view_matrix(schedule: GossipSchedule, **kwargs: Any) -> np.ndarray:
    """`F[u, v] = ε_{u→v}/ε_LDP` (joint view) for every pair; one `joint_view` per observer."""
    n = schedule.n
    F = np.empty((n, n))
    for v in range(n):
        F[:, v] = joint_view(schedule, v, **kwargs).leakage
    return F


def outgoing_leakage(schedule: GossipSchedule, u: int, **kwargs: Any) -> np.ndarray:
    """OUTGOING direction: the loss node u incurs towards every node v, `ε_{u→v}/ε_LDP` (entry u is
    1), from the schedule (public, or published after a dropout/randomized run). Every
    observer's knowledge matrix is needed: n `joint_view` calls."""
    uu = node_index("u", u, schedule.n)
    return np.array([joint_view(schedule, v, **kwargs).leakage[uu] for v in range(schedule.n)])


def _projector_block(view: JointView, group: Sequence[int]) -> tuple[np.ndarray, float]:
    """Π[U, U] (float) and the elementwise uncertainty margin."""
    basis = view._basis
    if isinstance(basis, (RationalProjector, NullSpaceProjector)):
        B = np.array([[float(basis.entry(a, b)) for b in group] for a in group])
        return B, 0.0
    if basis.margin >= 1.0 or not view.resolved and view.numeric_rank < view.rank:
        return np.eye(len(group)), 1.0  # unresolved: nothing smaller is provable
    Qg = basis.Q[:, list(group)]
    return Qg.T @ Qg, basis.margin


def group_leakage(
    schedule: GossipSchedule,
    group: Iterable[int],
    observers: int | Iterable[int],
    *,
    dim: int = 1,
    **kwargs: Any,
) -> float:
    """Group privacy with the joint view (Definition 7), fraction of ε_LDP:
    every user in U may change, each by at most Δ.

    `D_α/ε_LDP = max_{s ∈ [−1,1]^U} sᵀ Π_UU s`, Π the projector onto rowspace(K_O). Π_UU is
    positive semi-definite, so the maximum of this convex form is at a vertex s ∈ {±1}^U,
    enumerated exactly for |U| ≤ 16; for larger groups, or vector inputs (dim > 1, each δ_u in an
    L2 ball, where the vertex argument does not apply), the upper bound
    `min(|U| λ_max(Π_UU), Σ_{u,u'} |Π_uu'|)` is returned. The float margin of `joint_view` is added
    as `|U|·margin` (`|sᵀ(Π̂ − Π)s| ≤ margin·||s||²`); the result is capped at |U|. Can exceed 1
    (up to |U|).
    """
    obs = node_set("observers", observers, schedule.n)
    U = node_set("group", group, schedule.n)
    D = int_at_least("dim", dim, 1)
    view = joint_view(schedule, obs, **kwargs)
    P, margin = _projector_block(view, U)
    k = len(U)
    slack = margin * k
    if D == 1 and k <= 16:
        best = 0.0
        for mask in range(1 << (k - 1)):
            s = np.array([1.0] + [(-1.0 if (mask >> i) & 1 else 1.0) for i in range(k - 1)])
            best = max(best, float(s @ P @ s))
        value = best
    else:
        value = min(k * float(np.max(np.linalg.eigvalsh(P))), float(np.sum(np.abs(P))))
    return min(float(k), value + slack)
