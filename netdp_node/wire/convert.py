"""numpy <-> protobuf Tensor and engine Message <-> wire Envelope.

Tensors travel as raw little-endian bytes plus dtype and shape. Decoding validates everything a peer
could get wrong or forge: unknown dtype, shape that does not match the byte count, NaN/inf, too many
elements. Nothing from the network is ever unpickled.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

from netdp.v1 import common_pb2, peer_pb2
from netdp_node.lazy import lazy_module
from netdp_node.protocols.base import Message

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost

#: Most dimensions a received tensor may have (numpy's own limit is 64; engines use 1).
MAX_DIMENSIONS = 8

_ALLOWED_DTYPES = {"float64": "<f8", "float32": "<f4", "int64": "<i8"}
_ITEMSIZE = {"float64": 8, "float32": 4, "int64": 8}
#: A float64 tensor of at most this many elements is checked for NaN/inf element by element
#: (`math.isfinite` over the bytes) rather than by numpy: for the few values of a token this costs
#: a third of a ufunc call, most of whose cost, on a node that has just woken up, is fetching
#: numpy's machinery back into the CPU caches.
_SMALL = 64
_NATIVE_F8 = sys.byteorder == "little"  # memoryview's "d" is the machine's double


class WireError(ValueError):
    """A message could not be decoded; the text says why (sent back as INVALID_ARGUMENT)."""


def ndarray_to_tensor(arr: np.ndarray) -> common_pb2.Tensor:
    a = np.asarray(arr)
    name = a.dtype.name
    if name not in _ALLOWED_DTYPES:
        a = a.astype(np.float64)
        name = "float64"
    le = np.ascontiguousarray(a, dtype=_ALLOWED_DTYPES[name])
    return common_pb2.Tensor(dtype=name, shape=list(le.shape), data=le.tobytes())


def _payload_tensor(msg: Message) -> common_pb2.Tensor:
    """A message's payload as a Tensor; a float64 payload's bytes are the message's own
    (`Message.payload_bytes`, which its digest hashed already)."""
    payload = msg.payload
    assert payload is not None
    if payload.dtype.char == "d":  # float64 (`dtype.name` costs a Python call of numpy's)
        return common_pb2.Tensor(
            dtype="float64", shape=list(payload.shape), data=msg.payload_bytes()
        )
    return ndarray_to_tensor(payload)


def tensor_to_ndarray(t: common_pb2.Tensor, *, max_elements: int = 1 << 22) -> np.ndarray:
    """Decode and validate a Tensor. Returns a read-only float64 array."""
    return _decode(t, max_elements)[0]


def _decode(t: common_pb2.Tensor, max_elements: int = 1 << 22) -> tuple[np.ndarray, bytes]:
    """`tensor_to_ndarray`, and the tensor's bytes (the array is a view of them if float64)."""
    if t.dtype not in _ALLOWED_DTYPES:
        raise WireError(
            f"unsupported tensor dtype {t.dtype!r} (allowed: {sorted(_ALLOWED_DTYPES)})"
        )
    shape = tuple(t.shape)
    if len(shape) > MAX_DIMENSIONS:
        raise WireError(f"tensor has {len(shape)} dimensions, more than the limit {MAX_DIMENSIONS}")
    if any(s < 0 for s in shape):
        raise WireError(f"negative dimension in tensor shape {shape}")
    # every dimension counts, also in an empty tensor: [2^62, 2^62, 0] has no element but cannot
    # be allocated (numpy refuses a shape whose extent overflows)
    extent = math.prod(s for s in shape if s)
    if extent > max_elements:
        raise WireError(
            f"tensor shape {shape} spans {extent} elements, more than the limit {max_elements}"
        )
    count = math.prod(shape)
    data = t.data
    size = _ITEMSIZE[t.dtype]
    if len(data) != count * size:
        raise WireError(
            f"tensor bytes ({len(data)}) do not match dtype {t.dtype} and shape {shape} "
            f"({count * size} expected)"
        )
    if t.dtype == "float64" and count <= _SMALL and _NATIVE_F8:
        if not all(map(math.isfinite, memoryview(data).cast("d"))):
            raise WireError("tensor contains NaN or infinite values")
        checked = True
    else:
        checked = False
    arr = np.frombuffer(data, dtype=_ALLOWED_DTYPES[t.dtype])  # read-only: a view of the bytes
    if t.dtype != "float64":
        arr = arr.astype(np.float64)
        arr.setflags(write=False)
    if arr.shape != shape:
        try:
            arr = arr.reshape(shape)  # (a view: read-only as its base)
        except ValueError as e:  # not expected after the checks above; never an internal error
            raise WireError(f"tensor shape {shape} cannot be decoded: {e}") from None
    if not checked and not np.isfinite(arr).all():
        raise WireError("tensor contains NaN or infinite values")
    return arr, data


def message_to_envelope(job_id: str, msg: Message, msg_id: int = 0) -> peer_pb2.Envelope:
    """A new Envelope for `msg` (the caller may set its msg_id). The encoding of a message is
    computed once per (message, job) and copied for every further send (one value message goes
    to every neighbour of a round)."""
    cached = msg.__dict__.get("_envelope")
    if cached is None or cached[0] != job_id:
        template = peer_pb2.Envelope(
            job_id=job_id,
            kind=msg.kind,
            walk_id=msg.walk,
            epoch=msg.epoch,
            seq=msg.seq,
            round=msg.round,
            payload=None if msg.payload is None else _payload_tensor(msg),
            scalars={k: float(v) for k, v in msg.scalars.items()} if msg.scalars else None,
        )
        cached = (job_id, template)
        object.__setattr__(msg, "_envelope", cached)  # a Message is immutable: a pure cache
    env = peer_pb2.Envelope()
    env.CopyFrom(cached[1])
    if msg_id:
        env.msg_id = msg_id
    return env


def envelope_to_message(env: peer_pb2.Envelope) -> Message:
    if not env.kind:
        raise WireError("envelope has no kind")
    scalars: dict[str, float] = {}
    if len(env.scalars):  # (most messages have none: iterating an empty map costs as much)
        scalars = dict(env.scalars)
        for k, v in scalars.items():
            if not math.isfinite(v):
                raise WireError(f"scalar {k!r} is not finite")
    payload, data = _decode(env.payload) if env.HasField("payload") else (None, b"")
    msg = Message(
        kind=env.kind,
        payload=payload,
        walk=env.walk_id,
        epoch=env.epoch,
        seq=env.seq,
        round=env.round,
        scalars=scalars,
    )
    if payload is not None and env.payload.dtype == "float64":
        # the bytes the payload is a view of: its digest hashes them without numpy
        object.__setattr__(msg, "_payload_bytes", data)
    return msg
