"""The Store protocol: what the server asks of a store, and the pieces every store shares.

A store keeps definitions, instances, tokens and history; it loads an instance under a lock,
runs one engine transition and persists the resulting ``Changes`` atomically (acknowledging
only after the commit). Waiting (long-poll, await-completion) goes through ``Notifier``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from .._engine.engine import AdvanceOutcome, Claimed, Engine, LoadedDefinition
from .._engine.state import Changes, HistoryEntry, Instance, InstanceState, Token
from .._model import WorkflowDefinition

__all__ = [
    "Store",
    "WorkflowRecord",
    "InstanceView",
    "InstanceQuery",
    "Notifier",
    "StoreStats",
    "ready_counts",
]


class WorkflowRecord(msgspec.Struct):
    """A registered definition version."""

    loaded: LoadedDefinition
    registered_at: int


class InstanceView(msgspec.Struct):
    """An instance and its active tokens, as returned to clients."""

    instance: Instance
    tokens: list[Token]


class InstanceQuery(msgspec.Struct):
    """Filters and paging for ListInstances (empty / 0 means no filter)."""

    workflow: str = ""
    status: str = ""
    correlation_id: str = ""
    created_after: int = 0
    created_before: int = 0
    page_size: int = 50
    page_token: str = ""  # the last instance id of the previous page


class StoreStats(msgspec.Struct):
    """Counters a store keeps for metrics and the benchmark (transactions committed)."""

    transactions: int = 0


class _WorkWaiter:
    """One long-poll waiting for work on some queues: its future is True once woken, False at the timeout."""

    __slots__ = ("future", "queues", "woken_for")

    def __init__(self, future: asyncio.Future[bool], queues: list[str]) -> None:
        self.future = future
        self.queues = queues
        self.woken_for: str | None = None  # the queue whose counted wake-up this waiter took


def ready_counts(changes: Changes) -> dict[str, int]:
    """How many tokens each queue of ``changes.ready_queues`` gained (at least 1 per queue named)."""
    counts = dict.fromkeys(changes.ready_queues, 0)
    for token in changes.tokens.values():
        if token.status == "READY" and token.queue in counts:
            counts[token.queue] += 1
    for queue, n in counts.items():
        if n == 0:
            counts[queue] = 1  # named but not found (merged away): one wake-up is harmless
    return counts


def _time_out(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class Notifier:
    """Wakes long-polling workers when a queue gains READY tokens, and waiters when instances finish.

    Work wake-ups are counted: a queue that gained ``n`` READY tokens wakes its ``n`` longest-waiting
    pollers (first in, first out), not all of them, so pollers don't stampede for one token and then
    re-query. A woken poller that finds nothing (another poller took the token first) just waits
    again. A woken waiter leaves every queue it waited on, so it is never counted twice; one that is
    cancelled after being picked hands its wake-up on to the next waiter of that queue.
    """

    def __init__(self) -> None:
        # queue -> its waiters in arrival order (a dict used as an ordered set)
        self._queue_waiters: dict[str, dict[_WorkWaiter, None]] = {}
        self._instance_waiters: dict[str, set[asyncio.Event]] = {}
        self._any_waiters: set[asyncio.Event] = set()

    def work_ready(self, queues: Iterable[str], counts: Mapping[str, int] | None = None) -> None:
        """Wake pollers of ``queues``: ``counts[queue]`` of them, oldest first, or all if the count is unknown.

        ``counts`` is how many tokens each queue just gained; a queue it does not name (or no
        ``counts`` at all, as for a notification from another node) wakes every waiter.
        """
        for queue in queues:
            waiters = self._queue_waiters.get(queue)
            if not waiters:
                continue
            n = None if counts is None else counts.get(queue)
            if n is None:
                for waiter in list(waiters):
                    self._wake(waiter, None)
                continue
            while n > 0 and waiters:
                waiter = next(iter(waiters))  # the oldest: a woken waiter leaves every queue
                if self._wake(waiter, queue):
                    n -= 1

    def _wake(self, waiter: _WorkWaiter, queue: str | None) -> bool:
        """Wake ``waiter`` (for a counted wake-up of ``queue``); False if it had already stopped waiting."""
        self._forget(waiter)
        if waiter.future.done():
            return False  # timed out or cancelled, its task not yet resumed: not a wake-up
        waiter.future.set_result(True)
        waiter.woken_for = queue
        return True

    def _forget(self, waiter: _WorkWaiter) -> None:
        for q in waiter.queues:
            waiters = self._queue_waiters.get(q)
            if waiters is not None:
                waiters.pop(waiter, None)
                if not waiters:
                    del self._queue_waiters[q]

    def clock_changed(self) -> None:
        """A timer or deadline was added: wake the clock duty so it can re-plan its sleep."""
        for event in self._any_waiters:
            event.set()

    def wake_all(self) -> None:
        """Wake every waiter (after a lost notification channel: they re-check for themselves)."""
        for waiters in list(self._queue_waiters.values()):
            for waiter in list(waiters):
                self._wake(waiter, None)
        for events in list(self._instance_waiters.values()):
            for event in events:
                event.set()
        self.clock_changed()

    def instance_finished(self, instance_id: str) -> None:
        """Wake whoever awaits ``instance_id``."""
        for event in self._instance_waiters.get(instance_id, ()):
            event.set()

    async def wait_work(self, queues: Iterable[str], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for work on ``queues``; True if woken."""
        if timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter = _WorkWaiter(loop.create_future(), list(dict.fromkeys(queues)))
        for q in waiter.queues:
            self._queue_waiters.setdefault(q, {})[waiter] = None
        timer = loop.call_later(timeout, _time_out, waiter.future)
        try:
            return await waiter.future
        except BaseException:
            # Cancelled after being picked for a counted wake-up: pass it on, or the work it
            # announced could sit unclaimed until some other poller's timeout.
            if waiter.woken_for is not None:
                self.work_ready((waiter.woken_for,), {waiter.woken_for: 1})
            raise
        finally:
            timer.cancel()
            self._forget(waiter)

    async def wait_clock(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, or until a new timer appears."""
        event = asyncio.Event()
        self._any_waiters.add(event)
        try:
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            pass
        finally:
            self._any_waiters.discard(event)

    async def wait_instance(self, instance_id: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for ``instance_id`` to finish."""
        event = asyncio.Event()
        self._instance_waiters.setdefault(instance_id, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            pass
        finally:
            waiters = self._instance_waiters.get(instance_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._instance_waiters[instance_id]


class Store(abc.ABC):
    """What the server needs from a store. Every mutation is atomic per instance."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.notifier = Notifier()
        self.stats = StoreStats()

    async def open(self) -> None:  # noqa: B027 (optional hook: the memory store needs none)
        """Connect, migrate, load caches."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections."""

    # definitions
    @abc.abstractmethod
    async def register(self, definition: WorkflowDefinition) -> tuple[WorkflowRecord, bool]:
        """Store a validated definition; (record, created). Re-registering is a no-op."""

    @abc.abstractmethod
    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        """A definition by name and version (latest if empty); NotFound naming what is missing."""

    @abc.abstractmethod
    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        """Every registered version (of ``name``), oldest first."""

    # instances
    @abc.abstractmethod
    async def start(
        self, name: str, version: str, context: dict[str, Any], correlation_id: str
    ) -> InstanceView:
        """Start an instance of ``name`` (latest version unless pinned)."""

    @abc.abstractmethod
    async def get_instance(self, instance_id: str) -> InstanceView:
        """An instance with its active tokens; NotFound if unknown."""

    @abc.abstractmethod
    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        """A page of instances, newest first, and the next page token ('' on the last page)."""

    @abc.abstractmethod
    async def history(self, instance_id: str) -> list[HistoryEntry]:
        """Every recorded step attempt and event of an instance, in order."""

    @abc.abstractmethod
    async def cancel(self, instance_id: str, reason: str) -> tuple[InstanceView, bool]:
        """Cancel; (view, changed). A finished instance is left alone (changed False)."""

    @abc.abstractmethod
    async def complete_user_task(self, instance_id: str, name: str, payload: dict[str, Any]) -> InstanceView:
        """Complete the user task ``name`` the instance awaits."""

    # workers
    @abc.abstractmethod
    async def claim(self, worker_id: str, queues: list[str], max_tasks: int) -> list[Claimed]:
        """Lease up to ``max_tasks`` due READY tokens on ``queues``, oldest first; never one token twice."""

    @abc.abstractmethod
    async def complete(
        self, token_id: str, owner: str, context: dict[str, Any] | None, predicate_value: bool | None
    ) -> str:
        """CompleteTask; returns the instance status."""

    @abc.abstractmethod
    async def fail(self, token_id: str, owner: str, message: str, retryable: bool) -> str:
        """FailTask; returns the instance status."""

    @abc.abstractmethod
    async def heartbeat(self, token_id: str, owner: str) -> tuple[str, int]:
        """Extend a lease; (instance status, new expiry)."""

    @abc.abstractmethod
    async def advance_run(
        self, token_id: str, owner: str, steps: list[tuple[Any, ...]], final: bool, reason: str
    ) -> AdvanceOutcome:
        """AdvanceRun (see Engine.advance_run)."""

    # clock duties
    @abc.abstractmethod
    async def run_clock_duties(self, now: int) -> int:
        """Fire due timers, expire leases, apply user-task deadlines; the number of actions taken."""

    @abc.abstractmethod
    async def next_due_at(self) -> int | None:
        """When the clock duty next has something to do (ms), or None if nothing is scheduled."""

    @abc.abstractmethod
    async def next_ready_at(self, queues: list[str]) -> int | None:
        """The earliest future ``available_at`` of a READY token on ``queues`` (a delayed retry)."""

    async def purge_finished(self, older_than: int, limit: int) -> int:
        """Delete up to ``limit`` instances finished before ``older_than`` (ms); how many went."""
        return 0

    @staticmethod
    def _view(state: InstanceState) -> InstanceView:
        """An instance and its active tokens, as returned to clients."""
        return InstanceView(state.instance, list(state.tokens.values()))
