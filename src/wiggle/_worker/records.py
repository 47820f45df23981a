"""AdvanceRun step records: the one function that builds them, and their encoding.

A record is one of the Structs of wiggle/_engine/records.py (TaskDone, PredicateDone,
StepFailed), which ``wiggle._fast.encode_batch`` encodes. Every record the local-run driver sends
is built by ``step_record``, or for a TASK's diff (every step of a linear run) by ``task_record``,
which builds the same record without the ``ContextDiff`` in between.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _fast
from .._engine.records import BatchRecord, PredicateDone, StepFailed, TaskDone
from .outcomes import Failure

__all__ = ["StepRecord", "ContextDiff", "StepResult", "step_record", "task_record", "encode_records"]

#: One executed step as the AdvanceRun batch carries it.
StepRecord = BatchRecord


class ContextDiff(NamedTuple):
    """A TASK's result as a shallow diff of the context: keys set to new values, keys removed."""

    changed: dict[str, Any]
    removed: list[str]


#: What a step did, as recorded: a TASK's diff, a PREDICATE's branch, or a failure.
StepResult = ContextDiff | bool | Failure


def step_record(node_id: str, result: StepResult) -> StepRecord:
    """The AdvanceRun record of ``node_id`` having produced ``result``."""
    if isinstance(result, Failure):
        return StepFailed(node_id, result.message, result.retryable)
    if isinstance(result, bool):
        return PredicateDone(node_id, result)
    return TaskDone(node_id, result.changed, result.removed)


def task_record(node_id: str, changed: dict[str, Any], removed: list[str]) -> StepRecord:
    """``step_record(node_id, ContextDiff(changed, removed))``, for the local run's hot path."""
    return TaskDone(node_id, changed, removed)


def encode_records(records: list[StepRecord]) -> bytes:
    """The ``steps_batch`` bytes of an AdvanceRunRequest."""
    return _fast.encode_batch(records)
