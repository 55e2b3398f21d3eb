"""The fault campaign's checker (tests/campaign.py): silent on legitimate executions, and each check
catches a violation planted in real ledgers (written by a real run over the memory transport, then
doctored) or in fabricated ones."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from campaign import (
    acknowledged,
    check_acked,
    check_audit,
    check_contributions,
    check_durable,
    check_job_summary,
    check_spent_monotone,
    make_schedule,
    spent,
)
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.audit import NodeLedger, audit, load
from netdp_node.ledger import Entry, JobRow

pytestmark = pytest.mark.timeout(60)

IDS = ["n1", "n2", "n3", "n4"]


async def _run(
    root: Path, algorithm: str = "ring-sum", job: str = "j", params: dict | None = None
) -> list[Path]:
    params = params or (
        {"rounds": 3} if algorithm == "ring-sum" else {"T": 12, "cap": 3, "clip": 1e6}
    )
    net = await make_net("memory", IDS, root, data={i: np.array([0.25]) for i in IDS}, seed=3)
    try:
        await net.run_job(
            contexts(job, algorithm, IDS, get_algorithm(algorithm).prepare(params, len(IDS)))
        )
    finally:
        await net.close()
    return [root / i for i in IDS]


def _sql(directory: Path, *statements: str) -> None:
    """Doctor a ledger file (an audit copy: the triggers that keep it append-only are dropped)."""
    db = sqlite3.connect(directory / "ledger.sqlite")
    db.execute("DROP TRIGGER IF EXISTS entries_no_delete")
    db.execute("DROP TRIGGER IF EXISTS entries_no_update")
    for s in statements:
        db.execute(s)
    db.commit()
    db.close()


@pytest.fixture
async def ring(tmp_path):
    return await _run(tmp_path / "ring")


async def test_a_clean_run_has_no_violation(ring):
    ledgers = load(ring)
    assert check_acked(ledgers) == []
    assert check_contributions(ledgers) == []
    assert check_audit(audit(ring)) == []
    # the ring proves most of its tokens were acknowledged: the checker has something to check
    assert sum(len(acknowledged(n)) for n in ledgers) >= len(IDS) * 2


async def test_a_lost_acknowledged_token_is_caught_an_unproven_one_is_not(ring):
    ledgers = load(ring)
    acked = {(e.peer, e.seq) for e in acknowledged(ledgers[1])}  # n2's, to n3
    assert ("n3", 1) in acked
    # n3 "forgets" n2's round-1 token, which n2's ledger proves was acknowledged
    _sql(ring[2], "DELETE FROM entries WHERE direction='received' AND peer='n2' AND seq=1")
    bad = check_acked(load(ring))
    assert len(bad) == 1 and "n2 has token" in bad[0] and "acknowledged by n3" in bad[0], bad
    # other content than was sent is caught too
    _sql(
        ring[3],
        "UPDATE entries SET digest='forged' WHERE direction='received' AND peer='n3'"
        " AND seq=2 AND kind='token'",
    )
    assert any("other content" in b for b in check_acked(load(ring)))


async def test_an_unacknowledged_message_may_be_missing(ring):
    # n3 passes the release on to n4 and hears nothing after it: nothing in n3's ledger proves it
    # arrived, so its absence at n4 is not a violation of (a) (the audit judges that one)
    n3, n4 = load(ring[2:])
    last = max((e for e in n3.entries if e.direction == "sent"), key=lambda e: e.id)
    assert last.kind == "release" and last not in acknowledged(n3)
    # whereas n4's last token to n1 is proven: the release came back round the ring through n1
    token = max((e for e in n4.entries if e.direction == "sent"), key=lambda e: e.id)
    assert token.kind == "token" and token in acknowledged(n4)
    _sql(ring[3], "DELETE FROM entries WHERE direction='received' AND kind='release'")
    assert check_acked(load(ring)) == []


async def test_walk_handoffs_prove_acknowledgement(tmp_path):
    dirs = await _run(tmp_path / "walk", "walk-sum")
    ledgers = load(dirs)
    proven = [(n.node, e) for n in ledgers for e in acknowledged(n)]
    assert proven and all(e.kind == "token" for _, e in proven)
    assert check_acked(ledgers) == [] and check_contributions(ledgers) == []
    src, e = proven[0]
    _sql(
        dirs[IDS.index(e.peer)],
        f"DELETE FROM entries WHERE direction='received' AND "
        f"peer='{src}' AND kind='token' AND seq={e.seq}",
    )
    assert any(f"acknowledged by {e.peer}" in b for b in check_acked(load(dirs)))


def _row(job: str, alg: str, params: dict) -> JobRow:
    return JobRow(
        job,
        alg,
        {"job_id": job, "algorithm": alg, "participants": IDS, "params": params},
        "done",
        True,
        0.0,
        1.0,
        None,
        "",
    )


def test_gossip_and_inca_evidence():
    mu = _row("m", "muffliato", {"calls": 1})
    inca = _row("i", "inca", {})
    sender = NodeLedger(
        "n1",
        [mu, inca],
        [
            Entry("m", "sent", "value", peer="n2", kind="value", round=3, digest="d", id=1),
            Entry("m", "local", "round", params={"round": 3, "realised": ["n2"]}, id=2),
            Entry("m", "sent", "value", peer="n3", kind="value", round=4, digest="e", id=3),
            Entry("m", "local", "round", params={"round": 4, "realised": []}, id=4),  # not realised
            Entry("i", "sent", "mix", peer="n4", kind="mix", round=1, digest="f", id=5),
            Entry("i", "local", "inca-iteration", params={"t": 1, "counted_out": ["n4"]}, id=6),
        ],
    )
    empty = [NodeLedger(n, [mu, inca], []) for n in ("n2", "n3", "n4")]
    bad = check_acked([sender, *empty])
    assert len(bad) == 2, bad  # value round 3 to n2 and the MIX to n4, not round 4 to n3
    got = [
        NodeLedger(
            "n2",
            [mu],
            [Entry("m", "received", "value", peer="n1", kind="value", round=3, digest="d")],
        ),
        NodeLedger(
            "n4",
            [inca],
            [Entry("i", "received", "mix", peer="n1", kind="mix", round=1, digest="f")],
        ),
    ]
    assert check_acked([sender, *got]) == []


async def test_durability_across_a_restart(ring):
    before = load([ring[1]])[0].entries
    assert check_durable("n2", before, before + [Entry("j", "local", "x", id=10**6)]) == []
    bad = check_durable("n2", before, before[:3] + before[4:])
    assert len(bad) == 1 and "lost 1 ledger entry" in bad[0]


async def test_spent_privacy_must_not_decrease(ring, tmp_path):
    n2 = load([ring[1]])
    before = spent(n2)
    assert set(before) == {"n1", "n3", "n4"} and min(before.values()) > 0
    # a legitimate restart appends: nothing decreases (another job only adds to it)
    more = await _run(tmp_path / "more", job="j2")
    both = spent(n2 + load([more[1]]))
    assert check_spent_monotone("n2", before, both, "a restart") == []
    assert all(both[p] > before[p] for p in before)
    # a ledger that forgot a contribution spends less: caught
    copy = tmp_path / "n2-copy"
    shutil.copytree(ring[1], copy)
    _sql(
        copy,
        "DELETE FROM entries WHERE id = (SELECT MIN(id) FROM entries WHERE event='contribute')",
    )
    bad = check_spent_monotone("n2", before, spent(load([copy])), "a restart")
    assert len(bad) == 3 and "went from" in bad[0], bad


async def test_a_replayed_contribution_is_caught(ring, tmp_path):
    # a wiped node that re-ran the finished job: its second ledger holds the job again
    again = await _run(tmp_path / "again")
    ledgers = load(ring) + [load([again[2]])[0]]
    bad = check_contributions(ledgers)
    assert len(bad) == 2, bad
    assert "n3 contributed twice at ('round', 1)" in bad[0] and "per ledger: [3, 3]" in bad[0]
    assert "contributed 6 times to ring-sum job j, its schedule allows 3" in bad[1]
    # a second ledger with another job is legitimate
    other = await _run(tmp_path / "other", job="k")
    assert check_contributions(load(ring) + [load([other[2]])[0]]) == []
    # one ledger contributing twice in one round is caught too
    _sql(
        ring[0],
        "INSERT INTO entries (ts, job_id, direction, event, params_json) VALUES "
        "(0, 'j', 'local', 'contribute', '{\"round\": 2}')",
    )
    bad = check_contributions(load(ring))
    assert len(bad) == 2 and "n1 contributed twice at ('round', 2)" in bad[0], bad


def test_walk_cap_is_the_schedule():
    row = _row("w", "walk-sgd", {"T": 20, "cap": 2, "stop": "geometric"})
    es = [Entry("w", "local", "contribute", params={"epoch": 0}, id=i) for i in range(3)]
    bad = check_contributions([NodeLedger("n1", [row], es)])
    assert bad == ["contributions: n1 contributed 3 times to walk-sgd job w, its schedule allows 2"]
    assert check_contributions([NodeLedger("n1", [row], es[:2])]) == []


def test_job_summaries():
    done = {"state": "done", "failed": {}, "missing": []}
    assert check_job_summary("j", done, 5) == []
    assert check_job_summary("j", {"state": "failed", "failed": {"n1": "n2 is gone"}}, 5) == []
    assert check_job_summary("j", {"state": "failed", "failed": {"n1": ""}}, 5) == [
        "jobs-end: job j failed at n1 without a reason"
    ]
    bad = check_job_summary(
        "j", {"state": "running", "failed": {}, "missing": ["n3"], "algorithm": "inca"}, 70
    )
    assert bad == ["jobs-end: job j (inca) still running after 70s: not reported by ['n3']"]
    assert check_job_summary("j", None, 5)


async def test_audit_failures_are_reported(ring):
    _sql(
        ring[2],
        "INSERT INTO entries (ts, job_id, direction, event, peer, kind, walk, epoch, "
        "seq, round, digest, params_json) VALUES (0,'j','received','token','n2',"
        "'token','ring',0,99,0,'x','{}')",
    )
    bad = check_audit(audit(ring))
    assert len(bad) == 1 and bad[0].startswith("audit: tokens-conserved: ") and "seq=99" in bad[0]


def test_schedules_are_reproducible():
    a, b = make_schedule(7), make_schedule(7)
    assert a == b and a.describe() == b.describe()
    assert make_schedule(8) != a
    kinds = {f.kind for s in range(40) for f in make_schedule(s, wipe=True).faults}
    assert kinds == {"kill", "wipe", "bootstrap", "partition", "delay", "drop"}
    # without wipes the same schedule, each wipe a plain restart
    for s in range(40):
        w, k = make_schedule(s, wipe=True), make_schedule(s, wipe=False)
        assert [(f.at_s, f.target) for f in w.faults] == [(f.at_s, f.target) for f in k.faults]
        assert all(f.kind != "wipe" for f in k.faults)
    algs = {a for s in range(3) for a in make_schedule(s).algorithms}
    from netdp_node.algorithms import ALGORITHMS

    assert algs == set(ALGORITHMS)


def test_a_handoff_proves_only_the_token_it_followed():
    # a node restarted with the same seed drew the same walk seq again: the old handoff does not
    # prove the new token (seen in a campaign run)
    row = _row("w", "walk-sum", {"T": 200, "cap": 50})
    n1 = NodeLedger(
        "n1",
        [row],
        [
            Entry(
                "w",
                "sent",
                "token",
                peer="n3",
                kind="token",
                walk="walk",
                seq=7,
                round=4,
                digest="a",
                id=1,
            ),
            Entry("w", "received", "handoff", peer="n3", kind="handoff", walk="walk", seq=7, id=2),
            Entry(
                "w",
                "sent",
                "token",
                peer="n3",
                kind="token",
                walk="walk",
                seq=7,
                round=122,
                digest="b",
                id=3,
            ),
        ],
    )
    n3 = NodeLedger(
        "n3",
        [row],
        [
            Entry(
                "w",
                "received",
                "token",
                peer="n1",
                kind="token",
                walk="walk",
                seq=7,
                round=4,
                digest="a",
            )
        ],
    )
    assert [e.round for e in acknowledged(n1)] == [4]
    assert check_acked([n1, n3]) == []


def test_a_walk_step_held_twice_in_one_epoch_is_caught():
    # seen in a campaign run: two nodes of one custody chain re-routed at once, both to epoch 1;
    # the two epoch-1 branches could not fence each other and a node held step 203 on both
    row = _row("w", "walk-sum", {"T": 250, "cap": 60})
    step = {"epoch": 1, "t": 203, "data": True}
    es = [
        Entry("w", "local", "contribute", params=step, id=1),
        Entry("w", "local", "contribute", params={**step, "epoch": 0}, id=2),  # other epoch: ok
        Entry("w", "local", "contribute", params=step, id=3),
    ]
    bad = check_contributions([NodeLedger("n4", [row], es)])
    assert bad == [
        (
            "contributions: n4 contributed twice at ('step', 1, 203) of walk-sum job w "
            "(two branches of the walk held the same step in the same epoch)"
        )
    ]
    assert check_contributions([NodeLedger("n4", [row], es[:2])]) == []
