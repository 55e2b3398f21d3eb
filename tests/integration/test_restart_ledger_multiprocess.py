"""Restarts with real processes, real SIGKILL and real ledgers on disk.

1. A node SIGKILLed after two finished walk jobs and restarted on an EMPTY ledger (its ledger lost)
   does not take part in them again: no contribution in its new ledger, nothing new in its peers'
   ledgers, its earlier reports stand; the bootstrap flags the identity's new ledger (log and
   `netdp job result`); a job submitted afterwards runs with it as usual.
2. A ring node SIGKILLed after it recorded a token as sent but before the token left (nothing
   reached its successor), restarted on the same ledger (it does not resume the ring): `netdp
   audit` passes, since the token was never acknowledged.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import time

import pytest

from netdp_node.algorithms.walk.engine import start_holder
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.errors import LedgerError
from netdp_node.ledger import JobRow, Ledger

pytestmark = pytest.mark.slow

VICTIM = "node-3"
NOT_JOINED = "this node's ledger was created after the job started"


def _walk_seed(ids: list[str]) -> int:
    """A public seed whose walk starts at VICTIM (it would re-start the walk on re-joining)."""
    from netdp_node.protocols.base import JobContext

    seed = next(
        s
        for s in range(1, 100)
        if start_holder(JobContext("x", "walk-sum", VICTIM, tuple(ids), {}, s)) == VICTIM
    )
    return seed


def _summary(nd, ledger_dir, jobs) -> dict[str, tuple[int, int]]:
    """Per job: (entries, contributions) in one ledger."""
    out = {}
    for j in jobs:
        es = nd.entries(ledger_dir, j)
        out[j] = (len(es), sum(1 for e in es if e.event == "contribute"))
    return out


@pytest.mark.timeout(240)
async def test_a_node_back_on_an_empty_ledger_does_not_rerun_finished_jobs(clusters, nd):
    cluster = clusters(4, values=[0.1, 0.2, 0.3, 0.4], seed=3)
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    peers = [p for p in cluster.ids if p != VICTIM]
    old_jobs = ["walk-a", "walk-b"]
    try:
        seed = _walk_seed(cluster.ids)
        for job, T in zip(old_jobs, (40, 120)):
            await op.submit(
                "walk-sum",
                {"T": T, "custody_timeout_s": 5},
                participants=cluster.ids,
                job_id=job,
                seed=seed,
            )
            res = await nd.wait_reports(op, job, cluster.ids, timeout=60)
            assert all(r.state == "done" for r in res.values()), res
        first = {j: {r.node_id: r for r in (await op.result(j)).results} for j in old_jobs}
        assert first["walk-a"][VICTIM].contributions >= 1

        def settled() -> dict[str, dict[str, tuple[int, int]]] | None:
            """The peers' view of the old jobs if it did not change for a second."""
            a = {p: _summary(nd, cluster.ledger(p), old_jobs) for p in peers}
            time.sleep(1.0)
            b = {p: _summary(nd, cluster.ledger(p), old_jobs) for p in peers}
            return a if a == b else None

        # the peers' view of the finished jobs, once their last acknowledgements are written
        before = nd.wait_until(settled, 30, "the peers' ledgers to settle", interval=0.1)

        # node-3 dies and loses its ledger; it comes back on an empty one (same identity)
        cluster.kill(VICTIM, signal.SIGKILL)
        shutil.rmtree(cluster.ledger(VICTIM))
        data = cluster.workdir / "data" / f"{VICTIM}.txt"
        new = cluster.start_node(VICTIM, data=data, extra=["--seed", "3002"])
        cluster.wait_port(new, timeout=30)

        def rows() -> dict[str, JobRow | None]:
            try:
                led = Ledger.open_readonly(cluster.ledger(VICTIM))
            except (LedgerError, sqlite3.Error):  # not created yet
                return {}
            try:
                return {j: led.job(j) for j in old_jobs}
            finally:
                led.close()

        # it learns the old jobs from the bootstrap (they list it)
        nd.wait_until(
            lambda: all(rows().get(j) for j in old_jobs),
            30,
            f"{VICTIM} to record the old jobs in its new ledger",
        )

        # a job submitted now runs with it, as usual (and everything the old jobs could have
        # caused has had the time of a whole job to happen)
        await op.submit(
            "walk-sum", {"T": 40}, participants=cluster.ids, job_id="walk-new", seed=seed
        )
        res = await nd.wait_reports(op, "walk-new", cluster.ids, timeout=60)
        assert all(r.state == "done" for r in res.values()), res
        assert res[VICTIM].contributions >= 1

        # it stayed out of them: no new contribution anywhere; the peers recorded nothing new
        mine = _summary(nd, cluster.ledger(VICTIM), old_jobs)
        assert all(c == 0 for _, c in mine.values()), mine
        for row in rows().values():
            assert row is not None and row.state == "failed" and NOT_JOINED in row.detail, row
        for j in old_jobs:
            es = nd.entries(cluster.ledger(VICTIM), j)
            assert [e.event for e in es] == ["not-joined"], es
        assert nd.wait_until(settled, 30, "the peers' ledgers to settle") == before
        # its first reports stand; the operator is told it came back with a new ledger
        for j in old_jobs:
            reply = await op.result(j)
            now = {r.node_id: r for r in reply.results}
            assert now[VICTIM].state == "done", now[VICTIM]
            assert now[VICTIM].contributions == first[j][VICTIM].contributions
            assert any(
                w.startswith(f"{VICTIM} came back") and "new ledger" in w for w in reply.warnings
            ), reply.warnings
        assert list((await op.result("walk-new")).warnings) == []
        r = nd.netdp(
            "job",
            "result",
            "walk-a",
            "--bootstrap",
            cluster.bootstrap_address,
            "--certs",
            str(cluster.certs("operator")),
        )
        assert r.returncode == 0, r.stderr
        assert f"WARNING: {VICTIM} came back" in r.stdout, r.stdout
        log = cluster.procs["bootstrap"].log_text()
        assert "LEDGER CHANGED" in log and VICTIM in log
    finally:
        await op.close()
    codes = cluster.stop()
    assert codes == {name: 0 for name in codes}, codes


@pytest.mark.timeout(180)
async def test_audit_passes_after_a_ring_node_is_killed_before_its_send_was_acknowledged(
    clusters, nd
):
    cluster = clusters(4, values=[0.1, 0.2, 0.3, 0.4])
    succ = "node-4"  # VICTIM's successor on the ring
    data = cluster.workdir / "data" / f"{VICTIM}.txt"
    # The victim's messages leave 1.5 s after their step is durable (--fault-delay-ms): time to
    # kill it between recording a token as sent and sending it, as a crash at that instant does.
    cluster.kill(VICTIM, signal.SIGTERM)
    cluster.wait_port(cluster.start_node(VICTIM, data=data, extra=["--fault-delay-ms", "1500"]))
    op = BootstrapClient(cluster.bootstrap_address, cluster.operator)
    job = "ring-kill"
    try:
        await cluster.wait_registered(cluster.ids)
        await op.submit("ring-sum", {"rounds": 500}, participants=cluster.ids, job_id=job)

        def received(ledger_dir, peer) -> set[int]:
            try:
                return {
                    e.seq
                    for e in nd.entries(ledger_dir, job)
                    if e.direction == "received" and e.peer == peer and e.kind == "token"
                }
            except LedgerError:
                return set()

        def unacknowledged() -> set[int]:
            sent = {
                e.seq
                for e in nd.entries(cluster.ledger(VICTIM), job)
                if e.direction == "sent" and e.peer == succ
            }
            return sent - received(cluster.ledger(succ), VICTIM)

        nd.wait_until(
            lambda: received(cluster.ledger(VICTIM), "node-2"),
            30,
            f"{VICTIM} to join and take a token",
        )
        nd.wait_until(unacknowledged, 30, f"a token {VICTIM} recorded as sent, not yet sent")
        cluster.kill(VICTIM, signal.SIGKILL)
        lost = unacknowledged()
        assert lost
        # restarted on the same ledger, it does not resume the ring: the job fails there
        new = cluster.start_node(VICTIM, data=data)
        cluster.wait_port(new, timeout=30)
        res = (await nd.wait_reports(op, job, [VICTIM], timeout=30))[VICTIM]
        assert res.state == "failed" and "restarted" in res.detail, res
        assert unacknowledged() == lost  # never delivered (it is not sent again)

        r = nd.netdp(
            "audit",
            *[a for p in cluster.ids for a in ("--ledger", str(cluster.ledger(p)))],
            "--json",
        )
        rep = json.loads(r.stdout)
        assert rep["ok"] and r.returncode == 0, (r.returncode, rep)
    finally:
        await op.close()
    codes = cluster.stop()
    assert codes == {name: 0 for name in codes}, codes
