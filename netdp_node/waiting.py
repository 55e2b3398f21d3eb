"""Waits that follow progress instead of the clock (for the local clusters and the tests).

A fixed deadline ("ready within 60 s") fails on a loaded machine although nothing is wrong: start-up
is CPU-bound, and with 30 runnable processes per core it simply takes longer. A progress-aware wait
fails when nothing *advances* for `stall` seconds, not when the total passes a number: a probe
(any callable returning a comparable value, e.g. a process's CPU time, the size of a log or a
ledger) is polled with the condition, and every change of its value restarts the stall timer. An
overall hard bound `limit`, much larger than `stall`, ends even a wait that keeps advancing
forever, so nothing hangs. Without a probe the wait is a plain deadline of `stall` seconds.

Probes here: `cpu_ticks(pid)` (user + system time of a process, from /proc/<pid>/stat),
`file_size(path)`, `tree_size(path)` (a ledger directory: the database and its write-ahead log),
and `probes(...)`, which combines several into one.

`stop_tasks` is the bounded way to stop asyncio tasks (a link's, a job's): cancel, wait, cancel
again while any is still running, up to a bound of the loop's clock. `interruptible` runs a command's
main coroutine so that Ctrl-C always ends it, through `stop_tasks`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Collection, Hashable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
Probe = Callable[[], Hashable]

#: The hard bound used when none is given: a wait that still advances after this long fails too.
DEFAULT_LIMIT = 600.0


class StalledError(TimeoutError):
    """A progress-aware wait ended: no progress for `stall` seconds, or the hard bound passed."""


class _Watch:
    """The stall timer and the hard bound of one wait (clock injected for the unit tests)."""

    def __init__(
        self,
        what: str,
        stall: float,
        limit: float | None,
        progress: Probe | None,
        clock: Callable[[], float],
    ) -> None:
        if not stall > 0:
            raise ValueError(f"stall must be > 0, got {stall!r}")
        self.what, self.stall, self.progress, self.clock = what, stall, progress, clock
        self.limit = stall if progress is None else max(stall, limit or DEFAULT_LIMIT)
        self.start = self.changed = clock()
        self.last = progress() if progress is not None else None

    def check(self) -> None:
        """Raise StalledError if the wait is over; note any progress."""
        now = self.clock()
        if self.progress is not None:
            value = self.progress()
            if value != self.last:
                self.last, self.changed = value, now
        total = now - self.start
        if total >= self.limit and self.progress is not None:
            raise StalledError(
                f"after {total:.0f}s (the hard bound, {self.limit:g}s, although "
                f"still progressing): {self.what}"
            )
        if now - self.changed >= self.stall:
            if self.progress is None:
                raise StalledError(f"after {self.stall:g}s: {self.what}")
            raise StalledError(
                f"no progress for {self.stall:g}s (after {total:.0f}s; last "
                f"progress {self.last!r}): {self.what}"
            )


def wait_progress(
    cond: Callable[[], T],
    what: str,
    *,
    stall: float,
    limit: float | None = None,
    progress: Probe | None = None,
    interval: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Poll `cond` until it returns something truthy (returned). StalledError when `progress`
    has not changed for `stall` seconds, or `limit` seconds passed in all (default
    DEFAULT_LIMIT); without `progress`, after `stall` seconds."""
    watch = _Watch(what, stall, limit, progress, clock)
    while True:
        got = cond()
        if got:
            return got
        watch.check()
        sleep(interval)


async def await_progress(
    cond: Callable[[], Awaitable[T]],
    what: str,
    *,
    stall: float,
    limit: float | None = None,
    progress: Probe | None = None,
    interval: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`wait_progress` for an async condition (the probe is a plain callable)."""
    watch = _Watch(what, stall, limit, progress, clock)
    while True:
        got = await cond()
        if got:
            return got
        watch.check()
        await asyncio.sleep(interval)


# -- probes ---------------------------------------------------------------------------------------
def cpu_ticks(pid: int) -> int | None:
    """User + system CPU time of process `pid` in clock ticks (/proc/<pid>/stat fields 14 and 15),
    or None once it is gone (or where there is no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[11]) + int(fields[12])


def file_size(path: str | os.PathLike[str]) -> int:
    """Size of a file in bytes, -1 while it does not exist."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def tree_size(path: str | os.PathLike[str]) -> int:
    """Total size of the files directly in a directory (a ledger: database, WAL), -1 if absent."""
    try:
        with os.scandir(path) as it:
            return sum(e.stat().st_size for e in it if e.is_file())
    except OSError:
        return -1


def probes(*fns: Probe) -> Probe:
    """One probe from several: progress of any of them is progress."""
    return lambda: tuple(f() for f in fns)


async def stop_tasks(
    tasks: Collection[asyncio.Future[Any]], bound: float, every: float = 0.1
) -> set[asyncio.Future[Any]]:
    """Cancel `tasks` and wait until they have ended, at most `bound` seconds of the running loop's
    clock; return those still running (left behind). Failures of the ended ones are retrieved.

    One cancellation is not always enough: `asyncio.wait_for` before Python 3.12 returns the result
    of an awaitable that completed just as the cancellation arrived, and the task goes on (a task
    that then waits for work that never comes would make its closer wait for ever). So every
    `every` seconds the tasks still running are cancelled again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    pending = {t for t in tasks if not t.done()}
    while pending:
        left = deadline - loop.time()
        if left <= 0:
            break
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(every, left))
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved (each was handled or logged where it ran)
    return pending


#: Seconds `interruptible` lets the interrupted coroutine clean up (close channels, ...).
INTERRUPT_BOUND = 30.0


async def interruptible(coro: Awaitable[T], bound: float = INTERRUPT_BOUND) -> T:
    """Await `coro` as a task that Ctrl-C (SIGINT) stops: the task is cancelled, and cancelled
    again while it runs on (`stop_tasks`), for at most `bound` seconds; then KeyboardInterrupt.

    asyncio.run cancels its main task once on the first Ctrl-C, and a cancellation can be lost:
    grpc.aio turns one that races a unary call's completion into an ordinary RpcError (a caller
    that tolerates failed calls then goes on), `asyncio.wait_for` before Python 3.12 drops one
    that races its awaitable. A demo interrupted that way ran on. Off the main thread (no signal
    handler there; asyncio.run installs none either) it just awaits `coro`."""
    loop = asyncio.get_running_loop()
    hit: asyncio.Future[Any] = loop.create_future()

    def on_sigint() -> None:
        if not hit.done():
            hit.set_result(None)

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (ValueError, RuntimeError):  # not the main thread: no Ctrl-C reaches this loop
        return await coro
    task: asyncio.Future[T] = asyncio.ensure_future(coro)
    try:
        await asyncio.wait([task, hit], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    if not hit.done():
        return task.result()
    await stop_tasks({task}, bound)
    raise KeyboardInterrupt
