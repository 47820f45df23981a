"""Replies -> the client's value types (wiggle/_client/types.py), each in exactly one place.

The client's half of the wire edge. It imports no engine or store module, so importing
``wiggle.client`` stays light (tests/test_exports.py checks ``sys.modules``); the server's half
is wiggle/_wire/convert.py and wiggle/_wire/schedules.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._client.types import (
    HistoryEntry,
    InstanceInfo,
    PendingSignalInfo,
    QueueInfo,
    QueueWorker,
    ScheduleInfo,
    SignalResult,
    TokenInfo,
    WorkflowInfo,
)
from .._model import WorkflowDefinition
from .._rpc import wiggle_pb2 as pb
from .._status import InstanceStatus, TokenStatus

__all__ = [
    "token_from_pb",
    "instance_from_pb",
    "history_from_pb",
    "workflow_from_pb",
    "signal_result_from_pb",
    "queue_from_pb",
    "schedule_from_pb",
]


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
        priority=msg.priority,
        start_at=msg.start_at,
        dedup_key=msg.dedup_key,
        dedup_window_millis=msg.dedup_window_millis,
        deduplicated=msg.deduplicated,
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
        limit_held=msg.limit_held,
        limit_waiting=msg.limit_waiting,
        max_running=msg.max_running,
        rate_max=msg.rate_max,
        rate_period_millis=msg.rate_period_millis,
        rate_limited_until=msg.rate_limited_until,
    )


def schedule_from_pb(msg: pb.ScheduleInfo) -> ScheduleInfo:
    """The client's view of a schedule."""
    spec = msg.spec
    context: dict[str, Any] = msgspec.json.decode(spec.context_json) if spec.context_json else {}
    return ScheduleInfo(
        schedule_id=spec.id,
        workflow=spec.workflow,
        version=spec.version,
        interval_seconds=spec.interval_millis / 1000 if spec.interval_millis else None,
        cron=spec.cron,
        timezone=spec.timezone,
        context=context,
        overlap=spec.overlap,
        catchup=spec.catchup,
        catchup_limit=spec.catchup_limit,
        paused=spec.paused,
        priority=spec.priority,
        created_at=msg.created_at,
        updated_at=msg.updated_at,
        next_tick_at=msg.next_tick_at,
        last_tick_at=msg.last_tick_at,
        last_instance_id=msg.last_instance_id,
        buffered_tick_at=msg.buffered_tick_at,
        fired=msg.fired,
        skipped=msg.skipped,
        next_fire_times=tuple(msg.next_fire_times),
    )
