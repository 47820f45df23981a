"""A step's outcome as a worker reports it: the new context (checked, encoded), a predicate's
branch, or a Failure with its message and traceback; and the mistakes of a handler that are its
step's outcome rather than the worker's end (docs/semantics.md#failure-tracebacks).

Both report paths use them: a SERVER-style step (server_step.py) and a local run (local_run.py);
handlers.py calls the handlers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import traceback
from typing import Any

import msgspec

from .._json_values import described, described_foreign, foreign, non_finite_in
from ..errors import PermanentError, RetryableError
from ..workflow import HandlerKind

__all__ = [
    "Context",
    "Failure",
    "Outcome",
    "StepTimedOut",
    "failure_of",
    "HANDLER_EXITS",
    "HandlerExited",
    "unstorable",
    "encoded_result",
    "outcome_of",
    "ContextMismatch",
]

#: A context as JSON carries it: what the server sends and what a report returns.
Context = dict[str, Any]


class Failure:
    """A step that failed: the message reported, whether the server may retry it, the traceback."""

    __slots__ = ("message", "retryable", "traceback", "expected")

    def __init__(self, message: str, retryable: bool, traceback: str = "", expected: bool = False) -> None:
        self.message = message
        self.retryable = retryable
        self.traceback = traceback  # the formatted traceback of a raising handler, else ""
        self.expected = expected  # a RetryableError: logged without its traceback

    def __repr__(self) -> str:
        return f"Failure({self.message!r}, retryable={self.retryable})"


#: What a step produced: a TASK's or COMBINE's new context (None: a TASK left it unchanged), a
#: PREDICATE's branch, or a Failure.
Outcome = Context | bool | None | Failure


class StepTimedOut(Exception):
    """A step ran past its deadline: its outcome is a retryable timeout failure."""


def failure_of(exc: BaseException) -> Failure:
    """The Failure a raising handler reports: retryable unless it raised PermanentError.

    It carries the formatted traceback (chained causes included), which the server stores in the
    history next to the message (docs/semantics.md#failure-tracebacks).
    """
    if isinstance(exc, HandlerExited):
        exc = exc.exited
    try:
        text = str(exc)
    except Exception as broken:  # noqa: BLE001 (the exception's own __str__ raised: say so, go on)
        text = f"<its str() raised {type(broken).__name__}>"
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, HANDLER_EXITS):
        message += " (raised by the handler: it fails the step; the worker goes on)"
    elif isinstance(exc, asyncio.CancelledError):  # only ever carried in a HandlerExited
        message += (
            " (raised by the handler without its step being cancelled: it fails the step like any "
            "other exception)"
        )
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _is_plumbing(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next  # start at the user's code: the worker's own frames are the same every time
    formatted = "".join(traceback.TracebackException(type(exc), exc, tb).format())
    return Failure(message, not isinstance(exc, PermanentError), formatted, isinstance(exc, RetryableError))


#: What a handler may raise besides an Exception that is still its step's outcome: ``sys.exit()``
#: and a KeyboardInterrupt raised in its code must not end the worker. asyncio's CancelledError is
#: not one of them: out of a cancelled step (a drain's cut, a time limit, a give-up) it ends the
#: worker's task as a cancellation. One the handler raises without its step being cancelled is
#: its outcome, as a HandlerExited too (wiggle/_worker/handlers.py ``_Watched``, ``timed_call``).
HANDLER_EXITS = (SystemExit, KeyboardInterrupt)


class HandlerExited(Exception):
    """A handler's SystemExit or KeyboardInterrupt, or a CancelledError it raised without being
    cancelled (``exited``), carried as an Exception: an ordinary failure of its step."""

    def __init__(self, exited: BaseException) -> None:
        super().__init__(str(exited))
        self.exited = exited


def unstorable(node_id: str, exc: Exception) -> Failure:
    """The non-retryable Failure of a step whose result cannot be encoded as JSON."""
    return Failure(
        f"step {node_id!r} returned a context that cannot be stored: {type(exc).__name__}: {exc} "
        "(a context holds JSON values: str, int, float, bool, None, lists, dicts with str keys; "
        "or msgspec Structs of them)",
        False,
    )


_encode_result = msgspec.json.Encoder().encode


def encoded_result(node_id: str, outcome: object) -> bytes | Failure:
    """A step's result as the JSON a report carries, or the non-retryable Failure of a result JSON
    cannot hold: a value of another type (``unstorable``), or a NaN or an infinity, which JSON
    would store as null (wiggle/_json_values.py); a retry would compute the same value."""
    try:
        encoded = _encode_result(outcome)
    except Exception as exc:  # noqa: BLE001 (a value JSON cannot hold: the step fails, named)
        return unstorable(node_id, exc)
    found = non_finite_in(encoded, outcome)
    if found is not None:
        what = described("the context", found)
        return Failure(f"step {node_id!r} returned a context that cannot be stored: {what}", False)
    return encoded


_WORKER_DIR = os.path.dirname(os.path.abspath(__file__))
_FUTURES_DIR = os.path.dirname(os.path.abspath(concurrent.futures.__file__))


def _is_plumbing(filename: str) -> bool:
    """A frame of the worker's handler-calling code or of the thread pool, not of the user's."""
    return filename.startswith((_WORKER_DIR, _FUTURES_DIR))


def outcome_of(
    kind: str,
    node_id: str,
    result: object,
    before: Context,
    expected: type[Any] = dict,
    workflow_type: type[Any] = dict,
) -> Outcome:
    """A handler's result as a context dict / bool, or a non-retryable Failure naming the problem.

    ``expected`` is the handler's context type (``handler_context_type``), ``workflow_type`` the
    blueprint's: a Struct of neither type is refused here, at the step that returned it, rather
    than stored as the context (docs/semantics.md#contexts).
    """
    if kind == HandlerKind.PREDICATE:
        if not isinstance(result, bool):
            return Failure(f"predicate {node_id!r} returned {type(result).__name__}, not bool", False)
        return result
    if result is None:
        base: Context = before.get("base", {})
        return None if kind == HandlerKind.TASK else base
    if isinstance(result, dict):
        found = foreign(result)
        if found is not None:  # it would be read back as another type (wiggle/_json_values.py)
            what = described_foreign("the context", found)
            return Failure(
                f"step {node_id!r} returned a context that cannot be stored as it is: {what}", False
            )
        return result
    if isinstance(result, msgspec.Struct):
        if expected is dict and workflow_type is not dict:
            expected = workflow_type
        if expected is not dict and not isinstance(result, (expected, workflow_type)):
            return Failure(
                f"step {node_id!r} returned {type(result).__name__}; the workflow's context type is "
                f"{expected.__name__}: return a {expected.__name__} (or None)",
                False,
            )
        converted: Context = msgspec.to_builtins(result)
        return converted
    return Failure(f"step {node_id!r} returned {type(result).__name__}; return the context (or None)", False)


class ContextMismatch(PermanentError):
    """The context does not fit the blueprint's context type: another attempt would meet the same
    context, so the step fails for good (the start's context, or an earlier step's result, put it
    there)."""
