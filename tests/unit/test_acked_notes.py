"""A sender's `acked` notes share the commit of its next protocol step (runtime `note_acked`)
instead of taking a transaction, an fsync, of their own per acknowledgement; none is lost when the
runtime closes, and a node with no further step commits them after ACKED_NOTE_MAX_S."""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node import runtime as runtime_mod
from netdp_node.algorithms import get_algorithm
from netdp_node.ledger import Entry, Ledger
from netdp_node.runtime import NodeRuntime
from netdp_node.transport.memory import MemoryNetwork

pytestmark = pytest.mark.timeout(60)

IDS = ["n0", "n1", "n2", "n3"]


def transactions(entries: list[Entry]) -> list[list[Entry]]:
    """The ledger's transactions: the entries of one commit share its time."""
    by: dict[float, list[Entry]] = collections.defaultdict(list)
    for e in entries:
        by[e.ts].append(e)
    return list(by.values())


async def test_acked_notes_ride_with_the_next_step_and_none_is_lost(tmp_path, monkeypatch):
    # The ledger's own bound for a note, shorter than any hop: before, every acknowledgement
    # was committed by itself as soon as it arrived.
    monkeypatch.setattr(Ledger, "DEFER_MAX_S", 0.0)
    # longer than the job: the notes wait for a step (or the runtime's close), never the bound
    monkeypatch.setattr(runtime_mod, "ACKED_NOTE_MAX_S", 60.0)
    data = {nid: np.array([0.1 * (i + 1)]) for i, nid in enumerate(IDS)}
    net = await make_net("memory", IDS, tmp_path, data=data)
    try:
        params = get_algorithm("ring-sum").prepare({"rounds": 4}, len(IDS))
        await net.run_job(contexts("j", "ring-sum", IDS, params))
    finally:
        await net.close()
    for nid in IDS:
        entries = Ledger.open_readonly(tmp_path / nid).entries("j")
        sent = collections.Counter(
            (e.peer, e.kind, e.seq, e.round) for e in entries if e.direction == "sent"
        )
        acked = collections.Counter(
            (e.peer, e.kind, e.seq, e.round) for e in entries if e.event == "acked"
        )
        assert sent and acked == sent, nid  # every send was acknowledged and noted once
        alone = [t for t in transactions(entries) if all(e.event == "acked" for e in t)]
        # only the notes that came after the node's last step may commit by themselves (at close)
        assert len(alone) <= 1, (nid, [[(e.peer, e.seq) for e in t] for t in alone])


async def test_notes_without_a_further_step_are_committed_after_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime_mod, "ACKED_NOTE_MAX_S", 0.05)
    led = Ledger(tmp_path, "n0")
    rt = NodeRuntime("n0", led, MemoryNetwork().transport("n0"))
    note = Entry(job_id="j", direction="local", event="acked", peer="n1", kind="token", seq=3)
    rt.note_acked(note)
    assert Ledger.open_readonly(tmp_path).entries("j") == []  # waiting for a step
    for _ in range(250):  # bounded: 5 s
        got = Ledger.open_readonly(tmp_path).entries("j")
        if got:
            break
        await asyncio.sleep(0.02)
    assert [(e.event, e.peer, e.seq) for e in got] == [("acked", "n1", 3)]
    await rt.close()
    led.close()


async def test_closing_the_runtime_hands_the_waiting_notes_to_the_ledger(tmp_path):
    led = Ledger(tmp_path, "n0")
    rt = NodeRuntime("n0", led, MemoryNetwork().transport("n0"))
    rt.note_acked(Entry(job_id="j", direction="local", event="acked", peer="n1", seq=1))
    await rt.close()
    rt.note_acked(Entry(job_id="j", direction="local", event="acked", peer="n2", seq=2))
    led.close()
    got = Ledger.open_readonly(tmp_path).entries("j")
    assert sorted((e.peer, e.seq) for e in got) == [("n1", 1), ("n2", 2)]
