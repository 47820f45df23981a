"""PostgreSQL for the tests: a fresh, uniquely named schema per use, dropped afterwards.

Every test run (and every test) gets its own schema ``wiggle_test_<pid>_<random>`` in database
``test``, so two runs at once never see each other's rows, locks or notifications. PostgreSQL
being unreachable is a failure, never a skip: a green suite must mean the Postgres store was tested.

Override the server with WIGGLE_TEST_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql

__all__ = [
    "TEST_DATABASE_URL",
    "new_schema_name",
    "create_schema",
    "drop_schema",
    "temp_schema",
    "async_temp_schema",
    "pg_schema",
]

TEST_DATABASE_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def new_schema_name() -> str:
    """A schema name no other test run uses."""
    return f"wiggle_test_{os.getpid()}_{os.urandom(4).hex()}"


def _connect() -> psycopg.Connection:
    try:
        return psycopg.connect(TEST_DATABASE_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is unreachable at {TEST_DATABASE_URL} ({exc}); the postgres tests need it. "
            "Start it (pg_ctlcluster --skip-systemctl-redirect 15 main start) or set WIGGLE_TEST_DATABASE_URL."
        ) from exc


def create_schema(name: str | None = None) -> str:
    """Create an empty schema (raises if PostgreSQL is down); returns its name."""
    name = name or new_schema_name()
    with _connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


def drop_schema(name: str) -> None:
    """Drop a test schema and everything in it."""
    with _connect() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextlib.contextmanager
def temp_schema() -> Iterator[str]:
    """A fresh schema for the duration of the block."""
    name = create_schema()
    try:
        yield name
    finally:
        drop_schema(name)


@contextlib.asynccontextmanager
async def async_temp_schema() -> AsyncIterator[str]:
    """``temp_schema`` for async fixtures (the DDL is quick; it runs synchronously)."""
    with temp_schema() as name:
        yield name


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A pytest fixture: the name of a fresh schema, dropped after the test (import it into a test module)."""
    with temp_schema() as name:
        yield name
