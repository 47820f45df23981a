"""Errors raised by Wiggle, each carrying a transport-free ``ErrorCode``.

The engine, the stores and the client raise these; only the wire edge
(wiggle/_wire/status.py) knows how a code travels as a gRPC status.
"""

from __future__ import annotations

import enum

__all__ = [
    "ErrorCode",
    "WiggleError",
    "InvalidArgument",
    "NotFound",
    "FailedPrecondition",
    "Unavailable",
    "ResourceExhausted",
    "PermissionDenied",
    "Unauthenticated",
    "AlreadyFinished",
    "ClientClosed",
    "WrongEventLoop",
    "PermanentError",
    "WorkflowFailed",
]


class ErrorCode(str, enum.Enum):
    """What went wrong, in the canonical vocabulary every RPC system shares.

    A ``str`` enum whose names equal their values; the names match gRPC's status codes one to
    one, which is what lets wiggle/_wire/status.py map them without a table to keep in step.
    """

    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"

    def __str__(self) -> str:
        return self.value


class WiggleError(Exception):
    """Base of every error the engine, server and client raise."""

    code: ErrorCode = ErrorCode.INTERNAL


class InvalidArgument(WiggleError, ValueError):
    """Malformed input: a bad id, JSON that is not an object, an oversize payload, a broken graph.

    Also a ``ValueError``, so validation errors are one family wherever they are raised.
    """

    code = ErrorCode.INVALID_ARGUMENT


class NotFound(WiggleError):
    """An unknown workflow, version, instance or token."""

    code = ErrorCode.NOT_FOUND


class FailedPrecondition(WiggleError):
    """The request is well formed but the state does not allow it (stale lease, wrong state...)."""

    code = ErrorCode.FAILED_PRECONDITION


class Unavailable(WiggleError):
    """The server or its database cannot serve now; retry with backoff.

    ``not_applied``: the server says nothing of the call was applied (its database was away
    before the call changed anything), so any call, even one that is not safe to repeat, may be
    made again, on this server or another (docs/failover.md#a-server-without-its-database).
    False when that is not known: the call may or may not have happened.
    """

    code = ErrorCode.UNAVAILABLE

    def __init__(self, message: str, *, not_applied: bool = False) -> None:
        super().__init__(message)
        self.not_applied = not_applied


class ResourceExhausted(WiggleError):
    """A limit of the server is reached (a bounded store is full, a quota is spent)."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class PermissionDenied(WiggleError):
    """The caller is known but its role does not allow this call."""

    code = ErrorCode.PERMISSION_DENIED


class Unauthenticated(WiggleError):
    """The caller did not prove who it is (no or an unknown credential)."""

    code = ErrorCode.UNAUTHENTICATED


class AlreadyFinished(FailedPrecondition):
    """A report about a token whose instance is no longer RUNNING."""

    def __init__(self, message: str, instance_status: str) -> None:
        super().__init__(message)
        self.instance_status = instance_status


class ClientClosed(WiggleError):
    """A call of a client that ``close()`` has closed: not sent (made after it, or still queued
    when it came), or cut off by it while in flight (it may or may not have been applied; a start
    with a ``request_id`` or a signal with a ``signal_id`` is safe to repeat, on a new client).
    The message says which."""

    code = ErrorCode.CANCELLED


class WrongEventLoop(WiggleError, RuntimeError):
    """An ``AsyncClient`` used on an event loop other than the one it serves: the loop of its
    first call (its gRPC channel is made there and works there only). Make one AsyncClient per
    event loop, or use the blocking ``Client``, which any thread may share. Also a
    ``RuntimeError``, as asyncio's own "attached to a different loop" is."""

    code = ErrorCode.FAILED_PRECONDITION


class PermanentError(Exception):
    """Raise from a step handler to fail the step without retrying it."""


class RetryableError(Exception):
    """Raise from a step handler for a failure you expect (a timeout, a busy service): the step
    is retried by its policy like after any exception, and the worker logs it in one line, with
    no traceback (the history keeps the traceback)."""


class WorkflowFailed(WiggleError):
    """Raised by ``Client.result`` when an instance ended FAILED or CANCELLED."""

    code = ErrorCode.FAILED_PRECONDITION
