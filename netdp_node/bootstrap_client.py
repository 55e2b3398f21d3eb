"""A small client for the bootstrap service, used by node daemons and by the CLI (operators).

It talks only to a server whose certificate is a bootstrap certificate of the CA (it carries
`BOOTSTRAP_NAME`, see netdp_node.security.identity): another certificate at the bootstrap's address,
even a valid node certificate, fails the handshake, and every call raises ServerIdentityError at
once (no retry)."""

from __future__ import annotations

import json
import secrets
from typing import Any

import grpc
import grpc.aio

from netdp.v1 import bootstrap_pb2, bootstrap_pb2_grpc, common_pb2
from netdp_node.errors import ServerIdentityError
from netdp_node.graphs import COMPLETE, CompleteEdges
from netdp_node.protocols.base import JobContext, Message
from netdp_node.retry import Backoff, OnRetry, retry
from netdp_node.security.identity import BOOTSTRAP_NAME
from netdp_node.security.mtls import secure_channel, wrong_server
from netdp_node.security.pki import Identity
from netdp_node.transport.base import Bulletin, DeliveryError
from netdp_node.wire import WireError, envelope_to_message, message_to_envelope

TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
#: A channel to the bootstrap sends keepalive pings only while a call is in progress. Between
#: news, a hosted node's channel carries no call (the process's one watch is held on one node's
#: channel: netdp_node.jobwatch), and a ping every 20 s on each of 1,000 idle connections was most
#: of what idle nodes cost the bootstrap. The connection stays open (the next call does not pay a
#: new TLS handshake); one that died while idle is found by the pings of the next call.
BOOTSTRAP_CHANNEL_OPTIONS = {"grpc.keepalive_permit_without_calls": 0}


class RetryingCall(Exception):
    """What `on_retry` is told: the call, the bootstrap's address and the failure."""

    def __init__(self, method: str, address: str, error: BaseException) -> None:
        self.method, self.address, self.error = method, address, error
        why = (
            f"{error.code().name}: {error.details()}"
            if isinstance(error, grpc.aio.AioRpcError)
            else f"{type(error).__name__}: {error}"
        )
        super().__init__(f"{method} to the bootstrap at {address} failed ({why})")


def is_transient(e: BaseException) -> bool:
    return isinstance(e, grpc.aio.AioRpcError) and e.code() in TRANSIENT and not wrong_server(e)


def job_context(job: common_pb2.JobSpec, me: str) -> JobContext:
    return JobContext(
        job_id=job.job_id,
        algorithm=job.algorithm,
        me=me,
        participants=tuple(p.node_id for p in job.participants),
        params=json.loads(job.params_json or "{}"),
        public_seed=job.public_seed,
        # the complete graph's edges are not listed (`CompleteEdges`: every ordered pair)
        edges=(
            CompleteEdges(tuple(p.node_id for p in job.participants))
            if job.topology.kind == COMPLETE and not job.topology.edges
            else tuple((e.src, e.dst) for e in job.topology.edges)
        ),
    )


def new_job_id() -> str:
    """A fresh job id, chosen by the client ONCE, before its first SubmitJob: `job-` and 16 random
    hex digits (64 bits from the OS's CSPRNG, e.g. `job-3f9c0a7e12b4d658`). The bootstrap treats a
    client-chosen id as an idempotency key: when the reply of a submission is lost (a timeout or
    UNAVAILABLE after the bootstrap stored the job) the retry, under the same id and spec, gets the
    stored job back instead of starting a second job that would spend every participant's budget
    again. 64 bits: two submissions of a bootstrap share an id with probability below 1e-7 even
    after a million jobs (and a shared id with another spec is refused, never merged)."""
    return f"job-{secrets.token_hex(8)}"


def addresses(job: common_pb2.JobSpec) -> dict[str, str]:
    return {p.node_id: p.address for p in job.participants}


class BootstrapClient:
    def __init__(
        self,
        address: str,
        identity: Identity,
        *,
        timeout: float = 10.0,
        backoff: Backoff | None = None,
        server_name: str = BOOTSTRAP_NAME,
        on_retry: OnRetry | None = None,
    ) -> None:
        """`on_retry(error, attempt, delay)`: told of every retry of a transient failure (the node
        daemon logs them)."""
        self.address = address
        self.on_retry = on_retry
        self.server_name = server_name
        self.channel = secure_channel(
            address, identity, server_name, options=BOOTSTRAP_CHANNEL_OPTIONS
        )
        self.stub = bootstrap_pb2_grpc.BootstrapStub(self.channel)
        self.timeout = timeout
        self.backoff = backoff or Backoff(give_up_after=30.0)

    async def close(self) -> None:
        await self.channel.close()

    async def call(
        self,
        method: str,
        request: Any,
        *,
        retry_transient: bool = True,
        extra_time: float = 0.0,
        idempotent: bool = False,
    ) -> Any:
        """`extra_time`: seconds the bootstrap may legitimately hold the call (a long poll).
        `idempotent`: also retry a call that came back CANCELLED (seen under a registration storm
        of hundreds of nodes: the call never reached the service; doing it again is harmless)."""
        fn = getattr(self.stub, method)

        async def once() -> Any:
            return await fn(request, timeout=self.timeout + extra_time)

        try:
            if not retry_transient:
                return await once()
            return await retry(
                once,
                self.backoff,
                (
                    lambda e: (
                        is_transient(e)
                        or (
                            isinstance(e, grpc.aio.AioRpcError)
                            and e.code() == grpc.StatusCode.CANCELLED
                        )
                    )
                )
                if idempotent
                else is_transient,
                self._retrying(method),
            )
        except grpc.aio.AioRpcError as e:
            if wrong_server(e):
                raise ServerIdentityError(
                    f"refused the server at {self.address}: expected the bootstrap, the server's "
                    f"certificate does not name it (every bootstrap certificate of the CA carries "
                    f"{self.server_name}; {method} not sent)"
                ) from e
            raise

    def _retrying(self, method: str) -> OnRetry | None:
        on_retry = self.on_retry
        if on_retry is None:
            return None

        def tell(e: BaseException, attempt: int, delay: float) -> None:
            on_retry(RetryingCall(method, self.address, e), attempt, delay)

        return tell

    async def register(
        self,
        node_id: str,
        address: str,
        *,
        ledger_id: str = "",
        ledger_created: float = 0.0,
        retry_transient: bool = True,
    ) -> bootstrap_pb2.RegisterReply:
        """Register (or re-register) this node; `ledger_id`/`ledger_created` name its ledger. The
        reply holds the latest job sequence number and the store's id (`Ledger.join_after`).
        `retry_transient=False`: one try (the node daemon retries registration itself, bounded)."""
        return await self.call(
            "Register",
            bootstrap_pb2.RegisterRequest(
                node_id=node_id,
                address=address,
                ledger_id=ledger_id,
                ledger_created_unix=ledger_created,
            ),
            retry_transient=retry_transient,
            idempotent=True,
        )

    async def list_nodes(self) -> list[common_pb2.NodeInfo]:
        return list((await self.call("ListNodes", bootstrap_pb2.ListNodesRequest())).nodes)

    async def submit(
        self,
        algorithm: str,
        params: dict[str, Any],
        *,
        participants: list[str] | None = None,
        topology: str = "",
        topology_params: dict[str, Any] | None = None,
        seed: int = 0,
        job_id: str = "",
    ) -> common_pb2.JobSpec:
        """Submit a job; retried on a transient failure. `job_id` "" : a fresh one (`new_job_id`),
        chosen here once, so that every retry of this submission names the same job (a retry
        whose first attempt reached the bootstrap re-attaches to the stored job; nothing is run
        or spent twice)."""
        req = bootstrap_pb2.SubmitJobRequest(
            algorithm=algorithm,
            params_json=json.dumps(params),
            participants=participants or [],
            topology_kind=topology,
            topology_params_json=json.dumps(topology_params or {}),
            public_seed=seed,
            job_id=job_id or new_job_id(),
        )
        return (await self.call("SubmitJob", req)).job

    async def list_jobs(
        self, after: int = 0, *, wait: float = 0.0, crl_number: int = 0
    ) -> list[tuple[int, common_pb2.JobSpec]]:
        """Jobs with sequence number > after (this node's, or all for an operator). `wait` > 0:
        long poll, the bootstrap answers as soon as there is one, or a new revocation list, or
        after `wait` seconds (at most 30) with none."""
        r = await self.call(
            "ListJobs",
            bootstrap_pb2.ListJobsRequest(
                after=after, wait_ms=int(wait * 1000), crl_number=crl_number
            ),
            extra_time=wait,
        )
        return list(zip(r.seqs, r.jobs))

    async def watch_jobs(
        self,
        version: int,
        crl_number: int,
        *,
        wait: float = 0.0,
        retry_transient: bool = True,
    ) -> tuple[int, int]:
        """The bootstrap's (job version, revocation list number): at once when either differs
        from the caller's `version` and `crl_number`, else after `wait` seconds (at most 30). See
        `netdp_node.jobwatch`."""
        r = await self.call(
            "WatchJobs",
            bootstrap_pb2.WatchJobsRequest(
                after_version=version, crl_number=crl_number, wait_ms=int(wait * 1000)
            ),
            extra_time=wait,
            retry_transient=retry_transient,
        )
        return int(r.version), int(r.crl_number)

    async def get_job(self, job_id: str) -> common_pb2.JobSpec:
        return (await self.get_job_seq(job_id))[1]

    async def get_job_seq(self, job_id: str) -> tuple[int, common_pb2.JobSpec]:
        """The job and its sequence number (0 from a bootstrap that does not give it)."""
        r = await self.call("GetJob", bootstrap_pb2.GetJobRequest(job_id=job_id))
        return int(r.seq), r.job

    async def report(
        self, result: bootstrap_pb2.NodeResult, *, retry_transient: bool = True
    ) -> None:
        """`retry_transient=False`: one try (the node daemon retries reports itself, bounded)."""
        await self.call("ReportResult", result, retry_transient=retry_transient)

    async def result(self, job_id: str) -> bootstrap_pb2.GetResultReply:
        return await self.call("GetResult", bootstrap_pb2.GetResultRequest(job_id=job_id))

    async def revocations(self) -> bytes:
        return bytes(
            (await self.call("GetRevocations", bootstrap_pb2.GetRevocationsRequest())).crl_pem
        )

    async def publish_revocations(self, crl_pem: bytes) -> bytes:
        r = await self.call("PublishRevocations", bootstrap_pb2.Revocations(crl_pem=crl_pem))
        return bytes(r.crl_pem)

    async def publish(self, job_id: str, msg: Message, *, retry_transient: bool = True) -> bool:
        """Put this node's `msg` on job `job_id`'s bulletin (an identical re-publication is
        accepted, so a retry is harmless). True if it was there already."""
        r = await self.call(
            "Publish",
            bootstrap_pb2.PublishRequest(job_id=job_id, entry=message_to_envelope(job_id, msg)),
            idempotent=True,
            retry_transient=retry_transient,
        )
        return bool(r.duplicate)

    async def read_bulletin(
        self,
        job_id: str,
        kind: str,
        after: int = 0,
        *,
        wait: float = 0.0,
        retry_transient: bool = True,
    ) -> bootstrap_pb2.ReadBulletinReply:
        """The entries of `kind` on job `job_id`'s bulletin after position `after`; `wait` > 0:
        long poll (at most 30 s) when there is none yet."""
        return await self.call(
            "ReadBulletin",
            bootstrap_pb2.ReadBulletinRequest(
                job_id=job_id, kind=kind, after=after, wait_ms=int(wait * 1000)
            ),
            extra_time=wait,
            retry_transient=retry_transient,
        )


class BootstrapBulletin(Bulletin):
    """The bootstrap's bulletin as the runtime uses it (`transport.base.Bulletin`): one try per
    call (the runtime retries, bounded); gRPC statuses become DeliveryError (UNAVAILABLE for a
    bootstrap that cannot be reached now)."""

    def __init__(self, client: BootstrapClient) -> None:
        self.client = client

    async def publish(self, job_id: str, msg: Message) -> None:
        try:
            await self.client.publish(job_id, msg, retry_transient=False)
        except grpc.aio.AioRpcError as e:
            raise _delivery_error(e) from e
        except ServerIdentityError as e:
            raise DeliveryError("bootstrap", "UNAVAILABLE", str(e)) from e

    async def read(
        self, job_id: str, kind: str, after: int, wait: float
    ) -> tuple[list[tuple[str, Message]], int, bool]:
        try:
            r = await self.client.read_bulletin(
                job_id, kind, after, wait=wait, retry_transient=False
            )
        except grpc.aio.AioRpcError as e:
            raise _delivery_error(e) from e
        except ServerIdentityError as e:
            raise DeliveryError("bootstrap", "UNAVAILABLE", str(e)) from e
        out: list[tuple[str, Message]] = []
        for b in r.entries:
            try:
                out.append((b.node_id, envelope_to_message(b.entry)))
            except WireError as e:
                raise DeliveryError(
                    "bootstrap", "INVALID_ARGUMENT", f"bulletin entry of {b.node_id}: {e}"
                ) from e
        return out, int(r.next), bool(r.complete)


def _delivery_error(e: grpc.aio.AioRpcError) -> DeliveryError:
    code = "UNAVAILABLE" if is_transient(e) else e.code().name
    return DeliveryError("bootstrap", code, e.details() or "")
