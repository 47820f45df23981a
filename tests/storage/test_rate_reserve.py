"""A PostgreSQL claim on a queue with a fast rate reserves its moments before it reads its rows,
and gives back what it did not use (wiggle/_storage/postgres/rate_blocks.py ``reserve``,
``give_back``; store.py ``claim``).

Claims that spent the moments of a block only after their reads raced for them: of four claims of
16 steps running at once on a rate of a million a second, the first took the server's first block
(8 moments) and was cut to 8 steps, and those behind it found the block spent and took none. A
short claim then tells the server's pollers the queue is empty (delivery.py), and the workers'
claims stay half the size they asked (bench/README.md, "Round fourteen")."""

from __future__ import annotations

import asyncio

from layers import one_step
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Engine
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.queue_limits import QueueLimit


async def _store_with_steps(
    schema: str, queue: str, steps: int, period_millis: int = 1000
) -> tuple[PostgresStore, Instances]:
    store = PostgresStore(TEST_DATABASE_URL, schema)
    await store.open()
    layer = Instances(store, Engine())
    await layer.register(one_step(queue))
    await store.set_queue_limit(
        QueueLimit(queue=queue, max_running=0, rate_max=1_000_000, rate_period_millis=period_millis)
    )
    for n in range(steps):
        await layer.start(queue, "", {"n": n}, "", "")
    return store, layer


async def test_claims_at_once_under_a_rate_far_from_binding_each_take_what_they_asked(
    pg_schema: str,  # noqa: F811
) -> None:
    store, layer = await _store_with_steps(pg_schema, "fast", 64)
    try:
        claims = await asyncio.gather(*(layer.claim(f"w{i}", ["fast"], 16) for i in range(4)))
        assert [len(c) for c in claims] == [16, 16, 16, 16]
        assert len({c.token.id for claim in claims for c in claim}) == 64
    finally:
        await store.close()


async def test_a_claim_gives_back_the_moments_its_rows_did_not_use(pg_schema: str) -> None:  # noqa: F811
    # A minute's period: the block's moments stay due for seconds, however slow the machine is
    # between the claim and the check (a second's period let them pass on a loaded CI run).
    store, layer = await _store_with_steps(pg_schema, "few", 3, period_millis=60_000)
    try:
        limit = store.limited_queues["few"]
        assert len(await layer.claim("w", ["few"], 16)) == 3
        blocks = store.rate_blocks.blocks["few"]
        assert [(b.count, b.spent) for b in blocks] == [(16, 3)]  # a block for the claim's 16; 3 used
        assert store.rate_blocks.due("few", limit, store.clock.now()) == 13
        assert await layer.claim("w", ["few"], 16) == []  # nothing READY: nothing spent
        assert sum(b.spent for b in store.rate_blocks.blocks["few"]) == 3  # (a block may be added)
    finally:
        await store.close()
