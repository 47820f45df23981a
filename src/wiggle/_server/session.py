"""The session streams: many requests multiplexed on one bidirectional stream.

Two streams are served here, each described by a ``Protocol``: WorkerSession (a worker's polls
and reports: ``WORKER``) and ClientSession (a client's starts: ``CLIENT``). Each message names
its body ("poll", "complete", "start", ...); the protocol's ``bodies`` map it to the method of
the dispatch table (wiggle/_server/service.py) and to the field of the reply. Requests run
concurrently; replies go out as each finishes, batched when several are ready.
A stream whose credential is revoked is ended by wiggle/_server/revocation.py; the worker ids it
polled under are noted on its ``OpenCall`` so that the steps it holds can be handed back.

Both streams end on their own when the server stops (``closing``): each stops reading, answers
every message it has read, and ends the call with OK, so that a worker or a client whose message
found the stream ended knows it was never read and sends it again on a new stream
(wiggle/_worker/stream.py, wiggle/_client/start_stream.py) instead of holding the server's stop
for its whole grace. A worker's waiting poll ends then too (``Instances.let_go``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

from google.protobuf.message import Message

from .._rpc import wiggle_pb2 as pb
from .._wire.status import to_wire_number
from ..errors import ErrorCode, InvalidArgument
from .faults import rpc_error
from .revocation import OPEN_CALL

__all__ = ["BODIES", "CLIENT", "WORKER", "Dispatch", "Protocol", "serve_session"]

#: WorkerMessage body -> (method in the dispatch table, ServerMessage field of its reply).
BODIES: dict[str, tuple[str, str]] = {
    "poll": ("PollTasks", "tasks"),
    "complete": ("CompleteTask", "report"),
    "fail": ("FailTask", "report"),
    "heartbeat": ("HeartbeatTask", "report"),
    "advance": ("AdvanceRun", "advanced"),
}

#: ClientMessage body -> (method, ClientReply field).
CLIENT_BODIES: dict[str, tuple[str, str]] = {"start": ("StartInstances", "started")}


class Protocol(NamedTuple):
    """What one session stream carries."""

    name: str  # the RPC, for error messages and counters: "WorkerSession"
    bodies: dict[str, tuple[str, str]]  # message body -> (method, reply field)
    reply: Any  # the reply message class: ServerMessage, ClientReply
    frame: Any  # a frame of replies: ServerBatch, ClientReplyBatch


WORKER = Protocol("WorkerSession", BODIES, pb.ServerMessage, pb.ServerBatch)
CLIENT = Protocol("ClientSession", CLIENT_BODIES, pb.ClientReply, pb.ClientReplyBatch)

Dispatch = Callable[[str, Message], Awaitable[Message]]
#: Gives steps (task id, lease owner) back as a worker's release would (Delivery.give_back_steps).
GiveBack = Callable[[list[tuple[str, str]]], None]

log = logging.getLogger("wiggle.server")


async def _answer(
    dispatch: Dispatch,
    message: Any,
    body: str | None,
    replies: asyncio.Queue[Any],
    protocol: Protocol,
) -> None:
    """Answer one message whose body is ``body`` (a task of its own), putting the reply on ``replies``."""
    rid = message.request_id
    method = protocol.name
    try:
        route = protocol.bodies.get(body) if body is not None else None
        if body is None or route is None:
            raise InvalidArgument(f"{type(message).__name__} has no body")
        method, field = route
        request = getattr(message, body)
        result = await dispatch(method, request)
        if body == "poll":
            call = OPEN_CALL.get()
            if call is not None:  # the worker id as the guard left it (prefixed with the credential's name)
                call.owners.add(request.worker_id)
        reply = protocol.reply(request_id=rid)
        getattr(reply, field).CopyFrom(result)  # faster than passing it to the constructor
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        reply = protocol.reply(request_id=rid, error=rpc_error(exc, method))
    replies.put_nowait(reply)


#: Requests of one stream being answered at once, at most: a worker has about as many as its
#: concurrency (its steps' reports and heartbeats, a few polls). Past it a message is answered
#: RESOURCE_EXHAUSTED at once: a stream of 50,000 long polls (an outside trial) held 50,000 tasks.
MAX_IN_FLIGHT = 10_000


def _too_many(protocol: Protocol, request_id: int) -> Any:
    text = (
        f"{MAX_IN_FLIGHT} requests of this stream are being answered already; "
        "wait for their answers before sending more (a worker's concurrency must stay below that)"
    )
    return protocol.reply(
        request_id=request_id,
        error=pb.RpcError(code=to_wire_number(ErrorCode.RESOURCE_EXHAUSTED), message=text),
    )


async def serve_session(
    request_iterator: AsyncIterator[Any],
    dispatch: Dispatch,
    give_back: GiveBack,
    protocol: Protocol = WORKER,
    closing: asyncio.Event | None = None,
) -> AsyncGenerator[Any, None]:
    """Serve one stream of ``protocol``: answer each message through ``dispatch``; honour cancels.
    The steps of poll answers the stream ended before sending go to ``give_back``. Once
    ``closing`` is set, stop reading, answer what was read and end (the module docstring)."""
    replies: asyncio.Queue[Any] = asyncio.Queue()
    pending: dict[asyncio.Task[None], int] = {}  # the tasks answering, and their request ids
    by_id: dict[int, asyncio.Task[None]] = {}

    def forget(task: asyncio.Task[None]) -> None:
        rid = pending.pop(task, None)
        if rid is not None and by_id.get(rid) is task:
            del by_id[rid]

    reading = True  # the reader is still reading (``closing`` may stop it only then)

    async def read() -> None:
        nonlocal reading
        broken = False
        try:
            async for frame in request_iterator:
                for message in frame.messages:
                    body = message.WhichOneof("body")
                    if body == "cancel":
                        doomed = by_id.get(message.cancel.request_id)
                        if doomed is not None:
                            doomed.cancel()
                        continue
                    if len(pending) >= MAX_IN_FLIGHT:  # refused at once: nothing of it runs
                        replies.put_nowait(_too_many(protocol, message.request_id))
                        continue
                    task = asyncio.ensure_future(_answer(dispatch, message, body, replies, protocol))
                    rid = message.request_id
                    pending[task] = rid
                    by_id[rid] = task
                    task.add_done_callback(forget)
        except Exception:
            # The request stream failed (an undecodable frame: wiggle/_server/decoding.py answers
            # the call INVALID_ARGUMENT once this generator returns): stop answering now.
            broken = True
        finally:
            reading = False
            if pending:
                if broken:
                    for task in list(pending):
                        task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            replies.put_nowait(None)

    reader = asyncio.ensure_future(read())

    def stop_reading() -> None:
        if reading:  # the reader then answers what it read and ends the replies
            reader.cancel()

    stopper = _when_set(closing, stop_reading)
    try:
        done = False
        while not done:
            reply = await replies.get()
            if reply is None:
                break
            frame = [reply]
            while not replies.empty():  # every reply ready now goes out in the same frame
                more = replies.get_nowait()
                if more is None:
                    done = True
                    break
                frame.append(more)
            yield protocol.frame(messages=frame)
    finally:
        if stopper is not None:
            stopper.cancel()
        reader.cancel()
        for task in list(pending):
            task.cancel()
        if pending:
            # Let the cancelled requests finish unwinding before the call is over: a revocation
            # (wiggle/_server/revocation.py) looks for this stream's leases once it is, and a poll
            # still committing its claim would hold one back until its lease expired.
            with contextlib.suppress(BaseException):
                await asyncio.wait(list(pending), timeout=1.0)
        _give_back_unsent(replies, give_back)


def _when_set(event: asyncio.Event | None, then: Callable[[], None]) -> asyncio.Future[Any] | None:
    """Run ``then`` once ``event`` is set (never for None); the watcher, to cancel when done."""
    if event is None:
        return None
    watcher = asyncio.ensure_future(event.wait())

    def fired(done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            then()

    watcher.add_done_callback(fired)
    return watcher


def _steps_in(reply: pb.ServerMessage) -> list[tuple[str, str]]:
    """The steps (task id, lease owner) an unsent reply leases that nobody can ask for again: a
    poll's. The next step a report brings is not among them: the worker resends a report whose
    answer it lost, and the resend is answered with that same step
    (docs/semantics.md#chained-steps); giving it back too could let it run twice."""
    if reply.WhichOneof("body") == "tasks":
        return [(act.task_id, act.lease_owner) for act in reply.tasks.tasks]
    return []


def _give_back_unsent(replies: asyncio.Queue[Any], give_back: GiveBack) -> None:
    """The stream has ended with replies never sent: the steps their polls leased go back at once
    (``Delivery.give_back_steps``) instead of staying leased to a worker that never heard of them
    until their leases expire."""
    steps: list[tuple[str, str]] = []
    while not replies.empty():
        reply = replies.get_nowait()
        if reply is not None:
            steps.extend(_steps_in(reply))
    if steps:
        log.info("%d step(s) answered on a stream that had ended given back", len(steps))
        give_back(steps)
