"""The claim statements on a new schema (docs/postgres-plans.md#claims-on-a-new-schema).

Before autovacuum has analyzed a new schema's tables, a prepared claim must still reach each
token's instance through its primary key, never by scanning every RUNNING instance per token (the
plan that made PostgreSQL's CPU per instance double under ``wiggle bench --submit during``).
"""

from __future__ import annotations

import re

import psycopg
import pytest
from layers import one_step
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Engine
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.migrations import migrate
from wiggle._storage.postgres.statements import Queries


def _numbered(text: str) -> str:
    count = iter(range(1, 100))
    return re.sub(r"%s", lambda _: f"${next(count)}", text)


@pytest.mark.parametrize(
    ("statement", "args"),
    [
        # queue(s), now, the rates' clock (NULL: the database's), keys and ids already found, limit(s)
        ("claim_one", "'q', 1, NULL, '{}', '{}', 16"),
        ("claim_many", "'{q,r}', 1, NULL, '{}', '{}', 16, 16"),
    ],
)
async def test_a_generic_claim_plan_on_an_unanalyzed_schema_uses_the_primary_key(
    pg_schema: str,  # noqa: F811
    statement: str,
    args: str,
) -> None:
    await migrate(TEST_DATABASE_URL, pg_schema)
    text = _numbered(getattr(Queries(pg_schema), statement))
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE claim_plan AS {text}")
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE claim_plan({args})"))
    assert "instances_pkey" in plan, plan
    assert "instances_status" not in plan, plan


async def test_a_ready_token_of_a_finished_instance_is_not_claimed(pg_schema: str) -> None:  # noqa: F811
    store = PostgresStore(TEST_DATABASE_URL, pg_schema)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(one_step())
        stray = await layer.start("one", "", {}, "", "")
        good = await layer.start("one", "", {}, "", "")
        # An inconsistency the engine never makes (finishing cancels the active tokens), made by
        # hand: the claim checks the instance's status itself, since its SQL no longer does.
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{pg_schema}".instances SET status = %s WHERE id = %s',
                ("CANCELLED", stray.instance.id),
            )
        claimed = await layer.poll("w", ["one"], 16, 0.0)
        assert [c.token.instance_id for c in claimed] == [good.instance.id]
    finally:
        await store.close()


async def test_a_claims_first_round_has_one_generic_plan_an_ordered_scan(pg_schema: str) -> None:  # noqa: F811
    """The first round of every claim runs under its generic plan, planned once per connection
    (docs/postgres-plans.md#one-plan-per-claim): on a backlog of 5,000 due tokens that plan is the
    ordered scan of tokens_claim, which stops after LIMIT rows, never a sort of the backlog; and
    the store's own connection runs the claim with no custom plan at all (left to PostgreSQL's
    auto mode, a claim was planned again at every call)."""
    store = PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=1)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(one_step())
        first = await layer.start("one", "", {}, "", "")
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{pg_schema}".tokens (id, instance_id, node_id, status, kind, queue, attempt, '
                "available_at, context, fork_stack, created_at) "
                "SELECT t.id || '.x' || g, t.instance_id, t.node_id, 'READY', t.kind, t.queue, 0, "
                f't.available_at + g, t.context, t.fork_stack, t.created_at FROM "{pg_schema}".tokens t, '
                "generate_series(1, 5000) g"
            )
            conn.execute(f'ANALYZE "{pg_schema}".tokens, "{pg_schema}".instances')
            queries = Queries(pg_schema)
            for name, args, sorts in (
                ("claim_one_first", "'one', 9e15::bigint, NULL, 16", 0),
                # many: the one sort of at most LIMIT rows per queue, after the queues' scans
                ("claim_many_first", "'{one,two}', 9e15::bigint, NULL, 16, 16", 1),
            ):
                conn.execute(queries.generic_plans.replace("LOCAL ", ""))
                conn.execute(f"PREPARE {name} AS {_numbered(getattr(queries, name))}")
                plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE {name}({args})"))
                assert "tokens_claim" in plan, plan
                assert plan.count("Sort  (") == sorts, plan
        for _ in range(20):  # claims of one token each, on the store's one pooled connection
            claimed = await layer.poll("w", ["one"], 1, 0.0)
            assert len(claimed) == 1
        assert store.db.pool is not None
        async with store.db.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            plans = [
                (g, c)
                for text, g, c in await cur.fetchall()
                if "SKIP LOCKED" in text and "<> ALL" not in text
            ]
        assert first.instance.id
        assert len(plans) == 1, plans
        generic, custom = plans[0]
        assert custom == 0 and generic >= 10, plans[0]
    finally:
        await store.close()
