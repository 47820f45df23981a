"""The wire edge: everything that knows the protobuf messages and gRPC status codes.

``status`` maps ``wiggle.errors.ErrorCode`` to and from ``grpc.StatusCode``; ``payload`` decodes
the JSON fields of requests (object check, size and nesting limits); ``convert`` builds the
protobuf messages from engine state and turns replies into the client's value types. Server
(wiggle/_server/service.py) and client (wiggle/_client/) share these, so each conversion exists
once; the client's requests are built in wiggle/_client/messages.py.
"""
