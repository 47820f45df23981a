"""Time skipping: when every live instance waits on time, jump the virtual clock to the next due moment.

The live instances are the RUNNING and SCHEDULED instances of the workflows the environment knows (its
workflows, any it started or waited on, and every schedule's): a database shared with other tests or servers may
hold instances nobody will ever move, which must not stop the skipping. An instance waits on
time when none of its tokens can move now: no READY token is due, no token
is running on a live worker, and the clock duty has nothing due. Then the earliest moment
something becomes due (a sleep's end, a retry's backoff, a user-task deadline, the lease of a
step whose worker is gone, an instance's time limit, or whatever else the store's clock duty
reports) is where the clock
jumps; the clock duties run at once and every waiter is woken, so the next step starts without
a real wait. A token the clock duty should act on now (due but not yet fired) counts as busy:
the jump never passes a due moment unprocessed. A signal wait's deadline is an AWAITING token's
``available_at``, like a user task's. Schedule ticks are jump targets too, but only on the way
to something bounded (a live instance's due moment, or the ``until`` of ``skip``): with nothing
else due, time does not run on from tick to tick. See docs/semantics.md#time-in-tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from .._clock import VirtualClock
from .._engine.state import InstanceStatus, Token, TokenStatus
from .._server.instances import Instances
from .._storage.base import InstanceQuery, InstanceView
from .._storage.queue_limits import rate_admit, rate_next_at

__all__ = ["TimeSkipper", "Waiting"]

PAGE = 500


class Waiting:
    """What the live instances wait on: busy (something can move now) or the next due moment."""

    __slots__ = ("busy", "next_due", "reasons")

    def __init__(self) -> None:
        self.busy = False
        self.next_due: int | None = None
        self.reasons: list[str] = []  # "instance wi-...: token at 'approve' AWAITING (no deadline)"

    def due(self, at: int) -> None:
        if self.next_due is None or at < self.next_due:
            self.next_due = at


class Limits:
    """What holds due READY steps back (docs/flow-control.md): queues whose rate admits no claim
    before a moment, queues at their max_running, limit keys at their max (from the views), and
    the rate state of the steps' rate keys (the store's)."""

    __slots__ = ("rate_until", "full_queues", "held_keys", "rate_tats")

    def __init__(self) -> None:
        self.rate_until: dict[str, int] = {}
        self.full_queues: set[str] = set()
        self.held_keys: dict[str, int] = {}
        self.rate_tats: dict[str, float] = {}

    def holds_back(self, token: Token, now: int) -> tuple[bool, int | None]:
        """(held back, until when: None while it waits on running steps) for a due READY token."""
        until = self.rate_until.get(token.queue, 0)
        if until > now:
            return True, until
        if token.queue in self.full_queues:
            return True, None
        if token.limit_key and self.held_keys.get(token.limit_key, 0) >= token.limit_max:
            return True, None
        if token.rate_key:  # a step's per-key rate: its key's next moment
            tat = self.rate_tats.get(token.rate_key, 0.0)
            if rate_admit(token.rate_max, token.rate_period_millis, tat, now) is None:
                return True, rate_next_at(token.rate_max, token.rate_period_millis, tat, now)
        return False, None


NO_LIMITS = Limits()


def _token_due(
    token: Token, live_workers: Callable[[str], bool], now: int = 0, limits: Limits = NO_LIMITS
) -> tuple[bool, int | None]:
    """(busy now, due moment) of one token."""
    status = token.status
    if status == TokenStatus.READY:
        if token.available_at <= now:
            held, until = limits.holds_back(token, now)
            if held:  # a limit's wait: the rate's next moment, or the end of a running step
                return False, until
        return False, token.available_at  # due now (a worker will claim it) or after a backoff
    if status == TokenStatus.RUNNING:
        owner = token.local_run_owner or token.lease_owner
        if live_workers(owner) or live_workers(token.lease_owner):
            return True, None
        return False, token.lease_expires_at  # its worker is gone: the lease expiry is next
    if status in (TokenStatus.WAITING, TokenStatus.AWAITING) and token.available_at > 0:
        return False, token.available_at  # a sleep's end, a user-task deadline
    return False, None  # JOINED, or a user task without a deadline (waits on a person)


def _admission_due(views: list[InstanceView]) -> bool:
    """True if an instance waits for a slot of a workflow's concurrency key that has one free
    (docs/flow-control.md#workflow-concurrency): its admission is under way. One waiting while
    the key is full waits on the live ones, never on time."""
    live: dict[tuple[str, str], int] = {}
    for view in views:
        inst = view.instance
        if inst.conc_key and inst.status == InstanceStatus.RUNNING:
            live[(inst.workflow, inst.conc_key)] = live.get((inst.workflow, inst.conc_key), 0) + 1
    return any(
        v.instance.status == InstanceStatus.SCHEDULED
        and v.instance.conc_since
        and live.get((v.instance.workflow, v.instance.conc_key), 0) < v.instance.conc_max
        for v in views
    )


class TimeSkipper:
    """Jumps ``clock`` over idle time of the instances ``instances`` keeps."""

    def __init__(
        self, instances: Instances, clock: VirtualClock, live_workers: Callable[[str], bool]
    ) -> None:
        self.instances = instances
        self.clock = clock
        self.live_workers = live_workers
        self.jumps = 0  # how often the clock jumped (tests and reports)
        self.workflows: set[str] = set()  # the names whose instances count as live
        self._lock = asyncio.Lock()  # concurrent waits (gather) look and jump one at a time

    async def live(self) -> list[InstanceView]:
        """Every RUNNING or SCHEDULED instance of ``workflows``, with its active tokens (a
        SCHEDULED one waits on its start time: its first token is WAITING until then)."""
        out: list[InstanceView] = []
        for name in sorted(self.workflows):
            for status in (InstanceStatus.RUNNING, InstanceStatus.SCHEDULED):
                token = ""
                while True:
                    page, token = await self.instances.list_instances(
                        InstanceQuery(workflow=name, status=status, page_size=PAGE, page_token=token)
                    )
                    out.extend(page)
                    if not token:
                        break
        return out

    async def limits(self, views: list[InstanceView]) -> Limits:
        """What the limits hold back now (the store's queue stats, the views' running keys)."""
        limits = Limits()
        now = self.clock.now()
        for stat in await self.instances.store.queue_stats(now):
            if stat.rate_limited_until > now:
                limits.rate_until[stat.queue] = stat.rate_limited_until
            if stat.max_running and stat.running >= stat.max_running:
                limits.full_queues.add(stat.queue)
        rate_keys: set[str] = set()
        for view in views:
            for token in view.tokens:
                if token.limit_key and token.status == TokenStatus.RUNNING:
                    limits.held_keys[token.limit_key] = limits.held_keys.get(token.limit_key, 0) + 1
                if token.rate_key and token.status == TokenStatus.READY:
                    rate_keys.add(token.rate_key)
        if rate_keys:
            limits.rate_tats = await self.instances.store.rate_tats(sorted(rate_keys))
        return limits

    def waiting(self, views: Iterable[InstanceView], limits: Limits = NO_LIMITS) -> Waiting:
        """What ``views`` wait on now (``limits``: what holds their due steps back)."""
        now = self.clock.now()
        out = Waiting()
        views = list(views)
        if _admission_due(views):  # a slot is free: the admission moves it, not time
            out.busy = True
            return out
        for view in views:
            deadline = view.instance.deadline_at  # the workflow's time limit is a due moment too
            if deadline:
                if deadline <= now:
                    out.busy = True
                    return out
                out.due(deadline)
            for token in view.tokens:
                busy, due = _token_due(token, self.live_workers, now, limits)
                if busy or (due is not None and due <= now):
                    out.busy = True
                    return out
                if due is not None:
                    out.due(due)
                elif token.status == TokenStatus.AWAITING:
                    out.reasons.append(
                        f"instance {view.instance.id} waits on user task {token.node_id!r} (no deadline)"
                    )
        return out

    async def tick(self) -> int:
        """Run the clock duties at the clock's time and wake every waiter; the actions taken."""
        acted = await self.instances.run_clock_duties(self.clock.now())
        self.instances.store.notifier.wake_all()  # pollers sleeping until a backoff's end re-look
        return acted

    async def busy(self) -> bool:
        """True while some live instance can move now (a step runs, or something is due)."""
        views = await self.live()
        return self.waiting(views, await self.limits(views)).busy

    async def skip(
        self, until: int | None = None, hold: Callable[[list[InstanceView]], Awaitable[bool]] | None = None
    ) -> bool:
        """Jump to the next due moment if every live instance waits on time; True if it jumped.

        With ``until`` (ms), never past it, and to it when nothing comes due before. ``hold``
        sees the live instances the decision is made on and may keep the clock still (a wait
        whose condition already holds there must not jump past it); it is awaited under the lock,
        so nothing of ours moves between its answer and the jump.
        """
        async with self._lock:
            return await self._skip(until, hold)

    async def _skip(
        self, until: int | None, hold: Callable[[list[InstanceView]], Awaitable[bool]] | None
    ) -> bool:
        ticks = await self.instances.schedules.next_due_at()
        if ticks is not None:  # a schedule made through the client directly: its instances are ours
            self.workflows.update(sc.workflow for sc in await self.instances.schedules.list())
        views = await self.live()
        if hold is not None and await hold(views):
            return False
        waiting = self.waiting(views, await self.limits(views))
        if waiting.busy:
            return False
        now = self.clock.now()
        due = waiting.next_due
        if until is not None and (due is None or due > until):
            due = until if until > now else None
        if ticks is not None and ticks <= now:
            await self.tick()  # a tick due now: fire it; the caller looks again (no jump)
            return False
        if ticks is not None and due is not None and ticks < due:
            due = ticks
        # Other clock duties the store knows of. One due now is not ours (ours were checked
        # above): let the clock duty act on it, without waiting for it. A later one may come
        # first (an extra jump is harmless: nothing of ours is due before ``due``).
        store_due = await self.instances.next_due_at()
        if store_due is not None and store_due <= now:
            await self.tick()
        elif store_due is not None and (due is None or store_due < due):
            due = store_due
        if until is not None and due is not None and due > until:
            due = until if until > now else None  # never past ``until``
        if due is None:
            return False
        self.clock.advance_to(due)
        self.jumps += 1
        await self.tick()
        return True
