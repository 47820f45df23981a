"""The instance layer: every operation on workflows and instances, over one store.

The service (wiggle/_server/service.py) speaks the wire; this layer speaks the domain: it owns the
engine and writes "load -> transition -> persist" once. Each operation becomes an engine
transition handed to one of the store's primitives (``Store.mutate``, ``Store.insert``,
``Store.claim``; wiggle/_storage/base.py), so a new operation or node kind touches the engine and
this module, not every store. It also runs the long-poll and await-completion waits; the clock
duties and the retention purge are its ``ClockDuties`` (wiggle/_server/clock_duties.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._clock import WALL_CLOCK, Clock
from .._engine.engine import Engine, EngineConfig, LoadedDefinition
from .._engine.start_options import NO_OPTIONS, StartOptions
from .._engine.state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryEntry,
    InstanceIds,
    InstanceState,
    new_instance_id,
)
from .._model import WorkflowDefinition
from .._storage.base import (
    Action,
    InstanceQuery,
    InstanceView,
    NewInstance,
    StaleLatest,
    Store,
    StoreStats,
    WorkflowRecord,
)
from .._storage.notifier import wait_event
from .._wire.status import STOPPING
from ..errors import InvalidArgument, Unavailable
from .clock_duties import CLOCK_BATCH, PURGE_EVERY_SECONDS, ClockDuties
from .delivery import MAX_WAIT_SECONDS, Delivery, release
from .operator import log_instance_action, record_action, who
from .schedules import Schedules
from .step_reports import StepReports
from .subflows import SubWorkflows, check_children_registered, may_need_follow_up, spawns_children
from .timings import Timings
from .workflow_limits import WorkflowLimits, needs_admission

__all__ = ["Instances", "MAX_WAIT_SECONDS", "CLOCK_BATCH"]

log = logging.getLogger("wiggle.server")
R = TypeVar("R")


def _instance_missing(instance_id: str) -> str:
    return f"instance {instance_id} does not exist"


class Instances(StepReports):
    """Workflows and instances over ``store``: register, start, read, wait, clock duties; the
    workers' claims and reports are its ``StepReports`` (wiggle/_server/step_reports.py)."""

    def __init__(self, store: Store, engine: Engine | None = None, clock: Clock | None = None) -> None:
        self.store = store
        self.engine: Engine = engine if engine is not None else Engine()
        if clock is not None:
            store.clock = clock  # one clock for the layer and its store (wiggle/_clock.py)
        # instance ids follow this layer's clock (state.py, InstanceIds), the engine's too (children
        # of sub-workflows, schedule ticks): a virtual clock's never drag the wall clock's ahead
        ids = new_instance_id if store.clock is WALL_CLOCK else InstanceIds()
        self.new_instance_id = self.engine.new_instance_id = ids
        self.subflows = SubWorkflows(self)
        self.duties = ClockDuties(self)  # timers, leases, deadlines, purge (clock_duties.py)
        self.limits = WorkflowLimits(self)  # workflow-level concurrency admissions (workflow_limits.py)
        self.timings = Timings()  # histograms and outcomes for /metrics (wiggle/_server/timings.py)
        self.schedules = Schedules(store, self.engine, self.timings)  # schedules and their clock duty
        self.schedules.admit = self.limits.after
        # claims, polls, and hand-offs to waiting polls (delivery.py); a step leased for a poll
        # that had ended is given back as a worker's release would be
        self.delivery = Delivery(
            store,
            self.engine,
            self.timings,
            lambda token_id, owner: self.fail(token_id, owner, "its poll had ended", True, release=True),
        )

    @property
    def closing(self) -> asyncio.Event:
        """Set when the server stops (``let_go``)."""
        return self.delivery.closing

    def let_go(self) -> None:
        """The server is stopping: every long poll and wait ends now, and none starts; each is
        answered UNAVAILABLE (``STOPPING``: wiggle/_server/worker_service.py for a poll,
        ``wait_finished`` for a wait), and its caller asks again, of another server or of this
        one once it is back (docs/operations.md#stopping-a-server)."""
        self.delivery.closing.set()
        self.store.notifier.wake_all()

    def now(self) -> int:
        """The current time in ms, as transitions see it (the layer's clock, wiggle/_clock.py)."""
        return self.clock.now()

    async def mutate(
        self, instance_id: str, missing: str, action: Action[R], reporter: str = ""
    ) -> tuple[R, InstanceState]:
        """``Store.mutate``, observed (latency, the transition's steps and outcome: /metrics), then
        the sub-workflow follow-ups of what it committed (a finished child wakes its parent; a
        cancelled waiting token cancels its child). ``reporter``: the worker whose report this
        is; a step the transition makes READY goes to a poll of that worker's first if one waits
        (``Delivery.hand_off``)."""
        timings = self.timings
        committed: Changes | None = None
        spawns = False
        delivery = self.delivery
        ran: LoadedDefinition | None = None

        def run(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[R, Changes | None]:
            nonlocal committed, spawns, ran
            if committed is not None and committed.handoffs:
                release(committed.handoffs)  # the store runs the action again: that run is void
            result, changes = action(loaded, state, now)
            committed = changes  # the last run's (a store may run the action again)
            if changes is not None:
                ran = loaded
                spawns = spawns_children(loaded)
                if changes.ready_queues and delivery.can_hand_off:
                    delivery.hand_off(loaded, state, changes, now, reporter)
            return result, changes

        started = time.perf_counter()
        try:
            result, state = await self.store.mutate(instance_id, missing, run)
        except BaseException:
            if committed is not None and committed.handoffs:
                release(committed.handoffs)  # (a commit that happens anyway gives them back)
            raise
        finally:
            timings.mutate_seconds.observe(time.perf_counter() - started)
        if committed is not None:  # counted once, as committed (timings.py; the log lines too)
            timings.committed(ran, state, committed)
        if committed is not None and may_need_follow_up(state, committed, spawns):
            await self.subflows.follow_up(state, committed)
        if committed is not None and needs_admission(state, committed):
            await self.limits.after((state,))  # a slot freed, or an instance now waits for one
        return result, state

    @property
    def clock(self) -> Clock:
        """Where workflow time comes from: the wall clock, unless a test kit injected another."""
        return self.store.clock

    @property
    def config(self) -> EngineConfig:
        """The engine settings (lease length, payload limit, default mode...)."""
        return self.engine.config

    @property
    def stats(self) -> StoreStats:
        """The store's counters (transactions committed)."""
        return self.store.stats

    # ------------------------------------------------------------------ definitions

    async def register(self, definition: WorkflowDefinition) -> tuple[WorkflowRecord, bool]:
        """Store a validated definition; (record, created). Re-registering is a no-op.

        FailedPrecondition if a SUB_WORKFLOW node names a workflow that is not registered.
        """
        await check_children_registered(definition, self.store.get_workflow)
        return await self.store.put_definition(LoadedDefinition(definition))

    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        """A definition by name and version (latest if empty)."""
        return await self.store.get_workflow(name, version)

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        """Every registered version (of ``name``)."""
        return await self.store.list_workflows(name)

    async def put_version_alias(self, workflow: str, alias: int, version: str) -> None:
        """Make the int32 ``alias`` (an upstream client's version number) name ``version``."""
        await self.store.put_version_alias(workflow, alias, version)

    async def version_aliases(self, workflow: str) -> dict[int, str]:
        """Every version alias of ``workflow``: {alias: version}."""
        return await self.store.version_aliases(workflow)

    # ------------------------------------------------------------------ instances

    async def start(
        self,
        name: str,
        version: str,
        context: dict[str, Any],
        correlation_id: str,
        request_id: str = "",
        traceparent: str = "",
        options: StartOptions = NO_OPTIONS,
    ) -> InstanceView:
        """Start an instance of ``name`` (latest version unless pinned); ``start_with``'s view."""
        view, _ = await self.start_with(
            name, version, context, correlation_id, request_id, traceparent, options
        )
        return view

    async def start_with(
        self,
        name: str,
        version: str,
        context: dict[str, Any],
        correlation_id: str,
        request_id: str = "",
        traceparent: str = "",
        options: StartOptions = NO_OPTIONS,
    ) -> tuple[InstanceView, bool]:
        """Start an instance of ``name`` (latest version unless pinned); (view, deduplicated).

        With a ``request_id`` already used, the instance that start created, as it is now
        (docs/semantics.md#idempotent-starts). ``traceparent``: the caller's trace (tracing).
        ``options`` (checked, wiggle/_engine/start_options.py): priority, a delayed start, a
        deduplication key; a key held by another instance answers with that one, deduplicated
        True (docs/flow-control.md).
        """

        def one(loaded: LoadedDefinition, hinted: bool) -> list[NewInstance]:
            now = self.clock.now()
            state, changes = self.engine.start(
                loaded, self.new_instance_id(now), context, correlation_id, now, options=options
            )
            state.instance.traceparent = traceparent
            return [NewInstance(state, changes, request_id, expect_latest=hinted)]

        _, (item,), (instance_id,) = await self._start(name, version, one)
        state = item.state
        if instance_id == state.instance.id:
            if state.instance.conc_key:  # admitted since (begun, cancelled, or still waiting)
                return await self.store.get_instance(instance_id), False
            return self.store.view(state), False
        return await self.store.get_instance(instance_id), item.deduplicated

    async def start_many(
        self,
        name: str,
        version: str,
        contexts: Sequence[dict[str, Any]],
        correlation_id: str,
        request_ids: Sequence[str] = (),
        options: StartOptions = NO_OPTIONS,
    ) -> tuple[str, list[str]]:
        """Start one instance of ``name`` per context; (the version, the ids in order).

        ``request_ids``, if given, has one (possibly empty) request id per context. ``options``
        (priority, a delayed start) apply to every instance; a deduplication key is per start,
        never given here.
        """
        start = self.engine.start
        new_id = self.new_instance_id

        def each(loaded: LoadedDefinition, hinted: bool) -> list[NewInstance]:
            items: list[NewInstance] = []
            for i, context in enumerate(contexts):
                now = self.clock.now()
                try:
                    state, changes = start(loaded, new_id(now), context, correlation_id, now, options=options)
                except InvalidArgument as exc:
                    raise InvalidArgument(f"context {i} of {len(contexts)}: {exc}") from None
                rid = request_ids[i] if request_ids else ""
                items.append(NewInstance(state, changes, rid, expect_latest=hinted))
            return items

        loaded, _, ids = await self._start(name, version, each)
        return loaded.version, ids

    async def _start(
        self, name: str, version: str, build: Callable[[LoadedDefinition, bool], list[NewInstance]]
    ) -> tuple[LoadedDefinition, list[NewInstance], list[str]]:
        """Build new instances of ``name``/``version`` (``build(loaded, from_remembered_latest)``)
        and store them: (the definition, the items, the id each item names). Started from the
        store's remembered latest version, they are built again from a fresh read should a newer
        version have been registered meanwhile (StaleLatest, docs/architecture.md)."""
        record, hinted = await self.store.workflow_for_start(name, version)
        while True:
            loaded = record.loaded
            await check_children_registered(loaded.definition, self.store.get_workflow)
            items = build(loaded, hinted)
            try:
                ids = await self.delivery.insert(items, loaded, self.clock.now())
            except StaleLatest:  # a newer version was registered: start from it (read, not remembered)
                record, hinted = await self.store.get_workflow(name, version), False
                continue
            created = []
            for item, instance_id in zip(items, ids, strict=True):
                if instance_id == item.state.instance.id:  # not a request id's earlier start
                    self.timings.inserted(loaded, item.state, item.changes, "client")
                    created.append(item.state)
            if loaded.definition.concurrency is not None:
                await self.limits.after(created)  # they wait for an admission (workflow_limits.py)
            return loaded, items, ids

    async def get_instance(self, instance_id: str) -> InstanceView:
        """An instance with its active tokens."""
        return await self.store.get_instance(instance_id)

    async def wait_finished(self, instance_id: str, wait_seconds: float) -> InstanceView:
        """The instance once finished, or as it is after ``wait_seconds`` (capped at MAX_WAIT_SECONDS)."""
        if wait_seconds <= 0:
            return await self.store.get_instance(instance_id)
        deadline = time.monotonic() + min(wait_seconds, MAX_WAIT_SECONDS)
        notifier = self.store.notifier
        while True:
            # Registered before the read: a finish announced in between still wakes this wait.
            with notifier.watch_instance(instance_id) as watch:
                view = await self.store.get_instance(instance_id)
                remaining = deadline - time.monotonic()
                if view.instance.status in FINISHED_INSTANCE_STATUSES or remaining <= 0:
                    return view
                if self.closing.is_set():
                    raise Unavailable(f"{STOPPING}; wait for instance {instance_id} again")
                # Bounded waits: a finish on another server node is seen within a second.
                with self.store.waiting_for("finished", ("",)):  # its NOTIFY wakes this one sooner
                    await wait_event(watch.event, min(remaining, 1.0))
                finished = watch.view
                if finished is not None and finished.instance.status in FINISHED_INSTANCE_STATUSES:
                    return finished  # as the finishing commit wrote it: no read needed

    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        """A page of instances, newest first, and the next page token."""
        return await self.store.list_instances(query)

    async def history(self, instance_id: str) -> list[HistoryEntry]:
        """Every recorded step attempt and event of an instance, in order."""
        return await self.store.history(instance_id)

    async def cancel(
        self, instance_id: str, reason: str, actor: str = "", *, by_operator: bool = True
    ) -> tuple[InstanceView, bool]:
        """Cancel; (view, changed). A finished instance is left alone (changed False).

        An operator's cancel is recorded in the history with the cancellation, naming ``actor``
        (else the gRPC caller, else anonymous: operator.py ``who``). ``by_operator`` False: the
        server's own cancel (a child whose parent stopped waiting), neither recorded nor logged.
        """
        operator = who(actor)  # here: the action may run in another task (the gRPC caller is ours)

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[bool, Changes | None]:
            changed, changes = self.engine.cancel(state, reason, now)
            if changed and by_operator:
                record_action(changes, state, operator, "CANCELLED", "", reason, now)
            return changed, changes if changed else None

        changed, state = await self.mutate(instance_id, _instance_missing(instance_id), action)
        if by_operator and not changed:  # a cancel that took effect is logged from its entry (operator.py)
            log_instance_action(actor, f"cancel refused: already {state.instance.status}", state, reason)
        return self.store.view(state), changed

    async def complete_user_task(
        self, instance_id: str, name: str, payload: dict[str, Any], actor: str = ""
    ) -> InstanceView:
        """Complete the user task ``name`` the instance awaits (``actor``: recorded in the history)."""

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
            changes = self.engine.complete_user_task(loaded, state, name, payload, now)
            if actor:
                record_action(changes, state, actor, "COMPLETED", name, "user task completed", now)
            return None, changes

        _, state = await self.mutate(instance_id, _instance_missing(instance_id), action)
        if not actor:  # with an actor, logged from its history entry (operator.py)
            log_instance_action("", f"completed user task {name}", state)
        return self.store.view(state)

    async def signal(
        self, instance_id: str, name: str, data: dict[str, Any], signal_id: str, sender: str
    ) -> tuple[str, InstanceView]:
        """Send the signal ``name`` (docs/semantics.md#signal); (DELIVERED / BUFFERED / DUPLICATE, view)."""

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[str, Changes | None]:
            return self.engine.signal(loaded, state, name, data, signal_id, sender, now)

        outcome, state = await self.mutate(instance_id, _instance_missing(instance_id), action)
        log_instance_action(sender, f"signal {name} {str(outcome).lower()}", state, signal_id)
        return outcome, self.store.view(state)

    async def retry(
        self, instance_id: str, from_node: str, context: dict[str, Any] | None, requested_by: str
    ) -> InstanceView:
        """Resume a FAILED instance (docs/semantics.md#resuming-a-failed-instance)."""

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
            return None, self.engine.retry(loaded, state, from_node, context, requested_by, now)

        _, state = await self.mutate(instance_id, _instance_missing(instance_id), action)
        where = f"from {from_node}" if from_node else "from where it failed"
        log_instance_action(requested_by, "retried", state, where)
        if state.instance.conc_key:  # admitted since: begun, or still waiting (workflow_limits.py)
            return await self.store.get_instance(instance_id)
        return self.store.view(state)

    # ------------------------------------------------------------------ clock duties

    async def run_clock_duties(self, now: int) -> int:
        """Fire due timers, expire leases, apply user-task deadlines; the number of actions taken
        (wiggle/_server/clock_duties.py)."""
        return await self.duties.run(now)

    async def next_due_at(self) -> int | None:
        """When the clock duty next has something to do (ms), or None."""
        return await self.store.next_due_at()

    async def next_ready_at(self, queues: list[str]) -> int | None:
        """The earliest future ``available_at`` of a READY token on ``queues``."""
        return await self.store.next_ready_at(queues)

    async def purge_finished(self, older_than: int, limit: int) -> int:
        """Delete up to ``limit`` instances finished before ``older_than`` (ms); how many went."""
        return await self.store.purge_finished(older_than, limit)

    async def clock_loop(self, stopping: asyncio.Event) -> None:
        """Run the clock duties until ``stopping`` is set, sleeping until the next due time."""
        await self.duties.loop(stopping)

    async def purge_loop(
        self, stopping: asyncio.Event, retention_seconds: float, every_seconds: float = PURGE_EVERY_SECONDS
    ) -> None:
        """Every ``every_seconds``, delete instances finished more than ``retention_seconds`` ago."""
        await self.duties.purge_loop(stopping, retention_seconds, every_seconds)
