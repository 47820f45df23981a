"""Wake-ups wanted: a node tells the others, through the ``wakeups`` table (migration 0022), which
kinds of NOTIFY it has someone waiting for, and the others send only those (cluster.py).

Every connection of a database that LISTENs reads every NOTIFY sent on it, in a transaction of
its own, whatever channel it listens on (bench/README.md, "Round eighteen"); and under load nobody
waits (every poll finds steps at once, nobody waits for an instance), so such NOTIFYs woke nobody
and cost a transaction to send and one per listening node to read: with two servers, most of the
extra PostgreSQL transactions per instance (docs/architecture.md, "Scaling").

A node's waiters, while they wait (``Wakeups.waiting``): a poll for steps of some queues (kind
``work``, one row per queue) or a call waiting for an instance to finish (kind ``finished``,
subject ``''``). The first waiter of a kind and subject has a row written for it in the
background, and the same statement tells the other nodes (a NOTIFY ``<node>:want:<kind>:<subject>``
on the peers channel); a row stays while someone waits and for ``KEEP_SECONDS`` after the last one
stopped (so a node that waits now and then writes nothing more), and is then deleted. Each node
knows what the others want from those messages and from its peer count every few seconds (which
reads the rows, so a lost message is made good), and sends a work or finish NOTIFY only if some
other node wants it, and nothing at all, not even a transaction, if nobody does.

**No lost wake-up.** A waiter registers with its node's Notifier before it looks (delivery.py,
instances.py), and stays registered until it is woken or its wait ends. Another node that commits
work after it has heard of the row sends the NOTIFY, which wakes the waiter. One that committed
before it heard of the row sent nothing; but when it hears of the row (the message, or its next
count) it sends a catch-up NOTIFY for that kind and subject, which wakes the waiter after that
commit, and the waiter looks again and finds the work. The waiter's own node, once the row is
committed, wakes it as well (``wake``), so it looks again at least once after the row
exists; a row that could not be written wakes it too, and its next wait tries again.

The ``node`` row of each node says that it filters: while a node without one (an older version)
is connected, every node sends all its NOTIFYs, as before. Rows of a node that is gone (killed)
are deleted by the clock leader (cluster.py); they are only read by the peer count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from .db import Database, short

__all__ = ["FINISHED", "NODE", "WORK", "Wakeups"]

log = logging.getLogger("wiggle.postgres")

#: A poll waits for steps of a queue (the subject).
WORK = "work"
#: A call waits for an instance to finish (subject ``''``).
FINISHED = "finished"
#: The node's own row: it writes the others' rows and filters its NOTIFYs by them.
NODE = "node"

Key = tuple[str, str]  # (kind, subject)


class Wakeups:
    """This node's rows of the ``wakeups`` table (see the module docstring).

    ``wake(kind, subjects)`` is called once rows for them are committed (or could not be): the
    store's Notifier wakes the waiters of those queues, or of instances, so that they look again.
    """

    #: How long a row stays after its last waiter stopped waiting (seconds).
    KEEP_SECONDS = 1.0

    def __init__(self, node_id: str, wake: Callable[[str, list[str]], None]) -> None:
        self.node_id = node_id
        self.wake = wake
        self.db: Database | None = None
        self._want_sql = ""
        self._channel = ""
        self._unwant_sql = ""
        self._drop_sql = ""
        self._written: set[Key] = set()  # rows committed and not being deleted (withdraw)
        self._writing: set[Key] = set()  # rows a background write is taking care of
        self._waiting: Counter[Key] = Counter()  # waiters waiting now, per row
        self._last: dict[Key, float] = {}  # when a waiter last stopped (or began) waiting
        self._lock = asyncio.Lock()  # one write or delete of rows at a time
        self._tasks: set[asyncio.Future[None]] = set()

    async def open(self, db: Database, want_sql: str, unwant_sql: str, drop_sql: str, channel: str) -> None:
        """Use ``db`` and write this node's own row (kind ``node``); ``channel``: where a new row
        is told to the other nodes (cluster.py's peers channel)."""
        self.db = db
        self._want_sql, self._unwant_sql, self._drop_sql = want_sql, unwant_sql, drop_sql
        self._channel = channel
        await self._write([(NODE, "")])

    async def close(self) -> None:
        """Delete this node's rows (best effort: the clock leader deletes what is left)."""
        for task in list(self._tasks):
            task.cancel()
        db, self.db = self.db, None
        if db is None:
            return
        with contextlib.suppress(Exception):
            await db.execute("wakeups", self._drop_sql, (self.node_id,))

    @contextlib.contextmanager
    def waiting(self, kind: str, subjects: Sequence[str]) -> Iterator[None]:
        """Around one wait for a wake-up of ``kind`` about each of ``subjects``: rows for them are
        written if missing (in the background: see the module docstring)."""
        keys = [(kind, subject) for subject in subjects]
        now = time.monotonic()
        missing = []
        for key in keys:
            self._waiting[key] += 1
            self._last[key] = now
            if key not in self._written and key not in self._writing:
                missing.append(key)
        if missing and self.db is not None:
            self._writing.update(missing)
            task = asyncio.ensure_future(self._write_for(missing))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            now = time.monotonic()
            for key in keys:
                self._waiting[key] -= 1
                if not self._waiting[key]:
                    del self._waiting[key]
                self._last[key] = now

    async def _write_for(self, keys: list[Key]) -> None:
        try:
            await self._write(keys)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the waiters look again, and the next wait tries again
            log.warning("could not record the wake-ups this node waits for (%s)", short(exc))
        finally:
            self._writing.difference_update(keys)
            by_kind: dict[str, list[str]] = {}
            for kind, subject in keys:
                by_kind.setdefault(kind, []).append(subject)
            for kind, subjects in by_kind.items():
                self.wake(kind, subjects)

    async def _write(self, keys: list[Key]) -> None:
        async with self._lock:
            db = self.db
            if db is None:
                return
            await db.execute(
                "wakeups",
                self._want_sql,
                (self.node_id, [k for k, _ in keys], [s for _, s in keys], self._channel),
            )
            self._written.update(keys)

    async def withdraw(self) -> None:
        """Delete the rows nobody has waited for in ``KEEP_SECONDS`` (the listener calls this
        every few seconds)."""
        if self.db is None:
            return
        limit = time.monotonic() - self.KEEP_SECONDS
        idle = [
            key
            for key in self._written
            if key[0] != NODE and not self._waiting.get(key) and self._last.get(key, 0.0) < limit
        ]
        if not idle:
            return
        async with self._lock:
            # A waiter that begins meanwhile finds its row missing and writes it again, after this.
            idle = [key for key in idle if not self._waiting.get(key) and self._last.get(key, 0.0) < limit]
            self._written.difference_update(idle)
            for key in idle:
                self._last.pop(key, None)
            db = self.db
            if not idle or db is None:
                return
            try:
                await db.execute(
                    "wakeups", self._unwant_sql, ([k for k, _ in idle], [s for _, s in idle], self.node_id)
                )
            except Exception as exc:  # rows left: the others send NOTIFYs nobody reads, until the next try
                log.debug("could not delete wake-up rows (%s)", short(exc))

    async def rewrite(self) -> None:
        """The database may have lost rows (a fail-over to a standby that had not replayed them):
        forget them and write this node's own row again; the next waits write theirs."""
        async with self._lock:
            self._written.clear()
        await self._write([(NODE, "")])

    def written(self) -> set[Key]:
        """The rows this node has written and not deleted (tests)."""
        return set(self._written)
