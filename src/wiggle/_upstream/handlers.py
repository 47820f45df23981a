"""The handlers of upstream Wiggle's service: validate a request, translate it, call the instance layer.

A mixin of ``UpstreamControlPlane`` (wiggle/_upstream/service.py), which routes the RPCs here,
as our own service's handlers are mixins of ``ControlPlane``. Worker reports and signals run as
actions inside the store's transaction (wiggle/_upstream/reports.py); answers are built by
wiggle/_upstream/views.py; docs/upstream.md says what each method does and refuses.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from google.protobuf.message import Message

from .._engine.schedules import Schedule
from .._engine.state import InstanceStatus
from .._limits import MAX_REASON_CHARS, check_text, over_payload
from .._model import validate_name
from .._rpc.upstream import wiggle_pb2 as upb
from .._server.instances import Instances
from .._server.pollers import Pollers
from .._server.service import Metrics
from .._server.service_limits import ServiceLimits, check_task_id, poll_queues, wait_seconds
from .._storage.base import InstanceQuery
from ..errors import InvalidArgument
from . import reports
from .definitions import from_upstream, to_upstream
from .values import context_from_value, dict_to_struct, struct_to_dict
from .versions import Versions
from .views import activation, instance_view, schedule_view, token_view

__all__ = ["UpstreamHandlers", "DEFAULT_LIST_LIMIT", "MAX_RETRY_AFTER_MILLIS"]

log = logging.getLogger("wiggle.server")

#: Upstream's ListInstances ``limit`` when it sends none.
DEFAULT_LIST_LIMIT = 100
#: The longest an empty short poll tells a worker to wait before it polls again.
MAX_RETRY_AFTER_MILLIS = 5_000
STATUSES = tuple(s.value for s in InstanceStatus)


def _payload_size(message: Message, what: str, limit: int) -> None:
    size = message.ByteSize()
    if size > limit:
        raise InvalidArgument(over_payload(what, size, limit))


class UpstreamHandlers:
    """The upstream RPCs (HealthCheck ... AdvanceRun) over ``instances``."""

    instances: Instances
    pollers: Pollers
    metrics: Metrics
    limits: ServiceLimits
    versions: Versions
    node_id: Callable[[], str]
    stopping: Callable[[], bool]

    # ------------------------------------------------------------------ cluster

    async def health_check(self, request: upb.Empty) -> upb.HealthStatus:
        """UP while serving, DOWN while stopping; this node and whether it leads the clock duties."""
        leader = any(n.this_node and n.clock_leader for n in await self.instances.store.cluster_nodes())
        return upb.HealthStatus(
            status="DOWN" if self.stopping() else "UP", node=self.node_id(), leader=leader
        )

    async def get_cluster(self, request: upb.Empty) -> upb.ClusterView:
        """The servers sharing this store (every listed node is alive: the store lists live ones)."""
        nodes = await self.instances.store.cluster_nodes()
        me = next((n for n in nodes if n.this_node), None)
        workers = len(self.pollers.snapshot())
        return upb.ClusterView(
            self=me.node_id if me is not None else self.node_id(),
            leader=bool(me and me.clock_leader),
            members=[
                upb.ClusterMember(
                    id=n.node_id,
                    name=n.address or n.node_id,
                    first_heartbeat=n.connected_since,
                    last_heartbeat=n.last_seen,
                    workers=workers if n.this_node else 0,
                    leader=n.clock_leader,
                    alive=True,
                )
                for n in nodes
            ],
        )

    # ------------------------------------------------------------------ workflows

    async def list_workflows(self, request: upb.Empty) -> upb.WorkflowNames:
        """Every registered workflow's name, sorted."""
        names = sorted({r.loaded.definition.name for r in await self.instances.list_workflows("")})
        return upb.WorkflowNames(workflows=names)

    async def register_workflow(self, request: upb.WorkflowDefinition) -> upb.RegisterWorkflowResult:
        """Translate and register; an explicit ``version`` becomes the alias of our hash."""
        if not request.HasField("definition"):
            raise InvalidArgument("RegisterWorkflow carries no definition")
        _payload_size(request.definition, "definition", self.limits.max_payload_bytes)
        translated = from_upstream(struct_to_dict(request.definition))
        definition = translated.definition
        record, created = await self.instances.register(definition)
        version = record.loaded.version
        if translated.version is not None:
            await self.versions.remember(definition.name, translated.version, version)
            number = translated.version
        else:
            number = await self.versions.int_of(definition.name, version)
        if created:
            log.info("registered workflow %s version %s (upstream %d)", definition.name, version, number)
        return upb.RegisterWorkflowResult(
            name=definition.name, version=str(number), nodes=len(definition.nodes)
        )

    async def get_workflow(self, request: upb.GetWorkflowRequest) -> upb.WorkflowDefinition:
        """The latest version in upstream's JSON form."""
        validate_name(request.name, "name")
        record = await self.instances.get_workflow(request.name)
        number = await self.versions.int_of(request.name, record.loaded.version)
        return upb.WorkflowDefinition(
            definition=dict_to_struct(to_upstream(record.loaded.definition, number))
        )

    # ------------------------------------------------------------------ instances

    async def start_instance(self, request: upb.StartInstanceRequest) -> upb.StartInstanceResult:
        """Start an instance (the latest version unless ``version`` names one)."""
        validate_name(request.workflow, "workflow")
        correlation = request.correlation_id if request.HasField("correlation_id") else ""
        if correlation:
            validate_name(correlation, "correlation_id")
        _payload_size(request.context, "context", self.limits.max_payload_bytes)
        context = context_from_value(request.context)
        version = ""
        if request.HasField("version"):
            version = await self.versions.hash_of(request.workflow, request.version)
        view = await self.instances.start(request.workflow, version, context, correlation)
        return upb.StartInstanceResult(instance_id=view.instance.id, workflow=view.instance.workflow)

    async def get_instance(self, request: upb.InstanceIdRequest) -> upb.InstanceDetail:
        """An instance and its active tokens."""
        validate_name(request.instance_id, "instance_id")
        view = await self.instances.get_instance(request.instance_id)
        inst = view.instance
        number = await self.versions.int_of(inst.workflow, inst.version)
        return upb.InstanceDetail(
            instance=instance_view(inst, number), tokens=[token_view(inst.workflow, t) for t in view.tokens]
        )

    async def list_instances(self, request: upb.ListInstancesRequest) -> upb.InstanceList:
        """The newest ``limit`` instances (of a workflow, in a status)."""
        limit = request.limit or DEFAULT_LIST_LIMIT
        if not 1 <= limit <= self.limits.max_page_size:
            raise InvalidArgument(f"limit must be between 1 and {self.limits.max_page_size}, got {limit}")
        workflow = request.workflow if request.HasField("workflow") else ""
        if workflow:
            validate_name(workflow, "workflow")
        status = request.status if request.HasField("status") else ""
        if status and status not in STATUSES:
            raise InvalidArgument(f"status {status!r} is not one of {', '.join(STATUSES)}")
        views, _ = await self.instances.list_instances(
            InstanceQuery(workflow=workflow, status=status, page_size=limit)
        )
        numbers: dict[tuple[str, str], int] = {}
        out = []
        for view in views:
            inst = view.instance
            key = (inst.workflow, inst.version)
            if key not in numbers:
                numbers[key] = await self.versions.int_of(*key)
            out.append(instance_view(inst, numbers[key]))
        return upb.InstanceList(instances=out)

    async def cancel_instance(self, request: upb.CancelInstanceRequest) -> upb.CancelInstanceResult:
        """Cancel a running instance; a finished one is left as it is. Answers the instance id."""
        validate_name(request.instance_id, "instance_id")
        check_text(request.reason, "reason", MAX_REASON_CHARS)
        view, _ = await self.instances.cancel(request.instance_id, request.reason or "cancelled")
        return upb.CancelInstanceResult(cancelled=view.instance.id)

    async def signal_instance(self, request: upb.SignalRequest) -> upb.Ack:
        """Deliver a signal to a waiting SIGNAL step, as upstream does: not waiting is refused."""
        validate_name(request.instance_id, "instance_id")
        validate_name(request.signal, "signal")
        _payload_size(request.payload, "payload", self.limits.max_payload_bytes)
        data = context_from_value(request.payload)
        await reports.signal_waiting(self.instances, request.instance_id, request.signal, data)
        return upb.Ack(ok=True)

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, request: upb.CreateScheduleRequest) -> upb.ScheduleView:
        """A schedule every ``every_millis`` or on ``cron``; its id is made here."""
        validate_name(request.workflow, "workflow")
        which = request.WhichOneof("cadence")
        if which is None:
            raise InvalidArgument("CreateSchedule needs every_millis or cron")
        _payload_size(request.context, "context", self.limits.max_payload_bytes)
        context = context_from_value(request.context)
        spec = Schedule(
            id=f"sched-{uuid.uuid4().hex[:16]}",
            workflow=request.workflow,
            interval_millis=request.every_millis if which == "every_millis" else 0,
            cron=request.cron if which == "cron" else "",
            context=context,
        )
        return schedule_view(await self.instances.schedules.create(spec))

    async def list_schedules(self, request: upb.Empty) -> upb.ScheduleList:
        """Every schedule."""
        return upb.ScheduleList(schedules=[schedule_view(s) for s in await self.instances.schedules.list()])

    async def delete_schedule(self, request: upb.ScheduleIdRequest) -> upb.Ack:
        """Delete a schedule; NotFound if unknown."""
        validate_name(request.id, "id")
        await self.instances.schedules.delete(request.id)
        return upb.Ack(ok=True)

    # ------------------------------------------------------------------ workers

    async def poll_tasks(self, request: upb.PollRequest) -> upb.TaskList:
        """Claim up to ``max`` steps for ``lease_millis`` (bounded), waiting up to ``wait_millis``."""
        max_tasks = request.max  # upstream's workers always send their free capacity, >= 1
        queues = poll_queues(
            request.worker_id, request.queues, max_tasks, "max (tasks to claim)", self.limits
        )
        if request.lease_millis < 0:
            raise InvalidArgument(
                f"lease_millis must be 0 (the server's) or more, got {request.lease_millis}"
            )
        if self.stopping():  # draining: tell the worker when to come back
            return upb.TaskList(retry_after_millis=1000)
        self.pollers.seen(request.worker_id, queues)
        claimed = await self.instances.poll(
            request.worker_id,
            queues,
            max_tasks,
            wait_seconds(request.wait_millis, self.limits),
            lease_millis=request.lease_millis or None,
        )
        if not claimed:
            return upb.TaskList(retry_after_millis=await self._come_back(request.wait_millis, queues))
        self.pollers.claimed(c.token.queue for c in claimed)
        tasks = []
        for c in claimed:
            number = await self.versions.int_for_task(c.instance.workflow, c.instance.version)
            try:
                tasks.append(activation(c, number))
            except InvalidArgument as exc:  # a context upstream's Value cannot carry (a huge int)
                await self.instances.fail(
                    c.task_id,
                    c.token.lease_owner,
                    f"cannot send this step to an upstream worker: {exc}",
                    False,
                )
        return upb.TaskList(tasks=tasks)

    async def _come_back(self, wait_millis: int, queues: list[str]) -> int:
        """An empty poll's ``retry_after_millis``: after a long poll, 0 (poll again at once); after
        a short one (``wait_millis`` 0), when the next step on these queues is due, if one is
        (a retry's backoff, say), at most MAX_RETRY_AFTER_MILLIS; else 0 (the worker's own idle
        backoff)."""
        if wait_millis > 0:
            return 0
        due = await self.instances.next_ready_at(queues)
        if due is None:
            return 0
        return min(max(due - self.instances.clock.now(), 0), MAX_RETRY_AFTER_MILLIS)

    async def complete_task(self, request: upb.TaskResultRequest) -> upb.Ack:
        """A step's result: a shallow diff (null removes a key), or ``{"value": bool}`` for a predicate.

        A result over the payload limit fails the step for good (as our CompleteTask does with an
        oversize context: Engine.complete), and the worker is answered ``ok``: upstream's worker
        turns a refused CompleteTask into a retryable FailTask, which its default policy (retry
        forever, 1 s apart) would rerun without end.
        """
        check_task_id(request.task_id)
        size, limit = request.result.ByteSize(), self.limits.max_payload_bytes
        if size > limit:
            await reports.fail(
                self.instances,
                request.task_id,
                request.lease_owner,
                over_payload("step result", size, limit),
                False,
            )
            return upb.Ack(ok=True)
        await reports.complete(
            self.instances,
            request.task_id,
            request.lease_owner,
            request.result if request.HasField("result") else None,
        )
        return upb.Ack(ok=True)

    async def fail_task(self, request: upb.TaskFailureRequest) -> upb.Ack:
        """A step failed; retried by its policy unless not ``retryable``."""
        check_task_id(request.task_id)
        await reports.fail(
            self.instances,
            request.task_id,
            request.lease_owner,
            request.message or "step failed",  # kept storable by the engine (wiggle/_limits.py)
            request.retryable,
        )
        return upb.Ack(ok=True)

    async def heartbeat_task(self, request: upb.HeartbeatRequest) -> upb.HeartbeatResult:
        """Extend a lease by ``extend_millis`` (bounded; 0: the server's lease)."""
        check_task_id(request.task_id)
        if request.extend_millis < 0:
            raise InvalidArgument(f"extend_millis must be 0 or more, got {request.extend_millis}")
        expires = await reports.heartbeat(
            self.instances, request.task_id, request.lease_owner, request.extend_millis or None
        )
        return upb.HeartbeatResult(lease_expires_at=expires)

    async def advance_run(self, request: upb.AdvanceRunRequest) -> upb.AdvanceRunResult:
        """A local run's steps (upstream's Java workers in LOCAL_SYNC / LOCAL_ASYNC)."""
        check_task_id(request.task_id)
        _payload_size(request, "AdvanceRun", 4 * self.limits.max_payload_bytes)
        outcome = await reports.advance(
            self.instances, request.task_id, request.lease_owner, list(request.steps), request.final
        )
        if request.final or not outcome.next_task_id:
            self.metrics.observe_run(outcome.applied_steps, "UPSTREAM")
        return upb.AdvanceRunResult(
            instance_status=outcome.instance_status,
            lease_expires_at=outcome.lease_expires_at,
            next_task_id=outcome.next_task_id,
        )
