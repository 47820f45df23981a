"""This node's copy of the queue limits (the ``queue_limits`` table, migration 0014;
docs/flow-control.md#queue-limits) and of its fast rates' blocks (rate_blocks.py), for the
PostgreSQL store's claims, hand-offs and next-ready reads (store.py).

The copy is the store's ``limited_queues`` (wiggle/_storage/base.py), kept up to date in place:
read again when it is older than ``LIMITS_TTL_SECONDS`` (a limit set through another server applies
here within a second), and changed at once by a limit set through this node.
"""

from __future__ import annotations

import time

from ..queue_limits import QueueLimit, check_queue_limit, next_admit_at
from .db import Conn, Database
from .limits import LIMITS_TTL_SECONDS
from .rate_blocks import RateBlocks, block_size
from .statements import Queries

__all__ = ["QueueLimitState"]


class QueueLimitState:
    """The queue limits as this node knows them (``limited``, the store's ``limited_queues``, changed
    in place), and the blocks of their fast rates (``rate_blocks``)."""

    def __init__(self, db: Database, queries: Queries, limited: dict[str, QueueLimit]) -> None:
        self.db = db
        self.queries = queries
        self.limited = limited
        self.rate_blocks = RateBlocks(db, queries)  # fast queue rates' moments (rate_blocks.py)
        self._read = float("-inf")  # when this node last read the table (time.monotonic())
        self._version = 0  # limits set through this node so far

    async def refresh(self) -> None:
        """Read the queue limits again if this node's copy is older than ``LIMITS_TTL_SECONDS``."""
        if time.monotonic() - self._read > LIMITS_TTL_SECONDS:
            version = self._version
            read_at = time.monotonic()
            rows = await self.db.fetch("queue_limits", self.queries.queue_limits)
            if version == self._version:  # else a limit set through this node came meanwhile: keep it
                self.limited.clear()
                self.limited.update(
                    (r[0], QueueLimit(queue=r[0], max_running=r[1], rate_max=r[2], rate_period_millis=r[3]))
                    for r in rows
                )
                self._read = read_at

    async def among(self, queues: list[str]) -> set[str]:
        """The queues among ``queues`` that have limits, as this node last read them (``refresh``)."""
        await self.refresh()
        limits = self.limited
        return {queue for queue in queues if queue in limits} if limits else set()

    async def put(self, limit: QueueLimit) -> None:
        """Set (or, with nothing limited, remove) ``limit`` in the table and in this node's copy."""
        check_queue_limit(limit)
        args: tuple[str | int, ...] = (limit.queue,)
        text = self.queries.delete_queue_limit
        if limit.limited:
            text = self.queries.put_queue_limit
            args = (limit.queue, limit.max_running, limit.rate_max, limit.rate_period_millis)

        async def body(conn: Conn) -> None:
            await conn.execute(text, args)

        await self.db.run("set_queue_limit", body)
        self.rate_blocks.forget(limit.queue)
        self._version += 1  # a read of the table started before this commit is stale
        if limit.limited:
            self.limited[limit.queue] = limit
        else:
            self.limited.pop(limit.queue, None)

    async def rows(self) -> list[tuple[QueueLimit, float]]:
        """Every queue limit with its rate's state (``tat``), read now."""
        rows = await self.db.fetch("queue_limits", self.queries.queue_limits)
        return [
            (QueueLimit(queue=r[0], max_running=r[1], rate_max=r[2], rate_period_millis=r[3]), float(r[4]))
            for r in rows
        ]

    async def rate_tats(self, keys: list[str]) -> dict[str, float]:
        """The per-key rates' states of ``keys`` (migration 0017)."""
        rows = await self.db.fetch("rate_tats", self.queries.rate_tats, (sorted(keys),)) if keys else []
        return {key: float(tat) for key, tat in rows}

    def hand_off_admits(self, queue: str, now: int, spend: bool = False) -> bool:
        """Store.hand_off_admits: while a fast rate's blocks have a moment due (rate_blocks.py)."""
        limit = self.limited.get(queue)
        if limit is None or not block_size(limit):
            return False
        if not self.rate_blocks.due(queue, limit, now):
            self.rate_blocks.fill_soon(limit, now)  # for the next ones
            return False
        return not spend or self.rate_blocks.spend(queue, 1, now) == 1  # a moment of this node's blocks

    async def next_under_limits(
        self, rows: list[tuple[str, int, float | None]], limited: set[str], now: int
    ) -> list[tuple[str, int, float | None]]:
        """``rows`` (queue, earliest READY, ms since the moment of its key's rate or None) with the
        limited queues' waits: a full queue has nothing to claim until one of its steps ends
        (which wakes it), a rate-limited one not before its rate admits a claim. A step its
        queue's rate held back (the rate's first moment after the step was due is later) has the
        time since that moment as its own (the latest of its rates' moments counts)."""
        state = {limit.queue: (limit, tat) for limit, tat in await self.rows() if limit.queue in limited}
        held = dict(await self.db.fetch("next_ready_at", self.queries.queue_held, (sorted(state),)))
        out: list[tuple[str, int, float | None]] = []
        for queue, at, since in rows:
            known = state.get(queue)
            if known is None:
                out.append((queue, at, since))
                continue
            limit, tat = known
            if limit.max_running and int(held.get(queue, 0)) >= limit.max_running:
                continue
            moment = next_admit_at(limit, tat, at)
            if moment > at:  # the queue's rate held the step back
                since = float(now - moment) if since is None else min(since, float(now - moment))
            out.append((queue, moment, since))
        return out
