"""The stream transport: every worker call multiplexed over one WorkerSession stream.

Each request carries a request id; the server answers, in any order, with a ServerMessage naming
it (proto/wiggle/_rpc/wiggle.proto, ``WorkerSession``). The stream reconnects on the next call
after it breaks; calls in flight when it breaks fail with the stream's error (UNAVAILABLE when it
just closed), so the reporter retries them like any unary call.

A message answered UNAVAILABLE because the server's database is away ends that stream at once
(``_move_on``), and the worker's next call opens another, which a channel over several servers
sends to the next one (wiggle/_client/targets.py). Before, the stream stayed on a server cut from
its database, its polls and reports answered UNAVAILABLE for as long as the cut lasted, while the
other servers had theirs. (A stopping server ends its streams itself, once it has answered what
it read.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import grpc

from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._wire.status import leaves_stream

__all__ = ["StreamTransport", "StreamError"]


class StreamError(grpc.RpcError):  # type: ignore[misc]  # grpc ships no type stubs
    """An error reply on the worker stream, shaped like an AioRpcError (``code()``, ``details()``)."""

    def __init__(self, code: grpc.StatusCode, details: str, not_applied: bool = False) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        #: UNAVAILABLE only: the server applied nothing of the call (``RpcError.not_applied``)
        self.not_applied = not_applied

    def code(self) -> grpc.StatusCode:
        """The gRPC status code the server (or the stream) gave."""
        return self._code

    def details(self) -> str:
        """The error message."""
        return self._details


_CODES = {c.value[0]: c for c in grpc.StatusCode}

OrphanHandler = Callable[[list[pb.TaskActivation]], None]

#: The calls that report a step: cancelled on the worker, they are still answered (``_unanswered``).
_REPORTS = frozenset({"CompleteTask", "FailTask", "AdvanceRun"})
#: How long ``close`` waits for the answers of reports a drain's cut left on their way.
SETTLE_SECONDS = 5.0


class StreamTransport:
    """The Transport over one WorkerSession stream; reconnects when it breaks."""

    def __init__(self, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.stub = stub
        self._call: grpc.aio.StreamStreamCall | None = None
        self._pending: dict[int, asyncio.Future[pb.ServerMessage]] = {}
        self._next_id = 0
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._outgoing: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
        #: called with activations claimed by a poll nobody waits for any more (timed out, cancelled)
        self.on_orphan_tasks: OrphanHandler | None = None
        # Reports whose caller was cancelled (a drain's cut) before their answer came: the server
        # is not told to drop them (it may have applied them, and leased the next step with
        # one), and ``close`` waits a moment for their answers (``_settle``).
        self._unanswered: set[int] = set()

    # ------------------------------------------------------------------ the five calls
    # (each copies its request into the message: faster than passing it to the constructor)

    def poll(self, request: pb.PollTasksRequest, timeout: float) -> Coroutine[Any, Any, pb.PollTasksResponse]:
        """PollTasks over the stream."""
        message = pb.WorkerMessage()
        message.poll.CopyFrom(request)
        return self._call_with(message, "PollTasks", timeout, "tasks")

    def complete(
        self, request: pb.CompleteTaskRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.ReportResult]:
        """CompleteTask over the stream."""
        message = pb.WorkerMessage()
        message.complete.CopyFrom(request)
        return self._call_with(message, "CompleteTask", timeout, "report")

    def fail(self, request: pb.FailTaskRequest, timeout: float) -> Coroutine[Any, Any, pb.ReportResult]:
        """FailTask over the stream."""
        message = pb.WorkerMessage()
        message.fail.CopyFrom(request)
        return self._call_with(message, "FailTask", timeout, "report")

    def heartbeat(
        self, request: pb.HeartbeatTaskRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.ReportResult]:
        """HeartbeatTask over the stream."""
        message = pb.WorkerMessage()
        message.heartbeat.CopyFrom(request)
        return self._call_with(message, "HeartbeatTask", timeout, "report")

    def advance(
        self, request: pb.AdvanceRunRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.AdvanceRunResult]:
        """AdvanceRun over the stream."""
        message = pb.WorkerMessage()
        message.advance.CopyFrom(request)
        return self._call_with(message, "AdvanceRun", timeout, "advanced")

    async def close(self) -> None:
        """End the stream and stop reading it; first, if reports were cut on their way, wait a
        moment for their answers and for what they bring to be handed back (``_settle``)."""
        if self._unanswered and self._call is not None:
            await self._settle(SETTLE_SECONDS)
        call = self._call
        self._call = None
        if call is not None:
            self._outgoing.put_nowait(None)
            call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader

    async def _settle(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the answers of reports cut on their way and for the calls
        those answers start (the hand-back of a step one brought: ``on_orphan_tasks``), until
        none has been outstanding for a few ticks.

        A worker cut by its drain (a second SIGTERM) while a CompleteTask that asked for the next
        step was on its way had stopped listening: the step the server leased with the report
        sat on the stopped worker until its lease ran out — an attempt spent on a step that never
        ran, "lease expired (worker unreachable)" (an outside trial: with RetryPolicy.none() the
        instance failed)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        quiet = 0
        while quiet < 3 and loop.time() < end:
            call = self._call
            if call is None or call.done():
                return
            quiet = 0 if self._unanswered or self._pending else quiet + 1
            await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ plumbing

    async def _call_with(self, message: pb.WorkerMessage, name: str, timeout: float, field: str) -> Any:
        """Send ``message`` under a fresh request id and wait for the reply naming it; its ``field``.

        The five calls return this coroutine itself (one coroutine per call, not two)."""
        if self._call is None:
            await self._ensure()
        self._next_id += 1
        rid = self._next_id
        message.request_id = rid
        loop = asyncio.get_running_loop()
        future: asyncio.Future[pb.ServerMessage] = loop.create_future()
        self._pending[rid] = future
        self._outgoing.put_nowait(message)
        # A timer on the future itself, not asyncio.wait_for (a second future and a callback per call).
        timer = loop.call_later(timeout, _expire, future)
        try:
            reply = await future
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            self._cancel_remote(rid)
            raise StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, f"{name} timed out") from None
        except asyncio.CancelledError:
            self._pending.pop(rid, None)
            if name in _REPORTS:
                self._unanswered.add(rid)  # its answer may bring a step leased to us: read it
            else:
                self._cancel_remote(rid)
            raise
        finally:
            timer.cancel()
        return getattr(reply, field)

    async def _ensure(self) -> None:
        if self._call is not None:
            return
        async with self._lock:
            if self._call is None:
                outgoing: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
                self._outgoing = outgoing
                pending: dict[int, asyncio.Future[pb.ServerMessage]] = {}
                self._pending = pending  # this stream's calls waiting for their replies
                call = self.stub.WorkerSession(_frames(outgoing))
                self._call = call
                self._reader = asyncio.ensure_future(self._read(call, outgoing, pending))

    async def _read(
        self,
        call: grpc.aio.StreamStreamCall,
        outgoing: asyncio.Queue[pb.WorkerMessage | None],
        pending: dict[int, asyncio.Future[pb.ServerMessage]],
    ) -> None:
        error: BaseException | None = None
        try:
            while True:
                frame = await call.read()
                if frame is grpc.aio.EOF:
                    break
                for message in frame.messages:
                    self._deliver(message)
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as exc:
            error = exc
        finally:
            # end the request side too: gRPC's task that feeds it from _frames would wait on this
            # call's queue for good, and be destroyed pending when the call is collected (asyncio
            # logs "Task was destroyed but it is pending!" some seconds into a server's absence)
            outgoing.put_nowait(None)
            if self._call is call:
                self._call = None
            if self._pending is pending:
                self._pending = {}
            waiting = list(pending.values())
            pending.clear()
            for future in waiting:
                if not future.done():
                    if isinstance(error, grpc.RpcError):
                        future.set_exception(error)
                    else:
                        future.set_exception(StreamError(grpc.StatusCode.UNAVAILABLE, "worker stream closed"))

    def _deliver(self, message: pb.ServerMessage) -> None:
        if self._unanswered:
            self._unanswered.discard(message.request_id)
        future = self._pending.pop(message.request_id, None)
        body = message.WhichOneof("body")
        if future is None or future.done():
            if self.on_orphan_tasks is not None:  # claimed after we stopped waiting: give back
                if body == "tasks" and message.tasks.tasks:
                    self.on_orphan_tasks(list(message.tasks.tasks))
                elif body == "report" and message.report.HasField("next_task"):
                    self.on_orphan_tasks([message.report.next_task])  # a report's next step
                elif body == "advanced" and message.advanced.HasField("next_task"):
                    self.on_orphan_tasks([message.advanced.next_task])  # a handback's next step
            return
        if body == "error":
            code = _CODES.get(message.error.code, grpc.StatusCode.UNKNOWN)
            future.set_exception(StreamError(code, message.error.message, message.error.not_applied))
            if code == grpc.StatusCode.UNAVAILABLE and leaves_stream(message.error.message):
                self._move_on(message.error.message)
        else:
            future.set_result(message)

    def _move_on(self, why: str) -> None:
        """The stream's server answered UNAVAILABLE (its database is away): end the stream now,
        so the next call opens another (on the next server of a channel over several: the module
        docstring). Its calls still waiting fail UNAVAILABLE, to be made again there; a poll the
        server answers after this is given back by the server (wiggle/_server/session.py)."""
        call = self._call
        if call is None:
            return
        self._call = None
        pending, self._pending = self._pending, {}
        waiting = list(pending.values())
        pending.clear()  # the reader, ending, finds none of them
        self._outgoing.put_nowait(None)
        call.cancel()
        for future in waiting:
            if not future.done():
                future.set_exception(
                    StreamError(
                        grpc.StatusCode.UNAVAILABLE, f"worker stream ended ({why})", not_applied=False
                    )
                )

    def _cancel_remote(self, rid: int) -> None:
        if self._call is not None:
            self._outgoing.put_nowait(
                pb.WorkerMessage(request_id=rid, cancel=pb.CancelRequest(request_id=rid))
            )


def _expire(future: asyncio.Future[pb.ServerMessage]) -> None:
    """A call's timeout: its reply did not come in time."""
    if not future.done():
        future.set_exception(asyncio.TimeoutError())


async def _frames(outgoing: asyncio.Queue[pb.WorkerMessage | None]) -> AsyncIterator[pb.WorkerBatch]:
    """The request side of the stream: whatever is queued, one frame per write.

    gRPC allows one write at a time on a stream, so every caller enqueues and this generator
    writes; several messages queued meanwhile go out as one WorkerBatch. None ends the stream.
    """
    while True:
        message = await outgoing.get()
        if message is None:
            return
        frame = [message]
        while not outgoing.empty():
            more = outgoing.get_nowait()
            if more is None:
                yield pb.WorkerBatch(messages=frame)
                return
            frame.append(more)
        yield pb.WorkerBatch(messages=frame)
