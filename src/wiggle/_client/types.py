"""What the clients return: snapshots of workflows, instances, tokens and history."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

import msgspec

from .._model import WorkflowDefinition
from .._status import FINISHED_INSTANCE_STATUSES, InstanceStatus, TokenStatus

__all__ = [
    "TokenInfo",
    "InstanceInfo",
    "HistoryEntry",
    "WorkflowInfo",
    "ScheduleInfo",
    "PendingSignalInfo",
    "SignalResult",
    "QueueInfo",
    "QueueWorker",
    "PassedOver",
    "StartOptions",
]


class TokenInfo(msgspec.Struct, frozen=True):
    """An active token: where an instance is, and who holds it."""

    token_id: str
    node_id: str
    status: TokenStatus  # a str enum: == "READY" holds too
    attempt: int
    queue: str
    lease_owner: str
    lease_expires_at: int
    available_at: int
    last_error: str
    local_run_owner: str  # a worker holds this token in a local run (LOCAL_SYNC / LOCAL_ASYNC)
    local_run_steps: int
    child_id: str = ""  # at a SUB_WORKFLOW node: the child instance it waits for


class PendingSignalInfo(msgspec.Struct, frozen=True):
    """A signal buffered on an instance: sent before any wait for it was reached, not yet consumed."""

    name: str
    data: dict[str, Any]
    signal_id: str
    sent_at: int


class InstanceInfo(msgspec.Struct, frozen=True):
    """A snapshot of an instance."""

    instance_id: str
    workflow: str
    version: str
    status: InstanceStatus  # a str enum: info.status is InstanceStatus.COMPLETED, == "COMPLETED" too
    context: dict[str, Any]
    correlation_id: str
    reason: str
    error: str
    created_at: int
    updated_at: int
    finished_at: int
    tokens: tuple[TokenInfo, ...] = ()
    schedule_id: str = ""  # the schedule whose tick started it ("" if none)
    schedule_tick_at: int = 0  # that tick's time (ms)
    pending_signals: tuple[PendingSignalInfo, ...] = ()  # buffered signals (docs/semantics.md#signal)
    parent_id: str = ""  # a sub-workflow's child: its parent instance ("" at the top level)
    parent_token_id: str = ""
    depth: int = 0
    # Start options (docs/flow-control.md): claim priority, a delayed start's time (ms, 0: none),
    # the deduplication key it holds and for how long (ms) after it finishes.
    priority: int = 0
    start_at: int = 0
    dedup_key: str = ""
    dedup_window_millis: int = 0
    # A workflow-level concurrency limit (docs/flow-control.md#workflow-concurrency): the key's
    # label it counts under ("" none) and the limit; while it waits SCHEDULED for a slot, since
    # when (ms, 0: not waiting) and why ("waiting for a concurrency slot of account_id=42 ...").
    concurrency_key: str = ""
    concurrency_max: int = 0
    concurrency_waiting_since: int = 0
    waiting_reason: str = ""
    #: On a start's answer: this start created nothing; the instance is the one holding its
    #: dedup_key (docs/flow-control.md#deduplication).
    deduplicated: bool = False

    @property
    def finished(self) -> bool:
        """True once COMPLETED, FAILED or CANCELLED."""
        return self.status in FINISHED_INSTANCE_STATUSES


class HistoryEntry(msgspec.Struct, frozen=True):
    """One step attempt or server event of an instance."""

    token_id: str
    node_id: str
    kind: str
    attempt: int
    worker_id: str
    started_at: int
    ended_at: int
    outcome: str
    error: str
    child_id: str = ""  # a SUB_WORKFLOW entry: the child instance
    traceback: str = ""  # a failed attempt's traceback, as the worker sent it (bounded)


class WorkflowInfo(msgspec.Struct, frozen=True):
    """A registered workflow version."""

    name: str
    version: str
    definition: WorkflowDefinition
    registered_at: int
    created: bool = False


class ScheduleInfo(msgspec.Struct, frozen=True):
    """A schedule (docs/semantics.md#schedules): its spec, its progress and its next fire times."""

    schedule_id: str
    workflow: str
    version: str
    interval_seconds: float | None  # None for a cron schedule
    cron: str
    timezone: str
    context: dict[str, Any]
    overlap: str  # SKIP | BUFFER_ONE | ALLOW
    catchup: str  # NONE | LAST | ALL
    catchup_limit: int
    paused: bool
    created_at: int
    updated_at: int
    next_tick_at: int
    last_tick_at: int
    last_instance_id: str
    buffered_tick_at: int
    fired: int
    skipped: int
    next_fire_times: tuple[int, ...] = ()
    priority: int = 0  # of every instance it starts (docs/flow-control.md#priorities)


class SignalResult(msgspec.Struct, frozen=True):
    """What ``signal`` did: ``outcome`` is DELIVERED (a wait took it), BUFFERED or DUPLICATE."""

    outcome: str
    instance: InstanceInfo

    @property
    def delivered(self) -> bool:
        """True if a waiting token took the signal now."""
        return self.outcome == "DELIVERED"


class PassedOver(msgspec.Struct, frozen=True):
    """A node a worker gave back for lack of a handler, which the answering server node passes
    over in that worker's claims until ``held_until`` (docs/semantics.md#mixed-fleets)."""

    workflow: str
    version: str
    node: str
    held_until: int  # ms, the server's clock


class QueueWorker(msgspec.Struct, frozen=True):
    """A worker polling a queue, as the answering server node saw it."""

    worker_id: str
    last_seen: int  # ms: its last poll on that node
    in_flight: int  # steps it holds on the queue
    passes_over: tuple[PassedOver, ...] = ()  # the nodes it has no handler for, passed over


class QueueInfo(msgspec.Struct, frozen=True):
    """A queue right now: steps ready (due), delayed (retry backoff), leased; who polls it."""

    queue: str
    ready: int
    delayed: int
    oldest_ready_age_millis: int
    running: int
    in_local_run: int
    workers: tuple[QueueWorker, ...] = ()
    #: concurrency limits (docs/flow-control.md#concurrency-limits): of ``running``, the attempts
    #: counted against a limit key; of ``ready``, the steps waiting for a slot of their key
    limit_held: int = 0
    limit_waiting: int = 0
    #: the queue's own limits (``Client.set_queue_limit``; 0: none), and until when (ms) its
    #: rate limit holds its due steps back (0: it does not now)
    max_running: int = 0
    rate_max: int = 0
    rate_period_millis: int = 0
    rate_limited_until: int = 0
    #: per-key rate limits of steps (docs/flow-control.md#per-key-rate-limits): of ``ready``, the
    #: steps waiting for their key's rate, and the first moment (ms) one of them may go (0: none)
    rate_waiting: int = 0
    rate_waiting_until: int = 0


class StartOptions(TypedDict, total=False):
    """A start's flow-control options (docs/flow-control.md), named as ``Client.start`` takes
    them; the test kit's ``start_workflow`` forwards them unchanged
    (tests/testkit/test_api_parity.py checks the names against the client's)."""

    priority: int
    start_at: datetime | None
    start_delay: timedelta | float | None
    dedup_key: str
    dedup_window: timedelta | float | None
    timeout: timedelta | float | None  # the instance's time limit (docs/semantics.md#workflow-time-limits)
