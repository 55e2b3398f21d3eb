from netdp.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("job_id", "kind", "walk_id", "epoch", "seq", "round", "payload", "scalars", "msg_id")
    class ScalarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WALK_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SCALARS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kind: str
    walk_id: str
    epoch: int
    seq: int
    round: int
    payload: _common_pb2.Tensor
    scalars: _containers.ScalarMap[str, float]
    msg_id: int
    def __init__(self, job_id: _Optional[str] = ..., kind: _Optional[str] = ..., walk_id: _Optional[str] = ..., epoch: _Optional[int] = ..., seq: _Optional[int] = ..., round: _Optional[int] = ..., payload: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., scalars: _Optional[_Mapping[str, float]] = ..., msg_id: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("msg_id", "code", "detail", "duplicate")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    msg_id: int
    code: int
    detail: str
    duplicate: bool
    def __init__(self, msg_id: _Optional[int] = ..., code: _Optional[int] = ..., detail: _Optional[str] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("envelope", "ack")
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    envelope: Envelope
    ack: Ack
    def __init__(self, envelope: _Optional[_Union[Envelope, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "algorithm", "state", "progress", "expected", "detail", "contributed")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    state: str
    progress: int
    expected: int
    detail: str
    contributed: bool
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., state: _Optional[str] = ..., progress: _Optional[int] = ..., expected: _Optional[int] = ..., detail: _Optional[str] = ..., contributed: _Optional[bool] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("node_id", "jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    def __init__(self, node_id: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ...) -> None: ...
