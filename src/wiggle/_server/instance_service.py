"""The service's definition and instance RPC handlers: register, start, read, list, act on instances.

A mixin of ``ControlPlane`` (wiggle/_server/service.py), which routes the RPCs here; requests are
validated at this edge before the instance layer (wiggle/_server/instances.py) sees them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from .. import _tracing as tracing
from .._engine.start_options import check_start_options
from .._engine.state import FINISHED_INSTANCE_STATUSES, InstanceStatus
from .._limits import MAX_REASON_CHARS, check_text
from .._model import MAX_NAME_LENGTH, definition_from_json, validate_name
from .._rpc import wiggle_pb2 as pb
from .._storage.base import CONTEXT_FIELD_PATTERN, InstanceQuery
from .._storage.queue_limits import QueueLimit, check_queue_limit
from .._wire import convert
from .._wire.payload import check_depth, decode_object
from ..errors import InvalidArgument
from .faults import rpc_error
from .instances import Instances
from .operator import attributed, caller_identity
from .pollers import Pollers
from .schedules import correlation_of
from .service_limits import ServiceLimits, optional_name, wait_seconds

__all__ = ["InstanceHandlers"]

log = logging.getLogger("wiggle.server")

#: A valid page token is an instance id (the last of the previous page), as
#: wiggle/_engine/state.py new_instance_id makes them.
PAGE_TOKEN_PATTERN = re.compile(r"wi-[0-9a-f]{24}")
LIST_STATUSES = (InstanceStatus.SCHEDULED, InstanceStatus.RUNNING, *sorted(FINISHED_INSTANCE_STATUSES))


MAX_CONTEXT_FILTERS = 8
MAX_SEARCH_TEXT = 200


def search_filters(request: pb.ListInstancesRequest) -> dict[str, Any]:
    """ListInstances' search fields (node, text, context, top_level) checked, as InstanceQuery's."""
    optional_name(request.node, "node")
    if len(request.text) > MAX_SEARCH_TEXT or "\x00" in request.text:
        raise InvalidArgument(f"text must be at most {MAX_SEARCH_TEXT} characters without U+0000")
    if len(request.context) > MAX_CONTEXT_FILTERS:
        raise InvalidArgument(f"context names {len(request.context)} fields; at most {MAX_CONTEXT_FILTERS}")
    for field, value in request.context.items():
        if not CONTEXT_FIELD_PATTERN.fullmatch(field):
            raise InvalidArgument(
                f"context field {field[:70]!r} must be a top-level field's name (letters, digits, '_')"
            )
        if "\x00" in value or len(value) > MAX_SEARCH_TEXT:
            raise InvalidArgument(
                f"context value of {field} must be at most {MAX_SEARCH_TEXT} characters without U+0000"
            )
    return {
        "node": request.node,
        "text": request.text,
        "context": tuple(sorted(request.context.items())),
        "top_level": request.top_level,
    }


def list_correlation(request: pb.ListInstancesRequest) -> str:
    """The correlation id a list asks for: its own, or its schedule's (a schedule's instances
    carry ``schedule:<id>``, wiggle/_server/schedules.py); both given must agree."""
    correlation_id = request.correlation_id
    if request.schedule_id:
        validate_name(request.schedule_id, "schedule_id")
        wanted = correlation_of(request.schedule_id)
        if correlation_id and correlation_id != wanted:
            raise InvalidArgument(
                f"schedule_id {request.schedule_id!r} and correlation_id {correlation_id!r} disagree "
                f"(the schedule's instances carry {wanted!r}); give one of them"
            )
        return wanted
    return correlation_id


class InstanceHandlers:
    """The definition and instance RPCs (RegisterWorkflow ... ListQueues) over ``instances``."""

    instances: Instances
    limits: ServiceLimits
    pollers: Pollers

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
        optional_name(request.version, "version")
        return convert.workflow_to_pb(await self.instances.get_workflow(request.name, request.version))

    async def list_workflows(self, request: pb.ListWorkflowsRequest) -> pb.ListWorkflowsResponse:
        """Every registered version (of one name)."""
        optional_name(request.name, "name")
        records = await self.instances.list_workflows(request.name)
        return pb.ListWorkflowsResponse(workflows=[convert.workflow_to_pb(r) for r in records])

    async def start_instance(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        """Start an instance."""
        validate_name(request.workflow, "workflow")
        optional_name(request.version, "version")
        optional_name(request.correlation_id, "correlation_id")
        optional_name(request.request_id, "request_id")
        ctx = decode_object(request.context_json, "context_json", self.limits.max_payload_bytes)
        options = check_start_options(
            self.instances.now(),
            priority=request.priority,
            start_at=request.start_at,
            start_delay=request.start_delay_millis,
            dedup_key=request.dedup_key,
            dedup_window=request.dedup_window_millis,
            timeout=request.timeout_millis if request.HasField("timeout_millis") else None,
        )
        attributes = {"wiggle.workflow": request.workflow}
        with tracing.span("wiggle.StartInstance", tracing.SERVER, tracing.incoming(), attributes):
            view, deduplicated = await self.instances.start_with(
                request.workflow,
                request.version,
                ctx,
                request.correlation_id,
                request_id=request.request_id,
                traceparent=tracing.traceparent(),
                options=options,
            )
        reply = convert.instance_to_pb(view)
        reply.deduplicated = deduplicated
        return reply

    async def start_each(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        """StartInstances with ``starts``: independent starts coalesced by a client, each one
        validated and started as StartInstance would be, concurrently (so the PostgreSQL store
        commits them together: wiggle/_storage/postgres/start_commit.py), and answered alone."""
        count = len(request.starts)
        if not count <= self.limits.max_start_batch:
            raise InvalidArgument(
                f"starts holds {count} starts; send at most {self.limits.max_start_batch} per call"
            )
        mixed = [field.name for field, _ in request.ListFields() if field.name != "starts"]
        if mixed:
            raise InvalidArgument(
                f"StartInstances with starts must leave {', '.join(mixed)} empty: each start carries "
                "its own workflow, context and options"
            )
        outcomes = await asyncio.gather(
            *(self.start_instance(start) for start in request.starts), return_exceptions=True
        )
        reply = pb.StartInstancesResponse()
        for outcome in outcomes:
            result = reply.results.add()
            if isinstance(outcome, pb.InstanceInfo):
                result.instance.CopyFrom(outcome)
            elif isinstance(outcome, Exception):
                result.error.CopyFrom(rpc_error(outcome, "StartInstances"))
            else:  # a BaseException (cancelled): the call itself ends
                raise outcome
        return reply

    async def start_instances(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        """Start one instance per context, committed in large batches; the ids in order (or,
        with ``starts``, ``start_each``)."""
        if request.starts:
            return await self.start_each(request)
        validate_name(request.workflow, "workflow")
        optional_name(request.version, "version")
        optional_name(request.correlation_id, "correlation_id")
        optional_name(request.request_id, "request_id")
        count = len(request.contexts_json)
        if not 1 <= count <= self.limits.max_start_batch:
            raise InvalidArgument(
                f"contexts_json holds {count} contexts; send between 1 and {self.limits.max_start_batch} "
                "per call (the clients' start_many sends long lists in chunks)"
            )
        if request.first_index < 0:
            raise InvalidArgument(f"first_index must be 0 or more, got {request.first_index}")
        options = check_start_options(
            self.instances.now(),
            priority=request.priority,
            start_at=request.start_at,
            start_delay=request.start_delay_millis,
            timeout=request.timeout_millis if request.HasField("timeout_millis") else None,
        )
        limit = self.limits.max_payload_bytes
        contexts = [
            decode_object(data, f"contexts_json[{i}]", limit) for i, data in enumerate(request.contexts_json)
        ]
        request_ids: list[str] = []
        if request.request_id:
            first = request.first_index
            # Context i is stored under request id "<request_id>:<i>", itself a name: at most
            # MAX_NAME_LENGTH characters, like the request id of a single start.
            longest = len(request.request_id) + 1 + len(str(first + count - 1))
            if longest > MAX_NAME_LENGTH:
                raise InvalidArgument(
                    f"request_id is {len(request.request_id)} characters; the request ids of this call's "
                    f"contexts ('<request_id>:<index>', up to index {first + count - 1}) would be up to "
                    f"{longest} characters, and the limit is {MAX_NAME_LENGTH}: use a shorter request_id"
                )
            request_ids = [f"{request.request_id}:{first + i}" for i in range(count)]
        version, ids = await self.instances.start_many(
            request.workflow, request.version, contexts, request.correlation_id, request_ids, options
        )
        return pb.StartInstancesResponse(instance_ids=ids, version=version)

    async def get_instance(self, request: pb.GetInstanceRequest) -> pb.InstanceInfo:
        """An instance now, or once finished within ``wait_millis``."""
        validate_name(request.instance_id, "instance_id")
        wait = wait_seconds(request.wait_millis, self.limits)
        return convert.instance_to_pb(await self.instances.wait_finished(request.instance_id, wait))

    async def list_instances(self, request: pb.ListInstancesRequest) -> pb.ListInstancesResponse:
        """A page of instances, newest first."""
        limits = self.limits
        size = request.page_size or limits.default_page_size
        if not 1 <= size <= limits.max_page_size:
            raise InvalidArgument(f"page_size must be between 1 and {limits.max_page_size}, got {size}")
        if request.status and request.status not in LIST_STATUSES:
            raise InvalidArgument(
                f"status {request.status!r} is not SCHEDULED, RUNNING, COMPLETED, FAILED or CANCELLED"
            )
        optional_name(request.workflow, "workflow")
        optional_name(request.correlation_id, "correlation_id")
        optional_name(request.parent_id, "parent_id")
        if request.parent_id and request.top_level:
            raise InvalidArgument(
                "parent_id asks for a parent's sub-workflow children and top_level leaves children out; "
                "give one of them"
            )
        if request.page_token and not PAGE_TOKEN_PATTERN.fullmatch(request.page_token):
            raise InvalidArgument(
                f"page_token {request.page_token[:40]!r} is not a page token; pass the next_page_token "
                "of the previous page, or none for the first page"
            )
        query = InstanceQuery(
            workflow=request.workflow,
            status=request.status,
            correlation_id=list_correlation(request),
            parent_id=request.parent_id,
            created_after=request.created_after,
            created_before=request.created_before,
            page_size=size,
            page_token=request.page_token,
            with_context=not request.omit_context,
            **search_filters(request),
        )
        views, next_token = await self.instances.list_instances(query)
        return pb.ListInstancesResponse(
            instances=[
                convert.instance_to_pb(v, with_tokens=False, with_context=query.with_context) for v in views
            ],
            next_page_token=next_token,
        )

    async def cancel_instance(self, request: pb.CancelInstanceRequest) -> pb.CancelInstanceResponse:
        """Cancel a running instance; a finished one is left as it is."""
        validate_name(request.instance_id, "instance_id")
        check_text(request.reason, "reason", MAX_REASON_CHARS)
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
        # with authentication on, the completion is recorded in the history under the caller's
        # identity, as the dashboard's is; without it, logged only, as before (operator.py)
        actor = caller_identity()
        view = await self.instances.complete_user_task(request.instance_id, request.task_name, payload, actor)
        return convert.instance_to_pb(view)

    async def signal_instance(self, request: pb.SignalInstanceRequest) -> pb.SignalInstanceResponse:
        """Send a named signal to an instance: delivered to a waiting token or buffered."""
        validate_name(request.instance_id, "instance_id")
        validate_name(request.name, "name (the signal name)")
        if request.signal_id:
            validate_name(request.signal_id, "signal_id")
        sender = attributed(request.sender, "sender")  # "billing as app" under authentication
        data = decode_object(request.data_json, "data_json", self.limits.max_payload_bytes)
        outcome, view = await self.instances.signal(
            request.instance_id, request.name, data, request.signal_id, sender
        )
        return pb.SignalInstanceResponse(instance=convert.instance_to_pb(view), outcome=outcome)

    async def retry_instance(self, request: pb.RetryInstanceRequest) -> pb.InstanceInfo:
        """Resume a FAILED instance from the steps that failed, or from a named node."""
        validate_name(request.instance_id, "instance_id")
        if request.from_node:
            validate_name(request.from_node, "from_node")
        requested_by = attributed(request.requested_by, "requested_by")  # "alice@host as ops"
        context: dict[str, Any] | None = None
        if request.replace_context:
            context = decode_object(request.context_json, "context_json", self.limits.max_payload_bytes)
        view = await self.instances.retry(request.instance_id, request.from_node, context, requested_by)
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
        held = self.instances.delivery.unrunnable.holds
        pollers = [
            (p.worker_id, p.last_seen, p.queues, {q: held(p.worker_id, q) for q in p.queues})
            for p in self.pollers.snapshot()
        ]
        return convert.queues_to_pb(stats, pollers, now)

    async def set_queue_limit(self, request: pb.QueueLimit) -> pb.QueueLimit:
        """Set (or remove) a queue's limits (docs/flow-control.md#queue-limits)."""
        limit = QueueLimit(
            queue=request.queue,
            max_running=request.max_running,
            rate_max=request.rate_max,
            rate_period_millis=request.rate_period_millis,
        )
        await self.instances.store.set_queue_limit(check_queue_limit(limit))
        log.info(
            "queue %s limits set: max_running=%d, rate %d per %d ms",
            limit.queue,
            limit.max_running,
            limit.rate_max,
            limit.rate_period_millis,
        )
        return request
