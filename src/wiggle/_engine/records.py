"""Step records: what a worker reports a step did, as AdvanceRun carries it to the engine.

A local run (docs/glossary.md#step-record, #local-run) is reported as an ordered list of these
records; ``Engine.advance_run`` takes them, ``wiggle._fast.decode_batch`` returns them and
``wiggle._fast.encode_batch`` takes them. This module imports nothing of Wiggle's, so the worker
and the ``_fast`` twins can use it without importing the engine.

Each record is a tagged, array-like msgspec Struct: it travels (``steps_batch``) as a compact
JSON array whose first element is its tag, e.g. ``["T", node_id, {changed}, [removed]]``; that is
the batch format the Python worker has always sent, so the wire bytes did not change.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "TaskDone",
    "PredicateDone",
    "StepFailed",
    "ContextSet",
    "StepRecord",
    "BatchRecord",
]


class TaskDone(msgspec.Struct, tag="T", array_like=True, forbid_unknown_fields=True, frozen=True):
    """A TASK finished; its result is the context it ran on with ``changed`` set and ``removed`` gone.

    The shallow diff (``wiggle._fast.diff``) keeps a long local run's batch small; an empty diff
    means the handler left the context as it was.
    """

    node_id: str
    changed: dict[str, Any]
    removed: list[str]


class PredicateDone(msgspec.Struct, tag="P", array_like=True, forbid_unknown_fields=True, frozen=True):
    """A PREDICATE finished and chose the branch ``value`` (True: ``next``, False: ``alt_next``)."""

    node_id: str
    value: bool


class StepFailed(msgspec.Struct, tag="F", array_like=True, forbid_unknown_fields=True, frozen=True):
    """A step raised: ``message`` describes the error; ``retryable`` False fails it for good.

    Only the last record of a run may be a failure (the run stops there).
    """

    node_id: str
    message: str
    retryable: bool


class ContextSet(msgspec.Struct, tag="C", array_like=True, forbid_unknown_fields=True, frozen=True):
    """A TASK finished with ``context`` as its complete result (the protobuf ``steps`` form).

    Not part of the ``steps_batch`` format: a batch reports tasks as diffs (TaskDone).
    """

    node_id: str
    context: dict[str, Any]


#: Any record ``Engine.advance_run`` accepts.
StepRecord = TaskDone | PredicateDone | StepFailed | ContextSet

#: The records a ``steps_batch`` may hold (a tagged union msgspec decodes straight into).
BatchRecord = TaskDone | PredicateDone | StepFailed
