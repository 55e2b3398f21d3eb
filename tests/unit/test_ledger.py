"""The ledger: durable, append-only, owned by one node, never holding raw data."""

from __future__ import annotations

import sqlite3

import pytest

from netdp_node.errors import LedgerError
from netdp_node.ledger import Entry, Ledger

pytestmark = pytest.mark.timeout(30)


def test_commit_and_read_back(tmp_path):
    led = Ledger(tmp_path, "n1")
    assert led.begin_job("j", "ring-sum", {"participants": ["n1", "n2"]}, True)
    assert not led.begin_job("j", "ring-sum", {}, True)  # idempotent
    led.commit(
        [
            Entry(
                "j", "received", "token", peer="n2", kind="token", walk="ring", seq=1, digest="abc"
            ),
            Entry("j", "local", "contribute", params={"sigma": 2.0, "data": True}),
        ],
        job_update={"job_id": "j", "state": "done", "result": {"value": [1.0]}},
    )
    led.close()
    ro = Ledger.open_readonly(tmp_path)
    assert ro.node_id == "n1"
    es = ro.entries("j")
    assert [e.event for e in es] == ["token", "contribute"]
    assert es[1].params == {"sigma": 2.0, "data": True}
    assert [e.event for e in ro.entries("j", events=("contribute", "fenced"))] == ["contribute"]
    assert ro.entries("other", events=("token",)) == []
    assert ro.received_digest("j", "n2", ("token", "ring", 0, 1, 0)) == "abc"
    assert ro.received_digest("j", "n2", ("token", "ring", 0, 2, 0)) is None
    job = ro.job("j")
    assert job is not None and job.state == "done" and job.result == {"value": [1.0]}
    ro.close()


def test_append_only(tmp_path):
    led = Ledger(tmp_path, "n1")
    led.commit([Entry("j", "local", "contribute")])
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE entries SET event='x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM entries")
    db.close()


def test_same_received_message_twice_is_refused(tmp_path):
    led = Ledger(tmp_path, "n1")
    e = Entry("j", "received", "token", peer="n2", kind="token", walk="ring", seq=1, digest="a")
    led.commit([e])
    with pytest.raises(LedgerError):
        led.commit([e, Entry("j", "local", "contribute")])
    # the whole transaction was rolled back
    assert [x.event for x in led.entries("j")] == ["token"]


def test_owner_is_checked(tmp_path):
    Ledger(tmp_path, "n1").close()
    with pytest.raises(LedgerError, match="belongs to node 'n1'"):
        Ledger(tmp_path, "n2")


def test_wal_and_synchronous_full(tmp_path):
    led = Ledger(tmp_path, "n1")
    assert led._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_readonly_missing(tmp_path):
    with pytest.raises(LedgerError, match="no ledger"):
        Ledger.open_readonly(tmp_path / "nope")
