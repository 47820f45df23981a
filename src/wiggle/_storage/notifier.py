"""Wake-ups inside one server process: long-polling workers, await-completion calls, the clock.

A store announces what a commit changed (``work_ready``, ``instance_finished``,
``clock_changed``) after that commit; waiters sleep here until then. Across server processes the
PostgreSQL store's listener turns NOTIFYs into the same calls.

No lost wake-ups: a poller registers (``watch_work``) *before* it looks for work, and waits on
that registration afterwards. An announcement made between its look and its wait finds it
registered and completes its future, so the wait returns at once instead of sleeping out its
timeout (issue #16, item 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from .._engine.state import Changes, TokenStatus

__all__ = ["Notifier", "WorkWaiter", "ready_counts"]


class WorkWaiter:
    """One long-poll's registration for work on some queues (see ``Notifier.watch_work``).

    Its future is True once woken, False at the timeout. ``woken_for`` is the queue whose counted
    wake-up it took; ``taken`` says its owner has acted on that wake-up (its wait returned True),
    so leaving without it passes the wake-up on. Made by ``watch_work``, it is also the context
    manager that registers it on entry and unregisters it on exit (a class, not a generator: every
    poll enters one).
    """

    __slots__ = ("future", "queues", "woken_for", "taken", "notifier")

    def __init__(
        self, future: asyncio.Future[bool], queues: list[str], notifier: Notifier | None = None
    ) -> None:
        self.future = future
        self.queues = queues
        self.woken_for: str | None = None
        self.taken = False
        self.notifier = notifier

    def __enter__(self) -> WorkWaiter:
        if self.notifier is not None:
            self.notifier._register(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.notifier is not None:
            self.notifier._leave(self)

    @property
    def woken(self) -> bool:
        """True once a wake-up reached this waiter (even before it started waiting)."""
        return self.future.done() and not self.future.cancelled() and self.future.result()


def ready_counts(changes: Changes) -> dict[str, int]:
    """How many tokens each queue of ``changes.ready_queues`` gained (at least 1 per queue named)."""
    counts = dict.fromkeys(changes.ready_queues, 0)
    for token in changes.tokens.values():
        if token.status == TokenStatus.READY and token.queue in counts:
            counts[token.queue] += 1
    for queue, n in counts.items():
        if n == 0:
            counts[queue] = 1  # named but not found (merged away): one wake-up is harmless
    return counts


def _time_out(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class Notifier:
    """Wakes long-polling workers when a queue gains READY tokens, and waiters when instances finish.

    Work wake-ups are counted: a queue that gained ``n`` READY tokens wakes its ``n`` longest-waiting
    pollers (first in, first out), not all of them, so pollers don't stampede for one token and then
    re-query. A woken poller that finds nothing (another poller took the token first) just waits
    again. A woken waiter leaves every queue it waited on, so it is never counted twice; one that
    leaves without acting on its wake-up (cancelled, or it found other work first) hands it on to
    the next waiter of that queue.
    """

    def __init__(self) -> None:
        # queue -> its waiters in arrival order (a dict used as an ordered set)
        self._queue_waiters: dict[str, dict[WorkWaiter, None]] = {}
        self._instance_waiters: dict[str, set[asyncio.Event]] = {}
        self._any_waiters: set[asyncio.Event] = set()

    def work_ready(self, queues: Iterable[str], counts: Mapping[str, int] | None = None) -> None:
        """Wake pollers of ``queues``: ``counts[queue]`` of them, oldest first, or all if the count is unknown.

        ``counts`` is how many tokens each queue just gained; a queue it does not name (or no
        ``counts`` at all, as for a notification from another node) wakes every waiter.
        """
        for queue in queues:
            waiters = self._queue_waiters.get(queue)
            if not waiters:
                continue
            n = None if counts is None else counts.get(queue)
            if n is None:
                for waiter in list(waiters):
                    self._wake(waiter, None)
                continue
            while n > 0 and waiters:
                waiter = next(iter(waiters))  # the oldest: a woken waiter leaves every queue
                if self._wake(waiter, queue):
                    n -= 1

    def _wake(self, waiter: WorkWaiter, queue: str | None) -> bool:
        """Wake ``waiter`` (for a counted wake-up of ``queue``); False if it had already stopped waiting."""
        self._forget(waiter)
        if waiter.future.done():
            return False  # timed out or cancelled, its task not yet resumed: not a wake-up
        waiter.future.set_result(True)
        waiter.woken_for = queue
        return True

    def _forget(self, waiter: WorkWaiter) -> None:
        for q in waiter.queues:
            waiters = self._queue_waiters.get(q)
            if waiters is not None:
                waiters.pop(waiter, None)
                if not waiters:
                    del self._queue_waiters[q]

    def clock_changed(self) -> None:
        """A timer or deadline was added: wake the clock duty so it can re-plan its sleep."""
        for event in self._any_waiters:
            event.set()

    def wake_all(self) -> None:
        """Wake every waiter (after a lost notification channel: they re-check for themselves)."""
        for waiters in list(self._queue_waiters.values()):
            for waiter in list(waiters):
                self._wake(waiter, None)
        for events in list(self._instance_waiters.values()):
            for event in events:
                event.set()
        self.clock_changed()

    def instance_finished(self, instance_id: str) -> None:
        """Wake whoever awaits ``instance_id``."""
        for event in self._instance_waiters.get(instance_id, ()):
            event.set()

    def watch_work(self, queues: Iterable[str]) -> WorkWaiter:
        """Register for work on ``queues`` now (``with notifier.watch_work(queues) as waiter``); look
        for work inside, then ``wait`` on the waiter.

        On leaving, a counted wake-up the waiter took but its owner did not act on (it left
        with work found first, or was cancelled) is passed on to the next waiter of that queue:
        the work it announced must not sit unclaimed until some other poller's timeout.
        """
        return WorkWaiter(asyncio.get_running_loop().create_future(), list(dict.fromkeys(queues)), self)

    def _register(self, waiter: WorkWaiter) -> None:
        for q in waiter.queues:
            self._queue_waiters.setdefault(q, {})[waiter] = None

    def _leave(self, waiter: WorkWaiter) -> None:
        self._forget(waiter)
        if not waiter.future.done():
            waiter.future.cancel()
        if waiter.woken_for is not None and not waiter.taken:
            self.work_ready((waiter.woken_for,), {waiter.woken_for: 1})

    async def wait(self, waiter: WorkWaiter, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds on a registered ``waiter``; True if woken (maybe already)."""
        if not waiter.future.done():
            if timeout <= 0:
                return False
            timer = asyncio.get_running_loop().call_later(timeout, _time_out, waiter.future)
            try:
                await asyncio.shield(waiter.future)
            finally:
                timer.cancel()
        woken = waiter.woken
        waiter.taken = woken
        return woken

    async def wait_work(self, queues: Iterable[str], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for work on ``queues``; True if woken.

        Registers only now: a caller that looked for work first should use ``watch_work``.
        """
        if timeout <= 0:
            return False
        with self.watch_work(queues) as waiter:
            return await self.wait(waiter, timeout)

    async def wait_clock(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, or until a new timer appears."""
        event = asyncio.Event()
        self._any_waiters.add(event)
        try:
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            pass
        finally:
            self._any_waiters.discard(event)

    @contextmanager
    def watch_instance(self, instance_id: str) -> Iterator[asyncio.Event]:
        """Register for ``instance_id`` finishing now; read its status inside, then wait on the event."""
        event = asyncio.Event()
        self._instance_waiters.setdefault(instance_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._instance_waiters.get(instance_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._instance_waiters[instance_id]

    async def wait_instance(self, instance_id: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for ``instance_id`` to finish."""
        with self.watch_instance(instance_id) as event:
            await wait_event(event, timeout)


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``event``."""
    if event.is_set():
        return
    try:
        await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    except asyncio.TimeoutError:
        pass
