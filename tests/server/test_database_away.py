"""A server whose database is away says so in a way a client can act on: UNAVAILABLE, and that
nothing of the call was applied (``Unavailable.not_applied``: trailing metadata on a unary call,
``RpcError.not_applied`` on a stream), so any call may be made again, here or on another server
(docs/failover.md#a-server-without-its-database). A real PostgreSQL behind a proxy the test cuts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from db_proxy import DatabaseProxy
from pg import TEST_DATABASE_URL, async_temp_schema
from ports import free_port

from wiggle import AsyncClient, Client
from wiggle._server.config import ServerConfig
from wiggle.errors import Unavailable
from wiggle.testing import EmbeddedServer
from wiggle.workflow import Workflow

pytestmark = pytest.mark.postgres


def one(ctx: dict[str, object]) -> dict[str, object]:
    return ctx


FLOW = Workflow.define("away").step(one).build()


@pytest.fixture
async def cut() -> AsyncIterator[tuple[EmbeddedServer, DatabaseProxy]]:
    """An embedded server on PostgreSQL through a proxy the test may cut, FLOW registered."""
    async with DatabaseProxy(5432) as proxy, async_temp_schema() as schema:
        url = TEST_DATABASE_URL.replace(":5432/", f":{proxy.port}/")
        async with EmbeddedServer(database_url=url, database_schema=schema, pool_size=2) as server:
            await server.client.register(FLOW)
            yield server, proxy


async def test_calls_say_nothing_was_applied(cut: tuple[EmbeddedServer, DatabaseProxy]) -> None:
    server, proxy = cut
    before = await server.client.start("away", {})
    proxy.down()
    client = AsyncClient(server.target, patience=0)
    try:
        # The pool's connections died idle: a call that finds one first cannot tell whether its
        # COMMIT reached the database (pipeline mode sends it with the statements), and says
        # so; this read meets them and the pool drops them. Every call after it waits for a
        # connection that never comes, so nothing of it was applied.
        with pytest.raises(Unavailable):
            await client.get(before)
        for call in (
            lambda: client.start("away", {}),  # not safe to repeat by itself: said not applied
            lambda: client.get(before),
            lambda: client.signal(before, "go", {}),
        ):
            with pytest.raises(Unavailable, match="database unavailable") as raised:
                await call()
            assert raised.value.not_applied, raised.value
    finally:
        await client.close()


async def test_blocking_client_reads_it_too(cut: tuple[EmbeddedServer, DatabaseProxy]) -> None:
    server, proxy = cut
    before = await server.client.start("away", {})
    proxy.down()

    def blocking() -> Unavailable:
        with Client(server.target, patience=0) as client:
            with pytest.raises(Unavailable):
                client.get(before)  # meets the dead connections (the test above)
            with pytest.raises(Unavailable, match="database unavailable") as raised:
                client.get(before)
            return raised.value

    assert (await asyncio.to_thread(blocking)).not_applied


async def test_a_start_not_applied_is_made_again(cut: tuple[EmbeddedServer, DatabaseProxy]) -> None:
    """A start without a request id, answered UNAVAILABLE with nothing applied, is made again
    while the client's patience lasts, and starts exactly one instance once the database is back."""
    server, proxy = cut
    proxy.down()
    client = AsyncClient(server.target)
    try:
        async with AsyncClient(server.target, patience=0) as impatient:
            with pytest.raises(Unavailable):  # meets the dead connections (the first test)
                await impatient.get("wi-0000000000000000000000000")
        starting = asyncio.ensure_future(client.start("away", {"once": True}))
        await asyncio.sleep(6)  # the first try waits 5 s for a connection and fails, not applied
        assert not starting.done()
        proxy.up()
        started = await asyncio.wait_for(starting, 30)
        listed, _ = await client.list(workflow="away")
        assert [i.instance_id for i in listed if i.context == {"once": True}] == [started.instance_id]
    finally:
        await client.close()


@pytest.mark.usefixtures("no_tracing")  # starts on the start stream, as without a TracerProvider
async def test_the_start_stream_moves_to_the_next_server(cut: tuple[EmbeddedServer, DatabaseProxy]) -> None:
    """A client's start stream answered UNAVAILABLE by the cut server is ended, and the start made
    again opens one on the next server (here an in-memory one: where the start landed shows).
    The other server comes up only after the first try went out, so that try is on the cut
    server's stream; kept on that stream, the start would fail there until its patience ran out."""
    server, proxy = cut
    proxy.down()
    async with AsyncClient(server.target, patience=0) as impatient:
        with pytest.raises(Unavailable):  # meets the dead connections (the first test)
            await impatient.get("wi-0000000000000000000000000")
    port = free_port()
    async with AsyncClient([server.target, f"127.0.0.1:{port}"], patience=30) as both:
        starting = asyncio.ensure_future(both.start("away", {}))
        await asyncio.sleep(1)
        async with EmbeddedServer(ServerConfig(port=port)) as other:
            await other.client.register(FLOW)
            started = await asyncio.wait_for(starting, 40)
            assert (await other.client.get(started)).instance_id == started.instance_id
