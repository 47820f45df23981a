"""``transaction`` (wiggle/_storage/postgres/db.py): one pipelined transaction, its round trips
counted, and every way out of it that does not commit leaving nothing behind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from pg import TEST_DATABASE_URL
from psycopg import _pipeline_base, pq, sql

from wiggle._storage.postgres.db import Conn, transaction

pytestmark = pytest.mark.postgres


@pytest.fixture
async def conn(pg_schema: str) -> AsyncIterator[Conn]:  # noqa: F811
    c = await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True)
    await c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
    await c.execute("CREATE TABLE t (id int PRIMARY KEY)")
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every Sync the pipelines send (one round trip each)."""
    sent: list[str] = []
    base = _pipeline_base.BasePipeline
    for name in ("_sync_gen", "_exit_gen"):
        original = getattr(base, name)

        def counted(self: object, _original: object = original, _name: str = name) -> object:
            sent.append(_name)
            return (yield from _original(self))  # type: ignore[operator]

        monkeypatch.setattr(base, name, counted)
    yield sent


async def _ids(conn: Conn) -> list[int]:
    cur = await conn.execute("SELECT id FROM t ORDER BY id")
    return [r[0] for r in await cur.fetchall()]


async def test_a_body_that_syncs_once_costs_two_round_trips(conn: Conn, syncs: list[str]) -> None:
    async with transaction(conn) as pipeline:
        cur = await conn.execute("SELECT count(*) FROM t")
        await pipeline.sync()
        assert (await cur.fetchall()) == [(0,)]
        await conn.execute("INSERT INTO t VALUES (1)")
    assert len(syncs) == 2  # psycopg's conn.transaction() inside conn.pipeline() sends five
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert await _ids(conn) == [1]


async def test_an_error_in_the_body_commits_nothing(conn: Conn) -> None:
    with pytest.raises(RuntimeError):
        async with transaction(conn) as pipeline:
            await conn.execute("INSERT INTO t VALUES (1)")
            await pipeline.sync()
            await conn.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("the body failed")
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert await _ids(conn) == []


async def test_a_failing_write_commits_nothing(conn: Conn) -> None:
    await conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(psycopg.errors.UniqueViolation):
        async with transaction(conn):
            await conn.execute("INSERT INTO t VALUES (2)")
            await conn.execute("INSERT INTO t VALUES (1)")  # fails at the closing sync
            await conn.execute("INSERT INTO t VALUES (3)")
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert await _ids(conn) == [1]


async def test_a_failing_statement_at_a_sync_commits_nothing(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        async with transaction(conn) as pipeline:
            await conn.execute("INSERT INTO t VALUES (5)")
            await conn.execute("SELECT * FROM no_such_table")
            await pipeline.sync()
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert await _ids(conn) == []
