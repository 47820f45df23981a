"""The claim statements on a new schema (docs/postgres-plans.md#claims-on-a-new-schema).

Before autovacuum has analyzed a new schema's tables, a prepared claim must still reach each
token's instance through its primary key, never by scanning every RUNNING instance per token (the
plan that made PostgreSQL's CPU per instance double under ``wiggle bench --submit during``).
"""

from __future__ import annotations

import re

import psycopg
import pytest
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Engine
from wiggle._model import Node, NodeKind, WorkflowDefinition
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


def _one_step() -> WorkflowDefinition:
    return WorkflowDefinition(
        name="one",
        start_node="a",
        nodes=(Node(id="a", kind=NodeKind.TASK, next="end"), Node(id="end", kind=NodeKind.END)),
    )


async def test_a_ready_token_of_a_finished_instance_is_not_claimed(pg_schema: str) -> None:  # noqa: F811
    store = PostgresStore(TEST_DATABASE_URL, pg_schema)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(_one_step())
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
