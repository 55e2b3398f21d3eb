"""A registration that comes back CANCELLED is tried again (Register is idempotent): in a storm of
500 hosted nodes registering at once, one such call used to stop the node, and with it the host
process. Other calls keep their rule (CANCELLED is not retried)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from netdp.v1 import bootstrap_pb2
from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.retry import Backoff
from netdp_node.security import pki


class FlakyStub:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def _call(self, request: object, timeout: float) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.CANCELLED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                "CANCELLED",
                "CANCELLED:CANCELLED",
            )
        return bootstrap_pb2.RegisterReply()

    Register = _call
    ListNodes = _call


@pytest.fixture
async def client(tmp_path: Path) -> BootstrapClient:
    pki.init_ca(tmp_path)
    ident = pki.load_identity(pki.issue(tmp_path, "node-1", hosts=("127.0.0.1",)))
    return BootstrapClient(
        "127.0.0.1:1", ident, backoff=Backoff(initial=0.01, maximum=0.02, give_up_after=5)
    )


async def test_register_is_retried_when_cancelled(client: BootstrapClient) -> None:
    client.stub = FlakyStub(failures=2)  # type: ignore[assignment]
    try:
        await client.register("node-1", "127.0.0.1:5000")
        assert client.stub.calls == 3  # type: ignore[attr-defined]
    finally:
        await client.close()


async def test_other_calls_are_not_retried_when_cancelled(client: BootstrapClient) -> None:
    client.stub = FlakyStub(failures=1)  # type: ignore[assignment]
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await client.list_nodes()
        assert client.stub.calls == 1  # type: ignore[attr-defined]
    finally:
        await client.close()
