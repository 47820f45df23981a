"""Getting steps to workers: claims, long polls, and hand-offs to waiting polls.

``Instances`` (wiggle/_server/instances.py) owns one ``Delivery`` and sends its worker calls
here: ``claim`` leases due READY steps now; ``poll`` claims or waits for work; ``hand_off`` runs
inside a transition (a report, a start) and leases the steps it made READY to polls of this node
already waiting on their queues, so they need no claim of their own (docs/semantics.md,
"Hand-off"; the reservation's lifecycle is wiggle/_storage/handoff.py); ``chain`` runs inside a
report's transition and leases the next step to the reporting worker itself, returned with the
report's answer (docs/semantics.md, "Chained steps").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .._engine.engine import Claimed, Engine, LoadedDefinition
from .._engine.state import Changes, InstanceState, InstanceStatus, Token, TokenStatus, task_id_of
from .._storage.base import NewInstance, Store
from .._storage.handoff import Handoff, Share
from .timings import Timings
from .unrunnable import Unrunnable

__all__ = ["Delivery", "MAX_WAIT_SECONDS", "release"]

log = logging.getLogger("wiggle.server")

MAX_WAIT_SECONDS = 60.0  # the longest a poll or an await-completion may wait in one call
#: The longest a poll that passes steps over (``Unrunnable``) waits without looking again: it
#: takes no counted wake-ups and knows no queue's next due time, so a delayed step falling due
#: is found within this (seconds).
SKIPPING_LOOK_SECONDS = 1.0

#: Gives a step back as a worker's release would: (token id, lease owner) -> done.
GiveBack = Callable[[str, str], Awaitable[object]]


def _leasable(token: Token, now: int) -> bool:
    """A token a transition may lease in its own commit (a hand-off, a chained step): READY and
    due, under no step key (only a claim counts those)."""
    return (
        token.status == TokenStatus.READY
        and token.available_at <= now
        and not token.limit_key
        and not token.rate_key
    )


def _unannounce(changes: Changes, queue: str) -> None:
    """A transition leased steps of ``queue`` itself: if none is left READY there, nobody needs
    to be told of work on it, unless the transition also freed a limit's slot there: steps of
    other instances waiting for that slot need their pollers woken. (A report that chained its
    next step on the queue of a limited step once left them to the pollers' timeouts: 10 s stalls
    per slot in SERVER mode, found by an outside flow-control trial.)"""
    if changes.freed and queue in changes.freed:
        return
    if not any(t.status == TokenStatus.READY and t.queue == queue for t in changes.tokens.values()):
        changes.ready_queues.discard(queue)


def release(shares: list[Share]) -> None:
    """The transition carrying ``shares`` will not commit: the steps they reserved are void."""
    for share in shares:
        share.release()


class Delivery:
    """Claims, polls and hand-offs over ``store`` (see the module docstring)."""

    def __init__(self, store: Store, engine: Engine, timings: Timings, give_back: GiveBack) -> None:
        self.store = store
        self.engine = engine
        self.timings = timings
        self.give_back = give_back
        self.handed_off = 0  # steps leased to a waiting poller inside the commit that made them READY
        self.chained = 0  # steps leased to the reporting worker inside its report's commit (chain)
        self.chained_again = 0  # chained steps given again to a resent report (chained_by)
        self._releases: set[asyncio.Task[None]] = set()  # hand-offs being given back (_orphaned)
        self._claims_left: set[asyncio.Future[list[Claimed]]] = set()  # of polls cancelled meanwhile
        #: the nodes each worker gave back for lack of a handler: its claims pass them over
        self.unrunnable = Unrunnable()
        # Per queue, the reservation of a poller that further transitions may add steps to
        # (Handoff.accepting): a start group's starts, reports committed together, share one poll.
        self._open: dict[str, Handoff] = {}
        #: set when the server stops (Instances.let_go): a poll looks for no more work and returns;
        #: the session streams end on it too (wiggle/_server/session.py)
        self.closing = asyncio.Event()

    # ------------------------------------------------------------------ claims and polls

    async def claim(
        self, worker_id: str, queues: list[str], max_tasks: int, *, lease_millis: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``max_tasks`` due READY tokens on ``queues`` now (no waiting).

        ``lease_millis``: the lease length asked for (None: the server's; else clamped,
        Engine.lease_length).
        """
        if not queues or max_tasks <= 0:
            return []
        claim = self.engine.claim
        timings = self.timings
        self.engine.lease_length(lease_millis)  # a bad length is refused before anything is claimed

        def transition(
            loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
        ) -> Claimed:
            timings.claimed(loaded, token, now)
            return claim(loaded, state, token, worker_id, now, changes, lease_millis)

        skip = self.unrunnable.skip_for(worker_id)
        if skip:
            return await self.store.claim(worker_id, queues, max_tasks, transition, skip)
        return await self.store.claim(worker_id, queues, max_tasks, transition)

    async def poll(
        self,
        worker_id: str,
        queues: list[str],
        max_tasks: int,
        wait_seconds: float,
        *,
        lease_millis: int | None = None,
    ) -> list[Claimed]:
        """Claim up to ``max_tasks`` steps on ``queues``, waiting up to ``wait_seconds`` for some
        (``lease_millis``: as for ``claim``).

        The poller registers for wake-ups *before* each look for work (``Notifier.watch_work``):
        work committed and announced between an empty claim and the wait then ends the wait at
        once, instead of being found only when the wait times out (issue #16, item 0).

        A claim that took fewer steps than it asked for left its queues empty of due work. Until
        something is announced on them (a commit of this node, a NOTIFY of another, their stamps
        in ``Notifier``), or their earliest delayed step falls due, a poll does not claim again:
        it goes straight to its wait (``Notifier.known_empty``). A worker's next poll after a
        short claim then costs no transaction.

        A worker whose claims pass a node over polls apart (``_poll_skipping``), from the start or
        from the moment its give-back is noted."""
        clock = self.store.clock
        deadline = time.monotonic() + min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS)
        notifier = self.store.notifier
        unknown = notifier.NEXT_UNKNOWN
        woken_for: str | None = None  # a counted wake-up this poll took and has not yet looked for
        try:
            while not self.closing.is_set():
                if self.unrunnable.skip_for(worker_id):  # the store would keep saying that step is due
                    if woken_for is not None:
                        notifier.pass_on(woken_for)
                        woken_for = None
                    left = deadline - time.monotonic()
                    return await self._poll_skipping(worker_id, queues, max_tasks, left, lease_millis)
                with notifier.watch_work(queues) as waiter:
                    next_ready = notifier.known_empty(queues, clock.now())
                    if next_ready is None:
                        stamps = notifier.stamps(queues)
                        claimed = await self._claim_to_the_end(worker_id, queues, max_tasks, lease_millis)
                        if 0 < len(claimed) < max_tasks:
                            notifier.note_empty(queues, stamps, unknown)
                        if claimed:
                            return claimed
                        next_ready = unknown
                    woken_for = None  # looked (or knew there was nothing): the wake-up was acted on
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return []
                    if next_ready == unknown:
                        next_ready = await self._next_ready(queues)
                    if next_ready:
                        remaining = min(remaining, max((next_ready - clock.now()) / 1000, 0.001))
                    # While it waits (only then) the poller takes steps handed to it by the
                    # commit that makes them READY (wiggle/_storage/handoff.py).
                    notifier.arm(waiter, worker_id, max_tasks, lease_millis)
                    try:
                        with self.store.waiting_for("work", queues):  # the others' NOTIFYs too
                            woken = await notifier.wait(waiter, remaining)
                    finally:
                        notifier.disarm(waiter)
                    handoff = waiter.handoff
                    if handoff is not None:
                        claimed = await handoff.future  # settled after the commit (or given up)
                        if claimed:
                            return claimed
                        continue  # not committed: look for work as usual
                    if woken:
                        woken_for = waiter.woken_for
            # The server is stopping (``closing``): its worker polls elsewhere or later
            # (wiggle/_server/worker_service.py); work this poll was told of goes to the others.
            if woken_for is not None:
                notifier.pass_on(woken_for)
            return []
        except BaseException:
            # Cancelled after being woken, before looking: pass the wake-up on, or the work it
            # announced could sit unclaimed until some other poller's timeout.
            if woken_for is not None:
                notifier.pass_on(woken_for)
            raise

    async def _next_ready(self, queues: list[str]) -> int | None:
        """The earliest time a READY step of ``queues`` is due (``store.next_ready_at``), noted in
        the notifier for the next polls (``poll``, after a claim that found nothing)."""
        notifier = self.store.notifier
        stamps = notifier.stamps(queues)
        next_ready = await self.store.next_ready_at(queues)
        # A due READY token the claim skipped (locked by a transaction in flight) or a delayed
        # one due now: not empty, look again soon. Else known empty.
        if next_ready is not None and next_ready <= self.store.clock.now() + 50:
            notifier.not_empty(queues)
        else:
            notifier.note_empty(queues, stamps, next_ready)
        return next_ready

    async def _poll_skipping(
        self, worker_id: str, queues: list[str], max_tasks: int, wait_seconds: float, lease_millis: int | None
    ) -> list[Claimed]:
        """``poll`` for a worker whose claims pass some steps over (``Unrunnable``).

        What it passes over is another worker's to run, so what it finds says nothing of its
        queues to the other pollers: it notes no queue empty, takes no counted wake-up (it is
        woken by every announcement on its queues besides those, and so passes none on), and is
        handed no step (``Notifier.arm``): a step handed to it might be one it cannot run. It
        looks again at least every ``SKIPPING_LOOK_SECONDS``."""
        clock = self.store.clock
        deadline = time.monotonic() + min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS)
        notifier = self.store.notifier
        while not self.closing.is_set():
            with notifier.watch_work(queues, counted=False) as waiter:
                next_ready = notifier.known_empty(queues, clock.now())
                if next_ready is None:
                    claimed = await self._claim_to_the_end(worker_id, queues, max_tasks, lease_millis)
                    if claimed:
                        return claimed
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                remaining = min(remaining, SKIPPING_LOOK_SECONDS)
                if next_ready and next_ready != notifier.NEXT_UNKNOWN:
                    remaining = min(remaining, max((next_ready - clock.now()) / 1000, 0.001))
                with self.store.waiting_for("work", queues):
                    await notifier.wait(waiter, remaining)
        return []

    # ------------------------------------------------------------------ hand-offs

    async def insert(self, items: list[NewInstance], loaded: LoadedDefinition, now: int) -> list[str]:
        """``store.insert_many``, the first steps of new instances handed to waiting pollers
        (``hand_off``): an item not inserted (its request id started another instance) or a
        failed insert gives its hand-offs back."""
        for item in items:
            if not self.can_hand_off:
                break
            if item.changes.ready_queues:
                self.hand_off(loaded, item.state, item.changes, now)
        try:
            ids = await self.store.insert_many(items)
        except BaseException:
            for item in items:
                if item.changes.handoffs:
                    release(item.changes.handoffs)
            raise
        for item, instance_id in zip(items, ids, strict=True):
            if item.changes.handoffs and instance_id != item.state.instance.id:
                release(item.changes.handoffs)
        return ids

    @property
    def can_hand_off(self) -> bool:
        """Some poller of this node waits for steps, or has room left in its reservation."""
        if self.store.notifier.armed:
            return True
        open_ = self._open
        for queue in [q for q, handoff in open_.items() if not handoff.accepting()]:
            del open_[queue]  # closed or full: no transition can add to it any more
        return bool(open_)

    def hand_off(
        self, loaded: LoadedDefinition, state: InstanceState, changes: Changes, now: int, prefer: str = ""
    ) -> None:
        """Lease the due READY steps of ``changes`` to pollers of this node waiting on their queues,
        inside the transition (so in its transaction): wiggle/_storage/handoff.py. A poller already
        reserved by another transition takes more steps while its reservation is open and has
        room; else an armed poller of the queue is reserved: worker ``prefer``'s (the reporting
        worker's) if it has one waiting, else the newest (``Notifier.take_armed``)."""
        if state.instance.status != InstanceStatus.RUNNING:
            return
        notifier = self.store.notifier
        claim = self.engine.claim
        timings = self.timings
        open_ = self._open
        shares: dict[str, Share] = {}  # this transition's share on each queue that still has room
        handed: set[str] = set()
        limited = self.store.limited_queues
        for token in list(changes.tokens.values()):
            if not _leasable(token, now):
                continue
            queue = token.queue
            under_limit = queue in limited
            if under_limit and not self.store.hand_off_admits(queue, now):
                continue
            share = shares.get(queue)
            if share is None:
                handoff = open_.get(queue)
                if handoff is None or not handoff.accepting():
                    open_.pop(queue, None)
                    waiter = notifier.take_armed(queue, self._orphaned, prefer)
                    if waiter is None or waiter.handoff is None:
                        continue
                    handoff = waiter.handoff
                    open_[queue] = handoff
                share = handoff.share()
                if changes.handoffs is None:
                    changes.handoffs = []
                changes.handoffs.append(share)
                shares[queue] = share
            handoff = share.handoff
            if under_limit and not self.store.hand_off_admits(queue, now, spend=True):
                continue  # (its first step always passes: nothing ran since the check above)
            timings.claimed(loaded, token, now)
            share.add(claim(loaded, state, token, handoff.worker_id, now, changes, handoff.lease_millis))
            self.handed_off += 1
            handed.add(queue)
            if not handoff.accepting():
                del shares[queue]
                if open_.get(queue) is handoff:
                    del open_[queue]
        for queue in handed:
            _unannounce(changes, queue)

    def chain(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        changes: Changes,
        now: int,
        owner: str,
        queues: frozenset[str],
        origin: str,
    ) -> Claimed | None:
        """Lease to ``owner``, inside a report's transition, the first step that report made READY
        and due on one of ``queues`` (the reporting worker's), as a claim would: the report's
        answer carries it (docs/semantics.md, "Chained steps"). None if there is none, or only
        under a limit (a queue's limit or a step's key: only a claim counts those). ``origin``:
        the report's task id, marked on the step (``chained_by`` finds it by it)."""
        if state.instance.status != InstanceStatus.RUNNING or not changes.ready_queues:
            return None
        limited = self.store.limited_queues
        skip = self.unrunnable.skip_for(owner)
        for token in changes.tokens.values():
            queue = token.queue
            if queue not in queues or queue in limited or not _leasable(token, now):
                continue
            if skip and (state.instance.workflow, state.instance.version, token.node_id) in skip:
                continue  # the reporting worker gave this node back: another worker's to run
            self.timings.claimed(loaded, token, now)
            claimed = self.engine.claim(loaded, state, token, owner, now, changes)
            token.chained_from = f"{origin} {claimed.task_id}"
            self.chained += 1
            _unannounce(changes, queue)
            return claimed
        return None

    def chained_by(
        self, loaded: LoadedDefinition, state: InstanceState, origin: str, owner: str
    ) -> Claimed | None:
        """The step the report ``origin`` (a task id) chained to ``owner``, if that claim still
        stands untouched: leased to ``owner`` under the same claim, no step of it reported. A
        report resent after its answer was lost is answered with it again, and changes nothing
        (docs/semantics.md, "Chained steps"); None otherwise (the resend is refused as before)."""
        for token in state.tokens.values():
            if (
                token.status == TokenStatus.RUNNING
                and token.lease_owner == owner
                and token.local_run_steps == 0
                and token.chained_from == f"{origin} {task_id_of(token)}"
            ):
                self.chained_again += 1
                return self.engine.held_claim(loaded, state, token)
        return None

    async def _claim_to_the_end(
        self, worker_id: str, queues: list[str], max_tasks: int, lease_millis: int | None
    ) -> list[Claimed]:
        """``claim`` for a poll, carried to its end if the poll is cancelled meanwhile (its call
        ended: the worker's deadline, its shutdown, a broken stream): a claim cancelled in the
        middle may still commit, leasing steps nobody will hear of until their leases expire, so
        it runs on, and what it leased is given back (``_orphaned``)."""
        claim = asyncio.ensure_future(self.claim(worker_id, queues, max_tasks, lease_millis=lease_millis))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            self._claims_left.add(claim)
            claim.add_done_callback(self._claim_left)
            raise

    def _claim_left(self, claim: asyncio.Future[list[Claimed]]) -> None:
        """A claim whose poll was cancelled has ended: give back what it leased."""
        self._claims_left.discard(claim)
        if claim.cancelled():
            return
        exc = claim.exception()
        if exc is not None:
            log.debug("claim of a cancelled poll failed: %s", exc)
        elif claimed := claim.result():
            log.info("%d step(s) claimed for a poll that had ended given back", len(claimed))
            self._orphaned(claimed)

    def _orphaned(self, claims: list[Claimed]) -> None:
        """Steps committed as handed to a poller that had gone, or claimed for one: give them
        back (``give_back_steps``)."""
        self.give_back_steps([(claimed.task_id, claimed.token.lease_owner) for claimed in claims])

    def give_back_steps(self, steps: list[tuple[str, str]]) -> None:
        """Give back, as a worker's release would (READY again, no attempt spent), the steps of
        ``steps`` (task id, lease owner) leased for an answer that will not reach its worker: a
        hand-off or a claim for a poll that had ended, a poll answer a worker's stream ended before
        it was sent (wiggle/_server/session.py). In a task of its own."""

        async def give_back() -> None:
            for task_id, owner in steps:
                try:
                    await self.give_back(task_id, owner)
                except Exception as exc:  # moved on meanwhile (cancelled...): nothing to give back
                    log.debug("step %s not given back: %s", task_id, exc)

        task = asyncio.ensure_future(give_back())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)
