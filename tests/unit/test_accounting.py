"""Each algorithm's record owns its accountant (netdp issue 14): the registry is the only lookup, and
the Muffliato accountants keep their joint views in an explicit, bounded cache object (no module
state), whose values are pndp_gossip's on the same schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from netdp_node.algorithms import ALGORITHMS, get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import check_budget, per_job_losses
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.privacy import gossip, gossip_joint_view
from netdp_node.privacy import muffliato_accountant as pure


@dataclass(frozen=True)
class _Entry:
    event: str
    peer: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    direction: str = "local"
    job_id: str = "j"


def _ring_job(n: int, T: int) -> tuple[dict[str, Any], list[_Entry]]:
    """A synchronous Muffliato job on the ring where every planned edge was realised in every
    round, as n0's ledger shows it: its own rounds and every other node's published schedule."""
    ids = [f"n{i}" for i in range(n)]
    p = get_algorithm("muffliato").prepare({"graph": "ring", "T": T, "sigma": 0.5}, n)
    spec = {"job_id": "j", "algorithm": "muffliato", "participants": ids, "params": p}

    def nbrs(i: int) -> list[str]:
        return [ids[(i - 1) % n], ids[(i + 1) % n]]

    es = [_Entry("contribute")]
    es += [_Entry("round", params={"round": r, "realised": nbrs(0)}) for r in range(T)]
    es += [
        _Entry("schedule", ids[i], {"realised": {str(r): nbrs(i) for r in range(T)}})
        for i in range(1, n)
    ]
    return spec, es


def test_the_joint_views_are_kept_in_the_cache_given_and_bounded():
    n, T = 6, 3
    spec, es = _ring_job(n, T)
    plain, why = ma.leakage_matrices(spec, es, "n0")
    assert plain is not None, why
    # independently: pndp_gossip's joint view on the same (fixed, fully realised) schedule
    ring = [(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n)]
    sched = gossip.fixed_schedule(n, ring, T, gamma=spec["params"]["gamma"])
    np.testing.assert_allclose(plain[0], gossip_joint_view.joint_view_matrix(sched), atol=1e-9)

    cache = ma.JointViewCache(max_entries=2)
    first = ma.leakage_matrices(spec, es, "n0", cache)
    assert len(cache) == 1
    assert ma.leakage_matrices(spec, es, "n0", cache) is first  # served from the cache
    np.testing.assert_allclose(first[0][0], plain[0], atol=0)
    sizes = []
    for k in range(6):
        other = {**spec, "job_id": f"j{k}"}
        ma.leakage_matrices(other, es, "n0", cache)
        sizes.append(len(cache))
    assert max(sizes) <= cache.max_entries + 1 and sizes[-1] < sizes[-2]  # it started afresh


def test_the_muffliato_records_own_one_cache_and_no_module_holds_one():
    names = ("muffliato", "muffliato-random", "muffliato-gd")
    caches = {id(get_algorithm(a).accountant.baselines.keywords["cache"]) for a in names}
    assert len(caches) == 1
    cache = get_algorithm("muffliato").accountant.baselines.keywords["cache"]
    spec, es = _ring_job(5, 2)
    spec["job_id"] = "owned-by-the-record"
    before = len(cache)
    base = get_algorithm("muffliato").accountant.baselines(spec, es, "n0")
    assert ma.JOINT_VIEW in base and len(cache) in (before + 1, 1)
    for module in (ma, pure):
        assert not [k for k, v in vars(module).items() if isinstance(v, dict) and k.isupper()]


def test_an_algorithm_without_a_record_has_no_accountant():
    spec = {"algorithm": "nope", "participants": ["a", "b"], "params": {}}
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        per_job_losses(JobView("j", spec, []), "a")
    check = check_budget([], spec, "a", 1.0, 1e-5)
    assert not check.ok and "unknown algorithm 'nope'" in check.reason


def test_every_record_has_its_accountant():
    for name, record in ALGORITHMS.items():
        assert record.accountant.theorem, name
        assert callable(record.accountant.losses) and callable(record.accountant.prospective)
