"""Every count of a concurrency-limit key's RUNNING attempts reads the partial index
tokens_limit_held (migration 0014), never every RUNNING token.

PostgreSQL uses a partial index only for a query that implies its condition (``status =
'RUNNING' AND limit_key <> ''``); a count by ``limit_key = t.limit_key`` or by a parameter under a
generic plan does not imply ``limit_key <> ''``, and each count scanned all RUNNING tokens: with
4,000 running, a claim of 16 keyed steps took 12 ms instead of 0.08 (claim_terms.py ``key_held``,
migrations 0019 and 0020, bench/README.md "Round thirteen"). Here 4,000 RUNNING tokens (half of
them keyed) and 500 keyed READY ones, analyzed; each statement's plan (the generic one where the store
prepares it) must reach the counted tokens only through tokens_limit_held.
"""

from __future__ import annotations

import re

import psycopg
import pytest
from pg import TEST_DATABASE_URL

from wiggle._storage.postgres.migrations import migrate
from wiggle._storage.postgres.ops import queue_ready_statement
from wiggle._storage.postgres.statements import Queries


def _numbered(text: str) -> str:
    count = iter(range(1, 100))
    return re.sub(r"%s", lambda _: f"${next(count)}", text)


def _fill(conn: psycopg.Connection, schema: str) -> None:
    s = f'"{schema}"'
    conn.execute(
        f"INSERT INTO {s}.tokens (id, instance_id, node_id, status, kind, queue, limit_key, limit_max, "
        "lease_owner, lease_expires_at) "
        "SELECT 'run' || g, 'i' || g, 'a', 'RUNNING', 'TASK', 'q', "
        "CASE WHEN g % 2 = 0 THEN 'k' || g ELSE '' END, 1, 'w', 1000 + g FROM generate_series(1, 4000) g"
    )
    conn.execute(
        f"INSERT INTO {s}.tokens (id, instance_id, node_id, status, kind, queue, available_at, limit_key, limit_max) "
        "SELECT 'ready' || g, 'j' || g, 'a', 'READY', 'TASK', 'q', g, 'k' || (g * 3), 1 "
        "FROM generate_series(1, 500) g"
    )
    conn.execute(f"ANALYZE {s}.tokens")


def _key_counts(plan: str) -> list[str]:
    """The plan's lines that read the counted tokens (alias h)."""
    return [line for line in plan.splitlines() if re.search(r" on tokens h\b", line)]


@pytest.fixture
async def filled(pg_schema: str) -> str:  # noqa: F811
    await migrate(TEST_DATABASE_URL, pg_schema)
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        _fill(conn, pg_schema)
    return pg_schema


@pytest.mark.parametrize(
    ("statement", "args"),
    [
        # queue(s), now, the rates' clock (NULL: the database's), [keys and ids already found], limit(s)
        # (next_ready: the rates' clock first, then the queues twice)
        ("claim_one_first", "'q', 9e15::bigint, NULL, 16"),
        ("claim_one", "'q', 9e15::bigint, NULL, '{k3}', '{ready1}', 16"),
        ("claim_many_first", "'{q,r}', 9e15::bigint, NULL, 16, 16"),
        ("claim_many", "'{q,r}', 9e15::bigint, NULL, '{k3}', '{ready1}', 16, 16"),
        ("next_ready", "NULL, '{q}', '{q}'"),
        ("limit_held", "'{k2,k4,k6,k9}'"),
    ],
)
async def test_a_generic_plan_counts_a_keys_attempts_through_tokens_limit_held(
    filled: str, statement: str, args: str
) -> None:
    text = _numbered(getattr(Queries(filled), statement))
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE counted AS {text}")
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE counted({args})"))
    counts = _key_counts(plan)
    assert counts, plan
    assert all("tokens_limit_held" in line for line in counts), plan


async def test_the_queue_counts_read_tokens_limit_held(filled: str) -> None:
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        rows = conn.execute(
            "EXPLAIN " + queue_ready_statement(filled), {"now": 9_000_000_000_000_000, "rate_now": None}
        ).fetchall()
    plan = "\n".join(row[0] for row in rows)
    counts = _key_counts(plan)
    assert counts and all("tokens_limit_held" in line for line in counts), plan


async def test_the_key_room_check_reads_tokens_limit_held(filled: str) -> None:
    """take_key_room (migration 0020; expect_key_room's check, 0019), a PL/pgSQL function: its
    statements' plans are shown by auto_explain (nested statements, sent to this client as LOG messages), past the
    five custom plans PL/pgSQL makes before it may settle on a generic one."""
    plans: list[str] = []
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_analyze = off"):
            conn.execute(f"SET auto_explain.{setting}")
        conn.execute("SET client_min_messages = log")
        check = f'SELECT "{filled}".take_key_room(7, %s::text[], %s::int[], %s::int[])'
        for i in range(8):
            keys = [f"k{2 * i + 1}", f"k{2 * i + 101}"]  # odd: none of them runs
            assert conn.execute(check, (keys, [1, 1], [1, 1])).fetchone() == (1,)
        with pytest.raises(psycopg.Error):  # k2 runs: no room under a limit of 1
            conn.execute(check, (["k2"], [1], [1]))
    counted = [p for p in plans if "FROM tokens" in p or "on tokens" in p]
    assert len(counted) >= 9, plans
    assert all("tokens_limit_held" in p for p in counted), counted
