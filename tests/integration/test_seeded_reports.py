"""Over real node processes: a node started with --seed warns at start, and every report and result
of its jobs says NOT PRIVATE (seeded) (`netdp job result` text and --json, `netdp privacy report`
text and --json, `netdp demo --seed`), while those of unseeded runs do not; all of them state the
threat model."""

from __future__ import annotations

import json

import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.demo import render
from netdp_node.jobs import wait_result
from netdp_node.privacy.threat import NOT_PRIVATE

pytestmark = pytest.mark.slow


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.timeout(240)
async def test_seeded_node_job_result_and_privacy_report(tmp_path, nd):
    c = LocalCluster(tmp_path / "c", 4, poll_interval=0.2)
    data = {}
    for i, nid in enumerate(c.ids):
        f = tmp_path / f"{nid}.txt"
        f.write_text(f"{0.1 * (i + 1)}\n")
        data[nid] = f
    try:
        c.start(data=data, extra={"node-2": ["--seed", "7"]})
        op = BootstrapClient(c.bootstrap_address, c.operator)
        try:
            await op.submit("ring-sum", {"rounds": 4}, participants=c.ids, job_id="seeded")
            await op.submit(
                "ring-sum",
                {"rounds": 4},
                participants=["node-1", "node-3", "node-4"],
                job_id="plain",
            )
            for job in ("seeded", "plain"):
                await wait_result(op, job, 90)
        finally:
            await op.close()
        assert "--seed makes the private RNG a seeded PCG64" in c.procs["node-2"].log_text()
        assert NOT_PRIVATE not in c.procs["node-1"].log_text()
        base = ["--bootstrap", c.bootstrap_address, "--certs", str(c.certs("operator"))]

        def result(job: str, *flags: str) -> str:
            r = nd.netdp("job", "result", job, *base, "--wait", "60", *flags)
            assert r.returncode == 0, r.stderr
            return r.stdout

        seeded_text, plain_text = result("seeded"), result("plain")
        seeded = json.loads(result("seeded", "--json"))
        plain = json.loads(result("plain", "--json"))
        assert NOT_PRIVATE in seeded_text and "node-2" in seeded_text
        assert seeded["seeded_rng"] == ["node-2"] and seeded["not_private"].startswith(NOT_PRIVATE)
        assert "NOT PRIVATE" not in plain_text
        assert plain["seeded_rng"] == [] and plain["not_private"] is None
        for s, text in ((seeded, seeded_text), (plain, plain_text)):
            assert s["threat_model"]["colluders"] == 1
            assert "learn x_u exactly" in s["threat_model"]["statement"]
            assert "threat model: the ε holds against each single node" in _flat(text)

        def report(nid: str, *flags: str) -> str:
            r = nd.netdp("privacy", "report", "--ledger", str(c.ledger(nid)), *flags)
            assert r.returncode == 0, r.stderr
            return r.stdout

        rep2, rep1 = json.loads(report("node-2", "--json")), json.loads(report("node-1", "--json"))
        assert [j["seeded_rng"] for j in rep2["jobs"]] == [True]
        assert rep2["not_private"].startswith(NOT_PRIVATE) and NOT_PRIVATE in report("node-2")
        assert [j["seeded_rng"] for j in rep1["jobs"]] == [False, False]
        assert rep1["not_private"] is None and "NOT PRIVATE" not in report("node-1")
        for j in rep1["jobs"] + rep2["jobs"]:
            assert j["threat_model"]["observers"] == "each single node (no collusion)"
        assert "threat model: the ε holds against each single node" in _flat(report("node-1"))
    finally:
        c.stop()


@pytest.mark.timeout(300)
def test_demo_says_when_its_nodes_are_seeded(tmp_path, nd):
    r = nd.netdp(
        "demo",
        "--nodes",
        "3",
        "--rounds",
        "4",
        "--seed",
        "3",
        "--json",
        "--workdir",
        str(tmp_path / "seeded"),
        "--timeout",
        "200",
        timeout=280,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["seeded_rng"] == ["node-1", "node-2", "node-3"]
    assert res["not_private"].startswith(NOT_PRIVATE)
    assert all(row["seeded_rng"] for row in res["privacy"])
    assert res["threat_model"]["colluders"] == 1
    assert "learn x_u exactly" in res["threat_model"]["statement"]
    assert NOT_PRIVATE in render(res)  # the text output of the same run

    r = nd.netdp(
        "demo",
        "--nodes",
        "3",
        "--rounds",
        "4",
        "--workdir",
        str(tmp_path / "plain"),
        "--timeout",
        "200",
        timeout=280,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "NOT PRIVATE" not in r.stdout
    out = _flat(r.stdout)
    assert "threat model: the ε holds against each single node (no collusion)" in out
    assert "those two neighbours learn x_u exactly" in out
