"""Protobuf messages to and from Wiggle's types, each in exactly one place.

Server side: engine state (wiggle/_engine/state.py) and store records -> protobuf replies, and
the steps of a raw AdvanceRun -> step records. The client's side, protobuf replies -> the
client's value types, is wiggle/_wire/replies.py (it imports no engine or store module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from .._engine.engine import Claimed, EngineConfig
from .._engine.records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone
from .._engine.state import HistoryEntry as StateHistoryEntry
from .._engine.state import InstanceStatus, Token
from .._engine.workflow_limits import waiting_reason
from .._rpc import wiggle_pb2 as pb
from .._storage.base import InstanceView, WorkflowRecord
from .._storage.ops import QueueStat
from .payload import decode_object

__all__ = [
    "queues_to_pb",
    "token_to_pb",
    "instance_to_pb",
    "history_to_pb",
    "workflow_to_pb",
    "activation_to_pb",
    "step_record_from_pb",
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


def instance_to_pb(
    view: InstanceView, with_tokens: bool = True, with_context: bool = True
) -> pb.InstanceInfo:
    """An instance (and its active tokens unless ``with_tokens`` is False, as in lists; its
    context unless ``with_context`` is False: a list that asked without, context_json empty)."""
    inst = view.instance
    return pb.InstanceInfo(
        instance_id=inst.id,
        workflow=inst.workflow,
        version=inst.version,
        status=inst.status,
        context_json=encode_json(inst.context) if with_context else b"",
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
        priority=inst.priority,
        start_at=inst.start_at,
        dedup_key=inst.dedup_key,
        dedup_window_millis=inst.dedup_window,
        concurrency_key=inst.conc_key,
        concurrency_max=inst.conc_max,
        concurrency_waiting_since=inst.conc_since if inst.status == InstanceStatus.SCHEDULED else 0,
        waiting_reason=waiting_reason(inst),
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
        lease_millis=claimed.lease_millis or config.lease_millis,
        deadline_at=token.deadline_at,
        max_payload_bytes=config.max_payload_bytes,
        traceparent=inst.traceparent,
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
    stats: Sequence[QueueStat],
    pollers: Sequence[tuple[str, int, Sequence[str], Mapping[str, Sequence[tuple[str, str, str, float]]]]],
    now: int,
) -> pb.ListQueuesResponse:
    """The queues as ListQueues answers them: the store's view plus the workers polling each
    (``pollers``: worker id, last seen, queues, and by queue the nodes its claims pass over with
    the seconds their holds have left: wiggle/_server/unrunnable.py ``holds``)."""
    by_name = {s.queue: s for s in stats}
    names = sorted(set(by_name) | {q for _, _, queues, _ in pollers for q in queues})
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
                limit_held=s.limit_held,
                limit_waiting=s.limit_waiting,
                max_running=s.max_running,
                rate_max=s.rate_max,
                rate_period_millis=s.rate_period_millis,
                rate_limited_until=s.rate_limited_until,
                rate_waiting=s.rate_waiting,
                rate_waiting_until=s.rate_waiting_until,
                workers=[
                    pb.QueueWorker(
                        worker_id=worker,
                        last_seen=seen,
                        in_flight=s.in_flight.get(worker, 0),
                        passes_over=[
                            pb.PassedOver(workflow=w, version=v, node=n, held_until=now + round(left * 1000))
                            for w, v, n, left in holds.get(name, ())
                        ],
                    )
                    for worker, seen, queues, holds in pollers
                    if name in queues
                ],
            )
        )
    return pb.ListQueuesResponse(queues=out, now=now)
