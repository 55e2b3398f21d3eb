"""Limits every layer agrees on (engines size their messages by them; gRPC enforces them)."""

#: Explicit maximum size of one gRPC message (both directions), in bytes.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Bytes of a message kept for everything but its payload (ids, kind, counters, scalars, detail).
ENVELOPE_ALLOWANCE = 64 * 1024
