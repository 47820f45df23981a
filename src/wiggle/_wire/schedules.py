"""Schedules on the wire, the server's side: ScheduleSpec / ScheduleInfo <-> Schedule (the
client's ScheduleInfo is read in wiggle/_wire/replies.py).

Each conversion is written once, for the server and the client (docs/semantics.md#schedules).
"""

from __future__ import annotations

import msgspec

from .._engine.schedules import Catchup, Overlap, Schedule
from .._rpc import wiggle_pb2 as pb
from .payload import decode_object

__all__ = ["spec_from_pb", "spec_to_pb", "schedule_to_pb"]

_encode = msgspec.json.Encoder().encode


def spec_from_pb(msg: pb.ScheduleSpec, max_bytes: int) -> Schedule:
    """The Schedule a ScheduleSpec asks for (its spec fields; checked by the schedule layer)."""
    return Schedule(
        id=msg.id,
        workflow=msg.workflow,
        version=msg.version,
        interval_millis=msg.interval_millis,
        cron=msg.cron,
        timezone=msg.timezone or "UTC",
        context=decode_object(msg.context_json, "context_json", max_bytes),
        overlap=msg.overlap.upper() or Overlap.SKIP.value,
        catchup=msg.catchup.upper() or Catchup.NONE.value,
        catchup_limit=msg.catchup_limit,
        paused=msg.paused,
        priority=msg.priority,
    )


def spec_to_pb(
    schedule_id: str,
    workflow: str,
    *,
    version: str = "",
    interval_millis: int = 0,
    cron: str = "",
    timezone: str = "",
    context_json: bytes = b"",
    overlap: str = "",
    catchup: str = "",
    catchup_limit: int = 0,
    paused: bool = False,
    priority: int = 0,
) -> pb.ScheduleSpec:
    """A ScheduleSpec message."""
    return pb.ScheduleSpec(
        id=schedule_id,
        workflow=workflow,
        version=version,
        interval_millis=interval_millis,
        cron=cron,
        timezone=timezone,
        context_json=context_json,
        overlap=str(overlap),
        catchup=str(catchup),
        catchup_limit=catchup_limit,
        paused=paused,
        priority=priority,
    )


def schedule_to_pb(schedule: Schedule, next_fire_times: list[int]) -> pb.ScheduleInfo:
    """A schedule, its progress and its next fire times, as the wire shows them."""
    s = schedule
    return pb.ScheduleInfo(
        spec=pb.ScheduleSpec(
            id=s.id,
            workflow=s.workflow,
            version=s.version,
            interval_millis=s.interval_millis,
            cron=s.cron,
            timezone=s.timezone,
            context_json=_encode(s.context),
            overlap=s.overlap,
            catchup=s.catchup,
            catchup_limit=s.catchup_limit,
            paused=s.paused,
            priority=s.priority,
        ),
        created_at=s.created_at,
        updated_at=s.updated_at,
        next_tick_at=s.next_tick_at,
        last_tick_at=s.last_tick_at,
        last_instance_id=s.last_instance_id,
        buffered_tick_at=s.buffered_tick_at,
        fired=s.fired,
        skipped=s.skipped,
        next_fire_times=next_fire_times,
    )
