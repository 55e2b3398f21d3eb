"""Bad job input at the bootstrap: the real service on a loopback mTLS gRPC server (in this
process), called by an operator and by nodes with their own certificates.

Every refusal is INVALID_ARGUMENT with a message naming the field: malformed request bytes, params
that are not integers where integers belong (never truncated), that overflow (1e400), that nest too
deeply, that ask for absurd sizes (rounds, a token larger than the message limit). A job that can
run is still accepted. The CLI turns a refusal into exit code 2 naming the parameter.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from harness import Boot, registered_bootstrap

from netdp.v1 import bootstrap_pb2, common_pb2, peer_pb2
from netdp_node.algorithms import ENVELOPE_ALLOWANCE
from netdp_node.algorithms.ring.engine import MAX_ROUNDS
from netdp_node.cli import main
from netdp_node.limits import MAX_MESSAGE_BYTES
from netdp_node.security.identity import BOOTSTRAP_NAME, peer_name
from netdp_node.security.mtls import AccessPolicy, secure_channel, start_server
from netdp_node.transport.grpc import PeerService
from netdp_node.wire import WireError, tensor_to_ndarray

pytestmark = pytest.mark.timeout(30)

NODES = ("node-1", "node-2", "node-3")
REPO = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture
async def boot(tmp_path: Path) -> AsyncIterator[Boot]:
    async with registered_bootstrap(tmp_path, NODES) as b:
        yield b


async def submit_raw(
    b: Boot, algorithm: str, params_json: str, topology_params_json: str = ""
) -> grpc.aio.AioRpcError | None:
    """SubmitJob with exactly this params text (no client-side JSON); the error, or None."""
    req = bootstrap_pb2.SubmitJobRequest(
        algorithm=algorithm, params_json=params_json, topology_params_json=topology_params_json
    )
    try:
        await b.operator.call("SubmitJob", req, retry_transient=False)
    except grpc.aio.AioRpcError as e:
        return e
    return None


DEEP = '{"rounds": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize(
    "algorithm, params_json, names",
    [
        ("ring-sum", '{"rounds": 2.7}', ["rounds", "integer", "2.7"]),
        ("ring-sum", '{"rounds": 1e400}', ["rounds", "finite", "inf"]),
        ("ring-sum", '{"rounds": -1e400}', ["rounds", "finite"]),
        ("ring-sum", '{"epsilon": NaN}', ["epsilon", "finite"]),
        ("ring-sum", '{"rounds": "many"}', ["rounds", "integer", "many"]),
        ("ring-sum", '{"rounds": [1, 2]}', ["rounds", "integer"]),
        ("ring-sum", '{"rounds": true}', ["rounds", "integer"]),
        ("ring-sum", '{"rounds": 1' + "0" * 400 + "}", ["rounds", "|value| < 2^63"]),
        ("ring-sum", '{"clip": [1.0]}', ["clip"]),
        ("ring-sum", '{"clip": "wide"}', ["clip", "wide"]),
        ("ring-sum", DEEP, ["params_json", "nested too deeply"]),
        ("ring-sum", '{"rounds": ' + "[" * 10 + "]" * 10 + "}", ["rounds", "nested"]),
        ("ring-sum", '{"rounds": 1000000000000}', ["rounds", f"1..{MAX_ROUNDS}"]),
        ("ring-histogram", '{"rounds": 1000000000000}', ["rounds", f"1..{MAX_ROUNDS}"]),
        ("ring-sum", '{"rounds": 5, "delta": 0.3}', ["rounds × delta + delta_prime", "< 1"]),
        ("ring-sum", '{"dim": 1048576}', ["dim", "MAX_MESSAGE_BYTES", str(MAX_MESSAGE_BYTES)]),
        ("walk-sum", '{"dim": 1048576}', ["dim", "MAX_MESSAGE_BYTES"]),
        ("walk-sum", '{"T": 30.5}', ["T", "integer"]),
        ("walk-histogram", '{"bins": 4.5}', ["bins", "integer"]),
        ("inca", '{"T": 2.5}', ["T", "integer"]),
        ("muffliato", '{"T": 3.5, "sigma": 1.0}', ["T", "integer"]),
        ("ring-sum", "[1, 2]", ["params_json", "object"]),
        ("ring-sum", '{"rounds": ', ["params_json", "not valid JSON"]),
    ],
    ids=lambda v: v if len(str(v)) < 40 else str(v)[:30],
)
async def test_submit_refuses_bad_params_naming_them(boot, algorithm, params_json, names):
    err = await submit_raw(boot, algorithm, params_json)
    assert err is not None, f"{params_json[:60]} was accepted"
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    for name in names:
        assert name in err.details(), (name, err.details())
    # nothing was stored
    assert await boot.operator.list_jobs() == []


async def test_topology_params_nested_too_deeply(boot):
    err = await submit_raw(boot, "ring-sum", '{"rounds": 2}', topology_params_json=DEEP[12:-1])
    assert err is not None and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "topology_params_json" in err.details()


async def test_a_job_that_can_run_is_accepted(boot):
    # an integral float is the integer it spells (JSON has one number type); the largest token
    # that fits the message limit is accepted
    job = await boot.operator.submit("ring-sum", {"rounds": 3.0, "dim": 4}, job_id="ok-1")
    assert json.loads(job.params_json)["rounds"] == 3
    assert isinstance(json.loads(job.params_json)["rounds"], int)
    job = await boot.operator.submit("ring-sum", {"rounds": MAX_ROUNDS}, job_id="ok-2")
    assert json.loads(job.params_json)["rounds"] == MAX_ROUNDS
    limit = (MAX_MESSAGE_BYTES - ENVELOPE_ALLOWANCE) // 8
    await boot.operator.submit("ring-sum", {"dim": limit}, job_id="ok-3")
    err = await submit_raw(boot, "ring-sum", json.dumps({"dim": limit + 1}))
    assert err is not None and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [j.job_id for _, j in await boot.operator.list_jobs()] == ["ok-1", "ok-2", "ok-3"]


@pytest.mark.parametrize(
    "method, who",
    [
        ("SubmitJob", "operator"),
        ("GetJob", "operator"),
        ("ListJobs", "node-1"),
        ("Register", "node-1"),
        ("ReportResult", "node-1"),
        ("PublishRevocations", "operator"),
    ],
)
async def test_malformed_request_bytes_are_invalid_argument(boot, method, who):
    ch = secure_channel(boot.address, boot.identity(who), BOOTSTRAP_NAME)
    try:
        call = ch.unary_unary(
            f"/netdp.v1.Bootstrap/{method}", request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(b"\xff\xff\xff\xff not a protobuf", timeout=10)
    finally:
        await ch.close()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "malformed" in err.value.details()
    # and the bootstrap keeps serving
    assert [n.node_id for n in await boot.operator.list_nodes()] == list(NODES)


async def test_report_with_a_tensor_that_cannot_exist_is_invalid_argument(boot):
    await boot.operator.submit("ring-sum", {"rounds": 2}, job_id="rep-1")
    bad = bootstrap_pb2.NodeResult(
        job_id="rep-1",
        node_id="node-1",
        state="done",
        output=common_pb2.Tensor(dtype="float64", shape=[2**62, 2**62, 0], data=b""),
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await boot.nodes["node-1"].call("ReportResult", bad, retry_transient=False)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "output" in err.value.details() and "shape" in err.value.details()
    assert list((await boot.operator.result("rep-1")).results) == []


@pytest.mark.parametrize(
    "param, names, process",
    [
        # the installed command line as its own process once (its exit code and stderr as a user
        # sees them); the other refusals through the same `main` in this process (no interpreter
        # start, about 1 s of CPU each)
        ("rounds=2.7", ["rounds", "integer"], True),
        ("rounds=1e400", ["rounds", "finite"], False),
        ("rounds=1000000000000", ["rounds", f"1..{MAX_ROUNDS}"], False),
        ("dim=1048576", ["dim", "MAX_MESSAGE_BYTES"], False),
    ],
)
async def test_cli_submit_exits_2_naming_the_parameter(boot, param, names, process, capsys):
    argv = [
        "job",
        "submit",
        "--bootstrap",
        boot.address,
        "--certs",
        str(boot.pki_dir / "operator"),
        "--param",
        param,
    ]
    if process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "netdp_node.cli",
            *argv,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 25)
        code, text, stdout = proc.returncode, err.decode(), out.decode()
    else:
        capsys.readouterr()
        code = await asyncio.to_thread(main, argv)
        std = capsys.readouterr()
        text, stdout = std.err, std.out
    assert code == 2, text
    for name in names:
        assert name in text, (name, text)
    assert "Traceback" not in text
    assert stdout == ""


# -- tensors whose shape cannot exist --------------------------------------------------------------
IMPOSSIBLE = [[2**62, 2**62, 0], [2**63 - 1, 0], [1 << 22, 1 << 22, 0], [1] * 9]


@pytest.mark.parametrize("shape", IMPOSSIBLE, ids=str)
def test_tensor_shape_that_cannot_be_allocated_is_a_wire_error(shape):
    t = common_pb2.Tensor(dtype="float64", shape=shape, data=b"" if 0 in shape else b"\0" * 8)
    with pytest.raises(WireError, match="dimensions|spans"):
        tensor_to_ndarray(t)


@pytest.mark.parametrize("shape, size", [([0], 0), ([3, 0], 0), ([2, 2], 4), ([1] * 8, 1)], ids=str)
def test_tensor_shapes_that_exist_still_decode(shape, size):
    t = common_pb2.Tensor(dtype="float64", shape=shape, data=b"\0" * 8 * size)
    assert tensor_to_ndarray(t).shape == tuple(shape)


async def test_peer_answers_an_impossible_tensor_shape_with_invalid_argument(boot):
    """Over a real Peer server (node-2) on loopback mTLS, from node-1: INVALID_ARGUMENT naming the
    shape, and the handler never sees the message."""
    got: list[object] = []

    async def handle(sender: str, job_id: str, msg: object) -> bool:
        got.append(msg)
        return False

    svc = PeerService(
        "node-2", handle, lambda: peer_pb2.StatusReply(node_id="node-2"), AccessPolicy()
    )
    server, port = await start_server(
        boot.identity("node-2"),
        "127.0.0.1:0",
        lambda s: s.add_generic_rpc_handlers((svc.generic_handler(),)),
    )
    ch = secure_channel(f"127.0.0.1:{port}", boot.identity("node-1"), peer_name("node-2"))
    try:
        call = ch.unary_unary(
            "/netdp.v1.Peer/Deliver",
            request_serializer=None,
            response_deserializer=peer_pb2.Ack.FromString,
        )
        env = peer_pb2.Envelope(job_id="j", kind="token", walk_id="ring", seq=1, msg_id=1)
        env.payload.CopyFrom(common_pb2.Tensor(dtype="float64", shape=[2**62, 2**62, 0]))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(env.SerializeToString(), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert "tensor shape" in err.value.details()
        # a well-formed message still goes through, also the largest payload a job may have
        # (what Algorithm.validate allows fits the transport's message limit)
        limit = (MAX_MESSAGE_BYTES - ENVELOPE_ALLOWANCE) // 8
        env.job_id = "j" * 64  # the longest job id
        env.payload.CopyFrom(
            common_pb2.Tensor(dtype="float64", shape=[limit], data=b"\0" * 8 * limit)
        )
        ack = await call(env.SerializeToString(), timeout=10)
        assert ack.code == 0 and len(got) == 1 and got[0].payload.shape == (limit,)
    finally:
        await ch.close()
        await server.stop(0)


async def test_bootstrap_reads_no_file_a_request_names(boot, tmp_path):
    """An edgelist `path` would make the bootstrap read any file on its disk and echo its first
    line in the error; the bootstrap takes edges inline only."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:do-not-echo\n")
    req = bootstrap_pb2.SubmitJobRequest(
        algorithm="rw-sgd",
        params_json="{}",
        topology_kind="edgelist",
        topology_params_json=json.dumps({"path": str(secret)}),
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await boot.operator.call("SubmitJob", req, retry_transient=False)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reads no file" in err.value.details()
    assert "do-not-echo" not in err.value.details()
    assert await boot.operator.list_jobs() == []
