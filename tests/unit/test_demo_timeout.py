"""`netdp demo --timeout` bounds a stall of the job, not its length (times are simulated: no clock).

The default once failed a healthy 1,000-node walk-sum (10,000 steps at ~34 steps/s take about
300 s, the default was 120 s after submission, exit 5). Now the job fails only when it made no
progress (no new protocol step summed over the nodes, no new node report) for --timeout seconds.
"""

from __future__ import annotations

from netdp_node.cli import build_parser
from netdp_node.demo import JobWatch, node_job_deadline


def _default_timeout() -> float:
    a = build_parser().parse_args(["demo", "--algorithm", "walk-sum"])
    return float(a.timeout)


def _run(watch: JobWatch, samples: list[tuple[float, int, int]]) -> float | None:
    """Feed (time, steps summed over the nodes, nodes reported) as the demo's loop does; the first
    time the watch gives up, or None."""
    for now, steps, reported in samples:
        watch.note(now, reported=reported)
        watch.note(now, steps=steps)
        if watch.expired(now):
            return now
    return None


def test_the_default_lets_a_long_healthy_job_finish():
    stall = _default_timeout()
    # 10,000 steps at 34 steps/s, the Status sums polled every 10 s (1,000 nodes): the job runs
    # far longer than the default, and never stands still for as long as it
    rate, every, total = 34.0, 10.0, 10_000
    duration = total / rate
    assert duration > 2 * stall
    samples = []
    t = 0.0
    while t <= duration + every:
        samples.append((t, min(total, int(rate * t)), 0))
        t += every
    assert _run(JobWatch(stall, 0.0), samples) is None


def test_the_default_gives_up_once_nothing_moved_for_that_long():
    stall = _default_timeout()
    every = 10.0
    # 3,000 steps in the first 100 s, then nothing (a node hangs)
    samples = [(t, min(3000, int(30 * t)), 0) for t in (every * i for i in range(60))]
    last_step = 100.0  # 30 steps/s reach 3,000 at t = 100
    gave_up = _run(JobWatch(stall, 0.0), samples)
    assert gave_up is not None
    # the first poll more than `stall` after the last poll that saw a new step
    expected = min(t for t, _, _ in samples if t - last_step > stall)
    assert gave_up == expected


def test_a_sum_that_drops_is_not_progress_and_a_report_is():
    w = JobWatch(100.0, 0.0)
    w.note(10.0, steps=50)
    w.note(50.0, steps=40)  # a node did not answer its Status: the sum drops, then comes back
    w.note(90.0, steps=50)
    assert w.expired(111.0)  # nothing new since t = 10
    w = JobWatch(100.0, 0.0)
    w.note(10.0, steps=50)
    w.note(90.0, steps=50, reported=1)  # the walk is over; the nodes report one by one
    assert not w.expired(111.0)
    assert w.expired(191.0)


def test_the_nodes_own_deadline_is_far_beyond_the_stall_bound():
    stall = _default_timeout()
    # the nodes' deadline counts from joining the job: it must not cut a healthy long job short
    # (the 1,000-node walk above takes ~300 s) and must exceed the demo's own bound
    assert node_job_deadline(stall) >= 10 * stall
    assert node_job_deadline(stall) > 10_000 / 34.0 * 3


def test_progress_sweep_asks_everyone_first_then_slices_in_turn_and_never_drops() -> None:
    """The demo's progress rounds: all nodes once, then `per_round` at a time covering every node
    in ceil(n / per_round) rounds; a node's last answer stays (the sum never drops), so a walk's
    steps anywhere keep the watch alive while each round asks a bounded number of nodes."""
    from netdp_node.demo import ProgressSweep

    ids = [f"node-{i}" for i in range(10)]
    sweep = ProgressSweep(ids, per_round=4)
    assert sweep.slice() == ids
    for nid in ids:
        sweep.record(nid, 1, 5)
    assert sweep.totals() == (10, 50)
    rounds = [sweep.slice() for _ in range(3)]
    assert all(len(r) == 4 for r in rounds)
    assert set().union(*map(set, rounds)) == set(ids)  # every node within ceil(10 / 4) rounds
    assert rounds[0] == ids[:4] and rounds[1] == ids[4:8] and rounds[2][:2] == ids[8:]
    # one node moves on, another does not answer (nothing recorded), one answers lower (stale)
    sweep.record("node-3", 4, 5)
    sweep.record("node-5", 0, 0)
    assert sweep.totals() == (13, 50)
    # fed to the watch as the demo does: progress while any node's steps grow
    watch = JobWatch(stall=10.0, now=0.0)
    watch.note(1.0, steps=sweep.totals()[0])
    sweep.record("node-9", 7, 5)
    watch.note(9.0, steps=sweep.totals()[0])
    assert not watch.expired(15.0)
    assert watch.expired(19.5)
    # as many nodes as a round asks, or fewer: every round asks all of them
    small = ProgressSweep(ids[:3], per_round=4)
    assert small.slice() == ids[:3] and small.slice() == ids[:3]
