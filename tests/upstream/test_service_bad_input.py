"""Bad input to upstream Wiggle's service: a clear status naming the problem, nothing changed,
and what was refused stays usable (the real lease still completes, a refused signal is not
buffered). The one-row-per-case sweep over every method is tests/upstream/test_service_table.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb

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
    unique,
    value,
)

LIMIT = 4096
BIG = {"x": "y" * (LIMIT + 10)}


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(request.param, VirtualClock(), max_payload_bytes=LIMIT) as server:
        yield server


def _bad_definitions(name: str) -> list[tuple[str, dict[str, Any] | None, str]]:
    """(what, document, a fragment the error must contain); each a broken copy of flow(name, a, b)."""

    def broken(**node_fields: Any) -> dict[str, Any]:
        doc = flow(name, "a", "b", version=9)
        doc["nodes"][0].update(node_fields)
        return doc

    return [
        ("no definition", None, "no definition"),
        ("empty", {}, "'name' is missing"),
        ("unknown kind", broken(kind="LOOP"), "kind 'LOOP' is not supported"),
        ("dangling edge", broken(next="nowhere"), "'next' points to 'nowhere'"),
        ("wrong type", broken(next=5), "'next' must be a string"),
        ("nodes not a list", {**flow(name, "a"), "nodes": "a"}, "'nodes' must be a list"),
        ("bad name", {**flow(name, "a"), "name": "bad name"}, "'bad name'"),
        ("bad start", {**flow(name, "a"), "startNode": "zz"}, "'startNode' 'zz'"),
        ("wrong activity", broken(activity="other#a"), f"must be '{name}#a'"),
        ("version 0", flow(name, "a", version=0), "'version' must be in 1..2147483647"),
    ]


async def test_register_refuses_malformed_definitions_and_changes_nothing(up: Up) -> None:
    name = unique("up-bad-def")
    good = await up.register(flow(name, "a", "b", version=9))
    assert good.version == "9"
    before = await up.snapshot()
    for what, doc, fragment in _bad_definitions(name):
        request = upb.WorkflowDefinition() if doc is None else upb.WorkflowDefinition(definition=struct(doc))
        details = await up.fails("RegisterWorkflow", request, INVALID)
        assert fragment in details, (what, details)
    oversize = {**flow(name, "a"), "pad": "p" * LIMIT}
    details = await up.fails("RegisterWorkflow", upb.WorkflowDefinition(definition=struct(oversize)), INVALID)
    assert "definition" in details and f"the limit is {LIMIT} bytes" in details
    assert await up.snapshot() == before
    listed = await up.stub.ListWorkflows(upb.Empty(), timeout=15)
    assert list(listed.workflows) == [name]
    kept = await up.stub.GetWorkflow(upb.GetWorkflowRequest(name=name), timeout=15)
    assert kept.definition["version"] == 9 and len(kept.definition["nodes"]) == 3


async def test_start_of_an_unknown_workflow_or_version_is_not_found(up: Up) -> None:
    name = unique("up-start")
    await up.register(flow(name, "a", version=4))
    details = await up.fails("StartInstance", upb.StartInstanceRequest(workflow="no-such-flow"), NOT_FOUND)
    assert "no-such-flow" in details
    details = await up.fails("StartInstance", upb.StartInstanceRequest(workflow=name, version=5), NOT_FOUND)
    assert name in details and "5" in details
    details = await up.fails(
        "StartInstance", upb.StartInstanceRequest(workflow="no-such-flow", version=4), NOT_FOUND
    )
    assert "no-such-flow" in details
    assert not (await up.stub.ListInstances(upb.ListInstancesRequest(), timeout=15)).instances


async def test_start_refuses_a_context_that_is_not_an_object_or_too_big(up: Up) -> None:
    name = unique("up-ctx")
    await up.register(flow(name, "a"))
    before = await up.snapshot()
    for ctx, kind in (([1, 2], "a list"), ("text", "a string"), (7, "a number"), (True, "a boolean")):
        details = await up.fails(
            "StartInstance", upb.StartInstanceRequest(workflow=name, context=value(ctx)), INVALID
        )
        assert f"context must be a JSON object, got {kind}" in details
    details = await up.fails(
        "StartInstance", upb.StartInstanceRequest(workflow=name, context=value(BIG)), INVALID
    )
    assert "context" in details and f"the limit is {LIMIT} bytes" in details
    assert await up.snapshot() == before


async def test_poll_refuses_bad_requests_and_claims_nothing(up: Up) -> None:
    name = unique("up-poll")
    await up.register(flow(name, "a"))
    await up.start(name)
    before = await up.snapshot()
    cases = [
        (upb.PollRequest(worker_id=WORKER, max=1), "names no queues"),
        (
            upb.PollRequest(worker_id=WORKER, queues=[name], max=0),
            "max (tasks to claim) must be between 1 and",
        ),
        (upb.PollRequest(worker_id=WORKER, queues=[name], max=100_000), "got 100000"),
        (upb.PollRequest(worker_id=WORKER, queues=[name], max=-3), "got -3"),
        (upb.PollRequest(worker_id=WORKER, queues=[name], max=1, lease_millis=-1), "lease_millis"),
        (upb.PollRequest(queues=[name], max=1), "worker_id"),
    ]
    for request, fragment in cases:
        details = await up.fails("PollTasks", request, INVALID)
        assert fragment in details, details
    assert await up.snapshot() == before
    t = await up.claim(name)  # the step was never claimed
    assert t.attempt == 1


async def test_reports_on_someone_elses_or_an_unknown_task_are_not_found(up: Up) -> None:
    name = unique("up-owner")
    await up.register(flow(name, "a", "b"))
    iid = await up.start(name, {"n": 0})
    t = await up.claim(name)
    before = await up.snapshot()
    unknown = t.task_id.rsplit(".", 1)[0] + ".999@1"
    for task_id, owner, what in (
        (t.task_id, "intruder", "intruder"),
        (unknown, WORKER, unknown),
        (f"{UNKNOWN_INSTANCE}.1@1", WORKER, UNKNOWN_INSTANCE),
        ("no-dot-at-all@1", WORKER, "no-dot-at-all@1"),
    ):
        for method, request in (
            (
                "CompleteTask",
                upb.TaskResultRequest(task_id=task_id, lease_owner=owner, result=value({"x": 1})),
            ),
            ("FailTask", upb.TaskFailureRequest(task_id=task_id, lease_owner=owner, message="m")),
            ("HeartbeatTask", upb.HeartbeatRequest(task_id=task_id, lease_owner=owner, extend_millis=60_000)),
        ):
            details = await up.fails(method, request, NOT_FOUND)
            assert what in details, (method, details)
    assert await up.snapshot() == before  # the lease, its expiry and the context untouched
    [token] = (await up.get(iid)).tokens
    assert token.lease_owner == WORKER and token.status == "RUNNING"

    await up.complete(t, {"n": 1})  # the right owner still can
    # the task moved on (READY at b): a second report of step a is refused, and changes nothing
    after_a = await up.snapshot()
    await up.fails("CompleteTask", upb.TaskResultRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    await up.fails("FailTask", upb.TaskFailureRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    assert await up.snapshot() == after_a
    await up.complete(await up.claim(name), {"n": 2})
    assert await up.status(iid) == "COMPLETED"
    # finished: every report on it is NOT_FOUND
    for method, request in (
        ("CompleteTask", upb.TaskResultRequest(task_id=t.task_id, lease_owner=WORKER)),
        ("FailTask", upb.TaskFailureRequest(task_id=t.task_id, lease_owner=WORKER)),
        ("HeartbeatTask", upb.HeartbeatRequest(task_id=t.task_id, lease_owner=WORKER)),
    ):
        details = await up.fails(method, request, NOT_FOUND)
        assert "COMPLETED" in details, details
    assert await up.context(iid) == {"n": 2}


async def test_a_predicate_completed_with_a_bad_shape_stays_leased(up: Up) -> None:
    name = unique("up-gate")
    await up.register(
        document(
            name, [predicate("p", name, "ok", "n1", "no"), task("n1", name, "go", "end"), end(), end("no")]
        )
    )
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name)
    assert t.kind == "PREDICATE"
    before = await up.snapshot()
    for result in ({"ok": True}, True, {"value": "yes"}, {"value": 1}, None):
        request = upb.TaskResultRequest(task_id=t.task_id, lease_owner=t.lease_owner)
        if result is not None:
            request.result.CopyFrom(value(result))
        details = await up.fails("CompleteTask", request, INVALID)
        assert "'ok' is a PREDICATE" in details and '{"value": true}' in details, details
    assert await up.snapshot() == before
    [token] = (await up.get(iid)).tokens
    assert token.status == "RUNNING" and token.lease_owner == WORKER
    await up.complete(t, {"value": False})
    assert await up.status(iid) == "COMPLETED"
    assert [e.node_id for e in await up.history(iid) if e.node_id == "no"]


def _signal_flow(name: str) -> dict[str, Any]:
    return document(
        name,
        [
            task("n0", name, "prep", "wait"),
            {"id": "wait", "kind": "SIGNAL", "name": "approve", "next": "n2"},
            task("n2", name, "ship", "end"),
            end(),
        ],
    )


async def test_a_signal_nobody_waits_for_is_refused_and_not_buffered(up: Up) -> None:
    name = unique("up-signal")
    await up.register(_signal_flow(name))
    iid = await up.start(name, {"order": 1})
    before = await up.snapshot()
    details = await up.fails(
        "SignalInstance",
        upb.SignalRequest(instance_id=iid, signal="approve", payload=value({"by": "early"})),
        PRECONDITION,
    )
    assert "not waiting for signal 'approve'" in details
    details = await up.fails("SignalInstance", upb.SignalRequest(instance_id=iid, signal="nope"), NOT_FOUND)
    assert "'nope'" in details and "'approve'" in details
    details = await up.fails(
        "SignalInstance", upb.SignalRequest(instance_id=UNKNOWN_INSTANCE, signal="approve"), NOT_FOUND
    )
    assert UNKNOWN_INSTANCE in details
    assert await up.snapshot() == before
    assert not (await up.info(iid)).pending_signals

    await up.complete(await up.claim(name), {"prepped": True})
    # reaching the wait consumed nothing: it waits, and nothing is ready to ship
    [token] = (await up.get(iid)).tokens
    assert (token.node_id, token.status) == ("wait", "AWAITING")
    assert not await up.poll(name, wait_millis=0)
    await up.stub.SignalInstance(
        upb.SignalRequest(instance_id=iid, signal="approve", payload=value({"by": "ana"})), timeout=15
    )
    ship = await up.claim(name)
    assert ship.step_name == "ship"
    await up.complete(ship, None)
    assert await up.context(iid) == {"order": 1, "prepped": True, "by": "ana"}
    details = await up.fails(
        "SignalInstance", upb.SignalRequest(instance_id=iid, signal="approve"), PRECONDITION
    )
    assert "COMPLETED" in details


async def test_schedules_and_lists_refuse_bad_requests(up: Up) -> None:
    name = unique("up-sched")
    await up.register(flow(name, "a"))
    before = await up.snapshot()
    details = await up.fails("DeleteSchedule", upb.ScheduleIdRequest(id="no-such-schedule"), NOT_FOUND)
    assert "no-such-schedule" in details
    details = await up.fails("CreateSchedule", upb.CreateScheduleRequest(workflow=name), INVALID)
    assert "every_millis or cron" in details
    details = await up.fails("ListInstances", upb.ListInstancesRequest(status="DONE"), INVALID)
    assert "'DONE'" in details and "RUNNING" in details
    for limit in (-1, 1_000_000):
        details = await up.fails("ListInstances", upb.ListInstancesRequest(limit=limit), INVALID)
        assert "limit" in details and str(limit) in details
    assert await up.snapshot() == before
    assert not (await up.stub.ListSchedules(upb.Empty(), timeout=15)).schedules
