"""An asyncio event loop on a virtual clock, for `netdp simulate`.

The loop is asyncio's own (`asyncio.BaseEventLoop`: the same ready queue, timer heap, futures,
tasks, locks and `call_later` the daemon runs on); only its clock and its wait differ. `time()` is a
virtual clock that starts at 0, and where a real loop would sleep in `select(timeout)` until the
next timer is due, this one sets its clock to that timer's time at once. A run therefore takes no
real sleep, whatever the timeouts, and is deterministic: callbacks run in the order asyncio gives
them (FIFO for ready callbacks, time then scheduling order for timers), which depends on nothing
but the program.

There is no I/O: a loop with nothing ready and no timer would wait forever (every task waits for
another), which `select` reports as `SimulationStalled` instead.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
from collections.abc import Coroutine
from typing import Any, TypeVar

from netdp_node.errors import NetdpError

T = TypeVar("T")


class SimulationStalled(NetdpError):
    """Nothing is ready and no timer is pending: every task waits for another, for ever."""


class _VirtualSelector:
    """Stands in for the selector: `select(timeout)` advances the virtual clock by `timeout`."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        loop = self.loop
        if timeout is None:
            raise SimulationStalled(
                f"the simulation stalled at virtual time {loop.time():.6g}s: nothing is ready and "
                "no timer is pending"
            )
        if timeout > 0:
            # asyncio's timer heap (a private attribute of BaseEventLoop): the next timer is its head
            scheduled: list[Any] = loop._scheduled  # type: ignore[attr-defined]
            loop.now = max(loop.now + timeout, scheduled[0]._when if scheduled else loop.now)
        return []

    def close(self) -> None:
        return None


class VirtualClockLoop(asyncio.base_events.BaseEventLoop):
    """asyncio's event loop with a virtual clock and no I/O (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self._selector = _VirtualSelector(self)

    def time(self) -> float:
        return self.now

    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:  # call_soon_threadsafe: nothing sleeps, nothing to wake
        return None

    def close(self) -> None:
        super().close()
        self._selector = None  # type: ignore[assignment]


def run_virtual(main: Coroutine[Any, Any, T]) -> tuple[T, float]:
    """Run `main` to completion on a fresh VirtualClockLoop; returns (its result, the virtual time
    it ended at). Tasks still pending at the end (timers of finished jobs) are cancelled."""
    loop = VirtualClockLoop()
    asyncio.set_event_loop(loop)
    try:
        result = loop.run_until_complete(main)
        end = loop.time()
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        return result, end
    finally:
        asyncio.set_event_loop(None)
        loop.close()
