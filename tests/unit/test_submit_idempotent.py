"""A client-chosen job id is an idempotency key (what makes the compose submitter's restarts safe).

A real bootstrap (in this process: mTLS gRPC on loopback, a durable store in tmp_path), real
certificates, and the real client: submitting the same spec again under the same id returns the
stored job (no second job, so no node spends its budget twice); another spec under that id is
refused with ALREADY_EXISTS naming what differs; without an id every submission is a new job.
The CLI refuses a malformed --job-id with exit 2 before contacting anything.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from harness import loopback_pki

from netdp.v1 import bootstrap_pb2
from netdp_bootstrap.server import BootstrapConfig, run_bootstrap
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cli import main
from netdp_node.retry import Backoff
from netdp_node.security import pki

pytestmark = pytest.mark.timeout(60)
IDS = ["node-1", "node-2", "node-3", "node-4"]


@pytest_asyncio.fixture
async def bootstrap(tmp_path: Path) -> AsyncIterator[tuple[BootstrapClient, Path]]:
    root = tmp_path / "pki"
    loopback_pki(root, IDS)
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    cfg = BootstrapConfig(
        certs=root / "bootstrap", state=tmp_path / "state", listen="127.0.0.1:0", grace=0.1
    )
    task = asyncio.ensure_future(run_bootstrap(cfg, ready, stop))
    done, _ = await asyncio.wait({ready, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    assert ready in done, "the bootstrap did not start"
    address = f"127.0.0.1:{ready.result()}"
    for nid in IDS:
        c = BootstrapClient(address, pki.load_identity(root / nid))
        try:
            await c.register(nid, f"127.0.0.1:{7700 + IDS.index(nid)}")
        finally:
            await c.close()
    op = BootstrapClient(
        address, pki.load_identity(root / "operator"), backoff=Backoff(give_up_after=0)
    )
    try:
        yield op, root
    finally:
        await op.close()
        stop.set()
        await asyncio.wait_for(task, 30)


async def _refused(coro) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


async def test_same_id_same_spec_returns_the_existing_job(bootstrap):
    op, _ = bootstrap
    first = await op.submit("ring-sum", {"rounds": 3}, topology="ring", job_id="retry-1")
    # A retry: the same flags (seed 0 = drawn by the bootstrap, participants = all registered).
    again = await op.submit("ring-sum", {"rounds": 3}, topology="ring", job_id="retry-1")
    assert again == first  # the stored spec itself: same seed, topology, creation time
    # Naming what the first submission left implicit is the same spec too.
    named = await op.submit(
        "ring-sum",
        {"rounds": 3},
        participants=IDS,
        topology="ring",
        seed=first.public_seed,
        job_id="retry-1",
    )
    assert named == first
    jobs = [j.job_id for _, j in await op.list_jobs(0)]
    assert jobs == ["retry-1"]  # one job: nothing to run (or spend) twice


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(params={"rounds": 4}), "params"),
        (dict(algorithm="ring-sum-r"), "algorithm"),
        (dict(participants=IDS[:3]), "participants"),
        (dict(topology="complete", algorithm="walk-sum", params={"T": 3}), "algorithm"),
        (dict(seed=12345), "public seed"),
    ],
)
async def test_same_id_other_spec_is_refused(bootstrap, change, field):
    op, _ = bootstrap
    base = dict(
        algorithm="ring-sum", params={"rounds": 3}, participants=None, topology="ring", seed=0
    )
    first = await op.submit(base["algorithm"], base["params"], topology="ring", job_id="x-1")
    spec = {**base, **change}
    e = await _refused(
        op.submit(
            spec["algorithm"],
            spec["params"],
            participants=spec["participants"],
            topology=spec["topology"],
            seed=spec["seed"],
            job_id="x-1",
        )
    )
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS, e
    assert "x-1" in e.details() and field in e.details(), e.details()
    assert [j for _, j in await op.list_jobs(0)] == [first]  # unchanged


async def test_other_topology_params_are_refused(bootstrap):
    op, _ = bootstrap
    await op.submit(
        "walk-sum", {"T": 3}, topology="erdos_renyi", topology_params={"p": 0.9}, job_id="er-1"
    )
    again = await op.submit(
        "walk-sum", {"T": 3}, topology="erdos_renyi", topology_params={"p": 0.9}, job_id="er-1"
    )
    assert again.job_id == "er-1"
    e = await _refused(
        op.submit(
            "walk-sum", {"T": 3}, topology="erdos_renyi", topology_params={"p": 1.0}, job_id="er-1"
        )
    )
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS and "topology" in e.details()


async def test_bad_retry_is_invalid_argument_and_no_id_means_new_jobs(bootstrap):
    op, _ = bootstrap
    await op.submit("ring-sum", {"rounds": 3}, job_id="r-1")
    e = await _refused(op.submit("no-such-algorithm", {}, job_id="r-1"))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    a = await op.submit("ring-sum", {"rounds": 3})
    b = await op.submit("ring-sum", {"rounds": 3})
    assert a.job_id != b.job_id
    assert len(await op.list_jobs(0)) == 3


async def test_cli_resubmission_reattaches(bootstrap, capsys):
    op, root = bootstrap
    address = op.address
    argv = [
        "job",
        "submit",
        "--bootstrap",
        address,
        "--certs",
        str(root / "operator"),
        "--job-id",
        "cli-1",
        "--param",
        "rounds=2",
    ]
    assert await asyncio.to_thread(main, argv) == 0
    assert await asyncio.to_thread(main, argv) == 0  # a restarted submitter
    assert capsys.readouterr().out.split() == ["cli-1", "cli-1"]
    assert [j.job_id for _, j in await op.list_jobs(0)] == ["cli-1"]
    code = await asyncio.to_thread(main, [*argv[:-1], "rounds=3"])
    err = capsys.readouterr().err
    assert code == 1 and "ALREADY_EXISTS" in err and "cli-1" in err and "params" in err, err
    assert json.loads((await op.get_job("cli-1")).params_json)["rounds"] == 2


@pytest.mark.parametrize("bad", ["", "-x", "a b", "x" * 65, "job/1"])
def test_cli_refuses_a_malformed_job_id(bad, capsys):
    with pytest.raises(SystemExit) as ex:
        main(
            [
                "job",
                "submit",
                "--bootstrap",
                "127.0.0.1:1",
                "--certs",
                "/nonexistent",
                "--job-id",
                bad,
                "--check",
            ]
        )
    assert ex.value.code == 2
    assert "--job-id" in capsys.readouterr().err


async def test_a_job_reported_finished_again_keeps_the_first_report(bootstrap):
    """A restarted node reports again the jobs its ledger holds finished (its first report may
    have been lost): the bootstrap keeps a node's first finished report, done or declined."""
    op, root = bootstrap
    await op.submit("ring-sum", {"rounds": 3}, topology="ring", job_id="twice")
    node = BootstrapClient(op.address, pki.load_identity(root / "node-1"))
    try:
        first = bootstrap_pb2.NodeResult(
            job_id="twice",
            node_id="node-1",
            state="done",
            contributed=True,
            contributions=3,
            reported_unix=1,
        )
        await node.report(first)
        for again in (
            bootstrap_pb2.NodeResult(
                job_id="twice",
                node_id="node-1",
                state="done",
                contributed=True,
                contributions=5,
                reported_unix=2,
            ),
            bootstrap_pb2.NodeResult(
                job_id="twice", node_id="node-1", state="declined", reported_unix=3
            ),
            bootstrap_pb2.NodeResult(
                job_id="twice",
                node_id="node-1",
                state="failed",
                detail="new ledger",
                reported_unix=4,
            ),
        ):
            await node.report(again)
            (got,) = [r for r in (await op.result("twice")).results if r.node_id == "node-1"]
            assert got == first, (again.state, got)
    finally:
        await node.close()


async def test_the_demo_submits_once_even_when_the_reply_is_lost(bootstrap):
    """`netdp demo` names its job: a submission the bootstrap stored but whose reply was lost (the
    client sees UNAVAILABLE and retries, as on a loaded machine) is the same job, not a second
    walk over the same nodes spending their budgets twice (seen: job-1 and job-2 1.7 s apart)."""
    from netdp_node.cli import build_parser
    from netdp_node.demo import check_args, submit_job

    op, _ = bootstrap
    a = build_parser().parse_args(["demo", "--algorithm", "walk-sum", "--nodes", str(len(IDS))])
    check_args(a)
    real = op.stub.SubmitJob
    calls = 0

    async def reply_lost_once(request, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        reply = await real(request, **kwargs)  # the bootstrap stores the job
        if calls == 1:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="the reply was lost",
            )
        return reply

    op.stub.SubmitJob = reply_lost_once
    job = await submit_job(op, a, IDS)
    assert calls == 2  # the client did retry
    jobs = [j.job_id for _, j in await op.list_jobs(0)]
    assert jobs == [job.job_id]
