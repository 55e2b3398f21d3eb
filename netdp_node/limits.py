"""Limits every layer agrees on (engines size their messages by them; gRPC enforces them)."""

#: Explicit maximum size of one gRPC message (both directions), in bytes.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
