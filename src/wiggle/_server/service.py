"""The gRPC service: wire messages in, instance-layer calls, wire messages out.

Every RPC goes through one dispatch table (``ControlPlane.routes``: method name -> handler),
used by the unary entry points and by the WorkerSession stream (wiggle/_server/session.py);
errors become status codes in one place (wiggle/_server/faults.py, wiggle/_wire/status.py).
Requests are validated here, at the edge, before the instance layer sees them.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, cast

import grpc
import msgspec
from google.protobuf.message import Message

from .. import _fast
from .. import _tracing as tracing
from .._engine.engine import EngineConfig
from .._engine.records import StepRecord
from .._engine.state import FINISHED_INSTANCE_STATUSES, InstanceStatus, TokenStatus
from .._model import definition_from_json, validate_name
from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._storage.base import InstanceQuery
from .._wire import convert
from .._wire.payload import check_depth, decode_object, too_deep
from .._wire.status import to_grpc
from ..errors import InvalidArgument
from .faults import status_of
from .instances import MAX_WAIT_SECONDS, Instances
from .pollers import Pollers
from .schedule_service import ScheduleHandlers
from .session import serve_session

__all__ = ["ControlPlane", "Metrics", "ServiceLimits", "Route"]

log = logging.getLogger("wiggle.server")

#: A valid page token is an instance id (the last of the previous page), as
#: wiggle/_engine/state.py new_instance_id makes them.
PAGE_TOKEN_PATTERN = re.compile(r"wi-[0-9a-f]{24}")
LIST_STATUSES = (InstanceStatus.RUNNING, *sorted(FINISHED_INSTANCE_STATUSES))

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


class ServiceLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds the service enforces on requests."""

    max_wait_seconds: float = MAX_WAIT_SECONDS  # PollTasks and GetInstance waits
    max_tasks_per_poll: int = 256
    default_page_size: int = 50
    max_page_size: int = 1000
    max_payload_bytes: int = 1 << 20  # JSON fields and definitions (EngineConfig.max_payload_bytes)
    max_start_batch: int = 10_000  # contexts in one StartInstances call (clients send chunks)

    @classmethod
    def from_config(cls, config: EngineConfig) -> ServiceLimits:
        """The limits for an engine configuration (its payload limit)."""
        return cls(max_payload_bytes=config.max_payload_bytes)


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


def _optional_name(value: str, what: str) -> None:
    if value:
        validate_name(value, what)


def _wait_seconds(millis: int, limits: ServiceLimits) -> float:
    return min(max(millis, 0) / 1000, limits.max_wait_seconds)


class ControlPlane(pb_grpc.WiggleControlPlaneServicer):
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

    # ------------------------------------------------------------------ definitions

    async def register_workflow(self, request: pb.RegisterWorkflowRequest) -> pb.WorkflowInfo:
        """Validate and store a definition (a no-op for a known version)."""
        limit = self.limits.max_payload_bytes
        if len(request.definition_json) > limit:
            raise InvalidArgument(
                f"definition_json is {len(request.definition_json)} bytes; the limit is {limit} bytes"
            )
        check_depth(request.definition_json, "definition_json")
        definition = definition_from_json(request.definition_json)
        record, created = await self.instances.register(definition)
        if created:
            log.info("registered workflow %s version %s", definition.name, record.loaded.version)
        return convert.workflow_to_pb(record, created)

    async def get_workflow(self, request: pb.GetWorkflowRequest) -> pb.WorkflowInfo:
        """One registered version (the latest unless pinned)."""
        validate_name(request.name, "name")
        _optional_name(request.version, "version")
        return convert.workflow_to_pb(await self.instances.get_workflow(request.name, request.version))

    async def list_workflows(self, request: pb.ListWorkflowsRequest) -> pb.ListWorkflowsResponse:
        """Every registered version (of one name)."""
        _optional_name(request.name, "name")
        records = await self.instances.list_workflows(request.name)
        return pb.ListWorkflowsResponse(workflows=[convert.workflow_to_pb(r) for r in records])

    # ------------------------------------------------------------------ instances

    async def start_instance(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        """Start an instance."""
        validate_name(request.workflow, "workflow")
        _optional_name(request.version, "version")
        _optional_name(request.correlation_id, "correlation_id")
        _optional_name(request.request_id, "request_id")
        ctx = decode_object(request.context_json, "context_json", self.limits.max_payload_bytes)
        attributes = {"wiggle.workflow": request.workflow}
        with tracing.span("wiggle.StartInstance", tracing.SERVER, tracing.incoming(), attributes):
            view = await self.instances.start(
                request.workflow,
                request.version,
                ctx,
                request.correlation_id,
                request_id=request.request_id,
                traceparent=tracing.traceparent(),
            )
        return convert.instance_to_pb(view)

    async def start_instances(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        """Start one instance per context, committed in large batches; the ids in order."""
        validate_name(request.workflow, "workflow")
        _optional_name(request.version, "version")
        _optional_name(request.correlation_id, "correlation_id")
        _optional_name(request.request_id, "request_id")
        count = len(request.contexts_json)
        if not 1 <= count <= self.limits.max_start_batch:
            raise InvalidArgument(
                f"contexts_json holds {count} contexts; send between 1 and {self.limits.max_start_batch} "
                "per call (the clients' start_many sends long lists in chunks)"
            )
        if request.first_index < 0:
            raise InvalidArgument(f"first_index must be 0 or more, got {request.first_index}")
        limit = self.limits.max_payload_bytes
        contexts = [
            decode_object(data, f"contexts_json[{i}]", limit) for i, data in enumerate(request.contexts_json)
        ]
        request_ids: list[str] = []
        if request.request_id:
            first = request.first_index
            request_ids = [f"{request.request_id}:{first + i}" for i in range(count)]
        version, ids = await self.instances.start_many(
            request.workflow, request.version, contexts, request.correlation_id, request_ids
        )
        return pb.StartInstancesResponse(instance_ids=ids, version=version)

    async def get_instance(self, request: pb.GetInstanceRequest) -> pb.InstanceInfo:
        """An instance now, or once finished within ``wait_millis``."""
        validate_name(request.instance_id, "instance_id")
        wait = _wait_seconds(request.wait_millis, self.limits)
        return convert.instance_to_pb(await self.instances.wait_finished(request.instance_id, wait))

    async def list_instances(self, request: pb.ListInstancesRequest) -> pb.ListInstancesResponse:
        """A page of instances, newest first."""
        limits = self.limits
        size = request.page_size or limits.default_page_size
        if not 1 <= size <= limits.max_page_size:
            raise InvalidArgument(f"page_size must be between 1 and {limits.max_page_size}, got {size}")
        if request.status and request.status not in LIST_STATUSES:
            raise InvalidArgument(f"status {request.status!r} is not RUNNING, COMPLETED, FAILED or CANCELLED")
        _optional_name(request.workflow, "workflow")
        _optional_name(request.correlation_id, "correlation_id")
        if request.page_token and not PAGE_TOKEN_PATTERN.fullmatch(request.page_token):
            raise InvalidArgument(
                f"page_token {request.page_token[:40]!r} is not a page token; pass the next_page_token "
                "of the previous page, or none for the first page"
            )
        query = InstanceQuery(
            workflow=request.workflow,
            status=request.status,
            correlation_id=request.correlation_id,
            created_after=request.created_after,
            created_before=request.created_before,
            page_size=size,
            page_token=request.page_token,
        )
        views, next_token = await self.instances.list_instances(query)
        return pb.ListInstancesResponse(
            instances=[convert.instance_to_pb(v, with_tokens=False) for v in views],
            next_page_token=next_token,
        )

    async def cancel_instance(self, request: pb.CancelInstanceRequest) -> pb.CancelInstanceResponse:
        """Cancel a running instance; a finished one is left as it is."""
        validate_name(request.instance_id, "instance_id")
        view, changed = await self.instances.cancel(request.instance_id, request.reason or "cancelled")
        message = "cancelled" if changed else f"instance is already {view.instance.status}; nothing changed"
        return pb.CancelInstanceResponse(
            instance=convert.instance_to_pb(view), changed=changed, message=message
        )

    async def complete_user_task(self, request: pb.CompleteUserTaskRequest) -> pb.InstanceInfo:
        """Complete the user task an instance awaits."""
        validate_name(request.instance_id, "instance_id")
        validate_name(request.task_name, "task_name")
        payload = decode_object(request.payload_json, "payload_json", self.limits.max_payload_bytes)
        view = await self.instances.complete_user_task(request.instance_id, request.task_name, payload)
        return convert.instance_to_pb(view)

    async def signal_instance(self, request: pb.SignalInstanceRequest) -> pb.SignalInstanceResponse:
        """Send a named signal to an instance: delivered to a waiting token or buffered."""
        validate_name(request.instance_id, "instance_id")
        validate_name(request.name, "name (the signal name)")
        if request.signal_id:
            validate_name(request.signal_id, "signal_id")
        if len(request.sender) > 200:
            raise InvalidArgument(f"sender is {len(request.sender)} characters; the limit is 200")
        data = decode_object(request.data_json, "data_json", self.limits.max_payload_bytes)
        outcome, view = await self.instances.signal(
            request.instance_id, request.name, data, request.signal_id, request.sender
        )
        return pb.SignalInstanceResponse(instance=convert.instance_to_pb(view), outcome=outcome)

    async def retry_instance(self, request: pb.RetryInstanceRequest) -> pb.InstanceInfo:
        """Resume a FAILED instance from the steps that failed, or from a named node."""
        validate_name(request.instance_id, "instance_id")
        if request.from_node:
            validate_name(request.from_node, "from_node")
        if len(request.requested_by) > 200:
            raise InvalidArgument(f"requested_by is {len(request.requested_by)} characters; the limit is 200")
        context: dict[str, Any] | None = None
        if request.replace_context:
            context = decode_object(request.context_json, "context_json", self.limits.max_payload_bytes)
        view = await self.instances.retry(
            request.instance_id, request.from_node, context, request.requested_by
        )
        return convert.instance_to_pb(view)

    async def get_history(self, request: pb.GetHistoryRequest) -> pb.GetHistoryResponse:
        """Every step attempt and event of an instance."""
        validate_name(request.instance_id, "instance_id")
        entries = await self.instances.history(request.instance_id)
        return pb.GetHistoryResponse(entries=[convert.history_to_pb(e) for e in entries])

    async def list_queues(self, request: pb.ListQueuesRequest) -> pb.ListQueuesResponse:
        """Every queue with ready or leased steps, and the workers polling it on this node."""
        now = self.instances.clock.now()
        stats = await self.instances.store.queue_stats(now)
        pollers = [(p.worker_id, p.last_seen, p.queues) for p in self.pollers.snapshot()]
        return convert.queues_to_pb(stats, pollers, now)

    # ------------------------------------------------------------------ workers

    async def poll_tasks(self, request: pb.PollTasksRequest) -> pb.PollTasksResponse:
        """Claim steps on the worker's queues, waiting up to ``wait_millis`` for some."""
        validate_name(request.worker_id, "worker_id")
        queues = list(request.queues)
        if not queues:
            raise InvalidArgument("PollTasks names no queues; list the queues this worker serves")
        for q in queues:
            validate_name(q, "queue")
        max_tasks = request.max_tasks or 1
        limit = self.limits.max_tasks_per_poll
        if not 1 <= max_tasks <= limit:
            raise InvalidArgument(f"max_tasks must be between 1 and {limit}, got {max_tasks}")
        wait = _wait_seconds(request.wait_millis, self.limits)
        self.pollers.seen(request.worker_id, queues)
        claimed = await self.instances.poll(request.worker_id, queues, max_tasks, wait)
        if claimed:
            self.pollers.claimed(c.token.queue for c in claimed)
        config = self.instances.config
        return pb.PollTasksResponse(tasks=[convert.activation_to_pb(c, config) for c in claimed])

    async def complete_task(self, request: pb.CompleteTaskRequest) -> pb.ReportResult:
        """A step's result: the new context, or a predicate's value."""
        validate_name(request.task_id, "task_id")
        which = request.WhichOneof("result")
        ctx: dict[str, Any] | None = None
        value: bool | None = None
        if which == "context_json":
            ctx = decode_object(request.context_json, "context_json", None)
        elif which == "predicate_value":
            value = request.predicate_value
        status = await self.instances.complete(request.task_id, request.lease_owner, ctx, value)
        return pb.ReportResult(instance_status=status)

    async def fail_task(self, request: pb.FailTaskRequest) -> pb.ReportResult:
        """A step failed; retried by its policy unless not ``retryable``."""
        validate_name(request.task_id, "task_id")
        status = await self.instances.fail(
            request.task_id,
            request.lease_owner,
            request.message or "step failed",
            request.retryable,
            traceback=request.traceback,
            release=request.release,
        )
        return pb.ReportResult(instance_status=status)

    async def heartbeat_task(self, request: pb.HeartbeatTaskRequest) -> pb.ReportResult:
        """Extend a lease."""
        validate_name(request.task_id, "task_id")
        status, expires = await self.instances.heartbeat(request.task_id, request.lease_owner)
        return pb.ReportResult(instance_status=status, lease_expires_at=expires)

    async def advance_run(self, request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
        """Apply the steps of a local run (LOCAL_SYNC / LOCAL_ASYNC)."""
        validate_name(request.task_id, "task_id")
        if request.steps_batch and len(request.steps):
            raise InvalidArgument("AdvanceRun sets both steps and steps_batch; send one of them")
        steps: Sequence[StepRecord]
        if request.steps_batch:
            check_depth(request.steps_batch, "steps_batch")
            try:
                steps = _fast.decode_batch(request.steps_batch)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
            except RecursionError:  # unbalanced brackets check_depth left to the decoder
                raise too_deep("steps_batch") from None
        else:
            steps = [convert.step_record_from_pb(s) for s in request.steps]
        outcome = await self.instances.advance_run(
            request.task_id,
            request.lease_owner,
            steps,
            request.final,
            request.handback_reason,
            request.failure_traceback,
        )
        if request.final or outcome.token_status != TokenStatus.RUNNING:
            self.metrics.observe_run(outcome.applied_steps, request.handback_reason)
        return pb.AdvanceRunResult(
            instance_status=outcome.instance_status,
            lease_expires_at=outcome.lease_expires_at,
            parked_task_id=outcome.token_id,
            token_status=outcome.token_status,
            applied_steps=outcome.applied_steps,
        )
