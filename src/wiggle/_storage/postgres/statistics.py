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

**Keyed steps running.** A concurrency limit counts its key's RUNNING attempts through the partial
index ``tokens_limit_held`` (claim_terms.py ``key_held``). Statistics gathered while no keyed step
ran (a schema analyzed as its first instances were started, or a quiet spell before a burst) make
that index and ``tokens_leases`` (every RUNNING token) both look empty, and the planner then reads
a key's count through either: through ``tokens_leases`` it reads every RUNNING token (with 4,000
running, 0.8 ms a key instead of a few microseconds), until autovacuum next analyzes ``tokens``
(docs/postgres-plans.md, "A key's running attempts, through its partial index"). So each node also
counts the keyed steps it claims, and once they reach the keyed RUNNING tokens of the last
statistics (at least ``min_rows``) it analyzes ``tokens``' ``status`` and ``limit_key``, at most
once every ``KEYED_SPACING_SECONDS``: a burst after a quiet spell is planned on its own figures within
``min_rows`` claims, and a steady load costs an analysis of ``tokens`` a minute at most.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

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
    KEYED_SPACING_SECONDS = 60.0  # the least time between two analyses for keyed claims

    def __init__(self, db: Database, schema: str) -> None:
        self.db = db
        ident = sql.Identifier(schema).as_string()
        self._analyze = f"ANALYZE {', '.join(f'{ident}.{t}' for t in TABLES)}"
        # only the columns a key count's plan depends on (the partial indexes' conditions): the
        # indexes' sizes are estimated all the same, at a third of a whole analysis's cost
        self._analyze_tokens = f"ANALYZE {ident}.tokens (status, limit_key)"
        # the instances' row count and the keyed RUNNING tokens' (tokens_limit_held's entries), as
        # of the last statistics (-1: never analyzed)
        self._estimate = (
            "SELECT (SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)), "
            "(SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s))"
        )
        self._relations = (f"{ident}.instances", f"{ident}.tokens_limit_held")
        self.min_rows = self.MIN_ROWS
        self.rows = 0.0  # instances as of the last analysis (PostgreSQL's estimate, or ours)
        self.since = 0  # instances this node wrote since it last started an analysis
        self.keyed_rows = 0.0  # keyed RUNNING tokens as of the last analysis (PostgreSQL's estimate)
        self.keyed_since = 0  # keyed steps this node claimed since it last started an analysis
        self._keyed_at = float("-inf")  # when this node last analyzed for keyed claims (monotonic)
        self.analyses = 0  # analyses completed (tests, the benchmark)
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Start from the statistics the tables have now (none on a new schema)."""
        rows = await self.db.fetch("statistics", self._estimate, self._relations)
        if rows:
            self.rows, self.keyed_rows = (max(float(n or 0), 0.0) for n in rows[0])

    def grew(self, instances: int) -> None:
        """``instances`` new instance rows were written; analyze if they doubled the table."""
        self.since += instances
        if self._task is None and self.since >= max(self.min_rows, self.rows):
            written, self.since = self.since, 0
            self._task = asyncio.ensure_future(self._run(written, self._analyze))

    def claimed_keyed(self, steps: int) -> None:
        """``steps`` steps under a concurrency-limit key were claimed; analyze ``tokens`` if as many
        were claimed since the last analysis as the statistics say run (see the module docstring)."""
        self.keyed_since += steps
        now = time.monotonic()
        if (
            self._task is None
            and self.keyed_since >= max(self.min_rows, self.keyed_rows)
            and now - self._keyed_at >= self.KEYED_SPACING_SECONDS
        ):
            self._keyed_at = now
            self._task = asyncio.ensure_future(self._run(0, self._analyze_tokens))

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self, written: int, statement: str) -> None:
        self.keyed_since = 0  # every analysis reads tokens: its keyed count starts again
        try:
            estimate = await self.db.run("analyze", functools.partial(self._body, statement))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Unavailable, or a database error: tried again at the next doubling
            log.warning("analyzing the tables failed (plans may read whole tables until it works): %s", exc)
            self.rows += written
        else:
            if estimate is not None:
                self.analyses += 1
                self.keyed_rows = estimate[1]
            self.rows = max(estimate[0] if estimate else 0.0, self.rows + written)
        finally:
            self._task = None

    async def _body(self, statement: str, conn: Conn) -> tuple[float, float] | None:
        """Run ``statement`` (an ANALYZE); the estimates after it: instances, keyed RUNNING tokens
        (None: skipped, a table was locked)."""
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{self.LOCK_TIMEOUT}'")
                await conn.execute(statement)
        except pg_errors.LockNotAvailable as exc:
            log.info("analyzing the tables skipped: %s", short(exc))
            return None
        cur = await conn.execute(self._estimate, self._relations)
        row = await cur.fetchone()
        if row is None:
            return 0.0, 0.0
        return max(float(row[0] or 0), 0.0), max(float(row[1] or 0), 0.0)
