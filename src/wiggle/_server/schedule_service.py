"""The schedule RPCs: wire in, the schedule layer (wiggle/_server/schedules.py), wire out.

The handlers of the service's dispatch table for CreateSchedule ... TriggerSchedule
(wiggle/_server/service.py routes them); requests are checked here, at the edge, and the spec
itself by the schedule layer (docs/semantics.md#schedules).
"""

from __future__ import annotations

from .._engine.schedules import Schedule
from .._model import validate_name
from .._rpc import wiggle_pb2 as pb
from .._wire import convert
from .._wire.schedules import schedule_to_pb, spec_from_pb
from .schedules import Schedules

__all__ = ["ScheduleHandlers"]


class ScheduleHandlers:
    """The schedule RPC handlers over ``schedules``; ``max_payload_bytes`` bounds the context."""

    def __init__(self, schedules: Schedules, max_payload_bytes: int) -> None:
        self.schedules = schedules
        self.max_payload_bytes = max_payload_bytes

    def _info(self, schedule: Schedule) -> pb.ScheduleInfo:
        return schedule_to_pb(schedule, self.schedules.upcoming(schedule))

    async def create(self, request: pb.ScheduleSpec) -> pb.ScheduleInfo:
        """CreateSchedule."""
        spec = spec_from_pb(request, self.max_payload_bytes)
        return self._info(await self.schedules.create(spec))

    async def update(self, request: pb.ScheduleSpec) -> pb.ScheduleInfo:
        """UpdateSchedule: a new spec for an existing schedule."""
        validate_name(request.id, "schedule id")
        spec = spec_from_pb(request, self.max_payload_bytes)
        return self._info(await self.schedules.update(spec))

    async def get(self, request: pb.ScheduleRequest) -> pb.ScheduleInfo:
        """GetSchedule."""
        validate_name(request.schedule_id, "schedule_id")
        return self._info(await self.schedules.get(request.schedule_id))

    async def list(self, request: pb.ListSchedulesRequest) -> pb.ListSchedulesResponse:
        """ListSchedules (of one workflow)."""
        if request.workflow:
            validate_name(request.workflow, "workflow")
        found = await self.schedules.list(request.workflow)
        return pb.ListSchedulesResponse(schedules=[self._info(s) for s in found])

    async def pause(self, request: pb.ScheduleRequest) -> pb.ScheduleInfo:
        """PauseSchedule."""
        validate_name(request.schedule_id, "schedule_id")
        return self._info(await self.schedules.pause(request.schedule_id))

    async def resume(self, request: pb.ScheduleRequest) -> pb.ScheduleInfo:
        """ResumeSchedule."""
        validate_name(request.schedule_id, "schedule_id")
        return self._info(await self.schedules.resume(request.schedule_id))

    async def delete(self, request: pb.ScheduleRequest) -> pb.DeleteScheduleResponse:
        """DeleteSchedule (NOT_FOUND for an unknown id)."""
        validate_name(request.schedule_id, "schedule_id")
        await self.schedules.delete(request.schedule_id)
        return pb.DeleteScheduleResponse(deleted=True)

    async def trigger(self, request: pb.ScheduleRequest) -> pb.InstanceInfo:
        """TriggerSchedule: start one instance now."""
        validate_name(request.schedule_id, "schedule_id")
        _, instance_id = await self.schedules.trigger(request.schedule_id)
        view = await self.schedules.store.get_instance(instance_id)
        return convert.instance_to_pb(view)
