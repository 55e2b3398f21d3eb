"""The ledger's group commit off the event loop (netdp_node/ledger.py, `executor`).

A write is held in its worker thread by a gate (`Gate`: the slow fsync of a loaded disk, made
as slow as the test needs), so that what happens while it is in flight can be looked at: the
loop keeps running, nothing of the batch is acknowledged or caused before its transaction
committed, steps staged meanwhile go in the next batch, in order, a re-send of a message being
written is recognised, and every synchronous write, read and `close` waits for the write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from netdp_node.algorithms import ALGORITHMS, Algorithm, get_algorithm
from netdp_node.errors import LedgerError
from netdp_node.ledger import Entry, Ledger, _Step, write_pool
from netdp_node.memledger import MemoryLedger
from netdp_node.protocols.base import Engine, JobContext, Message, Params, Record
from netdp_node.runtime import NodeRuntime, Refused
from netdp_node.transport.memory import MemoryNetwork

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-ledger")
    yield ex
    ex.shutdown(wait=True)


class Gate:
    """Holds every commit of `led` in its thread until `release` is set (`entered`: one is held):
    the COMMIT handed to the executor, or, without one, the whole write."""

    def __init__(self, led: Ledger) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []

        def hold() -> None:
            self.threads.append(threading.current_thread().name)
            self.entered.set()
            assert self.release.wait(10), "the test never released the write"

        if led.executor is not None:
            commit = led._commit_open

            def gated_commit(errors: list[LedgerError | None], open_: bool) -> Any:
                hold()
                return commit(errors, open_)

            led._commit_open = gated_commit  # type: ignore[method-assign]
        else:
            write = led._write_entries

            def gated_write(steps: Sequence[_Step]) -> None:
                hold()
                write(steps)

            led._write_entries = gated_write  # type: ignore[method-assign]


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def file_events(directory: Path, job_id: str = "j") -> list[str]:
    """The events committed to the file, read by another connection (what survives a crash)."""
    db = sqlite3.connect(f"file:{directory / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT event FROM entries WHERE job_id=? ORDER BY id", (job_id,))
        return [r[0] for r in rows]
    finally:
        db.close()


def local(event: str) -> Entry:
    return Entry(job_id="j", direction="local", event=event)


def receipt(peer: str, rnd: int, digest: str = "d") -> Entry:
    return Entry(
        job_id="j",
        direction="received",
        event="value",
        peer=peer,
        kind="value",
        round=rnd,
        digest=digest,
    )


def count_commits(ledger: Ledger) -> list[int]:
    n = [0]
    ledger._db.set_trace_callback(lambda sql: n.__setitem__(0, n[0] + (sql == "COMMIT")))
    return n


async def test_steps_are_settled_only_after_their_commit_in_order(tmp_path, pool):
    led = Ledger(tmp_path, "n0", executor=pool)
    gate = Gate(led)
    commits = count_commits(led)
    settled: list[tuple[str, list[str]]] = []

    def done(name: str) -> Callable[[LedgerError | None], None]:
        def cb(err: LedgerError | None) -> None:
            assert err is None
            # called on the loop, once the step is in the file (an independent reader sees it)
            assert threading.current_thread() is threading.main_thread()
            settled.append((name, file_events(tmp_path)))

        return cb

    a = led.stage([local("a")], done=done("a"))
    await until(gate.entered.is_set, "the write of a to start")
    assert gate.threads == ["test-ledger_0"]  # in the pool, not on the loop
    # the loop keeps serving while the write is in flight; steps staged now wait for the next
    b = led.stage([local("b")], done=done("b"))
    c = led.stage([local("c")], done=done("c"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not (a.done() or b.done() or c.done()) and settled == []
    assert file_events(tmp_path) == []
    gate.release.set()
    await asyncio.wait_for(asyncio.gather(a, b, c), 10)
    assert [name for name, _ in settled] == ["a", "b", "c"]
    for name, seen in settled:
        assert name in seen  # each was durable when its `done` ran
    assert settled[0][1] == ["a"]  # a's done ran before b and c were written
    assert commits[0] == 2  # a alone, then b and c together: one fsync for the two
    assert file_events(tmp_path) == ["a", "b", "c"]
    assert led._inflight is None and led._staged == []
    led.close()


async def test_a_refused_step_does_not_take_its_batch_down(tmp_path, pool):
    led = Ledger(tmp_path, "n0", executor=pool)
    await asyncio.wait_for(led.stage([receipt("p", 0)]), 10)  # committed
    gate = Gate(led)
    commits = count_commits(led)
    first = led.stage([local("first")])
    await until(gate.entered.is_set, "the first write")
    results: dict[str, LedgerError | None] = {}
    futs = {}
    for name, entries in (
        ("ok1", [local("ok1")]),
        ("dup", [receipt("p", 0), local("with-dup")]),  # the same message again: refused
        ("ok2", [local("ok2")]),
    ):
        futs[name] = led.stage(entries, done=lambda err, name=name: results.__setitem__(name, err))
    gate.release.set()
    await asyncio.wait_for(first, 10)
    await asyncio.wait_for(asyncio.gather(futs["ok1"], futs["ok2"]), 10)
    with pytest.raises(LedgerError, match="refused"):
        await asyncio.wait_for(futs["dup"], 10)
    assert results["ok1"] is None and results["ok2"] is None
    assert isinstance(results["dup"], LedgerError)
    assert file_events(tmp_path) == ["value", "first", "ok1", "ok2"]  # nothing of the refused step
    assert commits[0] == 2  # "first", then the batch of three: still one commit
    led.close()


async def test_a_resend_during_the_write_is_recognised_and_waits_for_it(tmp_path, pool):
    led = Ledger(tmp_path, "n0", executor=pool)
    key = ("value", "", 0, 0, 4)
    assert led.received_digest("j", "p", key) is None  # loads the job's committed index
    gate = Gate(led)
    fut = led.stage([receipt("p", 4, "d4")])
    await until(gate.entered.is_set, "the write")
    # in flight: still known (staged index), and a re-send waits for the same commit
    assert led.received_digest("j", "p", key) == "d4"
    again = led.staged_future("j", "p", key)
    assert again is not None and not again.done()
    for _ in range(10):
        await asyncio.sleep(0)
        assert led.received_digest("j", "p", key) == "d4"
    assert not again.done() and file_events(tmp_path) == []
    gate.release.set()
    # at every moment until it is settled, the message is staged or committed and indexed
    while not fut.done():
        assert led.received_digest("j", "p", key) == "d4"
        await asyncio.sleep(0.001)
    await asyncio.wait_for(asyncio.gather(fut, again), 10)
    assert file_events(tmp_path) == ["value"]
    assert led._staged_received == {} and led._received["j"][("p", "value", "", 0, 0, 4)] == "d4"
    assert led.received_digest("j", "p", key) == "d4" and led.staged_future("j", "p", key) is None
    led.close()


async def test_synchronous_writes_and_reads_wait_for_the_write_in_flight(tmp_path, pool):
    led = Ledger(tmp_path, "n0", executor=pool)
    gate = Gate(led)
    calls: list[str] = []
    a = led.stage([local("a")], done=lambda err: calls.append("a"))
    await until(gate.entered.is_set, "the write of a")
    b = led.stage([local("b")], done=lambda err: calls.append("b"))
    threading.Timer(0.1, gate.release.set).start()  # the disk finishes the fsync, later
    led.commit([local("c")])  # on the loop: waits for a, writes b, then c
    assert file_events(tmp_path) == ["a", "b", "c"]
    assert a.done() and b.done()
    await asyncio.sleep(0)
    assert calls == ["a", "b"]  # in staging order
    # a job row and a read after a write in flight
    gate.release.clear()
    gate.entered.clear()
    led.stage([local("d")])
    await until(gate.entered.is_set, "the write of d")
    threading.Timer(0.1, gate.release.set).start()
    assert led.begin_job("j2", "ring-sum", {}, True) is True
    assert [e.event for e in led.entries("j")] == ["a", "b", "c", "d"]
    assert led.job("j2") is not None
    led.close()


async def test_close_waits_for_the_write_in_flight(tmp_path, pool):
    led = Ledger(tmp_path, "n0", executor=pool)
    gate = Gate(led)
    settled: list[LedgerError | None] = []
    a = led.stage([local("a")], done=settled.append)
    await until(gate.entered.is_set, "the write of a")
    b = led.stage([local("b")], done=settled.append)
    threading.Timer(0.1, gate.release.set).start()
    led.close()
    assert file_events(tmp_path) == ["a", "b"]
    assert a.done() and a.exception() is None and b.done() and b.exception() is None
    await asyncio.sleep(0)
    assert settled == [None, None]
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        led._db.execute("SELECT 1")


async def test_deferred_steps_staged_during_a_write_wait_for_their_bound(
    tmp_path, pool, monkeypatch
):
    monkeypatch.setattr(Ledger, "DEFER_MAX_S", 0.2)
    led = Ledger(tmp_path, "n0", executor=pool)
    gate = Gate(led)
    commits = count_commits(led)
    a = led.stage([local("a")])
    await until(gate.entered.is_set, "the write of a")
    late = led.stage([local("late")], defer=True)
    gate.release.set()
    await asyncio.wait_for(a, 10)
    assert not late.done() and commits[0] == 1  # the deferred step is not hurried by a's write
    await asyncio.wait_for(late, 10)  # its bound
    assert commits[0] == 2 and file_events(tmp_path) == ["a", "late"]
    led.close()


class _Recording(Engine):
    """Records every message it receives (receipts are not deferred)."""

    algorithm = "test-recording"

    def start(self):
        return []

    def on_message(self, sender, msg):
        return [Record("got", peer=sender)]


@dataclasses.dataclass(frozen=True)
class _RecordingParams(Params):
    algorithm: ClassVar[str] = "test-recording"

    @classmethod
    def prepare(cls, raw, n):
        return cls()


async def test_a_duplicate_during_the_write_is_acknowledged_only_once_durable(
    tmp_path, pool, monkeypatch
):
    monkeypatch.setitem(
        ALGORITHMS,
        "test-recording",
        Algorithm(
            "test-recording",
            _Recording,
            _RecordingParams,
            "complete",
            accountant=get_algorithm("ring-sum").accountant,
            threat=get_algorithm("ring-sum").threat,
        ),
    )
    ledger = Ledger(tmp_path, "a", executor=pool)
    node = NodeRuntime("a", ledger, MemoryNetwork().transport("a"))
    await node.add_job(JobContext("j", "test-recording", "a", ("a", "b", "c"), {}, 1))
    gate = Gate(ledger)
    first = asyncio.ensure_future(node.handle("b", "j", Message("value", round=0)))
    await until(gate.entered.is_set, "the write of the first copy")
    again = asyncio.ensure_future(node.handle("b", "j", Message("value", round=0)))
    other = asyncio.ensure_future(node.handle("c", "j", Message("value", round=0)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not (first.done() or again.done() or other.done())  # nothing acknowledged yet
    # a conflicting copy of the message being written is refused at once, as before
    with pytest.raises(Refused, match="conflicts"):
        await node.handle("b", "j", Message("value", round=0, scalars={"x": 1.0}))
    gate.release.set()
    assert await asyncio.wait_for(first, 10) is False
    assert await asyncio.wait_for(again, 10) is True  # the exact duplicate: not applied
    assert await asyncio.wait_for(other, 10) is False
    got = [(e.peer, e.event) for e in ledger.entries("j") if e.direction == "received"]
    assert sorted(got) == [("b", "value"), ("c", "value")]
    # once written, a re-send is recognised from the committed index
    assert await asyncio.wait_for(node.handle("b", "j", Message("value", round=0)), 10) is True
    await node.close()
    ledger.close()


def test_write_pool_is_shared_and_bounded():
    assert write_pool(3) is write_pool(3)
    assert write_pool(3)._max_workers == 3
    with pytest.raises(ValueError):
        write_pool(0)


def test_without_an_executor_the_ledger_runs_no_threads(tmp_path):
    """The simulator's ledgers (in memory or SQLite) write on the loop: no executor."""
    assert Ledger(tmp_path, "n0").executor is None
    assert MemoryLedger("n0").executor is None

    async def main() -> list[str]:
        led = Ledger(tmp_path / "x", "n1")
        gate = Gate(led)
        gate.release.set()
        await asyncio.wait_for(led.stage([local("a")]), 10)
        led.close()
        return gate.threads

    assert asyncio.run(main()) == [threading.main_thread().name]


# -- close is bounded whatever happens to the write in flight --------------------------------------
def close_within(led: Ledger, seconds: float = 10.0) -> None:
    """`led.close()` in a thread: it must return (a close blocked on the ledger's lock would hang
    the process at its end)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            led.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "close() blocked"
    assert errors == [], errors


def test_close_returns_when_the_pool_drops_the_commit(tmp_path):
    """The pool shuts down (the process is exiting) with the batch's COMMIT still queued behind
    another job: the worker never runs it. Before, the loop had taken the ledger's lock for the
    worker to release: close() then waited for it for ever. Now close commits it itself: durable,
    and settled."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-ledger")
    busy, free = threading.Event(), threading.Event()
    pool.submit(lambda: (busy.set(), free.wait(10)))
    assert busy.wait(10)

    async def main() -> None:
        led = Ledger(tmp_path, "n0", executor=pool)
        a = led.stage([local("a")])
        await until(lambda: led._inflight is not None, "the write of a to start")
        pool.shutdown(wait=False, cancel_futures=True)  # a's COMMIT is dropped
        free.set()
        close_within(led)
        assert file_events(tmp_path) == ["a"]
        assert a.done() and a.exception() is None  # acknowledged once durable, not before

    try:
        asyncio.run(main())
    finally:
        free.set()
        pool.shutdown(wait=True)


def test_close_returns_after_the_loop_was_interrupted_while_handing_the_commit_over(tmp_path):
    """A signal (KeyboardInterrupt, pytest-timeout's) interrupts the loop as it hands the batch's
    COMMIT to the pool: the loop's run ends with it. Before, the ledger's lock stayed taken (the
    worker that was to release it was never given the COMMIT) and close() blocked for ever. Now
    close commits the open batch: durable; its step was never acknowledged (the loop is gone)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-ledger")

    class Interrupting(Executor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

    led = Ledger(tmp_path, "n0", executor=pool)
    led.executor = Interrupting()
    acknowledged: list[bool] = []

    async def main() -> None:
        a = led.stage([local("a")])
        try:
            await a
        finally:
            acknowledged.append(a.done() and not a.cancelled() and a.exception() is None)

    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(main())
        close_within(led)
        assert file_events(tmp_path) == ["a"]
        assert acknowledged == [False]
    finally:
        pool.shutdown(wait=True)


async def test_a_cancelled_waiter_changes_nothing_and_close_returns(tmp_path, pool):
    """The task waiting for a step is cancelled between staging and the worker's COMMIT: the step
    is written all the same and settled (its `done` runs: the runtime's effects happen once it is
    durable), close() returns and the file holds it once."""
    led = Ledger(tmp_path, "n0", executor=pool)
    gate = Gate(led)
    settled: list[LedgerError | None] = []
    a = led.stage([local("a")], done=settled.append)
    waiter = asyncio.ensure_future(asyncio.shield(a))
    await until(gate.entered.is_set, "the write of a")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    threading.Timer(0.1, gate.release.set).start()
    close_within(led)
    assert file_events(tmp_path) == ["a"]
    assert a.done() and a.exception() is None
    await asyncio.sleep(0)
    assert settled == [None]
