"""numpy <-> protobuf Tensor and engine Message <-> wire Envelope.

Tensors travel as raw little-endian bytes plus dtype and shape. Decoding validates everything a peer
could get wrong or forge: unknown dtype, shape that does not match the byte count, NaN/inf, too many
elements. Nothing from the network is ever unpickled.
"""

from __future__ import annotations

import math
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


def tensor_to_ndarray(t: common_pb2.Tensor, *, max_elements: int = 1 << 22) -> np.ndarray:
    """Decode and validate a Tensor. Returns a read-only float64 array."""
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
    dt = np.dtype(_ALLOWED_DTYPES[t.dtype])
    if len(t.data) != count * dt.itemsize:
        raise WireError(
            f"tensor bytes ({len(t.data)}) do not match dtype {t.dtype} and shape {shape} "
            f"({count * dt.itemsize} expected)"
        )
    arr = np.frombuffer(t.data, dtype=dt)  # read-only: a view of the received bytes
    if t.dtype != "float64":
        arr = arr.astype(np.float64)
    try:
        arr = arr.reshape(shape)
    except ValueError as e:  # not expected after the checks above; never an internal error
        raise WireError(f"tensor shape {shape} cannot be decoded: {e}") from None
    if not np.isfinite(arr).all():
        raise WireError("tensor contains NaN or infinite values")
    arr.setflags(write=False)
    return arr


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
        )
        if msg.payload is not None:
            template.payload.CopyFrom(ndarray_to_tensor(msg.payload))
        for k, v in msg.scalars.items():
            template.scalars[k] = float(v)
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
    for k, v in env.scalars.items():
        if not math.isfinite(v):
            raise WireError(f"scalar {k!r} is not finite")
    payload = tensor_to_ndarray(env.payload) if env.HasField("payload") else None
    return Message(
        kind=env.kind,
        payload=payload,
        walk=env.walk_id,
        epoch=env.epoch,
        seq=env.seq,
        round=env.round,
        scalars=dict(env.scalars),
    )
