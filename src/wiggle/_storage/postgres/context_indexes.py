"""The expression indexes of context search: one per field named in ``context_search_fields``.

ListInstances' filter ``ctx.FIELD = VALUE`` (wiggle/_storage/postgres/statements.py
list_conditions) compares ``context_text(context, 'FIELD')`` (migration 0015). Without an index
that is a scan of the instances, newest first, until a page is found; with one, a lookup. Each
index costs every step of every instance a write (a step rewrites the context, so the row's
update can no longer be a HOT update and every index of the table gets a new entry), so indexes
are made only for the fields an operator names (docs/dashboard.md#searching).

Made at the store's start with CREATE INDEX CONCURRENTLY (writes go on meanwhile); one left
invalid by an interrupted build is dropped and built again. Indexes of fields no longer named are
kept: dropping one is the operator's call (the docs give the statement).
"""

from __future__ import annotations

import hashlib
import logging

from psycopg import sql

from ..base import CONTEXT_FIELD_PATTERN
from .db import Database

__all__ = ["index_name", "ensure_context_indexes"]

log = logging.getLogger("wiggle.store")


def index_name(field: str) -> str:
    """The index of ``field``: ``instances_ctx_<field>``; a long field's name is cut and given a
    digest, to stay within PostgreSQL's 63 characters and apart from another field's."""
    name = f"instances_ctx_{field}"
    if len(name) <= 63:
        return name
    return f"{name[:54]}_{hashlib.sha256(field.encode()).hexdigest()[:8]}"


async def ensure_context_indexes(db: Database, schema: str, fields: tuple[str, ...]) -> list[str]:
    """Create the missing (or invalid) index of each of ``fields``; the names of those built."""
    built = []
    for field in fields:
        if not CONTEXT_FIELD_PATTERN.fullmatch(field):
            raise ValueError(f"context field {field!r} is not a plain identifier")
        name = index_name(field)
        rows = await db.fetch(
            "context_index",
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
            (schema, name),
        )
        if rows and rows[0][0]:
            continue
        ident = sql.Identifier(schema, name)
        conn = await db.connect("context-index")
        try:
            if rows:  # an interrupted concurrent build left it invalid
                await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(ident))
            log.info("building the context search index %s of field %s (schema %s)", name, field, schema)
            await conn.execute(
                sql.SQL(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {}.instances ({}.context_text(context, {}), id)"
                ).format(
                    sql.Identifier(name),
                    sql.Identifier(schema),
                    sql.Identifier(schema),
                    sql.Literal(field),
                )
            )
        finally:
            await conn.close()
        built.append(name)
    return built
