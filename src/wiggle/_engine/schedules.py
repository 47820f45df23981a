"""Schedules: what a schedule is, its checks, and which ticks are due when (pure: no I/O).

A schedule starts instances of one workflow on an interval or a 5-field cron expression, in UTC
or a named IANA time zone. Cron expressions are parsed and walked by ``cronsim`` (a small,
dependency-free cron evaluator; see CHANGELOG.md for why), zones come from ``zoneinfo``. The
rules (ticks, missed ticks, catch-up, overlap) are docs/semantics.md#schedules; the instance
layer (wiggle/_server/schedules.py) applies them and a store persists them.
"""

from __future__ import annotations

import enum
import itertools
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError

from .._model import MAX_NAME_LENGTH, validate_name
from ..errors import InvalidArgument
from .start_options import check_start_options

__all__ = [
    "Catchup",
    "Overlap",
    "Schedule",
    "TickPlan",
    "MISSED_AFTER_MILLIS",
    "MAX_CATCHUP",
    "MIN_INTERVAL_MILLIS",
    "MAX_SCHEDULE_ID_LENGTH",
    "MAX_TIMEZONE_LENGTH",
    "check_schedule",
    "next_tick",
    "next_ticks",
    "plan_ticks",
    "zone_of",
]

#: A tick found due later than this after its time is a *missed* tick (every server was down).
MISSED_AFTER_MILLIS = 60_000
#: The most missed ticks ``Catchup.ALL`` ever starts at once.
MAX_CATCHUP = 1000
#: The shortest interval: the clock duties run about once a second.
MIN_INTERVAL_MILLIS = 1000
MAX_INTERVAL_MILLIS = 366 * 86_400_000
#: Room for the "schedule:" prefix of the correlation id of the instances a schedule starts.
MAX_SCHEDULE_ID_LENGTH = MAX_NAME_LENGTH - len("schedule:")
#: The longest time zone name accepted (the longest IANA name, "America/Argentina/ComodRivadavia",
#: has 32 characters); a longer one is refused before ``zoneinfo`` looks it up as a file name.
MAX_TIMEZONE_LENGTH = 64


class Overlap(str, enum.Enum):
    """What a tick does while the schedule's previous instance still runs."""

    SKIP = "SKIP"  # the tick is dropped
    BUFFER_ONE = "BUFFER_ONE"  # the tick waits for the running instance; one waits at most
    ALLOW = "ALLOW"  # the tick starts another instance anyway

    def __str__(self) -> str:
        return self.value


class Catchup(str, enum.Enum):
    """Which missed ticks (docs/semantics.md#schedules) start an instance once a server is back."""

    NONE = "NONE"
    LAST = "LAST"
    ALL = "ALL"  # all, up to the schedule's catchup_limit (the most recent ones)

    def __str__(self) -> str:
        return self.value


class Schedule(msgspec.Struct, kw_only=True):
    """A schedule and its progress. ``revision`` grows with every write (optimistic concurrency)."""

    id: str
    workflow: str
    version: str = ""  # "" = the latest version at each tick
    interval_millis: int = 0  # one of interval_millis and cron is set
    cron: str = ""
    timezone: str = "UTC"
    context: dict[str, Any] = {}
    overlap: str = Overlap.SKIP.value
    catchup: str = Catchup.NONE.value
    catchup_limit: int = 0  # Catchup.ALL: the most missed ticks started (0 = MAX_CATCHUP)
    paused: bool = False
    priority: int = 0  # of every instance it starts (docs/flow-control.md#priorities)
    anchor_at: int = 0  # interval ticks fall on anchor_at + k * interval_millis
    created_at: int = 0
    updated_at: int = 0
    next_tick_at: int = 0  # the earliest tick not yet handled
    last_tick_at: int = 0  # the latest tick that started an instance
    last_instance_id: str = ""
    buffered_tick_at: int = 0  # Overlap.BUFFER_ONE: a tick waiting for the running instance
    fired: int = 0  # instances started by ticks and triggers
    skipped: int = 0  # ticks dropped (overlap SKIP, missed ticks not caught up)
    revision: int = 0


def zone_of(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or InvalidArgument naming it (or the length limit).

    ``zoneinfo`` looks a name up as a file under its TZPATH: a name too long for a file name, or
    one naming a directory ("America"), is an OSError there, refused here like any unknown name.
    """
    if len(name) > MAX_TIMEZONE_LENGTH:
        raise InvalidArgument(
            f"timezone is {len(name)} characters long; the limit is {MAX_TIMEZONE_LENGTH} "
            "(an IANA time zone name like 'UTC' or 'Europe/Paris')"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise InvalidArgument(
            f"timezone {name!r} is not a known IANA time zone; use a name like 'UTC' or 'Europe/Paris'"
        ) from None


def _cron(expr: str, zone: ZoneInfo, at: int, reverse: bool = False) -> CronSim:
    return CronSim(expr, datetime.fromtimestamp(at / 1000, zone), reverse=reverse)


def check_schedule(schedule: Schedule) -> None:
    """Raise InvalidArgument naming the first bad field of ``schedule`` (nothing is stored)."""
    validate_name(schedule.id, "schedule id")
    if len(schedule.id) > MAX_SCHEDULE_ID_LENGTH:  # its instances' correlation id is "schedule:<id>"
        raise InvalidArgument(
            f"schedule id is {len(schedule.id)} characters long; the limit is {MAX_SCHEDULE_ID_LENGTH}"
        )
    validate_name(schedule.workflow, "workflow")
    if schedule.version:
        validate_name(schedule.version, "version")
    if schedule.cron and schedule.interval_millis:
        raise InvalidArgument(
            f"a schedule takes an interval or a cron expression, not both (got every "
            f"{schedule.interval_millis / 1000:g} s and cron {schedule.cron!r})"
        )
    if not schedule.cron and not schedule.interval_millis:
        raise InvalidArgument(
            "a schedule needs an interval (every, more than 0 seconds) or a cron expression; "
            "neither was given"
        )
    if (
        schedule.interval_millis
        and not MIN_INTERVAL_MILLIS <= schedule.interval_millis <= MAX_INTERVAL_MILLIS
    ):
        raise InvalidArgument(
            f"interval is {schedule.interval_millis} ms; it must be between {MIN_INTERVAL_MILLIS} ms "
            f"and {MAX_INTERVAL_MILLIS} ms"
        )
    # "UTC" is the default, which a client sends with every interval (wiggle/_wire/schedules.py
    # spec_from_pb reads "" as it); any other zone on an interval was stored where it meant nothing
    if schedule.interval_millis and schedule.timezone != "UTC":
        raise InvalidArgument(
            f"timezone {schedule.timezone!r} applies to a cron schedule only: an interval (every "
            f"{schedule.interval_millis / 1000:g} s) ticks every so many seconds whatever the zone; "
            "leave the timezone out (or UTC), or give a cron expression"
        )
    zone = zone_of(schedule.timezone)
    if schedule.cron:
        fields = schedule.cron.split()
        if len(fields) != 5:
            raise InvalidArgument(
                f"cron expression {schedule.cron!r} has {len(fields)} fields; it needs 5 "
                "(minute hour day-of-month month day-of-week)"
            )
        try:
            next(_cron(schedule.cron, zone, schedule.created_at or 0))
        except CronSimError as exc:
            raise InvalidArgument(f"cron expression {schedule.cron!r} is invalid: {exc}") from None
        except StopIteration:
            raise InvalidArgument(f"cron expression {schedule.cron!r} never fires") from None
    if schedule.overlap not in Overlap.__members__:
        raise InvalidArgument(f"overlap {schedule.overlap!r} is not SKIP, BUFFER_ONE or ALLOW")
    if schedule.catchup not in Catchup.__members__:
        raise InvalidArgument(f"catchup {schedule.catchup!r} is not NONE, LAST or ALL")
    check_start_options(0, priority=schedule.priority)  # InvalidArgument naming priority
    if not 0 <= schedule.catchup_limit <= MAX_CATCHUP:
        raise InvalidArgument(
            f"catchup_limit is {schedule.catchup_limit}; it must be between 0 and {MAX_CATCHUP}"
        )


_MAX_PAST = 100  # cron ticks at most that may fall at or before the moment asked about (a fold)


def next_tick(schedule: Schedule, after: int) -> int:
    """The first tick strictly after ``after`` (ms)."""
    if schedule.interval_millis:
        step = schedule.interval_millis
        anchor = schedule.anchor_at
        if after < anchor:
            return anchor
        return anchor + ((after - anchor) // step + 1) * step
    # In the hour a fall-back repeats, cronsim started from the second pass (fold=1) may give the
    # first pass's occurrence, already past: the schedule then stayed due, and the clock loop ran
    # without a pause, rewriting it, until real time reached that wall time again. Past ones are
    # skipped: a repeated local time fires once (docs/semantics.md).
    ticks = _cron(schedule.cron, zone_of(schedule.timezone), after)
    for when in itertools.islice(ticks, _MAX_PAST):
        at = int(when.timestamp() * 1000)
        if at > after:
            return at
    raise ValueError(f"cron {schedule.cron!r} gave no tick after {after}")  # never seen: a guard


def next_ticks(schedule: Schedule, after: int, count: int) -> list[int]:
    """The next ``count`` ticks strictly after ``after``."""
    out: list[int] = []
    at = after
    for _ in range(count):
        at = next_tick(schedule, at)
        out.append(at)
    return out


def _ticks_back(schedule: Schedule, at_or_before: int, not_before: int, count: int) -> list[int]:
    """Up to ``count`` ticks in [not_before, at_or_before], latest first."""
    out: list[int] = []
    if count <= 0 or at_or_before < not_before:
        return out
    if schedule.interval_millis:
        step = schedule.interval_millis
        anchor = schedule.anchor_at
        if at_or_before < anchor:
            return out
        at = anchor + (at_or_before - anchor) // step * step
        while at >= not_before and len(out) < count:
            out.append(at)
            at -= step
        return out
    # cronsim walks backwards from a moment (minute granularity): 2.8 and later yield the ticks at
    # or before it, 2.7 (the last for Python 3.10) only those before its minute, which lost a tick
    # due at that very minute (a schedule due now never fired on 3.10). Walking from a minute
    # later and keeping what is at or before the moment gives the same ticks with both.
    later = at_or_before + 60_000
    for when in _cron(schedule.cron, zone_of(schedule.timezone), later, reverse=True):
        at = int(when.timestamp() * 1000)
        if at < not_before or len(out) >= count:
            break
        if at <= at_or_before:
            out.append(at)
    return out


class TickPlan(msgspec.Struct):
    """What the due ticks of a schedule come to at one moment."""

    fire: list[int]  # ticks to start an instance for, oldest first
    dropped: int  # missed ticks not caught up
    next_tick_at: int  # the earliest tick still to come


def plan_ticks(schedule: Schedule, now: int) -> TickPlan:
    """The due ticks of ``schedule`` at ``now`` (docs/semantics.md#schedules): on time or missed.

    The latest due tick is on time unless it is more than MISSED_AFTER_MILLIS late; every other
    due tick was missed. Missed ticks start an instance as the catch-up policy says (none, the
    last, or the most recent ``catchup_limit``); the rest are dropped. Overlap is applied later,
    tick by tick, by the instance layer.
    """
    first = schedule.next_tick_at
    if first <= 0 or first > now:
        return TickPlan([], 0, first)
    latest = _ticks_back(schedule, now, first, 1)
    nxt = next_tick(schedule, now)
    if not latest:
        return TickPlan([], 0, nxt)
    on_time: list[int] = []
    missed_end = latest[0]
    if now - latest[0] <= MISSED_AFTER_MILLIS:
        on_time = [latest[0]]
        missed_end = latest[0] - 1
    wanted = {Catchup.NONE.value: 0, Catchup.LAST.value: 1}.get(
        schedule.catchup, schedule.catchup_limit or MAX_CATCHUP
    )
    caught = _ticks_back(schedule, missed_end, first, wanted)
    caught.reverse()
    dropped = _count_missed(schedule, first, missed_end) - len(caught)
    return TickPlan(caught + on_time, max(dropped, 0), nxt)


def _count_missed(schedule: Schedule, first: int, last: int) -> int:
    """How many ticks lie in [first, last] (counted up to MAX_CATCHUP + 1: a statistic only)."""
    if last < first:
        return 0
    if schedule.interval_millis:
        return (last - first) // schedule.interval_millis + 1
    return len(_ticks_back(schedule, last, first, MAX_CATCHUP + 1))
