"""Generated protobuf/gRPC code for the wire package `netdp.v1` (see proto/netdp/v1/).

Nothing here is written by hand: regenerate with `python scripts/gen_proto.py`. The runtime lives
in `netdp_node` (the participant and the shared core) and `netdp_bootstrap` (the bootstrap service).
"""
