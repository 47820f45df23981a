"""ErrorCode <-> grpc.StatusCode, in one place: server aborts, stream errors, client errors."""

from __future__ import annotations

import grpc

from ..errors import (
    ErrorCode,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    WiggleError,
)

__all__ = [
    "to_grpc",
    "from_grpc",
    "to_wire_number",
    "from_wire_number",
    "error_for",
    "error_from_rpc",
    "STOPPING",
    "NOT_APPLIED_KEY",
    "said_not_applied",
    "not_applied_metadata",
    "leaves_stream",
]

#: How a stopping server begins its UNAVAILABLE answer to a poll or a wait (wiggle/_server/
#: instances.py): ask again, elsewhere or later. A client seeing it knows its target is right.
STOPPING = "the server is stopping"

#: The trailing metadata key of an UNAVAILABLE answer to a unary call of which nothing was
#: applied (``Unavailable.not_applied``: the server's database was away before the call changed
#: anything); a stream's error says it in ``RpcError.not_applied`` (proto/wiggle/_rpc/wiggle.proto).
NOT_APPLIED_KEY = "wiggle-not-applied"

# The names of ErrorCode are gRPC's own (wiggle/errors.py), so the mapping is by name; a code
# added to one side only fails here at import, not at the first error.
_TO_GRPC: dict[ErrorCode, grpc.StatusCode] = {code: grpc.StatusCode[code.name] for code in ErrorCode}
_FROM_GRPC: dict[grpc.StatusCode, ErrorCode] = {v: k for k, v in _TO_GRPC.items()}
_FROM_NUMBER: dict[int, ErrorCode] = {v.value[0]: k for k, v in _TO_GRPC.items()}

# The error class a client raises for a code; others arrive as a plain WiggleError with the code.
_CLASS_OF: dict[ErrorCode, type[WiggleError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        FailedPrecondition,
        Unavailable,
        ResourceExhausted,
        PermissionDenied,
        Unauthenticated,
    )
}


def to_grpc(code: ErrorCode) -> grpc.StatusCode:
    """The gRPC status a code travels as."""
    return _TO_GRPC[code]


def from_grpc(status: grpc.StatusCode) -> ErrorCode:
    """The ErrorCode of a gRPC status (OK, which is no error, reads as UNKNOWN)."""
    return _FROM_GRPC.get(status, ErrorCode.UNKNOWN)


def to_wire_number(code: ErrorCode) -> int:
    """The numeric status carried in a WorkerSession ``RpcError`` (gRPC's own numbering)."""
    number: int = _TO_GRPC[code].value[0]
    return number


def from_wire_number(number: int) -> ErrorCode:
    """The ErrorCode of a numeric status from a WorkerSession ``RpcError``."""
    return _FROM_NUMBER.get(number, ErrorCode.UNKNOWN)


def said_not_applied(exc: BaseException) -> bool:
    """Whether ``exc`` is an Unavailable of which nothing was applied (``Unavailable.not_applied``)."""
    return isinstance(exc, Unavailable) and exc.not_applied


def not_applied_metadata(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """The trailing metadata a unary call failing with ``exc`` carries: NOT_APPLIED_KEY for an
    Unavailable of which nothing was applied, else none."""
    return ((NOT_APPLIED_KEY, "1"),) if said_not_applied(exc) else ()


def leaves_stream(message: str) -> bool:
    """Whether an UNAVAILABLE answer saying ``message`` ends the stream it came on (a worker's,
    a client's start stream), so that the next call opens one on the next server: every one but
    a stopping server's, which ends its streams itself once it has answered what it read."""
    return not message.startswith(STOPPING)


def error_for(code: ErrorCode, message: str, not_applied: bool = False) -> WiggleError:
    """The WiggleError a client raises for ``code`` with the server's ``message`` (``not_applied``:
    the server said nothing of the call was applied, an UNAVAILABLE's ``Unavailable.not_applied``)."""
    if code is ErrorCode.UNAVAILABLE:
        return Unavailable(message or code.name, not_applied=not_applied)
    err = _CLASS_OF.get(code, WiggleError)(message or code.name)
    err.code = code
    return err


def error_from_rpc(exc: grpc.RpcError) -> WiggleError:
    """Turn a gRPC error into the matching WiggleError (the message is the server's; an
    UNAVAILABLE's trailing NOT_APPLIED_KEY, or a stream error's ``not_applied``, carried over)."""
    code_of = getattr(exc, "code", None)
    details_of = getattr(exc, "details", None)
    code = from_grpc(code_of()) if callable(code_of) else ErrorCode.UNKNOWN
    details = details_of() if callable(details_of) else str(exc)
    not_applied = False
    if code is ErrorCode.UNAVAILABLE:
        not_applied = bool(getattr(exc, "not_applied", False))
        trailing_of = getattr(exc, "trailing_metadata", None)
        if not not_applied and callable(trailing_of):
            not_applied = any(key == NOT_APPLIED_KEY for key, _ in trailing_of() or ())
    return error_for(code, details or str(exc), not_applied)
