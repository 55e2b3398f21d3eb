"""The runtime's side of the jobs' public bulletin (`Publish`, `Engine.on_published`): a node's
publication is in its ledger before it is uploaded; every other participant's entry is handed to
the engine once and recorded as the engine records it; a participant that never publishes is left
out (never read as an empty entry) and the reading ends, bounded, with the job still done.

Muffliato's schedules go through it: a seeded simulation sends no schedule message at all, every
node publishes once and records the n - 1 others' schedules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from harness import published_schedules

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.muffliato import accountant as ma
from netdp_node.faults import FaultPlan
from netdp_node.ledger import Ledger
from netdp_node.protocols.base import (
    Action,
    Engine,
    JobContext,
    Message,
    Output,
    Publish,
    Record,
)
from netdp_node.runtime import JobRunner, NodeRuntime, spec_dict
from netdp_node.simulate import Simulator, synthetic_data
from netdp_node.transport.memory import MemoryBoard, MemoryNetwork

pytestmark = pytest.mark.timeout(60)


def _sim(n: int, faults: Mapping[str, FaultPlan] | None = None) -> tuple[list[str], Simulator]:
    ids = [f"n{i}" for i in range(n)]
    given = {"graph": "hypercube", "T": 3, "sigma": 1.0, "round_timeout_s": 0.05}
    p = get_algorithm("muffliato").validate(given, n)
    data, _ = synthetic_data("muffliato", ids, p, 5)
    sim = Simulator(
        "muffliato",
        ids,
        p,
        data,
        seed=5,
        public_seed=5,
        record="full",
        faults=faults,
        give_up_after=0.5,
    )
    return ids, sim


def _spec(sim: Simulator) -> dict:
    return {
        "job_id": sim.job_id,
        "algorithm": "muffliato",
        "participants": sim.ids,
        "params": sim.params,
        "public_seed": sim.public_seed,
        "edges": [],
    }


def test_every_node_publishes_once_and_reads_every_other_schedule() -> None:
    n = 8
    ids, sim = _sim(n)
    res = sim.run()
    assert set(res.states.values()) == {"done"}
    # no schedule message between peers: only the rounds' values (n·d·T of them, d = 3)
    assert res.events == n * 3 * 3
    published = {}
    for v in ids:
        es = res.entries[v]
        assert not [e for e in es if e.kind == "schedule" and e.direction != "local"]
        (pub,) = [e for e in es if e.event == "publish"]
        out = next(i for i, e in enumerate(es) if e.event == "output")
        # the publication is recorded in the step that releases the output, before it is uploaded
        assert pub.kind == "schedule" and es.index(pub) < out + 1
        published[v] = pub.digest
        scheds = published_schedules(es)
        assert sorted(scheds) == sorted(set(ids) - {v})
        assert all(m == {"missing": []} for m in scheds.values())  # no drop
        # one ledger record per batch read from the bulletin, not one per publisher
        batches = [e for e in es if e.event == "schedules"]
        assert 1 <= len(batches) < n - 1 and not [e for e in es if e.event == "schedule"]
        assert all(e.params["missing"] == {} for e in batches)
    # the bulletin holds what each node recorded as published (same digest)
    entries = sim.board._entries[(sim.job_id, "schedule")]
    assert {s: m.digest() for s, m in entries} == published
    # the whole realised schedule is known at every node: the joint view is shown
    spec = _spec(sim)
    for v in ids[:2]:
        sched, why = ma.sync_schedules(spec, res.entries[v], v)
        assert sched is not None, why


def test_a_node_that_never_publishes_is_left_out_not_read_as_empty() -> None:
    """n3 crashes during the rounds: it never publishes. The others finish (done), record the
    schedules of the n - 2 that did, and their accountant has no report of n3: its silence is
    not taken for "nothing missing"."""
    n = 8
    ids, sim = _sim(n, faults={"n3": FaultPlan(crash_at_step=2)})
    res = sim.run()
    survivors = [v for v in ids if v != "n3"]
    assert all(res.states[v] == "done" for v in survivors)
    spec = _spec(sim)
    for v in survivors:
        es = res.entries[v]
        assert sorted(published_schedules(es)) == sorted(set(survivors) - {v})
        reports = ma._reports(es, v)
        assert "n3" not in reports and set(reports) == set(survivors)
    # n3's neighbours saw its edges go: their published schedules name them
    nb3 = [
        v
        for v in survivors
        if "n3"
        in next(
            e.params["late_or_lost"] + e.params["realised"]
            for e in res.entries[v]
            if e.event == "round"
        )
    ]
    assert nb3
    got = published_schedules(res.entries["n0"])[nb3[0]]
    assert any(w == "n3" for _, w in got["missing"])
    ma.sync_schedules(spec, res.entries["n0"], "n0")  # computed, no error


class _Once(Engine):
    """Publishes one entry and finishes at start; records what it reads from the bulletin."""

    def start(self) -> list[Action]:
        me = self.ctx.me
        return [Publish(Message("note", scalars={me: 1.0})), Output(np.zeros(1))]

    def on_published(self, kind: str, published: Mapping[str, Message]) -> list[Action]:
        return [Record("note", peer=s, params=dict(m.scalars)) for s, m in published.items()]


async def test_reading_is_bounded_when_a_participant_never_publishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = ("a", "b", "c")  # c never runs
    board = MemoryBoard()
    board.add_job("j", ids)
    net = MemoryNetwork()
    ctx = JobContext("j", "test", "a", ids, {}, 0)
    runners = []
    for v in ids[:2]:
        rt = NodeRuntime(
            v,
            Ledger(tmp_path / v, v),
            net.transport(v),
            bulletin=board.bulletin(v),
            bulletin_wait=0.5,
        )
        c = ctx.for_node(v)
        r = JobRunner(rt, c, _Once(c, None, np.random.default_rng(0)), True)
        rt.jobs["j"] = r
        rt.ledger.begin_job("j", "test", spec_dict(c), True, [])
        runners.append(r)
    caplog.set_level(logging.WARNING)
    try:
        for r in runners:
            await r.start()
        for r in runners:  # the step with the output (and the publication) is durable
            await asyncio.wait_for(r.finished.wait(), 10)
        tasks = [t for r in runners for t in r.bulletin_tasks]
        done, _ = await asyncio.wait(tasks, timeout=20)
        assert len(done) == 2  # both readers stopped (0.5 s), c never came
        for r, other in zip(runners, ("b", "a")):
            assert r.state == "done"
            es = r.node.ledger.entries("j")
            assert [e.event for e in es if e.event in ("publish", "output")] == [
                "publish",
                "output",
            ]
            assert [(e.peer, e.params) for e in es if e.event == "note"] == [(other, {other: 1.0})]
        assert "holds the note of 2 of 3 participants" in caplog.text
    finally:
        for r in runners:
            await r.node.close()
            r.node.ledger.close()


def test_randomized_gossip_publishes_its_activation_list_on_the_bulletin() -> None:
    """Algorithm 2: the activation list is published once (no message to the n - 1 others) and
    the others' lists are taken from the bulletin; a malformed one is recorded as refused."""
    from netdp_node.algorithms.muffliato.engine import SCHEDULE, MuffliatoRandom
    from netdp_node.protocols.base import Send

    ids = ("n0", "n1", "n2")
    p = get_algorithm("muffliato-random").prepare(
        {"graph": "ring", "sigma": 0.5, "rate": 1.0, "duration_s": 1.0}, 3
    )
    e = {
        v: MuffliatoRandom(
            JobContext("j", "muffliato-random", v, ids, p, 1),
            np.array([0.1 * i]),
            np.random.default_rng([0, i]),
        )
        for i, v in enumerate(ids)
    }
    e["n0"].log = [(0, 1, 1, True), (2, 1, 0, False)]
    out = e["n0"]._finish()
    assert not any(isinstance(a, Send) for a in out)
    (pub,) = [a for a in out if isinstance(a, Publish)]
    got = e["n1"].on_published(
        SCHEDULE, {"n0": pub.msg, "n2": Message(SCHEDULE, scalars={"x:1": 1.0})}
    )
    assert [(a.event, a.peer) for a in got] == [("schedules", ""), ("bulletin-refused", "n2")]
    assert got[0].params == {
        "peers": ["n0"],
        "activations": {"n0": (("n0", 1, "n1", True), ("n2", 1, "n0", False))},
    }
    assert "bad activation" in got[1].params["reason"]
