"""History rows that carry several entries (migration 0023; wiggle/_storage/postgres/codecs.py
``history_rows`` / ``history_from``): a transaction's entries of one instance are one row, read
back as the same entries in the same order, by the store and by the ``history_entries`` view."""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pg import TEST_DATABASE_URL
from psycopg import sql

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle._engine.state import HistoryEntry
from wiggle._storage.postgres.codecs import HISTORY_WRITE_FIELDS, history_from, history_rows
from wiggle.testing import EmbeddedServer

_text = st.text(alphabet=st.sampled_from('ab",\\{}[] \né\x01'), max_size=5)


@st.composite
def _entries(draw: st.DrawFn) -> list[HistoryEntry]:
    """Entries of a few instances, in runs (a transaction's history of several instances)."""
    out: list[HistoryEntry] = []
    for instance in draw(st.lists(st.sampled_from(["wi-a", "wi-b", "wi-c"]), min_size=1, max_size=4)):
        token = draw(st.sampled_from(["tk-1", "tk-2"]))
        worker = draw(st.sampled_from(["w-1", "w-2", ""]))
        for _ in range(draw(st.integers(1, 6))):
            out.append(
                HistoryEntry(
                    instance,
                    draw(st.sampled_from([token, "tk-3"])),
                    draw(_text),
                    draw(st.sampled_from(["STEP", "END", "SLEEP"])),
                    draw(st.integers(0, 2**31 - 1)),
                    draw(st.sampled_from([worker, "w-3"])),
                    draw(st.integers(0, 2**62)),
                    draw(st.integers(0, 2**62)),
                    draw(st.sampled_from(["COMPLETED", "RETRY", "FAILED"])),
                    error=draw(_text),
                    child_id=draw(st.sampled_from(["", "wi-child"])),
                    traceback=draw(_text),
                )
            )
    return out


def _runs(entries: list[HistoryEntry]) -> list[int]:
    """The lengths of the runs of consecutive entries of one instance."""
    lengths: list[int] = []
    for i, e in enumerate(entries):
        if i and entries[i - 1].instance_id == e.instance_id:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def _stored(rows: list[Any]) -> list[Any]:
    """The rows as PostgreSQL gives them back: ``more`` as bytes, the others as they went in."""
    return [(*row[:-1], None if row[-1] is None else bytes(row[-1])) for row in rows]


@given(_entries())
def test_entries_read_back_as_written_one_row_per_run_of_an_instance(entries: list[HistoryEntry]) -> None:
    rows: list[Any] = []
    history_rows(entries, rows)
    runs = _runs(entries)
    assert len(rows) == len(runs)
    assert all(len(row) == len(HISTORY_WRITE_FIELDS) for row in rows)
    # a row of one entry carries no ``more``; every other row packs the rest of its run
    assert [row[-1] is None for row in rows] == [n == 1 for n in runs]
    for instance_id in {row[0] for row in rows}:  # what one instance's history read (ORDER BY seq) gets
        expected = [e for e in entries if e.instance_id == instance_id]
        got = history_from(_stored([r for r in rows if r[0] == instance_id]))
        assert [msgspec.structs.astuple(e) for e in got] == [msgspec.structs.astuple(e) for e in expected]


def test_a_single_entry_is_a_plain_row_and_rows_written_before_read_as_they_were() -> None:
    one = HistoryEntry("wi-a", "tk-1", "a", "STEP", 1, "w-1", 5, 6, "COMPLETED")
    rows: list[Any] = []
    history_rows([one], rows)
    assert rows == [(*msgspec.structs.astuple(one), None)]
    # rows of the old layout (one entry each, ``more`` NULL) next to a packed one
    packed: list[Any] = []
    run = [HistoryEntry("wi-a", "tk-1", n, "STEP", 1, "w-1", 7, 8, "COMPLETED") for n in ("b", "c", "d")]
    history_rows(run, packed)
    assert len(packed) == 1 and packed[0][-1] is not None
    assert history_from(_stored(rows + packed)) == [one, *run]


def test_a_run_of_one_token_and_worker_does_not_repeat_them() -> None:
    run = [
        HistoryEntry("wi-a", "tk-" + "1" * 30, f"s{i}", "STEP", 1, "w-" + "2" * 30, i, i, "COMPLETED")
        for i in range(20)
    ]
    rows: list[Any] = []
    history_rows(run, rows)
    (row,) = rows
    assert b"1" * 30 not in row[-1] and b"2" * 30 not in row[-1]
    assert history_from(_stored(rows)) == run


# ---------------------------------------------------------------------- against PostgreSQL


@pytest.mark.postgres
async def test_a_local_async_run_is_one_history_row_and_the_view_lists_every_entry(pg_schema: str) -> None:
    attempts: list[int] = []

    def step(ctx: dict[str, Any]) -> dict[str, Any]:
        return {**ctx, "n": ctx.get("n", 0) + 1}

    def flaky(ctx: dict[str, Any]) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError('refused: "quoted" \\ and é')
        return ctx

    flow = (
        Workflow.define("packed-history")
        .execution(ExecutionMode.LOCAL_ASYNC)
        .retry(RetryPolicy.fixed(2, 0.01))
    )
    for i in range(6):
        flow = flow.step(step, name=f"s{i}")
    bp = flow.step(flaky).step(step, name="last").build()
    async with EmbeddedServer(database_url=TEST_DATABASE_URL, database_schema=pg_schema) as server:
        async with server.worker([bp]):
            info = await server.client.start(bp, {})
            done = await server.client.wait(info.instance_id, timeout=30)
            history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED" and done.context == {"n": 7}
    names = [e.node_id for e in history]
    assert names[:8] == ["s0", "s1", "s2", "s3", "s4", "s5", "flaky", "flaky"], names
    assert [e.outcome for e in history if e.node_id == "flaky"] == ["RETRY", "COMPLETED"]
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        rows, packed = conn.execute(
            sql.SQL("SELECT count(*), count(more) FROM {}.history WHERE instance_id = %s").format(
                sql.Identifier(pg_schema)
            ),
            (info.instance_id,),
        ).fetchone()
        fields = "token_id, node_id, kind, attempt, worker_id, started_at, ended_at, outcome, error, child_id, traceback"
        view = conn.execute(
            sql.SQL(
                f"SELECT {fields} FROM {{}}.history_entries WHERE instance_id = %s ORDER BY seq, pos"
            ).format(sql.Identifier(pg_schema)),
            (info.instance_id,),
        ).fetchall()
    # the run's prefix went in one report (one row), the failure and the rest in a few more
    assert rows < len(history) and packed >= 1, (rows, packed, len(history))
    expected = [
        (
            e.token_id,
            e.node_id,
            e.kind,
            e.attempt,
            e.worker_id,
            e.started_at,
            e.ended_at,
            str(e.outcome),
            e.error,
            e.child_id,
            e.traceback,
        )
        for e in history
    ]
    assert view == expected
    assert any('"quoted" \\ and é' in e.error for e in history)
