"""Upstream Wiggle's gRPC service, ``dev.wiggle.proto.WiggleControlPlane``, over our instance layer.

Clients and workers written for upstream Wiggle (PyPI ``wiggle-client``, its Java client) call
this service on the same server and port as ours; it translates their messages and calls the
same instance layer (wiggle/_server/instances.py) our service calls: one engine, one store,
one cluster. What is translated, and where upstream and we differ, is in docs/upstream.md.
The proto is vendored from wiggle-client 0.1.1 (proto/wiggle/_rpc/upstream/ORIGIN).

As in our own service (wiggle/_server/service.py), every RPC goes through one typed dispatch
table (``routes``: method name -> Route) and errors become status codes in one place; the
handlers are in wiggle/_upstream/handlers.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, cast

import grpc
from google.protobuf.message import Message

from .._rpc.upstream import wiggle_pb2 as upb
from .._rpc.upstream import wiggle_pb2_grpc as upb_grpc
from .._security.roles import WORKER_METHODS
from .._server.faults import status_of
from .._server.instances import Instances
from .._server.pollers import Pollers
from .._server.service import Metrics, Route
from .._server.service_limits import ServiceLimits
from .._wire.status import to_grpc
from .handlers import UpstreamHandlers
from .versions import Versions

__all__ = ["UpstreamControlPlane", "SERVICE_NAME", "METHOD_PREFIX"]

SERVICE_NAME = "dev.wiggle.proto.WiggleControlPlane"
METHOD_PREFIX = f"/{SERVICE_NAME}/"

Context: TypeAlias = grpc.aio.ServicerContext
R = TypeVar("R", bound=Message)


class UpstreamControlPlane(UpstreamHandlers, upb_grpc.WiggleControlPlaneServicer):
    """The upstream protocol over ``instances``; errors become statuses as in our own service."""

    def __init__(
        self,
        instances: Instances,
        pollers: Pollers,
        metrics: Metrics | None = None,
        limits: ServiceLimits | None = None,
        node_id: Callable[[], str] | None = None,
    ) -> None:
        self.instances = instances
        self.pollers = pollers  # shared with our service: one view of who polls (dashboard)
        self.metrics = metrics or Metrics()
        self.limits = limits or ServiceLimits.from_config(instances.config)
        self.versions = Versions(instances)
        self.node_id = node_id or (lambda: "wiggle")
        #: run on worker requests before their handler (queue scoping: wiggle/_server/guard.py)
        self.guard: Callable[[str, Message], None] | None = None
        self.stopping = lambda: False  # the server sets its own (draining)
        self.routes: dict[str, Route[Any, Message]] = {
            "HealthCheck": Route(upb.Empty, self.health_check),
            "GetCluster": Route(upb.Empty, self.get_cluster),
            "ListWorkflows": Route(upb.Empty, self.list_workflows),
            "RegisterWorkflow": Route(upb.WorkflowDefinition, self.register_workflow),
            "GetWorkflow": Route(upb.GetWorkflowRequest, self.get_workflow),
            "StartInstance": Route(upb.StartInstanceRequest, self.start_instance),
            "ListInstances": Route(upb.ListInstancesRequest, self.list_instances),
            "GetInstance": Route(upb.InstanceIdRequest, self.get_instance),
            "CancelInstance": Route(upb.CancelInstanceRequest, self.cancel_instance),
            "SignalInstance": Route(upb.SignalRequest, self.signal_instance),
            "CreateSchedule": Route(upb.CreateScheduleRequest, self.create_schedule),
            "ListSchedules": Route(upb.Empty, self.list_schedules),
            "DeleteSchedule": Route(upb.ScheduleIdRequest, self.delete_schedule),
            "PollTasks": Route(upb.PollRequest, self.poll_tasks),
            "CompleteTask": Route(upb.TaskResultRequest, self.complete_task),
            "FailTask": Route(upb.TaskFailureRequest, self.fail_task),
            "HeartbeatTask": Route(upb.HeartbeatRequest, self.heartbeat_task),
            "AdvanceRun": Route(upb.AdvanceRunRequest, self.advance_run),
        }

    # ------------------------------------------------------------------ dispatch

    async def dispatch(self, method: str, request: Message) -> Message:
        """Run ``method``'s handler, counting the call (as ``upstream.<method>``)."""
        key = f"upstream.{method}"
        self.metrics.rpc_calls[key] += 1
        try:
            if self.guard is not None and method in WORKER_METHODS:
                self.guard(method, request)
            return await self.routes[method](request)
        except Exception:
            self.metrics.rpc_errors[key] += 1
            raise

    async def _unary(self, method: str, request: Message, context: Context, reply: type[R]) -> R:
        try:
            return cast(R, await self.dispatch(method, request))
        except Exception as exc:  # CancelledError is a BaseException and passes through
            code, message = status_of(exc, f"upstream {method}")
        await context.abort(to_grpc(code), message)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    # ------------------------------------------------------------------ gRPC entry points

    async def HealthCheck(self, request: upb.Empty, context: Context) -> upb.HealthStatus:
        return await self._unary("HealthCheck", request, context, upb.HealthStatus)

    async def GetCluster(self, request: upb.Empty, context: Context) -> upb.ClusterView:
        return await self._unary("GetCluster", request, context, upb.ClusterView)

    async def ListWorkflows(self, request: upb.Empty, context: Context) -> upb.WorkflowNames:
        return await self._unary("ListWorkflows", request, context, upb.WorkflowNames)

    async def RegisterWorkflow(
        self, request: upb.WorkflowDefinition, context: Context
    ) -> upb.RegisterWorkflowResult:
        return await self._unary("RegisterWorkflow", request, context, upb.RegisterWorkflowResult)

    async def GetWorkflow(self, request: upb.GetWorkflowRequest, context: Context) -> upb.WorkflowDefinition:
        return await self._unary("GetWorkflow", request, context, upb.WorkflowDefinition)

    async def StartInstance(
        self, request: upb.StartInstanceRequest, context: Context
    ) -> upb.StartInstanceResult:
        return await self._unary("StartInstance", request, context, upb.StartInstanceResult)

    async def ListInstances(self, request: upb.ListInstancesRequest, context: Context) -> upb.InstanceList:
        return await self._unary("ListInstances", request, context, upb.InstanceList)

    async def GetInstance(self, request: upb.InstanceIdRequest, context: Context) -> upb.InstanceDetail:
        return await self._unary("GetInstance", request, context, upb.InstanceDetail)

    async def CancelInstance(
        self, request: upb.CancelInstanceRequest, context: Context
    ) -> upb.CancelInstanceResult:
        return await self._unary("CancelInstance", request, context, upb.CancelInstanceResult)

    async def SignalInstance(self, request: upb.SignalRequest, context: Context) -> upb.Ack:
        return await self._unary("SignalInstance", request, context, upb.Ack)

    async def CreateSchedule(self, request: upb.CreateScheduleRequest, context: Context) -> upb.ScheduleView:
        return await self._unary("CreateSchedule", request, context, upb.ScheduleView)

    async def ListSchedules(self, request: upb.Empty, context: Context) -> upb.ScheduleList:
        return await self._unary("ListSchedules", request, context, upb.ScheduleList)

    async def DeleteSchedule(self, request: upb.ScheduleIdRequest, context: Context) -> upb.Ack:
        return await self._unary("DeleteSchedule", request, context, upb.Ack)

    async def PollTasks(self, request: upb.PollRequest, context: Context) -> upb.TaskList:
        return await self._unary("PollTasks", request, context, upb.TaskList)

    async def CompleteTask(self, request: upb.TaskResultRequest, context: Context) -> upb.Ack:
        return await self._unary("CompleteTask", request, context, upb.Ack)

    async def FailTask(self, request: upb.TaskFailureRequest, context: Context) -> upb.Ack:
        return await self._unary("FailTask", request, context, upb.Ack)

    async def HeartbeatTask(self, request: upb.HeartbeatRequest, context: Context) -> upb.HeartbeatResult:
        return await self._unary("HeartbeatTask", request, context, upb.HeartbeatResult)

    async def AdvanceRun(self, request: upb.AdvanceRunRequest, context: Context) -> upb.AdvanceRunResult:
        return await self._unary("AdvanceRun", request, context, upb.AdvanceRunResult)
