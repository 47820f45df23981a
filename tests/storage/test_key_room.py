"""A PostgreSQL claim of steps under concurrency-limit keys admits them in one round trip and
confirms it under the keys' locks (wiggle/_storage/postgres/limits.py, "One round trip";
migrations 0018, 0020): the check refuses a key another claim filled since the read, and the claim then
runs again counting under the locks, so the limit holds."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from layers import one_step
from pg import TEST_DATABASE_URL

from wiggle import Limit
from wiggle._engine.engine import Engine
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres import claims as claims_module
from wiggle._storage.postgres.limits import KEY_ROOM_TAKEN


def _running(schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT instance_id, limit_key FROM "{schema}".tokens WHERE status = %s', ("RUNNING",)
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


async def test_the_check_counts_a_keys_running_attempts_and_names_the_key(pg_schema: str) -> None:  # noqa: F811
    store = PostgresStore(TEST_DATABASE_URL, pg_schema)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(one_step("charge", Limit(key="card", max=1)))
        await layer.start("charge", "", {"card": "x"}, "", "")
        (claimed,) = await layer.claim("w", ["charge"], 4)
        ((_, key),) = _running(pg_schema)
        assert key and claimed.token.limit_key == key
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            check = f'SELECT "{pg_schema}".take_key_room(%s, %s::text[], %s::int[], %s::int[])'
            lock_class = store._limit_lock_class
            assert conn.execute(check, (lock_class, [key], [1], [2])).fetchone() == (1,)  # 1 running + 1 <= 2
            assert conn.execute(check, (lock_class, ["no such key"], [1], [1])).fetchone() == (1,)
            with pytest.raises(psycopg.Error) as err:
                conn.execute(check, (lock_class, ["no such key", key], [1, 1], [1, 1]))
            assert err.value.sqlstate == KEY_ROOM_TAKEN
            said = str(err.value)
            assert f"concurrency-limit key {key} has 1 attempt(s) running: no room for 1 more" in said
    finally:
        await store.close()


async def test_the_check_holds_each_keys_lock_until_its_transaction_ends(pg_schema: str) -> None:  # noqa: F811
    """take_key_room takes the keys' advisory locks itself (the lock class and key hash every claim
    locks a key by), and holds them to the end of the claim's transaction."""
    store = PostgresStore(TEST_DATABASE_URL, pg_schema)
    await store.open()
    try:
        lock_class = store._limit_lock_class
        check = f'SELECT "{pg_schema}".take_key_room(%s, %s::text[], %s::int[], %s::int[])'
        probe = "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))"
        with (
            psycopg.connect(TEST_DATABASE_URL) as claim,
            psycopg.connect(TEST_DATABASE_URL, autocommit=True) as other,
        ):
            assert claim.execute(check, (lock_class, ["card:a", "card:b"], [1, 1], [1, 1])).fetchone() == (1,)
            for key in ("card:a", "card:b"):
                assert other.execute(probe, (lock_class, key)).fetchone() == (False,), key
            assert other.execute(probe, (lock_class, "card:c")).fetchone() == (True,)
            claim.rollback()
            assert other.execute(probe, (lock_class, "card:a")).fetchone() == (True,)
    finally:
        await store.close()


async def test_a_claim_whose_key_filled_since_its_read_runs_again_and_takes_nothing(
    pg_schema: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers, two READY steps of one card under a limit of 1. Server A reads (and row-locks)
    the first; before A writes, server B claims the second and commits. A's check under the key's
    lock then sees B's attempt, A rolls back, runs again counting under the lock, and takes
    nothing: one attempt of the card runs, never two."""
    a, b = PostgresStore(TEST_DATABASE_URL, pg_schema), PostgresStore(TEST_DATABASE_URL, pg_schema)
    await a.open()
    await b.open()
    try:
        layer_a, layer_b = Instances(a, Engine()), Instances(b, Engine())
        await layer_a.register(one_step("charge", Limit(key="card", max=1)))
        first = await layer_a.start("charge", "", {"card": "x"}, "", "")
        second = await layer_a.start("charge", "", {"card": "x"}, "", "")
        real = claims_module.claim_candidates
        b_claimed: list[Any] = []

        async def read_then_let_b_in(*args: Any, **kwargs: Any) -> Any:
            found = await real(*args, **kwargs)
            if not b_claimed:  # A's first read only (B's own claim comes through here too)
                b_claimed.append(None)
                b_claimed.extend(await layer_b.claim("w-b", ["charge"], 1))
            return found

        monkeypatch.setattr(claims_module, "claim_candidates", read_then_let_b_in)
        got = await layer_a.claim("w-a", ["charge"], 1)
        monkeypatch.setattr(claims_module, "claim_candidates", real)
        assert [c.token.instance_id for c in b_claimed[1:]] == [second.instance.id]
        assert got == []
        assert a.key_room_retries == 1 and b.key_room_retries == 0
        assert [iid for iid, _ in _running(pg_schema)] == [second.instance.id]
        # once B's attempt ends, A's step is claimed as usual
        await layer_b.complete(b_claimed[1].task_id, "w-b", {"card": "x"}, None)
        (later,) = await layer_a.claim("w-a", ["charge"], 1)
        assert later.token.instance_id == first.instance.id
        assert a.key_room_retries == 1
    finally:
        await a.close()
        await b.close()
