"""The instance layer over each conformance store, for the engine support of the upstream protocol.

A test module imports ``layer_fixture`` (the fixture ``layer``). These tests play the worker themselves (claim, complete, in the order they choose) so that the
order in which branches reach a join is theirs, and run on a VirtualClock so that lease expiries
are exact. Definitions are built node by node: LAST_WRITE_WINS is not a DSL option (the upstream
translator sets it, wiggle/_model.py JoinMerge).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from wiggle._clock import VirtualClock
from wiggle._engine.engine import Claimed, Engine, EngineConfig
from wiggle._model import JoinMerge, Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.memory import MemoryStore

from .conftest import POSTGRES_URL, STORES

LWW = JoinMerge.LAST_WRITE_WINS
LEASE = 30_000
MAX_LEASE = 600_000
OWNER = "w-1"


@pytest.fixture(name="layer", params=STORES)
async def layer_fixture(request: pytest.FixtureRequest, postgres_schema: str) -> AsyncIterator[Instances]:
    """Instances over a memory or PostgreSQL store, on a virtual clock."""
    if request.param == "memory":
        store: Any = MemoryStore()
    else:
        from wiggle._storage.postgres import PostgresStore

        store = PostgresStore(POSTGRES_URL, postgres_schema, pool_size=4)
    await store.open()
    engine = Engine(
        EngineConfig(lease_millis=LEASE, max_lease_millis=MAX_LEASE, max_payload_bytes=4096),
        rng=random.Random(7),
    )
    try:
        yield Instances(store, engine, clock=VirtualClock(1_000_000))
    finally:
        await store.close()


def unique(base: str) -> str:
    """A workflow name (and so a queue) no other test uses."""
    return f"{base}-{uuid.uuid4().hex[:8]}"


def fork_definition(name: str, merge: JoinMerge = LWW, branches: int = 2) -> WorkflowDefinition:
    """fork -> one task per branch (b0, b1, ...) -> join -> end."""
    ids = tuple(f"b{i}" for i in range(branches))
    return WorkflowDefinition(
        name=name,
        start_node="fork",
        nodes=(
            Node(id="fork", kind=NodeKind.FORK, branches=ids, join="join"),
            *(Node(id=b, kind=NodeKind.TASK, next="join") for b in ids),
            Node(id="join", kind=NodeKind.JOIN, fork="fork", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
        join_merge=merge,
    ).validate()


def for_each_definition(name: str, merge: JoinMerge = LWW, concurrency: int = 0) -> WorkflowDefinition:
    """A for-each over ``items`` (element ``item``, index ``itemIndex``: the translator's keys)."""
    return WorkflowDefinition(
        name=name,
        start_node="fe",
        nodes=(
            Node(
                id="fe",
                kind=NodeKind.FOR_EACH,
                items_key="items",
                item_key="item",
                index_key="itemIndex",
                branches=("body",),
                join="fe.join",
                concurrency=concurrency,
            ),
            Node(id="body", kind=NodeKind.TASK, next="fe.join"),
            Node(id="fe.join", kind=NodeKind.JOIN, fork="fe", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
        join_merge=merge,
    ).validate()


def task_definition(name: str) -> WorkflowDefinition:
    """One task, then the end."""
    return WorkflowDefinition(
        name=name,
        start_node="t",
        nodes=(Node(id="t", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
    ).validate()


async def begin(layer: Instances, definition: WorkflowDefinition, context: dict[str, Any]) -> str:
    """Register and start; the instance id."""
    await layer.register(definition)
    view = await layer.start(definition.name, "", context, "")
    return view.instance.id


async def claim_all(layer: Instances, queue: str, n: int, **kwargs: Any) -> list[Claimed]:
    """Claim exactly ``n`` steps on ``queue``."""
    claimed = await layer.claim(OWNER, [queue], 100, **kwargs)
    assert len(claimed) == n, [c.token.node_id for c in claimed]
    return claimed


async def complete_with(layer: Instances, claimed: Claimed, **writes: Any) -> str:
    """Complete ``claimed`` with its context plus ``writes``; the instance status."""
    return await layer.complete(claimed.token.id, OWNER, {**claimed.context, **writes}, None)
