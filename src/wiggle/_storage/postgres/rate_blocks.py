"""Blocks of a fast queue rate's moments, taken by one server and spent by its claims
(docs/flow-control.md#queue-limits).

A queue's rate is one row: ``queue_limits.tat`` (migration 0014), the moment its next claim may
happen (wiggle/_storage/queue_limits.py ``rate_admit``). A claim that reads and writes that row in
its own transaction holds the row's lock until it commits, so the claims of the queue commit one
after another, each after the previous one's WAL flush, even when the rate is far from binding
(bench/README.md, "Round ten"). A rate of ``BLOCK_MIN / LATE_SHARE`` claims a period or more
(with no ``max_running``, whose RUNNING count must be read under the lock) is taken in blocks
instead: one short statement of its own advances the row by ``k`` consecutive moments of the
rate, from its next one (which must be due, as for a claim), and this server's claims spend them
without touching the row. A claim reserves its moments before it reads its rows (``reserve``: up to
as many as it asks steps) and gives back what its rows did not use (``give_back``).

A moment is spent no earlier than a claim at it could be (the rate's tolerance) and no later than
``LATE_SHARE`` of the period after it; one not spent by then is lost (the rate then admits less,
never more). The moments of all servers are the rate's own, spaced one interval apart, so any
window of the period holds at most ``rate_max`` claims plus those whose moments are up to that
late: at most ``rate_max * (1 + LATE_SHARE) + 1``, 5% over the rate at worst (a rate of fewer
than 160 claims a period is exact). A block holds at most ``LATE_SHARE`` of the rate (and
``BLOCK_MAX`` moments), sized by the server's own demand (``RateBlocks``), so what a server can
lose at once is small too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..queue_limits import QueueLimit, _tolerance
from .db import Database
from .statements import Queries

log = logging.getLogger("wiggle.server")

__all__ = ["BLOCK_MAX", "BLOCK_MIN", "LATE_SHARE", "RateBlocks", "Reservation", "block_size"]

#: How late (a share of the rate's period) a moment of a block may still be spent. A smaller share
#: keeps a fast rate closer to exact, but a block's life is about this long, and one taken every
#: few claims costs what a write of the row per claim did (bench/README.md, "Round ten").
LATE_SHARE = 0.05
#: The fewest moments a block holds: a slower rate is taken claim by claim, under the row's lock.
BLOCK_MIN = 8
#: The most moments a block holds.
BLOCK_MAX = 4096


def block_size(limit: QueueLimit) -> int:
    """The most moments a block of ``limit``'s rate holds; 0 if the rate is taken claim by claim."""
    if not limit.rate_max or limit.max_running:
        return 0
    size = int(limit.rate_max * LATE_SHARE)  # the moments of LATE_SHARE of the period
    return min(size, BLOCK_MAX) if size >= BLOCK_MIN else 0


@dataclass
class Block:
    """Moments ``first + i * interval`` (ms) for ``i`` in ``[spent, count)`` of ``limit``'s rate."""

    limit: QueueLimit
    first: float
    count: int
    spent: int = 0
    interval: float = field(init=False)
    early: float = field(init=False)
    late: float = field(init=False)

    def __post_init__(self) -> None:
        self.interval = self.limit.rate_period_millis / self.limit.rate_max
        self.early = _tolerance(self.interval) + 1e-6  # as queue_limits.rate_admit
        self.late = self.limit.rate_period_millis * LATE_SHARE

    def _skip_late(self, now: int) -> None:
        """Lose the moments more than ``late`` behind ``now``."""
        behind = math.ceil((now - self.late - self.first) / self.interval)  # moments < now - late
        if behind > self.spent:
            self.spent = min(behind, self.count)

    def due(self, now: int) -> int:
        """How many moments may be spent at ``now``."""
        self._skip_late(now)
        upto = math.floor((now + self.early - self.first) / self.interval) + 1  # moments <= now + early
        return max(0, min(upto, self.count) - self.spent)

    def spend(self, want: int, now: int) -> int:
        """Spend up to ``want`` moments at ``now``; how many were."""
        took = min(want, self.due(now))
        self.spent += took
        return took

    def done(self, now: int) -> bool:
        """Nothing left to spend, now or later."""
        self._skip_late(now)
        return self.spent >= self.count


@dataclass
class Reservation:
    """The moments of ``limit``'s rate a claim spent before reading its rows (``RateBlocks.reserve``):
    ``count`` in all, as (block, first, end) runs of each block's moments ``[first, end)``."""

    limit: QueueLimit
    count: int = 0
    pieces: list[tuple[Block, int, int]] = field(default_factory=list)


class RateBlocks:
    """This server's blocks of the fast rates of its queues (see the module docstring).

    A block's size follows the server's own demand: what it spent per millisecond since its last
    block, for twice the time a moment may be late (so a block lasts about that long), from
    ``BLOCK_MIN`` up to ``block_size`` (5% of the rate). A moment a server does not spend is lost
    capacity of the rate; sized so, a server's blocks hold about twice what it spends, and a
    server that claims little takes small blocks. A block taken for claims waiting for moments
    holds at least what they ask together (``reserve``): a first block of ``BLOCK_MIN`` cut the
    first claims of a drain short, and claims that then found their blocks spent by the ones
    beside them took nothing (bench/README.md, "Round fourteen")."""

    def __init__(self, db: Database, queries: Queries) -> None:
        self.db = db
        self.queries = queries
        self.blocks: dict[str, list[Block]] = {}
        self._spent: dict[str, int] = {}  # queue -> moments spent since its last block was taken
        self._since: dict[str, int] = {}  # queue -> when its last block was taken (ms)
        self._taking: dict[str, asyncio.Future[None]] = {}
        self._asking: dict[str, int] = {}  # queue -> moments the claims in ``reserve`` ask for
        # queue -> when to try again after its rate gave no block (its next moment was not due)
        self._retry_at: dict[str, float] = {}
        self._background: set[asyncio.Future[None]] = set()  # fill_soon's
        self.taken = 0  # blocks taken so far (tests, bench)

    def forget(self, queue: str) -> None:
        """Drop the blocks of ``queue`` (its limits changed through this server)."""
        self.blocks.pop(queue, None)
        self._retry_at.pop(queue, None)
        self._spent.pop(queue, None)
        self._since.pop(queue, None)

    def due(self, queue: str, limit: QueueLimit, now: int) -> int:
        """How many moments of ``queue``'s blocks for ``limit`` may be spent at ``now``."""
        blocks = [b for b in self.blocks.get(queue, ()) if b.limit == limit and not b.done(now)]
        if blocks:
            self.blocks[queue] = blocks
        else:
            self.blocks.pop(queue, None)
        return sum(block.due(now) for block in blocks)

    def reserve_now(self, limit: QueueLimit, want: int, now: int) -> Reservation:
        """Spend up to ``want`` moments of ``limit``'s blocks at ``now``, recording which."""
        reservation = Reservation(limit)
        if self.due(limit.queue, limit, now):
            reservation.count = self._spend(limit.queue, want, now, reservation.pieces)
        return reservation

    def spend(self, queue: str, want: int, now: int) -> int:
        """Spend up to ``want`` moments of ``queue`` at ``now``, oldest block first; how many were."""
        return self._spend(queue, want, now, None)

    def _spend(self, queue: str, want: int, now: int, pieces: list[tuple[Block, int, int]] | None) -> int:
        """``spend``, adding to ``pieces`` (if given) the run of each block's moments it took."""
        took = 0
        for block in self.blocks.get(queue, ()):
            n = block.spend(want - took, now)
            if n and pieces is not None:
                pieces.append((block, block.spent - n, block.spent))
            took += n
            if took == want:
                break
        self._spent[queue] = self._spent.get(queue, 0) + took
        return took

    async def reserve(
        self, limits: list[QueueLimit], want: int, clock: Callable[[], int]
    ) -> dict[str, Reservation]:
        """Moments for a claim of up to ``want`` steps, spent before the claim reads its rows:
        per queue of ``limits``, which (none to be had: the claim then takes that rate under its
        row's lock). Blocks are taken first where the claim would be short (``fill``),
        sized for every claim waiting here (``_asking``), and taken once more if the claims
        ahead spent the block this claim waited for. What the claim does not use goes back
        (``give_back``). ``clock``: the server's clock, read after each wait."""
        for limit in limits:
            self._asking[limit.queue] = self._asking.get(limit.queue, 0) + want
        try:
            for _ in range(3):
                await self.fill(limits, want, clock())
                if not self._short(limits, want, clock()):
                    break
            now = clock()
            return {limit.queue: self.reserve_now(limit, want, now) for limit in limits}
        finally:
            for limit in limits:
                self._asking[limit.queue] -= want
                if not self._asking[limit.queue]:
                    del self._asking[limit.queue]

    def give_back(self, reservation: Reservation, count: int) -> None:
        """Return ``count`` of the moments ``reservation`` holds, which its claim did not use: its
        newest ones first, each only while no claim has spent a later moment of its block since
        (they are then the block's next ones to spend, and each moment a claim uses stays the one
        it reserved). Others are lost (the rate admits less, never more); returned ones may be
        spent again until they are late (``Block.due`` loses them then)."""
        for block, first, end in reversed(reservation.pieces):
            if count <= 0 or block.spent != end:
                break
            back = min(count, end - first)
            block.spent -= back
            count -= back
            queue = reservation.limit.queue
            self._spent[queue] = max(0, self._spent.get(queue, 0) - back)

    def next_size(self, limit: QueueLimit, now: int, want: int = 0) -> int:
        """The size of ``limit``'s queue's next block: what this server spent per millisecond
        since its last block, for twice the lateness a moment is allowed (see the class docstring),
        and at least ``want``, the claim asking for it."""
        late = limit.rate_period_millis * LATE_SHARE
        elapsed = max(1, now - self._since.get(limit.queue, now))
        size = math.ceil(2 * late * self._spent.get(limit.queue, 0) / elapsed)
        return min(block_size(limit), max(BLOCK_MIN, size, want))

    def wanted(self, limits: list[QueueLimit], want: int, now: int) -> list[QueueLimit]:
        """The rates of ``limits`` to take a block of before a claim of up to ``want`` at ``now``:
        fewer moments due than ``want`` and than half their next block (``_short``), and none
        being taken."""
        return [limit for limit in self._short(limits, want, now) if limit.queue not in self._taking]

    def _short(self, limits: list[QueueLimit], want: int, now: int) -> list[QueueLimit]:
        """The rates of ``limits`` with fewer moments due than ``want`` and than half their next
        block, and no refusal in the last ``LATE_SHARE`` of the period."""
        return [
            limit
            for limit in limits
            if self.due(limit.queue, limit, now) < min(want, self.next_size(limit, now, want) // 2 + 1)
            and self._retry_at.get(limit.queue, 0) <= now
        ]

    def took(self, limit: QueueLimit, first: float | None, size: int, now: int) -> None:
        """Record a block of ``size`` moments from ``first`` (None: the rate gave none)."""
        if first is None:
            self._retry_at[limit.queue] = now + limit.rate_period_millis * LATE_SHARE
            return
        self.blocks.setdefault(limit.queue, []).append(Block(limit, first, size))
        self._retry_at.pop(limit.queue, None)
        self._spent[limit.queue] = 0
        self._since[limit.queue] = now
        self.taken += 1

    def fill_soon(self, limit: QueueLimit, now: int) -> None:
        """Take a block of ``limit``'s rate in the background, if ``wanted`` says so: for the
        hand-off, which spends moments inside another commit's transition and cannot wait for one."""
        if not self.wanted([limit], 1, now):
            return
        task = asyncio.ensure_future(self._fill_quietly(limit, now))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _fill_quietly(self, limit: QueueLimit, now: int) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await self.fill([limit], 1, now)
            except Exception as exc:  # the claims take the rate under the lock meanwhile
                log.debug("rate block for queue %s not taken: %s", limit.queue, exc)

    async def fill(self, limits: list[QueueLimit], want: int, now: int) -> None:
        """Take a block of each rate of ``limits`` that ``wanted`` names, in one statement (a rate
        whose next moment is not due, or whose row no longer says this rate, gives none: its claims
        take it under the row's lock a while), or wait for the one being taken."""
        short = self.wanted(limits, want, now)
        waits = [self._taking[limit.queue] for limit in limits if limit.queue in self._taking]
        if short:
            taking = asyncio.get_running_loop().create_future()
            for limit in short:
                self._taking[limit.queue] = taking
            try:
                await self._take(short, want, now)
            finally:
                for limit in short:
                    del self._taking[limit.queue]
                taking.set_result(None)
        for wait in waits:
            await asyncio.shield(wait)

    async def _take(self, limits: list[QueueLimit], want: int, now: int) -> None:
        # at least what the claims waiting for this rate ask and its blocks do not hold
        sizes = [
            self.next_size(
                limit, now, max(want, self._asking.get(limit.queue, 0) - self.due(limit.queue, limit, now))
            )
            for limit in limits
        ]
        params = (
            now,
            [limit.queue for limit in limits],
            sizes,
            [limit.rate_max for limit in limits],
            [limit.rate_period_millis for limit in limits],
            now,
            now,
        )
        rows = dict(await self.db.fetch("rate_block", self.queries.take_rate_block, params))
        for limit, size in zip(limits, sizes, strict=True):
            first = rows.get(limit.queue)
            self.took(limit, None if first is None else float(first), size, now)
