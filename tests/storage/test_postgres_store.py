"""The PostgreSQL store against a real server: the store contract, restarts, and clustering.

Each test gets its own schema (tests/pg.py); PostgreSQL being down fails the suite, never skips it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import psycopg
import pytest
from db_proxy import DatabaseProxy
from pg import TEST_DATABASE_URL, listening, opened_stores, wanting
from psycopg import sql

from wiggle._engine.engine import Engine, EngineConfig
from wiggle._engine.records import ContextSet, TaskDone
from wiggle._engine.state import Changes, now_millis
from wiggle._model import ExecutionMode, Node, NodeKind, RetryPolicy, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.base import InstanceQuery
from wiggle._storage.postgres import PostgresStore, SchemaTooNew, migrate, migration_files
from wiggle._storage.postgres.cluster import Cluster
from wiggle._storage.postgres.db import vacuum_problem
from wiggle.errors import AlreadyFinished, ErrorCode, FailedPrecondition, NotFound, Unavailable

pytestmark = pytest.mark.postgres

LEASE = 60_000


def linear(name: str = "linear", steps: int = 3, retry: RetryPolicy | None = None) -> WorkflowDefinition:
    ids = [f"s{i}" for i in range(steps)]
    nodes = [
        Node(id=ids[i], kind=NodeKind.TASK, next=ids[i + 1] if i + 1 < steps else "end", retry=retry)
        for i in range(steps)
    ]
    return WorkflowDefinition(name=name, start_node=ids[0], nodes=(*nodes, Node(id="end", kind=NodeKind.END)))


def sleeper(millis: int) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="sleeper",
        start_node="nap",
        nodes=(
            Node(id="nap", kind=NodeKind.SLEEP, sleep_millis=millis, next="after"),
            Node(id="after", kind=NodeKind.TASK, next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    )


def forked() -> WorkflowDefinition:
    return WorkflowDefinition(
        name="forked",
        start_node="fork",
        nodes=(
            Node(id="fork", kind=NodeKind.FORK, branches=("a", "b"), join="join"),
            Node(id="a", kind=NodeKind.TASK, next="join"),
            Node(id="b", kind=NodeKind.TASK, next="join"),
            Node(id="join", kind=NodeKind.JOIN, fork="fork", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    )


def approval(timeout_millis: int = 0) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="approval",
        start_node="approve",
        nodes=(
            Node(id="approve", kind=NodeKind.USER_TASK, next="end", timeout_millis=timeout_millis),
            Node(id="end", kind=NodeKind.END),
        ),
    )


class ServerNode(Instances):
    """One server node: the instance layer over a PostgresStore, the store's attributes read through."""

    store: ServerNode

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def node(engine: Engine, url: str, schema: str, **kwargs: Any) -> ServerNode:
    """A ServerNode over a new (unopened) PostgresStore."""
    return ServerNode(PostgresStore(url, schema, **kwargs), engine)


@pytest.fixture
async def open_store(pg_schema: str) -> AsyncIterator[Callable[..., Any]]:  # noqa: F811
    """Open PostgresStores on this test's schema (several = several servers); all closed at the end."""

    def make(lease_millis: int = LEASE, **kwargs: Any) -> ServerNode:
        kwargs.setdefault("pool_size", 4)
        url = kwargs.pop("url", TEST_DATABASE_URL)
        return node(Engine(EngineConfig(lease_millis=lease_millis)), url, pg_schema, **kwargs)

    async with opened_stores(make) as factory:
        yield factory


@pytest.fixture
async def store(open_store: Callable[..., Any]) -> ServerNode:
    return await open_store()


# ---------------------------------------------------------------------- definitions


async def test_register_is_idempotent_and_not_found_names_what_is_missing(store: ServerNode) -> None:
    record, created = await store.register(linear())
    assert created
    again, created_again = await store.register(linear())
    assert not created_again and again.loaded.version == record.loaded.version
    assert again.registered_at == record.registered_at

    v2, created = await store.register(linear(steps=2))
    assert created and v2.loaded.version != record.loaded.version
    assert (await store.get_workflow("linear")).loaded.version == v2.loaded.version  # latest
    assert (await store.get_workflow("linear", record.loaded.version)).loaded.version == record.loaded.version
    listed = await store.list_workflows("linear")
    assert [r.loaded.version for r in listed] == [record.loaded.version, v2.loaded.version]
    assert await store.list_workflows("nope") == []

    with pytest.raises(NotFound, match="workflow 'nope' is not registered"):
        await store.get_workflow("nope")
    with pytest.raises(NotFound, match="workflow 'nope' is not registered"):
        await store.get_workflow("nope", "abc")
    with pytest.raises(NotFound, match="workflow 'linear' has no version 'abc'"):
        await store.get_workflow("linear", "abc")
    with pytest.raises(NotFound, match="instance wi-missing does not exist"):
        await store.get_instance("wi-missing")
    with pytest.raises(NotFound, match="token wi-missing.1 does not exist"):
        await store.complete("wi-missing.1", "w", {}, None)


async def test_definitions_are_shared_between_servers(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    record, _ = await a.register(linear())
    assert (await b.get_workflow("linear")).loaded.version == record.loaded.version
    _, created = await b.register(linear())
    assert not created
    view = await b.start("linear", "", {}, "")
    assert view.instance.version == record.loaded.version


# ---------------------------------------------------------------------- the token lifecycle


async def test_linear_workflow_start_claim_complete(store: ServerNode) -> None:
    await store.register(linear())
    view = await store.start("linear", "", {"n": 0}, "order-1")
    inst = view.instance
    assert inst.status == "RUNNING" and inst.correlation_id == "order-1"
    assert [(t.node_id, t.status, t.queue) for t in view.tokens] == [("s0", "READY", "linear")]

    for step in range(3):
        claimed = await store.claim("w1", ["linear"], 10)
        assert len(claimed) == 1
        c = claimed[0]
        assert c.token.node_id == f"s{step}" and c.token.status == "RUNNING" and c.token.lease_owner == "w1"
        assert c.token.attempt == 1 and c.context == {"n": step} and c.instance.id == inst.id
        assert c.execution_mode == "SERVER"
        assert await store.claim("w2", ["linear"], 10) == []  # leased: nobody else gets it
        status = await store.complete(c.token.id, "w1", {"n": step + 1}, None)
        assert status == ("COMPLETED" if step == 2 else "RUNNING")

    done = await store.get_instance(inst.id)
    assert done.instance.status == "COMPLETED" and done.instance.context == {"n": 3}
    assert done.instance.finished_at > 0 and done.tokens == []
    history = await store.history(inst.id)
    assert [(h.node_id, h.outcome) for h in history] == [
        ("s0", "COMPLETED"),
        ("s1", "COMPLETED"),
        ("s2", "COMPLETED"),
        ("end", "END"),
    ]
    assert history[0].worker_id == "w1"
    assert await store.claim("w1", ["linear"], 10) == []
    assert store.stats.transactions >= 7
    with pytest.raises(AlreadyFinished):
        await store.complete(c.token.id, "w1", {}, None)


async def test_retry_with_backoff_then_success(store: ServerNode) -> None:
    await store.register(linear(steps=1, retry=RetryPolicy.fixed(3, 0.3)))
    view = await store.start("linear", "", {}, "")
    (c,) = await store.claim("w", ["linear"], 1)
    before = now_millis()
    assert await store.fail(c.token.id, "w", "boom", True) == "RUNNING"
    (token,) = (await store.get_instance(view.instance.id)).tokens
    assert token.status == "READY" and token.attempt == 2 and token.last_error == "boom"
    assert token.available_at >= before + 300
    assert await store.claim("w", ["linear"], 1) == []  # not yet due
    next_ready = await store.next_ready_at(["linear", "other"])
    assert next_ready == token.available_at
    await asyncio.sleep(max(token.available_at - now_millis(), 0) / 1000 + 0.02)
    (again,) = await store.claim("w", ["linear"], 1)
    assert again.token.id == c.token.id and again.token.attempt == 2
    assert await store.complete(again.token.id, "w", {"ok": True}, None) == "COMPLETED"
    assert [h.outcome for h in await store.history(view.instance.id)] == ["RETRY", "COMPLETED", "END"]
    assert await store.next_ready_at(["linear"]) is None


async def test_claim_serves_the_oldest_due_token_across_queues(store: ServerNode) -> None:
    await store.register(linear("first", steps=1))
    await store.register(linear("second", steps=1))
    older = (await store.start("first", "", {}, "")).instance.id
    await asyncio.sleep(0.005)
    newer = (await store.start("second", "", {}, "")).instance.id
    assert await store.claim("w", ["nobody"], 5) == []
    (a,) = await store.claim("w", ["second", "first"], 1)
    (b,) = await store.claim("w", ["second", "first"], 1)
    assert (a.instance.id, b.instance.id) == (older, newer)
    assert (a.token.queue, b.token.queue) == ("first", "second")


async def test_last_attempt_fails_the_instance(store: ServerNode) -> None:
    await store.register(linear(steps=1, retry=RetryPolicy.none()))
    view = await store.start("linear", "", {}, "")
    (c,) = await store.claim("w", ["linear"], 1)
    assert await store.fail(c.token.id, "w", "bad input", False) == "FAILED"
    inst = (await store.get_instance(view.instance.id)).instance
    assert inst.status == "FAILED" and inst.error == "s0: bad input"


async def test_advance_run_applies_a_local_run_atomically(store: ServerNode) -> None:
    local = msgspec.structs.replace(linear(steps=3), execution_mode=ExecutionMode.LOCAL_ASYNC)
    await store.register(local)
    view = await store.start("linear", "", {"n": 0}, "")
    (c,) = await store.claim("w", ["linear"], 1)
    assert c.execution_mode == "LOCAL_ASYNC"
    with pytest.raises(FailedPrecondition, match="nothing was applied"):
        await store.advance_run(c.token.id, "w", [ContextSet("s1", {"n": 9})], False, "")
    outcome = await store.advance_run(
        c.token.id, "w", [ContextSet("s0", {"n": 1}), TaskDone("s1", {"n": 2}, [])], False, ""
    )
    assert outcome.applied_steps == 2 and outcome.token_status == "RUNNING" and outcome.lease_expires_at > 0
    (token,) = (await store.get_instance(view.instance.id)).tokens
    assert token.node_id == "s2" and token.status == "RUNNING" and token.local_run_owner == "w"
    assert (await store.get_instance(view.instance.id)).instance.context == {"n": 2}
    outcome = await store.advance_run(c.token.id, "w", [ContextSet("s2", {"n": 3})], True, "")
    assert outcome.instance_status == "COMPLETED"
    done = await store.get_instance(view.instance.id)
    assert done.instance.context == {"n": 3} and done.instance.steps == 3
    assert [h.node_id for h in await store.history(view.instance.id)] == ["s0", "s1", "s2", "end"]


async def test_wrong_owner_is_refused_and_changes_nothing(store: ServerNode) -> None:
    await store.register(linear())
    view = await store.start("linear", "", {"a": 1}, "")
    (c,) = await store.claim("owner", ["linear"], 1)
    before = await store.get_instance(view.instance.id)
    history = await store.history(view.instance.id)
    transactions = store.stats.transactions
    with pytest.raises(FailedPrecondition, match="leased to another worker, not 'thief'"):
        await store.complete(c.token.id, "thief", {"a": 2}, None)
    with pytest.raises(FailedPrecondition):
        await store.fail(c.token.id, "thief", "x", True)
    with pytest.raises(FailedPrecondition):
        await store.heartbeat(c.token.id, "thief")
    with pytest.raises(FailedPrecondition, match="not active"):
        await store.complete(f"{view.instance.id}.99", "owner", {}, None)
    after = await store.get_instance(view.instance.id)
    assert after.instance == before.instance and after.tokens == before.tokens
    assert await store.history(view.instance.id) == history
    assert store.stats.transactions == transactions
    status, expires = await store.heartbeat(c.token.id, "owner")
    assert status == "RUNNING" and expires >= c.token.lease_expires_at


async def test_lease_expiry_via_clock_duties(store: ServerNode) -> None:
    await store.register(linear(steps=1))
    view = await store.start("linear", "", {}, "")
    (c,) = await store.claim("gone", ["linear"], 1)
    assert await store.run_clock_duties(now_millis()) == 0  # not expired yet
    assert store.is_clock_leader
    assert await store.next_due_at() == c.token.lease_expires_at
    assert await store.run_clock_duties(c.token.lease_expires_at) == 1
    (token,) = (await store.get_instance(view.instance.id)).tokens
    assert token.status == "READY" and token.attempt == 2
    assert token.last_error == "lease expired (worker unreachable)"
    with pytest.raises(FailedPrecondition, match="READY, not RUNNING"):
        await store.complete(c.token.id, "gone", {}, None)
    assert await store.run_clock_duties(c.token.lease_expires_at + 10) == 0  # once
    (token,) = (await store.get_instance(view.instance.id)).tokens
    assert token.attempt == 2


async def test_sleep_fires_once_never_early_and_survives_a_restart(open_store: Callable[..., Any]) -> None:
    first = await open_store()
    await first.register(sleeper(400))
    view = await first.start("sleeper", "", {"x": 1}, "")
    (token,) = view.tokens
    assert token.status == "WAITING"
    due = token.available_at
    await first.close()  # a server restart

    second = await open_store()
    assert await second.run_clock_duties(due - 1) == 0  # never early
    assert (await second.get_instance(view.instance.id)).tokens[0].status == "WAITING"
    assert await second.next_due_at() == due
    await asyncio.sleep(max(due - now_millis(), 0) / 1000)
    fired_at = max(now_millis(), due)
    assert await second.run_clock_duties(fired_at) == 1
    (token,) = (await second.get_instance(view.instance.id)).tokens
    assert token.status == "READY" and token.node_id == "after"
    assert await second.run_clock_duties(fired_at + 1000) == 0  # exactly once
    assert [h.outcome for h in await second.history(view.instance.id)] == ["SLEPT"]
    (c,) = await second.claim("w", ["sleeper"], 5)
    assert c.context == {"x": 1}
    assert await second.complete(c.token.id, "w", None, None) == "COMPLETED"


async def test_fork_join_round_trips_branch_state(store: ServerNode) -> None:
    await store.register(forked())
    view = await store.start("forked", "", {"base": 1}, "")
    assert sorted(t.node_id for t in view.tokens) == ["a", "b"]
    claimed = await store.claim("w", ["forked"], 10)
    assert len(claimed) == 2
    for c in claimed:
        assert c.token.fork_stack and c.context == {"base": 1}
        assert await store.complete(c.token.id, "w", {"base": 1, c.token.node_id: True}, None)
    done = await store.get_instance(view.instance.id)
    assert done.instance.status == "COMPLETED"
    assert done.instance.context == {"base": 1, "a": True, "b": True}
    assert done.instance.joins == {}


async def test_user_task_completion_and_deadline(store: ServerNode) -> None:
    await store.register(approval())
    view = await store.start("approval", "", {"amount": 5}, "")
    assert view.tokens[0].status == "AWAITING"
    assert await store.run_clock_duties(now_millis()) == 0 and store.is_clock_leader
    assert await store.next_due_at() is None  # no deadline: nothing for the clock to do
    with pytest.raises(NotFound):
        await store.complete_user_task(view.instance.id, "nope", {})
    done = await store.complete_user_task(view.instance.id, "approve", {"ok": True})
    assert done.instance.status == "COMPLETED" and done.instance.context == {"amount": 5, "ok": True}
    with pytest.raises(FailedPrecondition):
        await store.complete_user_task(view.instance.id, "approve", {})

    await store.register(approval(timeout_millis=1000))
    timed = await store.start("approval", "", {}, "")
    deadline = timed.tokens[0].available_at
    assert await store.run_clock_duties(deadline - 1) == 0
    assert await store.run_clock_duties(deadline) == 1
    failed = (await store.get_instance(timed.instance.id)).instance
    assert failed.status == "FAILED" and "timed out" in failed.error


async def test_cancel(store: ServerNode) -> None:
    await store.register(linear())
    view = await store.start("linear", "", {}, "")
    (c,) = await store.claim("w", ["linear"], 1)
    cancelled, changed = await store.cancel(view.instance.id, "user asked")
    assert changed and cancelled.instance.status == "CANCELLED" and cancelled.tokens == []
    assert cancelled.instance.reason == "user asked"
    again, changed = await store.cancel(view.instance.id, "twice")
    assert not changed and again.instance.reason == "user asked"
    with pytest.raises(AlreadyFinished):
        await store.heartbeat(c.token.id, "w")
    with pytest.raises(NotFound):
        await store.cancel("wi-nope", "x")


async def test_list_instances_newest_first_with_filters_and_pages(store: ServerNode) -> None:
    await store.register(linear())
    await store.register(sleeper(60_000))
    ids = []
    for i in range(5):
        ids.append((await store.start("linear", "", {}, f"c{i % 2}")).instance.id)
    other = (await store.start("sleeper", "", {}, "")).instance.id
    await store.cancel(ids[0], "x")

    views, token = await store.list_instances(InstanceQuery(page_size=4))
    assert [v.instance.id for v in views] == [other, *reversed(ids[2:])] and token == views[-1].instance.id
    views2, token2 = await store.list_instances(InstanceQuery(page_size=4, page_token=token))
    assert [v.instance.id for v in views2] == [ids[1], ids[0]] and token2 == ""
    assert views[1].tokens and views[1].tokens[0].status == "READY"

    only = await store.list_instances(InstanceQuery(workflow="sleeper"))
    assert [v.instance.id for v in only[0]] == [other]
    cancelled = await store.list_instances(InstanceQuery(status="CANCELLED"))
    assert [v.instance.id for v in cancelled[0]] == [ids[0]] and cancelled[0][0].tokens == []
    c1 = await store.list_instances(InstanceQuery(correlation_id="c1"))
    assert [v.instance.id for v in c1[0]] == [ids[3], ids[1]]
    created = (await store.get_instance(ids[2])).instance.created_at
    window = await store.list_instances(
        InstanceQuery(workflow="linear", created_after=created, created_before=created + 1)
    )
    assert ids[2] in [v.instance.id for v in window[0]]
    assert all(v.instance.created_at == created for v in window[0])


async def test_a_time_window_finds_an_instance_whose_id_ran_ahead_of_its_created_at(
    store: ServerNode,
    pg_schema: str,  # noqa: F811
) -> None:
    # An id's millisecond never goes back (InstanceIds), so it can be later than created_at: the
    # id bounds that let the primary key skip rows must not drop such an instance (statements.py).
    await store.register(linear())
    view = await store.start("linear", "", {}, "")
    created = view.instance.created_at - 5  # as if its id had been minted 5 ms after created_at
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{pg_schema}".instances SET created_at = %s WHERE id = %s', (created, view.instance.id)
        )
    for after, before in ((created, created + 1), (0, created + 1), (created, 0)):
        found, _ = await store.list_instances(InstanceQuery(created_after=after, created_before=before))
        assert [v.instance.id for v in found] == [view.instance.id], (after, before)
    found, _ = await store.list_instances(InstanceQuery(created_after=created + 1))
    assert found == []


# ---------------------------------------------------------------------- concurrency and clustering


async def _claim_all(stores: list[ServerNode], workers: int) -> list[tuple[str, str, int]]:
    """Workers claiming and completing until the queue stays empty; every (token, node, attempt) they got.

    Half of them poll two queues, so both claim queries (one queue, several queues) compete.
    """
    seen: list[tuple[str, str, int]] = []

    async def worker(store: ServerNode, name: str, queues: list[str]) -> None:
        idle = 0
        while idle < 3:
            claimed = await store.claim(name, queues, 3)
            if not claimed:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            for c in claimed:
                seen.append((c.token.id, c.token.node_id, c.token.attempt))
                await store.complete(c.token.id, name, {"by": name}, None)

    await asyncio.gather(
        *(
            worker(stores[i % len(stores)], f"w{i}", ["linear"] if i % 2 else ["elsewhere", "linear"])
            for i in range(workers)
        )
    )
    return seen


async def test_concurrent_claims_never_hand_out_a_token_twice(store: ServerNode) -> None:
    await store.register(linear(steps=1))
    ids = [(await store.start("linear", "", {}, "")).instance.id for _ in range(60)]
    seen = await _claim_all([store], 8)
    assert len(seen) == len(set(seen)) == 60
    for instance_id in ids:
        assert (await store.get_instance(instance_id)).instance.status == "COMPLETED"


async def test_two_servers_share_the_work_without_duplicates(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    await a.register(linear(steps=2))
    for _ in range(40):
        await a.start("linear", "", {}, "")
    seen = await _claim_all([a, b], 8)
    assert len(seen) == len(set(seen)) == 80  # 40 instances x 2 steps, each claimed once
    views, _ = await b.list_instances(InstanceQuery(status="COMPLETED", page_size=100))
    assert len(views) == 40


async def test_work_on_one_server_wakes_pollers_on_another(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    await a.register(linear(steps=1))
    waiter = asyncio.ensure_future(b.notifier.wait_work(["linear"], 5.0))
    await asyncio.sleep(0.05)
    started = asyncio.get_running_loop().time()
    view = await a.start("linear", "", {}, "")
    assert await waiter is True
    assert asyncio.get_running_loop().time() - started < 2.0

    finished = asyncio.ensure_future(b.notifier.wait_instance(view.instance.id, 5.0))
    await asyncio.sleep(0.05)
    (c,) = await a.claim("w", ["linear"], 1)
    await a.complete(c.token.id, "w", {}, None)
    await asyncio.wait_for(finished, 2.0)


async def _wait_reading(store: ServerNode, instance_id: str) -> tuple[asyncio.Future[Any], list[str]]:
    """``store.wait_finished`` on ``instance_id`` as a task, once it has read the instance and
    sleeps; and the list its store's later ``get_instance`` calls go into. (The first read is
    awaited, not guessed at: a fixed 0.1 s was too short on a loaded machine, and that read was
    counted among the later ones.)"""
    reads: list[str] = []
    plain = store.store.get_instance
    first_read = asyncio.Event()

    async def counted(iid: str) -> Any:
        if not first_read.is_set():
            try:
                return await plain(iid)
            finally:
                first_read.set()
        reads.append(iid)
        return await plain(iid)

    store.store.get_instance = counted  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(store.wait_finished(instance_id, 5.0))
    await asyncio.wait_for(first_read.wait(), 10.0)
    await asyncio.sleep(0.05)  # from its read to its wait for the finish
    assert not waiting.done()
    return waiting, reads


@pytest.mark.parametrize("ending", ["COMPLETED", "FAILED", "CANCELLED"])
async def test_a_waiter_takes_the_finished_instance_from_its_commit_without_reading_it(
    store: ServerNode, ending: str
) -> None:
    # Client.wait's long poll (Instances.wait_finished): the group commit that finishes an
    # instance hands this node's waiters the view it wrote (group_commit.py finished_view), which
    # must be exactly what a read returns afterwards.
    await store.register(linear(steps=2, retry=RetryPolicy.none()))
    view = await store.start("linear", "", {"n": 0, TRICKY: [1.5, None]}, "order-9")
    waiting, reads = await _wait_reading(store, view.instance.id)
    (c,) = await store.claim("w", ["linear"], 1)
    await store.complete(c.token.id, "w", {"n": 1, "x": {"y": [TRICKY]}}, None)
    if ending == "CANCELLED":
        await store.cancel(view.instance.id, "user asked")
    else:
        (c,) = await store.claim("w", ["linear"], 1)
        if ending == "COMPLETED":
            await store.complete(c.token.id, "w", {"n": 2}, None)
        else:
            await store.fail(c.token.id, "w", "bad input", False)
    handed = await asyncio.wait_for(waiting, 2.0)
    assert reads == []  # woken with the commit's view: no read of its own
    read = await store.get_instance(view.instance.id)
    assert read.instance.status == ending
    assert handed == read


async def test_a_waiter_on_another_server_reads_the_finished_instance(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    await a.register(linear(steps=1))
    view = await a.start("linear", "", {"n": 0}, "")
    waiting, reads = await _wait_reading(b, view.instance.id)
    (c,) = await a.claim("w", ["linear"], 1)
    reads.clear()  # (a loaded machine's claim can outlast the waiter's 1 s re-read: not counted)
    await a.complete(c.token.id, "w", {"n": 1}, None)
    handed = await asyncio.wait_for(waiting, 3.0)  # woken by a's NOTIFY, which carries no view
    assert reads and set(reads) == {view.instance.id}  # so it read the instance
    assert handed == await a.get_instance(view.instance.id)
    assert handed.instance.status == "COMPLETED"


TRICKY = "he said \"hi\" \\ {a,b} NULL 'x' , é ✓\n\t"


async def _tricky_scenario(store: ServerNode) -> list[Any]:
    """A fork, concurrent completes and a retried failure, full of values that need escaping."""
    context = {TRICKY: [TRICKY, None, 1.5, {"": ""}], "NULL": "NULL", "": "{}"}
    views = [await store.start("forked", "", context, TRICKY) for _ in range(3)]
    retry = await store.start("retrying", "", {}, "")
    claimed = await store.claim("w", ["forked"], 10)
    assert len(claimed) == 6
    claimed.sort(key=lambda c: c.token.id)
    await asyncio.gather(
        *(store.complete(c.token.id, "w", {**c.context, c.token.node_id: TRICKY}, None) for c in claimed)
    )
    (c,) = await store.claim("w", ["retrying"], 1)
    assert await store.fail(c.token.id, "w", TRICKY, True) == "RUNNING"
    out: list[Any] = []
    for view in [*views, retry]:
        got = await store.get_instance(view.instance.id)
        inst = got.instance
        out.append((inst.status, inst.context, inst.correlation_id, inst.error, inst.token_seq, inst.steps))
        out.append(
            sorted(
                (t.node_id, t.status, t.attempt, t.last_error, t.context, t.fork_stack) for t in got.tokens
            )
        )
        history = await store.history(view.instance.id)
        # the order of a and b depends on which commit locked the instance first
        out.append(sorted((h.node_id, h.kind, h.attempt, h.worker_id, h.outcome, h.error) for h in history))
    (c,) = await store.claim("w", ["retrying"], 1)  # leave nothing for the next run on this schema
    assert await store.complete(c.token.id, "w", {}, None) == "COMPLETED"
    return out


async def test_set_based_writes_round_trip_every_value(open_store: Callable[..., Any]) -> None:
    """Rows written by unnest() parts read back exactly as rows written one by one (VALUES rows,
    an UPDATE part per row), and as a mix of both in one statement (writes.py)."""
    results = []
    for min_rows in (1, 1000, 3):  # every write set-based; none; kinds of 3 rows or more
        store = await open_store()
        store.writer.set_write_min_rows = min_rows
        await store.register(forked())
        await store.register(
            linear("retrying", steps=1, retry=RetryPolicy(max_attempts=2, initial_backoff_millis=0))
        )
        results.append(await _tricky_scenario(store))
        await store.close()
    assert results[0] == results[1] == results[2]
    flat = repr(results[0])
    assert flat.count(repr(TRICKY)) >= 10 and "COMPLETED" in flat and "'NULL': 'NULL'" in flat
    retried_instance, (retried_token,), _ = results[0][-3:]
    assert retried_instance[0] == "RUNNING" and retried_token[1:4] == ("READY", 2, TRICKY)


@pytest.mark.parametrize("min_rows", [1, 1000])  # an unnest() part; VALUES rows
async def test_set_based_history_keeps_its_order(open_store: Callable[..., Any], min_rows: int) -> None:
    store = await open_store()
    store.writer.set_write_min_rows = min_rows
    await store.register(forked())
    view = await store.start("forked", "", {}, "")
    for c in sorted(await store.claim("w", ["forked"], 10), key=lambda c: c.token.node_id):
        await store.complete(c.token.id, "w", {**c.context, c.token.node_id: 1}, None)
    history = await store.history(view.instance.id)
    # the last complete writes three entries in one statement: they keep their order
    assert [(h.node_id, h.outcome) for h in history] == [
        ("fork", "FORKED"),
        ("a", "COMPLETED"),
        ("b", "COMPLETED"),
        ("join", "JOINED"),
        ("end", "END"),
    ]


async def _work_round(store: ServerNode) -> str:
    """Start a one-step instance and run it to the end: READY, claimed, finished."""
    view = await store.start("linear", "", {}, "")
    (c,) = await store.claim("w", ["linear"], 1)
    assert await store.complete(c.token.id, "w", {}, None) == "COMPLETED"
    return view.instance.id


async def test_a_lone_server_sends_no_notify(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    await a.register(linear(steps=1))
    async with listening(a.cluster.channel_work) as drain:
        assert a.cluster.peers == 0  # the raw listener is no Wiggle node
        waiter = asyncio.ensure_future(a.notifier.wait_work(["linear"], 5.0))
        await asyncio.sleep(0.05)
        await a.start("linear", "", {}, "")
        assert await asyncio.wait_for(waiter, 1.0) is True  # local waiters still wake, after the commit
        (c,) = await a.claim("w", ["linear"], 1)
        await a.complete(c.token.id, "w", {}, None)
        await _work_round(a)
        assert await drain() == []
    assert a.cluster.notifies_sent == 0


async def test_servers_notify_each_other_only_while_a_peer_is_connected(
    open_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Cluster, "PEER_CHECK_SECONDS", 0.1)
    a = await open_store()
    await a.register(linear(steps=1))
    async with listening(a.cluster.channel_work) as drain:
        await _work_round(a)
        assert a.cluster.notifies_sent == 0 and await drain() == []

        b = await open_store()
        assert b.cluster.peers == 1  # counted when it opened
        for _ in range(100):  # a hears b's hello (or counts it) within milliseconds
            if a.cluster.peers:
                break
            await asyncio.sleep(0.01)
        assert a.cluster.peers == 1
        # a token made READY on a wakes a poller waiting on b, promptly
        async with wanting(b, "work", ["linear"]):
            waiter = asyncio.ensure_future(b.notifier.wait_work(["linear"], 5.0))
            await asyncio.sleep(0.05)
            started = asyncio.get_running_loop().time()
            view = await a.start("linear", "", {}, "")
            assert await asyncio.wait_for(waiter, 2.0) is True
            assert asyncio.get_running_loop().time() - started < 1.0
        async with wanting(b, "finished", [""]):
            finished = asyncio.ensure_future(b.notifier.wait_instance(view.instance.id, 5.0))
            await asyncio.sleep(0.05)
            (c,) = await a.claim("w", ["linear"], 1)
            await a.complete(c.token.id, "w", {}, None)
            await asyncio.wait_for(finished, 2.0)
        assert a.cluster.notifies_sent >= 2
        assert f"{a.node_id}:linear" in await drain(1)

        await b.close()  # the last peer leaves: a notices at its next count and stops notifying
        for _ in range(200):
            if not a.cluster.peers:
                break
            await asyncio.sleep(0.01)
        assert a.cluster.peers == 0
        sent = a.cluster.notifies_sent
        await drain()
        await _work_round(a)
        assert a.cluster.notifies_sent == sent and await drain() == []


async def _hears_the_wait(node: Any, drain: Callable[..., Any]) -> None:
    """Until ``node`` knows that another node waits for finished instances (its "want" message or
    the next count of peers; before, a commit of ``node`` notifies nobody), then past the catch-up
    NOTIFY that knowing it sends (cluster.py ``_catch_up``), so what follows is the test's alone."""
    for _ in range(500):
        if ("finished", "") in node.cluster.wanted or not node.cluster.filtering:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the node never heard that another waits for finished instances")
    if node.cluster._sender is not None:
        await asyncio.wait_for(node.cluster._sender, 5.0)
        await asyncio.sleep(node.cluster.NOTIFY_SPACING_SECONDS)  # its next send is not held back
    await drain()  # the catch-up's NOTIFY, where it came after the listener began


async def test_notifies_go_out_after_the_commit_in_one_transaction_for_all_posted_meanwhile(
    open_store: Callable[..., Any],
) -> None:
    """A NOTIFY inside a data transaction would make it wait on PostgreSQL's database-wide
    notification lock until its commit is flushed (docs/architecture.md, "Scaling"): the NOTIFYs
    of commits go out afterwards, everything posted while one send runs in the next one."""
    a = await open_store()
    b = await open_store()
    assert b.cluster.peers == 1  # b counted the first when it opened
    async with wanting(a, "finished", [""]), listening(b.cluster.channel_finished) as drain:
        await _hears_the_wait(b, drain)
        sent = b.cluster.notifies_sent
        finished = Changes()
        finished.finished = True
        for n in range(50):  # posted in one go: the sender has not run yet
            b.cluster.post(f"instance-{n}", finished)
        await asyncio.wait_for(b.cluster._sender, 5.0)
        assert b.cluster.notifies_sent == sent + 1
        assert sorted(await drain(50)) == sorted(f"{b.node_id}:instance-{n}" for n in range(50))


async def test_a_node_spaces_its_notify_transactions_and_sends_what_came_meanwhile_together(
    open_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most one NOTIFY transaction a Cluster.NOTIFY_SPACING_SECONDS per node (docs/architecture.md,
    "Scaling"): the first after a quiet spell goes out at once, what is posted while the next one
    waits goes out with it."""
    monkeypatch.setattr(Cluster, "NOTIFY_SPACING_SECONDS", 0.3)
    a = await open_store()
    b = await open_store()
    assert b.cluster.peers == 1
    loop = asyncio.get_running_loop()
    async with wanting(a, "finished", [""]), listening(b.cluster.channel_finished) as drain:
        await _hears_the_wait(b, drain)
        sent = b.cluster.notifies_sent
        finished = Changes()
        finished.finished = True
        began = loop.time()
        b.cluster.post("first", finished)
        for _ in range(200):  # the first goes at once
            if b.cluster.notifies_sent == sent + 1:
                break
            await asyncio.sleep(0.005)
        assert b.cluster.notifies_sent == sent + 1
        for n in range(5):  # posted while the sender waits out the spacing
            b.cluster.post(f"later-{n}", finished)
            await asyncio.sleep(0.01)
        await asyncio.wait_for(b.cluster._sender, 5.0)
        assert loop.time() - began >= 0.3  # the second transaction waited for its turn
        assert b.cluster.notifies_sent == sent + 2  # the five in one
        payloads = await drain(6)
        assert sorted(payloads) == sorted(
            f"{b.node_id}:{name}" for name in ["first"] + [f"later-{n}" for n in range(5)]
        )


async def test_other_schemas_are_not_peers(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    other = node(a.engine, TEST_DATABASE_URL, a.schema + "_x", pool_size=2)
    try:
        await other.open()
        await asyncio.sleep(0.1)
        assert a.cluster.peers == 0 and other.cluster.peers == 0
        assert len(a.application_name) <= 63 and a.application_name.startswith(a.cluster.app_prefix)
        assert a.cluster.app_prefix != other.cluster.app_prefix
    finally:
        await other.close()
        async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other.schema))
            )


async def test_only_one_server_runs_the_clock_duties(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    await a.register(sleeper(10))
    view = await a.start("sleeper", "", {}, "")
    due = view.tokens[0].available_at
    assert await a.run_clock_duties(due - 5) == 0
    assert a.is_clock_leader
    assert await b.run_clock_duties(due + 100) == 0  # b is not the leader: it does nothing
    assert not b.is_clock_leader and await b.next_due_at() is None
    await a.close()  # the leader goes away; b takes over at its next tick
    assert await b.run_clock_duties(due + 100) == 1
    assert b.is_clock_leader


async def test_leadership_moves_when_the_leader_connection_dies(open_store: Callable[..., Any]) -> None:
    a = await open_store()
    b = await open_store()
    assert await a.run_clock_duties(now_millis()) == 0 and a.is_clock_leader
    await _terminate(f"{a.application_name}:clock")
    assert await b.run_clock_duties(now_millis()) == 0 and b.is_clock_leader
    assert await a.run_clock_duties(now_millis()) == 0 and not a.is_clock_leader


async def test_a_leader_that_hangs_loses_the_clock_duties(
    open_store: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A leader that stops running without dying (SIGSTOP, a paused VM: here its event loop is
    blocked) keeps its socket open; PostgreSQL ends its silent session after stall_timeout, so
    another node takes over, and the old leader, running again, stops acting."""
    a = await open_store(stall_timeout=0.5)
    b = await open_store(stall_timeout=0.5)
    assert await a.run_clock_duties(now_millis()) == 0 and a.is_clock_leader
    time.sleep(1.5)  # noqa: ASYNC251 - the whole process stops, as a frozen server's would
    assert await b.run_clock_duties(now_millis()) == 0 and b.is_clock_leader
    with caplog.at_level(logging.WARNING, logger="wiggle.postgres"):
        assert await a.run_clock_duties(now_millis()) == 0 and not a.is_clock_leader
    assert "lost the clock duties" in caplog.text and "another node takes them over" in caplog.text


async def test_a_leader_that_runs_keeps_the_clock_duties(open_store: Callable[..., Any]) -> None:
    """Between clock ticks further apart than stall_timeout, a running leader's session is kept
    alive (Cluster._keep_leading), so the leadership does not move."""
    a = await open_store(stall_timeout=0.4)
    b = await open_store(stall_timeout=0.4)
    assert await a.run_clock_duties(now_millis()) == 0 and a.is_clock_leader
    await asyncio.sleep(1.5)  # no tick of a's: only its keeper touches the session
    assert await b.run_clock_duties(now_millis()) == 0 and not b.is_clock_leader
    assert a.is_clock_leader and await a.run_clock_duties(now_millis()) == 0 and a.is_clock_leader


def test_vacuum_problem_names_what_is_off() -> None:
    assert vacuum_problem("on", "on") is None
    assert str(vacuum_problem("off", "on")).startswith("autovacuum off on this database server")
    assert str(vacuum_problem("on", "off")).startswith("track_counts off")
    assert str(vacuum_problem("off", "off")).startswith("autovacuum and track_counts off")


async def test_a_server_says_at_start_when_dead_rows_are_never_reclaimed(
    open_store: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Operators who never run `wiggle doctor` learn it from the server's log (an outside soak:
    ~3 MB a minute of dead rows, nothing said)."""
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL) as conn:
        cur = await conn.execute("SELECT current_setting('autovacuum'), current_setting('track_counts')")
        settings = await cur.fetchone()
    assert settings is not None
    with caplog.at_level(logging.WARNING, logger="wiggle.postgres"):
        await open_store()
    said = [r.getMessage() for r in caplog.records if "never reclaimed" in r.getMessage()]
    expected = vacuum_problem(*settings)
    assert said == ([] if expected is None else [f"{expected} (docs/postgresql.md#retention)"])


async def test_a_stalled_transaction_is_ended_by_postgresql(open_store: Callable[..., Any]) -> None:
    """Every pooled session carries the stall timeout as its idle_in_transaction_session_timeout."""
    a = await open_store(stall_timeout=0.7)
    rows = await a.db.fetch("test", "SHOW idle_in_transaction_session_timeout", ())
    assert rows[0][0] == "700ms"


async def test_the_leader_ends_a_stalled_transaction_of_another_server(
    open_store: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A server stopped in the middle of a pipelined transaction leaves its session active,
    reading from the client, its row locks held, where no PostgreSQL timeout ends it: the clock
    leader ends it after stall_timeout, so the others' work on those rows goes on."""
    a = await open_store(stall_timeout=0.5)
    await a.register(linear())
    view = await a.start("linear", "", {}, "")
    assert await a.run_clock_duties(now_millis()) == 0 and a.is_clock_leader
    frozen = await psycopg.AsyncConnection.connect(
        TEST_DATABASE_URL, autocommit=True, application_name=f"{a.cluster.app_prefix}0123456789ab"
    )
    lock = sql.SQL("SELECT id FROM {}.instances WHERE id = %s FOR UPDATE").format(sql.Identifier(a.schema))
    ended = False
    try:
        with caplog.at_level(logging.WARNING, logger="wiggle.postgres"):
            async with frozen.pipeline():
                await frozen.execute("BEGIN")
                await frozen.execute(lock, (view.instance.id,))  # sent, no Sync: active, ClientRead
                # another server's lock on the same row waits for the stalled one, then gets it
                async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL) as other:
                    await asyncio.wait_for(other.execute(lock, (view.instance.id,)), 10)
    except psycopg.Error:  # the pipeline's Sync finds its session ended
        ended = True
    finally:
        ended = ended or frozen.broken
        await frozen.close()
    assert ended
    # the leader logs once its terminating transaction has committed, which may be after the
    # other session got the lock and this test went on
    deadline = asyncio.get_running_loop().time() + 5
    while "ended PostgreSQL session" not in caplog.text:
        assert asyncio.get_running_loop().time() < deadline, caplog.text
        await asyncio.sleep(0.05)
    assert "0123456789ab" in caplog.text


async def _terminate(application_name: str) -> int:
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
        row = await cur.fetchone()
        assert row is not None
        # wait until the backends are really gone (terminate only signals them)
        for _ in range(100):
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            )
            left = await cur.fetchone()
            if left is not None and left[0] == 0:
                break
            await asyncio.sleep(0.02)
        return int(row[0])


async def test_lost_connections_are_retried_transparently(store: ServerNode) -> None:
    await store.register(linear())
    view = await store.start("linear", "", {}, "")
    assert await _terminate(store.application_name) >= 1  # every pooled connection dies
    assert (await store.get_instance(view.instance.id)).instance.status == "RUNNING"
    (c,) = await store.claim("w", ["linear"], 1)
    assert await store.complete(c.token.id, "w", {}, None) == "RUNNING"

    # the listener reconnects too. The waits say they want the queue's work NOTIFYs, as a
    # waiting poll does (wakeups.py): a node that knows nobody wants them sends none, and
    # ``other`` learns so within its first peer count, maybe before the listener is back.
    await _terminate(f"{store.application_name}:listen")
    other = node(store.engine, TEST_DATABASE_URL, store.schema, pool_size=2)
    async with wanting(store, "work", ["linear"]):
        await other.open()
        try:
            for _ in range(100):
                waiter = asyncio.ensure_future(store.notifier.wait_work(["linear"], 0.2))
                await asyncio.sleep(0.01)
                await other.start("linear", "", {}, "")
                if await waiter:
                    break
            else:
                pytest.fail("the listener never reconnected")
        finally:
            await other.close()


# ---------------------------------------------------------------------- housekeeping


async def test_purge_finished(store: ServerNode) -> None:
    await store.register(linear(steps=1))
    await store.register(forked())
    finished = []
    for _ in range(2):
        view = await store.start("linear", "", {}, "")
        (c,) = await store.claim("w", ["linear"], 1)
        await store.complete(c.token.id, "w", {}, None)
        finished.append(view.instance.id)
    # an instance of several tokens (the fork's two branches, and the one after the join)
    view = await store.start("forked", "", {}, "")
    for c in await store.claim("w", ["forked"], 10):
        await store.complete(c.token.id, "w", {}, None)
    finished.append(view.instance.id)
    running = (await store.start("linear", "", {}, "")).instance.id
    cutoff = now_millis() + 1

    async def count(table: str, ids: list[str]) -> int:
        async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL) as conn:
            cur = await conn.execute(
                sql.SQL("SELECT count(*) FROM {}.{} WHERE instance_id = ANY(%s)").format(
                    sql.Identifier(store.schema), sql.Identifier(table)
                ),
                (ids,),
            )
            (n,) = await cur.fetchone()  # type: ignore[misc]
            return int(n)

    assert await count("tokens", finished[-1:]) >= 2
    assert await store.purge_finished(0, 10) == 0  # nothing finished before the epoch
    assert await store.purge_finished(cutoff, 2) == 2
    assert await store.purge_finished(cutoff, 2) == 1
    assert await store.purge_finished(cutoff, 2) == 0
    for instance_id in finished:
        with pytest.raises(NotFound):
            await store.history(instance_id)
    assert (await store.get_instance(running)).instance.status == "RUNNING"
    # every row of the purged instances is gone (tokens by their ids: migration 0024), and only them
    assert await count("tokens", finished) == 0 and await count("history", finished) == 0
    assert await count("tokens", [running]) == 1


async def test_migrations_are_idempotent_and_a_newer_schema_is_refused(pg_schema: str) -> None:  # noqa: F811
    newest = migration_files()[-1][0]
    assert await migrate(TEST_DATABASE_URL, pg_schema) == len(migration_files())
    assert await migrate(TEST_DATABASE_URL, pg_schema) == 0
    results = await asyncio.gather(*(migrate(TEST_DATABASE_URL, pg_schema) for _ in range(3)))
    assert results == [0, 0, 0]

    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_version (version, name, applied_at) VALUES (%s, 'future.sql', 0)"
            ).format(sql.Identifier(pg_schema)),
            (newest + 1,),
        )
    with pytest.raises(SchemaTooNew, match=f"version {newest + 1}.*up to version {newest}") as caught:
        await migrate(TEST_DATABASE_URL, pg_schema)
    assert caught.value.code is ErrorCode.FAILED_PRECONDITION  # `wiggle` exits 4, not as INTERNAL
    store = node(Engine(), TEST_DATABASE_URL, pg_schema)
    with pytest.raises(SchemaTooNew):
        await store.open()
    await store.close()


async def test_servers_starting_together_migrate_once(pg_schema: str) -> None:  # noqa: F811
    stores = [node(Engine(), TEST_DATABASE_URL, pg_schema, pool_size=1) for _ in range(3)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL) as conn:
            cur = await conn.execute(
                sql.SQL("SELECT version FROM {}.schema_version ORDER BY version").format(
                    sql.Identifier(pg_schema)
                )
            )
            assert [r[0] for r in await cur.fetchall()] == [v for v, _, _ in migration_files()]
    finally:
        for s in stores:
            await s.close()


async def test_unreachable_database_is_unavailable() -> None:
    store = node(Engine(), "postgresql://postgres@127.0.0.1:1/test", "wiggle", max_attempts=2)
    with pytest.raises(Unavailable, match="database unavailable"):
        await store.open()
    await store.close()
    with pytest.raises(Unavailable):
        await migrate("postgresql://postgres@127.0.0.1:1/test", "wiggle")


async def test_database_going_away_is_unavailable_not_a_raw_error(open_store: Callable[..., Any]) -> None:
    async with DatabaseProxy(5432) as proxy:
        store = await open_store(
            url=f"postgresql://postgres@127.0.0.1:{proxy.port}/test", acquire_timeout=0.3
        )
        await store.register(linear())
        view = await store.start("linear", "", {}, "")
        proxy.down()
        with pytest.raises(Unavailable, match="database unavailable") as raised:
            await store.get_instance(view.instance.id)
        assert raised.value.not_applied
        with pytest.raises(Unavailable) as raised:
            await store.claim("w", ["linear"], 1)
        assert raised.value.not_applied
        with pytest.raises(Unavailable) as raised:
            await store.start("linear", "", {}, "")
        assert raised.value.not_applied  # nothing of it applied: any call may be made again
        proxy.up()  # the pool reconnects in the background (with backoff): calls succeed again
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            try:
                assert (await store.get_instance(view.instance.id)).instance.status == "RUNNING"
                break
            except Unavailable:
                assert asyncio.get_running_loop().time() < deadline, "the store never recovered"


async def test_search_filters_match_the_memory_stores(store: ServerNode) -> None:
    """node, text, context field and top-level: PostgreSQL's WHERE agrees with the in-memory
    store's test (wiggle/_storage/base.py instance_matches) on values of every JSON type."""
    from wiggle._storage.memory import MemoryStore

    memory = Instances(MemoryStore(), Engine(EngineConfig(lease_millis=LEASE)))
    contexts: list[dict[str, Any]] = [
        {"k": "a"},
        {"k": 1},
        {"k": True},
        {"k": None},
        {},
        {"k": "x\u0000y", "other": "a"},
        {"k": "x\\u0000y"},  # a backslash, then "u0000": no NUL
        {"k": 1.5},
        {"k": "é"},
        {"k": [1]},
    ]
    found: dict[str, list[list[int]]] = {}
    for name, each in (("pg", store), ("memory", memory)):
        await each.register(linear())
        ids = [(await each.start("linear", "", ctx, "")).instance.id for ctx in contexts]
        await each.cancel(ids[0], "Refused: 100% sure")
        queries = [
            InstanceQuery(context=(("k", "a"),)),
            InstanceQuery(context=(("k", "1"),)),
            InstanceQuery(context=(("k", "true"),)),
            InstanceQuery(context=(("k", "1.5"),)),
            InstanceQuery(context=(("k", "é"),)),
            InstanceQuery(context=(("k", "a"), ("other", "a"))),
            InstanceQuery(context=(("missing", ""),)),
            InstanceQuery(context=(("k", "x\\u0000y"),)),
            InstanceQuery(context=(("k", "xy"),)),  # U+0000 left out
            InstanceQuery(text="100%"),
            InstanceQuery(text="REFUSED"),
            InstanceQuery(text="1_0"),
            InstanceQuery(node="s0"),
            InstanceQuery(node="s1"),
            InstanceQuery(top_level=True, status="RUNNING"),
        ]
        found[name] = [[ids.index(v.instance.id) for v in (await each.list_instances(q))[0]] for q in queries]
    assert found["pg"] == found["memory"]
    assert found["pg"][:5] == [[0], [1], [2], [7], [8]]
    assert found["pg"][5:9] == [[], [], [6], [5]]
    assert found["pg"][9:12] == [[0], [0], []]
    assert found["pg"][12] == [9, 8, 7, 6, 5, 4, 3, 2, 1] and found["pg"][13] == []
    assert found["pg"][14] == [9, 8, 7, 6, 5, 4, 3, 2, 1]
