"""Limits in a PostgreSQL claim: which of the rows a claim statement found it may take.

The claim statement (statements.py) already skips tokens whose concurrency-limit key was full,
or whose rate key had no room, in its snapshot. That snapshot may be stale by the time the claim
commits, and another server may be claiming a token of the same key or queue at the same moment;
so when the rows include limited tokens, or the claim serves limited queues
(wiggle/_storage/queue_limits.py), ``Admission`` decides under locks held until the claim's
transaction ends:

- each concurrency-limit key and rate key of the rows gets a transaction-level advisory lock, in
  hash order;
- each limited queue of the rows gets its ``queue_limits`` row locked (FOR UPDATE), in queue order;
- then the RUNNING counts of those keys and queues, and the rate keys' states (``rate_keys``,
  migration 0017), are read by statements that start after the locks were granted (READ
  COMMITTED: they see every claim committed before, on any server), with the database's clock
  (the rates' clock, unless a test kit's virtual clock runs the store).

A claim whose only limits to count under a lock are concurrency-limit keys (no rate key among
its rows, and its queues' rates spent from this server's blocks or absent) takes **one round
trip** for all that instead: it admits on the RUNNING counts its candidate read returned (each
row's last column, the same snapshot the read's limit filter used), and its write statement
calls ``take_key_room`` (migration 0020) first, as its query, before its data-modifying CTEs write
anything (writes.py ``ChangeWriter.statement``). The function takes the keys' advisory locks and
checks their room in a statement whose snapshot follows the locks (a PL/pgSQL function is
VOLATILE: each of its statements takes a new snapshot), so the count sees every claim committed
before the locks, and none of this claim's own writes. If another claim of one of the keys
committed in between and left less room than this claim took, the call raises SQLSTATE
``KEY_ROOM_TAKEN``, the transaction rolls back before COMMIT, and the claim runs again the way
above (its counts read under the locks). Either way no key ever has more attempts RUNNING than
its limit.

Rows are then admitted in the fair order (docs/flow-control.md#fair-claims-across-keys): each
pick takes, of the rows left, the first in claim-rank order among those whose concurrency-limit
key has the fewest attempts running (counting the ones this claim took; a row without a key
counts as none), if its key has room, its queue has room and the rates of its queue and its key
admit one more; the others stay READY. ``settle`` marks the admitted tokens of queues with a
max_running (``queue_held``) and writes the rates' new state. A claim on queues without limits,
of tokens without keys, does none of this.
"""

from __future__ import annotations

import heapq
from typing import Any

from ..._engine.state import Token
from ..queue_limits import QueueLimit, admit, rate_admit
from .db import Conn
from .statements import Queries

__all__ = ["Admission", "KEY_ROOM_TAKEN", "LIMITS_TTL_SECONDS"]

#: How long a node uses the queue limits it read before reading them again.
LIMITS_TTL_SECONDS = 1.0
#: SQLSTATE of ``take_key_room`` (migration 0020): a key had less room than the claim took.
KEY_ROOM_TAKEN = "WG002"


class Admission:
    """The admission of one claim's rows (see the module docstring)."""

    def __init__(
        self,
        rows: list[Any],
        tokens: list[Token],
        queues: set[str],
        want: int,
        budgets: dict[str, int] | None = None,
    ) -> None:
        self.rows = rows
        self.tokens = tokens
        self.queues = queues  # the limited queues among the rows' (as this node last read them)
        self.want = want  # the most rows to admit
        self.tats: dict[str, float] = {}  # rate state to write back, by queue
        self.rate_tats: dict[str, float] = {}  # per-key rate state to write back, by rate key
        self.held_queues: set[str] = set()  # queues with a max_running: mark their tokens
        # per queue whose rate this server spends from its blocks (rate_blocks.py): the moments
        # left to spend; its claims count down here, and read nothing of the rate's row
        self.budgets = budgets if budgets is not None else {}
        # admitted on the read's counts (keep_on_read_counts): settle confirms them under the
        # keys' locks, with this lock class
        self._confirm_class: int | None = None

    async def run(
        self, conn: Conn, pipeline: Any, q: Queries, lock_class: int, now: int, rate_now: int | None
    ) -> None:
        """Lock, count, and keep the rows that may be taken (``rows``/``tokens`` after it).
        ``rate_now``: the clock of per-key rates (None: the database's)."""
        keys = sorted({token.limit_key for token in self.tokens if token.limit_key})
        rate_keys = sorted({token.rate_key for token in self.tokens if token.rate_key})
        if keys or rate_keys:
            await conn.execute(q.lock_limit_keys, (lock_class, sorted({*keys, *rate_keys})))
        if keys:
            key_cur = await conn.execute(q.limit_held, (keys,))
        if rate_keys:
            rate_cur = await conn.execute(q.rate_tats, (rate_keys,))
            if rate_now is None:
                now_cur = await conn.execute(q.db_now)
        queues = sorted(self.queues)
        if queues:
            limit_cur = await conn.execute(q.lock_queue_limits, (queues,))
            queue_cur = await conn.execute(q.queue_held, (queues,))
        if keys or rate_keys or queues:
            await pipeline.sync()
        counts = Counts(now)  # (only budgets: nothing to read)
        if keys:
            counts.key_held = {key: int(n) for key, n in await key_cur.fetchall()}
        if rate_keys:
            counts.rate_tats = {key: float(tat) for key, tat in await rate_cur.fetchall()}
            counts.rate_now = int((await now_cur.fetchall())[0][0]) if rate_now is None else rate_now
        if queues:
            for queue, max_running, rate_max, period, tat in await limit_cur.fetchall():
                counts.limits[queue] = QueueLimit(
                    queue=queue, max_running=max_running, rate_max=rate_max, rate_period_millis=period
                )
                self.tats[queue] = float(tat)
                if max_running:
                    self.held_queues.add(queue)
            counts.queue_held = {queue: int(n) for queue, n in await queue_cur.fetchall()}
        self._keep(counts)

    @staticmethod
    def keys_only(tokens: list[Token], locked: set[str]) -> bool:
        """Whether a claim of ``tokens`` may be admitted in one round trip (module docstring): no
        rate key among them, and no queue of theirs among ``locked`` (limited queues whose row
        must be read under its lock)."""
        return not any(token.rate_key or token.queue in locked for token in tokens)

    def keep_on_read_counts(self, now: int, lock_class: int) -> None:
        """Admit in the fair order on the RUNNING counts the candidate read returned, taking no
        lock; ``settle`` confirms them under the keys' locks (``lock_class``), in the writes'
        round trip."""
        counts = Counts(now)
        for row, token in zip(self.rows, self.tokens, strict=True):
            if token.limit_key:
                counts.key_held[token.limit_key] = int(row[-1])
        self._keep(counts)
        self._confirm_class = lock_class

    def _confirmation(self, q: Queries, lock_class: int) -> tuple[str, list[Any]] | None:
        """The locks of the admitted rows' keys and the check that each still has room for what
        this claim took (``take_key_room``, one SELECT: SQLSTATE ``KEY_ROOM_TAKEN`` if not), to
        run first in the claim's write statement (writes.py ``ChangeWriter.statement``); None if
        no admitted row has a key. A key's room is its least limit among the rows taken."""
        taken: dict[str, int] = {}
        limit: dict[str, int] = {}
        for token in self.tokens:
            key = token.limit_key
            if key:
                taken[key] = taken.get(key, 0) + 1
                limit[key] = min(limit.get(key, token.limit_max), token.limit_max)
        if not taken:
            return None
        keys = sorted(taken)
        return q.take_key_room, [lock_class, keys, [taken[k] for k in keys], [limit[k] for k in keys]]

    def _keep(self, counts: Counts) -> None:
        """Admit rows in the fair order until ``want`` are taken (see the module docstring)."""
        rows: list[Any] = []
        tokens: list[Token] = []
        # per key (a row without one: its own), its rows in claim-rank order (the rank is a
        # claim row's last column but one), and a heap of the keys' next rows by (running, rank, seq)
        lines: dict[str, list[int]] = {}
        order = sorted(range(len(self.rows)), key=lambda i: (self.rows[i][-2], i))
        for i in order:
            token = self.tokens[i]
            lines.setdefault(token.limit_key or f"\x00{i}", []).append(i)
        for line in lines.values():
            line.reverse()  # popped from the end
        picks = [
            (self._load(counts, key), self.rows[line[-1]][-2], line[-1], key) for key, line in lines.items()
        ]
        heapq.heapify(picks)
        while picks and len(rows) < self.want:
            load, _, i, key = heapq.heappop(picks)
            if load != self._load(counts, key):  # the key took a row since: back in line
                heapq.heappush(picks, (self._load(counts, key), self.rows[i][-2], i, key))
                continue
            line = lines[key]
            line.pop()
            if self._admit(self.tokens[i], counts):
                rows.append(self.rows[i])
                tokens.append(self.tokens[i])
            if line:
                heapq.heappush(picks, (self._load(counts, key), self.rows[line[-1]][-2], line[-1], key))
        self.rows, self.tokens = rows, tokens
        self.tats = {queue: tat for queue, tat in self.tats.items() if counts.limits[queue].rate_max}

    @staticmethod
    def _load(counts: Counts, key: str) -> int:
        return counts.key_held.get(key, 0) if key[:1] != "\x00" else 0

    def _admit(self, token: Token, counts: Counts) -> bool:
        """Count ``token`` in if its key, its queue and their rates have room; False if not."""
        key, queue = token.limit_key, token.queue
        if key and counts.key_held.get(key, 0) >= token.limit_max:
            return False
        if self.budgets.get(queue, 1) <= 0:
            return False
        rate_tat = None
        if token.rate_key:
            known = self.rate_tats.get(token.rate_key, counts.rate_tats.get(token.rate_key, 0.0))
            rate_tat = rate_admit(token.rate_max, token.rate_period_millis, known, counts.rate_now)
            if rate_tat is None:
                return False
        limit = counts.limits.get(queue)
        if limit is not None:
            if limit.max_running and counts.queue_held.get(queue, 0) >= limit.max_running:
                return False
            tat = admit(limit, self.tats[queue], counts.now)
            if tat is None:
                return False
            self.tats[queue] = tat
            counts.queue_held[queue] = counts.queue_held.get(queue, 0) + 1
        if rate_tat is not None:
            self.rate_tats[token.rate_key] = rate_tat
        if queue in self.budgets:
            self.budgets[queue] -= 1
        if key:
            counts.key_held[key] = counts.key_held.get(key, 0) + 1
        return True

    async def settle(self, conn: Conn, q: Queries) -> tuple[str, list[Any]] | None:
        """After the claim's transitions: mark the tokens of queues with a max_running and write
        the rates' state (in the claim's transaction). Returned: the check confirming an
        admission made on the read's counts, which the claim runs first in its write statement
        (None: nothing to confirm)."""
        confirm = None if self._confirm_class is None else self._confirmation(q, self._confirm_class)
        for token in self.tokens:
            if token.queue in self.held_queues:
                token.queue_held = True
        if self.tats:
            names = sorted(self.tats)
            await conn.execute(q.set_tats, (names, [self.tats[n] for n in names]))
        if self.rate_tats:
            names = sorted(self.rate_tats)
            await conn.execute(q.set_rate_tats, (names, [self.rate_tats[n] for n in names]))
        return confirm


class Counts:
    """What a claim's admission counts against: running per key and per queue, the queues'
    limits, the rate keys' states, and the two clocks (the claim's, the rates')."""

    __slots__ = ("now", "rate_now", "key_held", "queue_held", "limits", "rate_tats")

    def __init__(self, now: int) -> None:
        self.now = now
        self.rate_now = now
        self.key_held: dict[str, int] = {}
        self.queue_held: dict[str, int] = {}
        self.limits: dict[str, QueueLimit] = {}
        self.rate_tats: dict[str, float] = {}
