"""Exact modular linear algebra and the null-space certificate of the joint-view accountant
(`netdp_node.privacy.pndp_gossip`, issue 5: the fast exact part of `joint_view`).

Every new code path is checked against an independent computation: Python integers for the modular
products, the column-by-column reference `_rref_mod` and Fraction elimination for rank and
membership, the message rows `K_O` themselves for the Krylov basis over F_p, and the exact rational
projector (`_ExactProjector`, `joint_view(exact=True)`) for the null-space certificate.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from netdp_node.privacy import pndp_gossip as pg
from netdp_node.privacy.pndp_gossip import (
    chebyshev_gamma,
    fixed_schedule,
    group_leakage,
    joint_view,
    realised_schedule,
)

P = pg._PRIMES[0]


def _rref_mod(K: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of K modulo p: (R, pivot columns). The column-by-column reference
    (O(n) Python steps on the whole matrix; what `joint_view` used before `_ModEchelon`)."""
    A = np.array(K, dtype=np.int64) % p
    m, n = A.shape
    pivots: list[int] = []
    r = 0
    for c in range(n):
        if r == m:
            break
        nz = np.flatnonzero(A[r:, c])
        if nz.size == 0:
            continue
        i = r + int(nz[0])
        if i != r:
            A[[r, i]] = A[[i, r]]
        inv = pow(int(A[r, c]), p - 2, p)
        A[r, c:] = (A[r, c:] * inv) % p
        col = A[:, c].copy()
        col[r] = 0
        nzr = np.flatnonzero(col)
        if nzr.size:  # columns < c are already reduced (zero or pivots of earlier rows)
            A[nzr, c:] = (A[nzr, c:] - (col[nzr, None] * A[r, c:][None, :]) % p) % p
        pivots.append(c)
        r += 1
    return A[:r], pivots


def _membership(R: np.ndarray, pivots: list[int], n: int) -> np.ndarray:
    """e_u ∈ rowspace(R) for every u, R in RREF: u must be a pivot column whose row is e_u."""
    full = np.zeros(n, dtype=bool)
    for i, c in enumerate(pivots):
        if np.count_nonzero(R[i]) == 1:
            full[c] = True
    return full


def ring(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def hypercube(m: int) -> list[tuple[int, int]]:
    return [(i, i ^ (1 << k)) for i in range(1 << m) for k in range(m) if i < i ^ (1 << k)]


def twins_graph(n_ring: int) -> list[tuple[int, int]]:
    """A ring 0..n_ring−1 with twins hung on it: two open twins on {3, 4}, three pendant twins on
    node 8, and a closed (adjacent) twin pair on {12}."""
    a = n_ring
    edges = ring(n_ring)
    edges += [(3, a), (4, a), (3, a + 1), (4, a + 1)]  # open twins a, a+1
    edges += [(8, a + 2), (8, a + 3), (8, a + 4)]  # pendant triplets
    edges += [(12, a + 5), (12, a + 6), (a + 5, a + 6)]  # closed twins
    return edges


def frac_rank(K: np.ndarray, p: int | None = None) -> int:
    """Rank over Q (p None) or F_p by Fraction / int elimination, written here."""
    rows = [[Fraction(int(x)) for x in r] for r in K]
    rank, n = 0, K.shape[1]
    for c in range(n):
        piv = next(
            (i for i in range(rank, len(rows)) if (rows[i][c] if p is None else rows[i][c] % p)),
            None,
        )
        if piv is None:
            continue
        rows[rank], rows[piv] = rows[piv], rows[rank]
        inv = 1 / rows[rank][c] if p is None else Fraction(pow(int(rows[rank][c]), p - 2, p))
        for i in range(len(rows)):
            if i != rank:
                f = rows[i][c] * inv
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[rank])]
                if p is not None:
                    rows[i] = [Fraction(int(x) % p) for x in rows[i]]
        rank += 1
    return rank


# =============================================================================================
# Exact products modulo p with float64 BLAS
# =============================================================================================


def test_reduce_mod_matches_python_integers() -> None:
    rng = np.random.default_rng(1)
    top = 2**53 - P
    x = rng.integers(-top, top, size=5000, dtype=np.int64)
    x[:5] = [0, P, -P, top, -top]
    got = pg._reduce_mod(x.astype(np.float64), P)
    assert [int(v) for v in got] == [int(v) % P for v in x]


@pytest.mark.parametrize("k", [1, 7, 30, 31, 200, (1 << 15) + 3])
def test_matmul_mod_matches_python_integers(k: int) -> None:
    rng = np.random.default_rng(k)
    A = rng.integers(P - 4096, P, size=(3, k))  # near p: the largest products
    A[:, ::2] = rng.integers(0, P, size=A[:, ::2].shape)
    B = rng.integers(P - 4096, P, size=(k, 4))
    C = rng.integers(0, P, size=(3, 4))
    ref = [
        [sum(int(a) * int(b) for a, b in zip(A[i], B[:, j])) % P for j in range(4)]
        for i in range(3)
    ]
    got = pg._matmul_mod(A.astype(float), B.astype(float), P)
    assert got.tolist() == ref
    sub = pg._sub_matmul_mod(C.astype(float), A.astype(float), B.astype(float), P)
    assert sub.tolist() == [[(int(C[i, j]) - ref[i][j]) % P for j in range(4)] for i in range(3)]


# =============================================================================================
# Blocked F_p elimination vs the reference RREF and Fraction arithmetic
# =============================================================================================


def _random_matrices(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for trial in range(count):
        m, n = int(rng.integers(1, 60)), int(rng.integers(1, 45))
        kind = trial % 4
        if kind == 0:  # low rank, small integers
            r = int(rng.integers(0, min(m, n) + 1))
            K = rng.integers(-3, 4, (m, r)) @ rng.integers(-3, 4, (r, n))
        elif kind == 1:  # sparse with repeated and unit rows
            K = rng.integers(-2, 3, (m, n)) * (rng.random((m, n)) < 0.08)
            K[rng.integers(0, m, 3)] = 0
            for i in rng.integers(0, m, 3):
                K[i] = 0
                K[i, rng.integers(0, n)] = int(rng.integers(1, 5))
        elif kind == 2:  # residues of the full range
            K = rng.integers(0, P, (m, n))
        else:  # duplicated rows and columns
            base = rng.integers(-5, 6, (max(1, m // 2), n))
            K = np.vstack([base, base])[:m]
            K[:, n // 2 :] = K[:, : n - n // 2]
        yield K


def test_mod_echelon_matches_rref_mod_and_fractions() -> None:
    for i, K in enumerate(_random_matrices(7, 120)):
        n = K.shape[1]
        R, piv = _rref_mod(K, P)
        ech = pg._ModEchelon(n, P)
        ech.add(K)
        assert ech.rank == len(piv), i
        assert np.array_equal(ech.members(), _membership(R, piv, n)), i
        if i % 4 != 2:  # small integers: here rank_p = rank_Q
            assert ech.rank == frac_rank(K), i
        elif i < 12:
            assert ech.rank == frac_rank(K, P), i
        # the same row space: each basis reduces to zero against the other
        other = pg._ModEchelon(n, P)
        other.add(R)
        assert other.add(ech.basis).shape[0] == 0
        back = pg._ModEchelon(n, P)
        back.add(ech.basis)
        assert back.add(R).shape[0] == 0 and back.rank == ech.rank
        # RREF invariant: every pivot column is a unit column of the basis
        B = ech.basis
        assert np.array_equal(B[:, ech.pivots], np.eye(ech.rank)), i
        assert B.min(initial=0) >= 0 and B.max(initial=0) < P


def test_mod_echelon_incremental_equals_all_at_once() -> None:
    for i, K in enumerate(_random_matrices(11, 60)):
        n = K.shape[1]
        whole = pg._ModEchelon(n, P)
        whole.add(K)
        inc = pg._ModEchelon(n, P)
        cut = sorted(random.Random(i).sample(range(K.shape[0] + 1), 2))
        grown = 0
        for part in (K[: cut[0]], K[cut[0] : cut[1]], K[cut[1] :]):
            before = inc.rank
            new = inc.add(part)
            assert new.shape[0] == inc.rank - before  # the new rows are exactly the increment
            grown += new.shape[0]
        assert inc.rank == whole.rank == grown
        assert np.array_equal(inc.members(), whole.members())


# =============================================================================================
# Krylov basis over F_p vs the message rows K_O
# =============================================================================================


def _schedules():
    yield "ring16", fixed_schedule(16, ring(16), 9)
    yield "ring16-acc", fixed_schedule(16, ring(16), 9, gamma=chebyshev_gamma(0.1))
    yield "cube5-acc", fixed_schedule(32, hypercube(5), 7, gamma=chebyshev_gamma(0.3))
    yield "twins-acc", fixed_schedule(27, twins_graph(20), 25, gamma=chebyshev_gamma(0.05))
    yield "ring8-long", fixed_schedule(8, ring(8), 10)


@pytest.mark.parametrize("name,sched", list(_schedules()))
def test_krylov_echelon_matches_message_rows(name: str, sched) -> None:
    n = sched.n
    for obs, pub in (((0,), ()), ((0, 5), ()), ((1,), (3, 7)), ((0,), tuple(range(n)))):
        req = pg._observer_requests(sched, obs, published=pub)
        for p in pg._PRIMES:
            K = pg._message_rows(sched, req, pg._ModArith(sched, p), accelerated=True)
            R, piv = _rref_mod(K, p)
            kry = pg._krylov_echelon(sched, obs, pub, p)
            assert kry is not None
            assert kry.rank == len(piv), (name, obs, pub)
            assert np.array_equal(kry.members(), _membership(R, piv, n)), (name, obs, pub)
            assert pg._ModEchelon(n, p).add(K).shape[0] == kry.rank
            # same row space: K reduces to zero against the Krylov basis
            assert kry.add(K).shape[0] == 0
            generic = pg._modular_rowspace(sched, req, p)  # no observers: rows of K by blocks
            assert generic is not None and generic.rank == len(piv)
        rank, members = pg._exact_rank_and_members(sched, req, observers=obs, published=pub)
        assert rank == len(piv) and np.array_equal(members, _membership(R, piv, n))


def test_modular_rowspace_time_varying_uses_message_rows() -> None:
    s = realised_schedule(9, [[(0, 1), (2, 3)], [(1, 2), (5, 6), (7, 8)], [(3, 4), (0, 8)]] * 3)
    req = pg._observer_requests(s, (0,))
    K = pg._message_rows(s, req, pg._ModArith(s, P), accelerated=True)
    R, piv = _rref_mod(K, P)
    ech = pg._modular_rowspace(s, req, P, observers=(0,))
    assert ech.rank == len(piv) and np.array_equal(ech.members(), _membership(R, piv, 9))


# =============================================================================================
# Null-space certificate vs exact rational projector
# =============================================================================================


@pytest.mark.parametrize("gamma", [None, 0.05])
def test_lift_null_space_equals_exact_projector(gamma) -> None:
    g = None if gamma is None else chebyshev_gamma(gamma)
    sched = fixed_schedule(27, twins_graph(20), 16, gamma=g)
    for obs in ((0,), (0, 10)):
        req = pg._observer_requests(sched, obs)
        ech = pg._modular_rowspace(sched, req, P, observers=obs)
        nproj = pg._lift_null_space(sched, req, ech)
        assert nproj is not None
        Kq = pg._message_rows(sched, req, pg._FracArith(sched), accelerated=True)
        ex = pg._ExactProjector(Kq)
        assert nproj.rank == ex.rank == ech.rank
        assert nproj.diag() == ex.diag()  # exact Fractions
        for u, w in ((20, 21), (22, 23), (25, 26), (20, 22), (0, 5), (21, 21)):
            assert nproj.entry(u, w) == ex.entry(u, w)
        assert any(x not in (0, 1) for x in nproj.diag())  # twins: a real fractional leak


def test_lift_null_space_refuses_what_it_cannot_prove() -> None:
    sched = fixed_schedule(27, twins_graph(20), 25)
    req = pg._observer_requests(sched, (0,))
    # a basis of too small a space (the last 20 rounds dropped): its null space is a strict
    # superset of null(K), so the exact checks must fail
    short = [(t, w) for t, w in req if t < 5]
    ech = pg._ModEchelon(27, P)
    ech.add(pg._message_rows(sched, short, pg._ModArith(sched, P), accelerated=True))
    full = pg._modular_rowspace(sched, req, P, observers=(0,))
    assert ech.rank < full.rank
    assert pg._lift_null_space(sched, req, ech) is None
    # time-varying schedules: the invariance argument does not apply
    tv = realised_schedule(9, [[(0, 1), (2, 3)], [(1, 2), (5, 6), (7, 8)], [(3, 4), (0, 8)]] * 3)
    tv_req = pg._observer_requests(tv, (0,))
    assert pg._lift_null_space(tv, tv_req, pg._modular_rowspace(tv, tv_req, P)) is None


def test_rational_reconstruction() -> None:
    bound = int((P // 2) ** 0.5)
    for f in (Fraction(1, 2), Fraction(-3, 7), Fraction(0), Fraction(4095, 4093), Fraction(-1)):
        a = f.numerator * pow(f.denominator, P - 2, P) % P
        assert pg._rational_reconstruction(a, P, bound) == f
    assert pg._rational_reconstruction(P // 3 + 12345, P, 10) is None


def _force_float_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the float Krylov basis by the identity (numeric rank n > exact rank): the float part
    disagrees with the modular one, as on the random geometric graph of Fig. 1(a)."""

    def identity(schedule, obs, published, rtol):
        return np.eye(schedule.n), 1.0, False

    monkeypatch.setattr(pg, "_krylov_rowspace", identity)


def test_joint_view_nullspace_method_equals_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = fixed_schedule(41, twins_graph(34), 22)  # plain gossip: smaller exact fractions
    assert sched.n > pg.EXACT_MAX_NODES
    ex = joint_view(sched, 0, exact=True)
    _force_float_disagreement(monkeypatch)
    jv = joint_view(sched, 0)
    assert jv.method == "nullspace" and jv.rank == ex.rank and jv.margin == 0.0
    assert np.array_equal(jv.full, ex.full)
    # exact values, rounded up to float: never below the exact ones, at most one ulp above
    assert np.all(jv.leakage >= ex.leakage)
    assert np.all(jv.leakage <= np.nextafter(ex.leakage, 2.0))
    assert sorted(set(np.round(jv.leakage[~jv.full], 12))) == [0.333333333333, 0.5]
    # without the certificate (exact=False) the same disagreement is reported conservatively
    cons = joint_view(sched, 0, exact=False)
    assert cons.method == "conservative" and np.all(cons.leakage == 1.0)
    # group privacy through the certified projector equals the exact one
    for group in ((34, 35), (36, 37, 38)):
        P_cert, m_cert = pg._projector_block(jv, group)
        P_ex, _ = pg._projector_block(ex, group)
        assert m_cert == 0.0 and np.allclose(P_cert, P_ex, rtol=0, atol=1e-15)
    assert group_leakage(sched, (34, 35), 0) == pytest.approx(
        group_leakage(sched, (34, 35), 0, exact=True), abs=1e-12
    )
