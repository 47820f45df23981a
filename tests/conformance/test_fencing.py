"""Fencing (docs/semantics.md#fencing): a report applies only to the claim that made it.

A token keeps its id from node to node and a worker keeps its id from step to step, so a report
resent after its first answer was lost (the worker retries on UNAVAILABLE and DEADLINE_EXCEEDED)
could land on the token's *next* claim by the same worker. Every activation's task id names its
claim (``<token id>@<claim>``); these tests resend each report over the real gRPC server, unary and
on the WorkerSession stream, on every store, and check that it is refused with FAILED_PRECONDITION
and changes nothing. Chaining across queues (docs/semantics.md#chaining-across-queues) is below.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgspec
import pytest

from wiggle._engine.records import TaskDone
from wiggle._fast import encode_batch
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._server import session
from wiggle.testing import EmbeddedServer

from .conftest import Harness

WORKER = "worker-1"
Flow = Any


def _step(name: str) -> Any:
    def handler(ctx: dict[str, Any]) -> dict[str, Any]:
        return {**ctx, name: ctx.get(name, 0) + 1}

    handler.__name__ = name
    return handler


class Raw:
    """A server and a raw stub: the protocol as any worker speaks it."""

    def __init__(self, server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.server = server
        self.stub = stub

    async def register(self, bp: Flow) -> None:
        await self.stub.RegisterWorkflow(pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()))

    async def start(self, bp: Flow) -> str:
        info = await self.stub.StartInstance(pb.StartInstanceRequest(workflow=bp.name, context_json=b"{}"))
        return info.instance_id

    async def poll(self, bp: Flow) -> pb.TaskActivation:
        response = await self.stub.PollTasks(
            pb.PollTasksRequest(worker_id=WORKER, queues=[bp.name], max_tasks=1, wait_millis=2000)
        )
        assert len(response.tasks) == 1, "nothing to claim"
        return response.tasks[0]

    async def state(self, instance_id: str) -> tuple[Any, ...]:
        info = await self.stub.GetInstance(pb.GetInstanceRequest(instance_id=instance_id))
        history = await self.stub.GetHistory(pb.GetHistoryRequest(instance_id=instance_id))
        return (
            info.status,
            info.context_json,
            [(t.token_id, t.node_id, t.status, t.attempt, t.lease_owner) for t in info.tokens],
            [(h.node_id, h.outcome, h.attempt) for h in history.entries if h.kind in ("TASK", "PREDICATE")],
        )

    async def refused(self, method: str, request: Any) -> str:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(self.stub, method)(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        return err.value.details() or ""


@contextlib.asynccontextmanager
async def raw(harness: Harness) -> AsyncIterator[Raw]:
    async with harness.server() as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            yield Raw(server, pb_grpc.WiggleControlPlaneStub(channel))


async def _second_claim(r: Raw, bp: Flow) -> tuple[str, pb.TaskActivation, pb.TaskActivation]:
    """Claim s1, complete it, claim s2 with the same worker: the token is the same, the claim not."""
    iid = await r.start(bp)
    first = await r.poll(bp)
    await r.stub.CompleteTask(
        pb.CompleteTaskRequest(task_id=first.task_id, lease_owner=WORKER, context_json=b'{"s1": 1}')
    )
    second = await r.poll(bp)
    assert second.node_id == "s2" and second.task_id != first.task_id
    assert second.task_id.rpartition("@")[0] == first.task_id.rpartition("@")[0]  # one token
    return iid, first, second


async def test_a_resent_report_does_not_settle_the_next_claim(server_harness: Harness) -> None:
    bp = server_harness.define("fence").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid, first, second = await _second_claim(r, bp)
        before = await r.state(iid)
        for method, request in (
            (
                "CompleteTask",
                pb.CompleteTaskRequest(task_id=first.task_id, lease_owner=WORKER, context_json=b'{"s1": 1}'),
            ),
            ("CompleteTask", pb.CompleteTaskRequest(task_id=first.task_id, lease_owner=WORKER)),
            (
                "FailTask",
                pb.FailTaskRequest(task_id=first.task_id, lease_owner=WORKER, message="x", retryable=False),
            ),
            (
                "FailTask",
                pb.FailTaskRequest(task_id=first.task_id, lease_owner=WORKER, message="x", release=True),
            ),
            ("HeartbeatTask", pb.HeartbeatTaskRequest(task_id=first.task_id, lease_owner=WORKER)),
        ):
            details = await r.refused(method, request)
            assert "already settled" in details and first.task_id in details, details
            assert "'s2'" in details  # where the token is now
        assert await r.state(iid) == before
        status, _, tokens, _ = before
        assert (status, tokens[0][1], tokens[0][2]) == ("RUNNING", "s2", "RUNNING")
        # the claim that holds the token still reports normally
        done = await r.stub.CompleteTask(pb.CompleteTaskRequest(task_id=second.task_id, lease_owner=WORKER))
        assert done.instance_status == "COMPLETED"
        _, context, _, history = await r.state(iid)
        assert msgspec.json.decode(context) == {"s1": 1}
        assert history == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1)]


async def test_a_resent_report_on_the_stream_is_refused_too(server_harness: Harness) -> None:
    bp = server_harness.define("fence-stream").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid, first, _ = await _second_claim(r, bp)
        before = await r.state(iid)
        call = r.stub.WorkerSession()
        await call.write(
            pb.WorkerBatch(
                messages=[
                    pb.WorkerMessage(
                        request_id=1,
                        complete=pb.CompleteTaskRequest(task_id=first.task_id, lease_owner=WORKER),
                    )
                ]
            )
        )
        reply = await call.read()
        await call.done_writing()
        (message,) = reply.messages
        assert message.WhichOneof("body") == "error"
        assert message.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "already settled" in message.error.message
        assert await r.state(iid) == before


async def test_a_bare_token_id_names_no_claim(server_harness: Harness) -> None:
    bp = server_harness.define("fence-bare").step(_step("s1")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        task = await r.poll(bp)
        before = await r.state(iid)
        bare = task.task_id.rpartition("@")[0]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await r.stub.CompleteTask(pb.CompleteTaskRequest(task_id=bare, lease_owner=WORKER))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "names no claim" in (err.value.details() or "")
        assert await r.state(iid) == before


def _batch(*nodes: str) -> bytes:
    return encode_batch([TaskDone(n, {n: 1}, []) for n in nodes])


async def test_a_resent_advance_run_is_answered_again_not_applied_twice(local_harness: Harness) -> None:
    bp = local_harness.define("fence-run").step(_step("s1")).step(_step("s2")).step(_step("s3")).build()
    async with raw(local_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        task = await r.poll(bp)
        request = pb.AdvanceRunRequest(
            task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch("s1"), run_offset=0
        )
        first = await r.stub.AdvanceRun(request)
        assert (first.token_status, first.applied_steps) == ("RUNNING", 1)
        after_first = await r.state(iid)
        again = await r.stub.AdvanceRun(request)  # its answer was lost: sent again
        assert (again.token_status, again.applied_steps, again.parked_task_id) == (
            "RUNNING",
            1,
            first.parked_task_id,
        )
        assert await r.state(iid) == after_first
        # a batch from a point the run never reached changes nothing either
        details = await r.refused(
            "AdvanceRun",
            pb.AdvanceRunRequest(
                task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch("s2"), run_offset=5
            ),
        )
        assert "step 5" in details
        assert await r.state(iid) == after_first
        final = pb.AdvanceRunRequest(
            task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch("s2", "s3"), run_offset=1, final=True
        )
        last = await r.stub.AdvanceRun(final)
        assert last.instance_status == "COMPLETED"
        done = await r.state(iid)
        # the final batch resent: the instance is finished, so it applies nothing and says so
        resent = await r.stub.AdvanceRun(final)
        assert (resent.instance_status, resent.applied_steps) == ("COMPLETED", 0)
        assert await r.state(iid) == done
        _, context, _, history = await r.state(iid)
        assert msgspec.json.decode(context) == {"s1": 1, "s2": 1, "s3": 1}
        assert history == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1), ("s3", "COMPLETED", 1)]


async def test_an_advance_run_of_an_earlier_claim_is_refused(local_harness: Harness) -> None:
    # s1 | sleep | s2: the run hands back at the sleep; the same worker claims s2; the first run's
    # final batch, resent, must not be applied to s2.
    bp = local_harness.define("fence-run2").step(_step("s1")).sleep("pause", 0).step(_step("s2")).build()
    async with raw(local_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        task = await r.poll(bp)
        request = pb.AdvanceRunRequest(
            task_id=task.task_id, lease_owner=WORKER, steps_batch=_batch("s1"), run_offset=0, final=True
        )
        await r.stub.AdvanceRun(request)
        nxt = await r.poll(bp)
        assert nxt.node_id == "s2" and nxt.task_id != task.task_id
        before = await r.state(iid)
        details = await r.refused("AdvanceRun", request)
        assert "already settled" in details
        assert await r.state(iid) == before


# ---------------------------------------------------------------------------- chaining across queues


async def test_one_worker_serving_every_queue_never_waits_out_a_lease(harness: Harness) -> None:
    """One worker for two and three queues, every mode and store: finished well inside a lease,
    with a history of one attempt per step (no lease expiry, no retry nobody asked for)."""
    for queues in (("", "payments"), ("", "payments", "mail")):
        wf = harness.define("queues")
        for i, queue in enumerate(queues * 2):
            wf = wf.step(_step(f"s{i}"), queue=queue or None)
        bp = wf.build()
        async with harness.running([bp], lease_millis=30_000) as (server, _):
            started = time.monotonic()
            handle = await server.client.start(bp, {})
            iid = handle.instance_id
            info = await harness.finish(server, iid)
            elapsed = time.monotonic() - started
            assert info.status == "COMPLETED", info
            assert elapsed < 15, f"{elapsed:.1f} s: a step waited for a lease"
            history = await server.client.history(iid)
            assert [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"] == [
                (f"s{i}", "COMPLETED", 1) for i in range(len(queues) * 2)
            ], history
            assert not any("lease expired" in h.error for h in history)


async def test_a_step_claimed_for_a_poll_whose_call_ended_is_given_back(server_harness: Harness) -> None:
    # A unary PollTasks whose deadline passes while its claim commits: the worker never hears of
    # the step; the server gives it back at once instead of leaving it leased until its lease ends.
    bp = server_harness.define("ended").step(_step("s1")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)  # nobody waits: s1 stays READY
        store = r.server.server.instances.store
        real_claim = store.claim

        async def slow_answer(*args: Any, **kwargs: Any) -> Any:
            claimed = await real_claim(*args, **kwargs)
            await asyncio.sleep(0.5)  # committed; the answer leaves after the caller's deadline
            return claimed

        store.claim = slow_answer
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await r.stub.PollTasks(
                pb.PollTasksRequest(worker_id="gone", queues=[bp.name], max_tasks=1, wait_millis=0),
                timeout=0.2,
            )
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        store.claim = real_claim
        # the lease is the server's default (30 s): only a give-back lets another worker have it now
        response = await r.stub.PollTasks(
            pb.PollTasksRequest(worker_id=WORKER, queues=[bp.name], max_tasks=1, wait_millis=3000)
        )
        (act,) = response.tasks
        assert act.instance_id == iid and act.node_id == "s1" and act.attempt == 1
        done = await r.stub.CompleteTask(
            pb.CompleteTaskRequest(
                task_id=act.task_id, lease_owner=act.lease_owner, context_json=b'{"s1": 1}'
            )
        )
        assert done.instance_status == "COMPLETED"
        history = await r.server.client.history(iid)
        assert [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"] == [
            ("s1", "COMPLETED", 1)
        ]
        assert [(e.kind, e.outcome) for e in history if e.kind != "TASK"] == [("END", "END")]  # no expiry


async def test_a_polled_step_an_ended_stream_never_sent_is_handed_back_and_a_chained_one_kept(
    server_harness: Harness,
) -> None:
    # What wiggle/_server/session.py does with the replies still queued when a WorkerSession
    # stream ends (tests/server/test_session_unsent.py provokes that): the server takes the
    # give-back of a polled step, attempt unspent; a step a report chained stays leased, for the
    # worker's resend of that report gets it again (docs/semantics.md#chained-steps).
    bp = server_harness.define("unsent").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        first, second = await r.start(bp), await r.start(bp)
        polled = await r.poll(bp)
        other = await r.poll(bp)
        report_request = pb.CompleteTaskRequest(
            task_id=other.task_id,
            lease_owner=other.lease_owner,
            context_json=b'{"s1": 1}',
            next_queues=[bp.name],
        )
        report = await r.stub.CompleteTask(report_request)
        assert report.next_task.node_id == "s2"  # chained: leased to WORKER in the report's commit
        replies: asyncio.Queue[pb.ServerMessage | None] = asyncio.Queue()
        replies.put_nowait(pb.ServerMessage(request_id=1, tasks=pb.PollTasksResponse(tasks=[polled])))
        replies.put_nowait(pb.ServerMessage(request_id=2, report=report))
        replies.put_nowait(None)
        session._give_back_unsent(replies, r.server.server.instances.delivery.give_back_steps)
        again = await r.poll(bp)  # the polled step, READY again
        assert (again.instance_id, again.node_id, again.attempt) == (polled.instance_id, "s1", 1)
        resent = await r.stub.CompleteTask(report_request)  # the report's answer was lost: resent
        assert resent.next_task.task_id == report.next_task.task_id  # its chained step, still held
        todo = [again, resent.next_task]
        while todo:  # run the rest: the first instance's s2 is still to come
            for act in todo:
                await r.stub.CompleteTask(
                    pb.CompleteTaskRequest(
                        task_id=act.task_id, lease_owner=act.lease_owner, context_json=b"{}"
                    )
                )
            response = await r.stub.PollTasks(
                pb.PollTasksRequest(worker_id=WORKER, queues=[bp.name], max_tasks=2, wait_millis=300)
            )
            todo = list(response.tasks)
        assert {polled.instance_id, other.instance_id} == {first, second}
        for iid in (first, second):
            history = await r.server.client.history(iid)
            assert [(e.node_id, e.attempt) for e in history if e.kind == "TASK"] == [("s1", 1), ("s2", 1)], (
                history
            )
            assert [(e.kind, e.outcome) for e in history if e.kind != "TASK"] == [("END", "END")]  # no expiry
