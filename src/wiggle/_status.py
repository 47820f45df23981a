"""The statuses users compare against: an instance's, a token's, a history entry's outcome.

Public as ``wiggle.InstanceStatus`` and ``wiggle.TokenStatus`` (the clients' InstanceInfo and
TokenInfo carry them); the engine's state (wiggle/_engine/state.py) uses the same enums. This
module imports nothing, so a client can use them without loading the engine.
"""

from __future__ import annotations

import enum

__all__ = [
    "InstanceStatus",
    "TokenStatus",
    "HistoryOutcome",
    "FINISHED_INSTANCE_STATUSES",
    "LIVE_INSTANCE_STATUSES",
]


class InstanceStatus(str, enum.Enum):
    """An instance's status: SCHEDULED until a delayed start's time (docs/flow-control.md), then
    RUNNING until it reaches one of the three final ones.

    A ``str`` enum whose names equal their values, so a member compares and hashes equal to the
    plain string a store or the wire carries ("RUNNING" == InstanceStatus.RUNNING).
    """

    SCHEDULED = "SCHEDULED"  # a delayed start, not begun yet (docs/flow-control.md#delayed-starts)
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value


FINISHED_INSTANCE_STATUSES = frozenset(
    {InstanceStatus.COMPLETED, InstanceStatus.FAILED, InstanceStatus.CANCELLED}
)
#: An instance that is not finished: a delayed start not begun yet, or a running one.
LIVE_INSTANCE_STATUSES = frozenset({InstanceStatus.SCHEDULED, InstanceStatus.RUNNING})


class TokenStatus(str, enum.Enum):
    """A token's status (docs/glossary.md): five active ones, then DONE, FAILED or CANCELLED."""

    READY = "READY"  # dispatchable (a delayed retry is READY with a future available_at)
    RUNNING = "RUNNING"  # leased to a worker (owner + expiry)
    WAITING = "WAITING"  # a SLEEP timer
    AWAITING = "AWAITING"  # a user task or a signal wait, optionally with a deadline
    JOINED = "JOINED"  # arrived at a join barrier
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value


class HistoryOutcome(str, enum.Enum):
    """How a history entry ended: a worker step's attempt, or a server-side move."""

    COMPLETED = "COMPLETED"  # a worker step (or a user task) finished
    RETRY = "RETRY"  # a worker step failed and will run again
    FAILED = "FAILED"  # a worker step failed for good
    END = "END"
    FORKED = "FORKED"
    JOINED = "JOINED"
    SLEPT = "SLEPT"
    TIMED_OUT = "TIMED_OUT"  # a user task's (or a signal wait's) deadline passed
    SIGNALLED = "SIGNALLED"  # a signal wait received its signal (docs/semantics.md#signal)
    RESUMED = "RESUMED"  # a FAILED instance was retried (docs/semantics.md#resuming-a-failed-instance)
    CHILD_STARTED = "CHILD_STARTED"  # a SUB_WORKFLOW node started its child instance
    #: a step taken back from its worker before it finished: READY, same attempt (its credential
    #: was revoked, or the worker's drain cut it: handback CUT)
    RELEASED = "RELEASED"
    #: a step's attempt still running on a worker when its instance finished (cancelled, failed at
    #: another step, or ended by another branch): it will not be applied, and does not run again
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value
