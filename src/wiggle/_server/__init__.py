"""The gRPC server: configuration, service, process lifecycle."""
