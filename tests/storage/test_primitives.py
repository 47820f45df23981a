"""The persistence primitives of wiggle/_storage/base.py, the same on every store.

The instance layer (wiggle/_server/instances.py) builds every operation on these; here they are
driven directly, with hand-written actions instead of engine transitions where that is clearer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Claimed, Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import Changes, InstanceState, Token, TokenStatus, new_instance_id, now_millis
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._storage.base import Store
from wiggle._storage.memory import MemoryStore
from wiggle.errors import FailedPrecondition, NotFound

ENGINE = Engine(EngineConfig(lease_millis=60_000))


def _definition() -> LoadedDefinition:
    return LoadedDefinition(
        WorkflowDefinition(
            name="prim",
            start_node="a",
            nodes=(Node(id="a", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
        )
    )


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    from wiggle._storage.postgres import PostgresStore

    schema = request.getfixturevalue("pg_schema")
    pg = PostgresStore(TEST_DATABASE_URL, schema, pool_size=4)
    await pg.open()
    try:
        yield pg
    finally:
        await pg.close()


async def _started(store: Store) -> tuple[LoadedDefinition, InstanceState]:
    loaded, _ = await store.put_definition(_definition())
    now = now_millis()
    state, changes = ENGINE.start(loaded.loaded, new_instance_id(now), {"n": 1}, "", now)
    await store.insert(state, changes)
    return loaded.loaded, state


def _claim_transition(worker: str) -> Any:
    def transition(
        loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
    ) -> Claimed:
        return ENGINE.claim(loaded, state, token, worker, now, changes)

    return transition


async def test_put_definition_is_idempotent(store: Store) -> None:
    record, created = await store.put_definition(_definition())
    again, created_again = await store.put_definition(_definition())
    assert created and not created_again
    assert again.loaded.version == record.loaded.version
    assert (await store.get_workflow("prim")).loaded.version == record.loaded.version
    assert [r.loaded.version for r in await store.list_workflows("prim")] == [record.loaded.version]


async def test_insert_then_read(store: Store) -> None:
    _, state = await _started(store)
    view = await store.get_instance(state.instance.id)
    assert view.instance.context == {"n": 1}
    assert [t.status for t in view.tokens] == [TokenStatus.READY]


async def test_mutate_runs_the_action_on_the_locked_state_and_persists(store: Store) -> None:
    _, state = await _started(store)
    (token_id,) = state.tokens
    seen: list[str] = []

    def action(loaded: LoadedDefinition, st: InstanceState, now: int) -> tuple[str, Changes]:
        seen.append(loaded.definition.name)
        changes = Changes()
        changes.tokens[token_id] = st.tokens[token_id]
        st.tokens[token_id].last_error = "touched"
        return "result", changes

    result, after = await store.mutate(state.instance.id, "gone", action)
    assert result == "result" and seen == ["prim"]
    assert after.tokens[token_id].last_error == "touched"
    (token,) = (await store.get_instance(state.instance.id)).tokens
    assert token.last_error == "touched"


async def test_mutate_of_a_missing_instance_is_not_found_with_the_callers_words(store: Store) -> None:
    def action(loaded: LoadedDefinition, st: InstanceState, now: int) -> tuple[None, None]:
        raise AssertionError("never called")

    with pytest.raises(NotFound, match="token tk-x does not exist"):
        await store.mutate(new_instance_id(), "token tk-x does not exist", action)


async def test_a_refused_or_empty_action_writes_nothing(store: Store) -> None:
    _, state = await _started(store)
    before = store.stats.transactions

    def refuse(loaded: LoadedDefinition, st: InstanceState, now: int) -> tuple[None, Changes]:
        raise FailedPrecondition("no")

    with pytest.raises(FailedPrecondition):
        await store.mutate(state.instance.id, "gone", refuse)
    result, _ = await store.mutate(state.instance.id, "gone", lambda loaded, st, now: (3, None))
    assert result == 3
    assert store.stats.transactions == before


async def test_concurrent_claims_never_hand_out_a_token_twice(store: Store) -> None:
    states = [(await _started(store))[1] for _ in range(6)]
    queue = next(iter(states[0].tokens.values())).queue
    batches = await asyncio.gather(
        *(store.claim(f"w{i}", [queue], 2, _claim_transition(f"w{i}")) for i in range(5))
    )
    claimed = [c.token.id for batch in batches for c in batch]
    assert len(claimed) == len(set(claimed)) == 6
    assert await store.claim("late", [queue], 5, _claim_transition("late")) == []


async def test_due_tokens_names_an_expired_lease(store: Store) -> None:
    _, state = await _started(store)
    queue = next(iter(state.tokens.values())).queue
    (claimed,) = await store.claim("w", [queue], 1, _claim_transition("w"))
    expiry = claimed.token.lease_expires_at
    assert await store.next_due_at() in (expiry, None)  # None: not (yet) the clock leader
    assert await store.clock_leader()
    assert await store.next_due_at() == expiry
    assert await store.due_tokens(expiry - 1, 10) == []
    assert await store.due_tokens(expiry, 10) == [claimed.token.id]
