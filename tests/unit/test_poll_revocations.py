"""A node reads the bootstrap's revocation list only when it may have changed.

Each poll used to be two calls (GetRevocations, then the ListJobs long poll), so 1,000 idle nodes
cost the bootstrap about 80 calls a second. The long poll already ends at once when the bootstrap
holds a newer list than the caller's (`crl_number`), so the node now reads the list at its first
poll, after an error, and after a poll answered early with no job; a poll held to its end, or one
that brought jobs, is followed by the next long poll alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from netdp_node import daemon
from netdp_node.daemon import NodeDaemon
from netdp_node.security.identity import RevocationList

HOLD = 0.2


class Bootstrap:
    """Scripted answers of ListJobs: 'held' (no news until the wait is over), 'early' (a newer
    list ends the poll at once), 'jobs' (a job at once), 'error'."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.calls: list[str] = []

    async def revocations(self) -> bytes:
        self.calls.append("GetRevocations")
        return b""

    async def list_jobs(self, after: int, *, wait: float, crl_number: int) -> list[Any]:
        self.calls.append("ListJobs")
        what = self.script.pop(0)
        if what == "held":
            await asyncio.sleep(wait)
            return []
        if what == "jobs":
            return [(after + 1, object())]
        if what == "error":
            raise ConnectionError("bootstrap gone")
        return []


def _node(bootstrap: Bootstrap) -> NodeDaemon:
    node = NodeDaemon.__new__(NodeDaemon)  # only the polling state; no certificate needed here
    node.bootstrap = bootstrap  # type: ignore[assignment]
    node.revocations = RevocationList.empty()
    node._crl_due = True
    node.node_id = "node-1"
    return node


async def test_the_list_is_read_only_when_it_may_have_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(daemon, "LONG_POLL_S", HOLD)
    script = ["held", "held", "early", "held", "jobs", "held", "error", "held"]
    boot = Bootstrap(script)
    node = _node(boot)
    per_poll: list[int] = []
    for _ in script:
        before = boot.calls.count("GetRevocations")
        try:
            await node._fetch_updates(0)
        except ConnectionError:
            pass
        per_poll.append(boot.calls.count("GetRevocations") - before)
    # read at the first poll; not after a held poll; after the early answer; not after jobs;
    # after the error
    assert per_poll == [1, 0, 0, 1, 0, 0, 0, 1]
    assert boot.calls.count("ListJobs") == len(script)


async def test_a_failed_read_of_the_list_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon, "LONG_POLL_S", HOLD)
    boot = Bootstrap(["held", "held"])
    failures = [ConnectionError("down")]
    real = boot.revocations

    async def flaky() -> bytes:
        if failures:
            boot.calls.append("GetRevocations")
            raise failures.pop()
        return await real()

    boot.revocations = flaky  # type: ignore[method-assign]
    node = _node(boot)
    with pytest.raises(ConnectionError):
        await node._fetch_updates(0)
    await node._fetch_updates(0)
    await node._fetch_updates(0)
    assert boot.calls == ["GetRevocations", "GetRevocations", "ListJobs", "ListJobs"]
