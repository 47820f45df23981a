"""Bad input over the wire (raw stubs): the right status code, a useful message, no state change."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import msgspec
import pytest
from pg import STORES, TEST_DATABASE_URL, async_temp_schema

from wiggle import ExecutionMode, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._wire.payload import MAX_JSON_DEPTH
from wiggle.testing import EmbeddedServer

WORKER = "worker-1"


def _h(name: str):
    def handler(ctx):
        return ctx

    handler.__name__ = name
    return handler


SERVER_FLOW = Workflow.define("bad-input").step(_h("a")).step(_h("b")).build()
LOCAL_FLOW = (
    Workflow.define("bad-input-local")
    .execution(ExecutionMode.LOCAL_SYNC)
    .step(_h("a"))
    .step(_h("b"))
    .step(_h("c"))
    .build()
)


class Wire:
    """A server and a raw stub on a grpc.aio channel."""

    def __init__(self, server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.server = server
        self.stub = stub

    async def fails(self, method: str, request, code: grpc.StatusCode) -> str:
        """Call ``method``; assert it fails with ``code``; return the details."""
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(self.stub, method)(request, timeout=10)
        assert err.value.code() == code, f"{method}: {err.value.code()} {err.value.details()}"
        details = err.value.details() or ""
        assert details, f"{method} failed without a message"
        return details

    async def start(self, bp, context: dict | None = None, correlation_id: str = "") -> pb.InstanceInfo:
        return await self.stub.StartInstance(
            pb.StartInstanceRequest(
                workflow=bp.name,
                context_json=msgspec.json.encode(context or {}),
                correlation_id=correlation_id,
            ),
            timeout=10,
        )

    async def claim(self, bp, worker: str = WORKER) -> pb.TaskActivation:
        response = await self.stub.PollTasks(
            pb.PollTasksRequest(worker_id=worker, queues=[bp.name], max_tasks=1, wait_millis=2000), timeout=10
        )
        assert len(response.tasks) == 1
        return response.tasks[0]

    async def state(self, instance_id: str) -> tuple[pb.InstanceInfo, list[pb.HistoryEntry]]:
        info = await self.stub.GetInstance(pb.GetInstanceRequest(instance_id=instance_id), timeout=10)
        history = await self.stub.GetHistory(pb.GetHistoryRequest(instance_id=instance_id), timeout=10)
        return info, list(history.entries)

    async def instances(self) -> list[str]:
        response = await self.stub.ListInstances(pb.ListInstancesRequest(page_size=1000), timeout=10)
        return [i.instance_id for i in response.instances]

    async def workflows(self) -> list[tuple[str, str]]:
        response = await self.stub.ListWorkflows(pb.ListWorkflowsRequest(), timeout=10)
        return [(w.name, w.version) for w in response.workflows]


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with EmbeddedServer(max_payload_bytes=4096) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            for bp in (SERVER_FLOW, LOCAL_FLOW):
                await stub.RegisterWorkflow(
                    pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()), timeout=10
                )
            yield Wire(server, stub)


# ---------------------------------------------------------------------------- starting instances


async def test_unknown_workflow_is_not_found(wire: Wire) -> None:
    details = await wire.fails(
        "StartInstance", pb.StartInstanceRequest(workflow="no-such-flow"), grpc.StatusCode.NOT_FOUND
    )
    assert "no-such-flow" in details
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, version="0123456789abcdef"),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "0123456789abcdef" in details
    await wire.fails("GetWorkflow", pb.GetWorkflowRequest(name="no-such-flow"), grpc.StatusCode.NOT_FOUND)
    assert await wire.instances() == []


async def test_unknown_instance_and_token_are_not_found(wire: Wire) -> None:
    missing = "wi-000000000000000000000000"
    details = await wire.fails(
        "GetInstance", pb.GetInstanceRequest(instance_id=missing), grpc.StatusCode.NOT_FOUND
    )
    assert missing in details
    await wire.fails(
        "CancelInstance", pb.CancelInstanceRequest(instance_id=missing), grpc.StatusCode.NOT_FOUND
    )
    await wire.fails("GetHistory", pb.GetHistoryRequest(instance_id=missing), grpc.StatusCode.NOT_FOUND)
    await wire.fails(
        "CompleteTask",
        pb.CompleteTaskRequest(task_id=f"{missing}.1@1", lease_owner=WORKER),
        grpc.StatusCode.NOT_FOUND,
    )


@pytest.mark.parametrize(
    "context_json, fragment",
    [
        (b"{not json", "not valid JSON"),
        (b'{"a": 1', "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
async def test_malformed_context_is_invalid_argument(wire: Wire, context_json: bytes, fragment: str) -> None:
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=context_json),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "context_json" in details and fragment in details
    assert await wire.instances() == []


@pytest.mark.parametrize(
    "context_json, kind", [(b"[1, 2]", "list"), (b'"text"', "str"), (b"42", "int"), (b"null", "NoneType")]
)
async def test_context_must_be_an_object(wire: Wire, context_json: bytes, kind: str) -> None:
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=context_json),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "JSON object" in details and kind in details
    assert await wire.instances() == []


async def test_oversize_context_names_the_limit(wire: Wire) -> None:
    blob = msgspec.json.encode({"x": "y" * 5000})
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=blob),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "4096" in details and str(len(blob)) in details
    assert await wire.instances() == []


@pytest.mark.parametrize("name", ["", " padded", "has space", "x" * 201, "-dash-first"])
async def test_invalid_workflow_name(wire: Wire, name: str) -> None:
    details = await wire.fails(
        "StartInstance", pb.StartInstanceRequest(workflow=name), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "workflow" in details
    assert await wire.instances() == []


async def test_invalid_correlation_id(wire: Wire) -> None:
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, correlation_id="bad id"),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "correlation_id" in details
    assert await wire.instances() == []


# ---------------------------------------------------------------------------- worker reports


async def test_wrong_lease_owner_is_refused_and_changes_nothing(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {"n": 1})
    task = await wire.claim(SERVER_FLOW)
    before = await wire.state(info.instance_id)
    for method, request in (
        (
            "CompleteTask",
            pb.CompleteTaskRequest(task_id=task.task_id, lease_owner="intruder", context_json=b'{"n": 2}'),
        ),
        (
            "FailTask",
            pb.FailTaskRequest(task_id=task.task_id, lease_owner="intruder", message="x", retryable=False),
        ),
        ("HeartbeatTask", pb.HeartbeatTaskRequest(task_id=task.task_id, lease_owner="intruder")),
    ):
        details = await wire.fails(method, request, grpc.StatusCode.FAILED_PRECONDITION)
        # the holder is not named: a worker learns nothing about another worker's lease
        assert WORKER not in details and "another worker" in details and "intruder" in details
    assert await wire.state(info.instance_id) == before
    assert before[0].tokens[0].status == "RUNNING" and before[0].tokens[0].lease_owner == WORKER


async def test_completing_a_token_twice_is_refused(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {"n": 1})
    task = await wire.claim(SERVER_FLOW)
    ok = await wire.stub.CompleteTask(
        pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER, context_json=b'{"n": 2}')
    )
    assert ok.instance_status == "RUNNING"
    before = await wire.state(info.instance_id)
    # the token moved on to "b" and is READY: the duplicate report names that state
    details = await wire.fails(
        "CompleteTask",
        pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER, context_json=b'{"n": 3}'),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "READY" in details
    assert await wire.state(info.instance_id) == before


async def test_completing_a_token_of_a_finished_instance_is_refused(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {})
    for _ in range(2):
        task = await wire.claim(SERVER_FLOW)
        await wire.stub.CompleteTask(pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER))
    before = await wire.state(info.instance_id)
    assert before[0].status == "COMPLETED"
    details = await wire.fails(
        "CompleteTask",
        pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "COMPLETED" in details
    await wire.fails(
        "FailTask",
        pb.FailTaskRequest(task_id=task.task_id, lease_owner=WORKER, message="late"),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert await wire.state(info.instance_id) == before


async def test_malformed_step_result_is_invalid_argument(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {})
    task = await wire.claim(SERVER_FLOW)
    before = await wire.state(info.instance_id)
    for payload in (b"{broken", b"[1]"):
        await wire.fails(
            "CompleteTask",
            pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER, context_json=payload),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    assert await wire.state(info.instance_id) == before


@pytest.mark.parametrize(
    "request_kw, fragment",
    [
        ({"worker_id": WORKER, "queues": []}, "no queues"),
        ({"worker_id": "", "queues": ["q"]}, "worker_id"),
        ({"worker_id": WORKER, "queues": ["bad queue"]}, "queue"),
        ({"worker_id": WORKER, "queues": ["q"], "max_tasks": 100_000}, "max_tasks"),
        ({"worker_id": WORKER, "queues": ["q"], "worker_session": "s" * 65}, "worker_session is 65"),
    ],
)
async def test_poll_tasks_bad_requests(wire: Wire, request_kw: dict, fragment: str) -> None:
    info = await wire.start(SERVER_FLOW, {})
    before = await wire.state(info.instance_id)
    details = await wire.fails(
        "PollTasks", pb.PollTasksRequest(**request_kw), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert fragment in details
    assert await wire.state(info.instance_id) == before


# ---------------------------------------------------------------------------- AdvanceRun


async def test_advance_run_bogus_path_applies_nothing(wire: Wire) -> None:
    info = await wire.start(LOCAL_FLOW, {"n": 0})
    task = await wire.claim(LOCAL_FLOW)
    assert task.execution_mode == "LOCAL_SYNC"
    before = await wire.state(info.instance_id)
    bogus = [
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps=[pb.StepResult(node_id="b", context_json=b'{"n": 1}')],
        ),
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            final=True,
            steps=[
                pb.StepResult(node_id="a", context_json=b'{"n": 1}'),
                pb.StepResult(node_id="c", context_json=b'{"n": 2}'),
            ],
        ),
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps_batch=b'[["T", "a", {"n": 1}, []], ["T", "c", {}, []]]',
        ),
    ]
    for request in bogus:
        details = await wire.fails("AdvanceRun", request, grpc.StatusCode.FAILED_PRECONDITION)
        assert "nothing was applied" in details
        assert await wire.state(info.instance_id) == before
    # the same token still accepts the right path
    result = await wire.stub.AdvanceRun(
        pb.AdvanceRunRequest(
            task_id=task.task_id, lease_owner=WORKER, steps_batch=b'[["T", "a", {"n": 1}, []]]'
        )
    )
    assert (result.instance_status, result.token_status, result.applied_steps) == ("RUNNING", "RUNNING", 1)


@pytest.mark.parametrize(
    "batch",
    [
        b"not json",
        b'{"T": 1}',
        b'[["X", "a", 1]]',
        b'[["T", "a", {}]]',
        b'[["T", 7, {}, []]]',
        b'[["P", "a", "yes"]]',
        b'[["F", "a", "msg"]]',
        b'[["T", "a", {}, [1]]]',
        b"[1]",
    ],
)
async def test_advance_run_malformed_batch_is_invalid_argument(wire: Wire, batch: bytes) -> None:
    info = await wire.start(LOCAL_FLOW, {"n": 0})
    task = await wire.claim(LOCAL_FLOW)
    before = await wire.state(info.instance_id)
    details = await wire.fails(
        "AdvanceRun",
        pb.AdvanceRunRequest(task_id=task.task_id, lease_owner=WORKER, steps_batch=batch),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "steps_batch" in details
    assert await wire.state(info.instance_id) == before


async def test_advance_run_with_both_encodings_is_invalid_argument(wire: Wire) -> None:
    info = await wire.start(LOCAL_FLOW, {"n": 0})
    task = await wire.claim(LOCAL_FLOW)
    before = await wire.state(info.instance_id)
    request = pb.AdvanceRunRequest(
        task_id=task.task_id,
        lease_owner=WORKER,
        steps=[pb.StepResult(node_id="a")],
        steps_batch=b'[["T", "a", {}, []]]',
    )
    details = await wire.fails("AdvanceRun", request, grpc.StatusCode.INVALID_ARGUMENT)
    assert "steps_batch" in details
    assert await wire.state(info.instance_id) == before


# ---------------------------------------------------------------------------- definitions


@pytest.mark.parametrize(
    "definition_json, fragment",
    [
        (b"{broken", "not a valid workflow definition"),
        (
            b'{"name": "w", "start_node": "a", "nodes": [{"id": "a", "kind": "TASK", "next": "nowhere"}]}',
            "'nowhere'",
        ),
        (
            b'{"name": "w", "start_node": "a", "nodes": [{"id": "a", "kind": "TASK", "next": "end"}, '
            b'{"id": "lost", "kind": "TASK", "next": "end"}, {"id": "end", "kind": "END"}]}',
            "'lost' is unreachable",
        ),
        (b'{"name": "bad name", "start_node": "a", "nodes": [{"id": "a", "kind": "END"}]}', "workflow name"),
        (b'{"name": "w", "start_node": "a", "nodes": [{"id": "a", "kind": "END"}], "extra": true}', "extra"),
    ],
)
async def test_invalid_definition_names_the_problem(
    wire: Wire, definition_json: bytes, fragment: str
) -> None:
    before = await wire.workflows()
    details = await wire.fails(
        "RegisterWorkflow",
        pb.RegisterWorkflowRequest(definition_json=definition_json),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert fragment in details
    assert await wire.workflows() == before


async def test_cancel_finished_instance_is_not_an_error(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {})
    await wire.stub.CancelInstance(pb.CancelInstanceRequest(instance_id=info.instance_id, reason="first"))
    before = await wire.state(info.instance_id)
    response = await wire.stub.CancelInstance(
        pb.CancelInstanceRequest(instance_id=info.instance_id, reason="second")
    )
    assert response.changed is False
    assert "CANCELLED" in response.message
    assert response.instance.reason == "first"
    assert await wire.state(info.instance_id) == before


async def test_complete_user_task_bad_input(wire: Wire) -> None:
    bp = Workflow.define("bad-input-ut").user_task("approval").build()
    await wire.stub.RegisterWorkflow(pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()))
    info = await wire.start(bp, {})
    before = await wire.state(info.instance_id)
    await wire.fails(
        "CompleteUserTask",
        pb.CompleteUserTaskRequest(instance_id=info.instance_id, task_name="approval", payload_json=b"[1]"),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await wire.fails(
        "CompleteUserTask",
        pb.CompleteUserTaskRequest(instance_id=info.instance_id, task_name="bad name"),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await wire.fails(
        "CompleteUserTask",
        pb.CompleteUserTaskRequest(instance_id=info.instance_id, task_name="other"),
        grpc.StatusCode.NOT_FOUND,
    )
    assert await wire.state(info.instance_id) == before


# ---------------------------------------------------------------------------- issue #14: the edge, on both stores

DEEP = b"[" * 10_000 + b"]" * 10_000
DEEP_OBJECT = b'{"a": ' + DEEP + b"}"
NUL = "flow\x00name"


@pytest.fixture(params=STORES)
async def edge(request: pytest.FixtureRequest) -> AsyncIterator[Wire]:
    """``wire`` on every store under test (PostgreSQL in a schema of its own)."""
    async with contextlib.AsyncExitStack() as stack:
        settings: dict = {"max_payload_bytes": 1 << 20}
        if request.param == "postgres":
            settings["database_url"] = TEST_DATABASE_URL
            settings["database_schema"] = await stack.enter_async_context(async_temp_schema())
        server = await stack.enter_async_context(EmbeddedServer(**settings))
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        ut = Workflow.define("bad-input-ut").user_task("approval").build()
        for bp in (SERVER_FLOW, LOCAL_FLOW, ut):
            await stub.RegisterWorkflow(
                pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()), timeout=10
            )
        yield Wire(server, stub)


async def still_answers(wire: Wire) -> None:
    """The server serves a normal request after the bad one."""
    info = await wire.start(SERVER_FLOW, {"ok": True})
    assert info.status == "RUNNING"


async def test_deep_json_in_every_json_field_is_invalid_argument(edge: Wire) -> None:
    info = await edge.start(SERVER_FLOW, {})
    local = await edge.start(LOCAL_FLOW, {})
    ut = await edge.stub.StartInstance(pb.StartInstanceRequest(workflow="bad-input-ut"), timeout=10)
    task = await edge.claim(SERVER_FLOW)
    local_task = await edge.claim(LOCAL_FLOW)
    ids = (info.instance_id, local.instance_id, ut.instance_id)
    before = [await edge.state(i) for i in ids]
    workflows = await edge.workflows()
    deep_definition = (
        b'{"name": "deep", "start_node": "a", "nodes": [{"id": "a", "kind": "END"}], "x": ' + DEEP + b"}"
    )
    cases = [
        ("StartInstance", pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=DEEP_OBJECT)),
        ("StartInstance", pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=DEEP)),
        (
            "CompleteTask",
            pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER, context_json=DEEP_OBJECT),
        ),
        (
            "CompleteUserTask",
            pb.CompleteUserTaskRequest(
                instance_id=ut.instance_id, task_name="approval", payload_json=DEEP_OBJECT
            ),
        ),
        (
            "AdvanceRun",
            pb.AdvanceRunRequest(
                task_id=local_task.task_id, lease_owner=WORKER, steps_batch=b'[["T", "a", ' + DEEP + b", []]]"
            ),
        ),
        (
            "AdvanceRun",
            pb.AdvanceRunRequest(
                task_id=local_task.task_id,
                lease_owner=WORKER,
                steps=[pb.StepResult(node_id="a", context_json=DEEP_OBJECT)],
            ),
        ),
        ("RegisterWorkflow", pb.RegisterWorkflowRequest(definition_json=deep_definition)),
    ]
    for method, request in cases:
        details = await edge.fails(method, request, grpc.StatusCode.INVALID_ARGUMENT)
        assert "nesting limit" in details and str(MAX_JSON_DEPTH) in details, (method, details)
    assert [await edge.state(i) for i in ids] == before
    assert await edge.workflows() == workflows
    assert sorted(await edge.instances()) == sorted(ids)
    await still_answers(edge)


async def test_json_just_within_the_nesting_limit_is_accepted(edge: Wire) -> None:
    depth = MAX_JSON_DEPTH - 1  # the object itself is one level
    context = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
    info = await edge.stub.StartInstance(
        pb.StartInstanceRequest(workflow=SERVER_FLOW.name, context_json=context), timeout=10
    )
    assert msgspec.json.decode(info.context_json) == msgspec.json.decode(context)


@pytest.mark.parametrize(
    "method, request_",
    [
        ("ListInstances", pb.ListInstancesRequest(workflow=NUL)),
        ("ListInstances", pb.ListInstancesRequest(correlation_id=NUL)),
        ("ListInstances", pb.ListInstancesRequest(workflow="has space")),
        ("ListWorkflows", pb.ListWorkflowsRequest(name=NUL)),
        ("GetWorkflow", pb.GetWorkflowRequest(name=NUL)),
        ("GetWorkflow", pb.GetWorkflowRequest(name=SERVER_FLOW.name, version="v\x00")),
        ("StartInstance", pb.StartInstanceRequest(workflow=NUL)),
        ("StartInstance", pb.StartInstanceRequest(workflow=SERVER_FLOW.name, correlation_id=NUL)),
        ("PollTasks", pb.PollTasksRequest(worker_id=WORKER, queues=[NUL])),
        ("PollTasks", pb.PollTasksRequest(worker_id="w\x00", queues=["q"])),
        ("GetInstance", pb.GetInstanceRequest(instance_id="wi-\x00")),
        ("CompleteTask", pb.CompleteTaskRequest(task_id="wi-\x00.1", lease_owner=WORKER)),
    ],
)
async def test_nul_and_invalid_names_are_invalid_argument_on_every_store(
    edge: Wire, method: str, request_: object
) -> None:
    info = await edge.start(SERVER_FLOW, {"n": 1}, correlation_id="order-1")
    before = await edge.state(info.instance_id)
    await edge.fails(method, request_, grpc.StatusCode.INVALID_ARGUMENT)
    assert await edge.state(info.instance_id) == before
    assert await edge.instances() == [info.instance_id]
    await still_answers(edge)


@pytest.mark.parametrize(
    "token",
    ["garbage", "wi-", "wi-zzzzzzzzzzzzzzzzzzzzzzzz", "wi-0000000000000000000000000", "\x00", " wi-1"],
)
async def test_garbage_page_token_is_invalid_argument(edge: Wire, token: str) -> None:
    info = await edge.start(SERVER_FLOW, {})
    details = await edge.fails(
        "ListInstances", pb.ListInstancesRequest(page_token=token), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "page_token" in details
    assert await edge.instances() == [info.instance_id]


async def test_a_valid_page_token_pages_through_everything(edge: Wire) -> None:
    started = [(await edge.start(SERVER_FLOW, {"i": i})).instance_id for i in range(5)]
    seen: list[str] = []
    token = ""
    while True:
        page = await edge.stub.ListInstances(
            pb.ListInstancesRequest(page_size=2, page_token=token), timeout=10
        )
        seen += [i.instance_id for i in page.instances]
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(started, reverse=True)


@pytest.mark.parametrize(
    "method, request_, field",
    [
        ("GetInstance", pb.GetInstanceRequest(), "instance_id"),
        ("GetInstance", pb.GetInstanceRequest(wait_millis=1000), "instance_id"),
        ("CancelInstance", pb.CancelInstanceRequest(reason="x"), "instance_id"),
        ("GetHistory", pb.GetHistoryRequest(), "instance_id"),
        ("CompleteUserTask", pb.CompleteUserTaskRequest(task_name="approval"), "instance_id"),
        ("CompleteTask", pb.CompleteTaskRequest(lease_owner=WORKER), "task_id"),
        ("FailTask", pb.FailTaskRequest(lease_owner=WORKER, message="x"), "task_id"),
        ("HeartbeatTask", pb.HeartbeatTaskRequest(lease_owner=WORKER), "task_id"),
        ("AdvanceRun", pb.AdvanceRunRequest(lease_owner=WORKER, steps_batch=b"[]"), "task_id"),
        ("GetWorkflow", pb.GetWorkflowRequest(), "name"),
    ],
)
async def test_empty_ids_are_invalid_argument(edge: Wire, method: str, request_: object, field: str) -> None:
    info = await edge.start(SERVER_FLOW, {})
    before = await edge.state(info.instance_id)
    details = await edge.fails(method, request_, grpc.StatusCode.INVALID_ARGUMENT)
    assert field in details and "must not be empty" in details
    assert await edge.state(info.instance_id) == before
    await still_answers(edge)


# ---------------------------------------------------------------------------- the WorkerSession stream


async def session(wire: Wire, *messages: pb.WorkerMessage) -> dict[int, pb.ServerMessage]:
    """Send ``messages`` on one WorkerSession stream; the replies by request id."""
    call = wire.stub.WorkerSession(timeout=10)
    await call.write(pb.WorkerBatch(messages=list(messages)))
    replies: dict[int, pb.ServerMessage] = {}
    while len(replies) < len(messages):
        batch = await call.read()
        replies.update((m.request_id, m) for m in batch.messages)
    await call.done_writing()
    call.cancel()
    return replies


async def test_stream_errors_carry_the_same_codes_as_unary(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {})
    before = await wire.state(info.instance_id)
    replies = await session(
        wire,
        pb.WorkerMessage(request_id=1, poll=pb.PollTasksRequest(worker_id=WORKER, queues=[])),
        pb.WorkerMessage(request_id=2, complete=pb.CompleteTaskRequest(lease_owner=WORKER)),
        pb.WorkerMessage(
            request_id=3,
            complete=pb.CompleteTaskRequest(task_id="wi-000000000000000000000000.1@1", lease_owner=WORKER),
        ),
        pb.WorkerMessage(request_id=4),
        pb.WorkerMessage(
            request_id=5,
            heartbeat=pb.HeartbeatTaskRequest(task_id=f"{info.instance_id}.1@0", lease_owner="intruder"),
        ),
    )
    codes = {
        rid: grpc.StatusCode.OK if m.WhichOneof("body") != "error" else m.error.code
        for rid, m in replies.items()
    }
    assert codes == {
        1: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        2: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        3: grpc.StatusCode.NOT_FOUND.value[0],
        4: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        5: grpc.StatusCode.FAILED_PRECONDITION.value[0],
    }
    assert "no queues" in replies[1].error.message and "no body" in replies[4].error.message
    assert await wire.state(info.instance_id) == before


async def test_stream_serves_a_poll_and_a_report(wire: Wire) -> None:
    info = await wire.start(SERVER_FLOW, {})
    replies = await session(
        wire,
        pb.WorkerMessage(
            request_id=7,
            poll=pb.PollTasksRequest(worker_id=WORKER, queues=[SERVER_FLOW.name], wait_millis=2000),
        ),
    )
    [task] = replies[7].tasks.tasks
    assert task.instance_id == info.instance_id and task.node_id == "a"
    replies = await session(
        wire,
        pb.WorkerMessage(
            request_id=8,
            complete=pb.CompleteTaskRequest(task_id=task.task_id, lease_owner=WORKER, context_json=b"{}"),
        ),
    )
    assert replies[8].report.instance_status == "RUNNING"
    metrics = wire.server.server.metrics.snapshot()
    assert metrics["rpc_calls"]["PollTasks"] >= 1 and metrics["rpc_calls"]["CompleteTask"] >= 1


async def test_nul_in_text_the_stores_keep_is_refused_or_made_storable(edge: Wire) -> None:
    """PostgreSQL cannot keep a NUL in text: what a definition or an operator gives is refused,
    what a worker reports is kept with U+FFFD in its place; the same on every store."""
    end = {"name": "nul-end", "start_node": "e", "nodes": [{"id": "e", "kind": "END", "reason": "a\x00b"}]}
    before = await edge.workflows()
    details = await edge.fails(
        "RegisterWorkflow",
        pb.RegisterWorkflowRequest(definition_json=msgspec.json.encode(end)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "NUL" in details and "'e'" in details
    assert await edge.workflows() == before

    info = await edge.start(SERVER_FLOW, {})
    details = await edge.fails(
        "CancelInstance",
        pb.CancelInstanceRequest(instance_id=info.instance_id, reason="stop\x00now"),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "NUL" in details
    assert (await edge.state(info.instance_id))[0].status == "RUNNING"

    task = await edge.claim(SERVER_FLOW)
    await edge.stub.FailTask(
        pb.FailTaskRequest(
            task_id=task.task_id, lease_owner=WORKER, message="boom\x00!", retryable=False, traceback="tb\x00"
        ),
        timeout=10,
    )
    done, history = await edge.state(info.instance_id)
    assert done.status == "FAILED" and "boom\ufffd!" in done.error
    (failed,) = [e for e in history if e.outcome == "FAILED"]
    assert failed.error == "boom\ufffd!" and failed.traceback == "tb\ufffd"
    await still_answers(edge)
