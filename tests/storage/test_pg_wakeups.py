"""Wake-ups wanted (wiggle/_storage/postgres/wakeups.py, migration 0022): a server node sends the
work and finish NOTIFYs another node waits for, and no others, and never loses a wake-up for it.
Each test gets its own schema (tests/pg.py); PostgreSQL being down fails the suite, never skips it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from layers import postgres_nodes
from pg import TEST_DATABASE_URL, listening, wanting
from psycopg import sql

from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres.cluster import Cluster
from wiggle._storage.postgres.wakeups import Wakeups

pytestmark = pytest.mark.postgres

ONE_STEP = WorkflowDefinition(
    name="linear",
    start_node="s0",
    nodes=(Node(id="s0", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
)


@pytest.fixture
async def nodes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Instances, Instances]]:
    """Server nodes a and b on a fresh schema, each knowing the other filters its NOTIFYs; they
    count their peers (and delete unwanted rows) every 0.1 s."""
    monkeypatch.setattr(Cluster, "PEER_CHECK_SECONDS", 0.1)
    monkeypatch.setattr(Wakeups, "KEEP_SECONDS", 0.2)
    async with postgres_nodes(2, ONE_STEP) as (stores, (a, b)):
        one, two = stores
        await until(lambda: one.cluster.peers == 1 and one.cluster.filtering, "a counts b")
        await until(lambda: two.cluster.peers == 1 and two.cluster.filtering, "b counts a")
        yield a, b


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: {what}")


async def sent(server: Instances, what: str) -> None:
    """Until ``server``'s node has sent every NOTIFY posted so far: they go from a task of its own
    (cluster.py ``_send``), which a loaded machine can run after the test has begun to listen for
    the next ones; a listener opened after this hears none of them."""
    cluster = server.store.cluster
    await until(lambda: not cluster._pending and (cluster._sender is None or cluster._sender.done()), what)


async def work_round(server: Instances) -> str:
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


async def rows_become(schema: str, expected: set[tuple[str, str, str]]) -> None:
    """Until the wakeups table holds ``expected`` (a row's DELETE commits a moment after its node
    stops counting it); AssertionError with what it holds if not within 5 s."""
    for _ in range(500):
        held = await rows(schema)
        if held == expected:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: the wakeups rows are {sorted(held)}, not {sorted(expected)}")


async def test_a_node_sends_only_the_notifies_another_node_waits_for(
    nodes: tuple[Instances, Instances],
) -> None:
    a, b = nodes
    channels = (a.store.cluster.channel_work, a.store.cluster.channel_finished)
    async with listening(*channels) as drain:
        sent = a.store.cluster.notifies_sent
        await work_round(a)  # nobody waits on b: a sends nothing, not even a transaction
        assert await drain() == []
        assert a.store.cluster.notifies_sent == sent

        async with wanting(b.store, "work", ["linear"]):  # a poll of b waits for steps of "linear"
            await until(lambda: ("work", "linear") in a.store.cluster.wanted, "a hears of b's row")
            assert await drain(1) == [f"{a.store.node_id}:linear"]  # a's catch-up: b looks again
            instance = await work_round(a)
            assert await drain(1) == [f"{a.store.node_id}:linear"]  # its work, not its finish
        await until(lambda: b.store.cluster.wakeups.written() == {("node", "")}, "b withdraws its row")
        await until(lambda: not a.store.cluster.wanted, "a counts b's rows")
        async with wanting(b.store, "finished", [""]):  # a call of b waits for an instance
            await until(lambda: ("finished", "") in a.store.cluster.wanted, "a hears of b's row")
            assert await drain(1) == [f"{a.store.node_id}:"]  # a's catch-up: b's waiters read again
            instance = await work_round(a)
            assert await drain(1) == [f"{a.store.node_id}:{instance}"]
        await until(lambda: b.store.cluster.wakeups.written() == {("node", "")}, "b withdraws its row")
        await until(lambda: not a.store.cluster.wanted, "a counts b's rows")
        async with wanting(b.store, "work", ["other"]):  # a poll of b for another queue
            await until(lambda: ("work", "other") in a.store.cluster.wanted, "a hears of b's row")
            assert await drain(1) == [f"{a.store.node_id}:other"]
            await work_round(a)
            assert await drain() == []


async def test_a_step_a_poll_of_its_own_node_was_woken_for_is_not_told_to_the_others(
    nodes: tuple[Instances, Instances],
) -> None:
    """b waits for steps of "linear"; a poll of a is in the middle of its look (registered, not
    yet waiting, so no hand-off can reach it) when a starts an instance: that poll is woken and
    claims the step, and a tells b nothing, whose poll would only have claimed in vain. Had the
    woken poll left without looking, its wake-up would have gone to b after all."""
    a, b = nodes
    notifier = a.store.notifier
    async with listening(a.store.cluster.channel_work) as drain, wanting(b.store, "work", ["linear"]):
        await until(lambda: ("work", "linear") in a.store.cluster.wanted, "a hears of b's row")
        assert await drain(1) == [f"{a.store.node_id}:linear"]  # a's catch-up
        with notifier.watch_work(["linear"]) as waiter:
            view = await a.start("linear", "", {}, "")
            assert waiter.woken and waiter.woken_for == "linear"
            assert await notifier.wait(waiter, 1.0)  # the poll acts on it: it looks again
            (claimed,) = await a.claim("w", ["linear"], 1)
            assert claimed.token.instance_id == view.instance.id
        await sent(a, "a sends what it posted")
        assert await drain() == []
        with notifier.watch_work(["linear"]) as waiter:
            await a.start("linear", "", {}, "")
            assert waiter.woken
        # left without acting on it (a poll cancelled by its worker): b is told
        assert await drain(1) == [f"{a.store.node_id}:linear"]


async def test_a_step_given_back_is_told_to_the_others_though_a_poll_here_was_woken(
    nodes: tuple[Instances, Instances],
) -> None:
    """A step given back (a worker that cannot run it, or a retry's backoff) is READY again but
    not due yet: the poll of this node that is woken for it may be the very one that gave it
    back, so the other nodes are told whatever the local wake-up."""
    a, b = nodes
    notifier = a.store.notifier
    async with listening(a.store.cluster.channel_work) as drain, wanting(b.store, "work", ["linear"]):
        await until(lambda: ("work", "linear") in a.store.cluster.wanted, "a hears of b's row")
        assert await drain(1) == [f"{a.store.node_id}:linear"]  # a's catch-up
        await a.start("linear", "", {}, "")
        assert await drain(1) == [f"{a.store.node_id}:linear"]  # nobody of a looked: b is told
        (claimed,) = await a.claim("w", ["linear"], 1)
        with notifier.watch_work(["linear"]) as waiter:
            await a.fail(claimed.token.id, "w", "no handler for it here", True, release=True)
            assert waiter.woken and await notifier.wait(waiter, 1.0)
            assert await drain(1) == [f"{a.store.node_id}:linear"]


@pytest.mark.parametrize("woken_by", ["its own node", "the other node's catch-up"])
async def test_a_row_written_after_the_work_was_committed_still_wakes_the_poll(
    nodes: tuple[Instances, Instances], monkeypatch: pytest.MonkeyPatch, woken_by: str
) -> None:
    """The race the rows' design closes (wakeups.py, "No lost wake-up"): b's poll begins to wait,
    a commits work and sends no NOTIFY (b's row is not written yet), then b's row is committed.
    b's poll is woken, looks again and claims the step, long before its wait ends: by b itself
    once the row is committed, and (should that not happen) by a's catch-up NOTIFY once a hears
    of the row."""
    a, b = nodes
    if woken_by != "its own node":
        monkeypatch.setattr(b.store.cluster.wakeups, "wake", lambda kind, subjects: None)
    written = asyncio.Event()
    go_on = asyncio.Event()
    write = Wakeups._write

    async def slow_write(self: Wakeups, keys: list[tuple[str, str]]) -> None:
        if self is b.store.cluster.wakeups:
            await go_on.wait()
        await write(self, keys)
        if self is b.store.cluster.wakeups:
            written.set()

    monkeypatch.setattr(Wakeups, "_write", slow_write)
    async with listening(a.store.cluster.channel_work) as drain:
        poll = asyncio.ensure_future(b.poll("w", ["linear"], 1, 30.0))
        await until(lambda: bool(b.store.cluster.wakeups._writing), "b's poll waits, its row being written")
        view = await a.start("linear", "", {}, "")
        assert await drain() == []  # no row of b yet: a sent nothing
        go_on.set()
        await asyncio.wait_for(written.wait(), 5.0)
        (claimed,) = await asyncio.wait_for(poll, 10.0)  # not its 30 s wait
    assert claimed.token.instance_id == view.instance.id


async def test_rows_go_once_nobody_waits_and_come_back_with_the_next_wait(
    nodes: tuple[Instances, Instances],
) -> None:
    a, b = nodes
    assert await rows(a.store.schema) == {(a.store.node_id, "node", ""), (b.store.node_id, "node", "")}
    assert await b.poll("w", ["linear"], 1, 0.3) == []  # waits, and writes its row
    assert (b.store.node_id, "work", "linear") in await rows(a.store.schema)
    # nobody waits any more: deleted KEEP_SECONDS later, at a count (the node forgets the row as
    # its DELETE begins, so the table is what to wait for)
    await until(lambda: not b.store.cluster.wakeups.written() - {("node", "")}, "b withdraws its row")
    await rows_become(a.store.schema, {(a.store.node_id, "node", ""), (b.store.node_id, "node", "")})
    await until(lambda: not a.store.cluster.wanted, "a counts b's rows")
    async with listening(a.store.cluster.channel_work) as drain:
        await work_round(a)
        assert await drain() == []
        poll = asyncio.ensure_future(b.poll("w", ["linear"], 1, 30.0))
        await until(lambda: ("work", "linear") in b.store.cluster.wakeups.written(), "b's row again")
        view = await a.start("linear", "", {}, "")
        (claimed,) = await asyncio.wait_for(poll, 10.0)
        assert claimed.token.instance_id == view.instance.id
        assert f"{a.store.node_id}:linear" in await drain(1)


async def test_while_a_node_that_does_not_filter_is_connected_every_notify_goes_out(
    nodes: tuple[Instances, Instances],
) -> None:
    """A node of an older version writes no rows and waits for every NOTIFY: it shows as a peer
    without a ``node`` row, and the others then send all their NOTIFYs."""
    a, b = nodes
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DELETE FROM {}.wakeups WHERE node = %s").format(sql.Identifier(a.store.schema)),
            (b.store.node_id,),
        )
    await until(lambda: not a.store.cluster.filtering, "a counts b as a node that does not filter")
    async with listening(a.store.cluster.channel_work, a.store.cluster.channel_finished) as drain:
        instance = await work_round(a)
        assert sorted(await drain(2)) == sorted(
            [f"{a.store.node_id}:linear", f"{a.store.node_id}:{instance}"]
        )


async def test_the_clock_leader_deletes_the_rows_of_nodes_that_are_gone(
    nodes: tuple[Instances, Instances],
) -> None:
    a, b = nodes
    await a.run_clock_duties(0)  # a leads
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("INSERT INTO {}.wakeups VALUES ('killed0000ab', 'work', 'linear')").format(
                sql.Identifier(a.store.schema)
            )
        )
    for _ in range(100):
        if all(node_id != "killed0000ab" for node_id, _, _ in await rows(a.store.schema)):
            break
        await asyncio.sleep(0.05)
    assert await rows(a.store.schema) == {(a.store.node_id, "node", ""), (b.store.node_id, "node", "")}


async def test_a_node_whose_rows_were_lost_writes_them_again_when_its_listener_reconnects(
    nodes: tuple[Instances, Instances],
) -> None:
    """A fail-over to a standby that had not replayed b's rows loses them while b believes they
    are there (a would then send b nothing). The outage breaks b's listener: reconnecting, b
    forgets its rows and writes its own ``node`` row again (meanwhile a counts b as a node that
    does not filter, and sends everything), and its next wait writes its row again."""
    a, b = nodes
    schema = a.store.schema
    async with wanting(b.store, "work", ["linear"]):
        pass
    # b's listener says hello once it is back, after it wrote its node row: a, hearing it, sends
    # everything until its next count. A count of a's between b's row and b's hello would let the
    # test go on with a about to stop filtering, so it waits for a count after the hello.
    hellos: list[str] = []
    dispatch = a.store.cluster.dispatch

    def heard(channel: str, payload: str) -> None:
        if channel == a.store.cluster.channel_peers and payload == b.store.node_id:
            hellos.append(payload)
        dispatch(channel, payload)

    a.store.cluster.dispatch = heard  # type: ignore[method-assign]
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DELETE FROM {}.wakeups WHERE node = %s").format(sql.Identifier(schema)),
            (b.store.node_id,),
        )
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"{b.store.application_name}:listen",),
        )
    await until(lambda: b.store.cluster.wakeups.written() == {("node", "")}, "b forgets its rows")
    for _ in range(500):
        if (b.store.node_id, "node", "") in await rows(schema):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("b did not write its node row again")
    await until(lambda: bool(hellos), "a hears b's hello")
    await until(lambda: a.store.cluster.filtering and not a.store.cluster.wanted, "a counts b again")
    await sent(a, "a's NOTIFYs of the outage sent")  # (its catch-ups, say) before a listener hears
    async with listening(a.store.cluster.channel_work) as drain:
        await work_round(a)
        assert await drain() == []  # b waits for nothing
        async with wanting(b.store, "work", ["linear"]):
            await until(lambda: ("work", "linear") in a.store.cluster.wanted, "a hears of b's row")
            assert await drain(1) == [f"{a.store.node_id}:linear"]  # the catch-up
            await work_round(a)
            assert await drain(1) == [f"{a.store.node_id}:linear"]


class _OneRead:
    """A listener connection whose one read brings two notifications at once (one packet), as
    psycopg's ``notifies()`` yields them: closed in the middle of the batch, the rest is lost."""

    def __init__(self, payloads: list[str]) -> None:
        self.payloads = payloads

    def notifies(self, timeout: float | None = None) -> AsyncIterator[psycopg.Notify]:
        async def read() -> AsyncIterator[psycopg.Notify]:
            batch, self.payloads = self.payloads, []
            for payload in batch:
                yield psycopg.Notify("s_work", payload, 1)

        return read()

    async def close(self) -> None:
        pass


async def test_the_listener_dispatches_every_notification_of_a_read_when_its_count_is_due() -> None:
    """The listener's peer count falls due while it dispatches a read of two NOTIFYs: both are
    dispatched before the count (it once left the read after the first, and psycopg dropped the
    second: a lost wake-up, seen as a poll that waited out its wait)."""
    cluster = Cluster("s", None, None)  # type: ignore[arg-type]
    cluster.PEER_CHECK_SECONDS = 0.0  # the count is due at once, during the first dispatch
    seen: list[str] = []
    cluster.dispatch = lambda channel, payload: seen.append(payload)  # type: ignore[method-assign]

    async def count_peers(conn: object, hello: bool = False) -> None:
        raise asyncio.CancelledError  # the count: where this test stops the listener

    cluster.count_peers = count_peers  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await cluster.listen_forever(_OneRead(["other:orders", "other:invoices"]))  # type: ignore[arg-type]
    assert seen == ["other:orders", "other:invoices"]


async def test_a_steady_stream_of_notifications_does_not_postpone_the_peer_count(
    nodes: tuple[Instances, Instances], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOTIFYs every 10 ms for a second, faster than the listener's count (every 0.1 s here):
    it still counts its peers (psycopg's ``notifies()`` ends at its deadline after the read in
    hand), and so still learns who joined, left or wants what."""
    _, b = nodes
    cluster = b.store.cluster
    counted = 0
    count_peers = cluster.count_peers

    async def counting(conn: object, hello: bool = False) -> None:
        nonlocal counted
        counted += 1
        await count_peers(conn, hello)  # type: ignore[arg-type]

    monkeypatch.setattr(cluster, "count_peers", counting)
    loop = asyncio.get_running_loop()
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        began = loop.time()
        while loop.time() - began < 1.0:
            await conn.execute("SELECT pg_notify(%s, %s)", (cluster.channel_work, "elsewhere:no-queue"))
            await asyncio.sleep(0.01)
    assert counted >= 3, f"the listener counted its peers {counted} times in a second of NOTIFYs"
