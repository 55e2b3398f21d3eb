"""The published Muffliato schedules a node reads from the job's bulletin are recorded as received,
one "schedules" record per bulletin batch (the publishers taken and, per publisher, its public edges
that did NOT realise, only for those that have some; or its activation list), and the accountant
rebuilds the realised rounds from the public graph. Ledgers written before hold one "schedule"
record per publisher (compact `missing`, or earlier the expanded `realised`; `activations`): every
form of the same seeded job must give every node the same report, and that report must be the one
computed from a reference schedule built from the nodes' own outputs (not from the bulletin)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.ledger import Entry
from netdp_node.simulate import Simulator, synthetic_data


def _hypercube_neighbours(n: int, v: int) -> list[int]:
    """v's neighbours on the hypercube, independently of the engine (flip one bit)."""
    return [v ^ (1 << b) for b in range(n.bit_length() - 1)]


def _per_publisher(entries: list[Entry]) -> list[Entry]:
    """The ledger as the engine wrote it before: each "schedules" batch record replaced by one
    "schedule" record per publisher, in the batch's order (a publisher absent from the field
    published an empty schedule)."""
    out = []
    for e in entries:
        if e.event != "schedules" or e.direction != "local":
            out.append(e)
            continue
        field = "missing" if "missing" in e.params else "activations"
        for v in e.params["peers"]:
            held = [list(x) for x in e.params[field].get(v, [])]
            out.append(replace(e, event="schedule", peer=v, params={field: held}))
    return out


def _expanded(entry: Entry, ids: list[str], T: int) -> Entry:
    """A compact "schedule" record as the engine wrote it earlier still: {round: sorted realised
    peers}, the rounds with none left out."""
    n = len(ids)
    gone = {(int(r), w) for r, w in entry.params["missing"]}
    v = ids.index(entry.peer)
    realised = {}
    for r in range(T):
        R = sorted(ids[w] for w in _hypercube_neighbours(n, v) if (r, ids[w]) not in gone)
        if R:
            realised[str(r)] = R
    return replace(entry, params={"realised": realised})


def _run(drops: bool, algorithm: str = "muffliato"):
    n, T = 8, 5
    ids = [f"n{i}" for i in range(n)]
    given = {"graph": "hypercube", "sigma": 2.0}
    if algorithm == "muffliato":
        given.update({"T": T, "accelerated": False})
        if drops:
            given["round_timeout_s"] = 0.05
    else:
        given.update({"duration_s": 2.0, "rate": 4.0})
    p = get_algorithm(algorithm).validate(given, n)
    data, _ = synthetic_data(algorithm, ids, p, 3)
    sim = Simulator(algorithm, ids, p, data, seed=3, public_seed=3, record="full")
    if drops:  # n5 unreachable for a while: its edges do not realise in some rounds
        sim.down = lambda nid, now: nid == "n5" and 0.003 <= now < 0.2
    res = sim.run()
    assert len(res.outputs) == n
    spec = {
        "job_id": sim.job_id,
        "algorithm": algorithm,
        "participants": ids,
        "params": p,
        "public_seed": 3,
        "edges": [],
    }
    return ids, T, spec, res


def _report(spec, entries, me):
    acc = get_algorithm(spec["algorithm"]).accountant
    return (
        acc.losses(spec, entries, me),
        acc.incoming(spec, entries, me),
        acc.baselines(spec, entries, me),
        ma.joint_view(spec, entries, me),
        ma.joint_view(spec, entries, me, outgoing=False),
    )


@pytest.mark.parametrize("drops", [False, True])
def test_batch_per_publisher_and_expanded_schedule_records_give_the_same_report(drops):
    ids, T, spec, res = _run(drops)
    for v in ids:
        batches = [e for e in res.entries[v] if e.event == "schedules" and e.direction == "local"]
        assert batches and len(batches) <= len(ids) - 1
        assert not [e for e in res.entries[v] if e.event == "schedule"]
        taken = [p for e in batches for p in e.params["peers"]]
        assert sorted(taken) == sorted(set(ids) - {v})  # every other publisher, once
        held = {p: m for e in batches for p, m in e.params["missing"].items()}
        assert set(held) <= set(taken) and all(held.values())  # only non-empty ones are held
        assert bool(held) == drops  # none without drops
        assert all(e.kind == "schedule" and not e.peer for e in batches)
    for me in ("n0", "n4", "n5"):  # n5 drops out for a while with drops; n4 is its neighbour
        new = res.entries[me]
        per = _per_publisher(new)
        old = [
            _expanded(e, ids, T) if e.event == "schedule" and e.direction == "local" else e
            for e in per
        ]
        got_new = _report(spec, new, me)
        assert got_new[3] is not None  # the whole schedule is known: the joint view is shown
        assert got_new == _report(spec, per, me) == _report(spec, old, me)
    if drops:  # the accountant sees the drops: the rebuilt weights differ from the planned ones
        nodrop = _run(False)
        with_drops, _ = ma.sync_schedules(spec, res.entries["n0"], "n0")
        planned, _ = ma.sync_schedules(nodrop[2], nodrop[3].entries["n0"], "n0")
        assert with_drops is not None and planned is not None
        assert with_drops[0].rational != planned[0].rational


def _reference(ids, res, me, algorithm):
    """`me`'s ledger with the other participants' schedules replaced by records built from their
    OWN outputs (each node's realised neighbours of every round, or its exchanges), not from the
    bulletin, in the one-record-per-publisher form the accountant read first."""
    own = [
        e
        for e in res.entries[me]
        if e.event not in ("schedule", "schedules") or e.direction != "local"
    ]
    extra = []
    for v in ids:
        if v == me:
            continue
        info = res.outputs[v].info
        if algorithm == "muffliato":
            params = {"realised": {str(r): list(R) for r, R in enumerate(info["realised"]) if R}}
        else:
            params = {"activations": [list(a) for a in info["activations"]]}
        extra.append(
            Entry(job_id="sim", direction="local", event="schedule", peer=v, params=params)
        )
    return own + extra


@pytest.mark.parametrize(
    "algorithm,drops",
    [("muffliato", False), ("muffliato", True), ("muffliato-random", False)],
)
def test_every_node_reports_what_the_reference_schedule_gives(algorithm, drops):
    """What the accountant reads: every node's report (guarantee, baselines, both joint views)
    from its own ledger equals the report from a reference built from the other nodes' outputs."""
    ids, _, spec, res = _run(drops, algorithm)
    for me in ids:
        got = _report(spec, res.entries[me], me)
        assert got[3] is not None, me  # the schedule is known: the joint view is shown
        assert got == _report(spec, _reference(ids, res, me, algorithm), me), me


def test_randomized_gossip_records_each_batch_of_activation_lists_once():
    """muffliato-random: every publisher of a batch is named, each with its whole activation list
    (an empty one too), as its own output lists them."""
    ids, _, spec, res = _run(False, "muffliato-random")
    for v in ids:
        batches = [e for e in res.entries[v] if e.event == "schedules"]
        assert batches and not [e for e in res.entries[v] if e.event == "schedule"]
        for e in batches:
            assert set(e.params["activations"]) == set(e.params["peers"])
            for p, acts in e.params["activations"].items():
                assert acts == [list(a) for a in res.outputs[p].info["activations"]]
