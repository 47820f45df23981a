"""Version aliases (issue #12) on both stores: upstream clients' int32 version numbers, each naming
one registered content-hash version of a workflow (wiggle/_storage/base.py, migration 0008).

The PostgreSQL cases always run: PostgreSQL being unreachable fails them (tests/pg.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Engine, LoadedDefinition
from wiggle._engine.state import InstanceStatus
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.base import Store
from wiggle._storage.memory import MemoryStore
from wiggle._storage.postgres import PostgresStore
from wiggle.errors import InvalidArgument, NotFound


def _definition(name: str = "orders", steps: int = 1) -> LoadedDefinition:
    ids = [f"s{i}" for i in range(steps)]
    nodes = [
        Node(id=n, kind=NodeKind.TASK, next=ids[i + 1] if i + 1 < steps else "end") for i, n in enumerate(ids)
    ]
    definition = WorkflowDefinition(
        name=name, start_node=ids[0], nodes=(*nodes, Node(id="end", kind=NodeKind.END))
    )
    return LoadedDefinition(definition)


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    pg = PostgresStore(TEST_DATABASE_URL, request.getfixturevalue("pg_schema"), pool_size=2)
    await pg.open()
    try:
        yield pg
    finally:
        await pg.close()


async def _versions(store: Store) -> tuple[str, str]:
    first, _ = await store.put_definition(_definition(steps=1))
    second, _ = await store.put_definition(_definition(steps=2))
    assert first.loaded.version != second.loaded.version
    return first.loaded.version, second.loaded.version


async def test_an_alias_names_a_version_and_re_registering_repoints_it(store: Store) -> None:
    v1, v2 = await _versions(store)
    assert await store.version_aliases("orders") == {}
    await store.put_version_alias("orders", 2, v2)
    await store.put_version_alias("orders", 1, v1)
    assert await store.version_aliases("orders") == {1: v1, 2: v2}
    assert list(await store.version_aliases("orders")) == [1, 2]  # by alias ascending
    await store.put_version_alias("orders", 1, v2)  # upstream registered version 1 again: new hash
    assert await store.version_aliases("orders") == {1: v2, 2: v2}
    await store.put_version_alias("orders", 1, v2)  # the same again changes nothing
    assert await store.version_aliases("orders") == {1: v2, 2: v2}


async def test_aliases_belong_to_their_workflow(store: Store) -> None:
    v1, _ = await _versions(store)
    other, _ = await store.put_definition(_definition("billing"))
    await store.put_version_alias("orders", 1, v1)
    await store.put_version_alias("billing", 1, other.loaded.version)
    assert await store.version_aliases("orders") == {1: v1}
    assert await store.version_aliases("billing") == {1: other.loaded.version}
    assert await store.version_aliases("never-registered") == {}
    # a version of another workflow is not a version of this one
    with pytest.raises(NotFound, match="'orders' has no version"):
        await store.put_version_alias("orders", 3, other.loaded.version)


async def test_the_int32_range_is_accepted_at_both_ends(store: Store) -> None:
    v1, v2 = await _versions(store)
    await store.put_version_alias("orders", 2**31 - 1, v1)
    await store.put_version_alias("orders", -(2**31), v2)
    assert await store.version_aliases("orders") == {-(2**31): v2, 2**31 - 1: v1}


async def test_an_unregistered_version_is_not_found_and_changes_nothing(store: Store) -> None:
    v1, _ = await _versions(store)
    await store.put_version_alias("orders", 1, v1)
    with pytest.raises(NotFound, match="workflow 'orders' has no version '0123456789abcdef'"):
        await store.put_version_alias("orders", 1, "0123456789abcdef")
    with pytest.raises(NotFound, match="workflow 'nobody' is not registered"):
        await store.put_version_alias("nobody", 1, v1)
    assert await store.version_aliases("orders") == {1: v1}
    assert await store.version_aliases("nobody") == {}


@pytest.mark.parametrize(
    ("workflow", "alias", "version", "message"),
    [
        ("orders", 2**31, "v", "outside the int32 range"),
        ("orders", -(2**31) - 1, "v", "outside the int32 range"),
        ("orders", True, "v", "must be an integer, got bool"),
        ("orders", "1", "v", "must be an integer, got str"),
        ("orders", 1, "", "non-empty string"),
        ("orders", 1, None, "non-empty string"),
        ("", 1, "v", "workflow must not be empty"),
        (" orders", 1, "v", "surrounding whitespace"),
    ],
)
async def test_bad_input_is_invalid_and_changes_nothing(
    store: Store, workflow: object, alias: object, version: object, message: str
) -> None:
    v1, _ = await _versions(store)
    await store.put_version_alias("orders", 1, v1)
    with pytest.raises(InvalidArgument, match=message):
        await store.put_version_alias(workflow, alias, v1 if version == "v" else version)  # type: ignore[arg-type]
    assert await store.version_aliases("orders") == {1: v1}
    with pytest.raises(InvalidArgument, match="workflow"):
        await store.version_aliases(" orders")


async def test_the_instance_layer_passes_aliases_through(store: Store) -> None:
    layer = Instances(store, Engine())
    record, _ = await layer.register(_definition().definition)
    await layer.put_version_alias("orders", 7, record.loaded.version)
    assert await layer.version_aliases("orders") == {7: record.loaded.version}
    with pytest.raises(NotFound):
        await layer.put_version_alias("orders", 8, "ffffffffffffffff")


async def test_purging_finished_instances_keeps_the_aliases(store: Store) -> None:
    layer = Instances(store, Engine())
    record, _ = await layer.register(_definition().definition)
    await layer.put_version_alias("orders", 1, record.loaded.version)
    view = await layer.start("orders", record.loaded.version, {}, "", "")
    await layer.cancel(view.instance.id, "done with it")
    assert (await layer.get_instance(view.instance.id)).instance.status == InstanceStatus.CANCELLED
    assert await store.purge_finished(store.clock.now() + 1, 10) == 1
    assert await layer.version_aliases("orders") == {1: record.loaded.version}


@pytest.mark.postgres
async def test_postgres_aliases_survive_a_restart(pg_schema: str) -> None:  # noqa: F811
    first = PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=2)
    await first.open()
    try:
        record, _ = await first.put_definition(_definition())
        await first.put_version_alias("orders", 3, record.loaded.version)
    finally:
        await first.close()
    again = PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=2)  # a fresh cache: read from the table
    await again.open()
    try:
        assert await again.version_aliases("orders") == {3: record.loaded.version}
        await again.put_version_alias("orders", 3, record.loaded.version)
        assert await again.version_aliases("orders") == {3: record.loaded.version}
    finally:
        await again.close()
