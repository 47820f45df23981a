"""Generated gRPC and protobuf code (scripts/gen_protos.py); never edit by hand."""
