"""The gRPC service: wire messages in, instance-layer calls, wire messages out.

Every RPC goes through one dispatch table (``ControlPlane.routes``: method name -> handler),
used by the unary entry points and by the WorkerSession stream (wiggle/_server/session.py);
errors become status codes in one place (wiggle/_server/faults.py, wiggle/_wire/status.py).
Requests are validated at this edge, before the instance layer sees them, by the handlers:
instance_service.py (definitions and instances), worker_service.py (worker calls) and
schedule_service.py (schedules).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeAlias, TypeVar, cast

import grpc
from google.protobuf.message import Message

from .. import _tracing as tracing
from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._wire.status import to_grpc
from ..errors import InvalidArgument
from .faults import status_of
from .instance_service import InstanceHandlers
from .instances import Instances
from .pollers import Pollers
from .schedule_service import ScheduleHandlers
from .service_limits import ServiceLimits
from .session import serve_session
from .worker_service import WorkerHandlers

__all__ = ["ControlPlane", "Metrics", "ServiceLimits", "Route"]

log = logging.getLogger("wiggle.server")


Context: TypeAlias = grpc.aio.ServicerContext
R = TypeVar("R", bound=Message)
Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message, covariant=True)


class Route(Generic[Req, Rep]):
    """One entry of the dispatch table: the request type a method takes and its handler."""

    __slots__ = ("request", "handler")

    def __init__(self, request: type[Req], handler: Callable[[Req], Awaitable[Rep]]) -> None:
        self.request = request
        self.handler = handler

    async def __call__(self, request: Message) -> Rep:
        """Run the handler on ``request``, which must be of the route's request type."""
        if not isinstance(request, self.request):
            raise InvalidArgument(f"expected a {self.request.__name__}, got a {type(request).__name__}")
        return await self.handler(request)


class Metrics:
    """Counters the server keeps: RPCs by method, local-run lengths and handback reasons."""

    RUN_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 1000)

    def __init__(self) -> None:
        self.rpc_calls: Counter[str] = Counter()
        self.rpc_errors: Counter[str] = Counter()
        self.handbacks: Counter[str] = Counter()
        self.local_run_steps: Counter[int] = Counter()  # bucket upper bound -> count
        self.local_steps_total = 0

    def observe_run(self, steps: int, reason: str) -> None:
        """Record one finished local run (its handback)."""
        self.handbacks[reason or "UNSPECIFIED"] += 1
        self.local_steps_total += steps
        for bound in self.RUN_LENGTH_BUCKETS:
            if steps <= bound:
                self.local_run_steps[bound] += 1
                return
        self.local_run_steps[0] += 1  # 0: above the last bucket

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of every counter."""
        return {
            "rpc_calls": dict(self.rpc_calls),
            "rpc_errors": dict(self.rpc_errors),
            "handbacks": dict(self.handbacks),
            "local_run_steps": {str(k): v for k, v in self.local_run_steps.items()},
            "local_steps_total": self.local_steps_total,
        }


class ControlPlane(InstanceHandlers, WorkerHandlers, pb_grpc.WiggleControlPlaneServicer):
    """WiggleControlPlane over the instance layer (wiggle/_server/instances.py)."""

    def __init__(
        self, instances: Instances, metrics: Metrics | None = None, limits: ServiceLimits | None = None
    ) -> None:
        self.instances = instances
        self.metrics = metrics or Metrics()
        self.limits = limits or ServiceLimits.from_config(instances.config)
        self.pollers = Pollers(instances.now)  # the workers polling this node (the dashboard's Queues page)
        self.routes: dict[str, Route[Any, Message]] = {
            "RegisterWorkflow": Route(pb.RegisterWorkflowRequest, self.register_workflow),
            "GetWorkflow": Route(pb.GetWorkflowRequest, self.get_workflow),
            "ListWorkflows": Route(pb.ListWorkflowsRequest, self.list_workflows),
            "StartInstance": Route(pb.StartInstanceRequest, self.start_instance),
            "StartInstances": Route(pb.StartInstancesRequest, self.start_instances),
            "GetInstance": Route(pb.GetInstanceRequest, self.get_instance),
            "ListInstances": Route(pb.ListInstancesRequest, self.list_instances),
            "CancelInstance": Route(pb.CancelInstanceRequest, self.cancel_instance),
            "CompleteUserTask": Route(pb.CompleteUserTaskRequest, self.complete_user_task),
            "GetHistory": Route(pb.GetHistoryRequest, self.get_history),
            "ListQueues": Route(pb.ListQueuesRequest, self.list_queues),
            "PollTasks": Route(pb.PollTasksRequest, self.poll_tasks),
            "CompleteTask": Route(pb.CompleteTaskRequest, self.complete_task),
            "FailTask": Route(pb.FailTaskRequest, self.fail_task),
            "HeartbeatTask": Route(pb.HeartbeatTaskRequest, self.heartbeat_task),
            "AdvanceRun": Route(pb.AdvanceRunRequest, self.advance_run),
            "SignalInstance": Route(pb.SignalInstanceRequest, self.signal_instance),
            "RetryInstance": Route(pb.RetryInstanceRequest, self.retry_instance),
        }
        sched = ScheduleHandlers(instances.schedules, self.limits.max_payload_bytes)
        self.routes.update(
            {
                "CreateSchedule": Route(pb.ScheduleSpec, sched.create),
                "UpdateSchedule": Route(pb.ScheduleSpec, sched.update),
                "GetSchedule": Route(pb.ScheduleRequest, sched.get),
                "ListSchedules": Route(pb.ListSchedulesRequest, sched.list),
                "PauseSchedule": Route(pb.ScheduleRequest, sched.pause),
                "ResumeSchedule": Route(pb.ScheduleRequest, sched.resume),
                "DeleteSchedule": Route(pb.ScheduleRequest, sched.delete),
                "TriggerSchedule": Route(pb.ScheduleRequest, sched.trigger),
            }
        )
        #: run on every request before its handler (access control: wiggle/_server/guard.py)
        self.guard: Callable[[str, Message], None] | None = None

    # ------------------------------------------------------------------ dispatch

    async def dispatch(self, method: str, request: Message) -> Message:
        """Run ``method``'s handler, counting the call; a WiggleError propagates to the caller."""
        self.metrics.rpc_calls[method] += 1
        try:
            if self.guard is not None:
                self.guard(method, request)
            return await self.routes[method](request)
        except Exception:
            self.metrics.rpc_errors[method] += 1
            raise

    async def _unary(self, method: str, request: Message, context: Context, reply: type[R]) -> R:
        if tracing.active():  # the caller's trace context, for the handler's span (each call is a task)
            tracing.set_incoming(context.invocation_metadata())
        try:
            return cast(R, await self.dispatch(method, request))
        except Exception as exc:  # CancelledError is a BaseException and passes through
            code, message = status_of(exc, method)
        await context.abort(to_grpc(code), message)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    # ------------------------------------------------------------------ gRPC entry points

    async def RegisterWorkflow(
        self, request: pb.RegisterWorkflowRequest, context: Context
    ) -> pb.WorkflowInfo:
        return await self._unary("RegisterWorkflow", request, context, pb.WorkflowInfo)

    async def GetWorkflow(self, request: pb.GetWorkflowRequest, context: Context) -> pb.WorkflowInfo:
        return await self._unary("GetWorkflow", request, context, pb.WorkflowInfo)

    async def ListWorkflows(
        self, request: pb.ListWorkflowsRequest, context: Context
    ) -> pb.ListWorkflowsResponse:
        return await self._unary("ListWorkflows", request, context, pb.ListWorkflowsResponse)

    async def StartInstance(self, request: pb.StartInstanceRequest, context: Context) -> pb.InstanceInfo:
        return await self._unary("StartInstance", request, context, pb.InstanceInfo)

    async def StartInstances(
        self, request: pb.StartInstancesRequest, context: Context
    ) -> pb.StartInstancesResponse:
        return await self._unary("StartInstances", request, context, pb.StartInstancesResponse)

    async def GetInstance(self, request: pb.GetInstanceRequest, context: Context) -> pb.InstanceInfo:
        return await self._unary("GetInstance", request, context, pb.InstanceInfo)

    async def ListInstances(
        self, request: pb.ListInstancesRequest, context: Context
    ) -> pb.ListInstancesResponse:
        return await self._unary("ListInstances", request, context, pb.ListInstancesResponse)

    async def CancelInstance(
        self, request: pb.CancelInstanceRequest, context: Context
    ) -> pb.CancelInstanceResponse:
        return await self._unary("CancelInstance", request, context, pb.CancelInstanceResponse)

    async def SignalInstance(
        self, request: pb.SignalInstanceRequest, context: Context
    ) -> pb.SignalInstanceResponse:
        return await self._unary("SignalInstance", request, context, pb.SignalInstanceResponse)

    async def RetryInstance(self, request: pb.RetryInstanceRequest, context: Context) -> pb.InstanceInfo:
        return await self._unary("RetryInstance", request, context, pb.InstanceInfo)

    async def CompleteUserTask(
        self, request: pb.CompleteUserTaskRequest, context: Context
    ) -> pb.InstanceInfo:
        return await self._unary("CompleteUserTask", request, context, pb.InstanceInfo)

    async def GetHistory(self, request: pb.GetHistoryRequest, context: Context) -> pb.GetHistoryResponse:
        return await self._unary("GetHistory", request, context, pb.GetHistoryResponse)

    async def ListQueues(self, request: pb.ListQueuesRequest, context: Context) -> pb.ListQueuesResponse:
        return await self._unary("ListQueues", request, context, pb.ListQueuesResponse)

    async def PollTasks(self, request: pb.PollTasksRequest, context: Context) -> pb.PollTasksResponse:
        return await self._unary("PollTasks", request, context, pb.PollTasksResponse)

    async def CompleteTask(self, request: pb.CompleteTaskRequest, context: Context) -> pb.ReportResult:
        return await self._unary("CompleteTask", request, context, pb.ReportResult)

    async def FailTask(self, request: pb.FailTaskRequest, context: Context) -> pb.ReportResult:
        return await self._unary("FailTask", request, context, pb.ReportResult)

    async def HeartbeatTask(self, request: pb.HeartbeatTaskRequest, context: Context) -> pb.ReportResult:
        return await self._unary("HeartbeatTask", request, context, pb.ReportResult)

    async def AdvanceRun(self, request: pb.AdvanceRunRequest, context: Context) -> pb.AdvanceRunResult:
        return await self._unary("AdvanceRun", request, context, pb.AdvanceRunResult)

    async def CreateSchedule(self, request: pb.ScheduleSpec, context: Context) -> pb.ScheduleInfo:
        return await self._unary("CreateSchedule", request, context, pb.ScheduleInfo)

    async def UpdateSchedule(self, request: pb.ScheduleSpec, context: Context) -> pb.ScheduleInfo:
        return await self._unary("UpdateSchedule", request, context, pb.ScheduleInfo)

    async def GetSchedule(self, request: pb.ScheduleRequest, context: Context) -> pb.ScheduleInfo:
        return await self._unary("GetSchedule", request, context, pb.ScheduleInfo)

    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: Context
    ) -> pb.ListSchedulesResponse:
        return await self._unary("ListSchedules", request, context, pb.ListSchedulesResponse)

    async def PauseSchedule(self, request: pb.ScheduleRequest, context: Context) -> pb.ScheduleInfo:
        return await self._unary("PauseSchedule", request, context, pb.ScheduleInfo)

    async def ResumeSchedule(self, request: pb.ScheduleRequest, context: Context) -> pb.ScheduleInfo:
        return await self._unary("ResumeSchedule", request, context, pb.ScheduleInfo)

    async def DeleteSchedule(
        self, request: pb.ScheduleRequest, context: Context
    ) -> pb.DeleteScheduleResponse:
        return await self._unary("DeleteSchedule", request, context, pb.DeleteScheduleResponse)

    async def TriggerSchedule(self, request: pb.ScheduleRequest, context: Context) -> pb.InstanceInfo:
        return await self._unary("TriggerSchedule", request, context, pb.InstanceInfo)

    async def WorkerSession(
        self, request_iterator: AsyncIterator[pb.WorkerBatch], context: Context
    ) -> AsyncIterator[pb.ServerBatch]:
        """Multiplexed worker requests on one stream, through the same table (session.py)."""
        async with contextlib.aclosing(serve_session(request_iterator, self.dispatch)) as batches:
            async for batch in batches:
                yield batch
