"""Malformed input to every RPC of upstream Wiggle's service, on every store: one table.

The upstream twin of tests/security/test_malformed_table.py. Each row is a request a broken (or
hostile) upstream client could send through ``dev.wiggle.proto.WiggleControlPlane``: empty,
unknown ids, wrong types, oversize, NaN, out-of-range numbers, NUL bytes, forged and stale
leases, off-graph local runs. For each row the test asserts the status code, a message, that
nothing in the store changed (workflows and their upstream numbers, every instance with its
tokens and history, every schedule), and that the server still answers. PostgreSQL joins with
WIGGLE_TEST_POSTGRES=1.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

from .service_kit import (
    INVALID,
    NOT_FOUND,
    PRECONDITION,
    STORES,
    UNKNOWN_INSTANCE,
    WORKER,
    Up,
    document,
    end,
    flow,
    open_server,
    predicate,
    struct,
    task,
    value,
)

LIMIT = 8 * 1024  # the server's payload limit in this test
NUL = "bad\x00name"
OK = grpc.StatusCode.OK
SRV = "up-table-srv"
LOCAL = "up-table-local"
GATE = "up-table-gate"
SIG = "up-table-signal"
BIG = {"x": "y" * (LIMIT + 10)}


def _nan() -> struct_pb2.Value:
    v = struct_pb2.Value()
    v.struct_value.fields["n"].number_value = math.nan
    return v


def _unknown_fields() -> upb.Empty:
    """An Empty carrying a field it does not have (number 1, varint 1): ignored, as protobuf says."""
    return upb.Empty.FromString(b"\x08\x01")


def _defn(doc: dict[str, Any] | None) -> upb.WorkflowDefinition:
    return upb.WorkflowDefinition() if doc is None else upb.WorkflowDefinition(definition=struct(doc))


def _srv_flow(**top: Any) -> dict[str, Any]:
    return flow(SRV, "a", "b", executionMode="SERVER", **top)


def _with_node(**fields: Any) -> dict[str, Any]:
    """The SERVER-mode flow with its first node's ``fields`` replaced."""
    doc = _srv_flow()
    doc["nodes"][0].update(fields)
    return doc


def _nul_reason() -> dict[str, Any]:
    """The SERVER-mode flow ending with a reason PostgreSQL could not store."""
    doc = _srv_flow()
    doc["nodes"][-1]["reason"] = "done\x00"
    return doc


def _signal_flow() -> dict[str, Any]:
    return document(
        SIG,
        [
            task("n0", SIG, "prep", "wait"),
            {"id": "wait", "kind": "SIGNAL", "name": "approve", "next": "end"},
            end(),
        ],
    )


def _gate_flow() -> dict[str, Any]:
    return document(
        GATE,
        [predicate("p", GATE, "ok", "n1", "end"), task("n1", GATE, "go", "end"), end()],
    )


@dataclass
class Fixture:
    """What the rows refer to: live claims, a waiting-for-nothing instance, a stale task."""

    up: Up
    server_task: upb.TaskActivation  # a SERVER-mode step, claimed and running
    local_task: upb.TaskActivation  # a LOCAL_SYNC run, claimed
    gate_task: upb.TaskActivation  # a PREDICATE, claimed
    stale_task: upb.TaskActivation  # a step of an instance that completed
    signal_instance: str  # at its first task, not yet waiting for "approve"


@dataclass
class Row:
    method: str
    what: str
    request: Callable[[Fixture], Message]
    code: grpc.StatusCode


def _report(t: upb.TaskActivation, owner: str = "", **fields: Any) -> upb.TaskResultRequest:
    return upb.TaskResultRequest(task_id=t.task_id, lease_owner=owner or t.lease_owner, **fields)


def _forged(t: upb.TaskActivation) -> str:
    return t.task_id.rsplit(".", 1)[0] + ".999@1"


def _poll(**fields: Any) -> upb.PollRequest:
    base: dict[str, Any] = {"worker_id": WORKER, "queues": [SRV], "max": 1, "wait_millis": 0}
    base.update(fields)
    return upb.PollRequest(**base)


def _start(**fields: Any) -> upb.StartInstanceRequest:
    return upb.StartInstanceRequest(workflow=SRV, **fields)


def _schedule(**fields: Any) -> upb.CreateScheduleRequest:
    base: dict[str, Any] = {"workflow": SRV}
    base.update(fields)
    return upb.CreateScheduleRequest(**base)


def _signal(f: Fixture, **fields: Any) -> upb.SignalRequest:
    base: dict[str, Any] = {"instance_id": f.signal_instance, "signal": "approve"}
    base.update(fields)
    return upb.SignalRequest(**base)


def _failure(task_id: str, owner: str = WORKER) -> upb.TaskFailureRequest:
    return upb.TaskFailureRequest(task_id=task_id, lease_owner=owner, message="m")


def _beat(task_id: str, owner: str = WORKER, extend_millis: int = 0) -> upb.HeartbeatRequest:
    return upb.HeartbeatRequest(task_id=task_id, lease_owner=owner, extend_millis=extend_millis)


def _advance(
    t: upb.TaskActivation, *steps: upb.StepResult, owner: str = WORKER, final: bool = False
) -> upb.AdvanceRunRequest:
    return upb.AdvanceRunRequest(task_id=t.task_id, lease_owner=owner, steps=steps, final=final)


def _step(node_id: str, merge: Any = None) -> upb.StepResult:
    step = upb.StepResult(node_id=node_id)
    if merge is not None:
        step.merge.CopyFrom(value(merge))
    return step


TABLE: list[Row] = [
    # the methods that take Empty: an unknown field is ignored, not an error
    Row("HealthCheck", "unknown field", lambda f: _unknown_fields(), OK),
    Row("GetCluster", "unknown field", lambda f: _unknown_fields(), OK),
    Row("ListWorkflows", "unknown field", lambda f: _unknown_fields(), OK),
    Row("ListSchedules", "unknown field", lambda f: _unknown_fields(), OK),
    # RegisterWorkflow
    Row("RegisterWorkflow", "no definition", lambda f: _defn(None), INVALID),
    Row("RegisterWorkflow", "empty definition", lambda f: _defn({}), INVALID),
    Row("RegisterWorkflow", "unknown kind", lambda f: _defn(_with_node(kind="LOOP")), INVALID),
    Row("RegisterWorkflow", "dangling edge", lambda f: _defn(_with_node(next="nowhere")), INVALID),
    Row("RegisterWorkflow", "next of the wrong type", lambda f: _defn(_with_node(next=5)), INVALID),
    Row(
        "RegisterWorkflow", "nodes of the wrong type", lambda f: _defn({**_srv_flow(), "nodes": "a"}), INVALID
    ),
    Row("RegisterWorkflow", "bad name", lambda f: _defn({**_srv_flow(), "name": "bad name"}), INVALID),
    Row("RegisterWorkflow", "NUL in a node id", lambda f: _defn(_with_node(id=NUL)), INVALID),
    Row("RegisterWorkflow", "NUL in an END's reason", lambda f: _defn(_nul_reason()), INVALID),
    Row("RegisterWorkflow", "wrong activity", lambda f: _defn(_with_node(activity="x#a")), INVALID),
    Row("RegisterWorkflow", "version 0", lambda f: _defn(_srv_flow(version=0)), INVALID),
    Row("RegisterWorkflow", "version 2^31", lambda f: _defn(_srv_flow(version=2**31)), INVALID),
    Row("RegisterWorkflow", "version 1.5", lambda f: _defn(_srv_flow(version=1.5)), INVALID),
    Row("RegisterWorkflow", "oversize", lambda f: _defn({**_srv_flow(), "pad": "p" * LIMIT}), INVALID),
    Row(
        "RegisterWorkflow",
        "nested lists for nodes",
        lambda f: _defn({**_srv_flow(), "nodes": [[[[[1]]]]]}),
        INVALID,
    ),
    # GetWorkflow
    Row("GetWorkflow", "empty", lambda f: upb.GetWorkflowRequest(), INVALID),
    Row("GetWorkflow", "unknown", lambda f: upb.GetWorkflowRequest(name="no-such-flow"), NOT_FOUND),
    Row("GetWorkflow", "NUL", lambda f: upb.GetWorkflowRequest(name=NUL), INVALID),
    # StartInstance
    Row("StartInstance", "empty", lambda f: upb.StartInstanceRequest(), INVALID),
    Row(
        "StartInstance",
        "unknown workflow",
        lambda f: upb.StartInstanceRequest(workflow="no-such-flow"),
        NOT_FOUND,
    ),
    Row(
        "StartInstance",
        "unknown version of an unknown workflow",
        lambda f: upb.StartInstanceRequest(workflow="no-such-flow", version=3),
        NOT_FOUND,
    ),
    Row("StartInstance", "unknown version", lambda f: _start(version=12345), NOT_FOUND),
    Row("StartInstance", "context a list", lambda f: _start(context=value([1, 2])), INVALID),
    Row("StartInstance", "context a string", lambda f: _start(context=value("ctx")), INVALID),
    Row("StartInstance", "context a number", lambda f: _start(context=value(3)), INVALID),
    Row("StartInstance", "NaN in the context", lambda f: _start(context=_nan()), INVALID),
    Row("StartInstance", "oversize context", lambda f: _start(context=value(BIG)), INVALID),
    Row("StartInstance", "NUL workflow", lambda f: upb.StartInstanceRequest(workflow=NUL), INVALID),
    Row("StartInstance", "NUL correlation id", lambda f: _start(correlation_id=NUL), INVALID),
    # ListInstances
    Row("ListInstances", "unknown status", lambda f: upb.ListInstancesRequest(status="BOGUS"), INVALID),
    Row("ListInstances", "limit too big", lambda f: upb.ListInstancesRequest(limit=1_000_000), INVALID),
    Row("ListInstances", "negative limit", lambda f: upb.ListInstancesRequest(limit=-1), INVALID),
    Row("ListInstances", "NUL workflow", lambda f: upb.ListInstancesRequest(workflow=NUL), INVALID),
    # GetInstance / CancelInstance
    Row("GetInstance", "empty", lambda f: upb.InstanceIdRequest(), INVALID),
    Row("GetInstance", "unknown", lambda f: upb.InstanceIdRequest(instance_id=UNKNOWN_INSTANCE), NOT_FOUND),
    Row("GetInstance", "NUL", lambda f: upb.InstanceIdRequest(instance_id=NUL), INVALID),
    Row("CancelInstance", "empty", lambda f: upb.CancelInstanceRequest(), INVALID),
    Row(
        "CancelInstance",
        "unknown",
        lambda f: upb.CancelInstanceRequest(instance_id=UNKNOWN_INSTANCE),
        NOT_FOUND,
    ),
    Row("CancelInstance", "NUL", lambda f: upb.CancelInstanceRequest(instance_id=NUL), INVALID),
    Row(
        "CancelInstance",
        "reason too long",
        lambda f: upb.CancelInstanceRequest(instance_id=f.signal_instance, reason="r" * 201),
        INVALID,
    ),
    Row(
        "CancelInstance",
        "NUL in the reason",
        lambda f: upb.CancelInstanceRequest(instance_id=f.signal_instance, reason="bad\x00"),
        INVALID,
    ),
    # SignalInstance
    Row("SignalInstance", "empty", lambda f: upb.SignalRequest(), INVALID),
    Row("SignalInstance", "unknown instance", lambda f: _signal(f, instance_id=UNKNOWN_INSTANCE), NOT_FOUND),
    Row("SignalInstance", "unknown signal", lambda f: _signal(f, signal="nope"), NOT_FOUND),
    Row("SignalInstance", "not waiting", lambda f: _signal(f), PRECONDITION),
    Row("SignalInstance", "payload a list", lambda f: _signal(f, payload=value([1])), INVALID),
    Row("SignalInstance", "oversize payload", lambda f: _signal(f, payload=value(BIG)), INVALID),
    Row("SignalInstance", "NUL signal", lambda f: _signal(f, signal=NUL), INVALID),
    # CreateSchedule / DeleteSchedule
    Row("CreateSchedule", "no cadence", lambda f: _schedule(), INVALID),
    Row("CreateSchedule", "empty", lambda f: upb.CreateScheduleRequest(), INVALID),
    Row(
        "CreateSchedule",
        "unknown workflow",
        lambda f: _schedule(workflow="no-such-flow", every_millis=60_000),
        NOT_FOUND,
    ),
    Row("CreateSchedule", "negative period", lambda f: _schedule(every_millis=-5), INVALID),
    Row("CreateSchedule", "zero period", lambda f: _schedule(every_millis=0), INVALID),
    Row("CreateSchedule", "bad cron", lambda f: _schedule(cron="not a cron"), INVALID),
    Row(
        "CreateSchedule",
        "context a list",
        lambda f: _schedule(every_millis=60_000, context=value([1])),
        INVALID,
    ),
    Row("DeleteSchedule", "empty", lambda f: upb.ScheduleIdRequest(), INVALID),
    Row("DeleteSchedule", "unknown", lambda f: upb.ScheduleIdRequest(id="no-such-schedule"), NOT_FOUND),
    # PollTasks
    Row("PollTasks", "empty", lambda f: upb.PollRequest(), INVALID),
    Row("PollTasks", "no queues", lambda f: _poll(queues=[]), INVALID),
    Row("PollTasks", "max 0", lambda f: _poll(max=0), INVALID),
    Row("PollTasks", "max too big", lambda f: _poll(max=100_000), INVALID),
    Row("PollTasks", "negative max", lambda f: _poll(max=-1), INVALID),
    Row("PollTasks", "negative lease", lambda f: _poll(lease_millis=-1), INVALID),
    Row("PollTasks", "NUL queue", lambda f: _poll(queues=[NUL]), INVALID),
    Row("PollTasks", "NUL worker", lambda f: _poll(worker_id=NUL), INVALID),
    # CompleteTask
    Row("CompleteTask", "empty", lambda f: upb.TaskResultRequest(), INVALID),
    Row("CompleteTask", "wrong owner", lambda f: _report(f.server_task, "intruder"), NOT_FOUND),
    Row(
        "CompleteTask",
        "forged task id",
        lambda f: upb.TaskResultRequest(task_id=_forged(f.server_task), lease_owner=WORKER),
        NOT_FOUND,
    ),
    Row(
        "CompleteTask",
        "unknown instance",
        lambda f: upb.TaskResultRequest(task_id=f"{UNKNOWN_INSTANCE}.1@1", lease_owner=WORKER),
        NOT_FOUND,
    ),
    Row("CompleteTask", "stale report", lambda f: _report(f.stale_task), NOT_FOUND),
    Row("CompleteTask", "result a list", lambda f: _report(f.server_task, result=value([1])), INVALID),
    Row("CompleteTask", "result a string", lambda f: _report(f.server_task, result=value("x")), INVALID),
    Row("CompleteTask", "NaN in the result", lambda f: _report(f.server_task, result=_nan()), INVALID),
    Row("CompleteTask", "predicate without a value", lambda f: _report(f.gate_task), INVALID),
    Row(
        "CompleteTask",
        "predicate with a diff",
        lambda f: _report(f.gate_task, result=value({"ok": True})),
        INVALID,
    ),
    Row(
        "CompleteTask",
        "predicate with a string value",
        lambda f: _report(f.gate_task, result=value({"value": "yes"})),
        INVALID,
    ),
    Row(
        "CompleteTask",
        "predicate with a bare bool",
        lambda f: _report(f.gate_task, result=value(True)),
        INVALID,
    ),
    Row(
        "CompleteTask",
        "NUL task id",
        lambda f: upb.TaskResultRequest(task_id=NUL, lease_owner=WORKER),
        INVALID,
    ),
    # FailTask
    Row("FailTask", "empty", lambda f: upb.TaskFailureRequest(), INVALID),
    Row("FailTask", "wrong owner", lambda f: _failure(f.server_task.task_id, "intruder"), NOT_FOUND),
    Row("FailTask", "stale report", lambda f: _failure(f.stale_task.task_id), NOT_FOUND),
    Row("FailTask", "forged task id", lambda f: _failure(_forged(f.server_task)), NOT_FOUND),
    # HeartbeatTask
    Row("HeartbeatTask", "empty", lambda f: upb.HeartbeatRequest(), INVALID),
    Row("HeartbeatTask", "wrong owner", lambda f: _beat(f.server_task.task_id, "intruder"), NOT_FOUND),
    Row("HeartbeatTask", "stale report", lambda f: _beat(f.stale_task.task_id), NOT_FOUND),
    Row(
        "HeartbeatTask",
        "negative extension",
        lambda f: _beat(f.server_task.task_id, extend_millis=-1),
        INVALID,
    ),
    # AdvanceRun
    Row("AdvanceRun", "empty", lambda f: upb.AdvanceRunRequest(), INVALID),
    Row(
        "AdvanceRun",
        "wrong owner",
        lambda f: _advance(f.local_task, _step("a"), owner="intruder", final=True),
        NOT_FOUND,
    ),
    Row(
        "AdvanceRun", "off the graph", lambda f: _advance(f.local_task, _step("a"), _step("c")), PRECONDITION
    ),
    Row("AdvanceRun", "a step without a node", lambda f: _advance(f.local_task, upb.StepResult()), INVALID),
    Row("AdvanceRun", "a merge that is a list", lambda f: _advance(f.local_task, _step("a", [1])), INVALID),
    Row(
        "AdvanceRun",
        "several steps on a SERVER-mode claim",
        lambda f: _advance(f.server_task, _step("a"), _step("b")),
        PRECONDITION,
    ),
    Row(
        "AdvanceRun",
        "stale report",
        lambda f: _advance(f.stale_task, final=True),
        OK,  # as ours (docs/semantics.md#advancerun): applies nothing, answers the status
    ),
]


@pytest.fixture(params=STORES)
async def table_fixture(request: pytest.FixtureRequest) -> AsyncIterator[Fixture]:
    async with open_server(request.param, VirtualClock(), max_payload_bytes=LIMIT) as up:
        for doc in (
            _srv_flow(),
            flow(LOCAL, "a", "b", "c", executionMode="LOCAL_SYNC"),
            _gate_flow(),
            _signal_flow(),
        ):
            await up.register(doc)
        done = await up.start(SRV)
        stale = await up.claim(SRV)
        await up.complete(stale, {"a": 1})
        await up.complete(await up.claim(SRV), {"b": 1})
        assert await up.status(done) == "COMPLETED"
        await up.start(SRV, {"live": True})
        server_task = await up.claim(SRV)
        await up.start(LOCAL)
        local_task = await up.claim(LOCAL)
        assert local_task.execution_mode == "LOCAL_SYNC"
        await up.start(GATE)
        gate_task = await up.claim(GATE)
        signal_instance = await up.start(SIG)
        yield Fixture(up, server_task, local_task, gate_task, stale, signal_instance)


def test_the_table_covers_every_rpc_of_the_upstream_service() -> None:
    service = upb.DESCRIPTOR.services_by_name["WiggleControlPlane"]
    methods = set(service.methods_by_name)
    assert set(WiggleServer(ServerConfig()).upstream.routes) == methods  # the service serves them all
    covered = {row.method for row in TABLE}
    assert methods <= covered, sorted(methods - covered)
    # every method that takes more than Empty has a row it refuses
    refused = {row.method for row in TABLE if row.code != OK}
    takes_input = {m.name for m in service.methods if m.input_type.name != "Empty"}
    assert takes_input <= refused, sorted(takes_input - refused)


async def test_malformed_input_to_every_upstream_rpc(table_fixture: Fixture) -> None:
    f = table_fixture
    up = f.up
    failures: list[str] = []
    for row in TABLE:
        before = await up.snapshot()
        try:
            await getattr(up.stub, row.method)(row.request(f), timeout=15)
            code, details = OK, ""
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        where = f"{row.method} ({row.what})"
        if code != row.code:
            failures.append(f"{where}: {code.name} {details[:200]!r}, expected {row.code.name}")
        elif code != OK and not details:
            failures.append(f"{where}: {code.name} without a message")
        if await up.snapshot() != before:
            failures.append(f"{where}: the store changed")
        # the server still answers, and the claimed step is still its owner's
        beat = await up.stub.HeartbeatTask(
            upb.HeartbeatRequest(task_id=f.server_task.task_id, lease_owner=f.server_task.lease_owner),
            timeout=15,
        )
        assert beat.lease_expires_at > 0, where
    assert not failures, "\n".join(failures)
