"""The node's ledger: its own view of every job, durable and append-only (SQLite, WAL, synchronous).

What it holds: every message the node sent or received (peer, kind, walk/seq/round, a SHA-256 digest
of the content so that a re-send can be told from a conflict) and every local step with the public
noise parameters it used (mechanism, sigma, sensitivity, whether data was included). What it never
holds: the node's raw data or noise samples; a stolen ledger must not undo the noise.

Each ledger has a random id drawn when it is created (`ledger_id`, in `meta` with its creation
time): the node gives it when it registers, so that the bootstrap can tell an identity that came
back with another ledger, and the ledger records from which of the bootstrap's jobs on it may take
part (`join_after`): a job that started before the ledger existed is one it cannot know the
earlier steps of. `acked` entries (`note`) record that a peer acknowledged a sent message.

Beside the append-only view, the `custody` table holds the copies of tokens this node forwarded and
must keep until the receiver handed them on (token walks, `Keep`/`Drop` actions): the same values
the receiver saw, deleted once no longer needed.

Each protocol step is durable (`PRAGMA synchronous=FULL`) before the message that caused it is
acknowledged and before anything it causes is sent, so a node killed at any instant never forgets
privacy it already spent. `entries` rows cannot be updated or deleted (SQLite triggers refuse it).

Group commit (`stage`): the runtime stages each protocol step; at the next iteration of the event
loop every step staged meanwhile is written, in staging order, in ONE transaction (one fsync), and
only then is each step's `done` callback called and its waiters released. A deferred step
(`defer=True`: a receipt the engine lets wait, `Engine.defer_receipts`) waits for the next commit
of a step that is not deferred, or `flush_soon`, or DEFER_MAX_S at the latest. Every other write
(`commit`, `begin_job`, `set_job_state`) and every read first writes what is staged, so nothing is
ever seen or written out of order; `received_digest` also sees staged steps (a re-send of a staged
message is recognised and waits for it, `staged_future`). Another process reading the file (the
privacy report, the audit) sees committed steps only.

Off the event loop (`executor`: `write_pool`, with `netdp node --ledger-threads N`; by default
nodes commit on their loop): a batch's rows are
inserted on the loop, and its COMMIT (the fsync) runs in a worker thread of a pool shared by every
ledger of the process, so that the loop keeps serving while the fsync runs and the fsyncs of several
ledgers overlap (one thread hop per batch; a refused step is rolled back to its savepoint and the
rest of the batch keeps its one commit). The rules
stay the same: one write in flight per ledger, the steps staged meanwhile go in the next batch, in
order; each step's `done` and waiters are settled on the loop once its transaction committed, and
a received message stays in the staged index until the committed index holds it (both updated on
the loop). Every synchronous write or read first waits for the write in flight and settles it (a
lock per ledger serialises the connection's use by the loop and the worker). The lock is held only
inside a `with` on one thread, never handed from the loop to the worker: the COMMIT of the batch
in flight is done once, by whoever takes the lock first, the worker or the loop when it must wait
for it; so a worker that never runs (a pool shutting down) or a loop interrupted between inserting
and handing over (a signal, a cancellation) cannot leave the lock held, and `close` always returns
(each batch either committed and settled, or never acknowledged). Without an executor (the
simulator: a virtual clock, no threads) everything runs on the loop as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netdp_node.errors import LedgerError
from netdp_node.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost

log = logging.getLogger("netdp.ledger")

SCHEMA_VERSION = 1
LEDGER_FILE = "ledger.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    algorithm TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    state TEXT NOT NULL,
    contributed INTEGER NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    result_json TEXT,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    job_id TEXT NOT NULL,
    direction TEXT NOT NULL CHECK (direction IN ('sent', 'received', 'local')),
    event TEXT NOT NULL,
    peer TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT '',
    walk TEXT NOT NULL DEFAULT '',
    epoch INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL DEFAULT 0,
    round INTEGER NOT NULL DEFAULT 0,
    digest TEXT NOT NULL DEFAULT '',
    params_json TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX IF NOT EXISTS received_once
    ON entries (job_id, peer, kind, walk, epoch, seq, round) WHERE direction = 'received';
CREATE INDEX IF NOT EXISTS entries_job ON entries (job_id);
CREATE TABLE IF NOT EXISTS custody (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    payload BLOB NOT NULL,
    shape_json TEXT NOT NULL,
    meta_json TEXT NOT NULL,
    PRIMARY KEY (job_id, key)
);
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


@dataclass(frozen=True)
class Entry:
    """One row of the view. `direction` is sent / received / local."""

    job_id: str
    direction: str
    event: str
    peer: str = ""
    kind: str = ""
    walk: str = ""
    epoch: int = 0
    seq: int = 0
    round: int = 0
    digest: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    ts: float = 0.0
    id: int = 0


@dataclass
class _Step:
    """One protocol step's ledger work (`Ledger.commit` / `Ledger.stage`)."""

    entries: Sequence[Entry]
    job_update: dict[str, Any] | None = None
    keep: Sequence[tuple[str, str, Any, dict[str, Any]]] = ()
    drop: Sequence[tuple[str, str]] = ()
    # staged steps only: called (soon, on the loop) with None once written, or the LedgerError
    done: Callable[[LedgerError | None], None] | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None


@dataclass
class _InFlight:
    """A batch of staged steps whose transaction is open, its COMMIT handed to a worker thread
    (`Ledger.executor`). Whoever holds the ledger's lock first commits it (`Ledger._commit`): the
    worker, or the loop when it must wait for the write (a read, a write, `close`); `result` is
    then set, under the lock, and the other finds it done."""

    steps: list[_Step]
    errors: list[LedgerError | None]  # each step's error at insertion, or None
    open_: bool  # the transaction is open (to be committed)
    result: list[LedgerError | None] | None = None  # once committed (or given up): each error


#: Worker threads of the ledger write pool, shared by every ledger of a process (`write_pool`).
WRITE_THREADS = 4

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def write_pool(threads: int = WRITE_THREADS) -> ThreadPoolExecutor:
    """The process's pool of `threads` ledger write threads (one per size, made once): every ledger
    of the process that commits off its event loop shares it, however many nodes it hosts."""
    if threads < 1:
        raise ValueError(f"a ledger write pool needs at least one thread, not {threads}")
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix="netdp-ledger"
            )
        return pool


@dataclass(frozen=True)
class JobRow:
    job_id: str
    algorithm: str
    spec: dict[str, Any]
    state: str
    contributed: bool
    started: float
    finished: float | None
    result: dict[str, Any] | None
    detail: str


def _identity(e: Entry) -> tuple[str, str, str, int, int, int]:
    """A received message's identity within its job: (peer, kind, walk, epoch, seq, round)."""
    return (e.peer, e.kind, e.walk, e.epoch, e.seq, e.round)


def _params_json(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True) if params else "{}"


_INSERT_ENTRY = (
    "INSERT INTO entries (ts, job_id, direction, event, peer, kind, walk, epoch, seq, round,"
    " digest, params_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _entry_row(e: Entry, now: float) -> tuple[Any, ...]:
    return (
        e.ts or now,
        e.job_id,
        e.direction,
        e.event,
        e.peer,
        e.kind,
        e.walk,
        e.epoch,
        e.seq,
        e.round,
        e.digest,
        _params_json(e.params),
    )


class Ledger:
    """A node's ledger in `directory/ledger.sqlite`. One writer (the daemon); readers may be many."""

    #: the longest a deferred step (`stage(defer=True)`) stays staged before it is committed
    DEFER_MAX_S = 0.05

    def __init__(
        self,
        directory: str | Path,
        node_id: str,
        *,
        readonly: bool = False,
        executor: Executor | None = None,
    ) -> None:
        """`executor`: run the group commit's COMMITs (fsyncs) in it (e.g. `write_pool()`), off
        the event loop; None: everything on the loop (the simulator)."""
        self.directory = Path(directory)
        self.path = self.directory / LEDGER_FILE
        self.readonly = readonly
        self.executor = None if readonly else executor
        # the connection's user: the loop, or the worker committing a batch (`executor`); each
        # holds it only inside a `with` on its own thread, never across threads or awaits
        self._lock = threading.Lock()
        self._inflight: _InFlight | None = None
        self._flush_pending = False  # a flush asked for while a batch is in flight
        offload = self.executor is not None
        try:
            if readonly:
                if not self.path.exists():
                    raise LedgerError(f"no ledger at {self.path}")
                self._db = sqlite3.connect(
                    f"file:{self.path}?mode=ro", uri=True, isolation_level=None
                )
            else:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=not offload
                )
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open ledger {self.path}: {e}") from e
        self._db.execute("PRAGMA busy_timeout=5000")
        self.node_id = self._check_owner(node_id)
        # job id -> {(peer, kind, walk, epoch, seq, round): digest} of the received messages, loaded
        # from the table once per job, then kept up to date by `commit` (this connection is the only
        # writer): the duplicate check of every incoming message costs no query.
        self._received: dict[str, dict[tuple[str, str, str, int, int, int], str]] = {}
        # group commit: steps staged and not yet written, in order, and the staged step of each
        # received message not yet written: (job, peer, kind, walk, epoch, seq, round) -> (digest,
        # step)
        self._staged: list[_Step] = []
        self._staged_received: dict[
            tuple[str, str, str, str, int, int, int], tuple[str, _Step]
        ] = {}
        self._flush_scheduled = False
        self._deferred: asyncio.TimerHandle | None = None

    def _check_owner(self, node_id: str) -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key='node_id'").fetchone()
        if row is None:
            if self.readonly:
                raise LedgerError(f"ledger {self.path} has no owner recorded")
            with self._tx():
                self._db.execute("INSERT INTO meta VALUES ('node_id', ?)", (node_id,))
                self._db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
                self._db.execute("INSERT INTO meta VALUES ('created', ?)", (str(time.time()),))
                self._db.execute(
                    "INSERT INTO meta VALUES ('ledger_id', ?)", (secrets.token_hex(16),)
                )
                self._db.execute("INSERT INTO meta VALUES ('acks_from', '1')")
            return node_id
        owner = str(row[0])
        if node_id and owner != node_id:
            raise LedgerError(f"ledger {self.path} belongs to node {owner!r}, not {node_id!r}")
        if not self.readonly and self._meta("ledger_id") is None:
            # a ledger from before ledger ids: it gets one now; it is not new (it may have known
            # every job of its node), and acknowledgements are recorded from its next entry on
            with self._tx():
                nxt = self._db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM entries").fetchone()
                self._db.execute(
                    "INSERT INTO meta VALUES ('ledger_id', ?)", (secrets.token_hex(16),)
                )
                self._db.execute("INSERT INTO meta VALUES ('upgraded', ?)", (str(time.time()),))
                self._db.execute("INSERT INTO meta VALUES ('acks_from', ?)", (str(nxt[0]),))
        return owner

    def _meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    # -- identity of the ledger -------------------------------------------------------------------
    @property
    def ledger_id(self) -> str:
        """A random id drawn when this ledger was created: a node that comes back with another id
        has lost (or replaced) its ledger, and with it the record of what it took part in."""
        return self._meta("ledger_id") or ""

    @property
    def created(self) -> float:
        """When this ledger was created (unix seconds)."""
        return float(self._meta("created") or 0.0)

    @property
    def acks_from(self) -> int | None:
        """The first entry id from which this ledger records acknowledged sends (`acked` entries,
        see `note`); None for a ledger that does not record them."""
        v = self._meta("acks_from")
        return None if v is None else int(v)

    def record_budget(self, epsilon: float | None, delta: float) -> None:
        """Record the privacy budget the node runs with (`netdp node --budget-epsilon`; None: no
        budget), so that `netdp privacy report` can show what is spent and what remains. The
        latest start's budget wins."""
        value = json.dumps(None if epsilon is None else {"epsilon": epsilon, "delta": delta})
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('budget', ?)", (value,))

    @property
    def budget(self) -> tuple[float, float] | None:
        """The budget (ε, δ) recorded at the node's last start, or None (none, or not recorded)."""
        v = self._meta("budget")
        b = None if v is None else json.loads(v)
        return None if not b else (float(b["epsilon"]), float(b["delta"]))

    def join_after(self, store_id: str, job_seq: int) -> tuple[int, bool]:
        """The highest job sequence number of the bootstrap store `store_id` that this ledger
        started after: recorded at the first registration with that store (`job_seq`, the store's
        latest job then), and the same ever after. A job at or below it that the ledger does not
        already hold started before the ledger knew it: the node does not take part in it.
        (A ledger from before ledger ids keeps joining every job of the first store it meets.)
        Returns (that number, whether it was recorded now)."""
        key = f"join_after:{store_id}"
        self.flush()
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            if row is not None:
                return int(row[0]), False
            first = db.execute("SELECT 1 FROM meta WHERE key LIKE 'join_after:%'").fetchone()
            upgraded = db.execute("SELECT 1 FROM meta WHERE key='upgraded'").fetchone()
            value = 0 if upgraded is not None and first is None else int(job_seq)
            db.execute("INSERT INTO meta VALUES (?, ?)", (key, str(value)))
        return value, True

    @classmethod
    def open_readonly(cls, directory: str | Path) -> Ledger:
        return cls(directory, "", readonly=True)

    def close(self) -> None:
        """Close; staged steps are written first (if the event loop has stopped, nothing they cause
        happens any more: as after a crash right after a commit)."""
        try:
            self.flush()  # (waits for a write in flight)
        finally:
            with self._lock:
                self._db.close()

    # -- transactions ---------------------------------------------------------------------------
    class _Tx:
        """One transaction, holding the ledger's lock (`_lock`) throughout."""

        def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
            self.db = db
            self.lock = lock

        def __enter__(self) -> sqlite3.Connection:
            self.lock.acquire()
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.lock.release()
                raise
            return self.db

        def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
            try:
                if exc_type is None:
                    self.db.execute("COMMIT")
                else:
                    self.db.execute("ROLLBACK")
            finally:
                self.lock.release()

    def _tx(self) -> Ledger._Tx:
        return Ledger._Tx(self._db, self._lock)

    # -- writing --------------------------------------------------------------------------------
    def commit(
        self,
        entries: Sequence[Entry],
        *,
        job_update: dict[str, Any] | None = None,
        keep: Sequence[tuple[str, str, Any, dict[str, Any]]] = (),
        drop: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Append `entries` (and optionally update the job's summary row, store custody copies
        `keep` = [(job_id, key, ndarray, meta)] and delete `drop` = [(job_id, key)]) in one durable
        transaction, now (after the staged steps).

        Raises LedgerError if a received message with the same identity is already stored (the
        runtime checks `received_digest` first, so this only fires on a race)."""
        self.flush()
        self._write([_Step(entries, job_update, keep, drop)])

    # -- group commit ---------------------------------------------------------------------------
    def stage(
        self,
        entries: Sequence[Entry],
        *,
        job_update: dict[str, Any] | None = None,
        keep: Sequence[tuple[str, str, Any, dict[str, Any]]] = (),
        drop: Sequence[tuple[str, str]] = (),
        defer: bool = False,
        done: Callable[[LedgerError | None], None] | None = None,
    ) -> asyncio.Future[None]:
        """Stage one step (the arguments of `commit`) for the next group commit. Once it is written,
        or refused (LedgerError: then nothing of the step was written), `done(error)` is called on
        the loop and the returned future is settled; cancelling the future (a waiter that gave up)
        changes nothing else. The commit runs at the next iteration of the event loop (with an
        `executor`: once the write in flight, if any, is over), or, with `defer`, at the next
        commit of a step that is not deferred, at `flush_soon`, or after DEFER_MAX_S at the
        latest. Call on the event loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        step = _Step(list(entries), job_update, list(keep), list(drop), done, [fut], loop)
        self._staged.append(step)
        for e in step.entries:
            if e.direction == "received":
                key = (e.job_id, *_identity(e))
                self._staged_received[key] = (e.digest, step)
        if not defer:
            self.flush_soon()
        elif self._deferred is None:
            self._deferred = loop.call_later(self.DEFER_MAX_S, self._deferred_flush)
        return fut

    def note(self, entries: Sequence[Entry]) -> None:
        """Append `entries` with the next commit, at the latest after DEFER_MAX_S; nothing waits
        for them (facts whose loss in a crash loses nothing but themselves, e.g. that a peer
        acknowledged a message). Call on the event loop."""
        self._staged.append(_Step(list(entries)))
        if self._deferred is None and not self._flush_scheduled:
            self._deferred = asyncio.get_running_loop().call_later(
                self.DEFER_MAX_S, self._deferred_flush
            )

    def flush_soon(self) -> None:
        """Commit what is staged at the next iteration of the event loop (off the loop: once the
        write in flight, if any, is over)."""
        if not self._staged:
            return
        if self._inflight is not None:
            self._flush_pending = True  # `_written` starts the next batch
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush_now()

    def _deferred_flush(self) -> None:
        self._deferred = None
        self._flush_now()

    def _flush_now(self) -> None:
        """The loop's own flush callbacks: write here, or hand the batch to the executor."""
        if self.executor is None:
            self.flush(direct=True)
        elif self._inflight is not None:
            self._flush_pending = True
        else:
            self._start_write()

    def _take(self) -> list[_Step]:
        """Every staged step, no longer staged (their received messages stay in the staged index
        until they are settled)."""
        batch, self._staged = self._staged, []
        self._flush_pending = False
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        return batch

    def _start_write(self) -> None:
        """Write what is staged into a transaction here, on the loop (the inserts cost CPU, not
        I/O), and hand its COMMIT (the fsync) to the executor; no write is in flight. The steps
        are settled on the loop once it committed (`_written`), or by the next synchronous flush.
        (One thread hop per batch: a worker that had to take the GIL back after every statement
        would wait for the busy loop each time.)"""
        assert self.executor is not None and self._inflight is None
        batch = self._take()
        if not batch:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            try:
                errors, open_ = self._insert_batch(batch)
            except BaseException:  # interrupted (a signal): nothing of the batch is written
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise
            # from here on the open transaction is known: whatever interrupts the loop now,
            # the next flush or `close` commits it (`_settle_inflight`), the worker or not
            inflight = self._inflight = _InFlight(batch, errors, open_)
        try:
            fut = self.executor.submit(self._commit, inflight)
        except RuntimeError:  # the pool is shut down (the process is exiting): commit it here
            self._settle_inflight(direct=True)
            return

        def written(_: object) -> None:  # in the worker thread (or where the work was cancelled)
            try:
                loop.call_soon_threadsafe(self._written, inflight)
            except RuntimeError:  # the loop is closed: the synchronous flush of close() settles
                pass

        fut.add_done_callback(written)

    def _written(self, inflight: _InFlight) -> None:
        """On the loop, once the batch in flight is written: settle it, then hand on the next."""
        if self._inflight is not inflight:
            return  # settled already by a synchronous flush
        self._settle_inflight(direct=True)
        if self._flush_pending and self._staged:
            self._start_write()
        self._flush_pending = False

    def _settle_inflight(self, *, direct: bool) -> None:
        """Commit the batch in flight (if any) unless its worker did (waiting for a COMMIT the
        worker is running, never for a worker that has not started: a pool shutting down may
        never run it), then settle its steps, on the calling thread."""
        inflight = self._inflight
        if inflight is None:
            return
        try:
            errors = self._commit(inflight)
        except Exception as e:  # not a ledger error (a bug): none of the batch is known written
            log.exception("ledger write failed (%s)", self.path)
            errors = [LedgerError(f"ledger write failed ({self.path}): {e}")] * len(inflight.steps)
        self._inflight = None
        self._settle(inflight.steps, errors, direct=direct, indexed=False)

    def flush(self, *, direct: bool = False) -> None:
        """Write every staged step now, in one transaction, and settle their futures (after the
        write in flight, if any: it is waited for and settled first). Each step's `done` is called
        through the loop; `direct` (the loop's own flush callbacks, which run nothing else) calls
        it at once, saving a loop callback per step."""
        self._settle_inflight(direct=direct)
        batch = self._take()
        if not batch:
            return
        self._settle(batch, self._write_batch(batch, self._write), direct=direct, indexed=True)

    def _write_batch(
        self, batch: list[_Step], write: Callable[[Sequence[_Step]], None]
    ) -> list[LedgerError | None]:
        """Write `batch` with `write` in one transaction; if that is refused, each step on its
        own (one refused step must not take the others down). Each step's error or None."""
        try:
            write(batch)
            return [None] * len(batch)
        except LedgerError:
            errors: list[LedgerError | None] = []
            for step in batch:
                try:
                    write([step])
                    errors.append(None)
                except LedgerError as e:
                    errors.append(e)
            return errors

    def _settle(
        self,
        batch: list[_Step],
        errors: list[LedgerError | None],
        *,
        direct: bool,
        indexed: bool,
    ) -> None:
        """After `batch` was written (each step's error or None), on the loop: the committed
        received messages go to the duplicate index (unless `indexed` already) before they leave
        the staged one, then each step's `done` and waiters are settled, in order."""
        if not indexed:
            self._index([s for s, err in zip(batch, errors) if err is None])
        for step, err in zip(batch, errors):
            for entry in step.entries:
                if entry.direction == "received":
                    key = (entry.job_id, *_identity(entry))
                    got = self._staged_received.get(key)
                    if got is not None and got[1] is step:
                        del self._staged_received[key]
            loop = step.loop
            if loop is None or loop.is_closed():
                continue  # (a ledger closed after its event loop: the steps are written all the same)
            if err is not None:
                log.error("ledger write failed (%s): %s", self.path, err)
            if step.done is not None:
                if direct:
                    try:
                        step.done(err)
                    except Exception:  # as the loop would: log it, go on
                        log.exception("a staged step's callback failed")
                else:
                    loop.call_soon(step.done, err)
            for fut in step.waiters:
                if fut.done():
                    continue
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)
                    fut.exception()  # retrieved: `done` handles it; a waiter still gets it

    def staged_future(
        self, job_id: str, peer: str, key: tuple[str, str, int, int, int]
    ) -> asyncio.Future[None] | None:
        """A new future settled when the staged step holding this received message is written
        (None if it is not staged: then it is durable already)."""
        got = self._staged_received.get((job_id, peer, *key))
        if got is None:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got[1].waiters.append(fut)
        return fut

    def _write(self, steps: Sequence[_Step]) -> None:
        """Write `steps` in order in one durable transaction; the received-message index learns
        their received entries once it committed."""
        self._write_entries(steps)
        self._index(steps)

    def _index(self, steps: Sequence[_Step]) -> None:
        """The duplicate index learns the received entries of committed `steps` (on the loop)."""
        for step in steps:
            for entry in step.entries:
                if entry.direction == "received":
                    index = self._received.get(entry.job_id)
                    if index is not None:
                        index[_identity(entry)] = entry.digest

    def _write_entries(self, steps: Sequence[_Step]) -> None:
        """Write `steps` in order in one durable transaction, nothing else."""
        try:
            with self._tx() as db:
                self._insert(db, steps, time.time())
        except sqlite3.IntegrityError as e:
            raise LedgerError(f"ledger refused the entries: {e}") from e
        except sqlite3.Error as e:
            raise LedgerError(f"ledger write failed ({self.path}): {e}") from e

    def _insert(self, db: sqlite3.Connection, steps: Sequence[_Step], now: float) -> None:
        """`steps` into the open transaction: every step's entries in one statement (staging
        order is id order), then the steps' job rows and custody changes in order."""
        rows = [_entry_row(e, now) for step in steps for e in step.entries]
        if rows:
            db.executemany(_INSERT_ENTRY, rows)
        for step in steps:
            self._write_step(db, step)

    def _error(self, e: BaseException) -> LedgerError:
        if isinstance(e, sqlite3.IntegrityError):
            return LedgerError(f"ledger refused the entries: {e}")
        return LedgerError(f"ledger write failed ({self.path}): {e}")

    def _insert_batch(self, batch: Sequence[_Step]) -> tuple[list[LedgerError | None], bool]:
        """Begin a transaction and insert `batch` into it (with the lock held): each step's error
        or None, and whether the transaction is open (to be committed: `_commit_open`). A refused
        step is rolled back to its savepoint; the others stay in the one transaction."""
        db, now = self._db, time.time()
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            return [self._error(e)] * len(batch), False
        try:
            try:
                self._insert(db, batch, now)
                return [None] * len(batch), True
            except Exception:
                db.execute("ROLLBACK")  # one refused step must not take the others down
                db.execute("BEGIN IMMEDIATE")
            errors: list[LedgerError | None] = []
            for step in batch:
                db.execute("SAVEPOINT step")
                try:
                    self._insert(db, [step], now)
                    errors.append(None)
                except Exception as e:
                    db.execute("ROLLBACK TO step")
                    errors.append(self._error(e))
                db.execute("RELEASE step")
            return errors, True
        except sqlite3.Error as e:  # the transaction itself failed
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            return [self._error(e)] * len(batch), False

    def _commit(self, inflight: _InFlight) -> list[LedgerError | None]:
        """COMMIT the transaction `_insert_batch` left open for `inflight` (in a worker thread:
        the fsync), once: under the ledger's lock, by whichever thread comes first (the worker,
        or the loop that must wait for it). Each step's error or None."""
        with self._lock:
            if inflight.result is None:
                inflight.result = self._commit_open(inflight.errors, inflight.open_)
            return inflight.result

    def _commit_open(
        self, errors: list[LedgerError | None], open_: bool
    ) -> list[LedgerError | None]:
        """COMMIT the transaction `_insert_batch` left open (call with the ledger's lock held).
        Each step's error or None."""
        if open_:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                err = self._error(e)
                return [old or err for old in errors]
        return errors

    def _write_step(self, db: sqlite3.Connection, step: _Step) -> None:
        """A step's job row and custody changes (its entries are written by `_write`)."""
        job_update, keep, drop = step.job_update, step.keep, step.drop
        if job_update:
            self._update_job(db, **job_update)
        for job_id, key in drop:
            db.execute("DELETE FROM custody WHERE job_id=? AND key=?", (job_id, key))
        if keep:
            db.executemany(
                "INSERT OR REPLACE INTO custody (job_id, key, payload, shape_json,"
                " meta_json) VALUES (?,?,?,?,?)",
                [
                    (
                        job_id,
                        key,
                        np.ascontiguousarray(arr, dtype="<f8").tobytes(),
                        json.dumps(list(np.shape(arr))),
                        json.dumps(meta, sort_keys=True),
                    )
                    for job_id, key, arr, meta in keep
                ],
            )

    def begin_job(
        self,
        job_id: str,
        algorithm: str,
        spec: dict[str, Any],
        contributed: bool,
        entries: Iterable[Entry] = (),
        *,
        state: str = "running",
        detail: str = "",
    ) -> bool:
        """Record that this node takes part in a job (or, with state="failed" and a `detail`, that
        it does not: in one transaction). Returns False if it was already recorded (a restarted
        node resuming), True if new."""
        self.flush()
        with self._tx() as db:
            row = db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is not None:
                return False
            db.execute(
                "INSERT INTO jobs (job_id, algorithm, spec_json, state, contributed, started,"
                " finished, detail) VALUES (?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    algorithm,
                    json.dumps(spec, sort_keys=True),
                    state,
                    int(contributed),
                    time.time(),
                    time.time() if state in ("done", "failed") else None,
                    detail,
                ),
            )
            now = time.time()
            db.executemany(
                "INSERT INTO entries (ts, job_id, direction, event, peer, params_json)"
                " VALUES (?,?,?,?,?,?)",
                [
                    (
                        now,
                        e.job_id,
                        e.direction,
                        e.event,
                        e.peer,
                        json.dumps(e.params, sort_keys=True),
                    )
                    for e in entries
                ],
            )
        return True

    def set_job_state(
        self, job_id: str, state: str, *, result: dict[str, Any] | None = None, detail: str = ""
    ) -> None:
        self.flush()
        with self._tx() as db:
            self._update_job(db, job_id=job_id, state=state, result=result, detail=detail)

    @staticmethod
    def _update_job(
        db: sqlite3.Connection,
        *,
        job_id: str,
        state: str,
        result: dict[str, Any] | None = None,
        detail: str = "",
    ) -> None:
        finished = time.time() if state in ("done", "failed") else None
        db.execute(
            "UPDATE jobs SET state=?, finished=COALESCE(?, finished),"
            " result_json=COALESCE(?, result_json), detail=? WHERE job_id=?",
            (state, finished, json.dumps(result) if result is not None else None, detail, job_id),
        )

    # -- reading --------------------------------------------------------------------------------
    def received_digest(
        self, job_id: str, peer: str, key: tuple[str, str, int, int, int]
    ) -> str | None:
        kind, walk, epoch, seq, rnd = key
        staged = self._staged_received.get((job_id, peer, *key))
        if staged is not None:
            return staged[0]
        if not self.readonly:
            index = self._received.get(job_id)
            if index is None:
                # a write in flight is committed first (here, if its worker has not yet): its
                # rows must not be read before they are durable; its steps are still in the
                # staged index, and join this one when they are settled
                if self._inflight is not None:
                    self._commit(self._inflight)
                with self._lock:
                    index = self._received[job_id] = {
                        (r[0], r[1], r[2], r[3], r[4], r[5]): str(r[6])
                        for r in self._db.execute(
                            "SELECT peer, kind, walk, epoch, seq, round, digest FROM entries"
                            " WHERE direction='received' AND job_id=?",
                            (job_id,),
                        )
                    }
            return index.get((peer, kind, walk, epoch, seq, rnd))
        row = self._db.execute(
            "SELECT digest FROM entries WHERE direction='received' AND job_id=? AND peer=? AND kind=?"
            " AND walk=? AND epoch=? AND seq=? AND round=?",
            (job_id, peer, kind, walk, epoch, seq, rnd),
        ).fetchone()
        return None if row is None else str(row[0])

    def kept(self, job_id: str) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
        """The custody copies of a job: key -> (payload, meta)."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT key, payload, shape_json, meta_json FROM custody WHERE job_id=?"
                " ORDER BY rowid",
                (job_id,),
            ).fetchall()
        return {
            r[0]: (
                np.frombuffer(r[1], dtype="<f8").reshape(json.loads(r[2])).copy(),
                json.loads(r[3]),
            )
            for r in rows
        }

    def entries(
        self, job_id: str | None = None, *, events: Sequence[str] | None = None
    ) -> list[Entry]:
        """The view, in order: of one job, or all; only the given `events` if named."""
        self.flush()
        q = (
            "SELECT id, ts, job_id, direction, event, peer, kind, walk, epoch, seq, round, digest,"
            " params_json FROM entries"
        )
        where: list[str] = []
        args: list[Any] = []
        if job_id is not None:
            where.append("job_id=?")
            args.append(job_id)
        if events is not None:
            where.append(f"event IN ({','.join('?' * len(events))})")
            args.extend(events)
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY id"
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        return [
            Entry(
                id=r[0],
                ts=r[1],
                job_id=r[2],
                direction=r[3],
                event=r[4],
                peer=r[5],
                kind=r[6],
                walk=r[7],
                epoch=r[8],
                seq=r[9],
                round=r[10],
                digest=r[11],
                params=json.loads(r[12]),
            )
            for r in rows
        ]

    _JOB_COLUMNS = (
        "SELECT job_id, algorithm, spec_json, state, contributed, started, finished,"
        " result_json, detail FROM jobs"
    )

    @staticmethod
    def _job_row(r: tuple[Any, ...]) -> JobRow:
        return JobRow(
            job_id=r[0],
            algorithm=r[1],
            spec=json.loads(r[2]),
            state=r[3],
            contributed=bool(r[4]),
            started=r[5],
            finished=r[6],
            result=json.loads(r[7]) if r[7] else None,
            detail=r[8],
        )

    def jobs(self) -> list[JobRow]:
        self.flush()
        with self._lock:
            rows = self._db.execute(self._JOB_COLUMNS + " ORDER BY started").fetchall()
        return [self._job_row(r) for r in rows]

    def job(self, job_id: str) -> JobRow | None:
        self.flush()
        with self._lock:
            r = self._db.execute(self._JOB_COLUMNS + " WHERE job_id=?", (job_id,)).fetchone()
        return None if r is None else self._job_row(r)
