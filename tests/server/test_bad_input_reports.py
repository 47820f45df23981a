"""Bad worker reports and polls over the wire (raw stubs): AdvanceRun's run_offset, handback_reason
and step count, a poll's queue count, a gate completed with a context.

Each case answers INVALID_ARGUMENT with a message naming the field and the value or the limit, and
changes nothing: the instance, its history and its lease stand, the metrics and the Queues page
are as before, and the same claim goes on with a good report. Every test runs on the memory store
and, with WIGGLE_TEST_POSTGRES=1, on PostgreSQL (a schema of its own).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgspec
import pytest
from pg import STORES, TEST_DATABASE_URL, async_temp_schema

from wiggle import ExecutionMode, Handback, Workflow
from wiggle._limits import MAX_POLL_QUEUES
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._server.worker_service import HANDBACK_REASONS
from wiggle.testing import EmbeddedServer

from .test_bad_input import _h  # a named handler that returns its context

WORKER = "worker-reports"


def _yes(ctx) -> bool:
    return True


LOCAL = (
    Workflow.define("bir-local")
    .execution(ExecutionMode.LOCAL_SYNC)
    .step(_h("a"))
    .step(_h("b"))
    .step(_h("c"))
    .build()
)
GATED = Workflow.define("bir-gated").step(_h("a")).gate(_yes, name="g").step(_h("b")).build()
FLOWS = (LOCAL, GATED)


class Wire:
    """A server (on one store) and a raw stub on a grpc.aio channel."""

    def __init__(self, server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.server = server
        self.stub = stub

    async def fails(self, method: str, request: Any) -> str:
        """Call ``method``; assert it fails with INVALID_ARGUMENT and a message; return it."""
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(self.stub, method)(request, timeout=30)
        code = err.value.code()
        assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {code} {err.value.details()}"
        details = err.value.details() or ""
        assert details, f"{method} failed without a message"
        return details

    async def start(self, bp: Any) -> str:
        info = await self.stub.StartInstance(
            pb.StartInstanceRequest(workflow=bp.name, context_json=b'{"n": 0}'), timeout=30
        )
        return info.instance_id

    async def claim(self, bp: Any) -> pb.TaskActivation:
        response = await self.stub.PollTasks(
            pb.PollTasksRequest(worker_id=WORKER, queues=[bp.name], max_tasks=1, wait_millis=2000), timeout=30
        )
        assert len(response.tasks) == 1, "nothing to claim"
        return response.tasks[0]

    async def state(self, instance_id: str) -> tuple[Any, ...]:
        """Everything a refused report must leave as it was: the instance, its tokens (leases
        included) and its history."""
        info = await self.stub.GetInstance(pb.GetInstanceRequest(instance_id=instance_id), timeout=10)
        history = await self.stub.GetHistory(pb.GetHistoryRequest(instance_id=instance_id), timeout=10)
        return (
            info.status,
            info.context_json,
            info.updated_at,
            [
                (
                    t.token_id,
                    t.node_id,
                    t.status,
                    t.attempt,
                    t.lease_owner,
                    t.lease_expires_at,
                    t.local_run_steps,
                )
                for t in info.tokens
            ],
            [(h.node_id, h.outcome, h.attempt, h.error) for h in history.entries],
        )

    async def queues(self) -> set[str]:
        response = await self.stub.ListQueues(pb.ListQueuesRequest(), timeout=10)
        return {q.queue for q in response.queues}

    def handbacks(self) -> dict[str, int]:
        return dict(self.server.server.metrics.snapshot()["handbacks"])


@pytest.fixture(params=STORES)
async def wire(request: pytest.FixtureRequest) -> AsyncIterator[Wire]:
    async with contextlib.AsyncExitStack() as stack:
        settings: dict = {}
        if request.param == "postgres":
            settings["database_url"] = TEST_DATABASE_URL
            settings["database_schema"] = await stack.enter_async_context(async_temp_schema())
        server = await stack.enter_async_context(EmbeddedServer(**settings))
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        for bp in FLOWS:
            await stub.RegisterWorkflow(
                pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()), timeout=10
            )
        yield Wire(server, stub)


def _batch(*nodes: str) -> bytes:
    return msgspec.json.encode([["T", n, {}, []] for n in nodes])


# ---------------------------------------------------------------------------- AdvanceRun run_offset


@pytest.mark.parametrize(
    "steps, offset",
    [
        ([pb.StepResult(node_id="a", context_json=b'{"n": "APPLIED?"}')], -1),  # looked like a resend
        ([pb.StepResult(node_id="x", context_json=b"{}")] * 5, -5),  # bogus nodes, never checked
        ([pb.StepResult(node_id="a", context_json=b"{}")], -(2**31)),
    ],
)
async def test_a_negative_run_offset_is_invalid_argument(wire: Wire, steps: list, offset: int) -> None:
    iid = await wire.start(LOCAL)
    task = await wire.claim(LOCAL)
    before = await wire.state(iid)
    for final in (False, True):
        details = await wire.fails(
            "AdvanceRun",
            pb.AdvanceRunRequest(
                task_id=task.task_id, lease_owner=WORKER, steps=steps, run_offset=offset, final=final
            ),
        )
        assert "run_offset" in details and str(offset) in details, details
        assert await wire.state(iid) == before
    # the claim goes on: the same batch at its true offset is applied
    good = await wire.stub.AdvanceRun(
        pb.AdvanceRunRequest(task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch("a"), run_offset=0)
    )
    assert (good.token_status, good.applied_steps) == ("RUNNING", 1)


# ---------------------------------------------------------------------------- AdvanceRun handback_reason


def test_the_accepted_handback_reasons_are_the_workers() -> None:
    assert HANDBACK_REASONS == {h.value for h in Handback}


@pytest.mark.parametrize(
    "reason, shown",
    [
        ("R1-" + "x" * 10_000, "10003 characters"),
        ("terminal", "'terminal'"),
        ("UNSPECIFIED", "'UNSPECIFIED'"),
        ("TERMINAL ", "'TERMINAL '"),
    ],
)
async def test_an_unknown_handback_reason_is_invalid_argument(wire: Wire, reason: str, shown: str) -> None:
    iid = await wire.start(LOCAL)
    task = await wire.claim(LOCAL)
    before, counted = await wire.state(iid), wire.handbacks()
    details = await wire.fails(
        "AdvanceRun",
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps_batch=_batch("a"),
            run_offset=0,
            final=True,
            handback_reason=reason,
        ),
    )
    assert "handback_reason" in details and shown in details, details
    assert len(details) < 600, "the reason is trimmed in the message"
    assert "MAX_STEPS" in details and "SHUTDOWN" in details, "the message lists the accepted reasons"
    assert await wire.state(iid) == before
    assert wire.handbacks() == counted
    # the claim goes on: the same batch with a reason the worker sends hands back
    done = await wire.stub.AdvanceRun(
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps_batch=_batch("a"),
            run_offset=0,
            final=True,
            handback_reason=Handback.MAX_STEPS.value,
        )
    )
    assert (done.instance_status, done.applied_steps) == ("RUNNING", 1)
    assert wire.handbacks().get("MAX_STEPS", 0) == counted.get("MAX_STEPS", 0) + 1
    assert not any(key.startswith(("R1-", "terminal", "UNSPEC", "TERMINAL ")) for key in wire.handbacks())


# ---------------------------------------------------------------------------- AdvanceRun step count


async def test_more_steps_than_the_batch_limit_is_invalid_argument_in_either_encoding(wire: Wire) -> None:
    iid = await wire.start(LOCAL)
    task = await wire.claim(LOCAL)
    before = await wire.state(iid)
    repeated = await wire.fails(
        "AdvanceRun",
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps=[pb.StepResult(node_id="a")] * 10_001,
            run_offset=0,
        ),
    )
    batched = await wire.fails(
        "AdvanceRun",
        pb.AdvanceRunRequest(
            task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch(*["a"] * 10_001), run_offset=0
        ),
    )
    assert repeated == "steps has 10001 steps; the limit is 10000"
    assert batched == "steps_batch has 10001 steps; the limit is 10000"
    assert await wire.state(iid) == before


# ---------------------------------------------------------------------------- PollTasks queue count


async def test_a_poll_of_more_queues_than_the_limit_is_invalid_argument(wire: Wire) -> None:
    iid = await wire.start(LOCAL)
    before, shown = await wire.state(iid), await wire.queues()
    many = [f"q{i}" for i in range(MAX_POLL_QUEUES + 1)]
    details = await wire.fails("PollTasks", pb.PollTasksRequest(worker_id=WORKER, queues=many, wait_millis=0))
    assert f"names {MAX_POLL_QUEUES + 1} queues; the limit is {MAX_POLL_QUEUES}" in details, details
    # the same poll on the WorkerSession stream
    call = wire.stub.WorkerSession(timeout=30)
    await call.write(
        pb.WorkerBatch(
            messages=[pb.WorkerMessage(request_id=1, poll=pb.PollTasksRequest(worker_id=WORKER, queues=many))]
        )
    )
    [reply] = (await call.read()).messages
    await call.done_writing()
    call.cancel()
    assert reply.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert f"the limit is {MAX_POLL_QUEUES}" in reply.error.message
    # nothing claimed, nothing kept for the Queues page
    assert await wire.state(iid) == before
    assert await wire.queues() == shown
    # a report's next_queues (the queues its worker serves) is bounded alike
    task = await wire.claim(LOCAL)
    before = await wire.state(iid)
    details = await wire.fails(
        "AdvanceRun",
        pb.AdvanceRunRequest(
            task_id=task.task_id,
            lease_owner=WORKER,
            steps_batch=_batch("a"),
            run_offset=0,
            final=True,
            next_queues=many,
        ),
    )
    assert f"next_queues names {MAX_POLL_QUEUES + 1} queues" in details, details
    assert await wire.state(iid) == before


async def test_a_poll_of_as_many_queues_as_the_limit_is_served(wire: Wire) -> None:
    await wire.start(LOCAL)
    queues = [f"q{i}" for i in range(MAX_POLL_QUEUES - 1)] + [LOCAL.name]
    response = await wire.stub.PollTasks(
        pb.PollTasksRequest(worker_id=WORKER, queues=queues, wait_millis=2000), timeout=30
    )
    assert [t.node_id for t in response.tasks] == ["a"]


# ---------------------------------------------------------------------------- CompleteTask on a gate


@pytest.mark.parametrize(
    "result, carried",
    [({"context_json": b'{"n": 5}'}, "context_json"), ({}, "no result")],
)
async def test_a_gate_completed_with_a_context_is_invalid_argument(
    wire: Wire, result: dict, carried: str
) -> None:
    iid = await wire.start(GATED)
    first = await wire.claim(GATED)
    await wire.stub.CompleteTask(
        pb.CompleteTaskRequest(task_id=first.task_id, lease_owner=WORKER, context_json=b'{"n": 1}'),
        timeout=30,
    )
    gate = await wire.claim(GATED)
    assert (gate.node_id, gate.kind) == ("g", "PREDICATE")
    before = await wire.state(iid)
    details = await wire.fails(
        "CompleteTask", pb.CompleteTaskRequest(task_id=gate.task_id, lease_owner=WORKER, **result)
    )
    assert "'g' is a PREDICATE" in details and "predicate_value" in details and carried in details, details
    after = await wire.state(iid)
    assert after == before  # RUNNING, no failed attempt, the gate still leased to the worker
    assert [(t[1], t[2], t[4]) for t in after[3]] == [("g", "RUNNING", WORKER)]
    # the same claim then reports its branch
    done = await wire.stub.CompleteTask(
        pb.CompleteTaskRequest(task_id=gate.task_id, lease_owner=WORKER, predicate_value=True), timeout=30
    )
    assert done.instance_status == "RUNNING"
    assert (await wire.claim(GATED)).node_id == "b"
