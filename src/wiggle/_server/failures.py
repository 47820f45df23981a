"""Failure tracebacks: bounded, then attached to the history entries of the failed attempt.

A worker sends the traceback of a failed step next to its message (``FailTaskRequest.traceback``,
``AdvanceRunRequest.failure_traceback``). The engine records the message; this module puts the
traceback on the RETRY / FAILED entry the same transition wrote, so the engine's transitions stay
unchanged and the traceback is stored in the same commit (docs/semantics.md#failure-tracebacks).

``log_final_failure`` writes the one log line of an instance that failed for good (after the
commit, from wiggle/_server/timings.py): workflow, instance, node and error (docs/metrics.md#logs).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._engine.records import StepFailed, StepRecord
from .._engine.state import Changes, HistoryEntry, HistoryOutcome, InstanceState
from .._limits import storable_text
from .caller_text import loggable

__all__ = ["MAX_TRACEBACK_CHARS", "bound_traceback", "attach_traceback", "failed_step", "log_final_failure"]

log = logging.getLogger("wiggle.server")

#: The most characters of one traceback kept in the history (head and tail of a longer one).
MAX_TRACEBACK_CHARS = 16_000
_HEAD = 4_000  # of a cut traceback: the first lines (the outermost frames)...

_FAILED_OUTCOMES = frozenset({HistoryOutcome.RETRY.value, HistoryOutcome.FAILED.value})
_FINAL_OUTCOMES = frozenset({HistoryOutcome.FAILED.value, HistoryOutcome.TIMED_OUT.value})
MAX_LOGGED_ERROR_CHARS = 500  # of the error in the log line (the history keeps it whole)


def bound_traceback(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a note of the cut.

    The tail is kept longer than the head: the innermost frames and the exception line are there.
    """
    text = storable_text(text, len(text))  # no NUL (wiggle/_limits.py)
    if len(text) <= limit:
        return text
    head = min(_HEAD, limit // 4)
    note = "\n... {} characters cut ...\n"
    tail = limit - head - len(note.format(len(text)))
    cut = len(text) - head - tail
    return text[:head] + note.format(cut) + text[len(text) - tail :]


def attach_traceback(changes: Changes, node_id: str | None, message: str | None, traceback: str) -> None:
    """Set ``traceback`` on the failed-attempt entries of ``changes`` (of ``node_id`` if given).

    ``message`` (if given) must match the entry's error: a failure the server made up itself (a
    result over the payload limit) is not the one the worker's traceback belongs to.
    """
    if not traceback:
        return
    bounded = bound_traceback(traceback)
    for entry in changes.history:
        if entry.outcome not in _FAILED_OUTCOMES:
            continue
        if node_id is not None and entry.node_id != node_id:
            continue
        if message is not None and not storable_text(message).startswith(entry.error):
            continue
        entry.traceback = bounded


def failed_step(steps: Sequence[StepRecord]) -> StepFailed | None:
    """The failure a local run's batch ends with, if any."""
    if steps and isinstance(steps[-1], StepFailed):
        return steps[-1]
    return None


def log_final_failure(state: InstanceState, history: Sequence[HistoryEntry]) -> None:
    """One WARNING line for an instance the committed transition failed for good.

    The node is the one whose entry of this transition failed (FAILED, or TIMED_OUT with an
    error); a failure without such an entry (a child that could not start, say) names none.
    """
    inst = state.instance
    node = ""
    for entry in reversed(history):
        if str(entry.outcome) in _FINAL_OUTCOMES and entry.error:
            node = entry.node_id
            break
    else:  # no step failed: an end(success=False), a join's conflict... the last node reached
        if history:
            node = history[-1].node_id
    # a worker's message (it may quote the step's input) or an operator's reason: one line, escaped
    error = loggable(inst.error or inst.reason, MAX_LOGGED_ERROR_CHARS)
    log.warning(
        "instance %s of workflow %s failed for good at node %s: %s",
        inst.id,
        inst.workflow,
        node or "(none)",
        error,
        extra={"instance_id": inst.id, "workflow": inst.workflow, "node_id": node, "error": error},
    )
