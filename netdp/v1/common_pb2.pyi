from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "registered_unix")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_UNIX_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    registered_unix: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., registered_unix: _Optional[int] = ...) -> None: ...

class Edge(_message.Message):
    __slots__ = ("src", "dst")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("topology_id", "version", "kind", "nodes", "edges", "params_json")
    TOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    topology_id: str
    version: int
    kind: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    params_json: str
    def __init__(self, topology_id: _Optional[str] = ..., version: _Optional[int] = ..., kind: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ..., params_json: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("job_id", "algorithm", "params_json", "public_seed", "participants", "topology", "created_unix")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_SEED_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    params_json: str
    public_seed: int
    participants: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    topology: Topology
    created_unix: int
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., params_json: _Optional[str] = ..., public_seed: _Optional[int] = ..., participants: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., created_unix: _Optional[int] = ...) -> None: ...
