"""A client's starts on one long-lived ClientSession stream instead of a unary call each.

A unary call crosses gRPC's machinery several times before the server's handler runs (the call's
arrival, its metadata, its message); a message on a stream that is already open crosses it once,
as the workers' reports do on their WorkerSession. The start batcher (wiggle/_client/batching.py)
sends one batch at a time, so a stream carries one ``StartInstancesRequest`` at a time: the reply
that comes next is its answer, and anything unusual (a timeout, a cancelled caller, a reply that
names another request) ends the stream, to be opened again by the next start.

- The first start opens the stream. A server that does not know ClientSession (older than this
  client) answers UNIMPLEMENTED: ``call`` returns None and the client goes back to unary calls.
- A stream the server ended cleanly (it stops: wiggle/_server/session.py) has answered every
  message it read, so a message that found it ended was never read: it is sent once more on a new
  stream. Any other end fails the start with the stream's status, as the unary call would have
  (a start without a request id that failed with UNAVAILABLE may or may not have happened;
  docs/semantics.md#idempotent-starts).
- Each call has a deadline (``CALL_TIMEOUT``, as a unary call) over everything it waits for: its
  turn on the stream, the write and the reply. Past it the stream is cancelled and the start
  fails with Unavailable, as a unary call that got no answer does (``core.no_answer``): a start
  with a request id is asked again while the client's patience lasts, one without may or may not
  have happened. (The write had no deadline: an AsyncClient whose channel was bound to another
  event loop waited in it for ever, an outside trial.) The blocking client's reader is the
  calling thread itself, so a watchdog thread cancels a stream whose reply is late
  (``_Watchdog``).
- A stream that ``close()`` ended fails the start it cut off with ClientClosed, and refuses the
  later ones so (wiggle/_client/link.py).

``AsyncStartStream`` serves an ``AsyncClient``; ``StartStream`` (the same shape, blocking) a
``Client`` (scripts/gen_sync_client.py maps one name to the other).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from .._rpc import wiggle_pb2 as pb
from .._wire.status import error_for, error_from_rpc, from_wire_number, leaves_stream
from ..errors import ErrorCode, Unavailable, WiggleError
from . import core

__all__ = ["AsyncStartStream", "StartStream", "cancelled_by_its_caller"]

_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]  # an RpcError's code (``_Stream._settle``)
REFUSAL_WAIT = 0.1  # seconds a failed write waits for the call's own status (AsyncStartStream._unsent)


def _message(rid: int, request: pb.StartInstancesRequest) -> pb.ClientBatch:
    message = pb.ClientMessage(request_id=rid)
    message.start.CopyFrom(request)  # faster than passing it to the constructor
    return pb.ClientBatch(messages=[message])


class _Crossed(WiggleError):
    """The frame that came next does not answer the request in flight (the stream is dropped)."""


def _answer(frame: pb.ClientReplyBatch, rid: int) -> pb.StartInstancesResponse:
    """The reply to request ``rid`` from the frame that came next, or the error it carries."""
    if len(frame.messages) != 1 or frame.messages[0].request_id != rid:
        got = [m.request_id for m in frame.messages]
        raise _Crossed(f"ClientSession answered requests {got} while request {rid} was waiting")
    reply = frame.messages[0]
    if reply.WhichOneof("body") == "error":
        raise error_for(from_wire_number(reply.error.code), reply.error.message, reply.error.not_applied)
    return reply.started


def _timed_out(timeout: float) -> WiggleError:
    return core.no_answer(
        timeout,
        "the start (StartInstances)",
        " (a start with a request_id is safe to repeat: docs/semantics.md)",
    )


def cancelled_by_its_caller() -> bool:
    """Whether the running task is being cancelled itself, so that a CancelledError it meets is
    its own to pass on, not that of a gRPC call that ``close()`` cancelled under it (asyncio raises
    the same exception for both). Python 3.10 has no ``Task.cancelling``: there, a CancelledError
    met after ``close()`` is taken for the close's."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is not None and bool(cancelling())


def _ended() -> WiggleError:
    return error_for(ErrorCode.UNAVAILABLE, "ClientSession ended twice before answering a start")


class _Stream:
    """What both flavours share: the open call, the request ids, whether the server has the
    stream, and what follows a read (``_refused``, ``_settle``); each drops a call its own way."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self._call: Any = None  # the open call (its reply iterator, for the blocking flavour)
        self._next_id = 0
        self.usable = True  # False once the server answered that it does not know the stream
        self.closed = False  # the client closed it: a start meeting it is ClientClosed

    def _drop(self, call: Any) -> None:
        raise NotImplementedError

    def _request_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _refused(self, call: Any, exc: grpc.RpcError) -> WiggleError | None:
        """The stream failed with ``exc``: dropped; None if the server does not know the stream
        (the client goes back to unary calls), else the error the start fails with."""
        self._drop(call)
        if self.closed:  # the client's close() cancelled it
            return core.client_closed(cut=True)
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            self.usable = False
            return None
        return error_from_rpc(exc)

    def _settle(self, call: Any, frame: pb.ClientReplyBatch, rid: int) -> pb.StartInstancesResponse:
        """The answer to ``rid`` in ``frame``; a frame that answers another request drops the
        stream, and so does an answer UNAVAILABLE because its server's database is away:
        the next start opens a stream on the next server of a channel over several."""
        try:
            reply = _answer(frame, rid)
        except _Crossed:
            self._drop(call)
            raise
        except Unavailable as exc:
            if leaves_stream(str(exc)):
                self._drop(call)
            raise
        for result in reply.results:
            if result.error.code == _UNAVAILABLE and leaves_stream(result.error.message):
                self._drop(call)
                break
        return reply


class AsyncStartStream(_Stream):
    """The starts of one ``AsyncClient`` on one ClientSession stream (the module docstring)."""

    def __init__(self, stub: Any) -> None:
        super().__init__(stub)
        self._lock = asyncio.Lock()  # one request at a time on the stream

    async def call(
        self, request: pb.StartInstancesRequest, timeout: float
    ) -> pb.StartInstancesResponse | None:
        """``request``'s answer over the stream; None if the server has no ClientSession. All it
        waits for (its turn, the write, the reply) is within ``timeout`` seconds: past it,
        Unavailable (the module docstring)."""
        try:
            return await asyncio.wait_for(self._exchange(request), timeout)
        except asyncio.TimeoutError:  # _exchange dropped the call as it was cancelled
            raise _timed_out(timeout) from None

    async def _exchange(self, request: pb.StartInstancesRequest) -> pb.StartInstancesResponse | None:
        async with self._lock:
            for _ in range(2):  # a second time only if the stream had ended cleanly, unread
                if self.closed:
                    raise core.client_closed(cut=False)
                if not self.usable:
                    return None
                call = self._call
                if call is None or call.done():
                    call = self._call = self._stub.ClientSession()
                rid = self._request_id()
                try:
                    await call.write(_message(rid, request))
                except grpc.RpcError as exc:  # the message never left: a refusal, or a unary call
                    error = await self._unsent(call, exc)
                    if error is None:
                        return None
                    raise error from None
                except asyncio.InvalidStateError:  # it had ended with OK: the message was not sent
                    self._drop(call)
                    continue
                except BaseException as exc:  # cancelled: by the caller, the deadline or close()
                    self._drop(call)
                    raise self._cut(exc) from None
                try:
                    frame = await call.read()
                except asyncio.InvalidStateError:  # it had ended with OK: the message was not sent
                    self._drop(call)
                    continue
                except grpc.RpcError as exc:
                    error = self._refused(call, exc)
                    if error is None:
                        return None
                    raise error from None
                except BaseException as exc:  # cancelled: the reply would come to the next request
                    self._drop(call)
                    raise self._cut(exc) from None
                if frame is grpc.aio.EOF:  # ended cleanly before reading it: send it again
                    self._drop(call)
                    continue
                return self._settle(call, frame, rid)
            raise _ended()

    def _cut(self, exc: BaseException) -> BaseException:
        """ClientClosed for a CancelledError that close() caused (the call was cancelled under a
        task nobody cancelled); ``exc`` itself otherwise."""
        if self.closed and isinstance(exc, asyncio.CancelledError) and not cancelled_by_its_caller():
            return core.client_closed(cut=True)
        return exc

    async def _unsent(self, call: Any, exc: grpc.RpcError) -> WiggleError | None:
        """The write of a start failed, so the start never reached the server: None if it is to go
        as a unary call (the server refused the stream, or the stream broke before taking it),
        else the error it fails with.

        When a server without ClientSession refuses the call while the first message is being
        written, gRPC fails the write with INTERNAL ("Internal error from Core") and sets the
        call's own status, UNIMPLEMENTED, a moment later: it is waited for (``REFUSAL_WAIT``) so
        that the client gives the stream up once rather than on every start."""
        code = exc.code()
        try:
            if code == grpc.StatusCode.INTERNAL:
                try:
                    code = await asyncio.wait_for(self._settled(call), REFUSAL_WAIT)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._drop(call)
        if self.closed:  # close() ended the stream under the write
            return core.client_closed(cut=True)
        if code == grpc.StatusCode.UNIMPLEMENTED:
            self.usable = False
            return None
        if code == grpc.StatusCode.INTERNAL:
            return None  # the stream broke under the write: this one start goes as a unary call
        return error_from_rpc(exc)

    @staticmethod
    async def _settled(call: Any) -> grpc.StatusCode:
        """The call's status once it is other than INTERNAL (``_unsent``; its caller bounds it)."""
        code = grpc.StatusCode.INTERNAL
        while code == grpc.StatusCode.INTERNAL:
            await asyncio.sleep(0.005)
            code = await call.code()
        return code

    def _drop(self, call: Any) -> None:
        call.cancel()
        if self._call is call:
            self._call = None

    async def close(self) -> None:
        """End the stream (the client is closing): the start in flight is ClientClosed, as are
        any later ones."""
        self.closed = True
        call, self._call = self._call, None
        if call is not None:
            call.cancel()


class _Watchdog:
    """Cancels the blocking stream's call when a reply is later than its deadline.

    A thread that sleeps until the deadline of the request in flight; arming it for the next
    request only moves the deadline (no wake-up) unless the thread sleeps with nothing armed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._call: Any = None
        self._idle = False  # the thread waits with nothing armed (arming must wake it)
        self._closed = False
        self.fired = False  # the armed call was cancelled for lateness
        self._thread: threading.Thread | None = None

    def arm(self, call: Any, timeout: float) -> None:
        with self._cond:
            self._deadline = time.monotonic() + timeout
            self._call = call
            self.fired = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="wiggle-start-deadline", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._call = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                deadline = self._deadline
                if deadline is None:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self.fired = True
                call, self._call, self._deadline = self._call, None, None
                if call is not None:
                    call.cancel()


def _requests(outgoing: queue.SimpleQueue[pb.ClientBatch | None]) -> Iterator[pb.ClientBatch]:
    """The request side of a blocking stream (gRPC's thread reads it); None ends it."""
    while True:
        frame = outgoing.get()
        if frame is None:
            return
        yield frame


class StartStream(_Stream):
    """The starts of one blocking ``Client`` on one ClientSession stream (the module docstring)."""

    def __init__(self, stub: Any) -> None:
        super().__init__(stub)
        self._outgoing: queue.SimpleQueue[pb.ClientBatch | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # one request at a time on the stream
        self._watchdog = _Watchdog()

    def call(self, request: pb.StartInstancesRequest, timeout: float) -> pb.StartInstancesResponse | None:
        """``request``'s answer over the stream; None if the server has no ClientSession."""
        with self._lock:
            for _ in range(2):  # a second time only if the stream had ended cleanly, unread
                if self.closed:
                    raise core.client_closed(cut=False)
                if not self.usable:
                    return None
                call = self._call
                if call is None or call.done():
                    self._drop(call)
                    self._outgoing = queue.SimpleQueue()
                    try:
                        call = self._call = self._stub.ClientSession(_requests(self._outgoing))
                    except ValueError:  # "Channel closed!": another thread closed the client just now
                        if self.closed:
                            raise core.client_closed(cut=False) from None
                        raise
                rid = self._request_id()
                watchdog = self._watchdog
                watchdog.arm(call, timeout)
                try:
                    self._outgoing.put(_message(rid, request))
                    frame = next(call)
                except StopIteration:  # ended cleanly before reading it: send it again
                    self._drop(call)
                    continue
                except grpc.RpcError as exc:
                    if watchdog.fired:
                        self._drop(call)
                        raise _timed_out(timeout) from None
                    error = self._refused(call, exc)
                    if error is None:
                        return None
                    raise error from None
                except BaseException:  # interrupted: the reply would come to the next request
                    self._drop(call)
                    raise
                finally:
                    watchdog.disarm()
                if watchdog.fired:  # answered as it was cancelled: the answer stands, the stream not
                    self._drop(call)
                return self._settle(call, frame, rid)
            raise _ended()

    def _drop(self, call: Any) -> None:
        if call is None:
            return
        self._outgoing.put(None)  # ends the request side (gRPC's thread reading it)
        call.cancel()
        if self._call is call:
            self._call = None

    def close(self) -> None:
        """End the stream and its watchdog (the client is closing): the start in flight is
        ClientClosed, as are any later ones."""
        self.closed = True
        self._drop(self._call)
        self._watchdog.close()
