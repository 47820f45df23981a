"""Starting instances (issue #16, items 1 and 2): the group commit of starts, idempotent starts by
request id, and bulk starts, on both stores (docs/semantics.md#idempotent-starts).

The PostgreSQL cases always run: PostgreSQL being unreachable fails them (tests/pg.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from layers import instance_layer, one_step, postgres_nodes
from pg import TEST_DATABASE_URL, pipelines_opened, terminate_sleeping

from wiggle._engine.start_options import StartOptions
from wiggle._engine.state import InstanceStatus, TokenStatus
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.base import InstanceQuery, NewInstance
from wiggle._storage.postgres import PostgresStore
from wiggle.errors import InvalidArgument, WiggleError


@pytest.fixture(params=["memory", "postgres"])
async def layer(request: pytest.FixtureRequest) -> AsyncIterator[Instances]:
    async with instance_layer(request.param, one_step()) as instances:
        yield instances


async def _all_ids(layer: Instances) -> list[str]:
    views, _ = await layer.list_instances(InstanceQuery(page_size=10_000))
    return sorted(v.instance.id for v in views)


async def test_a_repeated_request_id_returns_the_first_instance(layer: Instances) -> None:
    first = await layer.start("one", "", {"n": 1}, "", "order-17")
    again = await layer.start("one", "", {"n": 2}, "", "order-17")
    other = await layer.start("one", "", {"n": 3}, "", "order-18")
    plain = await layer.start("one", "", {"n": 4}, "", "")
    assert again.instance.id == first.instance.id
    assert again.instance.context == {"n": 1}  # the first start's, as stored
    assert len({first.instance.id, other.instance.id, plain.instance.id}) == 3
    assert await _all_ids(layer) == sorted([first.instance.id, other.instance.id, plain.instance.id])
    # the repeated start woke nobody and added no token: one READY token for the first instance
    view = await layer.get_instance(first.instance.id)
    assert [t.status for t in view.tokens] == [TokenStatus.READY]


async def test_concurrent_starts_with_one_request_id_start_one_instance(layer: Instances) -> None:
    views = await asyncio.gather(*(layer.start("one", "", {"i": i}, "", "same") for i in range(20)))
    assert len({v.instance.id for v in views}) == 1
    assert await _all_ids(layer) == [views[0].instance.id]


async def test_start_many_returns_the_ids_in_order(layer: Instances) -> None:
    contexts = [{"i": i} for i in range(2500)]
    version, ids = await layer.start_many("one", "", contexts, "batch", [])
    assert version == (await layer.store.get_workflow("one")).loaded.version
    assert len(ids) == len(set(ids)) == 2500
    assert await _all_ids(layer) == sorted(ids)
    for i in (0, 1, 1234, 2499):
        view = await layer.get_instance(ids[i])
        assert view.instance.context == {"i": i}
        assert view.instance.correlation_id == "batch"
        assert view.instance.status == InstanceStatus.RUNNING
    # every instance has its READY token on the queue: the claims see all of them
    claimed = 0
    while True:
        got = await layer.poll("w", ["one"], 256, 0.0)
        if not got:
            break
        claimed += len(got)
    assert claimed == 2500


async def test_start_many_with_request_ids_is_idempotent(layer: Instances) -> None:
    contexts = [{"i": i} for i in range(30)]
    rids = [f"r:{i}" for i in range(30)]
    _, first = await layer.start_many("one", "", contexts[:10], "", rids[:10])
    # the whole list again (a retry after a lost answer): the first ten come back, 20 are new
    _, again = await layer.start_many("one", "", contexts, "", rids)
    assert again[:10] == first
    assert len(set(again)) == 30
    # a request id twice in one call names one instance
    _, twice = await layer.start_many("one", "", [{"x": 1}, {"x": 2}], "", ["dup", "dup"])
    assert twice[0] == twice[1]
    assert len(await _all_ids(layer)) == 31


async def test_a_bad_context_in_start_many_names_it_and_starts_nothing(layer: Instances) -> None:
    big = {"blob": "x" * (layer.config.max_payload_bytes + 10)}
    with pytest.raises(InvalidArgument, match="context 2 of 3"):
        await layer.start_many("one", "", [{}, {}, big], "", [])
    assert await _all_ids(layer) == []


async def test_purged_instances_forget_their_request_ids(layer: Instances) -> None:
    first = await layer.start("one", "", {}, "", "short-lived")
    await layer.cancel(first.instance.id, "done with it")
    assert await layer.store.purge_finished(2**62, 100) == 1
    again = await layer.start("one", "", {}, "", "short-lived")
    assert again.instance.id != first.instance.id


# ---------------------------------------------------------------------------- PostgreSQL only


@pytest.fixture
async def pg() -> AsyncIterator[tuple[PostgresStore, Instances]]:
    async with postgres_nodes(1, one_step()) as ((store,), (instances,)):
        yield store, instances


async def test_concurrent_starts_share_transactions(pg: tuple[PostgresStore, Instances]) -> None:
    store, layer = pg
    before = store.starts.groups
    views = await asyncio.gather(*(layer.start("one", "", {"i": i}, "", "") for i in range(200)))
    groups = store.starts.groups - before
    # 200 starts queued at once: a committer takes every queued start into its transaction
    assert groups <= store.starts.committers * 4, groups
    assert await _all_ids(layer) == sorted(v.instance.id for v in views)


async def test_a_commit_whose_answer_was_lost_is_not_applied_twice(
    pg: tuple[PostgresStore, Instances],
) -> None:
    store, layer = pg
    db = store.starts.db
    real_run = db.run
    replays = 0

    async def run_twice(what: str, body: Callable[[Any], Awaitable[Any]]) -> Any:
        # The first attempt commits but its answer is lost; the retry runs the same body again.
        nonlocal replays
        if what != "start":
            return await real_run(what, body)
        await real_run(what, body)
        replays += 1
        return await real_run(what, body)

    db.run = run_twice  # type: ignore[method-assign]
    try:
        keyed = await layer.start("one", "", {"k": 1}, "", "lost-ack")
        plain = await layer.start("one", "", {"k": 2}, "", "")
        _, many = await layer.start_many("one", "", [{"m": i} for i in range(5)], "", [])
    finally:
        db.run = real_run  # type: ignore[method-assign]
    assert replays == 3
    assert await _all_ids(layer) == sorted([keyed.instance.id, plain.instance.id, *many])
    again = await layer.start("one", "", {}, "", "lost-ack")
    assert again.instance.id == keyed.instance.id


async def test_a_start_without_a_key_is_one_statement_unless_its_request_id_is_taken(
    pg: tuple[PostgresStore, Instances],
) -> None:
    """Nothing to read first: the version check, the request id's claim, the rows and the commit
    are one statement, no transaction block (start_commit.py ``_write_one``); a request id found
    taken writes nothing there and is answered the long way (a transaction with the claim's read)."""
    store, layer = pg
    with pipelines_opened() as pipelines:
        plain = await layer.start("one", "", {"k": 1}, "", "")
        assert pipelines == [0]
        keyed = await layer.start("one", "", {"k": 2}, "", "with-id")
        assert pipelines == [0]
        again = await layer.start("one", "", {"k": 3}, "", "with-id")
        assert pipelines == [1]
    assert again.instance.id == keyed.instance.id and again.instance.context == {"k": 2}
    for view, ctx in ((plain, {"k": 1}), (keyed, {"k": 2})):
        got = await layer.get_instance(view.instance.id)
        assert got.instance.context == ctx and got.tokens[0].status == TokenStatus.READY
    assert await _all_ids(layer) == sorted([plain.instance.id, keyed.instance.id])
    with psycopg.connect(TEST_DATABASE_URL) as admin:
        rows = admin.execute(
            f'SELECT request_id, instance_id FROM "{store.schema}".start_requests'
        ).fetchall()
    assert rows == [("with-id", keyed.instance.id)]


async def test_a_taken_request_id_in_a_group_writes_none_of_its_one_statement(
    pg: tuple[PostgresStore, Instances],
) -> None:
    """One group holding new request ids, a taken one and a request id repeated inside it: the one
    statement raises in its claim and writes nothing, the long way then starts each new id once
    and answers the taken and the repeated ones with their holders."""
    store, layer = pg
    first = await layer.start("one", "", {"k": 0}, "", "taken")
    record = await store.get_workflow("one")
    engine = layer.engine

    def item(instance_id: str, request_id: str) -> NewInstance:
        state, changes = engine.start(record.loaded, instance_id, {"id": instance_id}, "", 1)
        return NewInstance(state, changes, request_id)

    ids = [f"wi-000000000001aaaa0000000{i}" for i in range(1, 5)]
    before = store.starts.groups
    with pipelines_opened() as pipelines:
        answers = await store.insert_many(
            [item(ids[0], "new-a"), item(ids[1], "taken"), item(ids[2], "new-b"), item(ids[3], "new-a")]
        )
    assert pipelines == [1]  # the long way, once: the failed statement left nothing to recognise
    assert store.starts.groups - before == 1
    assert answers == [ids[0], first.instance.id, ids[2], ids[0]]
    assert await _all_ids(layer) == sorted([first.instance.id, ids[0], ids[2]])
    with psycopg.connect(TEST_DATABASE_URL) as admin:
        rows = admin.execute(
            f'SELECT request_id, instance_id FROM "{store.schema}".start_requests ORDER BY request_id'
        ).fetchall()
    assert rows == [("new-a", ids[0]), ("new-b", ids[2]), ("taken", first.instance.id)]


async def test_a_start_with_a_key_is_one_statement_unless_the_key_is_held(
    pg: tuple[PostgresStore, Instances],
) -> None:
    """A deduplication key is claimed in the one statement too (``claim_keys``, migration 0027);
    a key held by a live instance writes nothing there, and the long way answers with the holder,
    deduplicated, pointing the start's request id at it."""
    store, layer = pg
    keyed = StartOptions(dedup_key="order-42")
    with pipelines_opened() as pipelines:
        first, dup = await layer.start_with("one", "", {"k": 1}, "", "", options=keyed)
        assert pipelines == [0] and not dup
        other, dup = await layer.start_with(
            "one", "", {"k": 2}, "", "rid-2", options=StartOptions(dedup_key="order-43")
        )
        assert pipelines == [0] and not dup
        again, dup = await layer.start_with("one", "", {"k": 3}, "", "rid-3", options=keyed)
        assert pipelines == [1] and dup
    assert again.instance.id == first.instance.id and again.instance.context == {"k": 1}
    assert await _all_ids(layer) == sorted([first.instance.id, other.instance.id])
    with psycopg.connect(TEST_DATABASE_URL) as admin:
        s = f'"{store.schema}"'
        keys = admin.execute(
            f"SELECT dedup_key, instance_id FROM {s}.start_dedup ORDER BY dedup_key"
        ).fetchall()
        requests = admin.execute(
            f"SELECT request_id, instance_id, deduplicated FROM {s}.start_requests ORDER BY request_id"
        ).fetchall()
    assert keys == [("order-42", first.instance.id), ("order-43", other.instance.id)]
    assert requests == [("rid-2", other.instance.id, False), ("rid-3", first.instance.id, True)]
    # the repeated request id answers as its first start did (deduplicated), the long way
    repeat, dup = await layer.start_with("one", "", {"k": 4}, "", "rid-3", options=keyed)
    assert repeat.instance.id == first.instance.id and dup


async def test_a_key_repeated_inside_a_group_points_the_later_request_id_at_its_holder(
    pg: tuple[PostgresStore, Instances],
) -> None:
    """Two starts of one group with one key, each with a request id: the first holds the key, the
    second is answered with it, deduplicated, and its request id names the first's instance (the
    long way's redirect: the one statement claims no request id for an instance it does not write)."""
    store, layer = pg
    record = await store.get_workflow("one")
    engine = layer.engine
    keyed = StartOptions(dedup_key="same")

    def item(instance_id: str, request_id: str) -> NewInstance:
        state, changes = engine.start(record.loaded, instance_id, {}, "", 1, options=keyed)
        return NewInstance(state, changes, request_id)

    a, b = "wi-000000000001aaaa00000001", "wi-000000000001aaaa00000002"
    items = [item(a, "rid-a"), item(b, "rid-b")]
    assert await store.insert_many(items) == [a, a]
    assert [i.deduplicated for i in items] == [False, True]
    assert await _all_ids(layer) == [a]
    with psycopg.connect(TEST_DATABASE_URL) as admin:
        rows = admin.execute(
            f'SELECT request_id, instance_id, deduplicated FROM "{store.schema}".start_requests ORDER BY 1'
        ).fetchall()
    assert rows == [("rid-a", a, False), ("rid-b", a, True)]


async def test_a_one_statement_start_cut_off_is_recognised_on_its_retry(
    pg: tuple[PostgresStore, Instances],
) -> None:
    """The one statement is its own commit: a connection lost while it runs is a commit of
    unknown outcome, and the retry finds what committed (none here: the statement was cut off)
    and starts the instance once."""
    store, layer = pg
    s = f'"{store.schema}"'
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as admin:
        admin.execute(f"CREATE SEQUENCE {s}.naps")
        admin.execute(  # sleeps in the first INSERT only (a sequence is not rolled back)
            f"CREATE FUNCTION {s}.nap() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF nextval('{s}.naps') = 1 THEN PERFORM pg_sleep(30); END IF; RETURN NULL; END $$"
        )
        admin.execute(f"CREATE TRIGGER nap AFTER INSERT ON {s}.instances EXECUTE FUNCTION {s}.nap()")
        start = asyncio.ensure_future(layer.start("one", "", {"k": 1}, "", ""))
        await terminate_sleeping(store.application_name, "the start's statement")
        view = await start
        admin.execute(f"DROP TRIGGER nap ON {s}.instances")
    assert await _all_ids(layer) == [view.instance.id]


async def test_a_failing_start_fails_alone_and_its_group_is_retried(
    pg: tuple[PostgresStore, Instances],
) -> None:
    store, layer = pg
    existing = await layer.start("one", "", {}, "", "")
    record = await store.get_workflow("one")
    engine = layer.engine

    def item(instance_id: str) -> NewInstance:
        state, changes = engine.start(record.loaded, instance_id, {}, "", 1)
        return NewInstance(state, changes)

    # The duplicate id breaks the shared transaction: the group is retried job by job.
    outcomes = await asyncio.gather(
        store.insert_many([item("wi-000000000001aaaa00000001")]),
        store.insert_many([item(existing.instance.id)]),
        store.insert_many([item("wi-000000000001aaaa00000002"), item("wi-000000000001aaaa00000003")]),
        return_exceptions=True,
    )
    assert outcomes[0] == ["wi-000000000001aaaa00000001"]
    assert isinstance(outcomes[1], WiggleError), outcomes[1]
    assert outcomes[2] == ["wi-000000000001aaaa00000002", "wi-000000000001aaaa00000003"]
    assert len(await _all_ids(layer)) == 4


async def test_concurrent_latest_version_reads_share_one_statement(
    pg: tuple[PostgresStore, Instances],
) -> None:
    store, layer = pg
    before = store.definitions.latest_queries
    records = await asyncio.gather(*(store.get_workflow("one") for _ in range(50)))
    assert store.definitions.latest_queries - before == 1
    assert {r.loaded.version for r in records} == {records[0].loaded.version}
    # a version registered (acknowledged) before a call is what that call sees
    v2 = WorkflowDefinition(
        name="one",
        start_node="b",
        nodes=(Node(id="b", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
    )
    record, created = await layer.register(v2)
    assert created
    started = await layer.start("one", "", {}, "", "")
    assert started.instance.version == record.loaded.version != records[0].loaded.version


async def test_two_servers_starting_one_request_id_start_one_instance() -> None:
    async with postgres_nodes(2, one_step()) as (_, layers):
        views = await asyncio.gather(
            *(layers[i % 2].start("one", "", {"i": i}, "", f"shared-{i % 3}") for i in range(30))
        )
        by_request: dict[int, set[str]] = {}
        for i, view in enumerate(views):
            by_request.setdefault(i % 3, set()).add(view.instance.id)
        assert all(len(ids) == 1 for ids in by_request.values()), by_request
        assert len(await _all_ids(layers[1])) == 3


# ------------------------------------------------ starts from the remembered latest version


def _version_two() -> WorkflowDefinition:
    return WorkflowDefinition(
        name="one",
        start_node="b",
        nodes=(Node(id="b", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
    )


async def _versions(layer: Instances) -> dict[str, int]:
    views, _ = await layer.list_instances(InstanceQuery(page_size=10_000))
    out: dict[str, int] = {}
    for view in views:
        out[view.instance.version] = out.get(view.instance.version, 0) + 1
    return out


async def test_starts_from_the_remembered_latest_version_read_nothing_first(
    pg: tuple[PostgresStore, Instances],
) -> None:
    store, layer = pg
    await layer.start("one", "", {}, "", "")  # registered on this node: remembered already
    before = store.definitions.latest_queries
    await asyncio.gather(*(layer.start("one", "", {"i": i}, "", "") for i in range(20)))
    await layer.start_many("one", "", [{"m": i} for i in range(5)], "", [])
    assert store.definitions.latest_queries == before


@pytest.fixture
async def two_nodes() -> AsyncIterator[tuple[list[PostgresStore], list[Instances]]]:
    async with postgres_nodes(2, one_step()) as nodes:
        yield nodes


async def test_a_version_registered_on_another_node_is_what_the_next_start_runs(
    two_nodes: tuple[list[PostgresStore], list[Instances]],
) -> None:
    stores, (a, b) = two_nodes
    v1 = (await a.start("one", "", {}, "", "")).instance.version  # node a remembers v1
    assert stores[0].definitions.latest_seen["one"] == v1
    v2, created = await b.register(_version_two())  # acknowledged by node b
    assert created
    # Each start below was called after v2's registration was acknowledged: it must run v2.
    single = await a.start("one", "", {"x": 1}, "", "")
    assert single.instance.version == v2.loaded.version
    assert stores[0].definitions.latest_seen["one"] == v2.loaded.version
    # nothing of v1 was stored by the stale attempt
    assert await _versions(a) == {v1: 1, v2.loaded.version: 1}


async def test_concurrent_and_bulk_starts_on_a_stale_version_all_run_the_new_one(
    two_nodes: tuple[list[PostgresStore], list[Instances]],
) -> None:
    stores, (a, b) = two_nodes
    v1 = (await a.start("one", "", {}, "", "")).instance.version
    v2 = (await b.register(_version_two()))[0].loaded.version
    views = await asyncio.gather(*(a.start("one", "", {"i": i}, "", f"r{i}") for i in range(20)))
    assert {v.instance.version for v in views} == {v2}
    v3_def = WorkflowDefinition(
        name="one",
        start_node="c",
        nodes=(Node(id="c", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
    )
    v3 = (await b.register(v3_def))[0].loaded.version
    version, ids = await a.start_many("one", "", [{"m": i} for i in range(7)], "", [])
    assert version == v3 and len(ids) == 7
    assert await _versions(a) == {v1: 1, v2: 20, v3: 7}
    # the request ids still name one instance each
    again = await a.start("one", "", {}, "", "r3")
    assert again.instance.id == views[3].instance.id


async def test_a_lost_acknowledgement_is_answered_as_committed_even_after_a_new_version(
    two_nodes: tuple[list[PostgresStore], list[Instances]],
) -> None:
    stores, (a, b) = two_nodes
    v1 = (await a.start("one", "", {}, "", "")).instance.version
    db = stores[0].starts.db
    real_run = db.run

    async def commit_then_lose(what: str, body: Callable[[Any], Awaitable[Any]]) -> Any:
        # The first attempt commits, its answer is lost, v2 is registered, the retry runs.
        if what != "start":
            return await real_run(what, body)
        await real_run(what, body)
        await b.register(_version_two())
        return await real_run(what, body)

    db.run = commit_then_lose  # type: ignore[method-assign]
    try:
        started = await a.start("one", "", {"k": 1}, "", "")
    finally:
        db.run = real_run  # type: ignore[method-assign]
    assert started.instance.version == v1  # the committed start stands; no second instance
    assert await _versions(a) == {v1: 2}


# ------------------------------------------------------------ lingering under contention


async def test_a_lone_caller_never_waits_for_company(pg: tuple[PostgresStore, Instances]) -> None:
    store, layer = pg
    committers = store.starts._committers
    assert committers.linger > 0
    for i in range(20):
        await layer.start("one", "", {"i": i}, "", "")
    assert committers.lingered == 0


async def _until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the committers never got there"
        await asyncio.sleep(0.001)


async def test_overlapping_callers_wait_briefly_and_share_transactions(
    pg: tuple[PostgresStore, Instances],
) -> None:
    # Made deterministic: the first group's commit is held until the others have queued, so a
    # start always arrives while a group commits (with free-running callers, a loaded machine
    # could answer them in lockstep and no start ever overlapped a commit).
    store, layer = pg
    starts = store.starts
    committers = starts._committers
    db = starts.db
    real_run = db.run
    committing = asyncio.Event()
    release = asyncio.Event()

    async def held(what: str, body: Callable[[Any], Awaitable[Any]]) -> Any:
        if what == "start" and not release.is_set():
            committing.set()
            await release.wait()
        return await real_run(what, body)

    linger = committers.linger
    committers.linger = 1.0  # long enough that the later callers surely reach the queue
    db.run = held  # type: ignore[method-assign]
    try:
        first = asyncio.ensure_future(layer.start("one", "", {"k": 0}, "", ""))
        await asyncio.wait_for(committing.wait(), 10)  # group one is committing (and held)
        before = starts.groups
        second = asyncio.ensure_future(layer.start("one", "", {"k": 1}, "", ""))
        await _until(lambda: committers.lingered == 1)  # the other committer saw the overlap
        rest = [asyncio.ensure_future(layer.start("one", "", {"k": k}, "", "")) for k in range(2, 8)]
        await _until(lambda: committers._jobs.qsize() == len(rest))  # queued while it waits
        release.set()
        ids = [s.instance.id for s in await asyncio.gather(first, second, *rest)]
    finally:
        db.run = real_run  # type: ignore[method-assign]
        committers.linger = linger
    assert len(set(ids)) == 8 and await _all_ids(layer) == sorted(ids)
    assert committers.lingered >= 1
    # The first group, then the seven later starts in one or two (the first committer, freed,
    # may take one of them and wait in turn): never a transaction each.
    assert starts.groups - before <= 3
