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
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._engine.state import Changes, TokenStatus
from .handoff import Handoff

if TYPE_CHECKING:
    from .base import InstanceView

__all__ = ["InstanceWatch", "Notifier", "WorkWaiter", "not_yet_due", "ready_counts"]


class InstanceWatch:
    """One wait for an instance to finish (``Notifier.watch_instance``): ``event`` is set when a
    commit announces the finish, and ``view`` is what that commit left (an ``InstanceView``) when
    the store had it at hand (the PostgreSQL store's group commit), else None: the waiter reads."""

    __slots__ = ("event", "view")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.view: InstanceView | None = None


class WorkWaiter:
    """One long-poll's registration for work on some queues (see ``Notifier.watch_work``).

    Its future is True once woken, False at the timeout. ``woken_for`` is the queue whose counted
    wake-up it took; ``taken`` says its owner has acted on that wake-up (its wait returned True),
    so leaving without it passes the wake-up on. Made by ``watch_work``, it is also the context
    manager that registers it on entry and unregisters it on exit (a class, not a generator: every
    poll enters one).
    """

    __slots__ = (
        "future",
        "queues",
        "woken_for",
        "taken",
        "notifier",
        "worker_id",
        "max_tasks",
        "lease_millis",
        "handoff",
        "counted",
    )

    def __init__(
        self,
        future: asyncio.Future[bool],
        queues: list[str],
        notifier: Notifier | None = None,
        counted: bool = True,
    ) -> None:
        self.future = future
        self.queues = queues
        # False: woken by every announcement on its queues, never by a counted wake-up
        # (Notifier.watch_work)
        self.counted = counted
        self.woken_for: str | None = None
        self.taken = False
        self.notifier = notifier
        # A poller that takes steps handed to it while it waits (Notifier.arm): whose lease, how
        # many at most, the lease length it asked for; and the hand-off reserved for it, if any.
        self.worker_id = ""
        self.max_tasks = 0
        self.lease_millis: int | None = None
        self.handoff: Handoff | None = None

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


def not_yet_due(changes: Changes, now: int) -> list[str]:
    """The queues of ``changes.ready_queues`` with a READY token not due before ``now`` (a retry's
    backoff, a step given back for another worker): a poller of this node woken for such a step
    finds nothing to claim yet, and may not be the one to take it (a worker that gave it back), so
    the other nodes are told of it whatever the local wake-up (postgres/store.py ``_announce``)."""
    queues = changes.ready_queues
    return list(
        dict.fromkeys(
            t.queue
            for t in changes.tokens.values()
            if t.status == TokenStatus.READY and t.available_at > now and t.queue in queues
        )
    )


def _nobody_else(queue: str) -> None:
    """No other node to tell (the in-memory store)."""


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

    #: How long a queue seen empty is believed empty without another announcement (seconds): a
    #: bound, should an announcement ever be lost (a notification channel broken unnoticed).
    EMPTY_FOR_SECONDS = 1.0

    def __init__(self) -> None:
        # queue -> its waiters in arrival order (a dict used as an ordered set)
        self._queue_waiters: dict[str, dict[WorkWaiter, None]] = {}
        # queue -> its uncounted waiters (watch_work): most often none
        self._uncounted: dict[str, dict[WorkWaiter, None]] = {}
        self._armed: set[WorkWaiter] = set()  # waiting pollers that take hand-offs (arm)
        self._instance_waiters: dict[str, set[InstanceWatch]] = {}
        self._any_waiters: set[asyncio.Event] = set()
        # Work stamps: every announcement gives the queues it names a new stamp; wake_all raises
        # the floor every queue's stamp is at least. A look for work that began at a queue's stamp
        # and found it empty stays true until the stamp moves (known_empty).
        self._counter = 0
        self._floor = 0
        self._stamps: dict[str, int] = {}
        # queue -> (its stamp when the look began, the earliest delayed READY token or None,
        # NEXT_UNKNOWN if not looked up yet, time.monotonic() of the look)
        self._empty: dict[str, tuple[int, int | None, float]] = {}
        # Tells the other nodes of a step on a queue (pass_on); the PostgreSQL store sets it.
        self.spill: Callable[[str], None] = _nobody_else

    # ------------------------------------------------------------------ queues known empty

    #: ``known_empty``'s answer when the queues are empty of due work but the time of their
    #: earliest delayed token is not known yet (the caller asks the store, then ``note_next``).
    NEXT_UNKNOWN = -1

    def stamps(self, queues: list[str]) -> list[int]:
        """The work stamps of ``queues`` now: take them before a look for work (``note_empty``)."""
        floor = self._floor
        get = self._stamps.get
        return [get(q, floor) for q in queues]

    def note_empty(self, queues: list[str], stamps: list[int], next_ready: int | None) -> None:
        """A look for work on ``queues``, begun at ``stamps``, left no due READY token on them
        (it took fewer than it asked for). ``next_ready``: the earliest delayed READY token's
        time (ms), None if none, NEXT_UNKNOWN if not looked up."""
        now = time.monotonic()
        current = self.stamps(queues)
        for queue, stamp, cur in zip(queues, stamps, current, strict=True):
            if stamp == cur:  # else: announced since the look began, it may have missed that work
                self._empty[queue] = (stamp, next_ready, now)

    def known_empty(self, queues: list[str], now_ms: int) -> int | None:
        """None unless every queue of ``queues`` is known to hold no due READY token: no
        announcement since a look found it empty, that look recent, and no delayed token due by
        ``now_ms``. Else the earliest delayed token's time over the queues (ms; 0 if there is
        none), or NEXT_UNKNOWN if some queue's is not known."""
        floor = self._floor
        limit = time.monotonic() - self.EMPTY_FOR_SECONDS
        earliest = 0
        unknown = False
        for queue in queues:
            seen = self._empty.get(queue)
            if seen is None:
                return None
            stamp, next_ready, at = seen
            if stamp != self._stamps.get(queue, floor) or at < limit:
                del self._empty[queue]
                return None
            if next_ready == self.NEXT_UNKNOWN:
                unknown = True
            elif next_ready is not None:
                if next_ready <= now_ms:
                    del self._empty[queue]
                    return None
                earliest = next_ready if earliest == 0 else min(earliest, next_ready)
        return self.NEXT_UNKNOWN if unknown else earliest

    def not_empty(self, queues: list[str]) -> None:
        """Forget that ``queues`` were empty (a due READY token was seen on one)."""
        for queue in queues:
            self._empty.pop(queue, None)

    # ------------------------------------------------------------------ hand-offs

    @property
    def armed(self) -> bool:
        """Some poller waits here that takes steps handed to it (wiggle/_storage/handoff.py)."""
        return bool(self._armed)

    def arm(self, waiter: WorkWaiter, worker_id: str, max_tasks: int, lease_millis: int | None) -> None:
        """``waiter`` now waits (only then: not while it claims) and takes up to ``max_tasks``
        steps handed to it, leased to ``worker_id``."""
        waiter.worker_id = worker_id
        waiter.max_tasks = max_tasks
        waiter.lease_millis = lease_millis
        if max_tasks > 0 and worker_id:
            self._armed.add(waiter)

    def disarm(self, waiter: WorkWaiter) -> None:
        """``waiter`` stopped waiting: no hand-off may be reserved for it any more."""
        self._armed.discard(waiter)

    def take_armed(
        self, queue: str, on_orphan: Callable[[list[Any]], None], prefer: str = ""
    ) -> WorkWaiter | None:
        """Reserve an armed poller waiting on ``queue`` for a hand-off: the newest of worker
        ``prefer``'s if it has one (the worker whose report made the step READY: its process is
        awake and reading its stream), else the newest of any worker's (the one that last came
        back from work: on an idle system, the step stays on a warm process instead of going
        round every worker's in turn; docs/semantics.md, "Hand-off"). It leaves every waiting
        list, its wait ends, and it then awaits ``waiter.handoff``. None if there is none."""
        waiters = self._queue_waiters.get(queue)
        armed = self._armed
        if not waiters or not armed:
            return None
        newest: WorkWaiter | None = None  # of any worker
        for waiter in reversed(waiters):
            if waiter in armed and not waiter.future.done():
                if not prefer or waiter.worker_id == prefer:
                    break
                if newest is None:
                    newest = waiter
        else:
            if newest is None:
                return None
            waiter = newest
        self._armed.discard(waiter)
        self._forget(waiter)
        loop = asyncio.get_running_loop()
        waiter.handoff = Handoff(
            loop.create_future(), on_orphan, waiter.worker_id, waiter.max_tasks, waiter.lease_millis
        )
        waiter.future.set_result(True)
        waiter.woken_for = None  # not a counted wake-up: nothing to pass on
        return waiter

    # ------------------------------------------------------------------ wake-ups

    def work_ready(self, queues: Iterable[str], counts: Mapping[str, int] | None = None) -> list[str]:
        """Wake pollers of ``queues``: ``counts[queue]`` of them, oldest first, or all if the count is unknown.

        ``counts`` is how many tokens each queue just gained; a queue it does not name (or no
        ``counts`` at all, as for a notification from another node) wakes every waiter.

        Returns the queues of which some new steps have no poller here woken for them: a woken
        poller looks again and claims at least one step (a poll registers before it looks, so
        even one in the middle of its look does), so only those steps need another node's
        pollers (postgres/store.py ``_announce``). Every queue is returned when uncounted.
        """
        self._counter += 1
        stamp = self._counter
        stamps = self._stamps
        uncovered: list[str] = []
        uncounted = self._uncounted
        for queue in queues:
            stamps[queue] = stamp
            if uncounted and queue in uncounted:
                for waiter in list(uncounted[queue]):
                    self._wake(waiter, None)
            n = None if counts is None else counts.get(queue)
            waiters = self._queue_waiters.get(queue)
            if n is None or not waiters:
                uncovered.append(queue)
                if waiters:
                    for waiter in list(waiters):
                        self._wake(waiter, None)
                continue
            while n > 0 and waiters:
                waiter = next(iter(waiters))  # the oldest: a woken waiter leaves every queue
                if self._wake(waiter, queue):
                    n -= 1
            if n > 0:
                uncovered.append(queue)
        return uncovered

    def pass_on(self, queue: str) -> None:
        """A counted wake-up of ``queue`` that its poller took and did not act on (it left first,
        or was cancelled): wake the next poller of it here, or, if none waits here, tell the
        other nodes (``spill``: the PostgreSQL store's cluster NOTIFY), whose pollers were not
        told of the step because this node's poller was to take it."""
        if self.work_ready((queue,), {queue: 1}):
            self.spill(queue)

    def _wake(self, waiter: WorkWaiter, queue: str | None) -> bool:
        """Wake ``waiter`` (for a counted wake-up of ``queue``); False if it had already stopped waiting."""
        self._forget(waiter)
        if waiter.future.done():
            return False  # timed out or cancelled, its task not yet resumed: not a wake-up
        waiter.future.set_result(True)
        waiter.woken_for = queue
        return True

    def _forget(self, waiter: WorkWaiter) -> None:
        by_queue = self._queue_waiters if waiter.counted else self._uncounted
        for q in waiter.queues:
            waiters = by_queue.get(q)
            if waiters is not None:
                waiters.pop(waiter, None)
                if not waiters:
                    del by_queue[q]

    def clock_changed(self) -> None:
        """A timer or deadline was added: wake the clock duty so it can re-plan its sleep."""
        for event in self._any_waiters:
            event.set()

    def wake_all(self) -> None:
        """Wake every waiter (after a lost notification channel: they re-check for themselves)."""
        self._counter += 1
        self._floor = self._counter  # every queue's stamp moves: nothing is known empty any more
        self._stamps.clear()
        self._empty.clear()
        for waiters in [*self._queue_waiters.values(), *self._uncounted.values()]:
            for waiter in list(waiters):
                self._wake(waiter, None)
        self.recheck_instances()
        self.clock_changed()

    def recheck_instances(self) -> None:
        """Wake every waiter for an instance to finish: each reads its instance again."""
        for watches in list(self._instance_waiters.values()):
            for watch in watches:
                watch.event.set()

    def instance_finished(self, instance_id: str, view: InstanceView | None = None) -> None:
        """Wake whoever awaits ``instance_id``; ``view``, the finished instance as the announcing
        commit wrote it (an ``InstanceView``), saves each of them a read (None: they read)."""
        for watch in self._instance_waiters.get(instance_id, ()):
            watch.view = view
            watch.event.set()

    def watch_work(self, queues: Iterable[str], counted: bool = True) -> WorkWaiter:
        """Register for work on ``queues`` now (``with notifier.watch_work(queues) as waiter``); look
        for work inside, then ``wait`` on the waiter.

        On leaving, a counted wake-up the waiter took but its owner did not act on (it left
        with work found first, or was cancelled) is passed on to the next waiter of that queue:
        the work it announced must not sit unclaimed until some other poller's timeout.

        ``counted=False``: a poller that may not take what it is woken for (its claims pass some
        steps over, wiggle/_server/unrunnable.py). Every announcement on its queues wakes it, the
        counted wake-ups go to the others, and it never passes one on: two such pollers would
        hand one wake-up back and forth, each claiming nothing, for as long as the step waited.
        """
        return WorkWaiter(
            asyncio.get_running_loop().create_future(), list(dict.fromkeys(queues)), self, counted
        )

    def _register(self, waiter: WorkWaiter) -> None:
        by_queue = self._queue_waiters if waiter.counted else self._uncounted
        for q in waiter.queues:
            by_queue.setdefault(q, {})[waiter] = None

    def _leave(self, waiter: WorkWaiter) -> None:
        self._armed.discard(waiter)
        handoff = waiter.handoff
        if handoff is not None and not handoff.future.done():
            # Left (cancelled) before taking the steps reserved for it: the commit gives them back.
            handoff.future.cancel()
        self._forget(waiter)
        if not waiter.future.done():
            waiter.future.cancel()
        if waiter.woken_for is not None and not waiter.taken:
            self.pass_on(waiter.woken_for)

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
    def watch_instance(self, instance_id: str) -> Iterator[InstanceWatch]:
        """Register for ``instance_id`` finishing now; read its status inside, then wait on the
        watch's event."""
        watch = InstanceWatch()
        self._instance_waiters.setdefault(instance_id, set()).add(watch)
        try:
            yield watch
        finally:
            waiters = self._instance_waiters.get(instance_id)
            if waiters is not None:
                waiters.discard(watch)
                if not waiters:
                    del self._instance_waiters[instance_id]

    async def wait_instance(self, instance_id: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for ``instance_id`` to finish."""
        with self.watch_instance(instance_id) as watch:
            await wait_event(watch.event, timeout)


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``event``."""
    if event.is_set():
        return
    try:
        await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    except asyncio.TimeoutError:
        pass
