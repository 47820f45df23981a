"""Protobuf messages to and from Wiggle's types, each in exactly one place.

Server side: engine state (wiggle/_engine/state.py) and store records -> protobuf replies.
Client side: protobuf replies -> the client's value types (wiggle/_client/types.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from .._client.types import (
    HistoryEntry,
    InstanceInfo,
    PendingSignalInfo,
    QueueInfo,
    QueueWorker,
    SignalResult,
    TokenInfo,
    WorkflowInfo,
)
from .._engine.engine import Claimed, EngineConfig
from .._engine.records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone
from .._engine.state import HistoryEntry as StateHistoryEntry
from .._engine.state import Token
from .._model import WorkflowDefinition
from .._rpc import wiggle_pb2 as pb
from .._status import InstanceStatus, TokenStatus
from .._storage.base import InstanceView, WorkflowRecord
from .._storage.ops import QueueStat
from .payload import decode_object

__all__ = [
    "queues_to_pb",
    "queue_from_pb",
    "token_to_pb",
    "instance_to_pb",
    "history_to_pb",
    "workflow_to_pb",
    "activation_to_pb",
    "token_from_pb",
    "instance_from_pb",
    "history_from_pb",
    "workflow_from_pb",
    "step_record_from_pb",
    "signal_result_from_pb",
    "encode_json",
]

encode_json = msgspec.json.Encoder().encode


# ---------------------------------------------------------------------------- server: state -> wire


def token_to_pb(token: Token) -> pb.TokenInfo:
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
        child_id=token.child_id,
    )


def instance_to_pb(view: InstanceView, with_tokens: bool = True) -> pb.InstanceInfo:
    """An instance (and its active tokens unless ``with_tokens`` is False, as in lists)."""
    inst = view.instance
    return pb.InstanceInfo(
        instance_id=inst.id,
        workflow=inst.workflow,
        version=inst.version,
        status=inst.status,
        context_json=encode_json(inst.context),
        correlation_id=inst.correlation_id,
        reason=inst.reason,
        error=inst.error,
        created_at=inst.created_at,
        updated_at=inst.updated_at,
        finished_at=inst.finished_at,
        tokens=[token_to_pb(t) for t in view.tokens] if with_tokens else [],
        schedule_id=inst.schedule_id,
        schedule_tick_at=inst.schedule_tick_at,
        pending_signals=[
            pb.PendingSignal(
                name=s.name, data_json=encode_json(s.data), signal_id=s.signal_id, sent_at=s.sent_at
            )
            for s in inst.signals
        ],
        parent_id=inst.parent_id,
        parent_token_id=inst.parent_token,
        depth=inst.depth,
    )


def history_to_pb(entry: StateHistoryEntry) -> pb.HistoryEntry:
    """One history entry as the wire shows it (the instance id is the request's)."""
    return pb.HistoryEntry(
        token_id=entry.token_id,
        node_id=entry.node_id,
        attempt=entry.attempt,
        worker_id=entry.worker_id,
        started_at=entry.started_at,
        ended_at=entry.ended_at,
        outcome=entry.outcome,
        error=entry.error,
        kind=entry.kind,
        child_id=entry.child_id,
        traceback=entry.traceback,
    )


def workflow_to_pb(record: WorkflowRecord, created: bool = False, body: bool = True) -> pb.WorkflowInfo:
    """A registered version; ``body`` False leaves the definition JSON out."""
    return pb.WorkflowInfo(
        name=record.loaded.definition.name,
        version=record.loaded.version,
        definition_json=record.loaded.json if body else b"",
        registered_at=record.registered_at,
        created=created,
    )


def activation_to_pb(
    claimed: Claimed,
    config: EngineConfig,
    into: RepeatedCompositeFieldContainer[pb.TaskActivation] | None = None,
) -> pb.TaskActivation:
    """A claimed token as the activation a worker runs (the wire's "task", docs/glossary.md#task-wire-only).

    With ``into`` (a PollTasksResponse's ``tasks``) it is made there, in place: passing finished
    activations to the response's constructor would copy each of them again.
    """
    token = claimed.token
    inst = claimed.instance
    make = pb.TaskActivation if into is None else into.add
    return make(
        task_id=claimed.task_id,  # <token>@<claim>, the fence every report names (docs/semantics.md#fencing)
        instance_id=inst.id,
        workflow=inst.workflow,
        version=inst.version,
        node_id=token.node_id,
        attempt=token.attempt,
        context_json=encode_json(claimed.context),
        lease_owner=token.lease_owner,
        lease_expires_at=token.lease_expires_at,
        queue=token.queue,
        kind=token.kind,
        correlation_id=inst.correlation_id,
        execution_mode=claimed.execution_mode,
        max_local_steps=claimed.max_local_steps,
        lease_millis=config.lease_millis,
        max_payload_bytes=config.max_payload_bytes,
        traceparent=inst.traceparent,
    )


# ---------------------------------------------------------------------------- client: wire -> values


def token_from_pb(msg: pb.TokenInfo) -> TokenInfo:
    """The client's view of a token."""
    return TokenInfo(
        token_id=msg.token_id,
        node_id=msg.node_id,
        status=TokenStatus(msg.status),
        attempt=msg.attempt,
        queue=msg.queue,
        lease_owner=msg.lease_owner,
        lease_expires_at=msg.lease_expires_at,
        available_at=msg.available_at,
        last_error=msg.last_error,
        local_run_owner=msg.local_run_owner,
        local_run_steps=msg.local_run_steps,
        child_id=msg.child_id,
    )


def instance_from_pb(msg: pb.InstanceInfo) -> InstanceInfo:
    """The client's view of an instance."""
    context: dict[str, Any] = msgspec.json.decode(msg.context_json) if msg.context_json else {}
    return InstanceInfo(
        instance_id=msg.instance_id,
        workflow=msg.workflow,
        version=msg.version,
        status=InstanceStatus(msg.status),
        context=context,
        correlation_id=msg.correlation_id,
        reason=msg.reason,
        error=msg.error,
        created_at=msg.created_at,
        updated_at=msg.updated_at,
        finished_at=msg.finished_at,
        tokens=tuple(token_from_pb(t) for t in msg.tokens),
        schedule_id=msg.schedule_id,
        schedule_tick_at=msg.schedule_tick_at,
        pending_signals=tuple(
            PendingSignalInfo(
                name=s.name,
                data=msgspec.json.decode(s.data_json) if s.data_json else {},
                signal_id=s.signal_id,
                sent_at=s.sent_at,
            )
            for s in msg.pending_signals
        ),
        parent_id=msg.parent_id,
        parent_token_id=msg.parent_token_id,
        depth=msg.depth,
    )


def signal_result_from_pb(msg: pb.SignalInstanceResponse) -> SignalResult:
    """The client's view of a SignalInstance reply."""
    return SignalResult(outcome=msg.outcome, instance=instance_from_pb(msg.instance))


def history_from_pb(msg: pb.HistoryEntry) -> HistoryEntry:
    """The client's view of one history entry."""
    return HistoryEntry(
        token_id=msg.token_id,
        node_id=msg.node_id,
        kind=msg.kind,
        attempt=msg.attempt,
        worker_id=msg.worker_id,
        started_at=msg.started_at,
        ended_at=msg.ended_at,
        outcome=msg.outcome,
        error=msg.error,
        child_id=msg.child_id,
        traceback=msg.traceback,
    )


def workflow_from_pb(msg: pb.WorkflowInfo) -> WorkflowInfo:
    """The client's view of a registered version, with its definition decoded."""
    return WorkflowInfo(
        name=msg.name,
        version=msg.version,
        definition=msgspec.json.decode(msg.definition_json, type=WorkflowDefinition),
        registered_at=msg.registered_at,
        created=msg.created,
    )


# ---------------------------------------------------------------------------- server: wire -> step records


def step_record_from_pb(step: pb.StepResult) -> StepRecord:
    """The step record (wiggle/_engine/records.py) of one unbatched AdvanceRun step."""
    which = step.WhichOneof("outcome")
    if which == "context_json":
        return ContextSet(step.node_id, decode_object(step.context_json, "context_json", None))
    if which == "predicate_value":
        return PredicateDone(step.node_id, step.predicate_value)
    if which == "failure":
        return StepFailed(step.node_id, step.failure.message or "step failed", step.failure.retryable)
    return TaskDone(step.node_id, {}, [])


def queues_to_pb(
    stats: Sequence[QueueStat], pollers: Sequence[tuple[str, int, Sequence[str]]], now: int
) -> pb.ListQueuesResponse:
    """The queues as ListQueues answers them: the store's view plus the workers polling each
    (``pollers``: worker id, last seen, queues)."""
    by_name = {s.queue: s for s in stats}
    names = sorted(set(by_name) | {q for _, _, queues in pollers for q in queues})
    out = []
    for name in names:
        s = by_name.get(name) or QueueStat(queue=name)
        out.append(
            pb.QueueInfo(
                queue=name,
                ready=s.ready,
                delayed=s.delayed,
                oldest_ready_age_millis=now - s.oldest_ready_at if s.ready and s.oldest_ready_at else 0,
                running=s.running,
                in_local_run=s.in_local_run,
                workers=[
                    pb.QueueWorker(worker_id=worker, last_seen=seen, in_flight=s.in_flight.get(worker, 0))
                    for worker, seen, queues in pollers
                    if name in queues
                ],
            )
        )
    return pb.ListQueuesResponse(queues=out, now=now)


def queue_from_pb(msg: pb.QueueInfo) -> QueueInfo:
    """The client's view of one queue."""
    return QueueInfo(
        queue=msg.queue,
        ready=msg.ready,
        delayed=msg.delayed,
        oldest_ready_age_millis=msg.oldest_ready_age_millis,
        running=msg.running,
        in_local_run=msg.in_local_run,
        workers=tuple(QueueWorker(w.worker_id, w.last_seen, w.in_flight) for w in msg.workers),
    )
