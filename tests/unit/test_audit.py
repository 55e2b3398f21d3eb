"""The merged-ledger audit: passes on real executions, and catches what it is meant to catch."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.audit import audit

pytestmark = pytest.mark.timeout(60)


async def _run(tmp_path, n=4, jobs=2):
    ids = [f"n{i}" for i in range(1, n + 1)]
    net = await make_net("memory", ids, tmp_path, data={i: np.array([0.2]) for i in ids})
    try:
        for j in range(jobs):
            await net.run_job(
                contexts(
                    f"j{j}", "ring-sum", ids, get_algorithm("ring-sum").prepare({"rounds": 3}, n)
                )
            )
    finally:
        await net.close()
    return [tmp_path / i for i in ids]


async def test_clean_execution_passes(tmp_path):
    rep = audit(await _run(tmp_path))
    assert rep["ok"], rep
    assert "global" in rep["note"]
    assert {c["name"] for c in rep["checks"]} == {
        "privacy-monotone",
        "tokens-conserved",
        "received-once",
        "inca-shares",
        "gossip-mass-conserved",
    }


async def test_a_forged_reception_is_caught(tmp_path):
    dirs = await _run(tmp_path, jobs=1)
    db = sqlite3.connect(dirs[2] / "ledger.sqlite")
    db.execute(
        "INSERT INTO entries (ts, job_id, direction, event, peer, kind, walk, epoch, seq,"
        " round, digest, params_json) VALUES (0,'j0','received','token','n2','token','ring',"
        "0,99,0,'x','{}')"
    )
    db.commit()
    db.close()
    rep = audit(dirs)
    assert not rep["ok"]
    bad = {c["name"]: c for c in rep["checks"]}["tokens-conserved"]
    assert not bad["ok"] and "seq=99" in bad["details"][0]


async def test_a_lost_token_is_caught(tmp_path):
    dirs = await _run(tmp_path, jobs=1)
    # Pretend n3 never got n2's round-2 token: drop it from an audit copy of n3's ledger.
    db = sqlite3.connect(dirs[2] / "ledger.sqlite")
    db.execute("DROP TRIGGER entries_no_delete")
    db.execute("DELETE FROM entries WHERE direction='received' AND peer='n2' AND seq=2")
    db.commit()
    db.close()
    rep = audit(dirs)
    bad = {c["name"]: c for c in rep["checks"]}["tokens-conserved"]
    assert not bad["ok"] and "never recorded" in bad["details"][0]


async def test_gossip_mass_conservation_passes_and_catches_a_one_sided_edge(tmp_path):

    ids = [f"n{i}" for i in range(1, 7)]
    net = await make_net("memory", ids, tmp_path, data={i: np.array([0.2]) for i in ids})
    try:
        p = get_algorithm("muffliato").prepare({"graph": "ring", "T": 3, "sigma": 1.0}, 6)
        await net.run_job(contexts("g", "muffliato", ids, p))
    finally:
        await net.close()
    dirs = [tmp_path / i for i in ids]
    rep = audit(dirs)
    assert rep["ok"], rep
    assert {c["name"]: c for c in rep["checks"]}["gossip-mass-conserved"]["ok"]
    # n2 now claims it did not use its round-0 edges, while n1 and n3 did: one-sided
    db = sqlite3.connect(dirs[1] / "ledger.sqlite")
    db.execute(
        "INSERT INTO entries (ts, job_id, direction, event, peer, kind, walk, epoch, seq,"
        " round, digest, params_json) VALUES (0,'g','local','round','','','',0,0,0,'',"
        '\'{"round": 0, "realised": [], "step": "plain"}\')'
    )
    db.commit()
    db.close()
    rep = audit(dirs)
    bad = {c["name"]: c for c in rep["checks"]}["gossip-mass-conserved"]
    assert not rep["ok"] and not bad["ok"] and "one-sided" in bad["details"][0]


async def test_inca_shares_read_every_ledger_a_node_had(tmp_path):
    """A node that ran an IncA job to the end and came back on a new, empty ledger (it stays out
    of the job there, `NodeRuntime.may_join`): the audit over both of its ledgers still finds its
    steps in the first one (the campaign's wipe fault; the audit read only the node's last
    ledger and said it was not online at T)."""
    from netdp_node.ledger import Entry, Ledger

    ids = [f"n{i}" for i in range(1, 5)]
    net = await make_net("memory", ids, tmp_path, data={i: np.array([0.2, 0.4]) for i in ids})
    try:
        p = get_algorithm("inca").prepare({"T": 4, "k": 2, "round_s": 2.0, "dim": 2}, 4)
        await net.run_job(contexts("i", "inca", ids, p, seed=3), timeout=60)
        spec = net.nodes["n3"].ledger.job("i").spec
        final = net.nodes["n1"].jobs["i"].output.info["final"]
    finally:
        await net.close()
    assert "n3" in final  # it stayed to the end: its shares must check out
    dirs = [tmp_path / i for i in ids]
    assert {c["name"]: c for c in audit(dirs)["checks"]}["inca-shares"]["ok"]
    wiped = Ledger(tmp_path / "n3.wiped", "n3")
    try:
        wiped.begin_job(
            "i",
            "inca",
            spec,
            False,
            [Entry(job_id="i", direction="local", event="not-joined")],
            state="failed",
            detail="this node's ledger was created after the job",
        )
    finally:
        wiped.close()
    rep = audit([*dirs, tmp_path / "n3.wiped"])
    shares = {c["name"]: c for c in rep["checks"]}["inca-shares"]
    assert shares["ok"], shares
    # and a step missing from every ledger of n3 is still caught
    db = sqlite3.connect(dirs[2] / "ledger.sqlite")
    db.execute("DROP TRIGGER entries_no_delete")
    db.execute(
        "DELETE FROM entries WHERE job_id='i' AND params_json LIKE '%\"u_row\"%' AND "
        "id = (SELECT MAX(id) FROM entries WHERE job_id='i' AND params_json LIKE "
        "'%\"u_row\"%')"
    )
    db.commit()
    db.close()
    shares = {c["name"]: c for c in audit([*dirs, tmp_path / "n3.wiped"])["checks"]}["inca-shares"]
    assert not shares["ok"] and "n3" in shares["details"][0], shares


def _gossip_ledger(node: str, state: str, rounds: dict[int, list[str]]):
    from netdp_node.audit import NodeLedger
    from netdp_node.ledger import Entry, JobRow

    spec = {"participants": ["n1", "n2", "n3"], "params": {"graph": "ring", "T": 6}}
    row = JobRow("g", "muffliato", spec, state, True, 0.0, None, None, "")
    es = [
        Entry(
            job_id="g",
            direction="local",
            event="round",
            id=r + 1,
            params={"round": r, "realised": ws, "step": "plain"},
        )
        for r, ws in rounds.items()
    ]
    return NodeLedger(node, [row], es)


@pytest.mark.parametrize(
    "n1_state, n3_rounds, caught",
    [
        ("running", {0: ["n1", "n2"], 1: ["n2"], 2: ["n2"]}, False),  # n1 left after round 1
        ("failed", {0: ["n1", "n2"], 1: ["n2"], 2: ["n2"]}, False),  # (restarted: not resumed)
        (
            "running",
            {0: ["n1", "n2"], 1: ["n2"], 2: ["n1", "n2"]},
            True,
        ),  # n3 took n1's later value
        ("done", {0: ["n1", "n2"], 1: ["n2"], 2: ["n2"]}, True),  # n1 finished: its output has it
    ],
)
def test_a_one_sided_edge_of_a_node_that_left_right_after(n1_state, n3_rounds, caught):
    """n1 used its round-1 edge with n3 and was SIGKILLed before n3 heard that it had (n3 counted
    n1 late or lost): nothing n1 took reaches anyone else unless someone takes a later value of
    n1's, or n1 finished the job (the campaign's muffliato-gd, seed 1301, round 49)."""
    from netdp_node.audit import check_gossip_mass

    nodes = [
        _gossip_ledger("n1", n1_state, {0: ["n2", "n3"], 1: ["n2", "n3"]}),
        _gossip_ledger("n2", "done", {0: ["n1", "n3"], 1: ["n1", "n3"], 2: ["n3"]}),
        _gossip_ledger("n3", "done", n3_rounds),
    ]
    check = check_gossip_mass(nodes)
    assert check.ok is not caught, check.details
    if caught:
        assert any("round 1: n1 used its edge with n3, n3 did not" in d for d in check.details)


def test_privacy_monotone_compares_epsilon_at_no_larger_delta(monkeypatch):
    """A loss is an (ε, δ) pair: a smaller ε at a larger δ (basic composition of a job without an
    RDP curve replacing an RDP conversion at the target δ) is no decrease; a smaller ε at the same
    δ as any earlier pair is one. The totals are scripted (the composition itself is tested in
    test_privacy_composition)."""
    from netdp_node import audit as audit_mod
    from netdp_node.audit import NodeLedger, check_privacy_monotone
    from netdp_node.ledger import Entry, JobRow
    from netdp_node.privacy.composition import PrivacyLoss

    script = iter([(8.2, 1e-5), (7.5, 2e-5), (9.0, 2e-5), (8.0, 1e-5)])

    def scripted(views, me, delta):
        eps, dlt = next(script)
        return {"b": PrivacyLoss(eps, dlt, "scripted")}

    monkeypatch.setattr(audit_mod, "total_losses", scripted)
    job = JobRow("j", "ring-sum", {}, "done", True, 0.0, 1.0, None, "")
    entries = [Entry(job_id="j", direction="local", event="contribute", id=i) for i in range(4)]
    c = check_privacy_monotone([NodeLedger("a", [job], entries)], 1e-5)
    assert not c.ok
    # only the last pair is dominated (8.0 < 8.2 at the same δ, and < 9.0 at a smaller δ);
    # (7.5, 2e-5) after (8.2, 1e-5) is not a decrease
    assert len(c.details) == 1, c.details
    assert "to (ε 8, δ 1e-05) at ledger entry 3" in c.details[0]
