"""One reusable retry policy: exponential backoff with full jitter and a give-up rule.

Time is read from a `Clock` (default `time.monotonic`); code running on an event loop whose clock
is virtual (the simulator, `netdp_node.vclock`) passes `loop.time`, so that its give-up rule counts
the same seconds its pauses (`asyncio.sleep`, which follows the loop's clock) wait."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: A monotonic clock in seconds (`time.monotonic`, or an event loop's `time`).
Clock = Callable[[], float]
#: Pause for a number of seconds (`asyncio.sleep`).
Sleep = Callable[[float], Awaitable[object]]


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.05
    maximum: float = 2.0
    multiplier: float = 2.0
    give_up_after: float = 30.0  # seconds since the first attempt; <= 0: never give up

    def delays(
        self, rng: random.Random | None = None, clock: Clock = time.monotonic
    ) -> BackoffIter:
        return BackoffIter(self, rng or random.Random(), clock)


class BackoffIter:
    def __init__(self, policy: Backoff, rng: random.Random, clock: Clock = time.monotonic) -> None:
        self.policy = policy
        self.rng = rng
        self.clock = clock
        self.attempt = 0
        self.started = clock()

    def expired(self) -> bool:
        g = self.policy.give_up_after
        return g > 0 and self.clock() - self.started >= g

    def next_delay(self) -> float:
        cap = min(self.policy.maximum, self.policy.initial * self.policy.multiplier**self.attempt)
        self.attempt += 1
        return self.rng.uniform(0, cap)

    def next_sleep(self) -> float | None:
        """The pause before the next attempt (never past the give-up time), or None if the policy
        gives up."""
        if self.expired():
            return None
        delay = self.next_delay()
        g = self.policy.give_up_after
        if g > 0:
            delay = min(delay, max(0.0, g - (self.clock() - self.started)))
        return delay

    async def sleep(self, sleep: Sleep = asyncio.sleep) -> bool:
        """Sleep before the next attempt; False if the policy gives up (do not retry)."""
        delay = self.next_sleep()
        if delay is None:
            return False
        await sleep(delay)
        return True


#: on_retry(error, attempt, delay): told before each pause of `retry` (to log it).
OnRetry = Callable[[BaseException, int, float], None]


async def retry(
    fn: Callable[[], Awaitable[T]],
    policy: Backoff,
    retryable: Callable[[BaseException], bool],
    on_retry: OnRetry | None = None,
    *,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Call fn until it succeeds, a non-retryable error is raised, or the policy gives up (then
    the last error is raised). `clock` times the give-up rule and `sleep` pauses (a virtual
    event loop's: `loop.time` with `asyncio.sleep`); `rng` draws the jitter."""
    it = policy.delays(rng, clock)
    while True:
        try:
            return await fn()
        except Exception as e:  # noqa: BLE001 - filtered by `retryable`
            if not retryable(e):
                raise
            delay = it.next_sleep()
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(e, it.attempt, delay)
        await sleep(delay)
