"""The gRPC service: wire messages in, store calls, wire messages out, errors as status codes."""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import msgspec

from .. import _fast
from .._engine.engine import Claimed
from .._engine.state import FINISHED_INSTANCE_STATUSES, HistoryEntry, Token
from .._model import definition_from_json, validate_name
from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._storage.base import InstanceQuery, InstanceView, WorkflowRecord
from .._wire.status import to_grpc, to_wire_number
from ..errors import ErrorCode, InvalidArgument, WiggleError
from .instances import Instances

__all__ = ["ControlPlane", "Metrics"]

log = logging.getLogger("wiggle.server")
_encode = msgspec.json.Encoder().encode
T = TypeVar("T")

MAX_TASKS_PER_POLL = 256


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


def token_info(token: Token) -> pb.TokenInfo:
    """A token as the wire shows it."""
    return pb.TokenInfo(
        token_id=token.id,
        node_id=token.node_id,
        status=token.status,
        attempt=token.attempt,
        lease_owner=token.lease_owner,
        lease_expires_at=token.lease_expires_at,
        available_at=token.available_at,
        last_error=token.last_error,
        local_run_owner=token.local_run_owner,
        local_run_steps=token.local_run_steps,
        queue=token.queue,
    )


class ControlPlane(pb_grpc.WiggleControlPlaneServicer):
    """WiggleControlPlane over the instance layer."""

    def __init__(self, instances: Instances, metrics: Metrics | None = None) -> None:
        self.instances = instances
        self.engine = instances.engine
        self.metrics = metrics or Metrics()
        self._wrap_methods()

    # ------------------------------------------------------------------ error mapping

    def _wrap_methods(self) -> None:
        for name in (
            "RegisterWorkflow",
            "GetWorkflow",
            "ListWorkflows",
            "StartInstance",
            "GetInstance",
            "ListInstances",
            "CancelInstance",
            "CompleteUserTask",
            "GetHistory",
            "PollTasks",
            "CompleteTask",
            "FailTask",
            "HeartbeatTask",
            "AdvanceRun",
        ):
            setattr(self, name, self._guard(name, getattr(self, name)))

    def _guard(
        self, name: str, method: Callable[[Any, grpc.aio.ServicerContext], Awaitable[T]]
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[T]]:
        @functools.wraps(method)
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> T:
            self.metrics.rpc_calls[name] += 1
            try:
                return await method(request, context)
            except WiggleError as exc:
                self.metrics.rpc_errors[name] += 1
                await context.abort(to_grpc(exc.code), str(exc))
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception:
                self.metrics.rpc_errors[name] += 1
                incident = uuid.uuid4().hex[:12]
                log.exception("internal error %s in %s", incident, name)
                await context.abort(
                    grpc.StatusCode.INTERNAL, f"internal error (incident {incident}); see the server log"
                )
            raise AssertionError("unreachable")  # pragma: no cover

        return guarded

    async def dispatch(self, name: str, request: Any) -> Any:
        """Call a method outside a gRPC context (the WorkerSession stream); WiggleError propagates."""
        self.metrics.rpc_calls[name] += 1
        try:
            return await getattr(self, "_" + name)(request)
        except WiggleError:
            self.metrics.rpc_errors[name] += 1
            raise

    # ------------------------------------------------------------------ conversions

    def _workflow_info(
        self, record: WorkflowRecord, created: bool = False, body: bool = True
    ) -> pb.WorkflowInfo:
        return pb.WorkflowInfo(
            name=record.loaded.definition.name,
            version=record.loaded.version,
            definition_json=record.loaded.json if body else b"",
            registered_at=record.registered_at,
            created=created,
        )

    def _instance_info(self, view: InstanceView, with_tokens: bool = True) -> pb.InstanceInfo:
        inst = view.instance
        return pb.InstanceInfo(
            instance_id=inst.id,
            workflow=inst.workflow,
            version=inst.version,
            status=inst.status,
            context_json=_encode(inst.context),
            correlation_id=inst.correlation_id,
            reason=inst.reason,
            error=inst.error,
            created_at=inst.created_at,
            updated_at=inst.updated_at,
            finished_at=inst.finished_at,
            tokens=[token_info(t) for t in view.tokens] if with_tokens else [],
        )

    # ------------------------------------------------------------------ definitions

    async def RegisterWorkflow(self, request: pb.RegisterWorkflowRequest, context: Any) -> pb.WorkflowInfo:
        if len(request.definition_json) > self.engine.config.max_payload_bytes:
            raise InvalidArgument("definition_json exceeds the payload limit")
        definition = definition_from_json(request.definition_json)
        record, created = await self.instances.register(definition)
        if created:
            log.info("registered workflow %s version %s", definition.name, record.loaded.version)
        return self._workflow_info(record, created)

    async def GetWorkflow(self, request: pb.GetWorkflowRequest, context: Any) -> pb.WorkflowInfo:
        return self._workflow_info(await self.instances.get_workflow(request.name, request.version))

    async def ListWorkflows(self, request: pb.ListWorkflowsRequest, context: Any) -> pb.ListWorkflowsResponse:
        records = await self.instances.list_workflows(request.name)
        return pb.ListWorkflowsResponse(workflows=[self._workflow_info(r) for r in records])

    # ------------------------------------------------------------------ instances

    async def StartInstance(self, request: pb.StartInstanceRequest, context: Any) -> pb.InstanceInfo:
        validate_name(request.workflow, "workflow")
        if request.correlation_id:
            validate_name(request.correlation_id, "correlation_id")
        ctx = self.engine.decode_object(request.context_json, "context_json")
        view = await self.instances.start(request.workflow, request.version, ctx, request.correlation_id)
        return self._instance_info(view)

    async def GetInstance(self, request: pb.GetInstanceRequest, context: Any) -> pb.InstanceInfo:
        view = await self.instances.wait_finished(request.instance_id, request.wait_millis / 1000)
        return self._instance_info(view)

    async def ListInstances(self, request: pb.ListInstancesRequest, context: Any) -> pb.ListInstancesResponse:
        size = request.page_size or 50
        if not 1 <= size <= 1000:
            raise InvalidArgument(f"page_size must be between 1 and 1000, got {size}")
        if request.status and request.status not in ("RUNNING", *FINISHED_INSTANCE_STATUSES):
            raise InvalidArgument(f"status {request.status!r} is not RUNNING, COMPLETED, FAILED or CANCELLED")
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
            instances=[self._instance_info(v, with_tokens=False) for v in views], next_page_token=next_token
        )

    async def CancelInstance(
        self, request: pb.CancelInstanceRequest, context: Any
    ) -> pb.CancelInstanceResponse:
        view, changed = await self.instances.cancel(request.instance_id, request.reason or "cancelled")
        message = "cancelled" if changed else f"instance is already {view.instance.status}; nothing changed"
        return pb.CancelInstanceResponse(instance=self._instance_info(view), changed=changed, message=message)

    async def CompleteUserTask(self, request: pb.CompleteUserTaskRequest, context: Any) -> pb.InstanceInfo:
        validate_name(request.task_name, "task_name")
        payload = self.engine.decode_object(request.payload_json, "payload_json")
        view = await self.instances.complete_user_task(request.instance_id, request.task_name, payload)
        return self._instance_info(view)

    async def GetHistory(self, request: pb.GetHistoryRequest, context: Any) -> pb.GetHistoryResponse:
        entries = await self.instances.history(request.instance_id)
        return pb.GetHistoryResponse(entries=[_history_entry(e) for e in entries])

    # ------------------------------------------------------------------ workers

    async def PollTasks(self, request: pb.PollTasksRequest, context: Any) -> pb.PollTasksResponse:
        return await self._PollTasks(request)

    async def _PollTasks(self, request: pb.PollTasksRequest) -> pb.PollTasksResponse:
        validate_name(request.worker_id, "worker_id")
        queues = list(request.queues)
        if not queues:
            raise InvalidArgument("PollTasks names no queues; list the queues this worker serves")
        for q in queues:
            validate_name(q, "queue")
        max_tasks = request.max_tasks or 1
        if not 1 <= max_tasks <= MAX_TASKS_PER_POLL:
            raise InvalidArgument(f"max_tasks must be between 1 and {MAX_TASKS_PER_POLL}, got {max_tasks}")
        claimed = await self.instances.poll(request.worker_id, queues, max_tasks, request.wait_millis / 1000)
        return pb.PollTasksResponse(tasks=[self._activation(c) for c in claimed])

    def _activation(self, claimed: Claimed) -> pb.TaskActivation:
        token = claimed.token
        inst = claimed.instance
        return pb.TaskActivation(
            task_id=token.id,
            instance_id=inst.id,
            workflow=inst.workflow,
            version=inst.version,
            node_id=token.node_id,
            attempt=token.attempt,
            context_json=_encode(claimed.context),
            lease_owner=token.lease_owner,
            lease_expires_at=token.lease_expires_at,
            queue=token.queue,
            kind=token.kind,
            correlation_id=inst.correlation_id,
            execution_mode=claimed.execution_mode,
            max_local_steps=claimed.max_local_steps,
            lease_millis=self.engine.config.lease_millis,
            max_payload_bytes=self.engine.config.max_payload_bytes,
        )

    async def CompleteTask(self, request: pb.CompleteTaskRequest, context: Any) -> pb.ReportResult:
        return await self._CompleteTask(request)

    async def _CompleteTask(self, request: pb.CompleteTaskRequest) -> pb.ReportResult:
        which = request.WhichOneof("result")
        ctx: dict[str, Any] | None = None
        value: bool | None = None
        if which == "context_json":
            ctx = self._decode_result(request.context_json)
        elif which == "predicate_value":
            value = request.predicate_value
        status = await self.instances.complete(request.task_id, request.lease_owner, ctx, value)
        return pb.ReportResult(instance_status=status)

    def _decode_result(self, data: bytes) -> dict[str, Any]:
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise InvalidArgument(f"context_json is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidArgument(f"context_json must be a JSON object, got {type(value).__name__}")
        return value

    async def FailTask(self, request: pb.FailTaskRequest, context: Any) -> pb.ReportResult:
        return await self._FailTask(request)

    async def _FailTask(self, request: pb.FailTaskRequest) -> pb.ReportResult:
        status = await self.instances.fail(
            request.task_id, request.lease_owner, request.message or "step failed", request.retryable
        )
        return pb.ReportResult(instance_status=status)

    async def HeartbeatTask(self, request: pb.HeartbeatTaskRequest, context: Any) -> pb.ReportResult:
        return await self._HeartbeatTask(request)

    async def _HeartbeatTask(self, request: pb.HeartbeatTaskRequest) -> pb.ReportResult:
        status, expires = await self.instances.heartbeat(request.task_id, request.lease_owner)
        return pb.ReportResult(instance_status=status, lease_expires_at=expires)

    async def AdvanceRun(self, request: pb.AdvanceRunRequest, context: Any) -> pb.AdvanceRunResult:
        return await self._AdvanceRun(request)

    async def _AdvanceRun(self, request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
        if request.steps_batch and len(request.steps):
            raise InvalidArgument("AdvanceRun sets both steps and steps_batch; send one of them")
        if request.steps_batch:
            try:
                steps = _fast.decode_batch(request.steps_batch)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
        else:
            steps = [self._step_from_pb(i, s) for i, s in enumerate(request.steps)]
        outcome = await self.instances.advance_run(
            request.task_id, request.lease_owner, steps, request.final, request.handback_reason
        )
        if request.final or outcome.token_status != "RUNNING":
            self.metrics.observe_run(outcome.applied_steps, request.handback_reason)
        return pb.AdvanceRunResult(
            instance_status=outcome.instance_status,
            lease_expires_at=outcome.lease_expires_at,
            parked_task_id=outcome.token_id,
            token_status=outcome.token_status,
            applied_steps=outcome.applied_steps,
        )

    def _step_from_pb(self, index: int, step: pb.StepResult) -> tuple[Any, ...]:
        which = step.WhichOneof("outcome")
        if which == "context_json":
            return ("C", step.node_id, self._decode_result(step.context_json))
        if which == "predicate_value":
            return ("P", step.node_id, step.predicate_value)
        if which == "failure":
            return ("F", step.node_id, step.failure.message or "step failed", step.failure.retryable)
        return ("T", step.node_id, {}, [])

    # ------------------------------------------------------------------ the worker stream

    async def WorkerSession(
        self, request_iterator: AsyncIterator[pb.WorkerBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServerBatch]:
        """Serve multiplexed worker messages; replies go out as each request finishes."""
        replies: asyncio.Queue[pb.ServerMessage | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def handle(message: pb.WorkerMessage) -> None:
            body = message.WhichOneof("body")
            rid = message.request_id
            try:
                if body == "poll":
                    result = await self.dispatch("PollTasks", message.poll)
                    reply = pb.ServerMessage(request_id=rid, tasks=result)
                elif body == "complete":
                    reply = pb.ServerMessage(
                        request_id=rid, report=await self.dispatch("CompleteTask", message.complete)
                    )
                elif body == "fail":
                    reply = pb.ServerMessage(
                        request_id=rid, report=await self.dispatch("FailTask", message.fail)
                    )
                elif body == "heartbeat":
                    reply = pb.ServerMessage(
                        request_id=rid, report=await self.dispatch("HeartbeatTask", message.heartbeat)
                    )
                elif body == "advance":
                    reply = pb.ServerMessage(
                        request_id=rid, advanced=await self.dispatch("AdvanceRun", message.advance)
                    )
                else:
                    raise InvalidArgument("WorkerMessage has no body")
            except WiggleError as exc:
                reply = pb.ServerMessage(
                    request_id=rid, error=pb.RpcError(code=to_wire_number(exc.code), message=str(exc))
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                incident = uuid.uuid4().hex[:12]
                log.exception("internal error %s in WorkerSession", incident)
                reply = pb.ServerMessage(
                    request_id=rid,
                    error=pb.RpcError(
                        code=to_wire_number(ErrorCode.INTERNAL),
                        message=f"internal error (incident {incident}); see the server log",
                    ),
                )
            replies.put_nowait(reply)

        by_id: dict[int, asyncio.Task[None]] = {}

        def forget(task: asyncio.Task[None], rid: int) -> None:
            pending.discard(task)
            if by_id.get(rid) is task:
                del by_id[rid]

        async def read() -> None:
            try:
                async for frame in request_iterator:
                    for message in frame.messages:
                        if message.WhichOneof("body") == "cancel":
                            doomed = by_id.get(message.cancel.request_id)
                            if doomed is not None:
                                doomed.cancel()
                            continue
                        task = asyncio.ensure_future(handle(message))
                        pending.add(task)
                        by_id[message.request_id] = task
                        task.add_done_callback(functools.partial(forget, rid=message.request_id))
            finally:
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                replies.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            done = False
            while not done:
                reply = await replies.get()
                if reply is None:
                    break
                frame = [reply]
                while not replies.empty():  # every reply ready now goes out in the same frame
                    more = replies.get_nowait()
                    if more is None:
                        done = True
                        break
                    frame.append(more)
                yield pb.ServerBatch(messages=frame)
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()


def _history_entry(e: HistoryEntry) -> pb.HistoryEntry:
    return pb.HistoryEntry(
        token_id=e.token_id,
        node_id=e.node_id,
        attempt=e.attempt,
        worker_id=e.worker_id,
        started_at=e.started_at,
        ended_at=e.ended_at,
        outcome=e.outcome,
        error=e.error,
        kind=e.kind,
    )
