"""What a step is to its handler and to the logs: ``Step``, ``Step.current()``, its log fields and span
attributes, and the context of its own a handler runs in.

The one ``Step.current()`` contextvar lives here; wiggle/_worker/handlers.py calls the handlers in
the contexts made here.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import Any

import msgspec

from .._logging import add_field_source

__all__ = ["Step", "span_attributes_of", "log_fields_of", "step_context", "call_in_step"]

_current_step: contextvars.ContextVar[Step] = contextvars.ContextVar("wiggle_step")


class Step(msgspec.Struct, frozen=True):
    """What a running handler can know about its step: ``Step.current()`` inside a handler."""

    instance_id: str
    workflow: str
    version: str
    node_id: str
    attempt: int  # 1-based: failures of this step so far + 1
    task_id: str
    worker_id: str
    correlation_id: str
    execution_mode: str
    # the step's start-to-close limit in seconds (0: none; docs/semantics.md#step-time-limits)
    # and when this attempt started here (time.monotonic()): time_left() counts from it
    timeout: float = 0.0
    started: float = 0.0

    @staticmethod
    def current() -> Step:
        """The step being executed; LookupError outside a handler."""
        return _current_step.get()

    def time_left(self) -> float | None:
        """Seconds until this attempt's time limit (negative once past it); None without a limit.

        A handler with a long loop can check it and stop early: past the limit its result is
        refused anyway (a sync handler is abandoned, an async one cancelled)."""
        return self.timeout - (time.monotonic() - self.started) if self.timeout else None


def span_attributes_of(info: Step) -> dict[str, object]:
    """The attributes of a step's tracing span (wiggle/_tracing.py)."""
    return {
        "wiggle.instance_id": info.instance_id,
        "wiggle.workflow": info.workflow,
        "wiggle.node_id": info.node_id,
        "wiggle.attempt": info.attempt,
        "wiggle.worker_id": info.worker_id,
    }


def log_fields_of(info: Step) -> dict[str, object]:
    """The log-record fields of a step (docs: README "Operating Wiggle"; never its context)."""
    return {
        "instance_id": info.instance_id,
        "workflow": info.workflow,
        "node_id": info.node_id,
        "attempt": info.attempt,
        "worker_id": info.worker_id,
        "task_id": info.task_id,
    }


def _running_step_fields() -> dict[str, object] | None:
    """The log fields of the step running in this task or thread, for JSON records (wiggle/_logging.py)."""
    info = _current_step.get(None)
    return None if info is None else log_fields_of(info)


add_field_source(_running_step_fields)


def step_context(info: Step) -> contextvars.Context:
    """A context of the step ``info`` alone for its handler to run in: a copy of the caller's (the
    worker's own, the context its task was started in, with what the worker set around the step,
    such as its tracing span), ``Step.current()`` set in it. What the handler sets in its
    contextvars stays in it, so the next step, chained in the same task or run in the same
    thread, does not see it (docs/workflows.md#contextvars-in-handlers); before, a contextvar one
    step set was seen by the next one run in the same task (an outside trial)."""
    context = contextvars.copy_context()
    context.run(_current_step.set, info)
    return context


def call_in_step(info: Step, fn: Callable[..., Any], args: tuple[object, ...]) -> object:
    """``fn(*args)`` with ``info`` as ``Step.current()``, in the step's context (``timed_call`` in
    wiggle/_worker/handlers.py runs it in a fresh copy: ``step_context`` in one call)."""
    _current_step.set(info)
    return fn(*args)
