"""Generated protobuf and gRPC stubs of sigx.actors.v1 (tools/gen_stubs.py)."""
