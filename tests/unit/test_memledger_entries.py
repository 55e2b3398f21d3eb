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
