"""The schema dropped under a running server (an outside trial): /readyz said "database
unavailable: database error in readiness: relation ... does not exist" though the database was
up, every client call was INTERNAL with no incident id, and the log had a traceback a second.
Now /readyz and every call say the schema is missing or not migrated and what to do
(FAILED_PRECONDITION), and the log says it once a minute, without a traceback."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import psycopg
import pytest
from pg import TEST_DATABASE_URL, async_temp_schema
from ports import free_port
from psycopg import sql

from wiggle.errors import FailedPrecondition
from wiggle.testing import EmbeddedServer

pytestmark = pytest.mark.postgres


async def test_a_dropped_schema_is_said_as_such(caplog: pytest.LogCaptureFixture) -> None:
    http_port = free_port()
    async with async_temp_schema() as schema:
        async with EmbeddedServer(
            database_url=TEST_DATABASE_URL, database_schema=schema, http_port=http_port
        ) as server:
            caplog.set_level(logging.INFO)
            with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            await asyncio.sleep(3.5)  # the clock duties ran 3 times, the lag check, the listener
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{http_port}/readyz") as answer:
                    status, body = answer.status, await answer.json()
            assert status == 503
            detail = body["detail"]
            assert f"database schema {schema!r} is missing or not migrated" in detail, detail
            assert "wiggle migrate" in detail and "database unavailable" not in detail, detail
            with pytest.raises(FailedPrecondition) as caught:
                await server.client.list()
            assert f"database schema {schema!r} is missing or not migrated" in str(caught.value)
            assert f"wiggle migrate --database-schema {schema}" in str(caught.value)
    said = [r for r in caplog.records if "is missing or not migrated" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert not [r for r in caplog.records if r.exc_info], [
        r.getMessage() for r in caplog.records if r.exc_info
    ]
    assert not [r for r in caplog.records if "unexpected database error" in r.getMessage()]
    assert not [r for r in caplog.records if "clock duties failed" in r.getMessage()]
