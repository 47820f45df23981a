"""Errors raised by Wiggle, each tied to the gRPC status code it travels as."""

from __future__ import annotations

import grpc

__all__ = [
    "WiggleError",
    "InvalidArgument",
    "NotFound",
    "FailedPrecondition",
    "Unavailable",
    "AlreadyFinished",
    "PermanentError",
    "WorkflowFailed",
    "error_from_rpc",
]


class WiggleError(Exception):
    """Base of every error the engine, server and client raise."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(WiggleError):
    """Malformed input: a bad id, JSON that is not an object, an oversize payload, a broken graph."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(WiggleError):
    """An unknown workflow, version, instance or token."""

    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(WiggleError):
    """The request is well formed but the state does not allow it (stale lease, wrong state...)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(WiggleError):
    """The server or its database cannot serve now; retry with backoff."""

    code = grpc.StatusCode.UNAVAILABLE


class AlreadyFinished(FailedPrecondition):
    """A report about a token whose instance is no longer RUNNING."""

    def __init__(self, message: str, instance_status: str) -> None:
        super().__init__(message)
        self.instance_status = instance_status


class PermanentError(Exception):
    """Raise from a step handler to fail the step without retrying it."""


class WorkflowFailed(WiggleError):
    """Raised by ``Client.result`` when an instance ended FAILED or CANCELLED."""

    code = grpc.StatusCode.FAILED_PRECONDITION


_BY_CODE: dict[grpc.StatusCode, type[WiggleError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def error_from_rpc(exc: grpc.RpcError) -> WiggleError:
    """Turn a gRPC error into the matching WiggleError (the message is the server's)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    cls = _BY_CODE.get(code, WiggleError)
    err = cls(details or str(code))
    err.code = code
    return err
