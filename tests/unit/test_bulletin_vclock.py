"""The bulletin's calls are retried (`retry.retry`, BULLETIN_RETRY's backoff) on the event loop's
clock: virtual in the simulator (`netdp_node.vclock`), where a run takes no real sleep. The reading
ends within its bound, for a reason the ledger records ("bulletin-end")."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping

import numpy as np
import pytest
from harness import published_schedules

from netdp_node.algorithms import get_algorithm
from netdp_node.faults import FaultPlan
from netdp_node.memledger import MemoryLedger
from netdp_node.protocols.base import Action, Engine, JobContext, Message, Output, Publish, Record
from netdp_node.runtime import BULLETIN_END, BULLETIN_RETRY, JobRunner, NodeRuntime, spec_dict
from netdp_node.simulate import Simulator, synthetic_data
from netdp_node.transport.memory import MemoryBoard, MemoryNetwork
from netdp_node.vclock import run_virtual

pytestmark = pytest.mark.timeout(60)


def test_a_node_cut_off_from_the_bulletin_retries_in_virtual_time_then_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Muffliato in the simulator; n0 is partitioned from the bootstrap (its peers reach it): it
    finishes, keeps its schedule in its ledger and tries to publish it, retrying on the virtual
    clock with pauses of at most BULLETIN_RETRY.maximum, until its bound (the node's job deadline,
    300 virtual seconds); it then gives up with the bulletin's answer as the reason. The others
    read what the bulletin holds and end when nothing more will come."""
    ids = [f"n{i}" for i in range(8)]
    p = get_algorithm("muffliato").validate(
        {"graph": "hypercube", "T": 3, "sigma": 1.0, "round_timeout_s": 0.05}, len(ids)
    )
    data, _ = synthetic_data("muffliato", ids, p, 5)
    sim = Simulator(
        "muffliato",
        ids,
        p,
        data,
        seed=5,
        public_seed=5,
        faults={"n0": FaultPlan(partition=frozenset({"bootstrap"}))},
        job_deadline=300.0,
        give_up_after=0.5,
    )
    caplog.set_level(logging.WARNING, logger="netdp.runtime")
    res = sim.run()
    assert set(res.states.values()) == {"done"}
    finish = max(e.ts for v in ids for e in res.entries[v] if e.event == "output")
    (end,) = [e for e in res.entries["n0"] if e.event == BULLETIN_END]
    assert end.params["kind"] == "schedule" and end.params["read"] == 1 and end.params["of"] == 8
    assert end.params["reason"] == (
        "publish failed: UNAVAILABLE: n0 cannot reach the bulletin: partitioned from bootstrap "
        "(--fault-partition)"
    )
    # it gave up at its bound, in virtual seconds (the run slept for none of them)
    pub = next(e for e in res.entries["n0"] if e.event == "publish")
    assert end.ts == pytest.approx(pub.ts + 300.0, abs=1e-6)
    assert res.virtual_time == pytest.approx(end.ts, abs=1.0)
    # every pause at most BULLETIN_RETRY.maximum: 300 s take at least 30 retries
    retries = [
        int(m.group(1))
        for r in caplog.records
        if "[node=n0 " in r.getMessage()
        and (m := re.search(r"bulletin publish failed \(.*\), retry (\d+) in", r.getMessage()))
    ]
    assert retries == list(range(1, len(retries) + 1))
    assert len(retries) >= 300 / BULLETIN_RETRY.maximum
    assert not published_schedules(res.entries["n0"])
    # the others: n0's schedule never came; they ended when nothing more would come
    for v in ids[1:]:
        es = res.entries[v]
        (e,) = [e for e in es if e.event == BULLETIN_END]
        assert e.params["read"] == 7 and e.params["reason"] == "the bulletin holds no more entries"
        assert sorted(published_schedules(es)) == sorted(set(ids) - {"n0", v})
        assert e.ts >= finish


class _Once(Engine):
    """Publishes one entry and finishes at start; records what it reads from the bulletin."""

    def start(self) -> list[Action]:
        return [Publish(Message("note", scalars={self.ctx.me: 1.0})), Output(np.zeros(1))]

    def on_published(self, kind: str, published: Mapping[str, Message]) -> list[Action]:
        return [Record("note", peer=s, params=dict(m.scalars)) for s, m in published.items()]


def _run(back_at: float, runs: tuple[str, ...], wait: float = 120.0) -> dict[str, object]:
    """Participants a, b, c; those in `runs` take part. The bulletin is unreachable until virtual
    time `back_at`. Returns each node's ledger entries and the virtual time the readings ended."""

    async def main() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        ids = ("a", "b", "c")
        board = MemoryBoard(unreachable=lambda v: "down" if loop.time() < back_at else None)
        board.add_job("j", ids)
        net = MemoryNetwork()
        ctx = JobContext("j", "test", "a", ids, {}, 0)
        runners = []
        for v in runs:
            rt = NodeRuntime(
                v,
                MemoryLedger(v, clock=loop.time),
                net.transport(v),
                bulletin=board.bulletin(v),
                bulletin_wait=wait,
            )
            c = ctx.for_node(v)
            r = JobRunner(rt, c, _Once(c, None, np.random.default_rng(0)), True)
            rt.jobs["j"] = r
            rt.ledger.begin_job("j", "test", spec_dict(c), True, [])
            runners.append(r)
        for r in runners:
            await r.start()
        for r in runners:  # the step with the output (and the publication) is durable
            await asyncio.wait_for(r.finished.wait(), 10)
        tasks = [t for r in runners for t in r.bulletin_tasks]
        done, pending = await asyncio.wait(tasks, timeout=10 * wait)
        assert not pending
        for t in done:
            t.result()
        out: dict[str, object] = {"end": loop.time()}
        for r in runners:
            assert r.state == "done"
            out[r.node.node_id] = r.node.ledger.entries("j")
            await r.node.close()
        return out

    got, _ = run_virtual(main())
    return got


def test_the_reading_completes_once_the_bulletin_is_back() -> None:
    out = _run(back_at=45.0, runs=("a", "b", "c"))
    end = out["end"]
    assert isinstance(end, float) and 45.0 <= end <= 45.0 + BULLETIN_RETRY.maximum + 1.0
    for v in ("a", "b", "c"):
        es = out[v]
        assert isinstance(es, list)
        assert sorted(e.peer for e in es if e.event == "note") == sorted({"a", "b", "c"} - {v})
        (e,) = [e for e in es if e.event == BULLETIN_END]
        assert e.params["read"] == e.params["of"] == 3
        assert e.params["reason"] == "complete: every participant's entry read"


def test_the_reading_ends_at_its_bound_when_a_participant_never_publishes() -> None:
    """c never runs; the bulletin is back at 45 s: a and b read each other's entry and wait for
    c's until their bound (120 virtual seconds after publishing), then stop, saying so."""
    out = _run(back_at=45.0, runs=("a", "b"))
    assert out["end"] == pytest.approx(120.0, abs=1e-6)
    for v, other in (("a", "b"), ("b", "a")):
        es = out[v]
        assert isinstance(es, list)
        assert [e.peer for e in es if e.event == "note"] == [other]
        (e,) = [e for e in es if e.event == BULLETIN_END]
        assert e.params["read"] == 2 and e.params["of"] == 3
        assert e.params["reason"] == "its bound passed (120s after the publication)"
        assert e.ts == pytest.approx(120.0, abs=1e-6)
