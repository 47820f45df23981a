"""A PostgreSQL server's copies of what it last wrote (wiggle/_storage/postgres/state_cache.py,
migration 0021): the next transition of an instance runs on the copy and is checked, written and
committed in one round trip; any change since, by anyone, fails the check and the transition is
run again on a read, with the right outcome. The whole suite runs with GroupCommit.verify_kept
(tests/conftest.py), which compares every copy used with a read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest
from layers import waiting_poll
from pg import TEST_DATABASE_URL, pipelines_opened, terminate_sleeping

from wiggle._engine.engine import Claimed, Engine
from wiggle._engine.records import ContextSet
from wiggle._engine.state import Changes, Instance, InstanceState, InstanceStatus, Token, TokenStatus
from wiggle._model import ExecutionMode, Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.base import InstanceView
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.state_cache import STALE, StateCache, print_of
from wiggle._storage.postgres.statements import ACTIVE
from wiggle.errors import AlreadyFinished, Unavailable, WiggleError

pytestmark = pytest.mark.postgres


def _linear(steps: int = 4) -> WorkflowDefinition:
    ids = [f"s{i}" for i in range(steps)]
    nodes = [
        Node(id=ids[i], kind=NodeKind.TASK, next=ids[i + 1] if i + 1 < steps else "end") for i in range(steps)
    ]
    definition = WorkflowDefinition(
        name="lin", start_node=ids[0], nodes=(*nodes, Node(id="end", kind=NodeKind.END))
    )
    return msgspec.structs.replace(definition, execution_mode=ExecutionMode.LOCAL_SYNC)


class _Layer(Instances):
    store: PostgresStore


async def _layers(schema: str, n: int) -> list[_Layer]:
    layers = []
    for _ in range(n):
        store = PostgresStore(TEST_DATABASE_URL, schema, pool_size=3)
        await store.open()
        layers.append(_Layer(store, Engine()))
    return layers


@pytest.fixture
async def two(pg_schema: str) -> AsyncIterator[list[_Layer]]:  # noqa: F811
    layers = await _layers(pg_schema, 2)
    yield layers
    for layer in layers:
        await layer.store.close()


@contextlib.contextmanager
def _history_trigger(schema: str, body: str) -> Iterator[None]:
    """While the block runs, every INSERT into ``schema``'s history runs ``body`` (PL/pgSQL) in
    its statement, as an operator's trigger would."""
    s = f'"{schema}"'
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {s}.on_history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$"
        )
        conn.execute(
            f"CREATE TRIGGER on_history AFTER INSERT ON {s}.history EXECUTE FUNCTION {s}.on_history()"
        )
        try:
            yield
        finally:
            conn.execute(f"DROP TRIGGER on_history ON {s}.history")
            conn.execute(f"DROP FUNCTION {s}.on_history()")


async def _kept(layer: _Layer) -> tuple[InstanceView, Claimed]:
    """An instance of ``_linear()`` claimed and its first step reported: what it wrote is kept."""
    await layer.register(_linear())
    view = await layer.start("lin", "", {"n": 0}, "")
    (claimed,) = await layer.claim("w", ["lin"], 1)
    await layer.advance_run(claimed.token.id, "w", [ContextSet("s0", {"n": 1})], False, "")
    assert view.instance.id in _cache(layer)._entries
    return view, claimed


def _cache(layer: _Layer) -> StateCache:
    cache = layer.store.group.cache
    assert cache is not None
    return cache


async def test_a_local_run_reports_on_the_copy_its_server_kept(two: list[_Layer]) -> None:
    a = two[0]
    await a.register(_linear())
    view = await a.start("lin", "", {"n": 0}, "")
    (c,) = await a.claim("w", ["lin"], 1)
    cache = _cache(a)
    assert view.instance.id not in cache._entries  # a claim changes its token: nothing kept
    for step in range(3):  # LOCAL_SYNC: one AdvanceRun per step, all on one token
        outcome = await a.advance_run(c.token.id, "w", [ContextSet(f"s{step}", {"n": step + 1})], False, "")
        assert outcome.token_status == "RUNNING"
    # the first report read the instance; the next two ran on what the one before wrote
    assert (cache.hits, cache.stale) == (2, 0)
    outcome = await a.advance_run(c.token.id, "w", [ContextSet("s3", {"n": 4})], True, "")
    assert outcome.instance_status == "COMPLETED" and cache.hits == 3
    assert view.instance.id not in cache._entries  # finished: no longer kept
    done = await a.get_instance(view.instance.id)
    assert done.instance.context == {"n": 4} and done.instance.steps == 4
    assert [h.node_id for h in await a.history(view.instance.id)] == ["s0", "s1", "s2", "s3", "end"]


async def test_a_start_handed_to_a_waiting_poll_is_kept_and_its_first_report_reads_nothing(
    two: list[_Layer],
) -> None:
    a = two[0]
    await a.register(_linear())
    cache = _cache(a)
    # nobody waits: the first step stays READY, a claim comes next, nothing is kept
    first = await a.start("lin", "", {"n": 0}, "")
    assert first.instance.id not in cache._entries
    (c,) = await a.claim("w", ["lin"], 1)
    await a.advance_run(c.token.id, "w", [ContextSet("s0", {"n": 1})], False, "")
    assert (cache.hits, cache.stale) == (0, 0)  # read
    # a poll waits: the start leases it the first step in its own transaction and keeps what it wrote
    poll = await waiting_poll(a, "w2", ["lin"], 1)
    view = await a.start("lin", "", {"n": 0}, "")
    assert view.instance.id in cache._entries
    (handed,) = await asyncio.wait_for(poll, 10.0)
    assert handed.token.instance_id == view.instance.id and a.handed_off == 1
    outcome = await a.advance_run(handed.token.id, "w2", [ContextSet("s0", {"n": 1})], False, "")
    assert outcome.token_status == "RUNNING"
    assert (cache.hits, cache.stale) == (1, 0)  # on the start's copy, checked (and verified: conftest)
    await a.advance_run(handed.token.id, "w2", [ContextSet("s1", {"n": 2})], False, "")
    assert (cache.hits, cache.stale) == (2, 0)


async def test_a_change_by_another_server_fails_the_check_and_the_read_decides(two: list[_Layer]) -> None:
    a, b = two
    await a.register(_linear())
    view = await a.start("lin", "", {"n": 0}, "")
    (c,) = await a.claim("w", ["lin"], 1)
    await a.advance_run(c.token.id, "w", [ContextSet("s0", {"n": 1})], False, "")
    assert view.instance.id in _cache(a)._entries
    cancelled, changed = await b.cancel(view.instance.id, "from b")  # a does not know
    assert changed
    with pytest.raises(AlreadyFinished):
        await a.heartbeat(c.token.id, "w")
    assert _cache(a).stale == 1 and _cache(a).hits == 0
    assert (await a.get_instance(view.instance.id)).instance.status == "CANCELLED"


async def test_any_write_to_a_token_fails_the_check(two: list[_Layer], pg_schema: str) -> None:  # noqa: F811
    # Not only this code's writes: an operator's UPDATE of a token changes its xmin too.
    a = two[0]
    await a.register(_linear())
    view = await a.start("lin", "", {"n": 0}, "")
    (c,) = await a.claim("w", ["lin"], 1)
    await a.advance_run(c.token.id, "w", [ContextSet("s0", {"n": 1})], False, "")
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{pg_schema}".tokens SET lease_expires_at = lease_expires_at + 1 WHERE id = %s',
            (c.token.id,),
        )
    status, expires = await a.heartbeat(c.token.id, "w")
    assert status == "RUNNING" and expires > 0
    assert (_cache(a).stale, _cache(a).hits) == (1, 0)
    # and what that heartbeat wrote is kept again: the next one runs on it
    await a.heartbeat(c.token.id, "w")
    assert _cache(a).hits == 1
    assert (await a.get_instance(view.instance.id)).tokens[0].lease_expires_at >= expires


async def test_a_kept_group_is_one_statement_and_its_commit_is_checked_first(
    two: list[_Layer],
    pg_schema: str,  # noqa: F811
) -> None:
    """A group on kept states is the check and the writes in one statement, its own transaction:
    the rows it writes carry the transaction id the check returned (the next report's print), and
    a write made to fail after the check (an operator's trigger) leaves nothing written."""
    a = two[0]
    view, c = await _kept(a)
    with pipelines_opened() as pipelines, pytest.MonkeyPatch.context() as patch:
        patch.setattr(a.store.group, "verify_kept", False)  # (its read is a transaction: conftest.py)
        await a.advance_run(c.token.id, "w", [ContextSet("s1", {"n": 2})], False, "")
    assert pipelines == [0] and _cache(a).hits == 1  # no transaction block: one statement
    with _history_trigger(pg_schema, "RAISE EXCEPTION 'refused by a test trigger';"):
        with pytest.raises(WiggleError, match="refused by a test trigger"):
            await a.advance_run(c.token.id, "w", [ContextSet("s2", {"n": 3})], False, "")
    assert (_cache(a).hits, _cache(a).stale) == (1, 0)  # the check passed; the statement failed whole
    done = await a.get_instance(view.instance.id)
    assert done.instance.context == {"n": 2} and done.instance.steps == 2
    # the copy is still what the database holds (nothing was written): the report runs on it
    await a.advance_run(c.token.id, "w", [ContextSet("s2", {"n": 3})], False, "")
    assert (_cache(a).hits, _cache(a).stale) == (2, 0)
    assert (await a.get_instance(view.instance.id)).instance.context == {"n": 3}
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT xmin::text FROM "{pg_schema}".instances WHERE id = %s', (view.instance.id,)
        ).fetchone()
    kept = _cache(a)._entries[view.instance.id]
    assert row is not None and kept.instance_xmin == row[0], (row, kept.instance_xmin)


async def test_a_kept_group_whose_connection_breaks_is_a_commit_of_unknown_outcome(
    two: list[_Layer],
    pg_schema: str,  # noqa: F811
) -> None:
    """The one statement of a kept group is its own commit: a connection lost while it runs may
    have committed it, so the group is not run again and its callers get UNAVAILABLE saying so
    (db.py CommitUnknown); the worker's repeated report then goes through."""
    a = two[0]
    view, c = await _kept(a)
    with _history_trigger(pg_schema, "PERFORM pg_sleep(30); RETURN NULL;"):
        report = asyncio.ensure_future(
            a.advance_run(c.token.id, "w", [ContextSet("s1", {"n": 2})], False, "")
        )
        await terminate_sleeping(a.store.application_name, "the kept group's statement")
        with pytest.raises(Unavailable, match="may or may not have been applied"):
            await report
    assert (await a.get_instance(view.instance.id)).instance.context == {"n": 1}  # it was not
    outcome = await a.advance_run(c.token.id, "w", [ContextSet("s1", {"n": 2})], False, "")
    assert outcome.token_status == "RUNNING"
    assert (await a.get_instance(view.instance.id)).instance.context == {"n": 2}


async def test_the_check_names_the_changed_instance(two: list[_Layer], pg_schema: str) -> None:  # noqa: F811
    a = two[0]
    await a.register(_linear())
    view = await a.start("lin", "", {"n": 0}, "")
    check = f'SELECT "{pg_schema}".expect_unchanged(%s::text[], %s::text[])'
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT xmin::text FROM "{pg_schema}".instances WHERE id = %s', (view.instance.id,)
        ).fetchone()
        assert row is not None
        tokens = conn.execute(
            f'SELECT id, xmin::text FROM "{pg_schema}".tokens WHERE instance_id = %s', (view.instance.id,)
        ).fetchall()
        right = print_of(row[0], {t[0]: t[1] for t in tokens})
        (xid,) = conn.execute(check, ([view.instance.id], [right])).fetchone() or ("",)
        assert xid.isdigit()
        with pytest.raises(psycopg.Error) as err:
            conn.execute(check, ([view.instance.id], [right + "x"]))
        assert err.value.sqlstate == STALE
        assert f"instance {view.instance.id} changed since this server last wrote it" in str(err.value)
        with pytest.raises(psycopg.Error):  # an instance that is gone is changed too
            conn.execute(check, (["wi-nope"], ["1|"]))


def test_the_checks_active_statuses_are_the_engines() -> None:
    # the migration spells the active statuses out (its partial index's condition): they must
    # stay the engine's
    sql = Path(__file__).parents[2] / "src/wiggle/_storage/postgres/sql/0021_expect_unchanged.sql"
    assert f"t.status IN {ACTIVE}" in sql.read_text()


def _state(
    iid: str, status: InstanceStatus = InstanceStatus.RUNNING, context: object = None
) -> InstanceState:
    instance = Instance(
        id=iid, workflow="w", version="v", status=status, context=context or {"a": [1, 2.5, None]}
    )
    token = Token(id=f"{iid}.1", instance_id=iid, node_id="s0", status=TokenStatus.RUNNING, queue="q")
    return InstanceState(instance, {token.id: token})


def _wrote(state: InstanceState) -> Changes:
    """The changes of a transaction that wrote ``state``'s row and its token."""
    changes = Changes()
    changes.instance_changed = True
    changes.tokens.update(state.tokens)
    return changes


def test_copies_are_fresh_objects_with_the_prints_of_what_was_written() -> None:
    cache = StateCache()
    state = _state("wi-1")
    changes = _wrote(state)
    cache.keep(state, changes, {"": "5"}, "9")
    taken = cache.take(["wi-1"])
    assert taken is not None
    states, xmins, prints = taken
    assert states["wi-1"].instance == state.instance and states["wi-1"].tokens == state.tokens
    assert states["wi-1"].instance is not state.instance
    assert states["wi-1"].instance.context is not state.instance.context
    assert xmins["wi-1"] == {"": "9", "wi-1.1": "9"} and prints == ["9|wi-1.1@9"]
    # not written by the transaction: the xmins it was read with stay
    cache.keep(state, Changes(), {"": "5", "wi-1.1": "7"}, "10")
    assert cache.take(["wi-1"])[2] == ["5|wi-1.1@7"]  # type: ignore[index]
    # a token neither read nor written: nothing is kept
    cache.keep(state, Changes(), {"": "5"}, "10")
    assert cache.take(["wi-1"]) is None
    # a finished instance is not kept
    cache.keep(_state("wi-2", status=InstanceStatus.COMPLETED), changes, {"": "1"}, "2")
    assert cache.take(["wi-2"]) is None
    assert cache.take(["wi-1", "wi-2"]) is None  # a group is taken whole or not at all


def test_copies_are_not_used_while_checks_keep_failing_and_are_tried_again() -> None:
    cache = StateCache()
    state = _state("wi-1")
    changes = _wrote(state)
    for _ in range(8):
        cache.checked(True, [])
    cache.keep(state, changes, {}, "3")
    offered = sum(cache.take(["wi-1"]) is not None for _ in range(2 * StateCache.RETRY_EVERY))
    assert offered == 2  # one in RETRY_EVERY while more than MAX_STALE_SHARE failed
    for _ in range(StateCache.WINDOW):
        cache.checked(False, [])
    assert cache.take(["wi-1"]) is not None


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    cache = StateCache()
    cache.MAX_ENTRIES = 3
    for i in range(5):
        state = _state(f"wi-{i}")
        cache.keep(state, _wrote(state), {}, "1")
    assert len(cache) == 3 and cache.take(["wi-0"]) is None and cache.take(["wi-4"]) is not None
    big = _state("wi-big", context={"x": "y" * (StateCache.MAX_BYTES_PER_ENTRY + 1)})
    cache.keep(big, _wrote(big), {}, "1")
    assert cache.take(["wi-big"]) is None
    # and all the copies together: the least recently used go first
    cache.MAX_BYTES = 2 * len(cache._entries["wi-4"].data) + 1  # room for two
    five = _state("wi-5")
    cache.keep(five, _wrote(five), {}, "1")
    assert list(cache._entries) == ["wi-4", "wi-5"]  # wi-4 was taken last: wi-2 and wi-3 went
    assert cache._bytes == sum(len(e.data) for e in cache._entries.values())
    cache.forget(["wi-4", "wi-5"])
    assert len(cache) == 0 and cache._bytes == 0
