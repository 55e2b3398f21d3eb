"""Transports move engine messages between nodes: `memory` (in-process) and `grpc` (mTLS)."""
