"""The wire's fast paths give what the general ones give: a small float64 tensor is checked for
NaN/inf without numpy, a message's digest hashes the payload bytes it keeps (the received bytes
themselves, or those computed once for its digest and reused for its encoding)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from netdp.v1 import common_pb2, peer_pb2
from netdp_node.protocols.base import Message
from netdp_node.wire import WireError, envelope_to_message, message_to_envelope, tensor_to_ndarray
from netdp_node.wire.convert import _SMALL


def reference_digest(m: Message) -> str:
    """The digest as defined: SHA-256 of the key, the sorted scalars, the shape and the bytes of
    np.ascontiguousarray(payload, '<f8') (computed here independently of Message)."""
    h = hashlib.sha256()
    h.update(repr(m.key()).encode())
    h.update(repr(sorted(m.scalars.items())).encode() if m.scalars else b"[]")
    if m.payload is not None:
        a = np.ascontiguousarray(m.payload, dtype="<f8")
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def wire_round_trip(m: Message) -> Message:
    env = peer_pb2.Envelope()
    env.ParseFromString(message_to_envelope("job-w", m).SerializeToString())
    return envelope_to_message(env)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (0,), (3, 0), (2, 2, 2), (100,)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.float16])
def test_digests_sent_and_received_are_the_defined_ones(shape: tuple, dtype: type) -> None:
    rng = np.random.default_rng(len(shape))
    base = (rng.normal(size=shape) * 10).astype(dtype)
    for payload in (base, base.T, np.asfortranarray(base)):
        sent = Message("v", payload=payload, scalars={"z": 1.0, "a": -2.0}, seq=3, round=2)
        expected = reference_digest(
            Message("v", payload=payload, scalars={"z": 1.0, "a": -2.0}, seq=3, round=2)
        )
        assert sent.digest() == expected
        got = wire_round_trip(sent)
        assert got.digest() == reference_digest(got) == expected
        assert not got.payload.flags.writeable
        np.testing.assert_array_equal(got.payload, np.asarray(payload, dtype=np.float64))


def test_a_received_float64_payload_keeps_the_bytes_it_views() -> None:
    got = wire_round_trip(Message("token", payload=np.array([0.25, -1.5]), walk="ring", seq=1))
    assert got.payload_bytes() == np.array([0.25, -1.5], dtype="<f8").tobytes()
    assert got.__dict__["_payload_bytes"] is got.payload.base  # no second copy


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "dtype,count",
    [("float64", 1), ("float64", _SMALL), ("float64", _SMALL + 1), ("float32", 3)],
    ids=["f8-one", "f8-small", "f8-large", "f4"],
)
def test_non_finite_values_are_refused_on_every_path(bad: float, dtype: str, count: int) -> None:
    values = np.zeros(count, dtype=dtype)
    values[count // 2] = bad
    t = common_pb2.Tensor(
        dtype=dtype, shape=[count], data=values.astype("<" + values.dtype.str[1:]).tobytes()
    )
    with pytest.raises(WireError, match="NaN or infinite"):
        tensor_to_ndarray(t)
    values[count // 2] = 1.0
    t.data = values.tobytes()
    np.testing.assert_array_equal(tensor_to_ndarray(t), values.astype(np.float64))


def test_a_big_endian_float64_payload_travels_as_the_native_one() -> None:
    native = np.array([0.25, -1.5, 3.0])
    swapped = native.astype(">f8")
    a = message_to_envelope("job-w", Message("v", payload=native, seq=1))
    b = message_to_envelope("job-w", Message("v", payload=swapped, seq=1))
    assert b.payload.dtype == "float64"
    assert b.SerializeToString() == a.SerializeToString()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_scalar_is_refused_and_finite_ones_arrive(bad: float) -> None:
    env = message_to_envelope("job-w", Message("v", scalars={"a": 1.5, "b": -2.0}, seq=1))
    assert envelope_to_message(env).scalars == {"a": 1.5, "b": -2.0}
    env.scalars["b"] = bad
    with pytest.raises(WireError, match="'b' is not finite"):
        envelope_to_message(env)
    assert envelope_to_message(message_to_envelope("job-w", Message("v", seq=1))).scalars == {}
