"""The progress-aware waits (netdp_node.waiting): a wait fails when its probe stops advancing for
the stall bound, never because a slow but steady process takes longer than that in all; a hard bound
ends even a wait that advances forever. The clock is simulated (each poll advances it), so these
tests say nothing about real time; the probes are checked on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from netdp_node.waiting import (
    StalledError,
    await_progress,
    cpu_ticks,
    file_size,
    probes,
    tree_size,
    wait_progress,
)


class FakeTime:
    """A clock that each `sleep` advances (the wait's polls are its only source of time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, dt: float) -> None:
        self.now += dt


def test_slow_but_steady_progress_outlives_the_stall_bound():
    t = FakeTime()
    # one unit of progress every 8 s, the condition after 200 s: far beyond the 10 s stall bound
    got = wait_progress(
        lambda: t.now >= 200 and "ready",
        "slow start",
        stall=10,
        limit=1000,
        progress=lambda: int(t.now // 8),
        interval=0.5,
        clock=t.clock,
        sleep=t.sleep,
    )
    assert got == "ready" and t.now >= 200


def test_a_probe_that_stops_fails_after_the_stall_bound():
    t = FakeTime()
    with pytest.raises(StalledError) as e:
        wait_progress(
            lambda: False,
            "node-1 ready",
            stall=10,
            limit=1000,
            progress=lambda: int(min(t.now, 30) // 2),
            interval=0.5,
            clock=t.clock,
            sleep=t.sleep,
        )
    # the last change was at t=30 (30 // 2 = 15): it fails 10 s later, not at the limit
    assert 40 <= t.now <= 41
    assert "no progress for 10s" in str(e.value) and "node-1 ready" in str(e.value)
    assert isinstance(e.value, TimeoutError)  # callers catching TimeoutError keep working


def test_the_hard_bound_ends_a_wait_that_advances_forever():
    t = FakeTime()
    with pytest.raises(StalledError) as e:
        wait_progress(
            lambda: False,
            "a job",
            stall=10,
            limit=120,
            progress=lambda: t.now,
            interval=1.0,
            clock=t.clock,
            sleep=t.sleep,
        )
    assert 120 <= t.now <= 121 and "hard bound" in str(e.value)


def test_without_a_probe_it_is_a_plain_deadline():
    t = FakeTime()
    with pytest.raises(StalledError) as e:
        wait_progress(
            lambda: False, "x", stall=30, limit=600, interval=1.0, clock=t.clock, sleep=t.sleep
        )
    assert 30 <= t.now <= 31 and str(e.value) == "after 30s: x"
    with pytest.raises(ValueError):
        wait_progress(lambda: True, "x", stall=0)


async def test_async_variant_follows_progress_too():
    t = FakeTime()

    async def cond() -> bool:
        t.now += 1.0  # each poll takes a (simulated) second
        return t.now >= 100

    assert await await_progress(
        cond, "slow", stall=5, progress=lambda: int(t.now // 4), interval=0, clock=t.clock
    )
    t.now = 0.0

    async def never() -> bool:
        t.now += 1.0
        return False

    with pytest.raises(StalledError, match="no progress for 5s"):
        await await_progress(
            never, "stuck", stall=5, progress=lambda: min(t.now, 20), interval=0, clock=t.clock
        )
    assert 25 <= t.now <= 26


def test_cpu_ticks_follow_a_real_process():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = cpu_ticks(child.pid)
        assert first is not None
        # it runs: its CPU time advances (bounded wait; under load it just takes longer)
        wait_progress(lambda: (cpu_ticks(child.pid) or 0) > first, "the child to use CPU", stall=60)
        child.send_signal(signal.SIGSTOP)
        wait_progress(lambda: _state(child.pid) == "T", "the child to stop", stall=60)
        stopped = cpu_ticks(child.pid)
        time.sleep(0.3)  # a stopped process gets no CPU at all: its ticks stay put
        assert cpu_ticks(child.pid) == stopped
        child.send_signal(signal.SIGCONT)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert cpu_ticks(child.pid) is None  # reaped: gone


def _state(pid: int) -> str:
    stat = open(f"/proc/{pid}/stat").read()
    return stat[stat.rindex(")") + 2]


def test_file_and_tree_sizes(tmp_path):
    f = tmp_path / "d" / "log"
    assert file_size(f) == -1 and tree_size(tmp_path / "d") == -1
    f.parent.mkdir()
    f.write_bytes(b"abc")
    (f.parent / "wal").write_bytes(b"12345")
    (f.parent / "sub").mkdir()
    assert file_size(f) == 3 and tree_size(f.parent) == 8
    both = probes(lambda: file_size(f), lambda: tree_size(f.parent))
    assert both() == (3, 8)
    with open(f, "ab") as fh:
        fh.write(b"d")
    assert both() == (4, 9)
    assert cpu_ticks(os.getpid()) is not None


# -- the start-up wait of LocalCluster (what the multi-process tests start their daemons with) -----
def _proc(tmp_path, name: str, code: str):
    from netdp_node.cluster import Proc

    port_file = tmp_path / f"{name}.port"
    log = tmp_path / f"{name}.log"
    log.write_text("")
    popen = subprocess.Popen([sys.executable, "-c", code, str(port_file)])
    return Proc(name, [], log, port_file, popen)


# Busy for 2 s of CPU time (not wall time: a loaded machine stretches it), then ready.
SLOW_START = """
import signal, sys, time
while time.process_time() < 2.0:
    pass
open(sys.argv[1], "w").write("4321")
signal.pause()
"""


def test_start_up_wait_outlives_its_bound_while_the_process_computes(tmp_path):
    """A daemon whose start-up needs 2 s of CPU, waited on with a 0.5 s bound: the old fixed
    deadline failed it after 0.5 s; following its CPU time, the wait lasts as long as it needs."""
    from netdp_node.cluster import LocalCluster

    c = LocalCluster(tmp_path, 1)
    p = _proc(tmp_path, "slow", SLOW_START)
    c.procs["slow"] = p
    try:
        assert c.wait_port(p, timeout=0.5) == 4321
    finally:
        p.popen.kill()
        p.popen.wait(timeout=30)


def test_start_up_wait_fails_when_the_process_makes_no_progress(tmp_path):
    """A process that neither computes nor logs (here: waiting forever) fails the wait at the
    stall bound, long before the hard bound."""
    from netdp_node.cluster import LocalCluster

    c = LocalCluster(tmp_path, 1)
    p = _proc(tmp_path, "stuck", "import signal; signal.pause()")
    c.procs["stuck"] = p
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="no progress for 1s") as e:
            c.wait_port(p, timeout=1.0, limit=300)
        assert "stuck ready" in str(e.value)
        assert time.monotonic() - t0 < 300  # the stall bound ended it, not the hard bound
    finally:
        p.popen.kill()
        p.popen.wait(timeout=30)
