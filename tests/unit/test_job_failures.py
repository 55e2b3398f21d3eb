"""A job a node cannot run does not vanish: it ends `failed` at that node with the reason, in its
ledger (so a restart does not try again) and to whoever listens (`on_finished`: the daemon reports
it to the bootstrap). A budget the accountant cannot evaluate declines instead of raising. And the
bootstrap lookups a peer can cause with job ids this node does not know are bounded.

Runtime level, over the in-memory transport; the job specs are built as a bootstrap that did not
check them (or an older one) would have sent them.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import check_budget, per_job_losses
from netdp_node.errors import UnknownJob
from netdp_node.ledger import Ledger
from netdp_node.protocols.base import JobContext, Message, RefusalCode, Refused
from netdp_node.runtime import (
    UNKNOWN_JOB_LOOKUPS,
    UNKNOWN_JOB_TTL,
    Budget,
    JobRunner,
    NodeRuntime,
    spec_dict,
)
from netdp_node.transport.memory import MemoryNetwork

pytestmark = pytest.mark.timeout(30)

IDS = ["node-1", "node-2", "node-3"]


def ring_params(**override):
    p = get_algorithm("ring-sum").prepare({"rounds": 2}, len(IDS))
    p.update(override)  # what the bootstrap would now refuse
    return p


async def join_all(net, ctxs, finished):
    for nid in reversed(IDS):
        await net.nodes[nid].add_job(ctxs[nid])  # must not raise
    await asyncio.wait_for(
        asyncio.gather(*(net.nodes[n].jobs["j"].finished.wait() for n in IDS)), 20
    )


def watch(net):
    finished: list[tuple[str, str, str]] = []
    for nid, rt in net.nodes.items():
        rt.on_finished = lambda r, nid=nid: finished.append((nid, r.state, r.detail))
    return finished


def assert_failed_everywhere(net, finished, reason):
    for nid in IDS:
        runner = net.nodes[nid].jobs["j"]
        assert runner.state == "failed" and reason in runner.detail, (nid, runner.detail)
        row = net.ledger(nid).job("j")
        assert row is not None and row.state == "failed" and reason in row.detail, (nid, row)
        assert not row.contributed
        entries = net.ledger(nid).entries("j")
        assert [e.event for e in entries] == ["cannot-run"]
        assert reason in entries[0].params["reason"]
    assert sorted(n for n, state, _ in finished) == IDS  # each one said so, once
    assert all(state == "failed" and reason in why for _, state, why in finished)


# -- the three reproductions ----------------------------------------------------------------------
async def test_dim_that_does_not_fit_the_data_fails_with_the_reason(tmp_path):
    data = {nid: np.array([0.5]) for nid in IDS}  # scalar data, a job of dim 2^20
    net = await make_net("memory", IDS, tmp_path, data=data)
    finished = watch(net)
    try:
        await join_all(net, contexts("j", "ring-sum", IDS, ring_params(dim=1 << 20)), finished)
        assert_failed_everywhere(net, finished, "data has shape (1,), the job expects (1048576,)")
        # a peer's message for it is refused with the reason, not applied
        with pytest.raises(Refused) as err:
            await net.nodes["node-2"].handle(
                "node-1", "j", Message("token", payload=np.zeros(1 << 20), walk="ring", seq=1)
            )
        assert err.value.code == RefusalCode.FAILED_PRECONDITION
        assert "failed" in err.value.reason and "(1048576,)" in err.value.reason
    finally:
        await net.close()


async def test_histogram_of_values_that_are_not_categories_fails_with_the_reason(tmp_path):
    params = get_algorithm("walk-histogram").prepare({"T": 6, "bins": 4}, len(IDS))
    data = {nid: np.array([v]) for nid, v in zip(IDS, [0.25, 0.5, 0.75])}
    net = await make_net("memory", IDS, tmp_path, data=data)
    finished = watch(net)
    try:
        await join_all(net, contexts("j", "walk-histogram", IDS, params), finished)
        assert_failed_everywhere(net, finished, "histogram data must be one integer category")
    finally:
        await net.close()


async def test_budget_the_accountant_cannot_bound_declines_and_the_job_ends(tmp_path):
    """rounds·δ + δ' ≥ 1: Theorem 1's accountant cannot bound the job. Every node declines (with
    the accountant's reason), adds its noise, and the job ends done."""
    params = ring_params(delta=0.3)  # 2 × 0.3 + δ' < 1 ... at 4 rounds it is not
    params["rounds"] = 4
    assert params["rounds"] * params["delta"] + params["delta_prime"] >= 1
    data = {nid: np.array([v]) for nid, v in zip(IDS, [0.25, 0.5, 0.75])}
    budgets = {nid: Budget(epsilon=1e9, delta=0.999) for nid in IDS}
    net = await make_net("memory", IDS, tmp_path, data=data, budgets=budgets)
    finished = watch(net)
    try:
        await join_all(net, contexts("j", "ring-sum", IDS, params), finished)
        for nid in IDS:
            runner = net.nodes[nid].jobs["j"]
            assert runner.state == "done" and not runner.contributed, (nid, runner.detail)
            assert "windows*delta + delta_prime must be < 1" in runner.detail
            declines = [e for e in net.ledger(nid).entries("j") if e.event == "decline"]
            assert len(declines) == 1 and runner.detail == declines[0].params["reason"]
            assert net.ledger(nid).job("j").state == "done"
        assert sorted(n for n, _, _ in finished) == IDS
    finally:
        await net.close()


async def test_absurd_rounds_decline_on_a_budget_and_the_job_still_ends(tmp_path):
    """The reproduction: rounds = 10^12 on nodes with a budget. Each declines with the
    accountant's reason (no exception), takes part noise-only, and the job ends: failed at its
    deadline (10^12 rounds never finish), with the reason."""
    params = ring_params(rounds=10**12, deadline_s=1.0)
    data = {nid: np.array([v]) for nid, v in zip(IDS, [0.25, 0.5, 0.75])}
    budgets = {nid: Budget(epsilon=10.0, delta=1e-5) for nid in IDS}
    net = await make_net("memory", IDS, tmp_path, data=data, budgets=budgets)
    finished = watch(net)
    try:
        await join_all(net, contexts("j", "ring-sum", IDS, params), finished)
        for nid in IDS:
            runner = net.nodes[nid].jobs["j"]
            assert runner.state == "failed" and not runner.contributed, (nid, runner.detail)
            assert "deadline of 1s passed" in runner.detail, (nid, runner.detail)
            declines = [e for e in net.ledger(nid).entries("j") if e.event == "decline"]
            assert len(declines) == 1, nid
            assert "windows*delta + delta_prime must be < 1" in declines[0].params["reason"]
            assert net.ledger(nid).job("j").state == "failed"
            assert not any(e.event == "contribute" for e in net.ledger(nid).entries("j"))
        assert sorted(n for n, _, _ in finished) == IDS
    finally:
        await net.close()


def test_check_budget_declines_absurd_rounds_instead_of_raising():
    spec = {
        "job_id": "j",
        "algorithm": "ring-sum",
        "participants": IDS,
        "params": ring_params(rounds=10**12),
        "public_seed": 1,
        "edges": [],
    }
    check = check_budget([], spec, "node-1", epsilon=10.0, delta=1e-5)
    assert not check.ok and "windows*delta + delta_prime must be < 1" in check.reason
    # and a job it can bound is unaffected: 2 rounds at σ for ε = 0.5 per window
    spec["params"] = ring_params()
    assert check_budget([], spec, "node-1", epsilon=10.0, delta=1e-5).ok


# -- restart, and the accountant after a failure ------------------------------------------------
async def test_a_restart_does_not_run_a_failed_job_again(tmp_path):
    ctx = JobContext("j", "ring-sum", "node-1", tuple(IDS), ring_params(dim=3), 1)
    data = np.array([0.5])
    rt = NodeRuntime(
        "node-1",
        Ledger(tmp_path / "n1", "node-1"),
        MemoryNetwork().transport("x"),
        data=data,
        budget=Budget(1.0, 1e-5),
    )
    seen: list[JobRunner] = []
    rt.on_finished = seen.append
    await rt.add_job(ctx)
    reason = rt.jobs["j"].detail
    assert rt.jobs["j"].state == "failed" and "expects (3,)" in reason and len(seen) == 1
    rt.ledger.close()
    # the node restarts: the job is in the ledger as failed; it is not run (nor recorded) again
    rt = NodeRuntime(
        "node-1",
        Ledger(tmp_path / "n1", "node-1"),
        MemoryNetwork().transport("x"),
        data=data,
        budget=Budget(1.0, 1e-5),
    )
    rt.on_finished = seen.append
    await rt.add_job(ctx)
    try:
        assert rt.jobs["j"].state == "failed" and rt.jobs["j"].detail == reason
        assert [e.event for e in rt.ledger.entries("j")] == ["cannot-run"]
        # reported again as it stands (the first report may have died with the process)
        assert len(seen) == 2 and seen[1].state == "failed" and seen[1].detail == reason
        # nothing left the node: the job costs nothing towards anyone, and the next job's budget
        # check sees the budget whole
        view = JobView("j", spec_dict(ctx), rt.ledger.entries("j"))
        assert per_job_losses(view, "node-1") == {}
        ok = JobContext("k", "ring-sum", "node-1", tuple(IDS), ring_params(), 1)
        alone = check_budget([], spec_dict(ok), "node-1", 1.0, 1e-5)
        after = check_budget([view], spec_dict(ok), "node-1", 1.0, 1e-5)
        assert after.worst == alone.worst
    finally:
        await rt.close()
        rt.ledger.close()


# -- bootstrap lookups for unknown job ids --------------------------------------------------------
def _token() -> Message:
    return Message("token", payload=np.zeros(1), walk="ring", seq=1)


async def test_unknown_job_ids_cost_a_bounded_number_of_bootstrap_lookups(tmp_path):
    calls: list[str] = []

    async def fetch(job_id: str) -> tuple[JobContext, int] | None:
        calls.append(job_id)
        await asyncio.sleep(0)  # a real call yields
        return None  # the bootstrap does not know these ids

    rt = NodeRuntime(
        "node-1",
        Ledger(tmp_path / "n1", "node-1"),
        MemoryNetwork().transport("x"),
        job_fetcher=fetch,
    )
    loop = asyncio.get_running_loop()
    try:
        t0 = loop.time()
        # 300 distinct ids from node-2, one after the other and then all at once
        for i in range(150):
            with pytest.raises(UnknownJob):
                await rt.handle("node-2", f"made-up-{i}", _token())
        got = await asyncio.gather(
            *(rt.handle("node-2", f"made-up-{i}", _token()) for i in range(150, 300)),
            return_exceptions=True,
        )
        assert all(isinstance(g, UnknownJob) for g in got)
        windows = math.floor((loop.time() - t0) / UNKNOWN_JOB_TTL) + 1
        assert 1 <= len(calls) <= UNKNOWN_JOB_LOOKUPS * windows, (len(calls), windows)
        # node-3's lookups are its own: node-2 did not spend them
        before = len(calls)
        with pytest.raises(UnknownJob):
            await rt.handle("node-3", "made-up-by-3", _token())
        assert calls[before:] == ["made-up-by-3"]
    finally:
        await rt.close()
        rt.ledger.close()


async def test_a_new_job_is_still_learnt_at_once(tmp_path):
    """A message for a job the bootstrap knows: one lookup (shared by concurrent messages), then
    the node runs it; and the long poll's add_job works even when a peer spent the lookups."""
    params = ring_params()
    ctxs = contexts("j", "ring-sum", IDS, params)
    data = {nid: np.array([v]) for nid, v in zip(IDS, [0.25, 0.5, 0.75])}
    net = await make_net("memory", IDS, tmp_path, data=data)
    calls: dict[str, list[str]] = {nid: [] for nid in IDS}

    def fetcher(nid: str):
        async def fetch(job_id: str) -> tuple[JobContext, int] | None:
            calls[nid].append(job_id)
            await asyncio.sleep(0)
            return (ctxs[nid], 1) if job_id == "j" else None

        return fetch

    for nid in IDS:
        net.nodes[nid].job_fetcher = fetcher(nid)
    try:
        # node-3 has its lookups spent by a peer sending made-up ids...
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(10):
            with pytest.raises(UnknownJob):
                await net.nodes["node-3"].handle("node-2", f"junk-{i}", _token())
        windows = math.floor((loop.time() - t0) / UNKNOWN_JOB_TTL) + 1
        assert UNKNOWN_JOB_LOOKUPS <= len(calls["node-3"]) <= UNKNOWN_JOB_LOOKUPS * windows
        await net.nodes["node-3"].add_job(ctxs["node-3"])  # ... and learns the job by its poll
        # node-1 starts; node-2 learns the job from node-1's token (one lookup)
        await net.nodes["node-1"].add_job(ctxs["node-1"])
        deadline = loop.time() + 20
        while "j" not in net.nodes["node-2"].jobs:  # until node-1's token reaches node-2
            assert loop.time() < deadline, "node-2 never learnt the job"
            await asyncio.sleep(0.01)
        await net.wait_done("j", IDS)
        assert all(net.nodes[n].jobs["j"].state == "done" for n in IDS)
        assert calls["node-2"] == ["j"] and calls["node-1"] == []
        values = {tuple(np.atleast_1d(net.nodes[n].jobs["j"].output.value)) for n in IDS}
        assert len(values) == 1
    finally:
        await net.close()


async def test_concurrent_messages_for_one_new_job_share_one_lookup(tmp_path):
    ctx = JobContext("j", "ring-sum", "node-2", tuple(IDS), ring_params(), 1)
    calls: list[str] = []
    release = asyncio.Event()

    async def fetch(job_id: str) -> tuple[JobContext, int] | None:
        calls.append(job_id)
        await release.wait()
        return ctx, 1

    rt = NodeRuntime(
        "node-2",
        Ledger(tmp_path / "n2", "node-2"),
        MemoryNetwork().transport("x"),
        data=np.array([0.5]),
        job_fetcher=fetch,
    )
    try:
        lookups = [asyncio.ensure_future(rt._job_for("j", f"node-{i % 3 + 1}")) for i in range(50)]
        await asyncio.sleep(0)
        release.set()
        runners = await asyncio.gather(*lookups)
        assert calls == ["j"] and all(r is rt.jobs["j"] for r in runners)
    finally:
        await rt.close()
        rt.ledger.close()


def test_a_job_never_run_costs_nothing_in_the_privacy_report(tmp_path):
    """A gossip job that failed before its first step: no loss towards anyone, nothing learnt."""
    ids = ["node-1", "node-2", "node-3", "node-4"]
    params = get_algorithm("muffliato").prepare({"graph": "ring", "T": 3, "sigma": 1.0}, 4)
    ctx = JobContext("m", "muffliato", "node-1", tuple(ids), params, 1)
    rt = NodeRuntime(
        "node-1",
        Ledger(tmp_path / "n1", "node-1"),
        MemoryNetwork().transport("x"),
        data=np.array([0.5, 0.5]),
    )  # muffliato of dim 1: two numbers do not fit
    seen: list[JobRunner] = []
    rt.on_finished = seen.append
    try:
        asyncio.run(rt.add_job(ctx))  # (a sync test: the join runs on a loop of its own)
        runner = rt.jobs["m"]
        assert runner.state == "failed" and "the job expects (1,)" in runner.detail
        assert not runner.contributed and seen == [runner]
        assert rt.ledger.job("m").state == "failed"
        assert [e.event for e in rt.ledger.entries("m")] == ["cannot-run"]
    finally:
        rt.ledger.close()
    from netdp_node.report import ledger_report

    job = ledger_report(tmp_path / "n1")["jobs"][0]
    assert job["state"] == "failed" and job["epsilon"] == 0.0 and job["peers"] == []
    assert job["incoming"] == []
