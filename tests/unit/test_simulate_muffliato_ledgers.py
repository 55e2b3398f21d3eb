"""`netdp simulate` of Muffliato records in each node's in-memory ledger exactly what the SQLite
ledger records for the same seeded job (the schedules each engine checks once per entry of the
bulletin, the ledgers' shared decoded parameters): every entry of every node, in order, the same
fields and parameters; and the same outputs. The SQLite ledger is an independent implementation
(it stores each entry's parameters as JSON text and decodes them when read)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.simulate import Simulator, synthetic_data

FIELDS = ("job_id", "direction", "event", "peer", "kind", "walk", "epoch", "seq", "round", "digest")


def _run(algorithm: str, params: dict[str, Any], n: int, ledger_dir: Any) -> tuple[Any, Any]:
    ids = [f"node-{i}" for i in range(1, n + 1)]
    p = get_algorithm(algorithm).validate(params, n)
    data, _ = synthetic_data(algorithm, ids, p, 5)

    def down(nid: str, now: float) -> bool:  # node-3 drops out early: some edges never realise
        return nid == "node-3" and 0.001 <= now < 0.05

    sim = Simulator(
        algorithm,
        ids,
        p,
        data,
        seed=5,
        public_seed=5,
        down=down,
        give_up_after=0.02,
        ledger_dir=ledger_dir,
    )
    res = sim.run()
    views = {
        nid: [(tuple(getattr(e, f) for f in FIELDS), e.params) for e in res.entries[nid]]
        for nid in ids
    }
    outs = {nid: np.asarray(o.value).tolist() for nid, o in res.outputs.items()}
    return views, outs


@pytest.mark.parametrize(
    "algorithm,params",
    [
        (
            "muffliato",
            {"graph": "hypercube", "T": 4, "round_timeout_s": 0.01, "accelerated": False},
        ),
        ("muffliato-random", {"duration_s": 0.3, "rate": 20.0}),
    ],
)
def test_memory_and_sqlite_ledgers_hold_the_same_muffliato_views(tmp_path, algorithm, params):
    mem, mem_out = _run(algorithm, params, 16, None)
    disk, disk_out = _run(algorithm, params, 16, tmp_path)
    assert mem_out == disk_out
    assert mem == disk
    field = "missing" if algorithm == "muffliato" else "activations"
    for v in mem.values():  # every node recorded every other node's schedule, once
        batches = [p for (f, p) in v if f[2] == "schedules"]
        taken = [w for p in batches for w in p["peers"]]
        assert len(taken) == len(set(taken)) == 15
    held = [
        m for v in mem.values() for (f, p) in v if f[2] == "schedules" for m in p[field].values()
    ]
    assert any(held)
    if algorithm == "muffliato":  # the drop-out shows in the schedules of its neighbours
        assert any(w == "node-3" for m in held for _, w in m)


def test_a_schedule_check_is_reused_only_for_the_same_bulletin_entry():
    """The engines of one job share the check of a schedule (by sender) only for the very same
    entry object: another entry from the same sender (another process read it, or a bulletin
    served two versions) is checked afresh and refused when it is bad."""
    from netdp_node.algorithms.muffliato.engine import SCHEDULE, MuffliatoSync
    from netdp_node.protocols.base import JobContext, Message, Record, Refused

    n = 8
    ids = [f"n{i}" for i in range(n)]
    p = get_algorithm("muffliato").validate({"graph": "hypercube", "T": 3}, n)
    ctx = JobContext("j", "muffliato", ids[0], tuple(ids), p, 0)
    a, b, c = (
        MuffliatoSync(ctx.for_node(v), np.zeros(p["dim"]), np.random.default_rng(i))
        for i, v in enumerate(ids[:3])
    )
    good = Message(SCHEDULE, scalars={"1:1": 0.0})  # n5's edge to n1 (n5 = 0b101) in round 1
    (rec,) = a.on_published(SCHEDULE, {"n5": good})
    assert isinstance(rec, Record) and rec.params == {
        "peers": ["n5"],
        "missing": {"n5": ((1, "n1"),)},
    }
    (again,) = b.on_published(SCHEDULE, {"n5": good})  # the same entry: the same record
    assert again == rec and again.params["missing"]["n5"] is rec.params["missing"]["n5"]
    bad = Message(SCHEDULE, scalars={"1:1": 0.0, "0:2": 0.0})  # n5 and n2 are not neighbours
    (refused,) = c.on_published(SCHEDULE, {"n5": bad})
    assert refused.event == "bulletin-refused" and "not an edge" in refused.params["reason"]
    with pytest.raises(Refused):  # a second schedule from n5 at b
        b._on_schedule("n5", good)
