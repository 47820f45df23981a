"""Limits in a PostgreSQL claim: which of the rows a claim statement found it may take.

The claim statement (statements.py) already skips tokens whose concurrency-limit key was full in
its snapshot. That snapshot may be stale by the time the claim commits, and another server may be
claiming a token of the same key or queue at the same moment; so when the rows include limited
tokens, or the claim serves limited queues (wiggle/_storage/queue_limits.py), ``Admission``
decides under locks held until the claim's transaction ends:

- each limit key of the rows gets a transaction-level advisory lock, in hash order;
- each limited queue of the rows gets its ``queue_limits`` row locked (FOR UPDATE), in queue order;
- then the RUNNING counts of those keys and queues are read, by statements that start after the
  locks were granted (READ COMMITTED: they see every claim committed before, on any server).

Rows are then admitted in claim order while their key has room, their queue has room and the
queue's rate admits one more; the others stay READY. ``settle`` marks the admitted tokens of
queues with a max_running (``queue_held``) and writes the rates' new state. A claim on queues
without limits, of tokens without keys, does none of this.
"""

from __future__ import annotations

from typing import Any

from ..._engine.state import Token
from ..queue_limits import QueueLimit, admit
from .db import Conn
from .statements import Queries

__all__ = ["Admission", "LIMITS_TTL_SECONDS"]

#: How long a node uses the queue limits it read before reading them again.
LIMITS_TTL_SECONDS = 1.0


class Admission:
    """The admission of one claim's rows (see the module docstring)."""

    def __init__(self, rows: list[Any], tokens: list[Token], queues: set[str]) -> None:
        self.rows = rows
        self.tokens = tokens
        self.queues = queues  # the limited queues among the rows' (as this node last read them)
        self.tats: dict[str, float] = {}  # rate state to write back, by queue
        self.held_queues: set[str] = set()  # queues with a max_running: mark their tokens

    async def run(self, conn: Conn, pipeline: Any, q: Queries, lock_class: int, now: int) -> None:
        """Lock, count, and keep the rows that may be taken (``rows``/``tokens`` after it)."""
        keys = sorted({token.limit_key for token in self.tokens if token.limit_key})
        if keys:
            await conn.execute(q.lock_limit_keys, (lock_class, keys))
            key_cur = await conn.execute(q.limit_held, (keys,))
        queues = sorted(self.queues)
        if queues:
            limit_cur = await conn.execute(q.lock_queue_limits, (queues,))
            queue_cur = await conn.execute(q.queue_held, (queues,))
        await pipeline.sync()
        key_held: dict[str, int] = {}
        limits: dict[str, QueueLimit] = {}
        queue_held: dict[str, int] = {}
        if keys:
            key_held = {key: int(n) for key, n in await key_cur.fetchall()}
        if queues:
            for queue, max_running, rate_max, period, tat in await limit_cur.fetchall():
                limits[queue] = QueueLimit(
                    queue=queue, max_running=max_running, rate_max=rate_max, rate_period_millis=period
                )
                self.tats[queue] = float(tat)
                if max_running:
                    self.held_queues.add(queue)
            queue_held = {queue: int(n) for queue, n in await queue_cur.fetchall()}
        self._keep(key_held, limits, queue_held, now)

    def _keep(
        self, key_held: dict[str, int], limits: dict[str, QueueLimit], queue_held: dict[str, int], now: int
    ) -> None:
        rows: list[Any] = []
        tokens: list[Token] = []
        for row, token in zip(self.rows, self.tokens, strict=True):
            key, queue = token.limit_key, token.queue
            if key and key_held.get(key, 0) >= token.limit_max:
                continue
            limit = limits.get(queue)
            if limit is not None:
                if limit.max_running and queue_held.get(queue, 0) >= limit.max_running:
                    continue
                tat = admit(limit, self.tats[queue], now)
                if tat is None:
                    continue
                self.tats[queue] = tat
                queue_held[queue] = queue_held.get(queue, 0) + 1
            if key:
                key_held[key] = key_held.get(key, 0) + 1
            rows.append(row)
            tokens.append(token)
        self.rows, self.tokens = rows, tokens
        self.tats = {queue: tat for queue, tat in self.tats.items() if limits[queue].rate_max}

    async def settle(self, conn: Conn, q: Queries) -> None:
        """After the claim's transitions: mark the tokens of queues with a max_running, and write
        the rates' state (in the claim's transaction)."""
        for token in self.tokens:
            if token.queue in self.held_queues:
                token.queue_held = True
        if self.tats:
            names = sorted(self.tats)
            await conn.execute(q.set_tats, (names, [self.tats[n] for n in names]))
