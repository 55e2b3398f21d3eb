"""Exact linear algebra over F_p and over the rationals (`netdp_node.privacy.exact_linalg`).

Every code path is checked against an independent computation: Python integers for the modular
products, the column-by-column reference `rref_mod_reference` and Fraction elimination for rank and
membership, and the defining congruence for rational reconstruction.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from netdp_node.privacy import exact_linalg

P = exact_linalg.PRIMES[0]


def rref_mod_reference(K: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of K modulo p: (R, pivot columns). The column-by-column reference
    (O(n) Python steps on the whole matrix; what `joint_view` used before
    `exact_linalg.ModEchelon`)."""
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


def membership_reference(R: np.ndarray, pivots: list[int], n: int) -> np.ndarray:
    """e_u ∈ rowspace(R) for every u, R in RREF: u must be a pivot column whose row is e_u."""
    full = np.zeros(n, dtype=bool)
    for i, c in enumerate(pivots):
        if np.count_nonzero(R[i]) == 1:
            full[c] = True
    return full


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
    got = exact_linalg.reduce_mod(x.astype(np.float64), P)
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
    got = exact_linalg.matmul_mod(A.astype(float), B.astype(float), P)
    assert got.tolist() == ref
    sub = exact_linalg.sub_matmul_mod(C.astype(float), A.astype(float), B.astype(float), P)
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


def test_mod_echelon_matchesrref_mod_reference_and_fractions() -> None:
    for i, K in enumerate(_random_matrices(7, 60)):
        n = K.shape[1]
        R, piv = rref_mod_reference(K, P)
        ech = exact_linalg.ModEchelon(n, P)
        ech.add(K)
        assert ech.rank == len(piv), i
        assert np.array_equal(ech.members(), membership_reference(R, piv, n)), i
        if i % 4 != 2:  # small integers: here rank_p = rank_Q
            assert ech.rank == frac_rank(K), i
        elif i < 12:
            assert ech.rank == frac_rank(K, P), i
        # the same row space: each basis reduces to zero against the other
        other = exact_linalg.ModEchelon(n, P)
        other.add(R)
        assert other.add(ech.basis).shape[0] == 0
        back = exact_linalg.ModEchelon(n, P)
        back.add(ech.basis)
        assert back.add(R).shape[0] == 0 and back.rank == ech.rank
        # RREF invariant: every pivot column is a unit column of the basis
        B = ech.basis
        assert np.array_equal(B[:, ech.pivots], np.eye(ech.rank)), i
        assert B.min(initial=0) >= 0 and B.max(initial=0) < P


def test_mod_echelon_incremental_equals_all_at_once() -> None:
    for i, K in enumerate(_random_matrices(11, 60)):
        n = K.shape[1]
        whole = exact_linalg.ModEchelon(n, P)
        whole.add(K)
        inc = exact_linalg.ModEchelon(n, P)
        cut = sorted(random.Random(i).sample(range(K.shape[0] + 1), 2))
        grown = 0
        for part in (K[: cut[0]], K[cut[0] : cut[1]], K[cut[1] :]):
            before = inc.rank
            new = inc.add(part)
            assert new.shape[0] == inc.rank - before  # the new rows are exactly the increment
            grown += new.shape[0]
        assert inc.rank == whole.rank == grown
        assert np.array_equal(inc.members(), whole.members())


def test_rational_reconstruction() -> None:
    bound = int((P // 2) ** 0.5)
    for f in (Fraction(1, 2), Fraction(-3, 7), Fraction(0), Fraction(4095, 4093), Fraction(-1)):
        a = f.numerator * pow(f.denominator, P - 2, P) % P
        assert exact_linalg.rational_reconstruction(a, P, bound) == f
    assert exact_linalg.rational_reconstruction(P // 3 + 12345, P, 10) is None
