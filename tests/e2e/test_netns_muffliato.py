"""Muffliato (synchronous gossip averaging) across network namespaces, with faults made from
outside the processes: one node's link is taken down until it has missed a round and brought back
(a temporary dropout), another node is SIGKILLed for good mid-job (it leaves with its mass).

Same topology as test_netns.py (one namespace per process on a bridge, built and removed by the
`netns_cluster` fixture). What it proves:

* six daemons in six namespaces run Muffliato on a ring over mTLS, and the five survivors finish;
* the partitioned node had a round with no realised edge and took part again afterwards; the
  killed node's neighbours report its edge missing in every round from some round to the end;
* the realised schedule, rebuilt from the survivors' ledgers (each node's own rounds plus the
  schedules the others published), explains every survivor's output: it is (P x)_v plus that
  node's share of the noise, P the product of the rounds' weight matrices (privacy.gossip), within 6
  standard deviations σ·‖P_v‖;
* `netdp audit` over the six merged ledgers passes, `gossip-mass-conserved` included (every
  realised edge was used by both ends), and every survivor's privacy report comes from its ledger.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from e2e_netns import REPO, wait_until

from netdp_node.algorithms.muffliato.accountant import sync_schedules
from netdp_node.report import ledger_report

pytestmark = pytest.mark.slow

VALUES = [0.9, 0.3, 0.55, 0.1, 0.7, 0.45]
T = 40  # enough rounds after the partition heals for the neighbours to take node-2 back
SIGMA = 0.05


def rounds(c, nid: str, job: str) -> list[dict]:
    return [e.params for e in c.entries(nid, job) if e.event == "round"]


@pytest.mark.timeout(300)
def test_muffliato_survives_a_partition_and_a_permanent_loss(netns_cluster):
    # every node delays each message by 40 ± 10 ms (its own fault flags): rounds last long
    # enough that the faults below land mid-job however fast the machine is
    slow = {f"node-{i}": ["--fault-delay-ms", "40", "--fault-jitter-ms", "10"] for i in range(1, 7)}
    c = netns_cluster(6, values=VALUES, extra=slow, peer_timeout=4.0, job_deadline=220.0)
    job = c.submit(
        "muff-e2e",
        algorithm="muffliato",
        graph="ring",
        sigma=SIGMA,
        accelerated=False,
        T=T,
        round_timeout_s=1.5,
        suspend_rounds=2,
    )
    # node-2's link goes down after two rounds and comes back once its own ledger shows a round
    # with no realised edge; while it is away, node-5 (two rounds done too) is SIGKILLed for good
    wait_until(
        lambda: len(rounds(c, "node-2", job)) >= 2,
        90,
        "node-2 to finish two rounds",
        interval=0.02,
        progress=c.progress(),
    )
    c.topo.link(c.host("node-2"), "down")
    try:
        wait_until(
            lambda: len(rounds(c, "node-5", job)) >= 2,
            60,
            "node-5 to finish two rounds",
            progress=c.progress(),
        )
        c.kill("node-5")
        wait_until(
            lambda: any(not r["realised"] for r in rounds(c, "node-2", job)),
            90,
            "node-2 to miss a round",
            interval=0.2,
            progress=c.progress(),
        )
    finally:
        c.topo.link(c.host("node-2"), "up")
    live = ["node-1", "node-2", "node-3", "node-4", "node-6"]
    wait_until(
        lambda: all((r := c.job_row(n, job)) is not None and r.state == "done" for n in live),
        200,
        "the five survivors to finish",
        interval=0.5,
        progress=c.progress(),
    )

    mine = rounds(c, "node-2", job)
    gap = next(i for i, r in enumerate(mine) if not r["realised"])
    assert any(r["realised"] for r in mine[gap:]), "node-2 never took part again"
    for nb in ("node-4", "node-6"):  # node-5's ring neighbours: its edge is gone to the end
        late = [r["round"] for r in rounds(c, nb, job) if "node-5" in r["late_or_lost"]]
        assert late and late == list(range(late[0], T)), (nb, late)

    # every survivor's output against the realised schedule rebuilt from a survivor's ledger; the
    # schedules are published after the outputs: wait (bounded) until node-1 has enough of them
    spec = c.job_row("node-1", job).spec
    why_not = [""]

    def schedules_recorded() -> bool:
        got, why_not[0] = sync_schedules(spec, c.entries("node-1", job), "node-1")
        return got is not None

    try:
        wait_until(
            schedules_recorded,
            30,
            "node-1 to record the survivors' schedules",
            interval=0.2,
            progress=c.progress(),
        )
    except TimeoutError as e:
        raise AssertionError(f"{e}; sync_schedules: {why_not[0]}") from None
    (sched,), why = sync_schedules(spec, c.entries("node-1", job), "node-1")
    assert why == "", why
    ids = list(spec["participants"])
    P = np.eye(len(ids))
    for W in sched.matrices:
        P = W.toarray() @ P
    x = np.array([VALUES[c.ids.index(v)] for v in ids])
    for v in live:
        (out,) = c.job_row(v, job).result["value"]
        i = ids.index(v)
        assert abs(out - P[i] @ x) <= 6 * SIGMA * np.linalg.norm(P[i]), (v, out, P[i] @ x)

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
    checks = {ch["name"]: ch for ch in json.loads(audit.stdout)["checks"]}
    assert checks["gossip-mass-conserved"]["ok"], checks["gossip-mass-conserved"]

    for v in live:
        rep = ledger_report(c.ledger(v), job_id=job)["jobs"][0]
        assert rep["state"] == "done" and rep["peers"], rep
        local = rep["baselines"]["local-dp"]["epsilon"]
        assert all(0 < p["epsilon"] <= local * (1 + 1e-9) for p in rep["peers"]), rep["peers"]
