"""The instance layer: every operation on workflows and instances, over one store.

The service (wiggle/_server/service.py) speaks the wire; this layer speaks the domain: it owns the
engine, turns each operation into its transition, runs the long-poll and await-completion
waits, and the clock duties. A store only persists.
"""

from __future__ import annotations

import time
from typing import Any

from .._engine.engine import AdvanceOutcome, Claimed, Engine, EngineConfig
from .._engine.state import FINISHED_INSTANCE_STATUSES, HistoryEntry, now_millis
from .._model import WorkflowDefinition
from .._storage.base import InstanceQuery, InstanceView, Store, WorkflowRecord

__all__ = ["Instances", "MAX_WAIT_SECONDS"]

MAX_WAIT_SECONDS = 60.0  # the longest a poll or an await-completion may wait in one call


class Instances:
    """Workflows and instances over ``store``: register, start, read, report, wait."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine: Engine = store.engine

    @property
    def config(self) -> EngineConfig:
        """The engine settings (lease length, payload limit, default mode...)."""
        return self.engine.config

    # ------------------------------------------------------------------ definitions

    async def register(self, definition: WorkflowDefinition) -> tuple[WorkflowRecord, bool]:
        """Store a validated definition; (record, created). Re-registering is a no-op."""
        return await self.store.register(definition)

    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        """A definition by name and version (latest if empty)."""
        return await self.store.get_workflow(name, version)

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        """Every registered version (of ``name``)."""
        return await self.store.list_workflows(name)

    # ------------------------------------------------------------------ instances

    async def start(
        self, name: str, version: str, context: dict[str, Any], correlation_id: str
    ) -> InstanceView:
        """Start an instance of ``name`` (latest version unless pinned)."""
        return await self.store.start(name, version, context, correlation_id)

    async def get_instance(self, instance_id: str) -> InstanceView:
        """An instance with its active tokens."""
        return await self.store.get_instance(instance_id)

    async def wait_finished(self, instance_id: str, wait_seconds: float) -> InstanceView:
        """The instance once finished, or as it is after ``wait_seconds`` (capped at MAX_WAIT_SECONDS)."""
        view = await self.store.get_instance(instance_id)
        if wait_seconds <= 0 or view.instance.status in FINISHED_INSTANCE_STATUSES:
            return view
        deadline = time.monotonic() + min(wait_seconds, MAX_WAIT_SECONDS)
        while view.instance.status not in FINISHED_INSTANCE_STATUSES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # Bounded waits: a finish on another server node is seen within a second.
            await self.store.notifier.wait_instance(instance_id, min(remaining, 1.0))
            view = await self.store.get_instance(instance_id)
        return view

    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        """A page of instances, newest first, and the next page token."""
        return await self.store.list_instances(query)

    async def history(self, instance_id: str) -> list[HistoryEntry]:
        """Every recorded step attempt and event of an instance, in order."""
        return await self.store.history(instance_id)

    async def cancel(self, instance_id: str, reason: str) -> tuple[InstanceView, bool]:
        """Cancel; (view, changed)."""
        return await self.store.cancel(instance_id, reason)

    async def complete_user_task(self, instance_id: str, name: str, payload: dict[str, Any]) -> InstanceView:
        """Complete the user task ``name`` the instance awaits."""
        return await self.store.complete_user_task(instance_id, name, payload)

    # ------------------------------------------------------------------ workers

    async def poll(
        self, worker_id: str, queues: list[str], max_tasks: int, wait_seconds: float
    ) -> list[Claimed]:
        """Claim up to ``max_tasks`` steps on ``queues``, waiting up to ``wait_seconds`` for some."""
        deadline = time.monotonic() + min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS)
        while True:
            claimed = await self.store.claim(worker_id, queues, max_tasks)
            if claimed:
                return claimed
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            next_ready = await self.store.next_ready_at(queues)
            if next_ready is not None:
                remaining = min(remaining, max((next_ready - now_millis()) / 1000, 0.001))
            await self.store.notifier.wait_work(queues, remaining)

    async def complete(
        self, token_id: str, owner: str, context: dict[str, Any] | None, predicate_value: bool | None
    ) -> str:
        """CompleteTask; the instance status."""
        return await self.store.complete(token_id, owner, context, predicate_value)

    async def fail(self, token_id: str, owner: str, message: str, retryable: bool) -> str:
        """FailTask; the instance status."""
        return await self.store.fail(token_id, owner, message, retryable)

    async def heartbeat(self, token_id: str, owner: str) -> tuple[str, int]:
        """Extend a lease; (instance status, new expiry)."""
        return await self.store.heartbeat(token_id, owner)

    async def advance_run(
        self, token_id: str, owner: str, steps: list[tuple[Any, ...]], final: bool, reason: str
    ) -> AdvanceOutcome:
        """AdvanceRun: apply a local run's steps (see Engine.advance_run)."""
        return await self.store.advance_run(token_id, owner, steps, final, reason)
