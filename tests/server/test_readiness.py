"""/readyz answers within a second whatever the database does, with the real schema version.

The PostgreSQL server is reached through a TCP relay on loopback that the test can black-hole
(connections accepted, nothing relayed: a database host that stopped answering), and the pool can
be exhausted by holding every connection. Either way /readyz answers 503 (asked with a 3 s client
timeout: the answer must come back, it is not timed) and reports the schema version it last saw;
healthy, it reports the schema's real version (the newest migration), never 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest
from pg import TEST_DATABASE_URL
from ports import free_port

from wiggle._storage.postgres.migrations import migration_files
from wiggle.testing import EmbeddedServer

PROBE_TIMEOUT = aiohttp.ClientTimeout(total=3.0)


class Relay:
    """A TCP relay 127.0.0.1:<port> -> ``target``; ``blackhole()`` stops relaying anything."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.open = True
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if not self.open:
            return  # accepted, never answered
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.append(up_writer)
        for a, b in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pipe(a, b))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                while not self.open:  # black-holed: hold the bytes, send nothing
                    await asyncio.sleep(0.05)
                writer.write(data)
                await writer.drain()

    def blackhole(self) -> None:
        self.open = False

    def restore(self) -> None:
        self.open = True

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


async def readyz(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, Any]]:
    async with http.get(f"http://127.0.0.1:{port}/readyz", timeout=PROBE_TIMEOUT) as answer:
        return answer.status, await answer.json()


async def test_readyz_reports_the_real_schema_version_and_503_when_the_database_stops_answering(
    pg_schema: str,  # noqa: F811
) -> None:
    target = urlsplit(TEST_DATABASE_URL)
    relay = Relay(target.hostname or "127.0.0.1", target.port or 5432)
    await relay.start()
    newest = migration_files()[-1][0]
    http_port = free_port()
    try:
        server = EmbeddedServer(
            database_url=_via(TEST_DATABASE_URL, relay.port), database_schema=pg_schema, http_port=http_port
        )
        async with server, aiohttp.ClientSession() as http:
            status, body = await readyz(http, http_port)
            assert status == 200 and body["ready"], body
            assert body["schema_version"] == body["expected_schema_version"] == newest > 0, body
            relay.blackhole()
            status, body = await readyz(http, http_port)  # answered, though the database is silent
            assert status == 503 and not body["ready"], body
            assert "did not answer" in body["detail"], body
            assert body["schema_version"] == newest, body  # the last one seen, not a made-up 0
            assert (await http.get(f"http://127.0.0.1:{http_port}/healthz")).status == 200
            relay.restore()

            async def ready_again() -> bool:
                return (await readyz(http, http_port))[0] == 200

            for _ in range(200):
                if await ready_again():
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("/readyz did not turn 200 again once the database answered")
    finally:
        relay.restore()
        await relay.close()


async def test_readyz_answers_503_when_the_pool_has_no_free_connection(pg_schema: str) -> None:  # noqa: F811
    http_port = free_port()
    server = EmbeddedServer(
        database_url=TEST_DATABASE_URL, database_schema=pg_schema, http_port=http_port, pool_size=2
    )
    async with server, aiohttp.ClientSession() as http:
        assert (await readyz(http, http_port))[0] == 200
        pool = server.server.store.db.pool  # type: ignore[attr-defined]
        held = [await pool.getconn() for _ in range(pool.max_size)]
        try:
            status, body = await readyz(http, http_port)
            assert status == 503 and "did not answer" in body["detail"], body
            assert body["schema_version"] == body["expected_schema_version"] == migration_files()[-1][0]
        finally:
            for conn in held:
                await pool.putconn(conn)
        status, body = await readyz(http, http_port)
        assert status == 200 and body["ready"], body


async def test_readyz_on_the_memory_store_has_no_schema() -> None:
    http_port = free_port()
    async with EmbeddedServer(http_port=http_port), aiohttp.ClientSession() as http:
        status, body = await readyz(http, http_port)
    assert (status, body) == (200, {"ready": True, "detail": "ready"})
