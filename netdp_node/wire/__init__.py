"""Conversion between engine messages / numpy arrays and the generated protobuf types."""

from netdp_node.wire.convert import (
    WireError,
    envelope_to_message,
    message_to_envelope,
    ndarray_to_tensor,
    tensor_to_ndarray,
)

__all__ = [
    "WireError",
    "envelope_to_message",
    "message_to_envelope",
    "ndarray_to_tensor",
    "tensor_to_ndarray",
]
