"""A token walk (walk-sum, Algorithm 3) across network namespaces, with a holder SIGKILLed and
restarted and another killed for good (custody, deploy issue).

Same topology as test_netns.py (one namespace per process on a bridge, built and removed by the
`netns_cluster` fixture). What it proves:

* five daemons in five namespaces run a complete-graph walk over mTLS;
* node-3, SIGKILLed mid-walk and restarted on the same address and ledger, resumes the job from
  its ledger (a `resume` entry; nothing it had committed is lost) and finishes it;
* node-4, SIGKILLed for good, is routed around: a node that could not hand it the token (or never
  got its handoff) re-routes its durable copy (`reroute` entries naming node-4, a released epoch
  ≥ 1), and the walk still takes its T steps;
* the four live nodes release the same value, within 5 std of Σ_u (contributions of u in the
  result, from u's own ledger) × x_u, and keep no custody copy; `netdp audit` over all five
  ledgers finds every invariant intact (a token to node-4 that it never recorded is covered by a
  re-route); the operator's result names node-4 as missing.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import numpy as np
import pytest
from e2e_netns import NODE_PORT, REPO, wait_until

from netdp_node.algorithms.accounting import contributions_in_result
from netdp_node.algorithms.walk.engine import HOLD_EVENTS
from netdp_node.ledger import Ledger

pytestmark = pytest.mark.slow

VALUES = [0.9, 0.3, 0.55, 0.1, 0.7]
T = 240


def holds(c, nid: str, job: str) -> int:
    return sum(1 for e in c.entries(nid, job) if e.event in HOLD_EVENTS)


def state(c, nid: str, job: str) -> str:
    row = c.job_row(nid, job)
    return "" if row is None else row.state


@pytest.mark.timeout(240)
def test_walk_survives_a_restart_and_a_permanent_loss(netns_cluster):
    # --peer-timeout above a node's restart time on a loaded machine: the walk waits for node-3
    c = netns_cluster(5, values=VALUES, peer_timeout=20.0, job_deadline=200.0)
    job = c.submit(
        "walk-e2e", algorithm="walk-sum", T=T, clip=1.0, epsilon=1.0, custody_timeout_s=60.0
    )  # > --peer-timeout: a slow receiver is not given up
    # node-3: SIGKILL once it has taken part, restart on the same address and ledger
    wait_until(
        lambda: holds(c, "node-3", job) >= 2,
        60,
        "node-3 to hold the token twice",
        progress=c.progress(),
    )
    before = c.entries("node-3", job)
    assert c.kill("node-3") == -signal.SIGKILL
    new = c.start_node("node-3", ["--seed", "99"])
    assert c.wait_ready(new, timeout=60) == NODE_PORT
    # node-4: SIGKILL for good once it has taken part
    wait_until(
        lambda: holds(c, "node-4", job) >= 1, 90, "node-4 to hold the token", progress=c.progress()
    )
    assert c.kill("node-4") == -signal.SIGKILL
    live = ["node-1", "node-2", "node-3", "node-5"]
    wait_until(
        lambda: all(state(c, n, job) == "done" for n in live),
        150,
        "the four live nodes to finish the walk",
        interval=0.5,
        progress=c.progress(),
    )

    after = c.entries("node-3", job)
    assert after[: len(before)] == before
    assert any(e.event == "resume" for e in after), "node-3 did not resume from its ledger"
    reroutes = [e for n in live for e in c.entries(n, job) if e.event == "reroute"]
    # node-4 is routed around; so is node-3 if a holder gave up on it while it restarted
    assert "node-4" in {e.peer for e in reroutes} <= {"node-3", "node-4"}, reroutes
    # the first holder to give up on node-4 tells the others (the token carries the set): few
    # re-routes, not one per holder per draw
    assert sum(e.peer == "node-4" for e in reroutes) <= 6, reroutes

    outputs = {}
    for n in live:
        led = Ledger.open_readonly(c.ledger(n))
        try:
            row = led.job(job)
            assert row is not None and row.state == "done", (n, row)
            outputs[n] = row.result["value"]
            assert led.kept(job) == {}, f"{n} still keeps a custody copy"
            out = [e for e in led.entries(job) if e.event == "output"]
            info = out[-1].params["info"]
        finally:
            led.close()
        assert info["epoch"] >= 1 and info["steps"] == T and "node-4" in info["excluded"], info
    assert len({tuple(v) for v in outputs.values()}) == 1, outputs
    (value,) = outputs["node-1"]

    # The result holds exactly the contributions the ledgers say (node-4's read from its disk).
    counts = {n: contributions_in_result(c.entries(n, job)) for n in c.ids}
    truth = sum(counts[n] * VALUES[i] for i, n in enumerate(c.ids))
    sigma = c.job_spec(job)["params"]["sigma"]
    assert abs(value - truth) <= 5 * math.sqrt(T) * sigma, (value, truth, sigma)

    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "netdp_node.cli",
            "audit",
            "--json",
            *[f"--ledger={c.ledger(n)}" for n in c.ids],
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # the realised walk, rebuilt from the five ledgers (latest epoch at each step), audited pairwise
    (walk_audit,) = json.loads(audit.stdout)["walk_audits"]
    assert walk_audit.get("T") == T, walk_audit
    assert 0 < walk_audit["ndp_mean"] < walk_audit["ldp_mean"], walk_audit

    code, s = c.result(job, wait=1)
    assert s["missing"] == ["node-4"], s
    assert {n: s["contributions"][n] for n in live} == {n: counts[n] for n in live}
    assert not np.isnan(value)
