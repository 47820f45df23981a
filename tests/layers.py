"""Instance layers over a fresh store, for the tests that drive ``Instances`` directly.

``one_step(name, limit)``: a workflow of one task step (``a``), under a concurrency limit if given;
``two_steps(queue)``: "two", the task steps ``a`` then ``b`` on ``queue``;
``instance_layer("memory" | "postgres", *definitions)``: one layer with ``definitions``
registered; ``postgres_nodes(n, *definitions)``: ``n`` layers (server nodes) sharing one fresh
PostgreSQL schema, the definitions registered through the first. The schema is dropped afterwards.
``waiting_poll(layer, worker, queues)``: a poll started and waiting (armed for hand-offs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pg import TEST_DATABASE_URL, async_temp_schema, wanting

from wiggle import Limit
from wiggle._engine.engine import Engine
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.memory import MemoryStore
from wiggle._storage.postgres import PostgresStore


def one_step(name: str = "one", limit: Limit | None = None) -> WorkflowDefinition:
    """A workflow of one task step ``a`` and its end; ``limit``: the step's concurrency limit."""
    return WorkflowDefinition(
        name=name,
        start_node="a",
        nodes=(Node(id="a", kind=NodeKind.TASK, next="end", limit=limit), Node(id="end", kind=NodeKind.END)),
    )


def two_steps(queue: str) -> WorkflowDefinition:
    """The workflow "two": task steps ``a`` then ``b``, both on ``queue``, and its end."""
    return WorkflowDefinition(
        name="two",
        start_node="a",
        nodes=(
            Node(id="a", kind=NodeKind.TASK, queue=queue, next="b"),
            Node(id="b", kind=NodeKind.TASK, queue=queue, next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    )


@contextlib.asynccontextmanager
async def postgres_nodes(
    n: int, *definitions: WorkflowDefinition
) -> AsyncIterator[tuple[list[PostgresStore], list[Instances]]]:
    async with async_temp_schema() as schema:
        stores = [PostgresStore(TEST_DATABASE_URL, schema) for _ in range(n)]
        try:
            for store in stores:
                await store.open()
            layers = [Instances(store, Engine()) for store in stores]
            for definition in definitions:
                await layers[0].register(definition)
            yield stores, layers
        finally:
            for store in stores:
                await store.close()


@contextlib.asynccontextmanager
async def instance_layer(kind: str, *definitions: WorkflowDefinition) -> AsyncIterator[Instances]:
    if kind == "memory":
        layer = Instances(MemoryStore(), Engine())
        for definition in definitions:
            await layer.register(definition)
        yield layer
        return
    async with postgres_nodes(1, *definitions) as (_, (layer,)):
        yield layer


async def waiting_poll(
    layer: Instances, worker: str, queues: list[str], max_tasks: int = 4
) -> asyncio.Task[Any]:
    """A poll of ``queues`` by ``worker`` that is waiting (armed for hand-offs,
    wiggle/_storage/handoff.py) when this returns.

    On PostgreSQL the node's rows of wanted wake-ups for ``queues`` are written first
    (wiggle/_storage/postgres/wakeups.py): written by the poll's own wait, their commit would wake
    it once to look again (with other nodes connected), and a start in that moment would find no
    poll waiting and leave its step to a claim."""
    if hasattr(layer.store, "cluster"):
        async with wanting(layer.store, "work", queues):
            pass
    notifier = layer.store.notifier
    before = len(notifier._armed)
    poll = asyncio.ensure_future(layer.poll(worker, queues, max_tasks, 30.0))
    for _ in range(200):
        if len(notifier._armed) > before:
            return poll
        await asyncio.sleep(0.005)
    raise AssertionError("the poll never started waiting")
