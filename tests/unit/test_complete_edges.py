"""A job on the complete graph does not list its n(n-1) edges: 1,000 nodes (`netdp demo --nodes
1000 --algorithm walk-sum`) made a JobSpec of ~22 MB, over the 4 MiB gRPC message limit, held by
every node and written to every ledger. The kind says it all; nodes and accountants expand it
(`CompleteEdges`) to the same edges as before."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.service import BootstrapService
from netdp_bootstrap.store import Store
from netdp_bootstrap.topology import build
from netdp_node.algorithms.walk.accountant import _rw_graph
from netdp_node.bootstrap_client import job_context
from netdp_node.graphs import CompleteEdges, spec_edges
from netdp_node.limits import MAX_MESSAGE_BYTES
from netdp_node.runtime import spec_dict
from netdp_node.security import pki


def test_complete_edges_are_every_ordered_pair() -> None:
    ids = [f"node-{i}" for i in range(1, 8)]
    e = CompleteEdges(ids)
    want = {(a, b) for a, b in nx.complete_graph(ids).edges()} | {
        (b, a) for a, b in nx.complete_graph(ids).edges()
    }
    assert len(e) == len(want) == 42 and set(e) == want and len(list(e)) == 42
    assert [e[i] for i in range(len(e))] == list(e) and e[-1] == list(e)[-1]
    assert set(build("complete", ids, {}, seed=1).edges) == set(e)


def _service(tmp_path: Path, n: int) -> tuple[BootstrapService, Store]:
    pki.init_ca(tmp_path / "pki")
    store = Store(tmp_path / "state")
    for i in range(1, n + 1):
        store.register(f"node-{i}", f"127.0.0.1:{20000 + i}", 1000 + i)
    return BootstrapService(store, (tmp_path / "pki" / "ca.pem").read_bytes()), store


def test_a_1000_node_walk_sum_spec_fits_a_message_and_expands_at_the_node(tmp_path: Path) -> None:
    svc, store = _service(tmp_path, 1000)
    try:
        job = svc.make_job(
            bootstrap_pb2.SubmitJobRequest(
                algorithm="walk-sum", params_json=json.dumps({"T": 10000}), public_seed=3
            )
        )
        assert job.topology.kind == "complete" and len(job.topology.edges) == 0
        assert job.ByteSize() < MAX_MESSAGE_BYTES / 10
        ctx = job_context(job, "node-5")
        assert isinstance(ctx.edges, CompleteEdges) and len(ctx.edges) == 1000 * 999
        spec = spec_dict(ctx)
        assert spec["edges"] == [] and spec["topology"] == "complete"
        assert len(json.dumps(spec)) < 100_000  # what every ledger stores
        assert spec_edges(spec) == ctx.edges
        # the same submission again is the same job (spec_differences ignores the unlisted edges)
        again = bootstrap_pb2.SubmitJobRequest(
            algorithm="walk-sum", params_json=json.dumps({"T": 10000}), public_seed=job.public_seed
        )
        assert svc.spec_differences(again, job) == []
    finally:
        store.close()


def test_listed_graphs_are_unchanged_and_accountants_see_the_same_edges(tmp_path: Path) -> None:
    svc, store = _service(tmp_path, 6)
    try:
        ring = svc.make_job(
            bootstrap_pb2.SubmitJobRequest(
                algorithm="rw-sgd",
                params_json=json.dumps({"T": 30}),
                topology_kind="ring",
                public_seed=1,
            )
        )
        assert len(ring.topology.edges) == 6  # listed (a directed cycle), as before
        spec = spec_dict(job_context(ring, "node-1"))
        assert "topology" not in spec and len(spec["edges"]) == 6
        full = svc.make_job(
            bootstrap_pb2.SubmitJobRequest(
                algorithm="rw-sgd",
                params_json=json.dumps({"T": 30}),
                topology_kind="complete",
                public_seed=1,
            )
        )
        cspec = spec_dict(job_context(full, "node-1"))
        listed = dict(cspec, edges=[list(e) for e in CompleteEdges(cspec["participants"])])
        del listed["topology"]
        # the accountant's graph is the one the listed edges gave
        assert sorted(_rw_graph(cspec)[1]) == sorted(_rw_graph(listed)[1])
        assert len(_rw_graph(cspec)[1]) == 30
    finally:
        store.close()
