"""IncA (dropout-robust mean estimation) across network namespaces, with faults made from outside
the processes: one party's link is taken down for a few iterations and brought back (a temporary
dropout), another party is SIGKILLed for good mid-job (a permanent dropout).

Same topology as test_netns.py (one namespace per process on a bridge, built and removed by the
`netns_cluster` fixture). What it proves:

* six daemons in six namespaces run an IncA job over mTLS and the five survivors release the same
  estimate, which names exactly the parties whose final value it contains (not the killed one);
* the party whose link went down missed at least one iteration (its public online history says
  so), came back, and is in the result;
* `netdp audit` over the six merged ledgers passes every check, among them `inca-shares`: every
  party that stayed to the end injected exactly its share (spec Eq. (8)), checked on the public
  coefficients and weights;
* the estimate is within 6 standard deviations of the noise-free target of Σy/Σω on this execution
  (computed independently from the public execution the nodes rebuilt: `estimate_terms`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from e2e_netns import REPO, wait_until

from netdp_node.privacy import inca_audit
from netdp_node.privacy.inca_audit import execution_from_info

pytestmark = pytest.mark.slow

VALUES = [0.9, 0.3, 0.55, 0.1, 0.7, 0.45]
# long enough that the faults land mid-job: a fault-free iteration takes a few tens of ms, one
# that waits for a missing party lasts up to ROUND_S
T = 30
ROUND_S = 1.5


def iterations(c, nid: str, job: str) -> int:
    return sum(1 for e in c.entries(nid, job) if e.event == "inca-iteration")


def missed(c, nid: str, job: str) -> bool:
    return any(e.event == "inca-iteration" and not e.params["online"] for e in c.entries(nid, job))


@pytest.mark.timeout(300)
def test_inca_survives_a_partition_and_a_permanent_loss(netns_cluster):
    # every node delays each message by 40 ± 10 ms (its own fault flags): rounds last long
    # enough that the faults below land mid-job however fast the machine is
    slow = {f"node-{i}": ["--fault-delay-ms", "40", "--fault-jitter-ms", "10"] for i in range(1, 7)}
    c = netns_cluster(6, values=VALUES, extra=slow, job_deadline=200.0)
    job = c.submit(
        "inca-e2e",
        algorithm="inca",
        T=T,
        k=2,
        round_s=ROUND_S,
        epsilon=1.0,
        sigma_delta=5.0,
        threat="eavesdrop:0.5",
    )
    # node-2: its link goes down once it has mixed two iterations, and comes back up once its own
    # ledger shows that it missed an iteration (no counted exchange before the deadline); while it
    # is away, node-5 (which has mixed two iterations too) is SIGKILLed for good
    wait_until(
        lambda: iterations(c, "node-2", job) >= 2,
        90,
        "node-2 to mix two iterations",
        interval=0.01,
        progress=c.progress(),
    )
    c.topo.link(c.host("node-2"), "down")
    try:
        wait_until(
            lambda: iterations(c, "node-5", job) >= 2,
            60,
            "node-5 to mix two iterations",
            progress=c.progress(),
        )
        c.kill("node-5")
        wait_until(
            lambda: missed(c, "node-2", job),
            60,
            "node-2 to miss an iteration",
            interval=0.2,
            progress=c.progress(),
        )
    finally:
        c.topo.link(c.host("node-2"), "up")
    live = ["node-1", "node-2", "node-3", "node-4", "node-6"]
    wait_until(
        lambda: all((r := c.job_row(n, job)) is not None and r.state == "done" for n in live),
        150,
        "the five live parties to finish",
        interval=0.5,
        progress=c.progress(),
    )

    results = {n: c.job_row(n, job).result for n in live}
    finals = {n: tuple(r["info"]["final"]) for n, r in results.items()}
    ref = max(live, key=lambda n: len(finals[n]))
    info = results[ref]["info"]
    assert "node-5" not in info["final"] and "node-2" in info["final"], info["final"]
    # every party whose result holds the same parties released the same estimate
    for n in live:
        if finals[n] == finals[ref]:
            assert np.allclose(results[n]["value"], results[ref]["value"], atol=1e-12), n

    # the public execution the nodes rebuilt: node-2 missed an iteration, node-5 is not at T
    spec = c.job_row(ref, job).spec
    ex = execution_from_info(spec, info)
    ids = list(spec["participants"])
    assert not ex.online[:, ids.index("node-2")].all(), ex.online.T
    assert not ex.online[T, ids.index("node-5")]

    # the estimate against the noise-free target Σ c_u x_u / Σω of this execution
    p = spec["params"]
    terms = inca_audit.estimate_terms(ex)
    w = terms["omega_total"]
    x = np.clip(np.array(VALUES), float(p["lo"]), float(p["hi"]))
    target = float(terms["c_u"] @ x / w)
    drop = inca_audit.dropout_summary(ex, float(p["sigma_delta"]))
    std = float(
        np.hypot(
            float(p["sigma_eta"]) * np.linalg.norm(terms["c_u"]) / w, drop["uncancelled_noise_std"]
        )
    )
    (est,) = results[ref]["value"]
    assert abs(est - target) <= 6 * std, (est, target, std)

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
    assert checks["inca-shares"]["ok"], checks["inca-shares"]
