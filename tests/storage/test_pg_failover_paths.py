"""The store's fail-over paths one by one (wiggle/_storage/postgres/db.py, cluster.py): the
connection string, a read-only server, a COMMIT of unknown outcome, the clock lock on a standby.
tests/storage/test_failover.py runs them all together, under load, through a real fail-over."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from pg import TEST_DATABASE_URL, PrivatePostgres, terminate_sleeping
from psycopg import sql

from wiggle._storage.notifier import Notifier
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.cluster import Cluster
from wiggle._storage.postgres.db import CONNECT_TIMEOUT, Conn, Database, failover_conninfo, transaction
from wiggle._storage.postgres.statements import Queries
from wiggle.errors import InvalidArgument, Unavailable

pytestmark = pytest.mark.postgres


# ---------------------------------------------------------------------------- the connection string


def test_several_hosts_get_read_write_and_a_connect_timeout() -> None:
    dsn = failover_conninfo("host=a,b port=5432,5433 dbname=w user=u")
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    assert params["target_session_attrs"] == "read-write"
    assert params["connect_timeout"] == str(CONNECT_TIMEOUT)
    url = psycopg.conninfo.conninfo_to_dict(failover_conninfo("postgresql://u:pw@a:5432,b:5433/w"))
    assert (url["host"], url["port"], url["password"], url["target_session_attrs"]) == (
        "a,b",
        "5432,5433",
        "pw",
        "read-write",
    )


def test_what_the_string_says_is_kept() -> None:
    kept = "host=a,b port=1,2 target_session_attrs=primary connect_timeout=3"
    params = psycopg.conninfo.conninfo_to_dict(failover_conninfo(kept))
    assert (params["target_session_attrs"], params["connect_timeout"]) == ("primary", "3")
    one = psycopg.conninfo.conninfo_to_dict(failover_conninfo("postgresql://u@db.example:5432/w"))
    assert "target_session_attrs" not in one  # one host (a DNS endpoint): nothing to choose from


def test_an_unparsable_string_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="invalid PostgreSQL connection string"):
        failover_conninfo("host=a port")


# ---------------------------------------------------------------------------- on the shared server


@pytest.fixture
async def db(pg_schema: str) -> AsyncIterator[Database]:
    database = Database(TEST_DATABASE_URL, f"failover-{os.urandom(4).hex()}", 2, 5.0, 3)
    await database.open("failover-test")

    async def setup(conn: Conn) -> None:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
        await conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        # a deferred trigger that holds every COMMIT for a moment, so a test can break it there
        await conn.execute(
            "CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$"
        )
        await conn.execute(
            "CREATE CONSTRAINT TRIGGER hold AFTER INSERT ON t DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION hold()"
        )

    await database.run("setup", setup)
    database.schema = pg_schema  # type: ignore[attr-defined]
    try:
        yield database
    finally:
        await database.close()


def _in(db: Database, statement: str) -> str:
    """``statement`` with ``{s}`` as the test's schema."""
    return sql.SQL(statement).format(s=sql.Identifier(db.schema)).as_string(None)  # type: ignore[attr-defined]


async def test_a_read_only_connection_is_closed_and_the_call_retried(db: Database) -> None:
    pids: list[int] = []

    async def body(conn: Conn) -> None:
        pids.append(conn.info.backend_pid)
        if len(pids) == 1:  # the first connection turns read-only, as a demoted primary's would
            await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        await conn.execute(_in(db, "INSERT INTO {s}.t VALUES (1)"))

    await db.run("insert", body)
    assert len(pids) == 2 and pids[0] != pids[1], "the read-only connection was used again"
    rows = await db.fetch("count", _in(db, "SELECT count(*) FROM {s}.t"))
    assert rows == [(1,)]


async def test_a_read_only_server_is_unavailable_naming_the_setting(db: Database) -> None:
    async def body(conn: Conn) -> None:
        await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        await conn.execute(_in(db, "INSERT INTO {s}.t VALUES (1)"))

    with pytest.raises(Unavailable, match="read-only.*target_session_attrs=read-write"):
        await db.run("insert", body)


async def _break_commit(db: Database, retry: bool) -> tuple[int, BaseException | None]:
    """Run an INSERT whose COMMIT is cut off (the backend terminated while the deferred trigger
    holds it) on the first attempt; (bodies run, the exception)."""
    attempts = 0

    async def body(conn: Conn) -> None:
        nonlocal attempts
        attempts += 1
        async with transaction(conn):
            await conn.execute(_in(db, "INSERT INTO {s}.t VALUES (1)"))

    task = asyncio.ensure_future(db.run("insert", body, retry_unknown_commit=retry))
    await terminate_sleeping(db.application_name, "the COMMIT")
    try:
        await task
    except Exception as exc:
        return attempts, exc
    return attempts, None


async def test_an_unknown_commit_is_not_run_again_when_the_caller_says_so(db: Database) -> None:
    attempts, error = await _break_commit(db, retry=False)
    assert attempts == 1
    assert isinstance(error, Unavailable), error
    assert "may or may not have been applied" in str(error)


async def test_an_unknown_commit_is_retried_by_default(db: Database) -> None:
    attempts, error = await _break_commit(db, retry=True)
    assert (attempts, error) == (2, None)
    rows = await db.fetch("count", _in(db, "SELECT count(*) FROM {s}.t"))
    assert rows == [(1,)]  # the terminated attempt did not commit; the retry did, once


# ---------------------------------------------------------------------------- with a standby


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    primary = PrivatePostgres.primary()
    try:
        standby = primary.standby()
        try:
            yield primary, standby
        finally:
            standby.close()
    finally:
        primary.close()


async def test_a_standby_listed_first_is_skipped(pair: tuple[PrivatePostgres, PrivatePostgres]) -> None:
    primary, standby = pair
    db = Database(
        f"host=127.0.0.1,127.0.0.1 port={standby.port},{primary.port} user=postgres dbname=postgres",
        "failover-test",
        1,
        5.0,
        3,
    )
    await db.open("failover-test")
    try:
        assert await db.fetch("recovery", "SELECT pg_is_in_recovery(), current_setting('port')") == [
            (False, str(primary.port))
        ]
    finally:
        await db.close()


async def test_a_server_on_a_standby_alone_is_unavailable(
    pair: tuple[PrivatePostgres, PrivatePostgres],
) -> None:
    _, standby = pair
    store = PostgresStore(standby.url, schema="wiggle_on_standby")
    with pytest.raises(Unavailable, match="read-only"):
        await store.open()
    await store.close()


async def test_the_clock_lock_is_never_taken_on_a_standby(
    pair: tuple[PrivatePostgres, PrivatePostgres],
) -> None:
    _, standby = pair
    db = Database(standby.url, "failover-test", 1, 5.0, 3)
    await db.open("failover-test")
    cluster = Cluster("wiggle_clock", Notifier(), Queries("wiggle_clock"))
    cluster.db = db
    try:
        assert await cluster.ensure_leader() is False
        with psycopg.connect(standby.url, autocommit=True) as conn:
            held = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        assert held == (0,)
    finally:
        await cluster.close()
        await db.close()


async def test_a_transaction_after_its_idle_connections_were_ended_runs_on_a_live_one(db: Database) -> None:
    """The database ended every idle session of the pool (a restart, a fail-over, an operator's
    pg_terminate_backend): the next transaction finds its connection dead at its first statement,
    before its COMMIT went out (psycopg reads the FATAL the backend sent as it closed), so it is
    run again on a new connection and never says it may or may not have been applied."""
    await db.fetch("warm", "SELECT 1")  # the pool's connections are open and idle
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (db.application_name,),
        ).fetchone()
    assert ended and ended[0] >= 1
    await asyncio.sleep(0.2)  # the FATAL and the close reach this side

    async def body(conn: Conn) -> None:
        async with transaction(conn):
            await conn.execute(_in(db, "INSERT INTO {s}.t VALUES (1)"))

    await db.run("insert", body, retry_unknown_commit=False)
    rows = await db.fetch("count", _in(db, "SELECT count(*) FROM {s}.t"))
    assert rows == [(1,)]
