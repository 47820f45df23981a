"""How many groups of mutations a PostgreSQL store commits at once (``group_commits``).

One by default: what arrives while a group is being committed waits and goes as the next group,
so a busy server commits fewer, larger transactions (docs/performance.md#group-commits). A
server set to more lets later arrivals commit beside the group in flight, up to the setting and
to the pool's connections less two. The commits are held open here (a slow ``run``) so that
the second wave of mutations arrives while the first group is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pg import TEST_DATABASE_URL, opened_stores

from wiggle._engine.engine import Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import Changes, InstanceState, new_instance_id, now_millis
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.app import make_store
from wiggle._server.config import from_mapping
from wiggle._storage.postgres import PostgresStore

pytestmark = pytest.mark.postgres

ENGINE = Engine(EngineConfig(lease_millis=60_000))
FLOW = WorkflowDefinition(
    name="groups",
    start_node="a",
    nodes=(Node(id="a", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
)


@pytest.fixture
async def open_store(pg_schema: str) -> AsyncIterator[Callable[..., Any]]:
    async with opened_stores(
        lambda **kwargs: PostgresStore(TEST_DATABASE_URL, pg_schema, **kwargs)
    ) as factory:
        yield factory


class Watched:
    """Wraps a store's group runner: records each group's size and how many were in flight at
    once, and holds each commit until released (``first_in_flight`` is set by the first)."""

    def __init__(self, store: PostgresStore) -> None:
        committers = store.group._committers
        self.inner = committers.run
        committers.run = self.run  # type: ignore[method-assign]
        self.groups: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.first_in_flight = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, batch: list[Any]) -> None:
        self.groups.append(len(batch))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.first_in_flight.set()
        try:
            await self.release.wait()
            await self.inner(batch)
        finally:
            self.in_flight -= 1


async def _instances(store: PostgresStore, count: int) -> list[InstanceState]:
    record, _ = await store.put_definition(LoadedDefinition(FLOW))
    states = []
    for _ in range(count):
        now = now_millis()
        state, changes = ENGINE.start(record.loaded, new_instance_id(now), {}, "", now)
        await store.insert(state, changes)
        states.append(state)
    return states


def _touch(mark: str) -> Any:
    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[str, Changes]:
        changes = Changes()
        for token_id, token in state.tokens.items():
            token.last_error = mark
            changes.tokens[token_id] = token
        return mark, changes

    return action


async def _two_waves(store: PostgresStore, watched: Watched, states: list[InstanceState]) -> list[str]:
    """4 mutations, then, once their group is in flight, 8 more; every result once released."""
    first = [asyncio.ensure_future(store.mutate(s.instance.id, "gone", _touch("w1"))) for s in states[:4]]
    await asyncio.wait_for(watched.first_in_flight.wait(), 10)
    second = [asyncio.ensure_future(store.mutate(s.instance.id, "gone", _touch("w2"))) for s in states[4:]]
    for _ in range(20):  # let the second wave queue, and any free committer take it
        await asyncio.sleep(0.01)
    watched.release.set()
    results = await asyncio.wait_for(asyncio.gather(*first, *second), 30)
    return [r for r, _ in results]


async def test_one_group_at_a_time_by_default_the_rest_the_next_group(open_store: Callable[..., Any]) -> None:
    store = await open_store(pool_size=10)
    assert store.group.committers == 1
    states = await _instances(store, 12)
    watched = Watched(store)
    assert await _two_waves(store, watched, states) == ["w1"] * 4 + ["w2"] * 8
    assert watched.most_in_flight == 1
    assert watched.groups == [4, 8]  # the second wave waited, and went as one group
    for state in states:  # every mutation committed
        (token,) = (await store.get_instance(state.instance.id)).tokens
        assert token.last_error == ("w1" if state in states[:4] else "w2")


async def test_more_group_commits_overlap_up_to_the_setting(open_store: Callable[..., Any]) -> None:
    store = await open_store(pool_size=10, group_commits=3)
    assert store.group.committers == 3
    states = await _instances(store, 12)
    watched = Watched(store)
    assert await _two_waves(store, watched, states) == ["w1"] * 4 + ["w2"] * 8
    assert watched.most_in_flight == 2  # the second wave did not wait for the first group
    assert watched.groups == [4, 8]


async def test_the_pool_bounds_the_groups_in_flight(open_store: Callable[..., Any]) -> None:
    store = await open_store(pool_size=4, group_commits=8)
    assert store.group.committers == 2  # two connections of four left to claims and starts


def test_the_server_setting_reaches_the_store() -> None:
    config = from_mapping({}, env={"WIGGLE_DATABASE_URL": TEST_DATABASE_URL, "WIGGLE_GROUP_COMMITS": "3"})
    store = make_store(config)
    assert isinstance(store, PostgresStore) and store.group.committers == 3
    default = make_store(from_mapping({}, env={"WIGGLE_DATABASE_URL": TEST_DATABASE_URL}))
    assert isinstance(default, PostgresStore) and default.group.committers == 1
