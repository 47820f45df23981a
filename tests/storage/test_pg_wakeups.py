"""Wake-ups wanted (wiggle/_storage/postgres/wakeups.py, migration 0022): a server node sends the
work and finish NOTIFYs another node waits for, and no others, and never loses a wake-up for it.
Each test gets its own schema (tests/pg.py); PostgreSQL being down fails the suite, never skips it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from pg import TEST_DATABASE_URL, pg_schema, wanting  # noqa: F401
from psycopg import sql

from wiggle._engine.engine import Engine, EngineConfig
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.cluster import Cluster
from wiggle._storage.postgres.wakeups import Wakeups

pytestmark = pytest.mark.postgres

ONE_STEP = WorkflowDefinition(
    name="linear",
    start_node="s0",
    nodes=(Node(id="s0", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
)


class ServerNode(Instances):
    """One server node: the instance layer over a PostgresStore, the store's attributes read through."""

    store: PostgresStore

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture
async def open_node(pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Any]]:  # noqa: F811
    """Open server nodes on this test's schema that count their peers (and delete unwanted rows)
    every 0.1 s; all closed at the end."""
    monkeypatch.setattr(Cluster, "PEER_CHECK_SECONDS", 0.1)
    monkeypatch.setattr(Wakeups, "KEEP_SECONDS", 0.2)
    nodes: list[ServerNode] = []

    async def factory() -> ServerNode:
        store = PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=4)
        server = ServerNode(store, Engine(EngineConfig(lease_millis=60_000)))
        await server.open()
        nodes.append(server)
        return server

    yield factory
    for server in nodes:
        await server.close()


@contextlib.asynccontextmanager
async def listening(*channels: str) -> AsyncIterator[Callable[[], Any]]:
    """A plain LISTEN connection (not a Wiggle node); yields 'drain its notifications'."""
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        for channel in channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

        async def drain() -> list[str]:
            async with contextlib.aclosing(conn.notifies(timeout=0.3)) as notes:
                return [n.payload async for n in notes]

        yield drain


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: {what}")


async def two_nodes(open_node: Callable[..., Any]) -> tuple[ServerNode, ServerNode]:
    """Nodes a and b, each knowing the other filters its NOTIFYs."""
    a = await open_node()
    b = await open_node()
    await a.register(ONE_STEP)
    await until(lambda: a.cluster.peers == 1 and a.cluster.filtering, "a counts b")
    await until(lambda: b.cluster.peers == 1 and b.cluster.filtering, "b counts a")
    return a, b


async def work_round(server: ServerNode) -> str:
    """Start a one-step instance and run it to the end on ``server``: READY, claimed, finished."""
    view = await server.start("linear", "", {}, "")
    (claimed,) = await server.claim("w", ["linear"], 1)
    await server.complete(claimed.token.id, "w", {}, None)
    return str(view.instance.id)


async def rows(schema: str) -> set[tuple[str, str, str]]:
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT node, kind, subject FROM {}.wakeups").format(sql.Identifier(schema))
        )
        return {tuple(row) for row in await cur.fetchall()}  # type: ignore[misc]


async def test_a_node_sends_only_the_notifies_another_node_waits_for(open_node: Callable[..., Any]) -> None:
    a, b = await two_nodes(open_node)
    channels = (a.cluster.channel_work, a.cluster.channel_finished)
    async with listening(*channels) as drain:
        sent = a.cluster.notifies_sent
        await work_round(a)  # nobody waits on b: a sends nothing, not even a transaction
        assert await drain() == []
        assert a.cluster.notifies_sent == sent

        async with wanting(b, "work", ["linear"]):  # a poll of b waits for steps of "linear"
            await until(lambda: ("work", "linear") in a.cluster.wanted, "a hears of b's row")
            assert await drain() == [f"{a.node_id}:linear"]  # a's catch-up: b looks again
            instance = await work_round(a)
            assert await drain() == [f"{a.node_id}:linear"]  # its work, not its finish
        await until(lambda: b.cluster.wakeups.written() == {("node", "")}, "b withdraws its row")
        await until(lambda: not a.cluster.wanted, "a counts b's rows")
        async with wanting(b, "finished", [""]):  # a call of b waits for an instance
            await until(lambda: ("finished", "") in a.cluster.wanted, "a hears of b's row")
            assert await drain() == [f"{a.node_id}:"]  # a's catch-up: b's waiters read again
            instance = await work_round(a)
            assert await drain() == [f"{a.node_id}:{instance}"]
        await until(lambda: b.cluster.wakeups.written() == {("node", "")}, "b withdraws its row")
        await until(lambda: not a.cluster.wanted, "a counts b's rows")
        async with wanting(b, "work", ["other"]):  # a poll of b for another queue
            await until(lambda: ("work", "other") in a.cluster.wanted, "a hears of b's row")
            assert await drain() == [f"{a.node_id}:other"]
            await work_round(a)
            assert await drain() == []


@pytest.mark.parametrize("woken_by", ["its own node", "the other node's catch-up"])
async def test_a_row_written_after_the_work_was_committed_still_wakes_the_poll(
    open_node: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, woken_by: str
) -> None:
    """The race the rows' design closes (wakeups.py, "No lost wake-up"): b's poll begins to wait,
    a commits work and sends no NOTIFY (b's row is not written yet), then b's row is committed.
    b's poll is woken, looks again and claims the step, long before its wait ends: by b itself
    once the row is committed, and (should that not happen) by a's catch-up NOTIFY once a hears
    of the row."""
    a, b = await two_nodes(open_node)
    if woken_by != "its own node":
        monkeypatch.setattr(b.cluster.wakeups, "wake", lambda kind, subjects: None)
    written = asyncio.Event()
    go_on = asyncio.Event()
    write = Wakeups._write

    async def slow_write(self: Wakeups, keys: list[tuple[str, str]]) -> None:
        if self is b.cluster.wakeups:
            await go_on.wait()
        await write(self, keys)
        if self is b.cluster.wakeups:
            written.set()

    monkeypatch.setattr(Wakeups, "_write", slow_write)
    async with listening(a.cluster.channel_work) as drain:
        poll = asyncio.ensure_future(b.poll("w", ["linear"], 1, 30.0))
        await until(lambda: bool(b.cluster.wakeups._writing), "b's poll waits, its row being written")
        view = await a.start("linear", "", {}, "")
        assert await drain() == []  # no row of b yet: a sent nothing
        go_on.set()
        await asyncio.wait_for(written.wait(), 5.0)
        (claimed,) = await asyncio.wait_for(poll, 10.0)  # not its 30 s wait
    assert claimed.token.instance_id == view.instance.id


async def test_rows_go_once_nobody_waits_and_come_back_with_the_next_wait(
    open_node: Callable[..., Any],
    pg_schema: str,  # noqa: F811
) -> None:
    a, b = await two_nodes(open_node)
    assert await rows(pg_schema) == {(a.node_id, "node", ""), (b.node_id, "node", "")}
    assert await b.poll("w", ["linear"], 1, 0.3) == []  # waits, and writes its row
    assert (b.node_id, "work", "linear") in await rows(pg_schema)
    # nobody waits any more: deleted KEEP_SECONDS later, at a count
    await until(lambda: not b.cluster.wakeups.written() - {("node", "")}, "b withdraws its row")
    assert await rows(pg_schema) == {(a.node_id, "node", ""), (b.node_id, "node", "")}
    await until(lambda: not a.cluster.wanted, "a counts b's rows")
    async with listening(a.cluster.channel_work) as drain:
        await work_round(a)
        assert await drain() == []
        poll = asyncio.ensure_future(b.poll("w", ["linear"], 1, 30.0))
        await until(lambda: ("work", "linear") in b.cluster.wakeups.written(), "b's row again")
        view = await a.start("linear", "", {}, "")
        (claimed,) = await asyncio.wait_for(poll, 10.0)
        assert claimed.token.instance_id == view.instance.id
        assert f"{a.node_id}:linear" in await drain()


async def test_while_a_node_that_does_not_filter_is_connected_every_notify_goes_out(
    open_node: Callable[..., Any],
    pg_schema: str,  # noqa: F811
) -> None:
    """A node of an older version writes no rows and waits for every NOTIFY: it shows as a peer
    without a ``node`` row, and the others then send all their NOTIFYs."""
    a, b = await two_nodes(open_node)
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DELETE FROM {}.wakeups WHERE node = %s").format(sql.Identifier(pg_schema)), (b.node_id,)
        )
    await until(lambda: not a.cluster.filtering, "a counts b as a node that does not filter")
    async with listening(a.cluster.channel_work, a.cluster.channel_finished) as drain:
        instance = await work_round(a)
        assert sorted(await drain()) == sorted([f"{a.node_id}:linear", f"{a.node_id}:{instance}"])


async def test_the_clock_leader_deletes_the_rows_of_nodes_that_are_gone(
    open_node: Callable[..., Any],
    pg_schema: str,  # noqa: F811
) -> None:
    a, b = await two_nodes(open_node)
    await a.run_clock_duties(0)  # a leads
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("INSERT INTO {}.wakeups VALUES ('killed0000ab', 'work', 'linear')").format(
                sql.Identifier(pg_schema)
            )
        )
    for _ in range(100):
        if all(node_id != "killed0000ab" for node_id, _, _ in await rows(pg_schema)):
            break
        await asyncio.sleep(0.05)
    assert await rows(pg_schema) == {(a.node_id, "node", ""), (b.node_id, "node", "")}
