"""The WorkerSession stream: many worker requests multiplexed on one bidirectional stream.

Each WorkerMessage names its body ("poll", "complete", ...); ``BODIES`` maps it to the method of
the dispatch table (wiggle/_server/service.py) and to the ServerMessage field of the reply.
Requests run concurrently; replies go out as each finishes, batched when several are ready.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from google.protobuf.message import Message

from .._rpc import wiggle_pb2 as pb
from .._wire.status import to_wire_number
from ..errors import InvalidArgument
from .faults import status_of

__all__ = ["BODIES", "Dispatch", "serve_session"]

#: WorkerMessage body -> (method in the dispatch table, ServerMessage field of its reply).
BODIES: dict[str, tuple[str, str]] = {
    "poll": ("PollTasks", "tasks"),
    "complete": ("CompleteTask", "report"),
    "fail": ("FailTask", "report"),
    "heartbeat": ("HeartbeatTask", "report"),
    "advance": ("AdvanceRun", "advanced"),
}

Dispatch = Callable[[str, Message], Awaitable[Message]]


async def _answer(dispatch: Dispatch, message: pb.WorkerMessage) -> pb.ServerMessage:
    body = message.WhichOneof("body")
    rid = message.request_id
    method = "WorkerSession"
    try:
        if body is None or body not in BODIES:
            raise InvalidArgument("WorkerMessage has no body")
        method, field = BODIES[body]
        result = await dispatch(method, getattr(message, body))
        reply = pb.ServerMessage(request_id=rid)
        getattr(reply, field).CopyFrom(result)
        return reply
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        code, text = status_of(exc, method)
        return pb.ServerMessage(request_id=rid, error=pb.RpcError(code=to_wire_number(code), message=text))


async def serve_session(
    request_iterator: AsyncIterator[pb.WorkerBatch], dispatch: Dispatch
) -> AsyncGenerator[pb.ServerBatch, None]:
    """Serve one worker's stream: answer each message through ``dispatch``; honour cancels."""
    replies: asyncio.Queue[pb.ServerMessage | None] = asyncio.Queue()
    pending: set[asyncio.Task[None]] = set()
    by_id: dict[int, asyncio.Task[None]] = {}

    async def handle(message: pb.WorkerMessage) -> None:
        replies.put_nowait(await _answer(dispatch, message))

    def forget(task: asyncio.Task[None], rid: int) -> None:
        pending.discard(task)
        if by_id.get(rid) is task:
            del by_id[rid]

    async def read() -> None:
        try:
            async for frame in request_iterator:
                for message in frame.messages:
                    if message.WhichOneof("body") == "cancel":
                        doomed = by_id.get(message.cancel.request_id)
                        if doomed is not None:
                            doomed.cancel()
                        continue
                    task = asyncio.ensure_future(handle(message))
                    pending.add(task)
                    by_id[message.request_id] = task
                    task.add_done_callback(functools.partial(forget, rid=message.request_id))
        finally:
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            replies.put_nowait(None)

    reader = asyncio.ensure_future(read())
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
            yield pb.ServerBatch(messages=frame)
    finally:
        reader.cancel()
        for task in list(pending):
            task.cancel()
