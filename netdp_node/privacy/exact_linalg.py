"""Exact linear algebra over a prime field F_p and over the rationals.

Used by the joint-view accountant of gossip (`gossip_joint_view`) to decide ranks and row-space
membership without a tolerance: modular matrix products exact in float64 BLAS (`matmul_mod`), a
blocked reduced row echelon form over F_p (`ModEchelon`), rational reconstruction of a residue
(`rational_reconstruction`), and exact orthogonal projectors in `Fraction` arithmetic onto a row
space (`RationalProjector`) or the complement of a verified null space (`NullSpaceProjector`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

#: Two fixed primes below 2^25 for the modular rank computations. (p−1)² < 2^50, so a sparse dot
#: product of up to `MAX_MOD_TERMS` terms fits in int64 before reduction.
PRIMES = (33554393, 33554383)
MAX_MOD_TERMS = (1 << 63) // ((PRIMES[0] - 1) ** 2) - 1


def mod_fraction(x: Fraction, p: int) -> int:
    """x modulo p (ZeroDivisionError if p divides the denominator)."""
    d = x.denominator % p
    if d == 0:
        raise ZeroDivisionError(f"{p} divides the denominator of {x}")
    return (x.numerator % p) * pow(d, p - 2, p) % p


# Exact modular products with float64 BLAS. Operands hold integers in [0, p), p < 2^25. The left
# operand is split as A = 2^13·A_hi + A_lo (A_hi < 2^12, A_lo < 2^13) and the inner dimension cut
# into chunks of 2^15, so every partial sum of the (non-negative) products is below
# 2^15·2^13·2^25 = 2^53: each GEMM is exact in float64 whatever its summation order or FMA use.
_MOD_SPLIT = 8192.0  # 2^13
_MOD_CHUNK = 1 << 15
_MOD_BLOCK = 30  # rows eliminated together by `ModEchelon.add` (see `sub_matmul_mod`)


def reduce_mod(x: np.ndarray, p: int) -> np.ndarray:
    """`x mod p` in [0, p) for a float64 array of integers with |x| ≤ 2^53 − p (new array).

    `q = floor(x·(1/p))` is the true quotient or one off (the rounding error of `x·(1/p)` is far
    below 1 for |x| < 2^53, p ≥ 2), so |q·p| ≤ |x| + p ≤ 2^53 and `x − q·p` are exact integers,
    and one correction by ±p lands in [0, p). Callers stay below 2^53 − 2^40 (`matmul_mod`),
    2^53 − 2^49 (`sub_matmul_mod`) and 2^51 (`rref_small`). (np.fmod is exact too but ~25×
    slower.)"""
    q = x * (1.0 / p)
    np.floor(q, out=q)
    q *= p
    r = x - q
    np.add(r, p, out=r, where=r < 0)
    np.subtract(r, p, out=r, where=r >= p)
    return r


def matmul_mod(A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """`(A @ B) mod p`, exactly, for float64 arrays of integers in [0, p) with p < 2^25."""
    if p >= 1 << 25:
        raise ValueError("matmul_mod needs p < 2^25")
    out = np.zeros((A.shape[0], B.shape[1]))
    k = A.shape[1]
    if k == 0 or out.size == 0:
        return out
    hi = np.floor(A / _MOD_SPLIT)
    HL = np.vstack([hi, A - hi * _MOD_SPLIT])  # one GEMM for both halves: B is read once
    m = A.shape[0]
    for s in range(0, k, _MOD_CHUNK):
        P = reduce_mod(HL[:, s : s + _MOD_CHUNK] @ B[s : s + _MOD_CHUNK], p)
        P[:m] *= _MOD_SPLIT  # < 2^38
        out += P[:m]
        out += P[m:]  # < 2^39 per chunk
    return reduce_mod(out, p)


def centred(x: np.ndarray, p: int) -> np.ndarray:
    """Representatives in (−p/2, p/2] of integers in [0, p)."""
    return np.where(x > p // 2, x - p, x)


def sub_matmul_mod(C: np.ndarray, A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """`(C − A @ B) mod p`, exactly (float64 integers in [0, p), p < 2^25).

    For an inner dimension k ≤ `_MOD_BLOCK` = 30 a single GEMM on centred representatives
    (|a|, |b| ≤ p/2 < 2^24): every partial sum is below k·2^48 ≤ 30·2^48, and with C added below
    2^53, so exact; otherwise through `matmul_mod`."""
    if A.shape[1] <= _MOD_BLOCK:
        return reduce_mod(C - centred(A, p) @ centred(B, p), p)
    return reduce_mod(C - matmul_mod(A, B, p), p)


def rref_small(Z: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """RREF modulo p of a small block (float64 integers in [0, p)): (independent rows, pivots).

    One Python step per ROW (not per column): a row's first non-zero entry becomes its pivot and
    is eliminated from every other row of the block. Products are < p² < 2^50: exact in float64.
    The rows come out in input order, not sorted by pivot (every pivot column is still a unit
    column of the result)."""
    Z = np.array(Z, dtype=np.float64)
    keep: list[int] = []
    piv: list[int] = []
    for i in range(Z.shape[0]):
        nz = np.flatnonzero(Z[i])
        if nz.size == 0:
            continue
        c = int(nz[0])
        inv = pow(int(Z[i, c]), p - 2, p)
        if inv != 1:
            Z[i] = reduce_mod(Z[i] * inv, p)
        f = Z[:, c].copy()
        f[i] = 0.0
        idx = np.flatnonzero(f)
        if idx.size:  # |Z − f·Z_i| < 2^50
            Z[idx] = reduce_mod(Z[idx] - f[idx, None] * Z[i][None, :], p)
        keep.append(i)
        piv.append(c)
    return Z[keep], piv


class ModEchelon:
    """The row space of a growing set of vectors over F_p (p < 2^25 prime), kept in reduced row
    echelon form: every pivot column is a unit column of the basis. Stored compactly as the basis
    restricted to the non-pivot ("free") columns, `F = basis[:, free]` (the pivot columns are the
    identity), as float64 integers in [0, p); all products are exact (`sub_matmul_mod`). Adding a
    block of rows costs O(rows · rank · (n − rank)) in BLAS and O(rows · 30 · n) element-wise,
    instead of O(n) Python steps over the whole matrix (the column-by-column reference lives in
    tests/unit/test_exact_linalg.py)."""

    def __init__(self, n: int, p: int) -> None:
        self.n, self.p = n, p
        self.rank = 0
        self._piv: list[int] = []  # pivot column of each basis row
        self._free = np.arange(n)  # non-pivot columns, increasing
        self._F = np.zeros((0, n))  # basis[:, _free]

    @property
    def basis(self) -> np.ndarray:
        """The RREF basis rows (rank × n; pivot rows in the order found)."""
        B = np.zeros((self.rank, self.n))
        if self.rank:
            B[np.arange(self.rank), self._piv] = 1.0
            B[:, self._free] = self._F
        return B

    @property
    def pivots(self) -> list[int]:
        return list(self._piv)

    @property
    def free_columns(self) -> np.ndarray:
        return self._free.copy()

    def free_part(self) -> np.ndarray:
        """`basis[:, free_columns]` (rank × (n − rank))."""
        return self._F

    def add(self, Z: Any) -> np.ndarray:
        """Add the rows of Z (integers; reduced modulo p here). Returns new basis rows (n columns):
        rows that, with the old basis, span old span + rowspace(Z), independent of the old span
        (zero rows if nothing is new)."""
        p = self.p
        Z = np.mod(np.asarray(Z, dtype=np.int64), p).astype(np.float64)
        out: list[np.ndarray] = []
        for s in range(0, Z.shape[0], _MOD_BLOCK):
            Zs = Z[s : s + _MOD_BLOCK]
            Zf = Zs[:, self._free]
            if self.rank:  # Z − Z[:, piv] · basis, on the free columns (zero on the pivots)
                Zf = sub_matmul_mod(Zf, Zs[:, self._piv], self._F, p)
            N, q = rref_small(Zf, p)  # q: new pivots, as positions in _free
            if not q:
                continue
            rows = np.zeros((len(q), self.n))
            rows[:, self._free] = N
            out.append(rows)
            F = self._F
            if self.rank:  # clear the new pivot columns in the old rows
                F = sub_matmul_mod(F, F[:, q], N, p)
            keep = np.ones(len(self._free), dtype=bool)
            keep[q] = False
            self._F = np.vstack([F[:, keep], N[:, keep]])
            self._piv.extend(int(c) for c in self._free[q])
            self._free = self._free[keep]
            self.rank += len(q)
        return np.vstack(out) if out else np.zeros((0, self.n))

    def members(self) -> np.ndarray:
        """`e_u ∈ rowspace` for every u: u is a pivot column whose basis row is e_u (in RREF, the
        coordinates of e_u on the basis are its entries at the pivot columns), i.e. whose row of
        F is zero."""
        full = np.zeros(self.n, dtype=bool)
        if self.rank:
            single = ~np.any(self._F != 0, axis=1)
            full[np.asarray(self._piv)[single]] = True
        return full


def frac_solve(G: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    """Solve G X = B exactly (G square, invertible) by Gauss–Jordan on Fractions."""
    k = len(G)
    A = [list(G[i]) + list(B[i]) for i in range(k)]
    width = len(A[0]) if A else 0
    for c in range(k):
        piv = next(i for i in range(c, k) if A[i][c] != 0)
        A[c], A[piv] = A[piv], A[c]
        inv = 1 / A[c][c]
        A[c] = [x * inv for x in A[c]]
        for i in range(k):
            if i != c and A[i][c] != 0:
                f = A[i][c]
                A[i] = [x - f * y for x, y in zip(A[i], A[c])]
    return [row[k:width] for row in A]


def frac_rref(K: np.ndarray) -> tuple[list[list[Fraction]], list[int]]:
    """Reduced row echelon form of K in exact Fractions: (independent rows, pivot columns)."""
    rows = [list(r) for r in K]
    m = len(rows)
    n = len(rows[0]) if rows else 0
    pivots: list[int] = []
    r = 0
    for c in range(n):
        if r == m:
            break
        piv = next((i for i in range(r, m) if rows[i][c] != 0), None)
        if piv is None:
            continue
        rows[r], rows[piv] = rows[piv], rows[r]
        inv = 1 / rows[r][c]
        rows[r] = [x * inv for x in rows[r]]
        for i in range(m):
            if i != r and rows[i][c] != 0:
                f = rows[i][c]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[r])]
        pivots.append(c)
        r += 1
    return rows[:r], pivots


class RationalProjector:
    """Exact orthogonal projector onto rowspace(K) for a rational K (small graphs). Entries Π[u, u']
    are exact Fractions."""

    def __init__(self, K: np.ndarray) -> None:
        n = K.shape[1]
        R, piv = frac_rref(K)
        self.n, self.rank = n, len(piv)
        if self.rank <= n - self.rank:
            # Π = Rᵀ (R Rᵀ)^{-1} R
            self.sign, self.basis = 1, R
        else:
            # Π = I − Nᵀ (N Nᵀ)^{-1} N, N a basis of the null space of R
            free = [c for c in range(n) if c not in set(piv)]
            N = []
            for j in free:
                vec = [Fraction(0)] * n
                vec[j] = Fraction(1)
                for i, c in enumerate(piv):
                    vec[c] = -R[i][j]
                N.append(vec)
            self.sign, self.basis = -1, N
        B = self.basis
        if B:
            G = [[sum((x * y for x, y in zip(bi, bj)), Fraction(0)) for bj in B] for bi in B]
            self.Y = frac_solve(G, B)
        else:
            self.Y = []

    def entry(self, u: int, w: int) -> Fraction:
        s = sum((self.basis[i][u] * self.Y[i][w] for i in range(len(self.basis))), Fraction(0))
        if self.sign == 1:
            return s
        return (Fraction(1) if u == w else Fraction(0)) - s

    def diag(self) -> list[Fraction]:
        return [self.entry(u, u) for u in range(self.n)]


def rational_reconstruction(a: int, p: int, bound: int) -> Fraction | None:
    """The fraction x = num/den with |num|, den ≤ bound and x ≡ a (mod p), if any (half extended
    Euclid; unique when 2·bound² < p). Only a candidate: callers verify it exactly."""
    r0, r1 = p, a % p
    s0, s1 = 0, 1
    while r1 > bound:
        q = r0 // r1
        r0, r1 = r1, r0 - q * r1
        s0, s1 = s1, s0 - q * s1
    if s1 == 0 or abs(s1) > bound:
        return None
    return Fraction(r1, s1)


class NullSpaceProjector:
    """Exact projector onto rowspace(K) from an exactly verified rational basis X of null(K):
    `Π = I − Π_X`. X is split into components with pairwise disjoint supports (orthogonal
    subspaces), and `Π_X` is `X_C (X_Cᵀ X_C)^{-1} X_Cᵀ` on each, in Fractions."""

    def __init__(
        self, n: int, vecs: Sequence[Mapping[int, Fraction]], *, max_work: int = 2_000_000
    ) -> None:
        self.n = n
        self.rank = n - len(vecs)
        parent = list(range(len(vecs)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        for i, x in enumerate(vecs):
            for c in x:
                j = owner.setdefault(c, i)
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[ri] = rj
        groups: dict[int, list[int]] = {}
        for i in range(len(vecs)):
            groups.setdefault(find(i), []).append(i)
        self._where: dict[int, tuple[int, int]] = {}  # coordinate -> (component, position)
        self._parts: list[tuple[list[list[Fraction]], list[list[Fraction]]]] = []
        work = 0
        for members in groups.values():
            support = sorted({c for i in members for c in vecs[i]})
            work += len(members) ** 2 * len(support)
            if work > max_work:
                raise ValueError("null space too large for the exact projector")
            X = [[vecs[i].get(c, Fraction(0)) for c in support] for i in members]
            G = [[sum((a * b for a, b in zip(xi, xj)), Fraction(0)) for xj in X] for xi in X]
            Y = frac_solve(G, X)  # G^{-1} X
            k = len(self._parts)
            for pos, c in enumerate(support):
                self._where[c] = (k, pos)
            self._parts.append((X, Y))

    def entry(self, u: int, w: int) -> Fraction:
        """Π[u, w], exactly."""
        eye = Fraction(1) if u == w else Fraction(0)
        cu, cw = self._where.get(u), self._where.get(w)
        if cu is None or cw is None or cu[0] != cw[0]:
            return eye
        X, Y = self._parts[cu[0]]
        return eye - sum((X[i][cu[1]] * Y[i][cw[1]] for i in range(len(X))), Fraction(0))

    def diag(self) -> list[Fraction]:
        return [self.entry(u, u) for u in range(self.n)]


def round_up(x: Fraction) -> float:
    """The smallest float ≥ x."""
    v = float(x)
    return v if Fraction(v) >= x else math.nextafter(v, math.inf)
