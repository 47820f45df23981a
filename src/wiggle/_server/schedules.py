"""The schedule layer: create, update, pause, resume, delete, list and trigger schedules, and the
clock duty that fires their ticks (docs/semantics.md#schedules).

It sits beside the instance layer (wiggle/_server/instances.py, which owns it and runs
``run_duties`` among its clock duties on the clock leader only). Ticks are computed by
wiggle/_engine/schedules.py; a firing is committed by the store's ``ScheduleStore.fire``
(wiggle/_storage/schedules.py) as one atomic step that a changed schedule or an already-fired
tick refuses, so no tick ever starts two instances, even across a change of clock leader.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from .. import _tracing as tracing
from .._engine.engine import Engine
from .._engine.schedules import (
    Overlap,
    Schedule,
    TickPlan,
    check_schedule,
    next_tick,
    next_ticks,
    plan_ticks,
)
from .._engine.start_options import StartOptions
from .._engine.state import FINISHED_INSTANCE_STATUSES, InstanceState
from .._storage.base import Store
from .._storage.schedules import ScheduledStart
from ..errors import InvalidArgument, NotFound, Unavailable, WiggleError
from .operator import log_action, who
from .subflows import check_children_registered
from .timings import Timings

__all__ = ["Schedules", "SCHEDULE_BATCH", "NEXT_TICKS"]

log = logging.getLogger("wiggle.server")

SCHEDULE_BATCH = 100  # due schedules handled per clock-duty round
NEXT_TICKS = 3  # next fire times shown by get and list
CAS_ATTEMPTS = 5  # read-modify-write attempts before a concurrent writer wins
SPEC_FIELDS = (
    "workflow",
    "version",
    "interval_millis",
    "cron",
    "timezone",
    "context",
    "overlap",
    "catchup",
    "catchup_limit",
    "priority",
)

_copy = msgspec.json.Decoder(dict[str, Any]).decode
_encode = msgspec.json.Encoder().encode


def _logged(action: str, schedule: Schedule, actor: str = "") -> Schedule:
    """Log a schedule action by an operator (wiggle/_server/operator.py); ``schedule`` returned."""
    target = f"schedule {schedule.id}"
    log_action(who(actor), action, target, f"workflow {schedule.workflow}", workflow=schedule.workflow)
    return schedule


async def _no_admission(states: builtins.list[InstanceState]) -> None:
    """A Schedules without an instance layer (tests of the layer alone) admits nothing."""


def correlation_of(schedule_id: str) -> str:
    """The correlation id of every instance schedule ``schedule_id`` starts."""
    return f"schedule:{schedule_id}"


class Schedules:
    """Schedules over ``store``, starting instances with ``engine``."""

    def __init__(self, store: Store, engine: Engine, timings: Timings | None = None) -> None:
        self.store = store
        self.engine = engine
        self.timings = timings  # ticks and started instances for /metrics (wiggle/_server/timings.py)
        # the admissions of started instances of limited workflows (the instance layer sets it;
        # wiggle/_server/workflow_limits.py): they wait SCHEDULED until one
        self.admit: Callable[[builtins.list[InstanceState]], Awaitable[None]] = _no_admission

    # ------------------------------------------------------------------ operations

    async def _check(self, spec: Schedule) -> None:
        """Every check a new or updated spec passes before anything is written.

        The spec's context must start an instance of its workflow (the version it pins, or the
        latest one now): the checks of a start (wiggle/_server/instances.py ``_start``) are run,
        and the engine's start with them, whose result is dropped, nothing stored. A context a
        start refuses (a for_each list missing or too long, ...) is InvalidArgument naming the
        reason, where it would otherwise make every tick a skipped one.
        """
        check_schedule(spec)
        self.engine.check_context(spec.context, "context")
        record = await self.store.get_workflow(spec.workflow, spec.version)  # NotFound names it
        loaded = record.loaded
        await check_children_registered(loaded.definition, self.store.get_workflow)
        now = self.store.clock.now()
        try:
            self.engine.start(
                loaded,
                self.engine.new_instance_id(now),
                _copy(_encode(spec.context)),
                correlation_of(spec.id),
                now,
            )
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"schedule {spec.id!r}: its context cannot start an instance of workflow "
                f"{loaded.definition.name!r} version {loaded.version!r}: {exc}"
            ) from None

    async def create(self, spec: Schedule, actor: str = "") -> Schedule:
        """Store a new schedule from ``spec`` (its spec fields); the first tick is after now.

        ``actor`` (here and in every change below): who to name in the log line, if not the
        gRPC caller (wiggle/_server/operator.py ``who``)."""
        now = self.store.clock.now()
        schedule = Schedule(
            id=spec.id,
            **{f: getattr(spec, f) for f in SPEC_FIELDS},
            paused=spec.paused,
            anchor_at=now,
            created_at=now,
            updated_at=now,
            revision=1,
        )
        await self._check(schedule)
        schedule.next_tick_at = next_tick(schedule, now)
        await self.store.schedules.create(schedule)
        _logged("created", schedule, actor)
        return schedule

    async def get(self, schedule_id: str) -> Schedule:
        """A schedule by id."""
        return await self.store.schedules.get(schedule_id)

    async def list(self, workflow: str = "") -> builtins.list[Schedule]:
        """Every schedule (of ``workflow``), by id."""
        return await self.store.schedules.list(workflow)

    def upcoming(self, schedule: Schedule, count: int = NEXT_TICKS) -> builtins.list[int]:
        """The next ``count`` fire times (ms) of ``schedule``; none while paused."""
        if schedule.paused or schedule.next_tick_at <= 0:
            return []
        return [schedule.next_tick_at, *next_ticks(schedule, schedule.next_tick_at, count - 1)]

    async def _rewrite(self, schedule_id: str, change: Callable[[Schedule], Awaitable[None]]) -> Schedule:
        """Read, ``change`` (a function editing a copy in place), write back if unchanged since."""
        for _ in range(CAS_ATTEMPTS):
            current = await self.store.schedules.get(schedule_id)
            new = msgspec.structs.replace(
                current, revision=current.revision + 1, updated_at=self.store.clock.now()
            )
            await change(new)
            if await self.store.schedules.replace(new, current.revision):
                return new
        raise Unavailable(f"schedule {schedule_id!r} is being changed concurrently; try again")

    async def update(self, spec: Schedule, actor: str = "") -> Schedule:
        """Replace the spec of schedule ``spec.id`` (its progress is kept); ticks restart from now."""

        async def change(new: Schedule) -> None:
            for f in SPEC_FIELDS:
                setattr(new, f, getattr(spec, f))
            await self._check(new)
            now = new.updated_at
            new.anchor_at = now
            new.next_tick_at = next_tick(new, now)
            # a tick held back by BUFFER_ONE was the old spec's: it does not start the new one
            new.buffered_tick_at = 0

        return _logged("updated", await self._rewrite(spec.id, change), actor)

    async def pause(self, schedule_id: str, actor: str = "") -> Schedule:
        """Stop firing (ticks while paused are dropped); a no-op if paused."""

        async def change(new: Schedule) -> None:
            new.paused = True

        return _logged("paused", await self._rewrite(schedule_id, change), actor)

    async def resume(self, schedule_id: str, actor: str = "") -> Schedule:
        """Fire again from the next tick after now; a no-op if not paused."""

        async def change(new: Schedule) -> None:
            if new.paused:
                new.paused = False
                new.next_tick_at = next_tick(new, new.updated_at)
                new.buffered_tick_at = 0  # from before the pause: resuming starts from the next tick

        return _logged("resumed", await self._rewrite(schedule_id, change), actor)

    async def delete(self, schedule_id: str, actor: str = "") -> None:
        """Delete a schedule (the instances it started stay); NotFound if unknown."""
        if not await self.store.schedules.delete(schedule_id):
            raise NotFound(f"schedule {schedule_id!r} does not exist")
        log_action(who(actor), "deleted", f"schedule {schedule_id}")

    async def trigger(self, schedule_id: str, actor: str = "") -> tuple[Schedule, str]:
        """Start one instance now, whatever the overlap policy and even if paused; (schedule, id)."""
        for _ in range(CAS_ATTEMPTS):
            current = await self.store.schedules.get(schedule_id)
            now = self.store.clock.now()
            new = msgspec.structs.replace(current, revision=current.revision + 1, updated_at=now)
            start = await self._start(new, now, manual=True)
            start.manual = True
            if await self.store.schedules.fire(new, current.revision, [start]):
                self._started([start], new.workflow, "triggered")
                await self.admit([start.state])
                instance_id = start.state.instance.id
                log_action(
                    who(actor),
                    "triggered",
                    f"schedule {schedule_id}",
                    f"started instance {instance_id}",
                    workflow=new.workflow,
                    instance_id=instance_id,
                )
                return new, instance_id
        raise Unavailable(f"schedule {schedule_id!r} is being changed concurrently; try again")

    # ------------------------------------------------------------------ clock duty

    def _started(self, starts: builtins.list[ScheduledStart], workflow: str, outcome: str) -> None:
        """Count committed starts (wiggle/_server/timings.py): the ticks and the instances."""
        if self.timings is None or not starts:
            return
        self.timings.ticks(workflow, outcome, len(starts))
        for start in starts:
            self.timings.inserted(None, start.state, start.changes, "schedule")

    async def _start(self, schedule: Schedule, tick_at: int, manual: bool = False) -> ScheduledStart:
        """The engine's start of one tick's instance, recorded on ``schedule`` (not yet stored).

        Started at the wall-clock time, whatever moment the duty was asked to plan for: instance
        ids begin with their creation millisecond (the engine's ``new_instance_id``: its layer's clock's). With
        tracing on, the instance's trace starts at a ``wiggle.schedule.tick`` span (a trigger's:
        ``wiggle.schedule.trigger``, under the caller's trace), which its steps join.
        """
        record = await self.store.get_workflow(schedule.workflow, schedule.version)
        now = self.store.clock.now()
        instance_id = self.engine.new_instance_id(now)
        name = "wiggle.schedule.trigger" if manual else "wiggle.schedule.tick"
        attributes = {
            "wiggle.schedule_id": schedule.id,
            "wiggle.workflow": schedule.workflow,
            "wiggle.tick_at": tick_at,
            "wiggle.instance_id": instance_id,
        }
        parent = tracing.incoming() if manual else ""
        with tracing.span(name, tracing.INTERNAL, parent, attributes):
            traceparent = tracing.traceparent()
        state, changes = self.engine.start(
            record.loaded,
            instance_id,
            _copy(_encode(schedule.context)),
            correlation_of(schedule.id),
            now,
            options=StartOptions(priority=schedule.priority),
        )
        state.instance.traceparent = traceparent
        state.instance.schedule_id = schedule.id
        state.instance.schedule_tick_at = tick_at
        schedule.last_instance_id = state.instance.id
        schedule.last_tick_at = max(schedule.last_tick_at, tick_at)
        schedule.fired += 1
        return ScheduledStart(tick_at, state, changes)

    async def _running(self, instance_id: str) -> bool:
        if not instance_id:
            return False
        try:
            view = await self.store.get_instance(instance_id)
        except NotFound:  # purged: long finished
            return False
        return view.instance.status not in FINISHED_INSTANCE_STATUSES

    async def tick(self, schedule: Schedule, now: int) -> int:
        """Fire what is due of ``schedule`` at ``now``; the number of instances started.

        Overlap (docs/semantics.md#schedules) is applied tick by tick, oldest first: a buffered
        tick goes before the due ones, and an instance a tick starts is the running one for the
        next tick of the same round.
        """
        expected = schedule.revision
        due = 0 < schedule.next_tick_at <= now
        plan = plan_ticks(schedule, now) if due else TickPlan([], 0, schedule.next_tick_at)
        new = msgspec.structs.replace(
            schedule,
            next_tick_at=plan.next_tick_at,
            skipped=schedule.skipped + plan.dropped,
            buffered_tick_at=0,
            revision=expected + 1,
        )
        running = await self._running(schedule.last_instance_id)
        candidates = ([schedule.buffered_tick_at] if schedule.buffered_tick_at else []) + plan.fire
        starts: builtins.list[ScheduledStart] = []
        for tick_at in candidates:
            if running and schedule.overlap != Overlap.ALLOW:
                if schedule.overlap == Overlap.BUFFER_ONE and not new.buffered_tick_at:
                    new.buffered_tick_at = tick_at
                else:
                    new.skipped += 1
                continue
            try:
                start = await self._start(new, tick_at)
            except WiggleError as exc:  # e.g. the context no longer fits the engine's limits
                log.warning("schedule %s: tick %d not started: %s", schedule.id, tick_at, exc)
                new.skipped += 1
                continue
            starts.append(start)
            running = start.state.instance.status not in FINISHED_INSTANCE_STATUSES
        if not due and not starts and new.buffered_tick_at == schedule.buffered_tick_at:
            return 0  # a buffered tick still waiting: nothing to write
        new.updated_at = now
        if not await self.store.schedules.fire(new, expected, starts):
            return 0  # changed meanwhile (an update, another leader): looked at again next round
        self._started(starts, schedule.workflow, "fired")
        await self.admit([start.state for start in starts])
        if self.timings is not None:
            self.timings.ticks(schedule.workflow, "skipped", new.skipped - schedule.skipped)
            if new.buffered_tick_at and new.buffered_tick_at != schedule.buffered_tick_at:
                self.timings.ticks(schedule.workflow, "buffered")
        return len(starts)

    async def run_duties(self, now: int) -> int:
        """Fire the due ticks of every schedule (call on the clock leader only); instances started."""
        started = 0
        for schedule in await self.store.schedules.due(now, SCHEDULE_BATCH):
            try:
                started += await self.tick(schedule, now)
            except Unavailable:
                raise
            except Exception:
                log.exception("schedule %s: clock duty failed", schedule.id)
        return started

    async def next_due_at(self) -> int | None:
        """The earliest next tick of an unpaused schedule (ms), or None."""
        return await self.store.schedules.next_due_at()
