"""The published Muffliato schedule is recorded as received (compact: the sender's public edges
that did NOT realise) and the accountant rebuilds the realised rounds from the public graph;
ledgers written before hold the expanded form (the realised neighbours of every round). Both
forms of the same seeded job must give every node the same report."""

from __future__ import annotations

from dataclasses import replace

import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.simulate import Simulator, synthetic_data


def _hypercube_neighbours(n: int, v: int) -> list[int]:
    """v's neighbours on the hypercube, independently of the engine (flip one bit)."""
    return [v ^ (1 << b) for b in range(n.bit_length() - 1)]


def _expanded(entry, ids: list[str], T: int):
    """The "schedule" record as the engine wrote it before: {round: sorted realised peers}, the
    rounds with none left out."""
    n = len(ids)
    gone = {(int(r), w) for r, w in entry.params["missing"]}
    v = ids.index(entry.peer)
    realised = {}
    for r in range(T):
        R = sorted(ids[w] for w in _hypercube_neighbours(n, v) if (r, ids[w]) not in gone)
        if R:
            realised[str(r)] = R
    return replace(entry, params={"realised": realised})


def _run(drops: bool):
    n, T = 8, 5
    ids = [f"n{i}" for i in range(n)]
    given = {"graph": "hypercube", "T": T, "sigma": 2.0, "accelerated": False}
    if drops:
        given["round_timeout_s"] = 0.05
    p = get_algorithm("muffliato").validate(given, n)
    data, _ = synthetic_data("muffliato", ids, p, 3)
    sim = Simulator("muffliato", ids, p, data, seed=3, public_seed=3, record="full")
    if drops:  # n5 unreachable for a while: its edges do not realise in some rounds
        sim.down = lambda nid, now: nid == "n5" and 0.003 <= now < 0.2
    res = sim.run()
    assert len(res.outputs) == n
    spec = {
        "job_id": sim.job_id,
        "algorithm": "muffliato",
        "participants": ids,
        "params": p,
        "public_seed": 3,
        "edges": [],
    }
    return ids, T, spec, res


def _report(spec, entries, me):
    acc = get_algorithm("muffliato").accountant
    return (
        acc.losses(spec, entries, me),
        acc.incoming(spec, entries, me),
        acc.baselines(spec, entries, me),
        ma.joint_view(spec, entries, me),
        ma.joint_view(spec, entries, me, outgoing=False),
    )


@pytest.mark.parametrize("drops", [False, True])
def test_compact_and_expanded_schedule_records_give_the_same_report(drops):
    ids, T, spec, res = _run(drops)
    missing = [
        e.params["missing"]
        for v in ids
        for e in res.entries[v]
        if e.event == "schedule" and e.direction == "local"
    ]
    assert len(missing) == len(ids) * (len(ids) - 1)  # every peer's schedule, recorded compact
    assert any(missing) == drops  # empty without drops
    for me in ("n0", "n4", "n5"):  # n5 drops out for a while with drops; n4 is its neighbour
        new = res.entries[me]
        old = [
            _expanded(e, ids, T) if e.event == "schedule" and e.direction == "local" else e
            for e in new
        ]
        got_new, got_old = _report(spec, new, me), _report(spec, old, me)
        assert got_new[3] is not None  # the whole schedule is known: the joint view is shown
        assert got_new == got_old
    if drops:  # the accountant sees the drops: the rebuilt weights differ from the planned ones
        nodrop = _run(False)
        with_drops, _ = ma.sync_schedules(spec, res.entries["n0"], "n0")
        planned, _ = ma.sync_schedules(nodrop[2], nodrop[3].entries["n0"], "n0")
        assert with_drops is not None and planned is not None
        assert with_drops[0].rational != planned[0].rational
