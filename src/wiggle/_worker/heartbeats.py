"""Heartbeats: one loop renews the lease of every in-flight step of a worker.

A step is watched from the moment it starts until it is reported. The loop sends HeartbeatTask for
each watched step not renewed within the interval (``heartbeat_seconds``, or a third of the
server's lease). A FAILED_PRECONDITION answer means the server ended the attempt (its instance
finished or was cancelled, it passed its time limit, its lease was lost): the step is given up
(``give_up``): a handler running for it is cancelled (async) or abandoned in its thread (sync),
a local run's ``Lease`` is marked abandoned, so the run stops at its next step boundary, and a
drain neither cuts nor hands it back (``attempt_over``). A heartbeat the server could not take
(UNAVAILABLE, DEADLINE_EXCEEDED: a restart, a fail-over) renews nothing: the step stays due and is
tried again a second later, not an interval later, so an outage shorter than the lease's
remainder costs no lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

import grpc

from .._rpc import wiggle_pb2 as pb
from .transport import AWAY, DEFAULT_TIMEOUT, Transport

__all__ = ["Heartbeats", "Lease", "AWAY_AGAIN"]

log = logging.getLogger("wiggle.worker")

#: seconds before a heartbeat that found the server away is tried again
AWAY_AGAIN = 1.0


class Lease:
    """A local run's lease: its expiry and length (the step the run is at sets the length: a step
    with a heartbeat timeout makes it that), and whether it was lost."""

    __slots__ = ("expires_at", "millis", "abandoned")

    def __init__(self, expires_at: int, millis: int) -> None:
        self.expires_at = expires_at  # epoch millis
        self.millis = millis  # the lease's length at the run's current step (0: the server's)
        self.abandoned = False


class Heartbeats:
    """Watches in-flight steps and renews their leases while ``running()`` or any is watched."""

    def __init__(
        self,
        transport: Transport,
        heartbeat_seconds: float,
        running: Callable[[], bool],
        on_over: Callable[[str, str], object] | None = None,
    ) -> None:
        self.transport = transport
        self.heartbeat_seconds = heartbeat_seconds
        self.running = running
        #: called with (task id, why) when the server ended a watched step's attempt: the worker
        #: gives up the handler running for it (HandlerCaller.give_up)
        self.on_over = on_over
        #: the server's lease length, as the last activation said (until one arrives: 30 s)
        self.lease_millis = 30_000
        # task id -> (activation, the local run's lease or None, watched or last renewed since)
        self.watched: dict[str, tuple[pb.TaskActivation, Lease | None, float]] = {}
        # task id -> the asyncio task running the watched step; and the tasks whose step the
        # server ended (``give_up``), with that step's task id and why, until they watch another
        # step or are gone (``attempt_over``: a drain neither cuts nor hands them back)
        self._task_of: dict[str, asyncio.Task[Any]] = {}
        self._over: weakref.WeakKeyDictionary[asyncio.Task[Any], tuple[str, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._loop: asyncio.Task[None] | None = None
        self._away = False  # a heartbeat of the last round found the server away: try again soon
        # the loop's sleep, and when it ends: a step watched meanwhile that is due sooner ends it
        self._nap: asyncio.Task[None] | None = None
        self._nap_until = 0.0

    def watch(self, act: pb.TaskActivation, lease: Lease | None = None) -> None:
        """Heartbeat ``act`` until unwatched; ``lease`` (a local run's) learns renewals and loss.
        Watching it again (a local run whose lease got shorter) counts its interval from now. A
        step due sooner than the loop's next turn wakes the loop."""
        now = time.monotonic()
        self.watched[act.task_id] = (act, lease, now)
        task = asyncio.current_task()
        if task is not None:
            self._task_of[act.task_id] = task
            ended = self._over.get(task) if self._over else None
            if ended is not None and ended[0] != act.task_id:  # its next step: the ended one is behind
                del self._over[task]
        if self._loop is None or self._loop.done():
            self._loop = asyncio.ensure_future(self._run())
        elif self._nap is not None and now + self.interval(act, lease) < self._nap_until:
            self._wake()

    def _wake(self) -> None:
        if self._nap is not None:
            self._nap.cancel()

    def unwatch(self, act: pb.TaskActivation) -> None:
        """Stop heartbeating ``act`` (reported, or handed back)."""
        self.watched.pop(act.task_id, None)
        self._task_of.pop(act.task_id, None)

    def give_up(self, task_id: str, why: str) -> bool:
        """The server ended the attempt of the watched step ``task_id`` (``why``: its refusal of
        a heartbeat, or what the test kit read from its server): stop heartbeating it, mark a
        local run's lease abandoned (the run stops at its next step), give up the handler
        running for it (``on_over``), and remember it for ``attempt_over``. False if it is not
        watched (reported or handed back meanwhile)."""
        entry = self.watched.pop(task_id, None)
        if entry is None:
            return False
        act, lease, _ = entry
        if lease is not None:
            lease.abandoned = True
        task = self._task_of.pop(task_id, None)
        if task is not None:
            self._over[task] = (task_id, why)
        if self.on_over is None or not self.on_over(task_id, why):  # else the handler's line says it
            what = "the local run claimed at step" if lease is not None else "step"
            log.info("%s %s of %s abandoned: %s", what, act.node_id, act.instance_id, why)
        return True

    def attempt_over(self, task: asyncio.Task[Any] | None) -> str | None:
        """Why the server ended the attempt of the step ``task`` runs (given up: ``give_up``);
        None while it holds it. A drain neither cuts nor hands back such a step: there is
        nothing to hand back, and it does not run again because of the drain."""
        ended = self._over.get(task) if task is not None and self._over else None
        return None if ended is None else ended[1]

    async def check_now(self, timeout: float) -> None:
        """Heartbeat every watched step now, within ``timeout`` seconds: those whose attempt the
        server ended are given up (``give_up``) before the worker's drain cuts what still runs."""
        due = list(self.watched.values())
        if due:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(self._beat(a, lease) for a, lease, _ in due)), timeout
                )

    async def close(self) -> None:
        """Stop the loop."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(BaseException):
                await self._loop
            self._loop = None

    def interval(self, act: pb.TaskActivation | None = None, lease: Lease | None = None) -> float:
        """Seconds between heartbeats of one step: ``heartbeat_seconds``, or a third of the lease;
        never more than a third of the step's own lease (``act``'s, or the local run's ``lease``
        at its current step: a step's heartbeat timeout makes it short)."""
        default = self.heartbeat_seconds or max(self.lease_millis / 3000, 0.05)
        millis = lease.millis if lease is not None else act.lease_millis if act is not None else 0
        if millis:
            return min(default, max(millis / 3000, 0.05))
        return default

    async def _run(self) -> None:
        while self.watched or self.running():
            pause = min(
                [self.interval(a, lease) for a, lease, _ in self.watched.values()] or [self.interval()]
            )
            if self._away:
                pause = min(pause, AWAY_AGAIN)
                self._away = False
            self._nap = nap = asyncio.ensure_future(asyncio.sleep(pause))
            self._nap_until = time.monotonic() + pause
            try:
                await asyncio.wait((nap,))  # ends with the sleep, or when _wake cancels it
            finally:
                nap.cancel()
                self._nap = None
            # read after the sleep: a step reported while it slept is no longer watched (a stale
            # list made a heartbeat for every step finished in the meantime, each refused)
            watched = list(self.watched.values())
            now = time.monotonic()
            due = [(a, lease) for a, lease, since in watched if now - since >= self.interval(a, lease) * 0.9]
            if due:
                await asyncio.gather(*(self._beat(a, lease) for a, lease in due))

    async def _beat(self, act: pb.TaskActivation, lease: Lease | None) -> None:
        entry = self.watched.get(act.task_id)
        if entry is not None:
            self.watched[act.task_id] = (act, lease, time.monotonic())
        request = pb.HeartbeatTaskRequest(task_id=act.task_id, lease_owner=act.lease_owner)
        try:
            result = await self.transport.heartbeat(request, DEFAULT_TIMEOUT)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in AWAY:  # renewed nothing: still due, and the loop comes back in a second
                now_watched = self.watched.get(act.task_id)
                if entry is not None and now_watched is not None:
                    self.watched[act.task_id] = (now_watched[0], now_watched[1], entry[2])
                self._away = True
            elif code == grpc.StatusCode.FAILED_PRECONDITION:  # the attempt is over
                self.give_up(act.task_id, exc.details() or "the server refused its heartbeat")
            return
        if lease is not None:
            lease.expires_at = max(lease.expires_at, result.lease_expires_at)
