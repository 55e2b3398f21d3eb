"""Generated code for proto package netdp.v1. DO NOT EDIT: run scripts/gen_proto.py."""
