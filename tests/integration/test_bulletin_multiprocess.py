"""Muffliato over real node processes (mTLS gRPC, a real bootstrap): every node publishes its
schedule once on the job's bulletin at the bootstrap and reads the others' there. No schedule goes
between peers; every node's ledger records its publication and the n - 1 others' schedules, so
its accountant shows the joint view; the bulletin at the bootstrap is complete."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from harness import published_schedules

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.ledger import Ledger
from netdp_node.privacy import muffliato_accountant as ma
from netdp_node.report import ledger_report

pytestmark = pytest.mark.slow

N = 8


def _entries(c: LocalCluster, nid: str, job: str) -> list:
    led = Ledger.open_readonly(c.ledger(nid))
    try:
        return led.entries(job)
    finally:
        led.close()


@pytest.mark.timeout(400)
async def test_muffliato_processes_share_schedules_through_the_bootstrap(tmp_path):
    c = LocalCluster(tmp_path / "c", N, poll_interval=0.2)
    rng = np.random.default_rng(3)
    data = {}
    for nid, v in zip(c.ids, rng.uniform(0.0, 1.0, size=N)):
        f = tmp_path / f"{nid}.txt"
        f.write_text(f"{float(v)!r}\n")
        data[nid] = f
    extra = {nid: ["--seed", str(10 + i)] for i, nid in enumerate(c.ids)}
    try:
        c.start(data=data, extra=extra, timeout=180)
        await c.wait_registered(c.ids, timeout=180)
        op = BootstrapClient(c.bootstrap_address, c.operator)
        try:
            params = {"graph": "hypercube", "sigma": 0.05, "T": 6, "round_timeout_s": 5.0}
            await op.submit("muffliato", params, participants=c.ids, job_id="bul")
            deadline = time.monotonic() + 300
            while True:  # bounded: every node reports done, or the deadline
                reply = await op.result("bul")
                states = {r.node_id: r.state for r in reply.results}
                if len(states) == N or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert states == {v: "done" for v in c.ids}, states
            # the bootstrap's bulletin: one entry per node, complete
            bulletin = await op.read_bulletin("bul", "schedule")
            assert sorted(b.node_id for b in bulletin.entries) == sorted(c.ids)
            assert bulletin.complete and bulletin.next == N
            published = {b.node_id: b for b in bulletin.entries}
        finally:
            await op.close()
        # every node reads the bulletin once it is complete (bounded wait for the last reads)
        deadline = time.monotonic() + 60
        while True:
            counts = {v: len(published_schedules(_entries(c, v, "bul"))) for v in c.ids}
            if all(k == N - 1 for k in counts.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert counts == {v: N - 1 for v in c.ids}, counts
        for v in c.ids:
            es = _entries(c, v, "bul")
            assert not [e for e in es if e.kind == "schedule" and e.direction != "local"]
            (pub,) = [e for e in es if e.event == "publish"]
            assert pub.kind == "schedule"
            assert dict(published[v].entry.scalars) == {}  # no drop: an empty schedule
            assert sorted(published_schedules(es)) == sorted(set(c.ids) - {v})
            job = ledger_report(c.ledger(v), job_id="bul")["jobs"][0]
            assert job["state"] == "done"
            assert ma.JOINT_VIEW in job["baselines"], sorted(job["baselines"])
        # merged ledgers: nothing received that was not sent, nothing recorded twice, every
        # realised edge used by both ends (the bulletin's records are not peer messages)
        from netdp_node.audit import audit

        checks = {x["name"]: x for x in audit([c.ledger(v) for v in c.ids])["checks"]}
        for name in ("gossip-mass-conserved", "tokens-conserved", "received-once"):
            assert checks[name]["ok"], checks[name]
    finally:
        c.stop()
