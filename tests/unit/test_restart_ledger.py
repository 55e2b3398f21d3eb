"""A node that comes back with a new, empty ledger stays out of the jobs its ledger never knew;
peers take nothing new for a job that is over at them (but acknowledge exact re-sends); the bootstrap
flags an identity that comes back with another ledger; the audit accepts a send whose sender crashed
before it was acknowledged and still catches an acknowledged message the receiver lost.

Runtime level, over the in-memory transport (tests/harness.py); the bootstrap test runs the real
bootstrap service in-process with mTLS on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.walk.engine import HANDOFF, RELEASE, WALK, start_holder
from netdp_node.audit import audit
from netdp_node.errors import NodeUnavailable
from netdp_node.ledger import Ledger
from netdp_node.protocols.base import JobContext, Message, RefusalCode, Refused
from netdp_node.runtime import NOT_JOINED, JobRunner, NodeRuntime

pytestmark = pytest.mark.timeout(60)

IDS = ["n1", "n2", "n3", "n4"]
DATA = {i: np.array([0.25 * (k + 1)]) for k, i in enumerate(IDS)}


def _walk(job: str, T: int = 12) -> dict[str, JobContext]:
    # seed 2: the walk starts at n3 (the node wiped below), as in the reported run
    ctx = contexts(
        job, "walk-sum", IDS, get_algorithm("walk-sum").prepare({"T": T}, len(IDS)), seed=2
    )
    assert start_holder(ctx["n3"]) == "n3"
    return ctx


async def _settled(net, ids) -> dict[str, tuple[int, int]]:
    """The nodes' entry counts once they stop changing (the last acknowledgements and handoffs of
    a finished job are recorded just after it finished); bounded."""
    last = None
    for _ in range(100):
        now = {p: _counts(net.ledger(p)) for p in ids}
        if now == last:
            return now
        last = now
        await asyncio.sleep(0.1)
    raise AssertionError(f"ledgers still changing: {last}")


def _counts(led: Ledger) -> tuple[int, int]:
    """(entries, contribute entries) of a ledger."""
    es = led.entries()
    return len(es), sum(1 for e in es if e.event == "contribute")


async def test_a_wiped_node_stays_out_of_old_jobs_and_reports_them_failed(tmp_path):
    net = await make_net("memory", IDS, tmp_path / "net", data=DATA)
    wiped: NodeRuntime | None = None
    try:
        old = {"w1": _walk("w1"), "w2": _walk("w2")}  # bootstrap jobs #1 and #2, both finished
        for ctx in old.values():
            await net.run_job(ctx)
        peers = [p for p in IDS if p != "n3"]
        before = await _settled(net, peers)

        # n3 comes back on an empty ledger, as `netdp node --ledger NEW` would
        mem = net.memory
        assert mem is not None
        await net.nodes["n3"].close()
        net.nodes["n3"].ledger.close()
        mem.nodes.pop("n3")
        seqs = {"w1": 1, "w2": 2, "w3": 3}
        fetched: list[str] = []
        finished: list[JobRunner] = []

        async def fetch(job_id: str) -> tuple[JobContext, int] | None:
            fetched.append(job_id)
            ctx = old.get(job_id) or new_job
            return ctx["n3"], seqs[job_id]

        ledger = Ledger(tmp_path / "n3-new", "n3")
        wiped = NodeRuntime(
            "n3",
            ledger,
            mem.transport("n3"),
            data=DATA["n3"],
            rng_factory=lambda job: np.random.default_rng(7),
            job_fetcher=fetch,
            on_finished=finished.append,
            join_pending=True,
        )
        mem.nodes["n3"] = wiped
        net.nodes["n3"] = wiped
        # before it registered, it takes no job its ledger does not hold (a peer retries)
        with pytest.raises(NodeUnavailable):  # the transports answer UNAVAILABLE
            await wiped.handle("n1", "w2", Message(HANDOFF, walk=WALK, epoch=0, seq=5))
        assert fetched == []
        # registration: the bootstrap's latest job is #2, the ledger is new to it
        after, new = ledger.join_after("store-a", 2)
        assert (after, new) == (2, True)
        assert ledger.join_after("store-a", 9) == (2, False)  # recorded once, for good
        wiped.set_join_after(after)

        # the poll lists w1 (#2 is not polled yet): it may not be joined; it ends failed here
        assert not wiped.may_join("w1", 1)
        r1 = wiped.not_joined(old["w1"]["n3"], 1)
        assert r1.state == "failed" and NOT_JOINED in r1.detail
        assert finished == [r1]  # reported, so `netdp job result` is not left waiting
        # a peer's message for w2 (never polled): refused with the reason, not joined
        release = Message(RELEASE, payload=np.array([5.0]), walk=WALK, epoch=3, seq=1, round=12)
        with pytest.raises(Refused) as e:
            await wiped.handle("n1", "w2", release)
        assert e.value.code is RefusalCode.FAILED_PRECONDITION and NOT_JOINED in e.value.reason
        assert fetched == ["w2"]
        assert [r.ctx.job_id for r in finished] == ["w1", "w2"]
        assert all(r.state == "failed" and not r.contributed for r in finished)
        for job in ("w1", "w2"):
            row = ledger.job(job)
            assert row is not None and row.state == "failed" and NOT_JOINED in row.detail
            assert [e.event for e in ledger.entries(job)] == ["not-joined"]
        # nothing ran: no contribution, no message; the peers recorded nothing new
        await asyncio.sleep(0.2)
        assert _counts(ledger)[1] == 0
        assert not [e for e in ledger.entries() if e.direction != "local"]
        assert await _settled(net, peers) == before

        # a job submitted after the ledger existed (#3) is joined and runs as usual
        new_job = _walk("w3")
        assert wiped.may_join("w3", 3)
        await net.run_job(new_job)
        assert net.nodes["n3"].jobs["w3"].state == "done"
        assert _counts(ledger)[1] >= 1
    finally:
        await net.close()


async def test_peers_refuse_a_second_release_and_acknowledge_exact_resends(tmp_path):
    net = await make_net("memory", IDS, tmp_path, data=DATA)
    try:
        ctx = _walk("w", T=8)
        await net.run_job(ctx)
        (releaser,) = [
            p
            for p in IDS
            if net.nodes[p].jobs["w"].output is not None
            and any(
                e.event == "release" and e.direction == "local" for e in net.ledger(p).entries("w")
            )
        ]
        peer = next(p for p in IDS if p != releaser)
        stored = next(
            e
            for e in net.ledger(peer).entries("w")
            if e.direction == "received" and e.kind == RELEASE
        )
        rt = net.nodes[peer]
        n_before = len(rt.ledger.entries("w"))
        # another release of this finished job (a replay: another epoch, other content)
        second = Message(
            RELEASE, payload=np.array([123.0]), walk=WALK, epoch=stored.epoch + 1, seq=1, round=8
        )
        for sender in (releaser, next(p for p in IDS if p not in (peer, releaser))):
            with pytest.raises(Refused) as e:
                await rt.handle(sender, "w", second)
            assert e.value.code is RefusalCode.FAILED_PRECONDITION
            assert "done" in e.value.reason
        assert len(rt.ledger.entries("w")) == n_before
        assert not [x for x in rt.ledger.entries("w") if x.event == "second-release"]
        # close-down traffic of the walk is still taken after the end (a late handoff)
        assert await rt.handle(releaser, "w", Message(HANDOFF, walk=WALK, epoch=0, seq=77)) is False
        # an exact re-send of the stored release is acknowledged as a duplicate, also after a
        # restart (the job is then finished in the ledger, with no live engine)
        out = net.nodes[releaser].jobs["w"].output
        assert out is not None
        token = np.asarray(out.info["token"], dtype=float)
        resend = Message(RELEASE, payload=token, walk=WALK, epoch=stored.epoch, seq=1, round=8)
        assert resend.digest() == stored.digest
        assert await rt.handle(releaser, "w", resend) is True
        rt2 = await net.restart(peer, ctx[peer])
        assert rt2.jobs["w"].state == "done"
        n_before = len(rt2.ledger.entries("w"))
        assert await rt2.handle(releaser, "w", resend) is True
        with pytest.raises(Refused) as e:
            await rt2.handle(releaser, "w", second)
        assert e.value.code is RefusalCode.FAILED_PRECONDITION
        with pytest.raises(Refused):
            await rt2.handle(releaser, "w", Message(HANDOFF, walk=WALK, epoch=0, seq=78))
        assert len(rt2.ledger.entries("w")) == n_before
    finally:
        await net.close()


async def test_audit_accepts_a_crashed_senders_unacknowledged_send_and_catches_a_loss(tmp_path):
    """Defect: a ring node restarted after its step (token received, next token recorded as sent)
    was durable but before the token reached its successor; it does not resume. The audit blamed
    it for a lost token."""
    net = await make_net("memory", IDS, tmp_path, data=DATA, give_up_after=30.0)
    mem = net.memory
    assert mem is not None
    try:
        ctx = contexts("r", "ring-sum", IDS, get_algorithm("ring-sum").prepare({"rounds": 3}, 4))
        down = mem.nodes.pop("n4")  # n3's token to n4 cannot be delivered (n4 is down)
        for nid in ("n3", "n2", "n1"):
            await net.nodes[nid].add_job(ctx[nid])
        await down.add_job(ctx["n4"])

        def sent_to_n4() -> bool:
            return any(e.direction == "sent" and e.peer == "n4" for e in net.ledger("n3").entries())

        for _ in range(200):
            if sent_to_n4():
                break
            await asyncio.sleep(0.02)
        assert sent_to_n4()
        # n3 crashes now and comes back on the same ledger: it does not resume the ring
        rt3 = await net.restart("n3", ctx["n3"])
        assert rt3.jobs["r"].state == "failed" and "restarted" in rt3.jobs["r"].detail
        mem.nodes["n4"] = down
    finally:
        await net.close()
    dirs = [tmp_path / i for i in IDS]
    rep = audit(dirs)
    assert rep["ok"], rep

    # a message that WAS acknowledged and is missing at its receiver is a loss: caught
    acked = next(
        e
        for e in Ledger.open_readonly(dirs[0]).entries("r")
        if e.event == "acked" and e.peer == "n2"
    )
    db = sqlite3.connect(dirs[1] / "ledger.sqlite")
    db.execute("DROP TRIGGER entries_no_delete")
    db.execute(
        "DELETE FROM entries WHERE direction='received' AND peer='n1' AND seq=?", (acked.seq,)
    )
    db.commit()
    db.close()
    rep = audit(dirs)
    bad = {c["name"]: c for c in rep["checks"]}["tokens-conserved"]
    assert not rep["ok"] and not bad["ok"]
    assert any("n1 sent token" in d and "acknowledged" in d for d in bad["details"]), bad


async def test_the_bootstrap_flags_a_node_back_with_a_new_ledger(tmp_path, caplog):
    from netdp_bootstrap.server import BootstrapConfig, run_bootstrap
    from netdp_node.bootstrap_client import BootstrapClient
    from netdp_node.jobs import render_result, result_summary
    from netdp_node.security import pki

    pki.init_ca(tmp_path / "pki")
    pki.issue(tmp_path / "pki", "bootstrap", role="bootstrap", hosts=("127.0.0.1",))
    pki.issue(tmp_path / "pki", "operator", role="operator", hosts=())
    for nid in ("n1", "n2", "n3"):
        pki.issue(tmp_path / "pki", nid, hosts=("127.0.0.1",))
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    server = asyncio.ensure_future(
        run_bootstrap(
            BootstrapConfig(
                certs=tmp_path / "pki" / "bootstrap", state=tmp_path / "state", listen="127.0.0.1:0"
            ),
            ready,
            stop,
        )
    )
    port = await asyncio.wait_for(ready, 20)
    addr = f"127.0.0.1:{port}"
    nodes = {
        n: BootstrapClient(addr, pki.load_identity(tmp_path / "pki" / n))
        for n in ("n1", "n2", "n3")
    }
    op = BootstrapClient(addr, pki.load_identity(tmp_path / "pki" / "operator"))
    try:
        led = {n: Ledger(tmp_path / "ledgers" / n, n) for n in nodes}
        first = {}
        for n, c in nodes.items():
            first[n] = await c.register(
                n, "127.0.0.1:1", ledger_id=led[n].ledger_id, ledger_created=led[n].created
            )
        assert first["n1"].job_seq == 0 and first["n1"].store_id
        job = await op.submit("ring-sum", {"rounds": 1}, participants=list(nodes), job_id="old")
        seq, got = await nodes["n2"].get_job_seq("old")
        assert seq == 1 and got.job_id == "old"
        # same ledger again (a plain restart): nothing to flag
        with caplog.at_level(logging.WARNING, logger="netdp.bootstrap"):
            again = await nodes["n3"].register(
                "n3", "127.0.0.1:2", ledger_id=led["n3"].ledger_id, ledger_created=led["n3"].created
            )
        assert again.job_seq == 1 and again.store_id == first["n3"].store_id
        assert not [r for r in caplog.records if "LEDGER" in r.getMessage()]
        assert list((await op.result(job.job_id)).warnings) == []
        # n3 comes back with a new, empty ledger: flagged in the log and in the job's result
        fresh = Ledger(tmp_path / "ledgers" / "n3-new", "n3")
        assert fresh.ledger_id != led["n3"].ledger_id
        with caplog.at_level(logging.WARNING, logger="netdp.bootstrap"):
            await nodes["n3"].register(
                "n3", "127.0.0.1:3", ledger_id=fresh.ledger_id, ledger_created=fresh.created
            )
        (warn,) = [r.getMessage() for r in caplog.records if "LEDGER" in r.getMessage()]
        assert "n3" in warn and fresh.ledger_id in warn and led["n3"].ledger_id in warn
        reply = await op.result(job.job_id)
        (w,) = reply.warnings
        assert w.startswith("n3 came back") and fresh.ledger_id in w and "#1" in w
        assert "WARNING: n3 came back" in render_result(result_summary(reply))
        # a job submitted after it came back is not concerned
        await op.submit("ring-sum", {"rounds": 1}, participants=list(nodes), job_id="new")
        assert list((await op.result("new")).warnings) == []
        # a malformed ledger id is refused, naming the field
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await nodes["n1"].register("n1", "127.0.0.1:1", ledger_id="not hex!")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ledger_id" in (e.value.details() or "")
        for x in (*led.values(), fresh):
            x.close()
    finally:
        for c in (*nodes.values(), op):
            await c.close()
        stop.set()
        await asyncio.wait_for(server, 20)


def test_an_old_ledger_gets_an_id_and_keeps_joining(tmp_path: Path):
    """A ledger from before ledger ids: it gets one on open, records acknowledgements from its
    next entry on, and joins every job of the first bootstrap store it meets (it is not new)."""
    led = Ledger(tmp_path, "n1")
    led.close()
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    db.execute("DELETE FROM meta WHERE key IN ('ledger_id', 'acks_from')")
    db.execute("INSERT INTO entries (ts, job_id, direction, event) VALUES (0, 'j', 'local', 'x')")
    db.commit()
    db.close()
    led = Ledger(tmp_path, "n1")
    try:
        assert len(led.ledger_id) == 32 and led.acks_from == 2
        assert led.join_after("s1", 40) == (0, True)
        assert led.join_after("s2", 7) == (7, True)  # another store: its jobs before it are not
    finally:
        led.close()
    fresh = Ledger(tmp_path / "fresh", "n1")
    try:
        assert fresh.acks_from == 1 and fresh.join_after("s1", 40) == (40, True)
    finally:
        fresh.close()


async def test_a_node_restarted_on_its_ledger_reports_its_finished_jobs_again(tmp_path):
    """A node whose report of a finished job died with its process (SIGKILL before the report
    reached the bootstrap): restarted on the same ledger, it does not run the job again but
    reports it again, with the state, contribution and released value its ledger kept (the
    bootstrap keeps a node's first finished report, so reporting twice is harmless)."""
    net = await make_net("memory", IDS, tmp_path / "net", data=DATA)
    try:
        ring = contexts(
            "r", "ring-sum", IDS, get_algorithm("ring-sum").prepare({"rounds": 2}, len(IDS))
        )
        await net.run_job(ring)
        first = net.nodes["n2"].jobs["r"]
        assert first.state == "done" and first.contributed and first.output is not None
        value = np.asarray(first.output.value)
        await _settled(net, IDS)
        mem = net.memory
        assert mem is not None
        await net.nodes["n2"].close()
        net.nodes["n2"].ledger.close()
        mem.nodes.pop("n2")
        ledger = Ledger(tmp_path / "net" / "n2", "n2")
        finished: list[JobRunner] = []
        back = NodeRuntime(
            "n2", ledger, mem.transport("n2"), data=DATA["n2"], on_finished=finished.append
        )
        mem.nodes["n2"] = back
        net.nodes["n2"] = back
        row = ledger.job("r")
        assert row is not None and row.state == "done"  # the ledger it had
        entries = len(ledger.entries("r"))
        runner = await back.add_job(ring["n2"])  # the bootstrap lists the job again
        assert finished == [runner]  # reported (before: "not run again", and nothing said)
        assert runner.state == "done" and runner.contributed
        assert runner.output is not None
        np.testing.assert_array_equal(np.asarray(runner.output.value), value)
        assert len(ledger.entries("r")) == entries  # nothing run, nothing recorded
    finally:
        await net.close()
