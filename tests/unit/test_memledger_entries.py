"""The memory ledger (`netdp simulate`) hands back its entries as the SQLite ledger reads them:
the same fields, its own id and timestamp, the params after a JSON round trip; compared with the
SQLite ledger on the same commits (an independent implementation)."""

from __future__ import annotations

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
    disk.close()


def test_shared_parameters_read_as_json_reads_them(tmp_path):
    """Equal plain parameters are decoded once and shared by the ledgers given one
    `shared_params` (the public schedules every simulated node records); values that are equal
    keys but not equal JSON (1, 1.0, True; numpy floats; int dict keys) are not confused. Each
    ledger reads back exactly what the SQLite ledger reads back from the same commits."""
    import numpy as np

    values = [
        {"missing": []},
        {"missing": []},
        {"missing": [[3, "node-2"], [4, "node-9"]]},
        {"missing": ((3, "node-2"), (4, "node-9"))},  # tuples: the same JSON as the lists
        {"x": 1},
        {"x": 1.0},
        {"x": True},
        {"x": np.float64(1.0)},
        {"x": [1, [2, [None, "a"]]], "a": {"b": [], "c": {}}},
        {"k": {"1": 2}},
        {"k": {1: 2}},  # an int key: JSON makes it "1"
        {"x": float("inf"), "y": -0.0},
        {"x": 0.0},
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
    want = [e.params for e in disk.entries("j")]
    for mem in mems:
        got = [e.params for e in mem.entries("j")]
        assert got == want
        # the same types as JSON gives back, not only equal values (1 == 1.0 == True)
        assert [[(k, type(x)) for k, x in p.items()] for p in got] == [
            [(k, type(x)) for k, x in p.items()] for p in want
        ]
        assert [str(p) for p in got] == [str(p) for p in want]  # -0.0 stays -0.0
    a, b = (m.entries("j") for m in mems)
    assert a[0].params is b[0].params is a[1].params  # one decoded object for equal values
    assert a[2].params is a[3].params
    assert len({id(p.params) for p in a[4:8]}) == 4 and type(a[5].params["x"]) is float
    assert a[11].params is not a[12].params  # -0.0 is not 0.0
    disk.close()
