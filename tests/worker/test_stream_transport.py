"""The stream transport: replies matched by request id, errors as RpcErrors, late claims handed on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.stream import StreamError, StreamTransport


class FakeCall:
    """A WorkerSession call: reads the worker's frames, answers as ``answer`` says."""

    def __init__(self, requests: AsyncIterator[pb.WorkerBatch], answer: Any) -> None:
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.seen: list[pb.WorkerMessage] = []
        self.answer = answer
        self.pump = asyncio.ensure_future(self._pump(requests))

    async def _pump(self, requests: AsyncIterator[pb.WorkerBatch]) -> None:
        async for frame in requests:
            for message in frame.messages:
                self.seen.append(message)
                reply = self.answer(message)
                if reply is not None:
                    self.replies.put_nowait(pb.ServerBatch(messages=[reply]))

    async def read(self) -> Any:
        return await self.replies.get()

    def cancel(self) -> None:
        self.pump.cancel()
        self.replies.put_nowait(grpc.aio.EOF)


class FakeStub:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[FakeCall] = []

    def WorkerSession(self, requests: AsyncIterator[pb.WorkerBatch]) -> FakeCall:  # noqa: N802 (the RPC's name)
        call = FakeCall(requests, self.answer)
        self.calls.append(call)
        return call


def answer(message: pb.WorkerMessage) -> pb.ServerMessage | None:
    body = message.WhichOneof("body")
    rid = message.request_id
    if body == "heartbeat":
        return pb.ServerMessage(request_id=rid, report=pb.ReportResult(lease_expires_at=rid))
    if body == "fail":
        return pb.ServerMessage(
            request_id=rid,
            error=pb.RpcError(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="gone"),
        )
    if body == "advance":
        return pb.ServerMessage(request_id=rid, advanced=pb.AdvanceRunResult(instance_status="RUNNING"))
    return None  # polls are never answered in time


async def test_replies_errors_and_orphans() -> None:
    stub = FakeStub(answer)
    transport = StreamTransport(stub)  # type: ignore[arg-type]
    orphans: list[list[pb.TaskActivation]] = []
    transport.on_orphan_tasks = orphans.append
    try:
        beats = await asyncio.gather(
            *(transport.heartbeat(pb.HeartbeatTaskRequest(task_id=f"t{i}"), 5) for i in range(3))
        )
        assert sorted(b.lease_expires_at for b in beats) == [1, 2, 3]  # each its own reply
        advanced = await transport.advance(pb.AdvanceRunRequest(task_id="t"), 5)
        assert advanced.instance_status == "RUNNING"
        with pytest.raises(StreamError) as failed:
            await transport.fail(pb.FailTaskRequest(task_id="t"), 5)
        assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION and failed.value.details() == "gone"
        with pytest.raises(StreamError) as timed_out:
            await transport.poll(pb.PollTasksRequest(max_tasks=1), 0.05)
        assert timed_out.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        [call] = stub.calls  # one stream for every call
        poll = next(m for m in call.seen if m.WhichOneof("body") == "poll")
        # the server claims a task for the abandoned poll after all: it is handed on, not lost
        late = pb.TaskActivation(task_id="late")
        call.replies.put_nowait(
            pb.ServerBatch(
                messages=[
                    pb.ServerMessage(request_id=poll.request_id, tasks=pb.PollTasksResponse(tasks=[late]))
                ]
            )
        )
        for _ in range(100):
            if orphans:
                break
            await asyncio.sleep(0.01)
        assert [[a.task_id for a in batch] for batch in orphans] == [["late"]]
        for _ in range(100):
            if any(m.WhichOneof("body") == "cancel" for m in call.seen):
                break
            await asyncio.sleep(0.01)
        assert [m.cancel.request_id for m in call.seen if m.WhichOneof("body") == "cancel"] == [
            poll.request_id
        ]
    finally:
        await transport.close()


async def test_a_next_step_answered_to_an_abandoned_report_is_handed_on() -> None:
    """A CompleteTask (or a final AdvanceRun) that asked for its next step (next_queues) and
    stopped waiting: the step the server leased with it arrives in the late answer, and goes to
    ``on_orphan_tasks`` (the worker hands it back) instead of waiting out its lease. A late answer
    with no step hands nothing on."""
    stub = FakeStub(lambda message: None)  # nothing is answered in time
    transport = StreamTransport(stub)  # type: ignore[arg-type]
    orphans: list[list[pb.TaskActivation]] = []
    transport.on_orphan_tasks = orphans.append
    try:
        for task_id in ("a@1", "b@1"):
            request = pb.CompleteTaskRequest(task_id=task_id, lease_owner="w", next_queues=["q"])
            with pytest.raises(StreamError) as timed_out:
                await transport.complete(request, 0.05)
            assert timed_out.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        handback = pb.AdvanceRunRequest(task_id="c@1", lease_owner="w", final=True, next_queues=["q"])
        with pytest.raises(StreamError):
            await transport.advance(handback, 0.05)
        [call] = stub.calls
        first, second = (m for m in call.seen if m.WhichOneof("body") == "complete")
        assert list(first.complete.next_queues) == ["q"]
        [advance] = (m for m in call.seen if m.WhichOneof("body") == "advance")
        replies = [
            pb.ServerMessage(request_id=first.request_id, report=pb.ReportResult(instance_status="RUNNING")),
            pb.ServerMessage(
                request_id=second.request_id,
                report=pb.ReportResult(
                    instance_status="RUNNING", next_task=pb.TaskActivation(task_id="b-next@1")
                ),
            ),
            pb.ServerMessage(
                request_id=advance.request_id,
                advanced=pb.AdvanceRunResult(
                    instance_status="RUNNING", next_task=pb.TaskActivation(task_id="c-next@1")
                ),
            ),
        ]
        call.replies.put_nowait(pb.ServerBatch(messages=replies))
        for _ in range(100):
            if len(orphans) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert [[a.task_id for a in batch] for batch in orphans] == [["b-next@1"], ["c-next@1"]]
    finally:
        await transport.close()


async def test_a_stream_the_server_ends_ends_its_request_side_too() -> None:
    """A server that stops ends the worker's stream (EOF). The request side, fed from the stream's
    own queue, ends with it: before, gRPC's task feeding it waited on that queue for good and was
    destroyed pending when the call was collected (asyncio's "Task was destroyed but it is
    pending!" in the worker's log some seconds into the server's absence). A later call opens a
    new stream."""
    stub = FakeStub(answer)
    transport = StreamTransport(stub)  # type: ignore[arg-type]
    try:
        await transport.heartbeat(pb.HeartbeatTaskRequest(task_id="t1"), 5)
        [first] = stub.calls
        first.replies.put_nowait(grpc.aio.EOF)  # the server ended the stream
        await asyncio.wait_for(first.pump, 5)  # the request side is over, not waiting
        beat = await transport.heartbeat(pb.HeartbeatTaskRequest(task_id="t2"), 5)
        assert beat.lease_expires_at and len(stub.calls) == 2
    finally:
        await transport.close()


async def test_a_report_cut_on_its_way_is_answered_and_its_next_step_handed_back_before_close() -> None:
    """An outside trial: a second SIGTERM cut a worker while a CompleteTask that asked for the
    next step was on its way; the worker told the server to drop the call and closed the stream,
    so the step leased with the report sat on the stopped worker until its lease ran out (an
    attempt spent on a step that never ran; with RetryPolicy.none() the instance failed). The
    cut report is not cancelled on the server, and ``close`` waits for its answer and for the
    hand-back of the step it brought."""
    stub = FakeStub(answer)  # answers AdvanceRun (the hand-back), never CompleteTask by itself
    transport = StreamTransport(stub)  # type: ignore[arg-type]
    handed_back: list[pb.AdvanceRunResult] = []

    def hand_back(activations: list[pb.TaskActivation]) -> None:  # as the poller does
        async def send(act: pb.TaskActivation) -> None:
            request = pb.AdvanceRunRequest(task_id=act.task_id, final=True, handback_reason="SHUTDOWN")
            handed_back.append(await transport.advance(request, 5))

        for act in activations:
            asyncio.ensure_future(send(act))

    transport.on_orphan_tasks = hand_back
    request = pb.CompleteTaskRequest(task_id="a@1", lease_owner="w", next_queues=["q"])
    report = asyncio.ensure_future(transport.complete(request, 30))
    await asyncio.sleep(0.05)
    report.cancel()  # the drain's cut
    with pytest.raises(asyncio.CancelledError):
        await report
    [call] = stub.calls
    call.done = lambda: False  # type: ignore[attr-defined]
    await asyncio.sleep(0.02)
    assert not [m for m in call.seen if m.WhichOneof("body") == "cancel"]  # the server is not told to drop it
    (complete,) = [m for m in call.seen if m.WhichOneof("body") == "complete"]
    closing = asyncio.ensure_future(transport.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # waiting for the cut report's answer
    late = pb.ReportResult(instance_status="RUNNING", next_task=pb.TaskActivation(task_id="a-next@1"))
    call.replies.put_nowait(
        pb.ServerBatch(messages=[pb.ServerMessage(request_id=complete.request_id, report=late)])
    )
    await asyncio.wait_for(closing, 5)
    assert [m.advance.task_id for m in call.seen if m.WhichOneof("body") == "advance"] == ["a-next@1"]
    assert [r.instance_status for r in handed_back] == ["RUNNING"]  # answered before the stream closed


async def test_a_server_without_its_database_is_left_for_a_new_stream() -> None:
    """A message answered UNAVAILABLE because the server's database is away ends the stream: the
    calls waiting on it fail UNAVAILABLE (to be made again), and the next call opens a new stream,
    which a channel over several servers sends to the next (docs/failover.md). A stopping
    server's UNAVAILABLE leaves the stream alone: it ends it itself."""
    away = grpc.StatusCode.UNAVAILABLE.value[0]

    def cut(message: pb.WorkerMessage) -> pb.ServerMessage | None:
        body = message.WhichOneof("body")
        rid = message.request_id
        if body == "fail":
            text = "database unavailable: no connection within 5 s"
            return pb.ServerMessage(
                request_id=rid, error=pb.RpcError(code=away, message=text, not_applied=True)
            )
        if body == "advance":
            text = "the server is stopping; poll again"
            return pb.ServerMessage(request_id=rid, error=pb.RpcError(code=away, message=text))
        return answer(message)

    stub = FakeStub(cut)
    transport = StreamTransport(stub)  # type: ignore[arg-type]
    try:
        with pytest.raises(StreamError) as stopping:
            await transport.advance(pb.AdvanceRunRequest(task_id="t"), 5)
        assert stopping.value.code() == grpc.StatusCode.UNAVAILABLE
        await transport.heartbeat(pb.HeartbeatTaskRequest(task_id="t"), 5)
        assert len(stub.calls) == 1  # the stopping server's answer left the stream open
        waiting = asyncio.ensure_future(transport.poll(pb.PollTasksRequest(worker_id="w"), 5))
        await asyncio.sleep(0.01)
        with pytest.raises(StreamError) as failed:
            await transport.fail(pb.FailTaskRequest(task_id="t"), 5)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE and failed.value.not_applied
        with pytest.raises(StreamError) as ended:
            await waiting  # the poll waiting on that stream: made again by the poller
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "database unavailable" in ended.value.details()
        beat = await transport.heartbeat(pb.HeartbeatTaskRequest(task_id="t"), 5)
        assert len(stub.calls) == 2 and beat.lease_expires_at > 0  # on a new stream
    finally:
        await transport.close()
