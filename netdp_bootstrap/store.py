"""The bootstrap's durable store (SQLite, WAL, synchronous): registrations, versioned topologies,
jobs, released results and the current revocation list. A restarted bootstrap loses nothing.

Protobuf messages are stored in their serialized form (they are the bootstrap's own records)."""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from netdp.v1 import bootstrap_pb2, common_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY, address TEXT NOT NULL, serial TEXT NOT NULL, registered REAL NOT NULL);
CREATE TABLE IF NOT EXISTS topologies (
    version INTEGER PRIMARY KEY AUTOINCREMENT, topology_id TEXT UNIQUE NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT UNIQUE NOT NULL, body BLOB NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT NOT NULL, node_id TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (job_id, node_id));
CREATE TABLE IF NOT EXISTS bulletin (
    job_id TEXT NOT NULL, kind TEXT NOT NULL, node_id TEXT NOT NULL, pos INTEGER NOT NULL,
    digest TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (job_id, kind, node_id),
    UNIQUE (job_id, kind, pos));
CREATE TABLE IF NOT EXISTS crl (number INTEGER PRIMARY KEY, pem BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ledgers (
    node_id TEXT PRIMARY KEY, ledger_id TEXT NOT NULL, created REAL NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_changes (
    node_id TEXT NOT NULL, old_id TEXT NOT NULL, new_id TEXT NOT NULL, new_created REAL NOT NULL,
    at REAL NOT NULL, job_seq INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class LedgerChange:
    """A node registered with another ledger than the one it registered with before: its ledger was
    wiped or replaced. `job_seq`: the latest job then (it does not take part in jobs up to it)."""

    node_id: str
    old_id: str
    new_id: str
    new_created: float
    at: float
    job_seq: int

    def describe(self) -> str:
        def when(t: float) -> str:
            return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))

        created = f", created {when(self.new_created)}" if self.new_created > 0 else ""
        return (
            f"{self.node_id} came back at {when(self.at)} with a new ledger {self.new_id}"
            f"{created} (it had ledger {self.old_id}): what it recorded before is gone; it "
            f"does not take part in jobs up to #{self.job_seq}"
        )


class Store:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.dir / "bootstrap.sqlite", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        if row is None:
            self.db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (secrets.token_hex(8),)
            )
            row = self.db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        #: A random id of this store: job sequence numbers are per store (a node's ledger records
        #: from which number on it joins, per store id).
        self.store_id = str(row[0])

    def close(self) -> None:
        self.db.close()

    # -- nodes ---------------------------------------------------------------------------------
    def register(self, node_id: str, address: str, serial: int) -> common_pb2.NodeInfo:
        now = time.time()
        self.db.execute(
            "INSERT INTO nodes VALUES (?,?,?,?) ON CONFLICT(node_id) DO UPDATE SET"
            " address=excluded.address, serial=excluded.serial, registered=excluded.registered",
            (node_id, address, str(serial), now),
        )
        return common_pb2.NodeInfo(node_id=node_id, address=address, registered_unix=int(now))

    def nodes(self) -> list[tuple[common_pb2.NodeInfo, int]]:
        rows = self.db.execute("SELECT node_id, address, serial, registered FROM nodes").fetchall()
        return [
            (common_pb2.NodeInfo(node_id=r[0], address=r[1], registered_unix=int(r[3])), int(r[2]))
            for r in rows
        ]

    def record_ledger(self, node_id: str, ledger_id: str, created: float) -> LedgerChange | None:
        """Remember the ledger `node_id` registered with; a change from the one it had (a wiped or
        replaced ledger) is recorded and returned."""
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute(
                "SELECT ledger_id FROM ledgers WHERE node_id=?", (node_id,)
            ).fetchone()
            change = None
            if row is not None and row[0] != ledger_id:
                change = LedgerChange(
                    node_id, str(row[0]), ledger_id, created, now, self.current_seq()
                )
                self.db.execute(
                    "INSERT INTO ledger_changes VALUES (?,?,?,?,?,?)",
                    (node_id, change.old_id, ledger_id, created, now, change.job_seq),
                )
            self.db.execute(
                "INSERT INTO ledgers VALUES (?,?,?,?) ON CONFLICT(node_id) DO UPDATE SET"
                " ledger_id=excluded.ledger_id, created=excluded.created, seen=excluded.seen",
                (node_id, ledger_id, created, now),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return change

    def ledger_changes(
        self, node_ids: list[str] | None = None, from_seq: int = 0
    ) -> list[LedgerChange]:
        """Ledger changes (of these nodes), those at or after job `from_seq`, oldest first."""
        rows = self.db.execute(
            "SELECT node_id, old_id, new_id, new_created, at, job_seq FROM"
            " ledger_changes WHERE job_seq >= ? ORDER BY at",
            (from_seq,),
        ).fetchall()
        out = [
            LedgerChange(str(r[0]), str(r[1]), str(r[2]), float(r[3]), float(r[4]), int(r[5]))
            for r in rows
        ]
        return out if node_ids is None else [c for c in out if c.node_id in node_ids]

    # -- topologies and jobs -------------------------------------------------------------------
    def current_seq(self) -> int:
        """The sequence number of the latest job (0: none yet)."""
        return int(self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()[0])

    def job_seq(self, job_id: str) -> int:
        row = self.db.execute("SELECT seq FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return 0 if row is None else int(row[0])

    def next_topology_version(self) -> int:
        row = self.db.execute("SELECT COALESCE(MAX(version), 0) FROM topologies").fetchone()
        return int(row[0]) + 1

    def add_job(self, job: common_pb2.JobSpec) -> int:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(
                "INSERT INTO topologies (version, topology_id, body) VALUES (?,?,?)",
                (job.topology.version, job.topology.topology_id, job.topology.SerializeToString()),
            )
            cur = self.db.execute(
                "INSERT INTO jobs (job_id, body, created) VALUES (?,?,?)",
                (job.job_id, job.SerializeToString(), time.time()),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return int(cur.lastrowid or 0)

    def jobs_after(self, after: int) -> list[tuple[int, common_pb2.JobSpec]]:
        rows = self.db.execute(
            "SELECT seq, body FROM jobs WHERE seq > ? ORDER BY seq", (after,)
        ).fetchall()
        return [(int(r[0]), common_pb2.JobSpec.FromString(r[1])) for r in rows]

    def job(self, job_id: str) -> common_pb2.JobSpec | None:
        row = self.db.execute("SELECT body FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return None if row is None else common_pb2.JobSpec.FromString(row[0])

    # -- results -------------------------------------------------------------------------------
    def put_result(self, r: bootstrap_pb2.NodeResult) -> None:
        self.db.execute(
            "INSERT INTO results VALUES (?,?,?) ON CONFLICT(job_id, node_id) DO UPDATE SET"
            " body=excluded.body",
            (r.job_id, r.node_id, r.SerializeToString()),
        )

    def result(self, job_id: str, node_id: str) -> bootstrap_pb2.NodeResult | None:
        row = self.db.execute(
            "SELECT body FROM results WHERE job_id=? AND node_id=?", (job_id, node_id)
        ).fetchone()
        return None if row is None else bootstrap_pb2.NodeResult.FromString(row[0])

    def results(self, job_id: str) -> list[bootstrap_pb2.NodeResult]:
        rows = self.db.execute(
            "SELECT body FROM results WHERE job_id=? ORDER BY node_id", (job_id,)
        ).fetchall()
        return [bootstrap_pb2.NodeResult.FromString(r[0]) for r in rows]

    # -- the jobs' public bulletins ------------------------------------------------------------
    def publish(self, job_id: str, kind: str, node_id: str, digest: str, body: bytes) -> str | None:
        """Store `node_id`'s entry of `kind` for `job_id` (serialized Envelope, its digest), at the
        next position of that bulletin. Returns None when stored, "same" when an identical entry
        was there already, "other" when another one was (nothing stored then)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute(
                "SELECT digest FROM bulletin WHERE job_id=? AND kind=? AND node_id=?",
                (job_id, kind, node_id),
            ).fetchone()
            if row is not None:
                self.db.execute("COMMIT")
                return "same" if row[0] == digest else "other"
            pos = self.db.execute(
                "SELECT COALESCE(MAX(pos), 0) + 1 FROM bulletin WHERE job_id=? AND kind=?",
                (job_id, kind),
            ).fetchone()[0]
            self.db.execute(
                "INSERT INTO bulletin VALUES (?,?,?,?,?,?)",
                (job_id, kind, node_id, int(pos), digest, body),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return None

    def bulletin(
        self, job_id: str, kind: str, after: int, limit: int
    ) -> tuple[list[tuple[int, str, bytes]], int]:
        """Up to `limit` entries of a bulletin after position `after`, as (position, node, body),
        and how many entries it holds in all."""
        rows = self.db.execute(
            "SELECT pos, node_id, body FROM bulletin WHERE job_id=? AND kind=? AND pos > ?"
            " ORDER BY pos LIMIT ?",
            (job_id, kind, after, limit),
        ).fetchall()
        total = self.db.execute(
            "SELECT COUNT(*) FROM bulletin WHERE job_id=? AND kind=?", (job_id, kind)
        ).fetchone()[0]
        return [(int(r[0]), str(r[1]), bytes(r[2])) for r in rows], int(total)

    # -- revocations ---------------------------------------------------------------------------
    def put_crl(self, number: int, pem: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO crl VALUES (?,?)", (number, pem))

    def crl(self) -> bytes | None:
        row = self.db.execute("SELECT pem FROM crl ORDER BY number DESC LIMIT 1").fetchone()
        return None if row is None else bytes(row[0])
