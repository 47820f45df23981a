"""Connections: the pool, dedicated connections, and running a body with bounded retries.

Transient database errors (serialization failures, deadlocks, a lost connection, a server
shutting down or read-only) are retried a bounded number of times; then the call fails with
``Unavailable`` (gRPC UNAVAILABLE), which callers retry. No raw psycopg error leaves this package.

**Fail-over** (docs/failover.md). The connection string may name several hosts (``host=a,b
port=5432,5433`` or ``postgresql://a:5432,b:5433/db``): every connection, pooled or dedicated,
goes to the first one that accepts writes (``target_session_attrs=read-write``, added when the
string names several hosts and says nothing). When the primary dies, each pooled connection
breaks at its next use; the call is retried on a fresh connection and, until a host accepts
writes again, fails UNAVAILABLE; the pool keeps reconnecting, a few seconds apart at most
(``RECONNECT_SECONDS``). A connection that finds its server read-only (a standby, a demoted
primary) is closed rather than returned to the pool. A transaction whose connection broke after
its COMMIT was sent may or may not have committed (``CommitUnknown``): bodies that recognise
their own earlier commit are retried, the others fail UNAVAILABLE and leave the retry to the
caller, whose request and signal ids make it safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncPipeline, pq
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..._urls import without_password
from ...errors import InvalidArgument, Unavailable, WiggleError
from ..base import SchemaMissing

__all__ = [
    "CONNECT_TIMEOUT",
    "CommitUnknown",
    "Conn",
    "Database",
    "KEEPALIVES",
    "check_conninfo",
    "failover_conninfo",
    "url_option_error",
    "vacuum_problem",
    "short",
    "transaction",
    "unavailable",
]

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


#: Seconds a connection attempt waits for one host before trying the next one (unless the
#: connection string or PGCONNECT_TIMEOUT says otherwise; libpq's default is to wait forever).
CONNECT_TIMEOUT = 5


#: How often a missing schema (SchemaMissing) is logged while it lasts, in seconds.
SCHEMA_MISSING_LOG_SECONDS = 60.0


def vacuum_problem(autovacuum: str, track_counts: str) -> str | None:
    """What is wrong with a database server whose ``autovacuum`` and ``track_counts`` settings are
    these (``current_setting``), or None when both are on. Wiggle updates and deletes rows all
    day (every step, the retention purge), and without autovacuum their space is never reused:
    an outside soak with it off grew the database by ~3 MB a minute at 14 instances a second
    while its live rows stayed flat. Said by ``wiggle doctor`` (wiggle/_cli/ops.py) and by a
    server when it opens its store (store.py)."""
    off = " and ".join(
        name for name, value in (("autovacuum", autovacuum), ("track_counts", track_counts)) if value != "on"
    )
    if not off:
        return None
    return (
        f"{off} off on this database server: the rows every step updates and the purge deletes are "
        "never reclaimed and the tables grow without bound; set autovacuum = on and track_counts = on "
        "(postgresql.conf), or VACUUM the schema's tables on a schedule"
    )


#: How a message names the database URL: its flag and its variable.
URL_SETTING = "--database-url (WIGGLE_DATABASE_URL)"

#: The connection parameters libpq reads as integers (it checks them only when it connects).
_INTEGER_OPTIONS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)

#: The connection parameters libpq takes one of a few words for, and those words.
_WORD_OPTIONS = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "load_balance_hosts": ("disable", "random"),
}

#: libpq's and psycopg's words for a connection parameter they could not use: the URL is wrong,
#: not the server away (``invalid sslmode value: "bogus"``, ``invalid integer value "x" for
#: connection option "port"``, ``invalid port number``, ``bad value for connect_timeout``).
_OPTION_ERROR = re.compile(
    r"invalid [\w\" ]*value\b|\bvalue \"[^\"]*\" invalid\b|invalid port number|bad value for|"
    r"invalid connection option|invalid URI query parameter"
)


def check_conninfo(url: str) -> dict[str, Any]:
    """``url``'s parameters, read as libpq reads them (``conninfo_to_dict``), with the values
    libpq checks only when it connects checked here first: a port, a timeout or an sslmode it
    cannot use is InvalidArgument naming the setting and the parameter, before anything connects
    (it was INTERNAL, or UNAVAILABLE asking whether PostgreSQL was running). The password is never
    quoted."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # libpq quotes the string back, password and all
        text = short(exc).replace(url, without_password(url))
        raise InvalidArgument(f"invalid PostgreSQL connection string in {URL_SETTING}: {text}") from None
    for port in str(params.get("port") or "").split(","):
        if port.strip() and not (port.strip().isdigit() and 1 <= int(port) <= 65535):
            raise InvalidArgument(
                f"{URL_SETTING} has port {port.strip()!r}: a port is a number from 1 to 65535 "
                "(postgresql://user@host:5432/db); fix the URL"
            )
    for name in _INTEGER_OPTIONS:
        value = params.get(name)
        if value is not None and not re.fullmatch(r"\s*-?\d+\s*", str(value)):
            raise InvalidArgument(
                f"{URL_SETTING} has {name}={str(value)!r}: it must be a whole number"
                f"{' of seconds' if name == 'connect_timeout' else ''}; fix the URL's parameter"
            )
    for name, words in _WORD_OPTIONS.items():
        value = params.get(name)
        if value is not None and str(value) not in words:
            raise InvalidArgument(
                f"{URL_SETTING} has {name}={str(value)!r}: it must be one of {', '.join(words)}; "
                "fix the URL's parameter"
            )
    return params


def url_option_error(exc: BaseException) -> InvalidArgument | None:
    """The InvalidArgument for a connection failure ``exc`` that is about the URL's parameters (a
    value libpq refused when it connected), not about the server; None for any other failure."""
    if not isinstance(exc, psycopg.Error):
        return None
    text = short(exc)
    if not _OPTION_ERROR.search(text):
        return None
    text = text.removeprefix("connection is bad: ")
    return InvalidArgument(f"{URL_SETTING} has a parameter libpq cannot use: {text}; fix the URL's parameter")


def failover_conninfo(url: str) -> str:
    """``url`` with the connection settings fail-over needs, where it does not set them itself.

    - ``target_session_attrs=read-write`` when it names several hosts: Wiggle only works on a
      server that accepts writes, so a standby listed first must be skipped, not used;
    - ``connect_timeout`` (CONNECT_TIMEOUT): a dead host that drops packets would otherwise hold
      every new connection for minutes before the next host is tried.

    A string naming one host and setting connect_timeout is returned unchanged. Raises
    InvalidArgument for a string libpq cannot parse.
    """
    params = check_conninfo(url)
    # libpq's own PG* variables fill in what the string leaves out, so they are read here, where
    # the string is completed; they are libpq's settings, not Wiggle's (the only reader of the
    # environment besides wiggle/_env.py, as tests/test_settings_home.py allows)
    hosts = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST", "")).split(",")
    extra: dict[str, str | int] = {}
    if len(hosts) > 1 and "target_session_attrs" not in params and "PGTARGETSESSIONATTRS" not in os.environ:
        extra["target_session_attrs"] = "read-write"
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    return make_conninfo(url, **extra) if extra else url


class CommitUnknown(psycopg.OperationalError):
    """The connection broke after COMMIT was sent: the transaction may or may not have committed
    (with synchronous replication, a standby may have it although the primary never answered)."""


def unavailable(exc: BaseException, what: str, maybe_applied: bool = False) -> Unavailable:
    """The Unavailable a caller sees for a database failure ``exc`` during ``what``.

    Only a COMMIT whose answer was lost may have applied anything: every other failure rolled
    the transaction back, so the error says nothing was applied (``not_applied``: the caller may
    repeat any call, here or on another server) unless ``maybe_applied`` (an earlier attempt of
    the same call lost its COMMIT's answer)."""
    if isinstance(exc, CommitUnknown):
        return Unavailable(
            f"database connection lost while committing ({what}): the change may or may not have been "
            f"applied; retry (a start with a request id, a signal with an id and a worker's report are "
            f"safe to repeat) [{short(exc)}]"
        )
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return Unavailable(
            f"database unavailable: the server is read-only (a standby, or a primary being demoted) "
            f"during {what}; waiting for a writable primary (does the connection string name every "
            f"host, with target_session_attrs=read-write?)",
            not_applied=not maybe_applied,
        )
    return Unavailable(f"database unavailable: {short(exc)}", not_applied=not maybe_applied)


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
    committing = False
    try:
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN")
            yield pipeline
            committing = True  # from here on, what the server did may not be known
            await conn.execute("COMMIT")
    except BaseException as exc:
        if conn.info.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
            with contextlib.suppress(Exception):  # a broken connection: the pool discards it
                await conn.rollback()
        if committing and isinstance(exc, psycopg.OperationalError) and _lost(conn):
            # The connection broke with COMMIT on its way: a statement error would have left it
            # usable, so this is a lost server or network, and the outcome is not known.
            if not conn.closed:  # not handed out again (_lost: it may not look broken yet)
                with contextlib.suppress(Exception):
                    await conn.close()
            raise CommitUnknown(f"connection lost during COMMIT: {short(exc)}") from exc
        raise


def _lost(conn: Conn) -> bool:
    """Whether ``conn``, after a failure, cannot be used again: broken, or not back out of its
    pipeline and its transaction. A session cut by ``pg_terminate_backend`` after the server
    ran the COMMIT leaves the connection not yet broken: libpq has the server's FATAL message
    but not the end of the stream, and the pipeline's exit fails with "cannot exit pipeline mode
    while busy" (an outside trial: such a claim was run again as if nothing had committed, and the
    steps the first one leased were delivered to nobody)."""
    return (
        conn.broken
        or conn.pgconn.status != pq.ConnStatus.OK
        or conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
        or conn.info.transaction_status in (pq.TransactionStatus.ACTIVE, pq.TransactionStatus.UNKNOWN)
    )


class Database:
    """One node's connections to ``url``: a pool named ``application_name``, plus dedicated ones."""

    #: The longest a pool's reconnection attempts wait between them. psycopg_pool doubles its
    #: delay from 1 s after each failure (1, 2, 4, 8 s...), so an outage of a few seconds could
    #: leave the pool idle for as long again after the new primary is up; a reconnection that
    #: gives up after this long is started afresh (at once) by the next call that needs one.
    RECONNECT_SECONDS = 2.0

    def __init__(
        self,
        url: str,
        application_name: str,
        pool_size: int,
        acquire_timeout: float,
        max_attempts: int,
        stall_timeout: float = 0.0,
    ) -> None:
        self.url = failover_conninfo(url)
        #: Seconds a pooled session may sit idle inside a transaction before PostgreSQL ends it
        #: (``idle_in_transaction_session_timeout``; 0: the database's own setting). A server's
        #: transactions never wait for it between statements for longer than its event loop takes
        #: to come back, so a session idle that long belongs to a server that stopped running
        #: (SIGSTOP, a paused VM): its row locks hid the READY steps its claim had locked from every
        #: other server's claims, and held up their reports on the instances it had locked, until
        #: it ran again (docs/failover.md#a-server-that-hangs-instead-of-dying).
        self.stall_timeout = stall_timeout
        self.application_name = application_name
        self.pool_size = max(1, pool_size)
        self.acquire_timeout = acquire_timeout
        self.max_attempts = max(1, max_attempts)
        self.pool: AsyncConnectionPool | None = None
        #: The schema the store's statements name (set by the store): named by SchemaMissing.
        self.schema = ""
        self._missing_said = -SCHEMA_MISSING_LOG_SECONDS  # monotonic time SchemaMissing was last logged

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
            reconnect_timeout=self.RECONNECT_SECONDS,
            configure=self._configure if self.stall_timeout > 0 else None,
        )
        try:
            await pool.open(wait=True, timeout=max(self.acquire_timeout, 1.0))
        except psycopg.Error as exc:
            await pool.close()
            bad_url = url_option_error(exc)
            if bad_url is not None:
                raise bad_url from None
            if not isinstance(exc, psycopg.OperationalError):
                raise
            raise Unavailable(f"database unavailable: {short(exc)}", not_applied=True) from exc
        self.pool = pool

    async def _configure(self, conn: Conn) -> None:
        """A new pooled connection: a stalled transaction of this server is ended by PostgreSQL."""
        millis = str(max(1, round(self.stall_timeout * 1000)))
        await conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (millis,))

    async def close(self) -> None:
        """Close the pool."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await pool.close()

    async def connect(self, role: str) -> Conn:
        """A dedicated autocommit connection, named ``application_name:role``."""
        return await psycopg.AsyncConnection.connect(
            self.url,  # connect_timeout and target_session_attrs from failover_conninfo
            autocommit=True,
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
            except psycopg.Error as exc:
                bad_url = url_option_error(exc)
                if bad_url is not None:  # the URL is wrong: trying again would not help
                    raise bad_url from None
                if not isinstance(exc, psycopg.OperationalError):
                    raise
                last = exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        log.warning("database unavailable while %s: %s", what, last)
        message = str(last) if isinstance(last, Unavailable) else f"database unavailable: {short(last)}"
        raise Unavailable(message, not_applied=True) from last

    async def run(
        self, what: str, body: Callable[[Conn], Awaitable[T]], *, retry_unknown_commit: bool = True
    ) -> T:
        """Run ``body`` on a pooled connection, retrying transient failures; Unavailable at the end.

        ``retry_unknown_commit=False``: a body whose COMMIT may have gone through (CommitUnknown)
        is not run again, as a body that cannot recognise its own earlier commit would apply
        twice; the caller gets Unavailable and repeats the request if it wants to.
        """
        pool = self.pool
        if pool is None:
            raise Unavailable(f"the PostgreSQL store is not open ({what})")
        delay = 0.02
        last: BaseException | None = None
        maybe_applied = False  # an attempt's COMMIT went out and its answer was lost
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with pool.connection() as conn:
                    try:
                        return await body(conn)
                    except pg_errors.ReadOnlySqlTransaction:
                        # A standby (or a primary being demoted): never hand this connection out
                        # again; the pool's next one goes to the host that accepts writes.
                        await conn.close()
                        raise
            except WiggleError:
                raise
            except PoolTimeout as exc:
                # No connection for acquire_timeout seconds: the database is down (the pool keeps
                # reconnecting in the background). Waiting as long again per attempt would only
                # delay the UNAVAILABLE that callers retry on.
                raise Unavailable(
                    f"database unavailable: no connection within {self.acquire_timeout:g} s ({short(exc)})",
                    not_applied=not maybe_applied,
                ) from exc
            except pg_errors.TransactionRollback as exc:  # serialization failure, deadlock
                last = exc
                log.debug("%s: transaction rolled back (%s), attempt %d", what, short(exc), attempt)
            except CommitUnknown as exc:
                if not retry_unknown_commit:
                    log.warning("%s: %s; not retried: its outcome is unknown", what, short(exc))
                    raise unavailable(exc, what) from exc
                log.warning("%s: %s, attempt %d of %d", what, short(exc), attempt, self.max_attempts)
                last = exc
                maybe_applied = True
                await self._check_pool(pool, attempt)
            except (psycopg.OperationalError, pg_errors.ReadOnlySqlTransaction) as exc:
                # connection lost, server shutting down or starting up, read-only server
                last = exc
                log.warning(
                    "%s: database error (%s), attempt %d of %d", what, short(exc), attempt, self.max_attempts
                )
                await self._check_pool(pool, attempt)
            except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
                raise self.schema_missing(exc, what) from None
            except psycopg.Error as exc:
                log.exception("%s: unexpected database error", what)
                raise WiggleError(f"database error in {what}: {short(exc)}") from exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        if last is None:
            raise Unavailable(f"database unavailable ({what})", not_applied=not maybe_applied)
        raise unavailable(last, what, maybe_applied) from last

    def schema_missing(self, exc: BaseException, what: str) -> SchemaMissing:
        """The SchemaMissing for ``exc`` (a table or the schema not there) during ``what``; logged
        once every SCHEMA_MISSING_LOG_SECONDS while it lasts (it was a traceback a second, from
        each of the server's loops, and INTERNAL to every client)."""
        schema = self.schema or "the store's"
        error = SchemaMissing(
            f"database schema {schema!r} is missing or not migrated ({short(exc)}): "
            f"run `wiggle migrate --database-schema {schema}` against this database, or restart the "
            "server (it migrates its schema at start)"
        )
        now = time.monotonic()
        if now - self._missing_said >= SCHEMA_MISSING_LOG_SECONDS:
            self._missing_said = now
            log.error("%s [during %s; said once a minute while it lasts]", error, what)
        return error

    async def _check_pool(self, pool: AsyncConnectionPool, attempt: int) -> None:
        """Before a retry, drop the pool's other dead connections (they died with this one)."""
        if attempt < self.max_attempts:
            with contextlib.suppress(Exception):
                await pool.check()

    async def execute(self, what: str, query: str, params: Any = None) -> None:
        """One statement whose rows are not wanted (autocommit: a transaction of its own)."""

        async def body(conn: Conn) -> None:
            await conn.execute(query, params)

        await self.run(what, body)

    async def fetch(self, what: str, query: str, params: Any = None, binary: bool = False) -> list[Any]:
        """The rows of one statement (autocommit: its own snapshot, one round trip)."""

        async def body(conn: Conn) -> list[Any]:
            cur = await conn.execute(query, params, binary=binary)
            return await cur.fetchall()

        return await self.run(what, body)
