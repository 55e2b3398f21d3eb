"""`retry.retry` and `Backoff` on the clock they are given: the real one by default
(`time.monotonic`), an event loop's (`loop.time`, virtual in the simulator) or a test's. The
give-up rule counts that clock's seconds, and the pauses are the given `sleep`'s."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from netdp_node.retry import Backoff, retry
from netdp_node.vclock import run_virtual


class Down(Exception):
    pass


def test_the_real_clock_is_the_default() -> None:
    it = Backoff().delays()
    assert it.clock is time.monotonic
    assert Backoff().delays(random.Random(1), clock=lambda: 5.0).clock() == 5.0


def test_backoff_expires_on_the_clock_it_is_given() -> None:
    now = [100.0]
    it = Backoff(initial=1.0, maximum=4.0, give_up_after=10.0).delays(
        random.Random(3), clock=lambda: now[0]
    )
    assert it.started == 100.0
    slept = 0.0
    while (d := it.next_sleep()) is not None:
        assert 0.0 <= d <= 4.0
        now[0] += d
        slept += d
    # it gives up exactly at the bound of the given clock: the last pause ends there
    assert now[0] == pytest.approx(110.0) and slept == pytest.approx(10.0)
    assert it.expired()


def test_retry_pauses_with_the_given_sleep_and_gives_up_on_the_given_clock() -> None:
    now = [0.0]
    pauses: list[float] = []
    calls: list[float] = []

    async def fake_sleep(d: float) -> None:  # no real sleep: the test's clock moves
        pauses.append(d)
        now[0] += d

    async def down() -> str:
        calls.append(now[0])
        raise Down("down")

    policy = Backoff(initial=0.5, maximum=2.0, give_up_after=20.0)
    with pytest.raises(Down):
        asyncio.run(
            retry(
                down,
                policy,
                lambda e: isinstance(e, Down),
                clock=lambda: now[0],
                sleep=fake_sleep,
                rng=random.Random(7),
            )
        )
    # the pauses are the backoff's draws (full jitter under the cap), the last one cut at the bound
    rng = random.Random(7)
    want = [rng.uniform(0, min(2.0, 0.5 * 2.0**k)) for k in range(len(pauses))]
    k = next(i for i, (p, w) in enumerate(zip(pauses, want)) if p != w)
    assert pauses[:k] == want[:k] and pauses[k] < want[k]
    assert sum(pauses[: k + 1]) == pytest.approx(20.0) and sum(pauses) == pytest.approx(20.0)
    assert calls[0] == 0.0 and calls[-1] == pytest.approx(20.0) and len(calls) == len(pauses) + 1


def test_retry_on_a_virtual_loop_counts_virtual_seconds() -> None:
    """On the simulator's loop (`vclock`), with the loop's clock: 300 virtual seconds of retries,
    no real sleep; it succeeds once the service is back, at virtual time 120."""

    async def main() -> tuple[str, list[float]]:
        loop = asyncio.get_running_loop()
        calls: list[float] = []

        async def flaky() -> str:
            calls.append(loop.time())
            if loop.time() < 120.0:
                raise Down("not yet")
            return "up"

        got = await retry(
            flaky,
            Backoff(initial=1.0, maximum=10.0, give_up_after=300.0),
            lambda e: isinstance(e, Down),
            clock=loop.time,
            rng=random.Random(2),
        )
        return got, calls

    (got, calls), end = run_virtual(main())
    assert got == "up"
    assert calls[-2] < 120.0 <= calls[-1] == end
    assert all(0.0 <= b - a <= 10.0 for a, b in zip(calls, calls[1:]))

    async def never() -> float:
        loop = asyncio.get_running_loop()

        async def down() -> None:
            raise Down("down")

        with pytest.raises(Down):
            await retry(
                down,
                Backoff(initial=1.0, maximum=10.0, give_up_after=300.0),
                lambda e: isinstance(e, Down),
                clock=loop.time,
            )
        return loop.time()

    gave_up, _ = run_virtual(never())
    assert gave_up == pytest.approx(300.0)  # the bound, in virtual seconds
