"""What the clients return: snapshots of workflows, instances, tokens and history."""

from __future__ import annotations

from typing import Any

import msgspec

from .._engine.state import FINISHED_INSTANCE_STATUSES
from .._model import WorkflowDefinition

__all__ = ["TokenInfo", "InstanceInfo", "HistoryEntry", "WorkflowInfo", "QueueInfo", "QueueWorker"]


class TokenInfo(msgspec.Struct, frozen=True):
    """An active token: where an instance is, and who holds it."""

    token_id: str
    node_id: str
    status: str
    attempt: int
    queue: str
    lease_owner: str
    lease_expires_at: int
    available_at: int
    last_error: str
    local_run_owner: str  # a worker holds this token in a local run (LOCAL_SYNC / LOCAL_ASYNC)
    local_run_steps: int


class InstanceInfo(msgspec.Struct, frozen=True):
    """A snapshot of an instance."""

    instance_id: str
    workflow: str
    version: str
    status: str
    context: dict[str, Any]
    correlation_id: str
    reason: str
    error: str
    created_at: int
    updated_at: int
    finished_at: int
    tokens: tuple[TokenInfo, ...] = ()

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
    traceback: str = ""  # a failed attempt's traceback, as the worker sent it (bounded)


class WorkflowInfo(msgspec.Struct, frozen=True):
    """A registered workflow version."""

    name: str
    version: str
    definition: WorkflowDefinition
    registered_at: int
    created: bool = False


class QueueWorker(msgspec.Struct, frozen=True):
    """A worker polling a queue, as the answering server node saw it."""

    worker_id: str
    last_seen: int  # ms: its last poll on that node
    in_flight: int  # steps it holds on the queue


class QueueInfo(msgspec.Struct, frozen=True):
    """A queue right now: steps ready (due), delayed (retry backoff), leased; who polls it."""

    queue: str
    ready: int
    delayed: int
    oldest_ready_age_millis: int
    running: int
    in_local_run: int
    workers: tuple[QueueWorker, ...] = ()
