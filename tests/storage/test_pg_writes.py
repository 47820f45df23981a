"""A transaction's writes in one statement (wiggle/_storage/postgres/writes.py): its shapes, and
what a report sends to PostgreSQL."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from pg import TEST_DATABASE_URL

from wiggle._engine.engine import Engine, EngineConfig
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore
from wiggle._storage.postgres.statements import Queries
from wiggle._storage.postgres.writes import ChangeWriter

KINDS = ("new instances", "instances", "instances with context", "tokens", "new tokens", "history")


class Value(str):
    """A stand-in value every column's array encoder takes (codecs.py; bytea asks for ``hex``)."""

    def hex(self) -> str:
        return "00"


def _rows(write: Any, n: int) -> list[list[Value]]:
    """``n`` rows of as many values as the write's one-row statement has placeholders."""
    return [[Value(i) for i in range(write.one.count("%s"))] for _ in range(n)]


@pytest.mark.parametrize(
    "counts",
    [(0, 1, 0, 1, 0, 1), (0, 0, 1, 2, 1, 3), (1, 0, 0, 0, 1, 1), (0, 0, 0, 1, 0, 0), (2, 9, 0, 3, 8, 12)],
)
def test_one_statement_with_a_placeholder_for_every_parameter(counts: tuple[int, ...]) -> None:
    writer = ChangeWriter(Queries("s"))
    assert [w.name for w in writer.queries.row_writes] == list(KINDS)
    kinds = tuple(_rows(w, n) for w, n in zip(writer.queries.row_writes, counts, strict=True))
    text, params = writer.statement(kinds)
    assert "%s" not in text and f"${len(params)}" in text and f"${len(params) + 1}" not in text
    parts = text.count(" AS (UPDATE ") + text.count(" AS (INSERT ") + 1
    # updates row by row (a part each), inserts in one part, set-based from 8 rows on: one part
    expected = sum(
        (1 if n >= writer.set_write_min_rows or w.insert else n) if n else 0
        for w, n in zip(writer.queries.row_writes, counts, strict=True)
    )
    assert parts == expected
    assert text.startswith("WITH ") == (expected > 1)
    assert writer.statement(kinds)[0] is text  # rendered once per shape


def test_rendered_statements_are_bounded() -> None:
    """A long-running server meets ever new shapes (rows of each kind per group commit): the
    rendered statements kept stay at MAX_SHAPES, the shape in use among them (a soak's growth)."""
    writer = ChangeWriter(Queries("s"))
    writes = writer.queries.row_writes
    hot = tuple(_rows(w, n) for w, n in zip(writes, (0, 1, 0, 1, 0, 1), strict=True))
    hot_text = writer.statement(hot)[0]
    shapes = itertools.islice(itertools.product(range(4), repeat=len(writes)), 3 * ChangeWriter.MAX_SHAPES)
    for i, counts in enumerate(shapes):
        kinds = tuple(_rows(w, n) for w, n in zip(writes, counts, strict=True))
        writer.statement(kinds)
        writer.statement(kinds, ("SELECT %s", [1]))
        if i % 16 == 0:
            assert writer.statement(hot)[0] is hot_text  # used often: never rendered again
    assert len(writer._texts) == ChangeWriter.MAX_SHAPES
    assert writer.statement(hot)[0] is hot_text


def test_no_rows_no_statement() -> None:
    assert ChangeWriter(Queries("s")).statement(((),) * 6) == ("", [])


# ---------------------------------------------------------------------- against PostgreSQL


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement this process's async cursors execute (a connection's
    ``execute`` runs a cursor's; the writes run a raw cursor's, a subclass)."""
    seen: list[str] = []
    original = psycopg.AsyncCursor.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(query if isinstance(query, str) else repr(query))
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    yield seen


@pytest.fixture
async def layer(pg_schema: str) -> AsyncIterator[Instances]:  # noqa: F811
    store = PostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=2)
    instances = Instances(store, Engine(EngineConfig(lease_millis=60_000)))
    await store.open()
    try:
        flow = WorkflowDefinition(
            name="two",
            start_node="a",
            nodes=(
                Node(id="a", kind=NodeKind.TASK, next="b"),
                Node(id="b", kind=NodeKind.TASK, next="end"),
                Node(id="end", kind=NodeKind.END),
            ),
        )
        await instances.register(flow)
        yield instances
    finally:
        await store.close()


def _kind(text: str) -> str:
    if re.match(r"(BEGIN|COMMIT)$", text):
        return text
    if " FOR UPDATE" in text:
        return "lock"
    if text.startswith("SELECT"):
        return "read"
    return "write"


@pytest.mark.postgres
async def test_a_report_writes_its_instance_token_and_history_in_one_statement(
    layer: Instances, statements: list[str]
) -> None:
    view = await layer.start("two", "", {}, "")
    (claimed,) = await layer.claim("w", ["two"], 1)
    statements.clear()
    await layer.complete(claimed.token.id, "w", {"a": 1}, None)
    report = [_kind(s) for s in statements if "pg_stat_activity" not in s]  # a peer count may run
    assert report == ["BEGIN", "lock", "read", "write", "COMMIT"], statements
    (write,) = (s for s in statements if _kind(s) == "write")
    assert write.startswith("WITH ")
    for part in (".instances SET", ".tokens SET", "INSERT INTO", ".history"):
        assert part in write
    # what it wrote reads back: the context, the token moved on, two history entries
    got = await layer.store.get_instance(view.instance.id)
    assert got.instance.context == {"a": 1} and [t.node_id for t in got.tokens] == ["b"]
    assert [h.node_id for h in await layer.store.history(view.instance.id)][-1:] == ["a"]
