"""The nodes' job poll is a long poll (ListJobs with wait_ms): the bootstrap holds the call while
nothing is new, and answers as soon as a job for the node is submitted or a new revocation list is
accepted. Real bootstrap process, mTLS."""

from __future__ import annotations

import asyncio
import time

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.security import pki

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


@pytest.mark.timeout(120)
async def test_long_poll_holds_then_answers_on_news(clusters):
    c = clusters(3)
    node = BootstrapClient(c.bootstrap_address, pki.load_identity(c.certs(c.ids[0])))
    op = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        # nothing new: the call is held for the whole wait, then answered with no job
        t0 = time.monotonic()
        assert await node.list_jobs(0, wait=1.5) == []
        assert time.monotonic() - t0 >= 1.4
        # a job submitted during the wait ends it with that job, long before the wait is over
        poll = asyncio.ensure_future(node.list_jobs(0, wait=25.0))
        await asyncio.sleep(0.5)
        assert not poll.done()  # held
        t1 = time.monotonic()
        job = await op.submit("ring-sum", {"rounds": 1}, participants=c.ids, job_id="lp-1")
        got = await asyncio.wait_for(poll, 20.0)
        assert [j.job_id for _, j in got] == [job.job_id]
        assert time.monotonic() - t1 < 20.0  # woken by the submission, not by the wait's end
        after = max(s for s, _ in got)
        # a new revocation list ends a wait too (with no job): the node then fetches the list
        poll = asyncio.ensure_future(node.list_jobs(after, wait=25.0))
        await asyncio.sleep(0.5)
        assert not poll.done()
        crl = pki.revoke(c.pki_dir, c.ids[1])
        await op.publish_revocations(crl)
        assert await asyncio.wait_for(poll, 20.0) == []
        # an operator's listing (no wait) is answered at once, as before
        assert [j.job_id for _, j in await op.list_jobs(0)] == ["lp-1"]
    finally:
        await node.close()
        await op.close()
