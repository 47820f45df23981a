"""Schedule persistence: the primitives every store offers for schedules, and the in-memory one.

The instance layer (wiggle/_server/schedules.py) decides; a schedule store keeps schedules and
commits a firing atomically: the schedule's new state, one tick row per started instance and the
instances themselves, in one step, refused as a whole when the schedule changed since it was read
(its ``revision``) or when a tick already started an instance (docs/semantics.md#schedules).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Awaitable, Callable

import msgspec

from .._engine.schedules import Schedule
from .._engine.state import Changes, InstanceState
from ..errors import FailedPrecondition, NotFound

__all__ = [
    "ScheduleStore",
    "ScheduledStart",
    "MemorySchedules",
    "InsertFn",
    "schedule_missing",
    "schedule_exists",
]

#: The memory store's ``insert`` (persist a started instance).
InsertFn = Callable[[InstanceState, Changes], Awaitable[None]]


def schedule_missing(schedule_id: str) -> NotFound:
    """The NotFound for an unknown schedule id."""
    return NotFound(f"schedule {schedule_id!r} does not exist")


def schedule_exists(schedule_id: str) -> FailedPrecondition:
    """The error for creating a schedule whose id is taken."""
    return FailedPrecondition(
        f"schedule {schedule_id!r} already exists; update it, or delete it first to replace it"
    )


class ScheduledStart(msgspec.Struct):
    """An instance a tick (or a trigger) starts: the tick time and the engine's start."""

    tick_at: int
    state: InstanceState
    changes: Changes
    manual: bool = False  # a trigger: not a tick, so no tick row (it must not take a tick's key)


class ScheduleStore(abc.ABC):
    """Schedules of one store. Writes are compare-and-set on ``Schedule.revision``."""

    @abc.abstractmethod
    async def create(self, schedule: Schedule) -> None:
        """Store a new schedule; FailedPrecondition if its id is taken."""

    @abc.abstractmethod
    async def get(self, schedule_id: str) -> Schedule:
        """A schedule by id; NotFound if unknown."""

    @abc.abstractmethod
    async def list(self, workflow: str = "") -> builtins.list[Schedule]:
        """Every schedule (of ``workflow``), by id."""

    @abc.abstractmethod
    async def replace(self, schedule: Schedule, expected_revision: int) -> bool:
        """Write ``schedule`` if the stored one is still at ``expected_revision``; False if not."""

    @abc.abstractmethod
    async def delete(self, schedule_id: str) -> bool:
        """Delete a schedule and its tick rows; False if it did not exist."""

    @abc.abstractmethod
    async def due(self, now: int, limit: int) -> builtins.list[Schedule]:
        """Unpaused schedules with a tick due at ``now`` or a buffered tick waiting."""

    @abc.abstractmethod
    async def next_due_at(self) -> int | None:
        """The earliest next tick of an unpaused schedule, or None."""

    @abc.abstractmethod
    async def purge_ticks(self, older_than: int) -> int:
        """Forget tick rows of ticks before ``older_than`` (ms); how many went.

        Safe at any age: a firing also needs the schedule's current revision, which a tick
        already handled no longer has; the rows are the second guard, for recent ticks.
        """

    @abc.abstractmethod
    async def fire(
        self, schedule: Schedule, expected_revision: int, starts: builtins.list[ScheduledStart]
    ) -> bool:
        """Commit ``schedule`` (compare-and-set) with its tick rows and started instances, at once.

        False, with nothing written, if the schedule changed meanwhile or one of the ticks already
        started an instance (another clock leader got there first).
        """


class MemorySchedules(ScheduleStore):
    """Schedules in a dict. Nothing here awaits between a check and its write: each call is atomic."""

    def __init__(self, insert: InsertFn) -> None:
        self._insert = insert
        self._schedules: dict[str, Schedule] = {}
        self._ticks: set[tuple[str, int]] = set()

    async def create(self, schedule: Schedule) -> None:
        if schedule.id in self._schedules:
            raise schedule_exists(schedule.id)
        self._schedules[schedule.id] = msgspec.structs.replace(schedule)

    async def get(self, schedule_id: str) -> Schedule:
        found = self._schedules.get(schedule_id)
        if found is None:
            raise schedule_missing(schedule_id)
        return msgspec.structs.replace(found)

    async def list(self, workflow: str = "") -> builtins.list[Schedule]:
        return [
            msgspec.structs.replace(s)
            for _, s in sorted(self._schedules.items())
            if not workflow or s.workflow == workflow
        ]

    async def replace(self, schedule: Schedule, expected_revision: int) -> bool:
        current = self._schedules.get(schedule.id)
        if current is None or current.revision != expected_revision:
            return False
        self._schedules[schedule.id] = msgspec.structs.replace(schedule)
        return True

    async def delete(self, schedule_id: str) -> bool:
        if self._schedules.pop(schedule_id, None) is None:
            return False
        self._ticks = {t for t in self._ticks if t[0] != schedule_id}
        return True

    async def due(self, now: int, limit: int) -> builtins.list[Schedule]:
        found = [
            s
            for s in self._schedules.values()
            if not s.paused and (0 < s.next_tick_at <= now or s.buffered_tick_at > 0)
        ]
        found.sort(key=lambda s: s.next_tick_at)
        return [msgspec.structs.replace(s) for s in found[:limit]]

    async def next_due_at(self) -> int | None:
        times = [s.next_tick_at for s in self._schedules.values() if not s.paused and s.next_tick_at > 0]
        return min(times) if times else None

    async def purge_ticks(self, older_than: int) -> int:
        old = {t for t in self._ticks if t[1] < older_than}
        self._ticks -= old
        return len(old)

    async def fire(
        self, schedule: Schedule, expected_revision: int, starts: builtins.list[ScheduledStart]
    ) -> bool:
        current = self._schedules.get(schedule.id)
        if current is None or current.revision != expected_revision:
            return False
        keys = [(schedule.id, s.tick_at) for s in starts if not s.manual]
        if any(k in self._ticks for k in keys) or len(set(keys)) != len(keys):
            return False
        self._schedules[schedule.id] = msgspec.structs.replace(schedule)
        self._ticks.update(keys)
        for start in starts:
            await self._insert(start.state, start.changes)  # the memory store's insert never suspends
        return True
