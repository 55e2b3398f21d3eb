"""The ledger's group commit and deferred receipts (netdp_node/ledger.py `stage`, runtime step 5).

The invariant under test: a message is acknowledged (its `handle` returns), and anything its step
causes is sent, only once the step is durable in the SQLite file; steps that are ready together,
and the receipts an engine lets wait (`Engine.defer_receipts`), share one transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import ClassVar

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import ALGORITHMS, Algorithm, get_algorithm
from netdp_node.algorithms.muffliato.engine import MuffliatoSync
from netdp_node.faults import FaultInjector, FaultPlan
from netdp_node.ledger import Entry, Ledger
from netdp_node.protocols.base import Engine, Flush, JobContext, Message, Params, Record
from netdp_node.runtime import NodeRuntime
from netdp_node.transport.memory import MemoryNetwork
from netdp_node.vclock import run_virtual

pytestmark = pytest.mark.timeout(60)


def count_commits(ledger: Ledger) -> list[int]:
    """Counts the COMMIT statements the ledger's connection executes (SQLite's own trace)."""
    n = [0]
    ledger._db.set_trace_callback(lambda sql: n.__setitem__(0, n[0] + (sql == "COMMIT")))
    return n


def received(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.direction == "received"]


async def test_steps_staged_together_share_one_commit(tmp_path, nd):
    led = Ledger(tmp_path, "n0")
    commits = count_commits(led)
    futs = [led.stage([Entry(job_id="j", direction="local", event=f"e{i}")]) for i in range(3)]
    futs.append(
        led.stage(
            [
                Entry(
                    job_id="j",
                    direction="received",
                    event="value",
                    peer="n1",
                    kind="value",
                    round=i,
                    digest="d",
                )
                for i in range(2)
            ],
            defer=True,
        )
    )
    assert nd.entries(tmp_path, "j") == []  # staged: not in the file yet
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert commits[0] == 1
    assert [e.event for e in nd.entries(tmp_path, "j")] == ["e0", "e1", "e2", "value", "value"]
    led.close()


async def test_a_deferred_step_waits_for_a_later_commit_or_the_bound(tmp_path, monkeypatch, nd):
    monkeypatch.setattr(Ledger, "DEFER_MAX_S", 0.3)
    led = Ledger(tmp_path, "n0")
    commits = count_commits(led)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    late = led.stage([Entry(job_id="j", direction="local", event="late")], defer=True)
    await asyncio.sleep(0.05)
    assert not late.done() and nd.entries(tmp_path, "j") == [] and commits[0] == 0
    await asyncio.wait_for(late, 5)  # the bound
    assert loop.time() - t0 >= 0.3 - 1e-3 and commits[0] == 1
    # a deferred step is written with the next step that is not deferred, in staging order
    waiting = led.stage([Entry(job_id="j", direction="local", event="waits")], defer=True)
    now = led.stage([Entry(job_id="j", direction="local", event="now")])
    await asyncio.wait_for(now, 1)
    assert waiting.done() and commits[0] == 2
    # ... or at flush_soon
    third = led.stage([Entry(job_id="j", direction="local", event="third")], defer=True)
    led.flush_soon()
    await asyncio.wait_for(third, 0.2)
    assert [e.event for e in nd.entries(tmp_path, "j")] == ["late", "waits", "now", "third"]
    # a read on the writer's connection sees everything staged (it commits first)
    led.stage([Entry(job_id="j", direction="local", event="read")], defer=True)
    assert led.entries("j")[-1].event == "read"
    led.close()


class _Deferring(Engine):
    """Receives values and only records; flushes when told to by a `flush` message."""

    algorithm = "test-deferring"
    defer_receipts = True

    def start(self):
        return []

    def on_message(self, sender, msg):
        return [Flush()] if msg.kind == "flush" else [Record("got", peer=sender)]


@dataclasses.dataclass(frozen=True)
class _DeferringParams(Params):
    algorithm: ClassVar[str] = "test-deferring"

    @classmethod
    def prepare(cls, raw, n):
        return cls()


@pytest.fixture
def deferring_node(tmp_path, monkeypatch):
    monkeypatch.setitem(
        ALGORITHMS,
        "test-deferring",
        Algorithm(
            "test-deferring",
            _Deferring,
            _DeferringParams,
            "complete",
            # every record has an accountant; these tests never ask it (no budget, no report)
            accountant=get_algorithm("ring-sum").accountant,
            threat=get_algorithm("ring-sum").threat,
        ),
    )
    monkeypatch.setattr(Ledger, "DEFER_MAX_S", 30.0)  # only a Flush commits in these tests
    ledger = Ledger(tmp_path, "a")
    node = NodeRuntime("a", ledger, MemoryNetwork().transport("a"))
    ctx = JobContext("j", "test-deferring", "a", ("a", "b", "c"), {}, 1)
    return node, ledger, ctx, tmp_path


async def test_a_deferred_receipt_is_acknowledged_only_once_durable(deferring_node, nd):
    node, ledger, ctx, directory = deferring_node
    await node.add_job(ctx)
    commits = count_commits(ledger)
    first = asyncio.ensure_future(node.handle("b", "j", Message("value", round=0)))
    second = asyncio.ensure_future(node.handle("c", "j", Message("value", round=0)))
    # a re-send of a staged message is recognised; it is acknowledged with the original
    again = asyncio.ensure_future(node.handle("b", "j", Message("value", round=0)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not (first.done() or second.done() or again.done())  # no acknowledgement yet
    assert received(nd.entries(directory, "j")) == [] and commits[0] == 0
    await asyncio.wait_for(node.handle("b", "j", Message("flush")), 5)
    assert await first is False and await second is False and await again is True
    assert commits[0] == 1  # the two receipts and the flush step: one transaction
    got = received(nd.entries(directory, "j"))
    assert sorted((e.peer, e.kind) for e in got) == [("b", "flush"), ("b", "value"), ("c", "value")]
    await node.close()
    ledger.close()


async def test_a_crash_before_the_commit_loses_only_unacknowledged_receipts(deferring_node):
    node, ledger, ctx, directory = deferring_node
    await node.add_job(ctx)
    await asyncio.wait_for(node.handle("b", "j", Message("flush")), 5)  # acknowledged: durable
    pending = asyncio.ensure_future(node.handle("c", "j", Message("value", round=3)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not pending.done()
    # the process dies here: the staged step never reaches the file, and was never acknowledged
    ledger._staged.clear()
    pending.cancel()
    ledger.close()
    after = Ledger(directory, "a")
    try:
        got = received(after.entries("j"))
        assert [(e.peer, e.kind) for e in got] == [("b", "flush")]
        # the sender re-sends the unacknowledged message; it is new to the restarted node
        assert after.received_digest("j", "c", Message("value", round=3).key()) is None
    finally:
        after.close()


def _muffliato_params(n: int, T: int) -> dict:
    return get_algorithm("muffliato").prepare(
        {"graph": "hypercube", "T": T, "sigma": 0.5, "clip": 10.0}, n
    )


def _muffliato_commits_on_a_virtual_clock(root, ids: list[str], T: int) -> dict[str, int]:
    """Runs one Muffliato job over the in-memory transport on the virtual clock (`netdp_node.
    vclock`: deterministic, whatever the machine's load) with real SQLite ledgers; node i delays
    what it sends by (i + 1)/10 of `Ledger.DEFER_MAX_S`, so a node's three values of a round arrive
    apart but within the defer window. Returns each node's number of COMMITs."""

    async def main() -> dict[str, int]:
        net = MemoryNetwork(apply_faults=True)
        nodes: dict[str, NodeRuntime] = {}
        for i, nid in enumerate(ids):
            delay_ms = 1000 * Ledger.DEFER_MAX_S * (i + 1) / 10
            rt = NodeRuntime(
                nid,
                Ledger(root / nid, nid),
                net.transport(nid),
                data=np.array([float(i)]),
                rng_factory=lambda job, i=i: np.random.default_rng([3, i]),
                faults=FaultInjector(FaultPlan(delay_ms=delay_ms), lambda: 0.0),
            )
            net.nodes[nid] = nodes[nid] = rt
        commits = {v: count_commits(nodes[v].ledger) for v in ids}
        ctx = contexts("j", "muffliato", ids, _muffliato_params(len(ids), T), seed=3)
        try:
            for nid in reversed(ids):
                await nodes[nid].add_job(ctx[nid])
            for nid in ids:  # virtual seconds: the job takes well under one
                await asyncio.wait_for(nodes[nid].jobs["j"].finished.wait(), 60)
            for v in ids:
                entries = nodes[v].ledger.entries("j")
                values = [e for e in received(entries) if e.kind == "value"]
                rounds = [e for e in entries if e.event == "round"]
                assert len(rounds) == T and len(values) == 3 * T  # hypercube of 8: degree 3
                assert nodes[v].jobs["j"].output is not None
            return {v: commits[v][0] for v in ids}
        finally:
            for rt in nodes.values():
                await rt.close()
            for rt in nodes.values():
                rt.ledger.close()

    result, _ = run_virtual(main())
    return result


def test_muffliato_round_values_share_commits(tmp_path, monkeypatch):
    """Muffliato defers its receipts: a round's values are committed together when its window
    closes, so a node commits about twice per round (the window closes; the round finishes) plus
    the job's start, contribution and end, instead of once per value. On the virtual clock the
    delivery order and the defer window are the same on every run; the same run without deferred
    receipts commits more (the control: this count does measure the deferral)."""
    ids = [f"n{i}" for i in range(8)]
    T = 6
    deferred = _muffliato_commits_on_a_virtual_clock(tmp_path / "deferred", ids, T)
    assert all(c <= 2 * T + 3 for c in deferred.values()), deferred
    monkeypatch.setattr(MuffliatoSync, "defer_receipts", False)
    every = _muffliato_commits_on_a_virtual_clock(tmp_path / "every", ids, T)
    assert all(every[v] > deferred[v] for v in ids), (every, deferred)
    assert sum(every.values()) > 1.5 * sum(deferred.values()), (every, deferred)


async def test_muffliato_commits_over_grpc_stay_bounded(tmp_path, monkeypatch):
    """The same job over real gRPC (mTLS, the loopback): what arrives within one defer window
    depends on the machine's load, so the count is bounded by what holds for EVERY delivery
    order. With the defer bound out of the way (only steps commit, never the timer), a round
    commits at most when its window closes, at each acknowledgement after that (Muffliato
    flushes then) and when it finishes: 4 per round, plus the job's start, contribution and end;
    every value and round is in the ledgers and the job ends with a finite result."""
    monkeypatch.setattr(Ledger, "DEFER_MAX_S", 1000.0)  # longer than the test may run
    ids = [f"n{i}" for i in range(8)]
    T = 12
    data = {v: np.array([float(i)]) for i, v in enumerate(ids)}
    net = await make_net("grpc", ids, tmp_path, data=data, seed=3)
    try:
        commits = {v: count_commits(net.ledger(v)) for v in ids}
        params = _muffliato_params(len(ids), T)
        await net.run_job(contexts("j", "muffliato", ids, params, seed=3), timeout=40)
        for v in ids:
            entries = net.ledger(v).entries("j")
            values = [e for e in received(entries) if e.kind == "value"]
            rounds = [e for e in entries if e.event == "round"]
            assert len(rounds) == T and len(values) == 3 * T  # hypercube of 8: degree 3
            assert commits[v][0] <= 4 * T + 3, (v, commits[v][0])
        mean = np.mean([net.nodes[v].jobs["j"].output.value[0] for v in ids])
        assert math.isfinite(mean)
    finally:
        await net.close()
