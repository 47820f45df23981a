"""Writing what transitions changed: the rows of several instances, in one statement.

A transaction's writes (instances, tokens, history; new and changed) go to PostgreSQL as one
statement: each kind of row is a part, the parts joined by data-modifying CTEs (``WITH w1 AS
(UPDATE ...), w2 AS (INSERT ...) INSERT ...``). PostgreSQL runs every part exactly once, on one
snapshot; no two parts touch the same row (one part per kind, and an instance, a token or a
history entry appears once in a transaction's changes), and no constraint ties one table's rows
to another's, so the order of the parts changes nothing but the parameters' order. A
one-instance report used to send one statement per kind of row (an UPDATE of its instance, of
its token, an INSERT of its history entry), a group one per row below the set-based size:
bench/README.md, "Round nine (stepcost)".
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncRawCursor

from ..._engine.state import Changes, InstanceState
from .codecs import (
    INSTANCE_UPDATED,
    encode,
    encode_instance_json,
    history_rows,
    instance_row,
    text_array,
    token_row,
    token_update,
)
from .db import CommitUnknown, Conn, short
from .statements import Queries

__all__ = ["ChangeWriter"]


class ChangeWriter:
    """Persists ``Changes`` on a connection in a transaction (the caller's)."""

    # From this many rows of a kind on, a commit writes them with a set-based part (unnest of one
    # array per column) instead of row by row (VALUES rows, one UPDATE part per row). Measured
    # when each row was a pipelined statement of its own: per row the set-based write cost the
    # server process ~15% less at 8 rows and ~40% less at 32, PostgreSQL about the same; below 8
    # rows the array handling cost more than the statements it saved. As parts of one statement,
    # set-based from 2 rows measured slower again (bench/README.md, "Round nine (stepcost)").
    SET_WRITE_MIN_ROWS = 8

    #: The most statement shapes kept rendered, the ones used longest ago dropped first. A shape
    #: is the row count of each of the six kinds (0-7, or set-based) and the check: some 10^6 of
    #: them, 1-13 KB of text each. A group commit's rows vary with the load (how many instances
    #: it joins, forks, retries, signals), so a long-running server kept meeting shapes it had
    #: never written, and kept each: its memory grew for hours (a 25-minute soak on PostgreSQL
    #: at 10 instances/s: 1,094 shapes, +4.3 MB, still 6 MB an hour at its end). The few dozen
    #: shapes of a steady load stay; a rare one is rendered again (~0.3 ms) when it comes back.
    MAX_SHAPES = 256

    def __init__(self, queries: Queries) -> None:
        self.queries = queries
        self.set_write_min_rows = self.SET_WRITE_MIN_ROWS
        # the statement of each shape (rows of each kind, None for set-based), rendered once; at
        # most 9 choices per kind (0-7 rows, set-based), a few dozen met often: the most recently
        # used MAX_SHAPES are kept
        self._texts: OrderedDict[tuple[int | str | None, ...], str] = OrderedDict()

    def statement(
        self, kinds: tuple[list[Any], ...], check: tuple[str, list[Any]] | None = None
    ) -> tuple[str, list[Any]]:
        """The one statement writing ``kinds`` (the rows of each of ``Queries.row_writes``, in its
        order) and its parameters; "" when there is no row and no check. ``check``: a one-column
        SELECT and its parameters, run before the writes in the same statement (its query, the
        writes its data-modifying CTEs: ``write_checked``), whose row the statement returns."""
        min_rows = self.set_write_min_rows
        shape: list[int | str | None] = [] if check is None else [check[0]]
        params: list[Any] = [] if check is None else list(check[1])
        for write, rows in zip(self.queries.row_writes, kinds, strict=True):
            if rows and len(rows) >= min_rows:
                shape.append(None)
                params.extend(write.many.params(rows))
            else:
                shape.append(len(rows))
                for row in rows:
                    params.extend(row)
        key = tuple(shape)
        texts = self._texts
        text = texts.get(key)
        if text is None:
            text = texts[key] = self._render(key)
            if len(texts) > self.MAX_SHAPES:
                texts.popitem(last=False)
        else:
            texts.move_to_end(key)
        return text, params

    def _render(self, shape: tuple[int | str | None, ...]) -> str:
        check = shape[0] if shape and isinstance(shape[0], str) else None
        parts: list[str] = []
        for write, n in zip(self.queries.row_writes, shape[1:] if check else shape, strict=True):
            assert not isinstance(n, str)
            parts.extend([write.many.statement] if n is None else write.rows(n))
        if check:
            # The check is the statement's query and the writes its data-modifying CTEs, which
            # PostgreSQL runs to completion after the query (write_checked): the check's locks
            # and comparison come before any row is written.
            ctes = "".join(f", w{i} AS ({part})" for i, part in enumerate(parts))
            text = f"WITH c AS ({check}){ctes} SELECT * FROM c"
        elif len(parts) <= 1:
            text = "".join(parts)
        else:
            ctes = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(parts[:-1]))
            text = f"WITH {ctes} {parts[-1]}"
        # Numbered once here, run by a raw cursor: psycopg converts a statement's %s placeholders
        # at every execution when it is longer than 4,096 characters or has more than 50
        # parameters (its cache's limits), and a one-instance report's statement has 54.
        numbers = itertools.count(1)
        return re.sub("%s", lambda _: f"${next(numbers)}", text)

    async def write(
        self,
        conn: Conn,
        items: list[tuple[InstanceState, Changes, Any]],
        existing: set[str] | frozenset[str],
        check: tuple[str, list[Any]] | None = None,
    ) -> bool:
        """Queue the statement persisting the changes of several instances (pipeline mode): one
        statement for every row of every kind. ``existing`` names the tokens already in the table; an
        instance's original context (as loaded) tells whether its context needs writing.
        ``check``: a SELECT run first in the same statement (``statement``), whose error fails
        the transaction before anything is written. False if there was nothing to write."""
        kinds = self.rows(items, existing)
        text, params = self.statement(kinds, check)
        if text:
            await AsyncRawCursor(conn).execute(text, params)
        return any(kinds)

    async def write_checked(
        self,
        conn: Conn,
        items: list[tuple[InstanceState, Changes, Any]],
        existing: set[str] | frozenset[str],
        ids: list[str],
        prints: list[str],
    ) -> tuple[str, bool]:
        """Check, write and commit in one statement on an autocommit connection (no transaction
        block: the statement is its transaction): ``expect_unchanged(ids, prints)`` as the query,
        every row of ``items`` as a data-modifying CTE of it. PostgreSQL runs a statement's
        data-modifying CTEs that its query does not read after the query has finished (they are
        run to completion at the end of the statement), so the check has taken its locks and
        compared the prints before any row is written; a stale print raises, and nothing of the
        statement is written. Were a write ever run first, the check would see that write's own
        xmin on the instance and raise all the same (the group then runs on a read): a wrong
        order could cost a read, never a lost change. The check's result (this transaction's id)
        and whether there was anything to write."""
        # the arrays as literals (codecs.py text_array): psycopg's list adapter inspects each
        # element, a sizeable share of a one-instance report's server CPU
        check = (self.queries.expect_unchanged, [text_array(ids), text_array(prints)])
        row, wrote = await self.write_one(conn, items, existing, check)
        return row[0], wrote

    async def write_one(
        self,
        conn: Conn,
        items: list[tuple[InstanceState, Changes, Any]],
        existing: set[str] | frozenset[str],
        check: tuple[str, list[Any]],
        what: str = "a commit",
    ) -> tuple[Any, bool]:
        """``check`` (a SELECT of one row, and its parameters) and the writes of ``items`` as one
        statement on an autocommit connection, its own transaction (``write_checked``): the
        check's row, and whether there was anything to write. The statement is its own commit, so
        a connection lost during it raises ``CommitUnknown`` (db.py; ``what`` names the commit in
        its message): it may have gone through, and is not run again."""
        kinds = self.rows(items, existing)
        text, params = self.statement(kinds, check)
        cur = AsyncRawCursor(conn)
        try:
            await cur.execute(text, params)
            row = await cur.fetchone()
        except psycopg.OperationalError as exc:
            if conn.broken:
                raise CommitUnknown(f"connection lost during {what}: {short(exc)}") from exc
            raise
        if row is None:  # a SELECT without FROM returns its row: never expected
            raise RuntimeError("the check of a write statement returned no row")
        return row, any(kinds)

    @staticmethod
    def rows(
        items: list[tuple[InstanceState, Changes, Any]], existing: set[str] | frozenset[str]
    ) -> tuple[list[Any], ...]:
        """The rows of each kind (``Queries.row_writes``' order) that ``items`` write."""
        new_instances: list[Any] = []
        keep_context: list[Any] = []
        with_context: list[Any] = []
        token_updates: list[Any] = []
        token_inserts: list[Any] = []
        history: list[Any] = []
        for state, changes, original_context in items:
            inst = state.instance
            if changes.created:
                new_instances.append(instance_row(inst))
            elif changes.instance_changed:
                values = list(msgspec.structs.astuple(inst))
                encode_instance_json(values, inst)
                common = [values[i] for i in INSTANCE_UPDATED]
                # The engine replaces the context, never edits it in place (advance_run relies on it too).
                if inst.context is original_context:
                    keep_context.append((*common, inst.id))
                else:
                    with_context.append((*common, encode(inst.context), inst.id))
            for t in changes.tokens.values():
                if t.id in existing:
                    token_updates.append(token_update(t))
                else:
                    token_inserts.append(token_row(t))
            if changes.history:
                history_rows(changes.history, history)
        return (new_instances, keep_context, with_context, token_updates, token_inserts, history)
