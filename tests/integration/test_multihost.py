"""64 node daemons in ONE host process (`netdp node --certs A --certs B ...`), each with its own
certificate, mTLS server, port and ledger, talking to each other and to the bootstrap over real
mTLS gRPC on loopback:

- a ring sum and a walk sum complete, and their released results agree with the true sums within
  5 standard deviations of the noise the accountant calibrated (ring: `ring_sum_utility`; walk:
  √T·σ), counting each node's contributions as its own ledger reports them;
- SIGKILL of the host process in the middle of a long ring sum (every hosted node dies at once),
  then a restart of the host on the same ledgers: no node forgot an entry it had committed (hence
  nothing it acknowledged), each reports the interrupted job failed, its privacy report is the one
  it had at the kill, and the audit of the 64 merged ledgers (every acknowledged message was sent
  and recorded by its sender, privacy never decreases) passes.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from netdp_node import audit
from netdp_node.algorithms.ring.accountant import ring_sum_utility
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.errors import LedgerError
from netdp_node.jobs import result_summary
from netdp_node.report import ledger_report

pytestmark = pytest.mark.slow

N = 64
HOST = "host-1"


def _values(c: LocalCluster) -> dict[str, float]:
    rng = np.random.default_rng(15)
    out = {nid: float(rng.uniform(0.0, 1.0)) for nid in c.ids}
    c.write_data({nid: repr(v) for nid, v in out.items()})
    return out


@pytest.fixture
def hosted(tmp_path: Path, request: pytest.FixtureRequest):
    c = LocalCluster(tmp_path / "c", N, poll_interval=0.5)
    values = _values(c)
    try:
        c.start(
            data={nid: c.workdir / "data" / f"{nid}.txt" for nid in c.ids},
            workers=1,
            seeds={nid: 5000 + i for i, nid in enumerate(c.ids)},
            timeout=120,
        )
        assert set(c.procs) == {"bootstrap", HOST} and c.hosted(HOST) == c.ids
        yield c, values
    finally:
        codes = c.stop(grace=30)
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for p in c.procs.values():
                print(f"--- {p.name}\n{p.log_text()[-6000:]}")
        assert all(v == 0 for v in codes.values()), codes  # every node stopped cleanly


async def _wait_done(op: BootstrapClient, job_id: str, c: LocalCluster, stall: float = 120):
    from netdp_node.waiting import await_progress

    async def finished():
        s = result_summary(await op.result(job_id))
        return s if s["complete"] or s["failed"] else None

    return await await_progress(
        finished, f"job {job_id}", stall=stall, progress=c.progress(), interval=0.5
    )


def _ledger_contributions(c: LocalCluster, job_id: str) -> dict[str, int]:
    return {
        nid: ledger_report(c.ledger(nid), job_id=job_id)["jobs"][0]["contributions"]
        for nid in c.ids
    }


@pytest.mark.timeout(900)
async def test_64_hosted_nodes_ring_and_walk_sums(hosted):
    c, values = hosted
    op = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        ring = await op.submit(
            "ring-sum",
            {"rounds": 2, "epsilon": 0.5, "delta": 1e-6, "clip": 1.0, "delta_prime": 1e-6},
            participants=c.ids,
            seed=3,
            job_id="ring-64",
        )
        s = await _wait_done(op, ring.job_id, c)
        assert s["state"] == "done", s["failed"]
        assert s["outputs_agree"] and sorted(s["contributors"]) == sorted(c.ids)
        params = json.loads(ring.params_json)
        truth = sum(min(1.0, max(-1.0, values[nid])) for nid in c.ids)
        std = ring_sum_utility({"participants": c.ids, "params": params})["netdp_std"]
        assert abs(s["value"][0] - truth) <= 5 * std, (s["value"], truth, std)
        # every node's own ledger tells the same contributions as its report
        assert _ledger_contributions(c, ring.job_id) == s["contributions"]

        walk = await op.submit(
            "walk-sum",
            {"T": 256, "delta": 1e-6, "clip": 1.0, "custody_timeout_s": 60.0},
            participants=c.ids,
            seed=4,
            job_id="walk-64",
        )
        s = await _wait_done(op, walk.job_id, c)
        assert s["state"] == "done", s["failed"]
        p = json.loads(walk.params_json)
        counts = _ledger_contributions(c, walk.job_id)
        assert counts == s["contributions"] and 0 < sum(counts.values()) <= p["T"]
        truth = sum(counts[nid] * min(1.0, max(-1.0, values[nid])) for nid in c.ids)
        std = int(p["T"]) ** 0.5 * p["sigma"]
        assert abs(s["value"][0] - truth) <= 5 * std, (s["value"], truth, std)
        for nid in c.ids:  # the calibrated target ε (default 1) holds at every node
            assert (
                ledger_report(c.ledger(nid), job_id=walk.job_id)["jobs"][0]["epsilon"] <= 1.0 + 1e-9
            )
    finally:
        await op.close()
    rep = audit.audit([c.ledger(nid) for nid in c.ids])
    assert rep["ok"], [ch for ch in rep["checks"] if not ch["ok"]]


@pytest.mark.timeout(900)
async def test_sigkill_of_the_host_loses_nothing_acknowledged(hosted, nd):
    c, _ = hosted
    job = "long-ring"
    op = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        await op.submit("ring-sum", {"rounds": 400}, participants=c.ids, job_id=job)

        def received(nid: str) -> int:
            try:
                return sum(1 for e in nd.entries(c.ledger(nid), job) if e.direction == "received")
            except LedgerError:  # not created yet
                return 0

        # well into the job: tokens have gone round the ring (acknowledged at every node)
        nd.wait_until(
            lambda: all(received(nid) >= 2 for nid in c.ids),
            120,
            "every hosted node to acknowledge tokens",
            progress=nd.progress(c),
        )
        before = {nid: nd.entries(c.ledger(nid), job) for nid in c.ids}
        host = c.procs[HOST]
        c.kill(HOST, signal.SIGKILL)
        assert host.popen is not None and host.popen.returncode == -signal.SIGKILL
        at_kill = {nid: nd.entries(c.ledger(nid), job) for nid in c.ids}
        reports = {nid: ledger_report(c.ledger(nid), job_id=job)["jobs"][0] for nid in c.ids}
        for nid in c.ids:
            assert at_kill[nid][: len(before[nid])] == before[nid], nid

        # restart the host process on the same ledgers (new ports)
        new = c.start_host(HOST, c.ids, data_dir=c.workdir / "data", extra=["--seed", "5000"])
        await asyncio.get_running_loop().run_in_executor(None, c.wait_host, new, 120)
        results = await nd.wait_reports(op, job, c.ids, timeout=120)
        for nid in c.ids:
            after = nd.entries(c.ledger(nid), job)
            assert after[: len(at_kill[nid])] == at_kill[nid], nid
            assert results[nid].state == "failed" and "restarted" in results[nid].detail
            rep = ledger_report(c.ledger(nid), job_id=job)["jobs"][0]
            assert rep["contributions"] == reports[nid]["contributions"]
            assert rep["epsilon"] == reports[nid]["epsilon"], nid
            assert rep["peers"] == reports[nid]["peers"], nid
    finally:
        await op.close()
    rep = audit.audit([c.ledger(nid) for nid in c.ids])
    assert rep["ok"], [ch for ch in rep["checks"] if not ch["ok"]]
    # every token a node acknowledged was recorded as sent by its predecessor
    final = {nid: nd.entries(c.ledger(nid), job) for nid in c.ids}
    sent = {
        (nid, x.peer, x.kind, x.seq, x.round)
        for nid in c.ids
        for x in final[nid]
        if x.direction == "sent"
    }
    for nid in c.ids:
        for e in final[nid]:
            if e.direction == "received":
                assert (e.peer, nid, e.kind, e.seq, e.round) in sent, (nid, e)
