"""Statistics for young tables: the store analyzes its tables as they grow, before autovacuum does.

psycopg prepares a statement once it has run five times on a connection, and PostgreSQL may then
keep one *generic* plan for it, made from the statistics of that moment and replaced only when
the statistics of a table it reads change. On a new schema the tables are empty, and the cheapest
plan through a table of a few rows is to read all of it: the mutation's lock of its instance rows
(``lock_instances``) and the set-based updates of instances and tokens (``update_instances``,
``update_tokens``, statements.py) were planned as sequential scans. Nothing replaces those plans
until autovacuum first analyzes the tables, which it does on its own schedule
(``autovacuum_naptime``, a minute by default): meanwhile every mutation group reads every row of
both tables, finished ones included. Measured (bench/README.md, "Round five"): in a
3,000-instance LOCAL_SYNC run started on a new schema, 6,904 sequential scans of ``instances`` read
13.8 million rows, and those three statements used about 60% of PostgreSQL's CPU.

So each node counts the instances it writes, and when the count since its last analysis reaches
the table's row count as of that analysis (at least ``min_rows``), it runs ``ANALYZE`` on the
tables that grow with instances, in the background. New statistics invalidate the cached plans
on every connection, and the plans made next use the indexes. The row count doubles between two
of these analyses, so a table of N rows has been analyzed by a node about log2(N / min_rows)
times; once autovacuum keeps the statistics current they are rare. An analysis that fails (the
role may not own the tables, a lock held too long) is logged and tried again at the next
doubling; it never fails a caller.
"""

from __future__ import annotations

import asyncio
import logging

from psycopg import errors as pg_errors
from psycopg import sql

from .db import Conn, Database, short

__all__ = ["Statistics"]

log = logging.getLogger("wiggle.postgres")

#: The tables whose rows grow with instances (what the hot statements read).
TABLES = ("instances", "tokens", "history", "start_requests")


class Statistics:
    """Runs ``ANALYZE`` on the growing tables of ``schema`` as this node's writes double them."""

    MIN_ROWS = 100  # below this many rows a full read costs little, whatever the plan
    LOCK_TIMEOUT = "2s"  # an analysis waits no longer for a table another one (autovacuum) holds

    def __init__(self, db: Database, schema: str) -> None:
        self.db = db
        ident = sql.Identifier(schema).as_string()
        self._analyze = f"ANALYZE {', '.join(f'{ident}.{t}' for t in TABLES)}"
        self._estimate = "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)"
        self._instances = (f"{ident}.instances",)
        self.min_rows = self.MIN_ROWS
        self.rows = 0.0  # instances as of the last analysis (PostgreSQL's estimate, or ours)
        self.since = 0  # instances this node wrote since it last started an analysis
        self.analyses = 0  # analyses completed (tests, the benchmark)
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Start from the statistics the tables have now (none on a new schema)."""
        rows = await self.db.fetch("statistics", self._estimate, self._instances)
        self.rows = max(float(rows[0][0] or 0), 0.0) if rows else 0.0  # -1: never analyzed

    def grew(self, instances: int) -> None:
        """``instances`` new instance rows were written; analyze if they doubled the table."""
        self.since += instances
        if self._task is None and self.since >= max(self.min_rows, self.rows):
            written, self.since = self.since, 0
            self._task = asyncio.ensure_future(self._run(written))

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self, written: int) -> None:
        try:
            estimate = await self.db.run("analyze", self._body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Unavailable, or a database error: tried again at the next doubling
            log.warning("analyzing the tables failed (plans may read whole tables until it works): %s", exc)
            self.rows += written
        else:
            if estimate is not None:
                self.analyses += 1
            self.rows = max(estimate or 0.0, self.rows + written)
        finally:
            self._task = None

    async def _body(self, conn: Conn) -> float | None:
        """Analyze; the instances' row estimate after it (None: skipped, a table was locked)."""
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{self.LOCK_TIMEOUT}'")
                await conn.execute(self._analyze)
        except pg_errors.LockNotAvailable as exc:
            log.info("analyzing the tables skipped: %s", short(exc))
            return None
        cur = await conn.execute(self._estimate, self._instances)
        row = await cur.fetchone()
        return float(row[0]) if row and row[0] is not None else 0.0
