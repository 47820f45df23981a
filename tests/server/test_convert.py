"""wiggle/_wire/convert.py and replies.py: engine state -> protobuf -> client values, field for field."""

from __future__ import annotations

import msgspec

from wiggle import HistoryEntry, InstanceInfo, TokenInfo, Workflow
from wiggle._engine.engine import Claimed, EngineConfig, LoadedDefinition
from wiggle._engine.state import HistoryEntry as StateHistoryEntry
from wiggle._engine.state import Instance, InstanceStatus, Token, TokenStatus
from wiggle._storage.base import InstanceView, WorkflowRecord
from wiggle._wire import convert, replies

TOKEN = Token(
    id="wi-1.3",
    instance_id="wi-1",
    node_id="charge",
    status=TokenStatus.RUNNING,
    kind="TASK",
    queue="payments",
    attempt=2,
    available_at=5,
    lease_owner="w-1",
    lease_expires_at=99,
    last_error="boom",
    local_run_owner="w-1",
    local_run_steps=4,
)
INSTANCE = Instance(
    id="wi-1",
    workflow="orders",
    version="abc",
    status=InstanceStatus.RUNNING,
    context={"n": 1, "deep": {"x": [1, 2]}},
    correlation_id="order-7",
    reason="r",
    error="e",
    created_at=1,
    updated_at=2,
    finished_at=3,
)


def test_instance_and_tokens_round_trip() -> None:
    wire = convert.instance_to_pb(InstanceView(INSTANCE, [TOKEN]))
    info = replies.instance_from_pb(wire)
    assert isinstance(info, InstanceInfo)
    assert (info.instance_id, info.workflow, info.version, info.status) == (
        "wi-1",
        "orders",
        "abc",
        "RUNNING",
    )
    assert info.context == INSTANCE.context
    assert (info.correlation_id, info.reason, info.error) == ("order-7", "r", "e")
    assert (info.created_at, info.updated_at, info.finished_at) == (1, 2, 3)
    assert info.tokens == (
        TokenInfo(
            token_id="wi-1.3",
            node_id="charge",
            status="RUNNING",
            attempt=2,
            queue="payments",
            lease_owner="w-1",
            lease_expires_at=99,
            available_at=5,
            last_error="boom",
            local_run_owner="w-1",
            local_run_steps=4,
        ),
    )
    assert not info.finished
    assert convert.instance_to_pb(InstanceView(INSTANCE, [TOKEN]), with_tokens=False).tokens == []


def test_history_round_trip() -> None:
    entry = StateHistoryEntry(
        instance_id="wi-1",
        token_id="wi-1.3",
        node_id="charge",
        kind="TASK",
        attempt=2,
        worker_id="w-1",
        started_at=10,
        ended_at=20,
        outcome="RETRY",
        error="boom",
    )
    assert replies.history_from_pb(convert.history_to_pb(entry)) == HistoryEntry(
        token_id="wi-1.3",
        node_id="charge",
        kind="TASK",
        attempt=2,
        worker_id="w-1",
        started_at=10,
        ended_at=20,
        outcome="RETRY",
        error="boom",
    )


def test_workflow_round_trip_and_bodyless_form() -> None:
    bp = Workflow.define("convert-flow").step(lambda ctx: ctx, name="a").build()
    record = WorkflowRecord(loaded=LoadedDefinition(bp.definition), registered_at=42)
    info = replies.workflow_from_pb(convert.workflow_to_pb(record, created=True))
    assert (info.name, info.version, info.registered_at, info.created) == (
        "convert-flow",
        record.loaded.version,
        42,
        True,
    )
    assert info.definition == bp.definition
    assert convert.workflow_to_pb(record, body=False).definition_json == b""


def test_activation_carries_the_server_limits() -> None:
    config = EngineConfig(lease_millis=1234, max_payload_bytes=777)
    claimed = Claimed(
        token=TOKEN,
        instance=INSTANCE,
        context={"in": 1},
        execution_mode="LOCAL_SYNC",
        max_local_steps=9,
        task_id="wi-1.3@2",
    )
    act = convert.activation_to_pb(claimed, config)
    assert (act.task_id, act.instance_id, act.node_id, act.queue, act.kind) == (
        "wi-1.3@2",
        "wi-1",
        "charge",
        "payments",
        "TASK",
    )
    assert msgspec.json.decode(act.context_json) == {"in": 1}
    assert (act.execution_mode, act.max_local_steps, act.lease_millis, act.max_payload_bytes) == (
        "LOCAL_SYNC",
        9,
        1234,
        777,
    )
    assert (act.lease_owner, act.lease_expires_at, act.attempt, act.correlation_id) == (
        "w-1",
        99,
        2,
        "order-7",
    )


def test_every_client_field_has_its_reply_field() -> None:
    """replies.py copies a client value's fields from the reply's fields of the same name: each
    field is in its message, or made by its converter (the rest are a new field's missing half)."""
    from wiggle._client import types
    from wiggle._rpc import wiggle_pb2 as pb

    made = {
        "InstanceInfo": {"context"},  # decoded from context_json
        "ScheduleInfo": {
            "schedule_id",
            "interval_seconds",
            "context",
        },  # spec.id, interval_millis, context_json
    }
    messages = {
        "TokenInfo": (pb.TokenInfo,),
        "InstanceInfo": (pb.InstanceInfo,),
        "HistoryEntry": (pb.HistoryEntry,),
        "QueueInfo": (pb.QueueInfo,),
        "ScheduleInfo": (pb.ScheduleSpec, pb.ScheduleInfo),
    }
    for name, sources in messages.items():
        on_the_wire = {f.name for message in sources for f in message.DESCRIPTOR.fields}
        fields = set(getattr(types, name).__struct_fields__)
        assert fields - on_the_wire == made.get(name, set()), name
