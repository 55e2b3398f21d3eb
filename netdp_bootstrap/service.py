"""The bootstrap gRPC service: registrations, public topologies, job specs, results, revocations.

Every call is mTLS; the caller's identity and role come from its certificate. A node may only
register under the id in its own certificate; jobs are submitted by operators; a revoked certificate
is refused everywhere. The bootstrap never receives private data, and a running job never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import secrets
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from netdp.v1 import bootstrap_pb2, bootstrap_pb2_grpc, common_pb2, peer_pb2
from netdp_bootstrap import topology as topo
from netdp_bootstrap.store import Store
from netdp_node.algorithms import get_algorithm
from netdp_node.errors import SecurityError
from netdp_node.graphs import COMPLETE
from netdp_node.security.identity import PeerIdentity, RevocationList
from netdp_node.security.mtls import AccessPolicy, Unauthorized
from netdp_node.wire import WireError, envelope_to_message, tensor_to_ndarray

#: Longest wait of a ListJobs or ReadBulletin long poll.
LONG_POLL_MAX_MS = 30_000
#: Most entries of a bulletin in one ReadBulletin reply (the client asks again for the rest).
BULLETIN_BATCH = 256
#: Largest entry a participant may publish (bytes of its Envelope), and the most bytes of entries
#: one reply carries beyond its first entry (gRPC's default message limit is 4 MiB).
BULLETIN_MAX_BYTES = 1 << 20
BULLETIN_REPLY_BYTES = 2 << 20
#: How long a bulletin's long poll, woken by a new entry, waits for more before it answers.
BULLETIN_COALESCE_S = 0.2
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

log = logging.getLogger("netdp.bootstrap")

_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")
_LEDGER_ID = re.compile(r"^[0-9a-f]{8,64}$")


def natural_key(s: str) -> list[Any]:
    """node-2 sorts before node-10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def json_object(field: str, text: str) -> dict[str, Any]:
    """A request's JSON field, which must hold an object; ValueError naming the field."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"{field} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{field} is nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a JSON object")  # noqa: TRY004 - INVALID_ARGUMENT
    return value


#: What a request can get wrong: INVALID_ARGUMENT, with the message (naming the field).
BAD_REQUEST = (ValueError, KeyError, TypeError, ArithmeticError, RecursionError)


def generic_handler(service: BootstrapService) -> grpc.GenericRpcHandler:
    """The Bootstrap service's handlers. Each decodes its request itself, so that bytes which are
    not the method's request message are INVALID_ARGUMENT, naming the message (grpc's own decoding
    answers UNKNOWN)."""
    desc = bootstrap_pb2.DESCRIPTOR.services_by_name["Bootstrap"]
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for m in desc.methods:
        handlers[m.name] = grpc.unary_unary_rpc_method_handler(
            _decoding(getattr(service, m.name), message_factory.GetMessageClass(m.input_type)),
            request_deserializer=None,  # raw bytes in
            response_serializer=message_factory.GetMessageClass(m.output_type).SerializeToString,
        )
    return grpc.method_handlers_generic_handler(desc.full_name, handlers)


def _decoding(method: Any, request_type: Any) -> Any:
    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        request = request_type()
        try:
            request.ParseFromString(raw)
        except DecodeError as e:
            log.warning(
                "refused malformed %s bytes from %s: %s", request_type.__name__, context.peer(), e
            )
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed {request_type.__name__}: {e}"
            )
        return await method(request, context)

    return handle


class BootstrapService(bootstrap_pb2_grpc.BootstrapServicer):
    def __init__(self, store: Store, ca_pem: bytes, crl_file: Path | None = None) -> None:
        self.store = store
        self.ca_pem = ca_pem
        # Set (and replaced) whenever a job is submitted or a revocation list accepted: wakes the
        # long polls (WatchJobs, and ListJobs with wait_ms).
        self._news = asyncio.Event()
        # the latest job's sequence number (WatchJobs' version; the store's, kept here so that a
        # watch reads no store)
        self._version = store.current_seq()
        self._stopping = False  # shutting down: held long polls end at once (`stop`)
        # (job, kind) -> set when an entry is published there: wakes the bulletin's long polls
        self._bulletin_news: dict[tuple[str, str], asyncio.Event] = {}
        self.crl_file = crl_file
        self._crl_mtime = 0.0
        self.revocations = RevocationList.empty()
        stored = store.crl()
        if stored:
            self.revocations = RevocationList.from_pem(stored, ca_pem)
        self.reload_crl_file()
        self.policy = AccessPolicy(
            is_revoked=lambda s: self.revocations.is_revoked(s), owner="bootstrap"
        )

    def stop(self) -> None:
        """The server is stopping: answer every held long poll now (with what there is), so that
        stopping does not wait the grace period for them."""
        self._stopping = True
        self._announce()
        for ev in self._bulletin_news.values():
            ev.set()

    def _announce(self) -> None:
        self._news.set()
        self._news = asyncio.Event()

    # -- revocations ---------------------------------------------------------------------------
    def _accept_crl(self, pem: bytes, source: str) -> bool:
        new = RevocationList.from_pem(pem, self.ca_pem)  # raises SecurityError if not our CA's
        if not new.newer_than(self.revocations):
            return False
        self.revocations = new
        self.store.put_crl(new.number, pem)
        self._announce()
        log.info(
            "revocation list #%d from %s: %d revoked certificate(s)",
            new.number,
            source,
            len(new.serials),
        )
        return True

    def reload_crl_file(self) -> None:
        if self.crl_file is None or not self.crl_file.exists():
            return
        mtime = self.crl_file.stat().st_mtime
        if mtime == self._crl_mtime:
            return
        self._crl_mtime = mtime
        try:
            self._accept_crl(self.crl_file.read_bytes(), str(self.crl_file))
        except SecurityError as e:
            log.error("ignoring %s: %s", self.crl_file, e)

    async def watch_crl(self, every: float = 1.0) -> None:
        """Check the --crl file every `every` seconds (one timer for the whole service); a new
        list wakes the long polls (`_accept_crl` announces it)."""
        while True:
            await asyncio.sleep(every)
            self.reload_crl_file()

    # -- helpers -------------------------------------------------------------------------------
    async def _auth(
        self, context: grpc.aio.ServicerContext, roles: tuple[str, ...], what: str
    ) -> PeerIdentity:
        self.reload_crl_file()
        try:
            return self.policy.check(context, roles, what, log)
        except Unauthorized as e:
            await context.abort(e.code, e.reason)
            raise  # unreachable: abort raises

    def _active_nodes(self) -> list[common_pb2.NodeInfo]:
        return sorted(
            (
                info
                for info, serial in self.store.nodes()
                if not self.revocations.is_revoked(serial)
            ),
            key=lambda i: natural_key(i.node_id),
        )

    async def _job_for(
        self, job_id: str, who: PeerIdentity, context: grpc.aio.ServicerContext
    ) -> common_pb2.JobSpec:
        job = self.store.job(job_id)
        if job is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown job {job_id!r}")
        assert job is not None
        if who.role == "node" and who.node_id not in {p.node_id for p in job.participants}:
            log.warning("refused job %s to %s: not a participant", job_id, who.node_id)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{who.node_id} is not a participant of job {job_id}",
            )
        return job

    # -- RPCs ----------------------------------------------------------------------------------
    async def Register(
        self, request: bootstrap_pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.RegisterReply:
        who = await self._auth(context, ("node",), "Register")
        if request.node_id != who.node_id:
            log.warning(
                "refused registration of %r by %s: a node may only register its own id",
                request.node_id,
                who.node_id,
            )
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"certificate of {who.node_id} cannot register node {request.node_id!r}",
            )
        if not _ADDRESS.match(request.address):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"address {request.address!r} is not host:port"
            )
        if request.ledger_id and not _LEDGER_ID.match(request.ledger_id):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"ledger_id {request.ledger_id[:80]!r} is not 8 to 64 hex digits",
            )
        if not (math.isfinite(request.ledger_created_unix) and request.ledger_created_unix >= 0):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "ledger_created_unix must be a finite time >= 0"
            )
        info = self.store.register(who.node_id, request.address, who.serial)
        if request.ledger_id:
            change = self.store.record_ledger(
                who.node_id, request.ledger_id, request.ledger_created_unix
            )
            if change is not None:
                log.warning(
                    "LEDGER CHANGED: %s; if its ledger was lost, it may have forgotten "
                    "privacy it spent (see `netdp job result` of those jobs)",
                    change.describe(),
                )
        log.info("registered %s at %s", who.node_id, request.address)
        return bootstrap_pb2.RegisterReply(
            node=info, job_seq=self.store.current_seq(), store_id=self.store.store_id
        )

    async def ListNodes(
        self, request: bootstrap_pb2.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.ListNodesReply:
        await self._auth(context, ("node", "operator"), "ListNodes")
        return bootstrap_pb2.ListNodesReply(nodes=self._active_nodes())

    async def SubmitJob(
        self, request: bootstrap_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.SubmitJobReply:
        await self._auth(context, ("operator",), "SubmitJob")
        existing = self.store.job(request.job_id) if request.job_id else None
        if existing is not None:
            # A client-chosen job id is an idempotency key: a retry of the same submission (e.g.
            # a restarted `netdp job submit`) re-attaches to the job instead of starting another
            # one that would spend every participant's budget again.
            try:
                diff = self.spec_differences(request, existing)
            except (ValueError, KeyError, json.JSONDecodeError) as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            if diff:
                await context.abort(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"job {request.job_id} exists with another spec ({'; '.join(diff)}); "
                    f"choose another job id",
                )
            log.info(
                "job %s submitted again with the same spec: the existing job is returned",
                existing.job_id,
            )
            return bootstrap_pb2.SubmitJobReply(job=existing)
        try:
            job = self.make_job(request)
        except BAD_REQUEST as e:
            log.info("refused a %s job: %s", request.algorithm, e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if self.store.job(job.job_id) is not None:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"job {job.job_id} exists")
        self._version = max(self._version, self.store.add_job(job))
        self._announce()
        log.info(
            "job %s (%s) submitted with %d participants on %s",
            job.job_id,
            job.algorithm,
            len(job.participants),
            job.topology.topology_id,
        )
        return bootstrap_pb2.SubmitJobReply(job=job)

    def make_job(self, request: bootstrap_pb2.SubmitJobRequest) -> common_pb2.JobSpec:
        algo = get_algorithm(request.algorithm)
        active = {n.node_id: n for n in self._active_nodes()}
        if request.participants:
            missing = [p for p in request.participants if p not in active]
            if missing:
                raise ValueError(f"not registered (or revoked): {missing}")
            if len(set(request.participants)) != len(request.participants):
                raise ValueError("participants are listed twice")
            ids = list(request.participants)
        else:
            ids = list(active)
        params = algo.validate(json_object("params_json", request.params_json), len(ids))
        kind = request.topology_kind or algo.topology
        tparams = json_object("topology_params_json", request.topology_params_json)
        if "path" in tparams:  # a request must not make the bootstrap read (and echo) its files
            raise ValueError(
                "topology_params_json: the bootstrap reads no file a request names; "
                "give an edgelist its edges inline (edges: [[src, dst], ...])"
            )
        seed = request.public_seed or secrets.randbits(63)
        # the complete graph is not built: its edges are not listed (see below)
        graph = None if kind == COMPLETE else topo.build(kind, ids, tparams, seed=seed % (2**32))
        gparams = topo.complete_params(ids, tparams) if graph is None else graph.params
        if algo.topology == "ring" and kind != "ring":
            raise ValueError(f"{algo.name} runs on a ring, not on {kind}")
        version = self.store.next_topology_version()
        job_id = request.job_id or f"job-{version}-{secrets.token_hex(3)}"
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", job_id):
            raise ValueError(f"invalid job id {job_id!r}")
        return common_pb2.JobSpec(
            job_id=job_id,
            algorithm=algo.name,
            params_json=json.dumps(params, sort_keys=True),
            public_seed=seed,
            participants=[active[i] for i in ids],
            topology=common_pb2.Topology(
                topology_id=f"{kind}-v{version}",
                version=version,
                kind=kind,
                nodes=ids,
                # the complete graph's n(n-1) edges are implied by its kind, not listed (1,000
                # nodes: a spec of tens of MB, over the 4 MiB message limit)
                edges=[]
                if graph is None
                else [common_pb2.Edge(src=a, dst=b) for a, b in graph.edges],
                params_json=json.dumps(gparams, sort_keys=True, default=str),
            ),
            created_unix=int(time.time()),
        )

    @staticmethod
    def spec_differences(
        request: bootstrap_pb2.SubmitJobRequest, job: common_pb2.JobSpec
    ) -> list[str]:
        """How a submission differs from the stored job of the same id (empty: the same spec).

        What the request left to the bootstrap is not compared: the participants when none are
        named (all the registered nodes at the first submission), the public seed when 0 (drawn
        at random then). Everything else is derived again as `make_job` would and compared.
        """
        out: list[str] = []
        algo = get_algorithm(request.algorithm)
        if algo.name != job.algorithm:
            out.append(f"algorithm {algo.name}, not {job.algorithm}")
        ids = [p.node_id for p in job.participants]
        if request.participants and list(request.participants) != ids:
            out.append(f"participants {','.join(request.participants)}, not {','.join(ids)}")
        params = json.loads(request.params_json or "{}")
        if not isinstance(params, dict):
            raise ValueError("params must be a JSON object")
        if algo.name == job.algorithm:
            prepared = json.dumps(algo.prepare(params, len(ids)), sort_keys=True)
            if prepared != job.params_json:
                out.append(f"params {prepared}, not {job.params_json}")
        kind = request.topology_kind or algo.topology
        if kind != job.topology.kind:
            out.append(f"topology {kind}, not {job.topology.kind}")
        if request.public_seed and request.public_seed != job.public_seed:
            out.append(f"public seed {request.public_seed}, not {job.public_seed}")
        if kind == job.topology.kind:
            tparams = json.loads(request.topology_params_json or "{}")
            graph = (
                None
                if kind == COMPLETE
                else topo.build(kind, ids, tparams, seed=job.public_seed % (2**32))
            )
            gparams = topo.complete_params(ids, tparams) if graph is None else graph.params
            if json.dumps(gparams, sort_keys=True, default=str) != job.topology.params_json or (
                graph is not None
                and [(e.src, e.dst) for e in job.topology.edges] != list(graph.edges)
            ):
                out.append(
                    f"topology parameters {json.dumps(tparams, sort_keys=True)} give another graph"
                )
        return out

    async def ListJobs(
        self, request: bootstrap_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.ListJobsReply:
        who = await self._auth(context, ("node", "operator"), "ListJobs")
        loop = asyncio.get_running_loop()
        until = loop.time() + min(request.wait_ms, LONG_POLL_MAX_MS) / 1000.0
        # the caller's list (`crl_number`, 0 from an older node: the list as the call arrives)
        crl = request.crl_number or self.revocations.number
        while True:
            news = self._news  # before reading the store: a job added after the read wakes us
            reply = bootstrap_pb2.ListJobsReply()
            for seq, job in self.store.jobs_after(request.after):
                if who.role == "operator" or who.node_id in {p.node_id for p in job.participants}:
                    reply.jobs.append(job)
                    reply.seqs.append(seq)
            left = until - loop.time()
            if reply.jobs or left <= 0 or self.revocations.number != crl or self._stopping:
                return reply
            # long poll: wake on news only (a new --crl file is news too: `watch_crl`), so that
            # idle nodes cost the bootstrap one call per node per long poll, not one wake-up per
            # node per second
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(news.wait(), left)

    async def WatchJobs(
        self, request: bootstrap_pb2.WatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.WatchJobsReply:
        """Whether there is news: held until the job version or the revocation list number
        differs from the caller's, or wait_ms is over (see bootstrap.proto). A process runs one
        watch for all the nodes it hosts, so idle nodes cost the bootstrap one call per process
        per wait, not one per node. The reply is the latest job's sequence number (which every
        node learns at registration) and the revocation list's number (GetRevocations gives the
        list to any caller): nothing about who takes part in which job."""
        await self._auth(context, ("node", "operator"), "WatchJobs")
        if request.wait_ms > LONG_POLL_MAX_MS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"wait_ms must be at most {LONG_POLL_MAX_MS}, got {request.wait_ms}",
            )
        loop = asyncio.get_running_loop()
        until = loop.time() + request.wait_ms / 1000.0
        while True:
            news = self._news  # before comparing: news after the comparison wakes us
            version, crl = self._version, self.revocations.number
            if (
                version != request.after_version
                or crl != request.crl_number
                or until - loop.time() <= 0
                or self._stopping
            ):
                return bootstrap_pb2.WatchJobsReply(version=version, crl_number=crl)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(news.wait(), until - loop.time())

    async def GetJob(
        self, request: bootstrap_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.GetJobReply:
        who = await self._auth(context, ("node", "operator"), "GetJob")
        job = await self._job_for(request.job_id, who, context)
        return bootstrap_pb2.GetJobReply(job=job, seq=self.store.job_seq(job.job_id))

    async def ReportResult(
        self, request: bootstrap_pb2.NodeResult, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.ReportResultReply:
        who = await self._auth(context, ("node",), "ReportResult")
        await self._job_for(request.job_id, who, context)
        if request.node_id != who.node_id:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{who.node_id} cannot report for {request.node_id}",
            )
        if request.HasField("output"):
            try:
                tensor_to_ndarray(request.output)
            except WireError as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"output: {e}")
        before = self.store.result(request.job_id, who.node_id)
        if (
            before is not None
            and before.state in ("done", "declined")
            and request.state == "failed"
        ):
            # A node never fails a job it finished; this one forgot it did (it came back with a
            # new ledger and stays out of the job): its first report stands.
            log.warning(
                "job %s: %s reports it failed (%s) after it reported it %s; the first "
                "report stands",
                request.job_id,
                who.node_id,
                request.detail[:200],
                before.state,
            )
            return bootstrap_pb2.ReportResultReply()
        if (
            before is not None
            and before.state in ("done", "declined")
            and request.state in ("done", "declined")
        ):
            # the same job reported finished again (a restarted node reports what its ledger
            # holds, in case its first report was lost): the first report stands
            log.info(
                "job %s: %s reported %s again; the first report (%s) stands",
                request.job_id,
                who.node_id,
                request.state,
                before.state,
            )
            return bootstrap_pb2.ReportResultReply()
        self.store.put_result(request)
        log.info("job %s: %s reported %s", request.job_id, who.node_id, request.state)
        return bootstrap_pb2.ReportResultReply()

    async def GetResult(
        self, request: bootstrap_pb2.GetResultRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.GetResultReply:
        who = await self._auth(context, ("node", "operator"), "GetResult")
        job = await self._job_for(request.job_id, who, context)
        # participants that came back with a new ledger after this job was submitted
        changes = self.store.ledger_changes(
            [p.node_id for p in job.participants], from_seq=self.store.job_seq(job.job_id)
        )
        return bootstrap_pb2.GetResultReply(
            job=job,
            results=self.store.results(request.job_id),
            warnings=[c.describe() for c in changes],
        )

    async def PublishRevocations(
        self, request: bootstrap_pb2.Revocations, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.Revocations:
        await self._auth(context, ("operator",), "PublishRevocations")
        try:
            self._accept_crl(request.crl_pem, "an operator")
        except SecurityError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return bootstrap_pb2.Revocations(crl_pem=self.revocations.pem)

    async def GetRevocations(
        self, request: bootstrap_pb2.GetRevocationsRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.Revocations:
        await self._auth(context, ("node", "operator", "bootstrap"), "GetRevocations")
        return bootstrap_pb2.Revocations(crl_pem=self.revocations.pem)

    # -- the jobs' public bulletins ------------------------------------------------------------
    async def Publish(
        self, request: bootstrap_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.PublishReply:
        """Store the caller's entry on a job's bulletin (see bootstrap.proto): the publisher is
        the identity of its certificate, a participant of the job."""
        who = await self._auth(context, ("node",), "Publish")
        if not request.job_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id is empty")
        await self._job_for(request.job_id, who, context)
        env = request.entry
        problem = ""
        if not request.HasField("entry"):
            problem = "entry is missing"
        elif env.job_id and env.job_id != request.job_id:
            problem = f"entry.job_id {env.job_id[:80]!r} is not job_id {request.job_id!r}"
        elif not _KIND.match(env.kind):
            problem = f"entry.kind {env.kind[:80]!r} is not a message kind"
        elif env.ByteSize() > BULLETIN_MAX_BYTES:
            problem = f"entry is {env.ByteSize()} bytes, more than {BULLETIN_MAX_BYTES}"
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        stored = peer_pb2.Envelope()
        stored.CopyFrom(env)
        stored.job_id = request.job_id
        stored.msg_id = 0
        try:
            digest = envelope_to_message(stored).digest()
        except WireError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"entry: {e}")
        was = self.store.publish(
            request.job_id, env.kind, who.node_id, digest, stored.SerializeToString()
        )
        if was == "other":
            log.warning(
                "job %s: refused a second, different %s from %s on the bulletin",
                request.job_id,
                env.kind,
                who.node_id,
            )
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{who.node_id} published another {env.kind} for job {request.job_id} already",
            )
        if was is None:
            ev = self._bulletin_news.pop((request.job_id, env.kind), None)
            if ev is not None:
                ev.set()
            log.debug("job %s: %s published its %s", request.job_id, who.node_id, env.kind)
        return bootstrap_pb2.PublishReply(duplicate=was == "same")

    async def ReadBulletin(
        self, request: bootstrap_pb2.ReadBulletinRequest, context: grpc.aio.ServicerContext
    ) -> bootstrap_pb2.ReadBulletinReply:
        """The entries of a job's bulletin after a position, long-polled (see bootstrap.proto)."""
        who = await self._auth(context, ("node", "operator"), "ReadBulletin")
        if not request.job_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id is empty")
        job = await self._job_for(request.job_id, who, context)
        if not _KIND.match(request.kind):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"kind {request.kind[:80]!r} is not a message kind",
            )
        loop = asyncio.get_running_loop()
        until = loop.time() + min(request.wait_ms, LONG_POLL_MAX_MS) / 1000.0
        n = len(job.participants)
        key = (request.job_id, request.kind)
        while True:
            # taken before reading the store: an entry added after the read wakes us
            news = self._bulletin_news.setdefault(key, asyncio.Event())
            rows, total = self.store.bulletin(
                request.job_id, request.kind, request.after, BULLETIN_BATCH
            )
            left = until - loop.time()
            if rows or total >= n or left <= 0 or self._stopping:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(news.wait(), left)
                # entries come in bursts (the participants finish together): take them together,
                # not one reply (and one call of every reader) per entry
                await asyncio.sleep(min(BULLETIN_COALESCE_S, max(0.0, until - loop.time())))
        reply = bootstrap_pb2.ReadBulletinReply()
        nxt = request.after
        size = 0
        for pos, node, body in rows:
            if reply.entries and size + len(body) > BULLETIN_REPLY_BYTES:
                break  # the rest in the next reply (under the 4 MiB message limit)
            reply.entries.add(node_id=node, entry=peer_pb2.Envelope.FromString(body))
            size += len(body)
            nxt = pos
        reply.next = max(nxt, request.after)
        reply.complete = total >= n and reply.next >= total
        return reply
