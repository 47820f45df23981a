"""The schema's numbered migrations (the .sql files in ``sql/``) and their runner."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from importlib import resources

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from ..._engine.state import now_millis
from ...errors import FailedPrecondition, InvalidArgument, WiggleError
from .db import Conn, failover_conninfo, short, unavailable, url_option_error

__all__ = ["SchemaTooNew", "check_schema", "lock_key", "migrate", "migration_files"]

log = logging.getLogger("wiggle.postgres")

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")  # leaves room for the "_work" channel suffix
_MIGRATION_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


class SchemaTooNew(FailedPrecondition):
    """The database schema was migrated by a newer Wiggle than this one: refuse to touch it (the
    server's state is not right for this version: FAILED_PRECONDITION, exit 4 from ``wiggle``)."""


def migration_files() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, file name, SQL), oldest first."""
    out = []
    for entry in resources.files(__package__).joinpath("sql").iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if match:
            out.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def lock_key(purpose: str, schema: str) -> int:
    """A stable bigint advisory-lock key per (purpose, schema): clusters on other schemas don't collide."""
    digest = hashlib.sha256(f"wiggle:{purpose}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise InvalidArgument(
            f"database schema {schema!r} is not a plain identifier (letters, digits, '_', at most 48 characters)"
        )
    return schema


async def migrate_on(conn: Conn, schema: str) -> int:
    """Apply the missing migrations on ``conn`` (autocommit) under the migration advisory lock."""
    ident = sql.Identifier(schema)
    key = lock_key("migrate", schema)
    files = migration_files()
    newest = files[-1][0] if files else 0
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        async with conn.transaction():
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.schema_version ("
                    "version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)"
                ).format(ident)
            )
        cur = await conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_version").format(ident)
        )
        row = await cur.fetchone()
        current = int(row[0]) if row else 0
        if current > newest:
            raise SchemaTooNew(
                f"database schema {schema!r} is at version {current}, but this Wiggle knows migrations only up to "
                f"version {newest}: it was migrated by a newer Wiggle. Upgrade this server (or use another schema)."
            )
        applied = 0
        for version, name, text in files:
            if version <= current:
                continue
            async with conn.transaction():
                await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
                await conn.execute(text.encode())  # no parameters: several statements in one go
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.schema_version (version, name, applied_at) VALUES (%s, %s, %s)"
                    ).format(ident),
                    (version, name, now_millis()),
                )
            log.info("applied migration %s to schema %s", name, schema)
            applied += 1
        return applied
    finally:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


async def migrate(url: str, schema: str = "wiggle") -> int:
    """Create or upgrade Wiggle's tables in ``schema``; how many migrations were applied (0: up to date).

    Safe to run from several processes at once (a PostgreSQL advisory lock serializes them).
    Raises SchemaTooNew if the database was migrated by a newer Wiggle, Unavailable if it cannot
    be reached.
    """
    check_schema(schema)
    try:
        conninfo = failover_conninfo(url)  # several hosts: the one accepting writes (db.py)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            return await migrate_on(conn, schema)
    except psycopg.Error as exc:
        bad_url = url_option_error(exc)  # a parameter libpq refused when it connected
        if bad_url is not None:
            raise bad_url from None
        if isinstance(exc, (psycopg.OperationalError, pg_errors.ReadOnlySqlTransaction)):
            raise unavailable(exc, f"migrating schema {schema!r}") from exc
        raise WiggleError(f"database error while migrating schema {schema!r}: {short(exc)}") from exc
