"""The fast exact part of the joint-view accountant (`netdp_node.privacy.gossip_joint_view`):
the Krylov basis over F_p and the null-space certificate.

Checked against independent computations: the message rows `K_O` themselves (reduced by the
column-by-column reference of test_exact_linalg.py) for the Krylov basis over F_p, and the exact
rational projector (`exact_linalg.RationalProjector`, `joint_view(exact=True)`) for the null-space
certificate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_exact_linalg import membership_reference, rref_mod_reference

from netdp_node.privacy import exact_linalg, gossip, gossip_joint_view
from netdp_node.privacy.gossip import chebyshev_gamma, fixed_schedule, realised_schedule
from netdp_node.privacy.gossip_joint_view import group_leakage, joint_view

P = exact_linalg.PRIMES[0]


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
        req = gossip.observer_requests(sched, obs, published=pub)
        for p in exact_linalg.PRIMES:
            K = gossip.message_rows(sched, req, gossip.ModArith(sched, p), accelerated=True)
            R, piv = rref_mod_reference(K, p)
            kry = gossip_joint_view._krylov_echelon(sched, obs, pub, p)
            assert kry is not None
            assert kry.rank == len(piv), (name, obs, pub)
            assert np.array_equal(kry.members(), membership_reference(R, piv, n)), (name, obs, pub)
            assert exact_linalg.ModEchelon(n, p).add(K).shape[0] == kry.rank
            # same row space: K reduces to zero against the Krylov basis
            assert kry.add(K).shape[0] == 0
            generic = gossip_joint_view._modular_rowspace(
                sched, req, p
            )  # no observers: rows of K by blocks
            assert generic is not None and generic.rank == len(piv)
        rank, members = gossip_joint_view._exact_rank_and_members(
            sched, req, observers=obs, published=pub
        )
        assert rank == len(piv) and np.array_equal(members, membership_reference(R, piv, n))


def test_modular_rowspace_time_varying_uses_message_rows() -> None:
    s = realised_schedule(9, [[(0, 1), (2, 3)], [(1, 2), (5, 6), (7, 8)], [(3, 4), (0, 8)]] * 3)
    req = gossip.observer_requests(s, (0,))
    K = gossip.message_rows(s, req, gossip.ModArith(s, P), accelerated=True)
    R, piv = rref_mod_reference(K, P)
    ech = gossip_joint_view._modular_rowspace(s, req, P, observers=(0,))
    assert ech.rank == len(piv) and np.array_equal(ech.members(), membership_reference(R, piv, 9))


# =============================================================================================
# Null-space certificate vs exact rational projector
# =============================================================================================


@pytest.mark.parametrize("gamma", [None, 0.05])
def test_lift_null_space_equals_exact_projector(gamma) -> None:
    g = None if gamma is None else chebyshev_gamma(gamma)
    sched = fixed_schedule(27, twins_graph(20), 16, gamma=g)
    for obs in ((0,), (0, 10)):
        req = gossip.observer_requests(sched, obs)
        ech = gossip_joint_view._modular_rowspace(sched, req, P, observers=obs)
        nproj = gossip_joint_view._lift_null_space(sched, req, ech)
        assert nproj is not None
        Kq = gossip.message_rows(sched, req, gossip.FracArith(sched), accelerated=True)
        ex = exact_linalg.RationalProjector(Kq)
        assert nproj.rank == ex.rank == ech.rank
        assert nproj.diag() == ex.diag()  # exact Fractions
        for u, w in ((20, 21), (22, 23), (25, 26), (20, 22), (0, 5), (21, 21)):
            assert nproj.entry(u, w) == ex.entry(u, w)
        assert any(x not in (0, 1) for x in nproj.diag())  # twins: a real fractional leak


def test_lift_null_space_refuses_what_it_cannot_prove() -> None:
    sched = fixed_schedule(27, twins_graph(20), 25)
    req = gossip.observer_requests(sched, (0,))
    # a basis of too small a space (the last 20 rounds dropped): its null space is a strict
    # superset of null(K), so the exact checks must fail
    short = [(t, w) for t, w in req if t < 5]
    ech = exact_linalg.ModEchelon(27, P)
    ech.add(gossip.message_rows(sched, short, gossip.ModArith(sched, P), accelerated=True))
    full = gossip_joint_view._modular_rowspace(sched, req, P, observers=(0,))
    assert ech.rank < full.rank
    assert gossip_joint_view._lift_null_space(sched, req, ech) is None
    # time-varying schedules: the invariance argument does not apply
    tv = realised_schedule(9, [[(0, 1), (2, 3)], [(1, 2), (5, 6), (7, 8)], [(3, 4), (0, 8)]] * 3)
    tv_req = gossip.observer_requests(tv, (0,))
    assert (
        gossip_joint_view._lift_null_space(
            tv, tv_req, gossip_joint_view._modular_rowspace(tv, tv_req, P)
        )
        is None
    )


def _force_float_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the float Krylov basis by the identity (numeric rank n > exact rank): the float part
    disagrees with the modular one, as on the random geometric graph of Fig. 1(a)."""

    def identity(schedule, obs, published, rtol):
        return np.eye(schedule.n), 1.0, False

    monkeypatch.setattr(gossip_joint_view, "_krylov_rowspace", identity)


def test_joint_view_nullspace_method_equals_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = fixed_schedule(41, twins_graph(34), 22)  # plain gossip: smaller exact fractions
    assert sched.n > gossip_joint_view.EXACT_MAX_NODES
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
        P_cert, m_cert = gossip_joint_view._projector_block(jv, group)
        P_ex, _ = gossip_joint_view._projector_block(ex, group)
        assert m_cert == 0.0 and np.allclose(P_cert, P_ex, rtol=0, atol=1e-15)
    # group_leakage's own exact joint view is `ex` (computed above, about half of this test's
    # CPU): handed back instead of computed twice; the group bound is still computed from it
    exact_view = gossip_joint_view.joint_view

    def reuse_ex(schedule: Any, observers: Any, **kwargs: Any) -> Any:
        if schedule is sched and kwargs.get("exact") is True and observers in (0, (0,)):
            return ex
        return exact_view(schedule, observers, **kwargs)

    monkeypatch.setattr(gossip_joint_view, "joint_view", reuse_ex)
    assert group_leakage(sched, (34, 35), 0) == pytest.approx(
        group_leakage(sched, (34, 35), 0, exact=True), abs=1e-12
    )
