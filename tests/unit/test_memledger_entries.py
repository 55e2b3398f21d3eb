"""The memory ledger (`netdp simulate`) hands back its entries as the SQLite ledger reads them:
the same fields, its own id and timestamp, the params after a JSON round trip; compared with the
SQLite ledger on the same commits (an independent implementation)."""

from __future__ import annotations

import json

import pytest

from netdp_node.ledger import Entry, Ledger
from netdp_node.memledger import MemoryLedger


def _commits() -> list[list[Entry]]:
    return [
        [
            Entry(job_id="j", direction="local", event="contribute", params={"call": 0}),
            Entry(
                job_id="j",
                direction="received",
                event="value",
                peer="b",
                kind="value",
                round=3,
                digest="d1",
            ),
        ],
        [
            Entry(
                job_id="j",
                direction="local",
                event="schedule",
                peer="b",
                params={"missing": [(1, "c")], "z": (1.5, None)},  # tuples come back as lists
            )
        ],
    ]


def test_memory_ledger_entries_read_as_the_sqlite_ledger_reads_them(tmp_path):
    spec = {"job_id": "j", "algorithm": "muffliato", "participants": ["a", "b"], "params": {}}
    mem = MemoryLedger("a", clock=lambda: 7.0)
    disk = Ledger(tmp_path / "a", "a")
    for led in (mem, disk):
        led.begin_job("j", "muffliato", spec, True)
        for batch in _commits():
            led.commit(batch)
    got, want = mem.entries("j"), disk.entries("j")
    assert [e.params for e in got] == [e.params for e in want]
    assert got[-1].params == {"missing": [[1, "c"]], "z": [1.5, None]}
    fields = ("job_id", "direction", "event", "peer", "kind", "walk", "epoch", "seq", "round")
    assert [tuple(getattr(e, f) for f in fields) + (e.digest,) for e in got] == [
        tuple(getattr(e, f) for f in fields) + (e.digest,) for e in want
    ]
    assert all(type(e) is Entry and e.ts == 7.0 for e in got)
    assert len({e.id for e in got}) == len(got) and all(e.id > 0 for e in got)
    # the entries recorded without parameters share one empty one, which refuses to change
    (bare,) = [e for e in got if e.event == "value"]
    again = mem.entries("j")[1]
    assert bare.params == {} and json.dumps(bare.params) == "{}" and again.params is bare.params
    with pytest.raises(TypeError):
        bare.params["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        bare.params.update(x=1)
    assert bare.params == {} and [e.params for e in disk.entries("j")][1] == {}
    disk.close()


def test_parameters_read_as_json_reads_them_and_immutable_ones_are_shared(tmp_path):
    """Each ledger reads back exactly what the SQLite ledger reads back from the same commits:
    values that are equal in Python but not equal JSON (1, 1.0, True; numpy floats; int dict
    keys; -0.0) are not confused. A tuple recorded by several entries of the ledgers given one
    `shared_params` (the public schedules every simulated node records) is decoded once; lists
    and dicts are decoded afresh (they may change after they were recorded), and so are tuples
    that hold one."""
    import numpy as np

    shared_tuple = ((3, "node-2"), (4, "node-9"))
    holds_a_list = ((1, ["a"]),)
    changing = [1, 2]
    values = [
        {"missing": []},
        {"missing": []},
        {"missing": [[3, "node-2"], [4, "node-9"]]},
        {"missing": shared_tuple},  # tuples: the same JSON as the lists
        {"x": 1},
        {"x": 1.0},
        {"x": True},
        {"x": np.float64(1.0)},
        {"x": [1, [2, [None, "a"]]], "a": {"b": [], "c": {}}},
        {"k": {"1": 2}},
        {"k": {1: 2}},  # an int key: JSON makes it "1"
        {"x": float("inf"), "y": -0.0},
        {"x": 0.0},
        {"peers": ["n1", "n2"], "missing": {"n2": shared_tuple, "n1": ()}},
        {"t": holds_a_list},
        {"l": changing},
    ]
    shared: dict = {}
    mems = [MemoryLedger(f"m{i}", clock=lambda: 1.0, shared_params=shared) for i in range(2)]
    disk = Ledger(tmp_path / "d", "d")
    spec = {"job_id": "j", "algorithm": "muffliato", "participants": ["a", "b"], "params": {}}
    for led in (*mems, disk):
        led.begin_job("j", "muffliato", spec, True)
        led.commit(
            [Entry(job_id="j", direction="local", event="e", params=dict(v)) for v in values]
        )
    changing.append(3)  # changed after it was recorded, then recorded again
    holds_a_list[0][1].append("b")
    for led in (*mems, disk):
        led.commit(
            [
                Entry(job_id="j", direction="local", event="e", params={"l": changing}),
                Entry(job_id="j", direction="local", event="e", params={"t": holds_a_list}),
            ]
        )
    want = [e.params for e in disk.entries("j")]
    assert want[-2:] == [{"l": [1, 2, 3]}, {"t": [[1, ["a", "b"]]]}]
    for mem in mems:
        got = [e.params for e in mem.entries("j")]
        assert got == want
        # the same types as JSON gives back, not only equal values (1 == 1.0 == True)
        assert [[(k, type(x)) for k, x in p.items()] for p in got] == [
            [(k, type(x)) for k, x in p.items()] for p in want
        ]
        assert [str(p) for p in got] == [str(p) for p in want]  # -0.0 stays -0.0; keys sorted
    a, b = (m.entries("j") for m in mems)
    # one decoded list for the tuple, in every entry and ledger that recorded it
    assert a[3].params["missing"] is b[3].params["missing"] is a[13].params["missing"]["n2"]
    assert a[0].params["missing"] is not a[1].params["missing"]  # lists: decoded afresh
    assert a[14].params["t"] is not b[14].params["t"]  # a tuple holding a list too
    assert type(a[5].params["x"]) is float and type(a[7].params["x"]) is float
    disk.close()
