"""A poll whose claim a rate cut short looks again at the rate's moment, not 50 ms after it
(store.py ``next_ready_at``; docs/flow-control.md). The 50 ms pause is for a step a claim passed
over because a transaction in flight held its row: applied to a rate's steps too, a rate of 100 to
160 claims a second (whose moment comes about when the claim and the look are done) admitted a
fraction of itself on PostgreSQL, 17 a second under 150 (an outside flow-control trial).

On a virtual clock (the rates then count on it), so the moment is exact: no timing is asserted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pg import TEST_DATABASE_URL, opened_stores

from wiggle._clock import VirtualClock
from wiggle._engine.engine import Engine, EngineConfig
from wiggle._model import Node, NodeKind, RateLimit, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.queue_limits import QueueLimit

pytestmark = pytest.mark.postgres

START = 1_900_000_000_000  # ms: the virtual clock's start


def _flow(rate: RateLimit | None) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="rated",
        start_node="pay",
        nodes=(
            Node(id="pay", kind=NodeKind.TASK, queue="rated", next="end", rate=rate),
            Node(id="end", kind=NodeKind.END),
        ),
    )


@pytest.fixture
async def node(pg_schema: str) -> AsyncIterator[tuple[Any, VirtualClock]]:  # noqa: F811
    clock = VirtualClock(START)

    async with opened_stores(lambda: PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=4)) as factory:
        store = await factory()
        yield Instances(store, Engine(EngineConfig(lease_millis=60_000)), clock), clock


@pytest.mark.parametrize("which", ["step", "queue"])
async def test_a_step_a_rate_held_back_is_looked_for_at_the_rate_s_moment(
    node: tuple[Any, VirtualClock], which: str
) -> None:
    layer, clock = node
    store = layer.store
    await layer.register(_flow(RateLimit(key="merchant", max=1, period=1.0) if which == "step" else None))
    if which == "queue":
        await store.set_queue_limit(QueueLimit(queue="rated", rate_max=1, rate_period_millis=1000))
    for _ in range(2):
        await layer.start("rated", "", {"merchant": "m1"}, "")
    assert len(await layer.claim("w", ["rated"], 10)) == 1  # the rate admits one a second
    moment = await store.next_ready_at(["rated"])
    assert moment is not None and START < moment <= START + 1000, moment  # the rate's next moment
    clock.advance_to(moment + 10)  # the moment came 10 ms ago: the step is due now
    assert await store.next_ready_at(["rated"]) == clock.now()  # not clock.now() + 50
    assert len(await layer.claim("w", ["rated"], 10)) == 1
