"""Every report says who its ε holds against (the threat model) and marks what a seeded node did
NOT PRIVATE: `netdp privacy report` (text and --json) and `netdp job result` (the node's NodeResult,
the operator's summary, text and JSON).

A real ring-sum job runs over the in-memory transport; node-2's private RNG is the daemon's own
`NodeDaemon._rng` with `--seed`, the others' are not seeded."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from harness import contexts, make_net

from netdp.v1 import bootstrap_pb2, common_pb2
from netdp_node.algorithms import ALGORITHMS, get_algorithm, threat_model
from netdp_node.cli import main
from netdp_node.daemon import NodeConfig, NodeDaemon
from netdp_node.jobs import render_result, result_summary
from netdp_node.privacy.threat import NOT_PRIVATE, ThreatModel
from netdp_node.security import pki

pytestmark = pytest.mark.timeout(60)

IDS = ["node-1", "node-2", "node-3", "node-4", "node-5"]
K = 10


class _Bootstrap:
    """Stands in for the bootstrap client: keeps what the daemon reports."""

    def __init__(self) -> None:
        self.results: list[bootstrap_pb2.NodeResult] = []

    async def report(self, res: bootstrap_pb2.NodeResult, *, retry_transient: bool = True) -> None:
        self.results.append(res)


@pytest.fixture
async def ring_job(tmp_path):
    """A finished ring-sum job; node-2 ran it through a daemon started with --seed 7."""
    for nid in IDS:
        if nid == IDS[0]:
            pki.init_ca(tmp_path / "pki")
        pki.issue(tmp_path / "pki", nid)
    data = {nid: np.array([0.1 * (i + 1)]) for i, nid in enumerate(IDS)}
    net = await make_net("memory", IDS, tmp_path / "l", data=data)
    daemons = {}
    for nid in IDS:
        d = NodeDaemon(
            NodeConfig(
                certs=tmp_path / "pki" / nid,
                bootstrap="127.0.0.1:1",
                ledger=tmp_path / "l" / nid,
                seed=7 if nid == "node-2" else None,
            )
        )
        d.ledger = net.ledger(nid)
        d.bootstrap = _Bootstrap()  # type: ignore[assignment]
        daemons[nid] = d
    net.nodes["node-2"].rng_factory = daemons["node-2"]._rng
    params = get_algorithm("ring-sum").prepare({"rounds": K}, len(IDS))
    try:
        await net.run_job(contexts("r1", "ring-sum", IDS, params))
        yield net, daemons, params, tmp_path / "l"
    finally:
        await net.close()


def _report(capsys, ledger, *flags: str) -> str:
    assert main(["privacy", "report", "--ledger", str(ledger), *flags]) == 0
    return capsys.readouterr().out


def _noise_rounds(net, nid: str) -> int:
    """Rounds in which the node added noise, from its own ledger (independent of the schedule)."""
    return sum(
        1
        for e in net.ledger(nid).entries("r1")
        if e.event == "contribute" and e.params.get("sigma", 0) > 0
    )


async def test_privacy_report_marks_a_seeded_node_and_states_the_threat_model(ring_job, capsys):
    net, _, _, ledgers = ring_job
    seeded_text = _report(capsys, ledgers / "node-2")
    seeded = json.loads(_report(capsys, ledgers / "node-2", "--json"))
    plain_text = _report(capsys, ledgers / "node-1")
    plain = json.loads(_report(capsys, ledgers / "node-1", "--json"))

    assert NOT_PRIVATE in seeded_text and "seeded" in seeded_text
    assert seeded["not_private"].startswith(NOT_PRIVATE)
    assert seeded["jobs"][0]["seeded_rng"] is True
    assert seeded["jobs"][0]["not_private"].startswith(NOT_PRIVATE)
    assert "NOT PRIVATE" not in plain_text
    assert plain["not_private"] is None
    assert plain["jobs"][0]["seeded_rng"] is False and plain["jobs"][0]["not_private"] is None

    # the threat model, in both forms: single observers only, and the ring's colluding neighbours
    for rep, text, nid in ((seeded, seeded_text, "node-2"), (plain, plain_text, "node-1")):
        tm = rep["jobs"][0]["threat_model"]
        assert tm["colluders"] == 1 and tm["observers"] == "each single node (no collusion)"
        assert "learn x_u exactly" in tm["statement"]
        # the node's own count, as its ledger shows it
        assert f"{nid} adds noise in {_noise_rounds(net, nid)} of {K}" in tm["statement"]
        flat = " ".join(text.split())
        assert "threat model: the ε holds against each single node (no collusion)" in flat
        assert "learn x_u exactly" in flat


async def test_job_result_marks_the_seeded_node_and_states_the_threat_model(ring_job):
    net, daemons, params, _ = ring_job
    for nid in IDS:
        await daemons[nid]._report(net.nodes[nid].jobs["r1"])
    results = {nid: daemons[nid].bootstrap.results[0] for nid in IDS}  # type: ignore[attr-defined]
    assert results["node-2"].seeded_rng is True
    assert not any(results[n].seeded_rng for n in IDS if n != "node-2")
    job = common_pb2.JobSpec(
        job_id="r1",
        algorithm="ring-sum",
        params_json=json.dumps(params),
        participants=[common_pb2.NodeInfo(node_id=n) for n in IDS],
    )

    summary = result_summary(bootstrap_pb2.GetResultReply(job=job, results=list(results.values())))
    text = render_result(summary)
    assert summary["seeded_rng"] == ["node-2"]
    assert summary["not_private"].startswith(NOT_PRIVATE) and "node-2" in summary["not_private"]
    assert NOT_PRIVATE in text.splitlines()[0] and "node-2" in text
    json.dumps(summary)  # the --json output
    # the threat model of the job (no single reporting node): the span of noise rounds over the
    # nodes, each node's count from its own ledger
    counts = [_noise_rounds(net, n) for n in IDS]
    span = f"{min(counts)}–{max(counts)}" if min(counts) < max(counts) else f"{min(counts)}"
    tm = summary["threat_model"]
    assert tm["colluders"] == 1
    assert f"u adds noise in only {span} of its {K} rounds" in tm["statement"]
    assert "threat model: the ε holds against each single node" in " ".join(text.split())

    # the same job without the seeded node's report: nothing is marked
    clean = result_summary(
        bootstrap_pb2.GetResultReply(
            job=job, results=[r for n, r in results.items() if n != "node-2"]
        )
    )
    assert clean["seeded_rng"] == [] and clean["not_private"] is None
    assert "NOT PRIVATE" not in render_result(clean)


def test_every_algorithm_has_a_threat_model_and_walks_follow_colluders():
    ids = [f"v{i}" for i in range(8)]
    # the threat model is the record's (`Algorithm.threat`), for every algorithm of the registry
    for name, a in ALGORITHMS.items():
        spec = {"algorithm": name, "participants": ids, "params": a.prepare({}, len(ids))}
        tm = a.threat(spec, ids[0])
        assert isinstance(tm, ThreatModel) and tm.observers and tm.statement, name
        assert threat_model(spec, ids[0]) == tm, name
    for c in (1, 3):
        params = get_algorithm("walk-sum").prepare({"colluders": c}, len(ids))
        tm = threat_model({"algorithm": "walk-sum", "participants": ids, "params": params})
        assert tm.colluders == c
        assert (tm.observers == "each single node (no collusion)") == (c == 1)
        assert (f"up to {c} participants" in tm.statement) == (c > 1)
    local = threat_model({"algorithm": "walk-sgd", "participants": ids, "params": {"dp": "local"}})
    assert local.colluders is None and "local DP" in local.observers
    # walk-sgd enforces the local-DP level (Lemma 1: continuous noise only): any coalition
    net = threat_model(
        {
            "algorithm": "walk-sgd",
            "participants": ids,
            "params": get_algorithm("walk-sgd").prepare({"colluders": 3}, len(ids)),
        }
    )
    assert net.colluders is None and net.observers == local.observers
    # Muffliato enforces the local-DP level of x + η (its gossip views: continuous noise only)
    for alg in ("muffliato", "muffliato-random"):
        muff = threat_model({"algorithm": alg, "participants": ids, "params": {}})
        assert muff.colluders is None and muff.observers == local.observers, alg
    with pytest.raises(ValueError, match="no threat model"):
        threat_model({"algorithm": "nope", "participants": ids, "params": {}})


async def test_the_reports_state_the_threat_model_of_the_record(ring_job, capsys, monkeypatch):
    """An algorithm is one unit (issue 14): its threat model is its record's `threat`, which
    `netdp privacy report` and `netdp job result` ask (no registry of their own)."""
    _, _, params, ledgers = ring_job
    own = ThreatModel("a test observer", 2, "stated by the record")
    rec = dataclasses.replace(get_algorithm("ring-sum"), threat=lambda spec, me: own)
    monkeypatch.setitem(ALGORITHMS, "ring-sum", rec)
    rep = json.loads(_report(capsys, ledgers / "node-1", "--json"))
    assert rep["jobs"][0]["threat_model"] == own.as_dict()
    job = common_pb2.JobSpec(
        job_id="r1",
        algorithm="ring-sum",
        params_json=json.dumps(params),
        participants=[common_pb2.NodeInfo(node_id=n) for n in IDS],
    )
    summary = result_summary(bootstrap_pb2.GetResultReply(job=job, results=[]))
    assert summary["threat_model"] == own.as_dict()
