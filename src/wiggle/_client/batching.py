"""Starts that batch themselves: concurrent ``start`` calls of one client share one RPC.

``Client.start`` / ``AsyncClient.start`` hand their request to the client's batcher. With no start
of this client in flight, the request is sent at once (``StartInstance``: a lone start waits for
nothing). While one is in flight, the starts that arrive meanwhile queue; when it is answered,
everything queued goes as one ``StartInstances`` call with ``starts`` (natural batching: the batch
is as large as the traffic makes it, and no fixed linger is ever added). The server starts each one
on its own and answers each on its own (wiggle/_server/instance_service.py, ``start_each``), so
every caller gets its own instance or its own error; a request id makes a start idempotent exactly
as before (docs/semantics.md#idempotent-starts).

``AsyncStartBatcher`` serves the tasks of one event loop (a sender task drains the queue, so a
caller cancelled while it waits leaves the others' batch alone); ``StartBatcher`` serves the
threads of one blocking client (the thread that finds nothing in flight sends for everyone queued,
having first waited, at most ``GATHER_SECONDS``, for the callers the last batch answered just
now to queue their next starts: ``StartBatcher._gather``; the others sleep each on a lock of its
own until their answer comes or the sender's turn is handed to them).
A server that predates coalesced starts refuses the batch call as a whole: the batcher then sends
that batch's starts one by one and stops coalescing (a rolling upgrade, clients first).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .._rpc import wiggle_pb2 as pb
from .._wire.status import error_for, from_wire_number
from ..errors import ErrorCode, WiggleError

__all__ = ["AsyncStartBatcher", "StartBatcher", "MAX_STARTS", "MAX_BYTES", "only_start"]

MAX_STARTS = 1000  # starts in one coalesced call at most (the server takes up to 10,000)
MAX_BYTES = 4 << 20  # and about this many bytes of contexts (a bigger start goes alone)
#: How long after a batch's answer the next sender waits for the callers it answered to queue
#: their next starts (``StartBatcher._gather``): a thread is back in well under a millisecond.
GATHER_SECONDS = 0.002
#: A whole batch refused with one of these: a server that does not know ``starts`` (older).
OLD_SERVER = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.UNIMPLEMENTED})

# What a start is answered with: its instance, or the error it alone failed with.
Outcome = pb.InstanceInfo | WiggleError


def outcomes(reply: pb.StartInstancesResponse, count: int) -> list[Outcome]:
    """Each start's outcome from a coalesced call's reply (``count`` starts were sent)."""
    if len(reply.results) != count:
        raise WiggleError(f"the server answered {len(reply.results)} of {count} coalesced starts")
    out: list[Outcome] = []
    for result in reply.results:
        if result.HasField("error"):
            out.append(
                error_for(from_wire_number(result.error.code), result.error.message, result.error.not_applied)
            )
        else:
            out.append(result.instance)
    return out


def only_start(reply: pb.StartInstancesResponse) -> pb.InstanceInfo:
    """The instance of a coalesced call of one start, or the error it failed with."""
    outcome = outcomes(reply, 1)[0]
    if isinstance(outcome, WiggleError):
        raise outcome
    return outcome


def old_server(exc: BaseException) -> bool:
    """Whether a coalesced call's failure says the server does not know coalesced starts."""
    return isinstance(exc, WiggleError) and exc.code in OLD_SERVER


W = TypeVar("W", bound="_Waiting")


def take(pending: deque[W], limit: int = MAX_STARTS) -> list[W]:
    """The next batch from ``pending`` (oldest first), skipping starts nobody awaits any more."""
    batch: list[W] = []
    size = 0
    while pending and len(batch) < limit:
        waiting = pending[0]
        if waiting.abandoned():
            pending.popleft()
            continue
        size += len(waiting.request.context_json)
        if batch and size > MAX_BYTES:
            break
        batch.append(pending.popleft())
    return batch


class _Waiting:
    """One start waiting for its answer (the sync batcher's; the async one's adds a future)."""

    __slots__ = ("request", "outcome", "done")

    def __init__(self, request: pb.StartInstanceRequest) -> None:
        self.request = request
        self.outcome: Outcome | BaseException | None = None
        self.done = False

    def abandoned(self) -> bool:
        return False  # a blocking caller cannot leave while it waits

    def answer(self, outcome: Outcome | BaseException) -> None:
        self.outcome = outcome
        self.done = True

    def result(self) -> pb.InstanceInfo:
        outcome = self.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome


class _AsyncWaiting(_Waiting):
    __slots__ = ("future",)

    def __init__(self, request: pb.StartInstanceRequest, future: asyncio.Future[pb.InstanceInfo]) -> None:
        super().__init__(request)
        self.future = future

    def abandoned(self) -> bool:
        return self.future.done()  # its caller was cancelled

    def answer(self, outcome: Outcome | BaseException) -> None:
        if self.future.done():
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


class _Blocked(_Waiting):
    """A blocking caller's start: ``wake`` (held from the start) is released when it is answered
    or handed the sender's turn, so each caller sleeps on a lock of its own (``StartBatcher``)."""

    __slots__ = ("wake",)

    def __init__(self, request: pb.StartInstanceRequest) -> None:
        super().__init__(request)
        self.wake = threading.Lock()
        self.wake.acquire()

    def answer(self, outcome: Outcome | BaseException) -> None:
        super().answer(outcome)
        self.wake.release()


SendOne = Callable[[pb.StartInstanceRequest], Awaitable[pb.InstanceInfo]]
SendMany = Callable[[pb.StartInstancesRequest], Awaitable[pb.StartInstancesResponse]]


class AsyncStartBatcher:
    """Coalesces the concurrent starts of one ``AsyncClient`` (see the module docstring)."""

    def __init__(self, send_one: SendOne, send_many: SendMany) -> None:
        self._send_one = send_one
        self._send_many = send_many
        self._pending: deque[_Waiting] = deque()
        self._sender: asyncio.Task[None] | None = None
        self.coalesce = True  # False once a server refused a coalesced call as unknown

    async def start(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        """Send ``request`` alone or with the starts that queue meanwhile; its own answer."""
        if not self.coalesce:
            return await self._send_one(request)
        loop = asyncio.get_running_loop()
        waiting = _AsyncWaiting(request, loop.create_future())
        self._pending.append(waiting)
        if self._sender is None:
            self._sender = loop.create_task(self._drain())
        return await waiting.future  # cancelled: only this future; the batch goes on

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = take(self._pending)
                if batch:
                    await self._send(batch)
        finally:
            self._sender = None

    async def _send(self, batch: list[_Waiting]) -> None:
        try:
            if len(batch) == 1:
                answers: Sequence[Outcome | BaseException] = [await self._call_one(batch[0].request)]
            else:
                request = pb.StartInstancesRequest(starts=[w.request for w in batch])
                answers = outcomes(await self._send_many(request), len(batch))
        except asyncio.CancelledError:  # this sender task itself (its loop closing): not its callers
            cut = error_for(
                ErrorCode.CANCELLED,
                "the start was cut off: the task that sends this client's starts was cancelled (is its "
                "event loop closing?); it may or may not have been applied (a start with a request_id is "
                "safe to repeat)",
            )
            for waiting in batch:
                waiting.answer(cut)
            raise
        except Exception as exc:
            if len(batch) > 1 and old_server(exc):
                self.coalesce = False
                answers = await asyncio.gather(*(self._call_one(w.request) for w in batch))
            else:
                answers = [exc] * len(batch)
        for waiting, outcome in zip(batch, answers, strict=True):
            waiting.answer(outcome)

    async def _call_one(self, request: pb.StartInstanceRequest) -> Outcome | BaseException:
        try:
            return await self._send_one(request)
        except Exception as exc:
            return exc


class StartBatcher:
    """Coalesces the concurrent starts of one blocking ``Client`` (see the module docstring).

    One caller at a time sends (``_sending``); the others sleep each on its own lock
    (``_Blocked.wake``) until their answer comes or, when the sender is done and their start
    is still queued, the sender's turn is handed to the oldest of them: an answer wakes exactly
    the callers it answers, with no lock they all queue for."""

    def __init__(
        self,
        send_one: Callable[[pb.StartInstanceRequest], pb.InstanceInfo],
        send_many: Callable[[pb.StartInstancesRequest], pb.StartInstancesResponse],
    ) -> None:
        self._send_one = send_one
        self._send_many = send_many
        self._pending: deque[_Blocked] = deque()
        self._sending = False  # a thread has a call in flight for the batcher, or is about to
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a start was queued (``_gather``)
        self._answered = 0  # how many starts the last batch answered
        self._answered_at = float("-inf")  # when (time.monotonic())
        self.coalesce = True  # False once a server refused a coalesced call as unknown

    def start(self, request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        """Send ``request`` alone or with the starts that queue meanwhile; its own answer."""
        if not self.coalesce:
            return self._send_one(request)
        waiting = _Blocked(request)
        with self._lock:
            self._pending.append(waiting)
            if len(self._pending) >= self._answered:  # all a gathering sender waits for (_gather)
                self._arrived.notify()
            turn = not self._sending  # nobody sends: this caller does
            self._sending = True
        while True:
            if not turn:
                try:
                    waiting.wake.acquire()  # answered, or handed the sender's turn
                except BaseException:  # KeyboardInterrupt in the main thread while it waits
                    self._leave(waiting)
                    raise
                if waiting.done:
                    return waiting.result()
            batch: list[_Blocked] = []
            try:
                with self._lock:
                    self._gather()
                    batch = take(self._pending)
                self._send(batch)
            except BaseException as exc:  # interrupted before its call went: nothing of it is sent
                for other in batch:
                    if not other.done:
                        other.answer(exc)
                self._leave(waiting)  # its own start, if still queued, is not sent either
                raise
            finally:
                self._pass_turn()
            if waiting.done:
                return waiting.result()
            turn = False  # more than one batch was queued ahead of it: wait for its own

    def _pass_turn(self) -> None:
        """The sender is done: hand the turn to the oldest start still queued, if any."""
        with self._lock:
            self._hand_on()

    def _hand_on(self) -> None:
        """Under the lock: wake the oldest queued start to send, or note that nobody sends."""
        if self._pending:
            self._pending[0].wake.release()
        else:
            self._sending = False

    def _leave(self, waiting: _Blocked) -> None:
        """A caller stopped (interrupted, waiting or about to send): its start, if still queued,
        is never sent, and if the sender's turn had just been handed to it and not taken, the turn
        goes on to the next one (a caller holding the turn keeps its lock held: nothing to hand)."""
        with self._lock:
            if waiting in self._pending:
                self._pending.remove(waiting)
                if waiting.wake.acquire(blocking=False):  # released: it had been handed the turn
                    self._hand_on()

    def _gather(self) -> None:
        """Under the lock, before a batch is taken: if the last batch was answered just now and
        fewer starts are queued than it carried, wait (at most ``GATHER_SECONDS``) for the
        callers it answered, who are on their way back with their next starts.

        Without this, the first caller back (often the sending thread itself) finds nothing in
        flight and sends alone, and everyone else waits for that lone start's round trip before
        their batch goes: two trips per start under a steady load (bench/README.md, "Round
        eighteen"). A lone caller is never held (its last batch was of one), nor a caller that
        comes back after a while. Callers queueing meanwhile wake it only once, when their count
        is complete (``start``): a wake-up per caller cost a GIL hand-off each ("Round
        thirty-one")."""
        pending = self._pending
        expected = self._answered
        deadline = self._answered_at + GATHER_SECONDS
        while len(pending) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._arrived.wait(left)

    def _send(self, batch: list[_Blocked]) -> None:
        try:
            if len(batch) == 1:
                answers: Sequence[Outcome | BaseException] = [self._call_one(batch[0].request)]
            else:
                request = pb.StartInstancesRequest(starts=[w.request for w in batch])
                answers = outcomes(self._send_many(request), len(batch))
        except Exception as exc:
            if len(batch) > 1 and old_server(exc):
                self.coalesce = False
                answers = [self._call_one(w.request) for w in batch]
            else:
                answers = [exc] * len(batch)
        except BaseException as exc:  # KeyboardInterrupt in the sending thread: the others learn it
            for waiting in batch:
                waiting.answer(exc)
            raise
        with self._lock:
            self._answered = len(batch)
            self._answered_at = time.monotonic()
        for waiting, outcome in zip(batch, answers, strict=True):
            waiting.answer(outcome)

    def _call_one(self, request: pb.StartInstanceRequest) -> Outcome | BaseException:
        try:
            return self._send_one(request)
        except Exception as exc:
            return exc
