"""Errors mapped once: any exception from a handler becomes one (ErrorCode, message) pair.

The unary entry points abort with it (wiggle/_server/service.py) and the WorkerSession stream
replies with it (wiggle/_server/session.py); wiggle/_wire/status.py turns the code into gRPC's.
"""

from __future__ import annotations

import logging
import uuid

from .._rpc import wiggle_pb2 as pb
from .._wire.status import said_not_applied, to_wire_number
from ..errors import ErrorCode, WiggleError

__all__ = ["status_of", "rpc_error"]

log = logging.getLogger("wiggle.server")


def status_of(exc: Exception, method: str) -> tuple[ErrorCode, str]:
    """The code and message a caller sees for ``exc`` raised in ``method``.

    A WiggleError travels as its own code and message. Anything else is a bug: it is logged with
    a short incident id, and the caller gets INTERNAL with that id and nothing of the internals.
    """
    if isinstance(exc, WiggleError):
        return exc.code, str(exc)
    incident = uuid.uuid4().hex[:12]
    log.error("internal error %s in %s", incident, method, exc_info=exc)
    return ErrorCode.INTERNAL, f"internal error (incident {incident}); see the server log"


def rpc_error(exc: Exception, method: str) -> pb.RpcError:
    """``exc`` as a WorkerSession / ClientSession reply's error, or a coalesced start's: its code
    and message (``status_of``), and whether nothing of it was applied (the caller may send it to
    another server: wiggle/_worker/stream.py)."""
    code, message = status_of(exc, method)
    return pb.RpcError(code=to_wire_number(code), message=message, not_applied=said_not_applied(exc))
