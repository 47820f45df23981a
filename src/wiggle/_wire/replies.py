"""Replies -> the client's value types (wiggle/_client/types.py), each in exactly one place.

The client's half of the wire edge. It imports no engine or store module, so importing
``wiggle.client`` stays light (tests/test_exports.py checks ``sys.modules``); the server's half
is wiggle/_wire/convert.py and wiggle/_wire/schedules.py.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from .._client.types import (
    HistoryEntry,
    InstanceInfo,
    PassedOver,
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

T = TypeVar("T", bound=msgspec.Struct)


def _copied(cls: type[T], sources: tuple[Any, ...], **given: Any) -> T:
    """A ``cls`` whose fields are ``given`` or, for the rest, copied from the first reply message
    in ``sources`` that has a field of the same name: the client's types name their fields as the
    proto does (a field with no counterpart is an AttributeError, which every reply's test meets).

    Which source each field comes from depends only on the types involved, so it is worked out
    once per call shape (``_PLANS``) instead of by ``hasattr`` on every reply."""
    key = (cls, *map(type, sources), *given)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = tuple(
            (name, next((i for i, s in enumerate(sources) if hasattr(s, name)), 0))
            for name in cls.__struct_fields__
            if name not in given
        )
    for name, at in plan:
        given[name] = getattr(sources[at], name)
    return cls(**given)


#: (the type built, the sources' types, the given fields' names) -> (field, source index) to copy.
_PLANS: dict[tuple[Any, ...], tuple[tuple[str, int], ...]] = {}


def token_from_pb(msg: pb.TokenInfo) -> TokenInfo:
    """The client's view of a token."""
    return _copied(TokenInfo, (msg,), status=TokenStatus(msg.status))


def instance_from_pb(msg: pb.InstanceInfo) -> InstanceInfo:
    """The client's view of an instance."""
    context: dict[str, Any] = msgspec.json.decode(msg.context_json) if msg.context_json else {}
    return _copied(
        InstanceInfo,
        (msg,),
        status=InstanceStatus(msg.status),
        context=context,
        tokens=tuple(token_from_pb(t) for t in msg.tokens),
        pending_signals=tuple(
            PendingSignalInfo(
                name=s.name,
                data=msgspec.json.decode(s.data_json) if s.data_json else {},
                signal_id=s.signal_id,
                sent_at=s.sent_at,
            )
            for s in msg.pending_signals
        ),
    )


def signal_result_from_pb(msg: pb.SignalInstanceResponse) -> SignalResult:
    """The client's view of a SignalInstance reply."""
    return SignalResult(outcome=msg.outcome, instance=instance_from_pb(msg.instance))


def history_from_pb(msg: pb.HistoryEntry) -> HistoryEntry:
    """The client's view of one history entry."""
    return _copied(HistoryEntry, (msg,))


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
    workers = tuple(
        QueueWorker(
            w.worker_id,
            w.last_seen,
            w.in_flight,
            tuple(PassedOver(p.workflow, p.version, p.node, p.held_until) for p in w.passes_over),
        )
        for w in msg.workers
    )
    return _copied(QueueInfo, (msg,), workers=workers)


def schedule_from_pb(msg: pb.ScheduleInfo) -> ScheduleInfo:
    """The client's view of a schedule: its spec's fields and its state's."""
    spec = msg.spec
    context: dict[str, Any] = msgspec.json.decode(spec.context_json) if spec.context_json else {}
    return _copied(
        ScheduleInfo,
        (spec, msg),
        schedule_id=spec.id,
        interval_seconds=spec.interval_millis / 1000 if spec.interval_millis else None,
        context=context,
        next_fire_times=tuple(msg.next_fire_times),
    )
