"""The store analyzes its tables as they grow (wiggle/_storage/postgres/statistics.py).

A statement prepared while a new schema's tables were empty keeps a plan that reads whole tables
until new statistics replace it; the store's own ANALYZE, at each doubling of the instances it
wrote, is what replaces it long before autovacuum would (docs/postgres-plans.md, "Statistics on
a new schema"). These tests need PostgreSQL: it being unreachable fails them (tests/pg.py).
"""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest
from layers import one_step, postgres_nodes
from pg import TEST_DATABASE_URL

from wiggle import Limit
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.statements import Queries


async def _analyses(store: PostgresStore, at_least: int) -> int:
    for _ in range(500):
        if store.statistics.analyses >= at_least:
            break
        await asyncio.sleep(0.01)
    return store.statistics.analyses


def _last_analyze(schema: str) -> dict[str, object]:
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, last_analyze FROM pg_stat_user_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    return dict(rows)


async def test_the_tables_are_analyzed_each_time_the_instances_double() -> None:
    async with postgres_nodes(1, one_step()) as ((store,), (layer,)):
        store.statistics.min_rows = 40
        assert store.statistics.analyses == 0
        await layer.start_many("one", "", [{"i": i} for i in range(30)], "")
        await asyncio.sleep(0.05)
        assert store.statistics.analyses == 0  # fewer than min_rows: nothing to gain yet
        await layer.start_many("one", "", [{"i": i} for i in range(20)], "")
        assert await _analyses(store, 1) == 1
        analyzed = _last_analyze(store.schema)
        assert all(analyzed[t] is not None for t in ("instances", "tokens", "history")), analyzed
        assert store.statistics.rows >= 50
        # the next analysis comes once as many instances again were written
        await layer.start_many("one", "", [{"i": i} for i in range(20)], "")
        await asyncio.sleep(0.05)
        assert store.statistics.analyses == 1
        await layer.start_many("one", "", [{"i": i} for i in range(40)], "")
        assert await _analyses(store, 2) == 2
        assert store.statistics.rows >= 110
        # a node opened later starts from the statistics the tables have (no analysis at 100)
        later = PostgresStore(TEST_DATABASE_URL, store.schema)
        await later.open()
        try:
            assert later.statistics.rows >= 110 and later.statistics.analyses == 0
        finally:
            await later.close()


@pytest.mark.parametrize(
    ("statement", "table"),
    [("lock_instances", "instances"), ("update_instances", "instances"), ("update_tokens", "tokens")],
)
async def test_a_plan_made_on_the_empty_tables_is_replaced_once_they_grew(statement: str, table: str) -> None:
    async with postgres_nodes(1, one_step()) as ((store,), (layer,)):
        store.statistics.min_rows = 1000  # the plans turn to the primary key at about 800 rows
        text = getattr(Queries(store.schema), statement)
        text = getattr(text, "statement", text)  # a SetWrite's, or a plain statement
        count = iter(range(1, 100))
        numbered = re.sub(r"%s", lambda _: f"${next(count)}", text)
        args = ", ".join(["NULL"] * text.count("%s"))
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")  # what a prepared statement keeps
            conn.execute(f"PREPARE hot AS {numbered}")

            def plan() -> str:
                return "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE hot({args})"))

            # made on the empty table: every mutation group would read every row of it
            assert f"Seq Scan on {table}" in plan(), plan()
            await layer.start_many("one", "", [{"i": i} for i in range(1000)], "")
            assert await _analyses(store, 1) >= 1
            assert f"Index Scan using {table}_pkey" in plan(), plan()
            assert "Seq Scan" not in plan(), plan()


async def test_an_analysis_that_fails_is_logged_and_harms_no_caller(caplog: object) -> None:
    async with postgres_nodes(1, one_step()) as ((store,), (layer,)):
        stats = store.statistics
        stats.min_rows = 10
        stats._analyze = "ANALYZE no_such_table_here"  # a database error on the next analysis
        _, ids = await layer.start_many("one", "", [{"i": i} for i in range(12)], "")
        for _ in range(500):
            if stats._task is None and stats.rows >= 10:
                break
            await asyncio.sleep(0.01)
        assert stats.analyses == 0 and stats.rows >= 10  # tried again at the next doubling
        assert len(ids) == 12 and (await layer.get_instance(ids[-1])).instance.status == "RUNNING"
        assert "analyzing the tables failed" in caplog.text  # type: ignore[attr-defined]


async def _settled(store: PostgresStore) -> None:
    for _ in range(500):
        if store.statistics._task is None:
            return
        await asyncio.sleep(0.01)


async def test_keyed_claims_on_statistics_taken_while_none_ran_bring_an_analysis_of_tokens() -> None:
    """Statistics taken while no keyed step ran (the instances were started, none claimed) plan a
    key's count through tokens_leases, every RUNNING token; once a node has claimed as many keyed
    steps as min_rows it analyzes tokens, and the count's plan reads tokens_limit_held. More keyed
    claims within KEYED_SPACING_SECONDS analyze nothing more."""
    async with postgres_nodes(1, one_step("keyed", Limit(key="card", max=1))) as ((store,), (layer,)):
        stats = store.statistics
        await layer.start_many("keyed", "", [{"card": f"c{i}"} for i in range(1500)], "")
        await _settled(store)
        assert stats.analyses >= 1 and stats.keyed_rows == 0  # the instances' analyses: none ran
        count = iter(range(1, 100))
        numbered = re.sub(r"%s", lambda _: f"${next(count)}", Queries(store.schema).limit_held)
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.execute(f"PREPARE counted AS {numbered}")

            def plan() -> str:
                return "\n".join(row[0] for row in conn.execute("EXPLAIN EXECUTE counted('{c1,c2}')"))

            assert "tokens_leases" in plan(), plan()  # the statistics say nothing runs: any index will do
            before = stats.analyses
            claimed = []
            for _ in range(4):
                claimed += await layer.claim("w", ["keyed"], 250)
            assert len(claimed) == 1000
            for _ in range(500):
                if stats.analyses > before:
                    break
                await asyncio.sleep(0.01)
            assert stats.analyses == before + 1
            assert stats.keyed_rows >= stats.min_rows
            assert "tokens_limit_held" in plan() and "tokens_leases" not in plan(), plan()
            await _settled(store)
            claimed = await layer.claim("w", ["keyed"], 250)
            await asyncio.sleep(0.1)
            assert len(claimed) == 250 and stats.analyses == before + 1  # within the spacing
