"""A WorkerSession stream that ends with replies it never sent (wiggle/_server/session.py).

Replies go out as their requests finish; when the stream ends (the worker died, its connection
broke, it closed) the replies still queued never reach it. A poll's reply leases steps to that
worker: they are given back at once (``Delivery.give_back_steps``: a release, as a worker's)
instead of waiting for their leases to expire. The next step a
report's reply brings stays leased: a worker resends a report whose answer it lost and gets that
step again (docs/semantics.md#chained-steps). A reply that went out is never handed back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from google.protobuf.message import Message

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._server import session as session_module
from wiggle._server.session import serve_session


class FakeServer:
    """The dispatch table: answers a heartbeat at once, a poll and a report when released; and
    the give-back the session calls with the steps it could not send."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.given_back: list[tuple[str, str]] = []

    async def dispatch(self, method: str, request: Message) -> Message:
        if method == "HeartbeatTask":
            return pb.ReportResult(instance_status="RUNNING")
        await self.release.wait()
        if method == "PollTasks":
            return pb.PollTasksResponse(tasks=[pb.TaskActivation(task_id="t1.1@1", lease_owner="w")])
        result = pb.ReportResult(instance_status="RUNNING")
        result.next_task.task_id = "t2.1@2"
        result.next_task.lease_owner = "w"
        return result

    def give_back(self, steps: list[tuple[str, str]]) -> None:
        self.given_back.extend(steps)


async def _requests(*messages: pb.WorkerMessage) -> AsyncIterator[pb.WorkerBatch]:
    yield pb.WorkerBatch(messages=list(messages))
    await asyncio.Event().wait()  # the worker says nothing more; the stream stays open


def _messages() -> list[pb.WorkerMessage]:
    return [
        pb.WorkerMessage(request_id=1, heartbeat=pb.HeartbeatTaskRequest(task_id="t0.1@1", lease_owner="w")),
        pb.WorkerMessage(request_id=2, poll=pb.PollTasksRequest(worker_id="w", queues=["q"], max_tasks=1)),
        pb.WorkerMessage(request_id=3, complete=pb.CompleteTaskRequest(task_id="t2.1@1", lease_owner="w")),
    ]


async def _settled() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_steps_polled_for_in_replies_the_ended_stream_never_sent_are_handed_back() -> None:
    server = FakeServer()
    session = serve_session(_requests(*_messages()), server.dispatch, server.give_back)
    first = await anext(session)  # the heartbeat's reply went out
    assert [m.request_id for m in first.messages] == [1]
    server.release.set()  # the poll and the report finish: their replies wait to be sent...
    await _settled()
    await session.aclose()  # ...and the stream ends first
    await _settled()
    # the poll's step; not the step the report chained (t2.1@2), which its resend gets again
    assert server.given_back == [("t1.1@1", "w")]


async def test_a_reply_that_went_out_is_not_handed_back() -> None:
    server = FakeServer()
    server.release.set()
    session = serve_session(_requests(*_messages()), server.dispatch, server.give_back)
    sent: list[int] = []
    while len(sent) < 3:
        sent += [m.request_id for m in (await anext(session)).messages]
    await session.aclose()
    await _settled()
    assert sorted(sent) == [1, 2, 3] and server.given_back == []


async def test_a_reply_without_steps_is_dropped_with_the_stream() -> None:
    server = FakeServer()
    heartbeat, _, _ = _messages()
    session = serve_session(_requests(heartbeat, heartbeat), server.dispatch, server.give_back)
    await anext(session)
    await session.aclose()
    await _settled()
    assert server.given_back == []


async def test_past_the_limit_of_requests_in_flight_a_message_is_refused_at_once(monkeypatch) -> None:
    """A stream of 50,000 long polls (an outside trial) held 50,000 tasks; past MAX_IN_FLIGHT a
    message is answered RESOURCE_EXHAUSTED at once, and the ones in flight are answered as ever."""
    monkeypatch.setattr(session_module, "MAX_IN_FLIGHT", 3)
    server = FakeServer()
    polls = [
        pb.WorkerMessage(request_id=i, poll=pb.PollTasksRequest(worker_id="w", queues=["q"], max_tasks=1))
        for i in range(1, 6)
    ]
    session = serve_session(_requests(*polls), server.dispatch, server.give_back)
    refused = await anext(session)
    assert [(m.request_id, m.error.code) for m in refused.messages] == [(4, 8), (5, 8)]  # RESOURCE_EXHAUSTED
    assert "3 requests of this stream are being answered already" in refused.messages[0].error.message
    server.release.set()
    answered = await anext(session)
    assert sorted(m.request_id for m in answered.messages) == [1, 2, 3]
    assert all(m.HasField("tasks") for m in answered.messages)
    await session.aclose()
