"""The pull loop: claim as many activations as there are free slots, run each as its own task.

A worker holds ``concurrency`` slots. The loop waits for one free slot, takes every other free one
(up to ``concurrency``), and long-polls PollTasks for that many; each activation runs as a task
that frees its slot when it ends. A failed poll backs off and tries again: 0.1 s doubling to 1 s
while the server is away (UNAVAILABLE, DEADLINE_EXCEEDED), to 5 s when it refuses. Until a poll
is answered again, polls do not wait for work (``wait_millis`` 0), so the first one a server
answers ends the trouble (``Poller.trouble``, the worker's /readyz) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc

from .._model import Handback
from .._rpc import wiggle_pb2 as pb
from .reporter import AdvanceUnsupported, Reporter
from .server_step import CUT_HANDBACK_SECONDS
from .transport import AWAY, Transport

__all__ = ["Poller"]

log = logging.getLogger("wiggle.worker")

_GIVEN_BACK_KEPT = 256  # handed-back task ids remembered (Poller.given_back): far more than in flight

Execute = Callable[[pb.TaskActivation], Awaitable[None]]


class Poller:
    """Pulls activations for ``queues`` and runs ``execute`` on each, at most ``concurrency`` at once."""

    def __init__(
        self,
        transport: Transport,
        reporter: Reporter,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        poll_wait_seconds: float,
        execute: Execute,
    ) -> None:
        self.transport = transport
        self.reporter = reporter
        self.worker_id = worker_id
        # This process's stamp on its polls: a new one tells the server that another process
        # polls under this id now, and the nodes the one before gave back are offered to it
        # (wiggle/_server/unrunnable.py ``seen``)
        self.session = os.urandom(8).hex()
        self.queues = list(queues)
        self.concurrency = concurrency
        self.poll_wait_seconds = poll_wait_seconds
        self.execute = execute
        self.running = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._orphans: set[asyncio.Task[None]] = set()
        # the task ids of the last steps handed back (given_back): bounded, oldest dropped first
        self._given_back: dict[str, None] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._loop: asyncio.Task[None] | None = None
        #: since when (monotonic) and why its polls fail (the server away, or refusing them); None
        #: once one is answered. The worker's /readyz reads it (wiggle/_worker/http.py)
        self.trouble: tuple[float, str] | None = None

    def start(self) -> None:
        """Start pulling."""
        self.running = True
        self._loop = asyncio.ensure_future(self._run())

    async def stop(
        self,
        timeout: float,
        hurry: asyncio.Event | None = None,
        before_cut: Callable[[], Awaitable[None]] | None = None,
        over: Callable[[asyncio.Task[None]], object] | None = None,
    ) -> tuple[int, int]:
        """Stop pulling; wait up to ``timeout`` seconds for running activations (or until
        ``hurry`` is set), then cancel them. (cut, ended): how many were cut, and how many ran a
        step whose attempt the server had ended (``over(task)`` true once ``before_cut`` has
        run, unless hurried), stopped and not counted as cut: there is nothing to hand back,
        and they do not run again because of the drain."""
        self.running = False
        cut = ended = 0
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(BaseException):
                await self._loop
        if self.tasks:
            pending = await _until_done(set(self.tasks), timeout, hurry)
            if pending and before_cut is not None and not (hurry is not None and hurry.is_set()):
                await before_cut()
            for task in pending:
                if over is not None and over(task):
                    ended += 1
                elif not task.done():  # (one done meanwhile ended by itself: not cut)
                    cut += 1
                task.cancel()
            if pending:  # a cut local run hands back what it finished (LocalRun._hand_back_cut)
                await asyncio.wait(pending, timeout=CUT_HANDBACK_SECONDS + 1)
        await asyncio.sleep(0.05)  # let a reply to the abandoned poll arrive and be handed back
        if self._orphans:
            await asyncio.wait(set(self._orphans), timeout=5.0)
        return cut, ended

    def hand_back_orphans(self, activations: list[pb.TaskActivation]) -> None:
        """A poll we abandoned claimed these anyway: hand them back at once, attempt unspent."""
        given_back = self._given_back
        for act in activations:
            given_back[act.task_id] = None
            if len(given_back) > _GIVEN_BACK_KEPT:
                del given_back[next(iter(given_back))]
            request = pb.AdvanceRunRequest(
                task_id=act.task_id,
                lease_owner=act.lease_owner,
                final=True,
                handback_reason=Handback.SHUTDOWN.value,
            )
            task = asyncio.ensure_future(self._hand_back(request))
            self._orphans.add(task)
            task.add_done_callback(self._orphans.discard)

    def given_back(self, task_id: str) -> bool:
        """True if the step of ``task_id`` was handed back here (hand_back_orphans): an answer
        that brings it again — a resent report's, answered with the step its first send chained
        (docs/semantics.md#chained-steps) — must not run it, for the handback releases it."""
        return task_id in self._given_back

    async def _hand_back(self, request: pb.AdvanceRunRequest) -> None:
        with contextlib.suppress(AdvanceUnsupported):  # an old server: the lease expires instead
            await self.reporter.advance(request)

    async def _run(self) -> None:
        slots = self._slots
        backoff = 0.1
        # since when no server has answered (UNAVAILABLE, DEADLINE_EXCEEDED): ``_trouble_began``
        away: float | None = None
        while self.running:
            await slots.acquire()
            free = 1
            while not slots.locked():
                await slots.acquire()
                free += 1
                if free >= self.concurrency:
                    break
            sent = time.monotonic()
            # While its polls fail, a poll does not wait for work: the first one a server answers
            # tells the worker (and its /readyz) that the server is back at once, not when a
            # long poll ends, up to ``poll_wait_seconds`` later; the long polls resume after it
            wait = 0.0 if self.trouble is not None else self.poll_wait_seconds
            try:
                request = pb.PollTasksRequest(
                    worker_id=self.worker_id,
                    worker_session=self.session,
                    queues=self.queues,
                    max_tasks=free,
                    wait_millis=int(wait * 1000),
                )
                response = await self.transport.poll(request, wait + 30)
                backoff = 0.1
                self.trouble = None
                if away is not None:
                    # a server of its target: its own again, or another one of a fail-over list. "without
                    # an answer", not "without a server": the time also counts this process's own
                    # pauses (an outside trial: a worker frozen 42 s by SIGSTOP said "without one",
                    # and a pause cannot be told apart from an outage without a loop watchdog)
                    log.info(
                        "reached a server again after %.1f s without an answer; polling %s",
                        time.monotonic() - away,
                        ", ".join(self.queues),
                    )
                    away = None
            except asyncio.CancelledError:
                for _ in range(free):
                    slots.release()
                raise
            except grpc.RpcError as exc:
                for _ in range(free):
                    slots.release()
                code = exc.code() if hasattr(exc, "code") else None
                details = exc.details() if hasattr(exc, "details") else exc
                began = self._trouble_began(sent, wait)
                since = self.trouble[0] if self.trouble is not None else began
                self.trouble = (since, f"{code.name if code else 'error'}: {details}")  # the latest why
                if code in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.UNIMPLEMENTED,
                    grpc.StatusCode.PERMISSION_DENIED,  # a credential not allowed on these queues
                    grpc.StatusCode.UNAUTHENTICATED,
                ):
                    log.error("PollTasks refused: %s", exc.details() if hasattr(exc, "details") else exc)
                elif code in AWAY and away is None:  # once an outage: the server stops, restarts, ...
                    away = began
                    log.warning(
                        "server unavailable (%s: %s); polling again every second at most",
                        code.name,
                        exc.details() if hasattr(exc, "details") else exc,
                    )
                else:
                    log.debug("PollTasks failed (%s); retrying in %.1f s", code, backoff)
                await asyncio.sleep(backoff)
                # a server away (stopping, restarting) is looked for every second at most, so
                # the worker is back soon after it; a refusal is repeated less often
                backoff = min(backoff * 2, 1.0 if code in AWAY else 5.0)
                continue
            tasks = list(response.tasks)
            for _ in range(free - len(tasks)):
                slots.release()
            for activation in tasks:
                task = asyncio.ensure_future(self.execute(activation))
                self.tasks.add(task)
                task.add_done_callback(self._task_done)

    def _trouble_began(self, sent: float, wait: float) -> float:
        """When the trouble of a poll sent at ``sent`` (monotonic) that failed just now began, as
        near as the worker can tell: when the failure came, or, for a poll that failed later
        than its wait (``wait``: ``poll_wait_seconds``, 0 while in trouble) should have been
        answered (DEADLINE_EXCEEDED after ``wait + 30``), when that answer was due. Before, an
        outage was counted from the failure, so one that began with a poll timing out was
        logged at least 30 s short (an outside trial's "server back after 20.7 s")."""
        return min(time.monotonic(), sent + wait)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._slots.release()
        if task.cancelled():
            cancelling = getattr(task, "cancelling", None)  # counted from Python 3.11
            if cancelling is not None and not cancelling():
                # nothing cancelled it: a CancelledError raised inside, which reported nothing
                # (a handler's own is its step's failure: wiggle/_worker/handlers.py ``_Watched``)
                log.error(
                    "worker task ended by a CancelledError although nothing cancelled it; its step "
                    "was not reported and waits out its lease",
                    exc_info=_cancelled_error(task),
                )
            return
        if task.exception() is not None:
            log.error("worker task crashed", exc_info=task.exception())


def _cancelled_error(task: asyncio.Task[None]) -> BaseException | None:
    """The CancelledError that ended ``task`` (with its traceback, for the log)."""
    try:
        task.result()
    except asyncio.CancelledError as exc:
        return exc
    return None


async def _until_done(
    tasks: set[asyncio.Task[None]], timeout: float, hurry: asyncio.Event | None
) -> set[asyncio.Task[None]]:
    """Wait for ``tasks`` for up to ``timeout`` seconds, or until ``hurry`` is set; those not done."""
    if hurry is None:
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return pending
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        deadline = time.monotonic() + timeout
        pending = tasks
        while pending and not hurry.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(
                {*pending, hurried}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            pending = pending - done
        return pending
    finally:
        hurried.cancel()
