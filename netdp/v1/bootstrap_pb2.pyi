from netdp.v1 import common_pb2 as _common_pb2
from netdp.v1 import peer_pb2 as _peer_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterRequest(_message.Message):
    __slots__ = ("node_id", "address", "ledger_id", "ledger_created_unix")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LEDGER_CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    ledger_id: str
    ledger_created_unix: float
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., ledger_id: _Optional[str] = ..., ledger_created_unix: _Optional[float] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("node", "job_seq", "store_id")
    NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_SEQ_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.NodeInfo
    job_seq: int
    store_id: str
    def __init__(self, node: _Optional[_Union[_common_pb2.NodeInfo, _Mapping]] = ..., job_seq: _Optional[int] = ..., store_id: _Optional[str] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_common_pb2.NodeInfo, _Mapping]]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("algorithm", "params_json", "participants", "topology_kind", "topology_params_json", "public_seed", "job_id")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_KIND_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_SEED_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    params_json: str
    participants: _containers.RepeatedScalarFieldContainer[str]
    topology_kind: str
    topology_params_json: str
    public_seed: int
    job_id: str
    def __init__(self, algorithm: _Optional[str] = ..., params_json: _Optional[str] = ..., participants: _Optional[_Iterable[str]] = ..., topology_kind: _Optional[str] = ..., topology_params_json: _Optional[str] = ..., public_seed: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class SubmitJobReply(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.JobSpec
    def __init__(self, job: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("after", "wait_ms", "crl_number")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    CRL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    after: int
    wait_ms: int
    crl_number: int
    def __init__(self, after: _Optional[int] = ..., wait_ms: _Optional[int] = ..., crl_number: _Optional[int] = ...) -> None: ...

class ListJobsReply(_message.Message):
    __slots__ = ("jobs", "seqs")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobSpec]
    seqs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.JobSpec, _Mapping]]] = ..., seqs: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("after_version", "crl_number", "wait_ms")
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    CRL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    after_version: int
    crl_number: int
    wait_ms: int
    def __init__(self, after_version: _Optional[int] = ..., crl_number: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class WatchJobsReply(_message.Message):
    __slots__ = ("version", "crl_number")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CRL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    version: int
    crl_number: int
    def __init__(self, version: _Optional[int] = ..., crl_number: _Optional[int] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobReply(_message.Message):
    __slots__ = ("job", "seq")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.JobSpec
    seq: int
    def __init__(self, job: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., seq: _Optional[int] = ...) -> None: ...

class NodeResult(_message.Message):
    __slots__ = ("job_id", "node_id", "state", "output", "contributed", "contributions", "detail", "reported_unix", "seeded_rng")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTIONS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    REPORTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    SEEDED_RNG_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_id: str
    state: str
    output: _common_pb2.Tensor
    contributed: bool
    contributions: int
    detail: str
    reported_unix: int
    seeded_rng: bool
    def __init__(self, job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., state: _Optional[str] = ..., output: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., contributed: _Optional[bool] = ..., contributions: _Optional[int] = ..., detail: _Optional[str] = ..., reported_unix: _Optional[int] = ..., seeded_rng: _Optional[bool] = ...) -> None: ...

class ReportResultReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetResultRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetResultReply(_message.Message):
    __slots__ = ("job", "results", "warnings")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.JobSpec
    results: _containers.RepeatedCompositeFieldContainer[NodeResult]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., results: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Revocations(_message.Message):
    __slots__ = ("crl_pem",)
    CRL_PEM_FIELD_NUMBER: _ClassVar[int]
    crl_pem: bytes
    def __init__(self, crl_pem: _Optional[bytes] = ...) -> None: ...

class GetRevocationsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("job_id", "entry")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    entry: _peer_pb2.Envelope
    def __init__(self, job_id: _Optional[str] = ..., entry: _Optional[_Union[_peer_pb2.Envelope, _Mapping]] = ...) -> None: ...

class PublishReply(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    def __init__(self, duplicate: _Optional[bool] = ...) -> None: ...

class ReadBulletinRequest(_message.Message):
    __slots__ = ("job_id", "kind", "after", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kind: str
    after: int
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., kind: _Optional[str] = ..., after: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class BulletinEntry(_message.Message):
    __slots__ = ("node_id", "entry")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    entry: _peer_pb2.Envelope
    def __init__(self, node_id: _Optional[str] = ..., entry: _Optional[_Union[_peer_pb2.Envelope, _Mapping]] = ...) -> None: ...

class ReadBulletinReply(_message.Message):
    __slots__ = ("entries", "next", "complete")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[BulletinEntry]
    next: int
    complete: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[BulletinEntry, _Mapping]]] = ..., next: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...
