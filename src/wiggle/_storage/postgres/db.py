"""Connections: the pool, dedicated connections, and running a body with bounded retries.

Transient database errors (serialization failures, deadlocks, a lost connection) are retried a
bounded number of times; then the call fails with ``Unavailable`` (gRPC UNAVAILABLE). No raw
psycopg error leaves this package.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncPipeline, pq
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import Unavailable, WiggleError

__all__ = ["Conn", "Database", "KEEPALIVES", "short", "transaction"]

log = logging.getLogger("wiggle.postgres")

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]

# TCP keepalives on every connection: a peer that vanished silently (no RST) is noticed in about
# 25 s instead of the kernel's minutes, so the listener reconnects and a dead leader lets go.
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def short(exc: BaseException) -> str:
    """The first line of an error's text (psycopg's messages run over several lines)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.asynccontextmanager
async def transaction(conn: Conn) -> AsyncIterator[AsyncPipeline]:
    """One transaction in pipeline mode, yielding the pipeline: BEGIN goes out with the body's first
    statements and COMMIT with its last ones, so the transaction costs one round trip per
    ``pipeline.sync()`` in the body, plus one.

    psycopg's ``conn.transaction()`` inside ``conn.pipeline()`` nests two more pipelines around
    the transaction and syncs at each level: five round trips for a body that syncs once (bench/
    README.md, "Round three"). An error ends the transaction with ROLLBACK (nothing of it commits);
    a failed COMMIT has rolled back already.
    """
    try:
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN")
            yield pipeline
            await conn.execute("COMMIT")
    except BaseException:
        if conn.info.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
            with contextlib.suppress(Exception):  # a broken connection: the pool discards it
                await conn.rollback()
        raise


class Database:
    """One node's connections to ``url``: a pool named ``application_name``, plus dedicated ones."""

    def __init__(
        self, url: str, application_name: str, pool_size: int, acquire_timeout: float, max_attempts: int
    ) -> None:
        self.url = url
        self.application_name = application_name
        self.pool_size = max(1, pool_size)
        self.acquire_timeout = acquire_timeout
        self.max_attempts = max(1, max_attempts)
        self.pool: AsyncConnectionPool | None = None

    async def open(self, name: str) -> None:
        """Open the pool (autocommit connections; a read is one statement, one round trip)."""
        pool: AsyncConnectionPool = AsyncConnectionPool(
            self.url,
            min_size=min(2, self.pool_size),
            max_size=self.pool_size,
            open=False,
            timeout=self.acquire_timeout,
            # autocommit: a read is one statement, one round trip; mutations open their own transactions
            kwargs={"application_name": self.application_name, "autocommit": True, **KEEPALIVES},
            name=name,
        )
        try:
            await pool.open(wait=True, timeout=max(self.acquire_timeout, 1.0))
        except psycopg.OperationalError as exc:
            await pool.close()
            raise Unavailable(f"database unavailable: {short(exc)}") from exc
        self.pool = pool

    async def close(self) -> None:
        """Close the pool."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await pool.close()

    async def connect(self, role: str) -> Conn:
        """A dedicated autocommit connection, named ``application_name:role``."""
        return await psycopg.AsyncConnection.connect(
            self.url,
            autocommit=True,
            connect_timeout=10,
            application_name=f"{self.application_name}:{role}",
            **KEEPALIVES,
        )

    async def retry_connect(self, what: str, connect: Callable[[], Awaitable[T]]) -> T:
        """``connect()``, retried with backoff; Unavailable after max_attempts."""
        delay = 0.05
        for attempt in range(1, self.max_attempts + 1):
            try:
                return await connect()
            except Unavailable as exc:
                last: BaseException = exc
            except psycopg.OperationalError as exc:
                last = exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        log.warning("database unavailable while %s: %s", what, last)
        message = str(last) if isinstance(last, Unavailable) else f"database unavailable: {short(last)}"
        raise Unavailable(message) from last

    async def run(self, what: str, body: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``body`` on a pooled connection, retrying transient failures; Unavailable at the end."""
        pool = self.pool
        if pool is None:
            raise Unavailable(f"the PostgreSQL store is not open ({what})")
        delay = 0.02
        last: BaseException | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with pool.connection() as conn:
                    return await body(conn)
            except WiggleError:
                raise
            except PoolTimeout as exc:
                # No connection for acquire_timeout seconds: the database is down (the pool keeps
                # reconnecting in the background). Waiting as long again per attempt would only
                # delay the UNAVAILABLE that callers retry on.
                raise Unavailable(
                    f"database unavailable: no connection within {self.acquire_timeout:g} s ({short(exc)})"
                ) from exc
            except pg_errors.TransactionRollback as exc:  # serialization failure, deadlock
                last = exc
                log.debug("%s: transaction rolled back (%s), attempt %d", what, short(exc), attempt)
            except psycopg.OperationalError as exc:  # connection lost, server shutting down, pool timeout
                last = exc
                log.warning(
                    "%s: database error (%s), attempt %d of %d", what, short(exc), attempt, self.max_attempts
                )
                if attempt < self.max_attempts:
                    with contextlib.suppress(Exception):
                        await pool.check()  # drop the pool's other dead connections before retrying
            except psycopg.Error as exc:
                log.exception("%s: unexpected database error", what)
                raise WiggleError(f"database error in {what}: {short(exc)}") from exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        raise Unavailable(f"database unavailable: {short(last) if last else what}") from last

    async def fetch(self, what: str, query: str, params: Any = None, binary: bool = False) -> list[Any]:
        """The rows of one statement (autocommit: its own snapshot, one round trip)."""

        async def body(conn: Conn) -> list[Any]:
            cur = await conn.execute(query, params, binary=binary)
            return await cur.fetchall()

        return await self.run(what, body)
