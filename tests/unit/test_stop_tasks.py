"""Stopping tasks is bounded, and survives a lost cancellation (`waiting.stop_tasks`).

`asyncio.wait_for` before Python 3.12 can lose a cancellation that arrives as its awaitable
completes; the task then goes on. A link's close hung for ever that way (the revoked-peers walk
test); a job's stop (`JobRunner.cancel`: one cancel, then an unbounded gather) could too.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from netdp_node import runtime
from netdp_node.runtime import JobRunner
from netdp_node.waiting import stop_tasks


async def _loses_one_cancellation(forever: asyncio.Event, swallowed: list[int]) -> None:
    """Swallows the first cancellation (as a lost one looks to its canceller), then waits for
    work that never comes."""
    try:
        await forever.wait()
    except asyncio.CancelledError:
        swallowed.append(1)
    await forever.wait()


async def _ignores_cancellation(forever: asyncio.Event) -> None:
    """Ignores every cancellation until `forever` is set."""
    while not forever.is_set():
        try:
            await forever.wait()
        except asyncio.CancelledError:
            continue


async def test_a_task_that_lost_a_cancellation_is_stopped() -> None:
    forever, swallowed = asyncio.Event(), []
    task = asyncio.ensure_future(_loses_one_cancellation(forever, swallowed))
    await asyncio.sleep(0)
    task.cancel()  # one cancellation, as before: the task goes on
    await asyncio.wait({task}, timeout=0.2)
    assert swallowed == [1] and not task.done()
    assert await stop_tasks({task}, bound=5.0, every=0.05) == set()
    assert task.cancelled()


async def test_a_task_that_never_stops_is_left_behind_at_the_bound() -> None:
    forever = asyncio.Event()
    stubborn = asyncio.ensure_future(_ignores_cancellation(forever))
    failing = asyncio.ensure_future(asyncio.sleep(0))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    left = await stop_tasks([stubborn, failing], bound=0.3, every=0.05)
    assert left == {stubborn}
    assert loop.time() - t0 < 5.0  # bounded (a generous margin: only "not for ever" matters)
    forever.set()  # let it end
    await asyncio.wait({stubborn}, timeout=1.0)
    assert stubborn.done()


async def test_a_jobs_stop_returns_when_a_task_lost_its_cancellation(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "JOB_STOP_S", 5.0)
    forever, swallowed = asyncio.Event(), []
    lost = asyncio.ensure_future(_loses_one_cancellation(forever, swallowed))
    done = asyncio.ensure_future(asyncio.sleep(0))
    await asyncio.sleep(0)
    runner = SimpleNamespace(_tasks={lost, done}, log=logging.getLogger("test"))
    # before: one cancel, then gather without a bound: this wait timed out
    await asyncio.wait_for(JobRunner.cancel(runner), timeout=10.0)  # type: ignore[arg-type]
    assert swallowed == [1] and lost.cancelled()


def test_ctrl_c_ends_a_command_whose_first_cancellation_is_lost():
    """`interruptible` (the demo's, `netdp job`'s and `netdp watch`'s main coroutine): one SIGINT
    ends a coroutine that loses the first cancellation, and the command sees KeyboardInterrupt.
    Under plain asyncio.run the first Ctrl-C only cancels once: such a demo ran on (seen in CI)."""
    import os
    import signal

    from netdp_node.waiting import interruptible

    swallowed: list[int] = []
    cleaned: list[int] = []

    async def command() -> None:
        forever = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
        try:
            await _loses_one_cancellation(forever, swallowed)
        finally:
            cleaned.append(1)  # its clean-up runs

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(interruptible(command(), bound=10.0))
    # a second cancellation ended it (left behind at the bound, it would not have cleaned up)
    assert swallowed == [1] and cleaned == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back


def test_interruptible_returns_the_result_without_a_ctrl_c():
    from netdp_node.waiting import interruptible

    async def command() -> int:
        await asyncio.sleep(0)
        return 7

    assert asyncio.run(interruptible(command())) == 7


def test_interruptible_off_the_main_thread_just_awaits():
    """`netdp job` run from a thread (as tests and embedding programs do): no signal handler can be
    installed there, and none is needed; the command runs and its errors come through."""
    import threading

    from netdp_node.waiting import interruptible

    async def command() -> int:
        await asyncio.sleep(0)
        return 7

    async def failing() -> None:
        raise ValueError("bad input")

    got: list[object] = []

    def run() -> None:
        got.append(asyncio.run(interruptible(command())))
        try:
            asyncio.run(interruptible(failing()))
        except ValueError as e:
            got.append(str(e))

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert got == [7, "bad input"]
