"""The PostgreSQL store's schema side: migrations, SQL text, and the row <-> struct codecs.

``postgres.py`` holds the store itself (transactions, group commit, claims, notifications,
clock leadership); this module holds what describes the tables: the numbered migrations and
their runner, every statement rendered for a schema, and how Instance / Token / HistoryEntry
rows are encoded and decoded.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

import msgspec
import psycopg
from psycopg import sql

from .._engine.state import (
    ACTIVE_TOKEN_STATUSES,
    HistoryEntry,
    Instance,
    JoinState,
    Token,
    now_millis,
)
from ..errors import InvalidArgument, Unavailable, WiggleError
from .base import InstanceView

__all__ = ["SchemaTooNew", "migrate", "migration_files"]

log = logging.getLogger("wiggle.postgres")

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]

ID_CLOCK_SLACK_MILLIS = 60_000  # an instance's created_at is at most this much after its id's time
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")  # leaves room for the "_work" channel suffix
_MIGRATION_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")

# TCP keepalives on every connection: a peer that vanished silently (no RST) is noticed in about
# 25 s instead of the kernel's minutes, so the listener reconnects and a dead leader lets go.
_KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}

_encode = msgspec.json.Encoder().encode
_decode_context = msgspec.json.Decoder(dict[str, Any]).decode
_decode_joins = msgspec.json.Decoder(dict[str, JoinState]).decode
_decode_fork_stack = msgspec.json.Decoder(list[tuple[str, int]]).decode

_ACTIVE = "(" + ", ".join(f"'{s}'" for s in sorted(ACTIVE_TOKEN_STATUSES)) + ")"

# Columns are named after the Struct fields, in field order, so rows and Structs map positionally
# (msgspec.structs.astuple one way, Token(*row) the other). A new field needs a migration.
_TOKEN_FIELDS: tuple[str, ...] = Token.__struct_fields__
_INSTANCE_FIELDS: tuple[str, ...] = Instance.__struct_fields__
_TOKEN_COLS = ", ".join(_TOKEN_FIELDS)
_INSTANCE_COLS = ", ".join(_INSTANCE_FIELDS)
_HISTORY_COLS = ", ".join(HistoryEntry.__struct_fields__)
_N_TOKEN = len(_TOKEN_FIELDS)
_N_INSTANCE = len(_INSTANCE_FIELDS)
_T_CONTEXT = _TOKEN_FIELDS.index("context")
_T_FORK_STACK = _TOKEN_FIELDS.index("fork_stack")
_I_CONTEXT = _INSTANCE_FIELDS.index("context")
_I_JOINS = _INSTANCE_FIELDS.index("joins")
_TOKEN_IMMUTABLE = ("id", "instance_id", "created_at")
_TOKEN_UPDATED = [i for i, f in enumerate(_TOKEN_FIELDS) if f not in _TOKEN_IMMUTABLE]
_INSTANCE_IMMUTABLE = ("id", "workflow", "version", "context", "correlation_id", "created_at")
_INSTANCE_UPDATED = [i for i, f in enumerate(_INSTANCE_FIELDS) if f not in _INSTANCE_IMMUTABLE]


# The SQL type of every column (migrations/), for the unnest() arrays of the set-based writes.
_SQL_TYPES: dict[str, str] = {
    "id": "text",
    "instance_id": "text",
    "token_id": "text",
    "workflow": "text",
    "version": "text",
    "node_id": "text",
    "status": "text",
    "kind": "text",
    "queue": "text",
    "attempt": "integer",
    "available_at": "bigint",
    "lease_owner": "text",
    "lease_expires_at": "bigint",
    "last_error": "text",
    "context": "bytea",
    "fork_stack": "bytea",
    "started_at": "bigint",
    "ended_at": "bigint",
    "local_run_owner": "text",
    "local_run_steps": "integer",
    "created_at": "bigint",
    "updated_at": "bigint",
    "finished_at": "bigint",
    "correlation_id": "text",
    "reason": "text",
    "error": "text",
    "token_seq": "integer",
    "joins": "bytea",
    "steps": "integer",
    "worker_id": "text",
    "outcome": "text",
}
_missing_types = {*_TOKEN_FIELDS, *_INSTANCE_FIELDS, *HistoryEntry.__struct_fields__} - set(_SQL_TYPES)
assert not _missing_types, f"no SQL type for column(s) {sorted(_missing_types)}"


def _unnest(fields: list[str] | tuple[str, ...], ordinality: bool = False) -> str:
    """``unnest(%s::type[], ...) AS v(field, ...)``: rows passed as one array per column."""
    arrays = ", ".join(f"%s::{_SQL_TYPES[f]}[]" for f in fields)
    if ordinality:
        return f"unnest({arrays}) WITH ORDINALITY AS v({', '.join(fields)}, ord)"
    return f"unnest({arrays}) AS v({', '.join(fields)})"


def _text_array(column: tuple[Any, ...]) -> str:
    if not column:
        return "{}"
    # every element quoted (empty strings, commas, braces, "NULL"); inside quotes only \ and " are special
    return '{"' + '","'.join(v.replace("\\", "\\\\").replace('"', '\\"') for v in column) + '"}'


def _int_array(column: tuple[Any, ...]) -> str:
    return "{" + ",".join(map(str, column)) + "}"


def _bytea_array(column: tuple[Any, ...]) -> str:
    return "{" + ",".join("NULL" if v is None else '"\\\\x' + v.hex() + '"' for v in column) + "}"


_ARRAY_LITERAL: dict[str, Callable[[tuple[Any, ...]], str]] = {
    "text": _text_array,
    "integer": _int_array,
    "bigint": _int_array,
    "bytea": _bytea_array,
}


def _array_literals(fields: list[str] | tuple[str, ...]) -> Callable[[list[Any]], list[str]]:
    """Rows -> the parameters of an unnest() write on ``fields``: one array literal per column.

    Built here rather than by psycopg's list adapter, which costs several times more per element
    (it inspects every element's type); every column but the bytea ones is NOT NULL.
    """
    encoders = [_ARRAY_LITERAL[_SQL_TYPES[f]] for f in fields]

    def columns(rows: list[Any]) -> list[str]:
        return [encode(column) for encode, column in zip(encoders, zip(*rows, strict=True), strict=True)]

    return columns


def _prefixed(cols: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in cols.split(","))


class SchemaTooNew(WiggleError):
    """The database schema was migrated by a newer Wiggle than this one: refuse to touch it."""


# ---------------------------------------------------------------------- migrations


def migration_files() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, file name, SQL), oldest first."""
    out = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if match:
            out.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def _lock_key(purpose: str, schema: str) -> int:
    """A stable bigint advisory-lock key per (purpose, schema): clusters on other schemas don't collide."""
    digest = hashlib.sha256(f"wiggle:{purpose}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _app_prefix(schema: str) -> str:
    """The application_name prefix of every connection of a node on ``schema``: ``wiggle:<8 hex>:``.

    Peers find each other by it in pg_stat_activity (``wiggle:<hash>:<node id>[:role]``, at most
    42 characters: PostgreSQL keeps 63). No ``_`` or ``%``, so it is a literal LIKE prefix.
    """
    return f"wiggle:{hashlib.sha256(schema.encode()).hexdigest()[:8]}:"


def _check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise InvalidArgument(
            f"database schema {schema!r} is not a plain identifier (letters, digits, '_', at most 48 characters)"
        )
    return schema


async def _migrate(conn: Conn, schema: str) -> int:
    """Apply the missing migrations on ``conn`` (autocommit) under the migration advisory lock."""
    ident = sql.Identifier(schema)
    key = _lock_key("migrate", schema)
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
    _check_schema(schema)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
            return await _migrate(conn, schema)
    except psycopg.OperationalError as exc:
        raise Unavailable(f"database unavailable: {_short(exc)}") from exc
    except psycopg.Error as exc:
        raise WiggleError(f"database error while migrating schema {schema!r}: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# ---------------------------------------------------------------------- row <-> struct


def _instance_from(row: Any, o: int = 0) -> Instance:
    values = list(row[o : o + _N_INSTANCE])
    values[_I_CONTEXT] = _decode_context(values[_I_CONTEXT])
    values[_I_JOINS] = _decode_joins(values[_I_JOINS])
    return Instance(*values)


def _token_from(row: Any, o: int = 0) -> Token:
    values = list(row[o : o + _N_TOKEN])
    context = values[_T_CONTEXT]
    fork_stack = values[_T_FORK_STACK]
    values[_T_CONTEXT] = None if context is None else _decode_context(context)
    values[_T_FORK_STACK] = [] if fork_stack is None else _decode_fork_stack(fork_stack)
    return Token(*values)


def _token_seq(token: Token) -> int:
    return int(token.id.rpartition(".")[2] or 0)


def _views(rows: list[Any]) -> list[InstanceView]:
    """Instances with their active tokens from rows of (instance columns, token columns or NULLs)."""
    views: list[InstanceView] = []
    for row in rows:
        if not views or views[-1].instance.id != row[0]:
            views.append(InstanceView(_instance_from(row), []))
        if row[_N_INSTANCE] is not None:
            views[-1].tokens.append(_token_from(row, _N_INSTANCE))
    for view in views:
        view.tokens.sort(key=_token_seq)
    return views


def _token_row(t: Token) -> list[Any]:
    """Every column of a token, in column order."""
    values = list(msgspec.structs.astuple(t))
    values[_T_CONTEXT] = None if t.context is None else _encode(t.context)
    values[_T_FORK_STACK] = _encode(t.fork_stack) if t.fork_stack else None  # NULL off the fork lines
    return values


def _token_update(t: Token) -> list[Any]:
    """The SET values of a token's UPDATE, then its id."""
    values = _token_row(t)
    return [values[i] for i in _TOKEN_UPDATED] + [t.id]


def _instance_row(inst: Instance) -> list[Any]:
    values = list(msgspec.structs.astuple(inst))
    values[_I_CONTEXT] = _encode(inst.context)
    values[_I_JOINS] = _encode(inst.joins)
    return values


class _SetWrite:
    """A write of many rows in one statement (unnest of one array per column), and its parameters."""

    __slots__ = ("statement", "params")

    def __init__(self, statement: str, fields: list[str] | tuple[str, ...]) -> None:
        self.statement = statement
        self.params = _array_literals(fields)


class _Queries:
    """Every statement, rendered once with the schema quoted."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema).as_string()

        def q(text: str) -> str:
            return text.replace("{s}", s)

        self.lock_instance = q(f"SELECT {_INSTANCE_COLS} FROM {{s}}.instances WHERE id = %s FOR UPDATE")
        self.lock_instances = q(
            f"SELECT {_INSTANCE_COLS} FROM {{s}}.instances WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
        )
        self.active_tokens_many = q(
            f"SELECT {_TOKEN_COLS} FROM {{s}}.tokens WHERE instance_id = ANY(%s) AND status IN {_ACTIVE}"
        )
        self.active_tokens = q(
            f"SELECT {_TOKEN_COLS} FROM {{s}}.tokens WHERE instance_id = %s AND status IN {_ACTIVE}"
        )
        # An instance (or a page of them) with its active tokens, in one statement: one snapshot.
        with_tokens = (
            f"SELECT i.*, {_prefixed(_TOKEN_COLS, 't')} FROM (SELECT {_INSTANCE_COLS} FROM {{s}}.instances "
            "WHERE {where}) i "
            f"LEFT JOIN {{s}}.tokens t ON t.instance_id = i.id AND t.status IN {_ACTIVE} ORDER BY i.id DESC"
        )
        self.view = q(with_tokens.replace("{where}", "id = %s"))
        self.list_instances = q(with_tokens.replace("{where}", "{where} ORDER BY id DESC LIMIT %s"))
        self.insert_instance = q(
            f"INSERT INTO {{s}}.instances ({_INSTANCE_COLS}) VALUES ({', '.join(['%s'] * _N_INSTANCE)})"
        )
        instance_set = ", ".join(f"{_INSTANCE_FIELDS[i]} = %s" for i in _INSTANCE_UPDATED)
        self.update_instance = q(f"UPDATE {{s}}.instances SET {instance_set}, context = %s WHERE id = %s")
        self.update_instance_keep_context = q(f"UPDATE {{s}}.instances SET {instance_set} WHERE id = %s")
        self.insert_token = q(
            f"INSERT INTO {{s}}.tokens ({_TOKEN_COLS}) VALUES ({', '.join(['%s'] * _N_TOKEN)})"
        )
        token_set = ", ".join(f"{_TOKEN_FIELDS[i]} = %s" for i in _TOKEN_UPDATED)
        self.update_token = q(f"UPDATE {{s}}.tokens SET {token_set} WHERE id = %s")
        self.insert_history = q(
            f"INSERT INTO {{s}}.history ({_HISTORY_COLS}) VALUES ({', '.join(['%s'] * 10)})"
        )

        # The same writes for several rows at once: one statement, one array per column (a
        # statement per row, even pipelined, costs the server a bind/execute/plan per row).
        # Parameters and arrays are in the order of the single-row statements above.
        def set_from(table: str, fields: list[str]) -> _SetWrite:
            assignments = ", ".join(f"{f} = v.{f}" for f in fields if f != "id")
            text = (
                f"UPDATE {{s}}.{table} AS t SET {assignments} FROM {_unnest(fields)} "
                'WHERE t.id = v.id COLLATE "C"'
            )
            return _SetWrite(q(text), fields)

        def insert_from(table: str, fields: tuple[str, ...]) -> _SetWrite:
            cols = ", ".join(fields)
            # WITH ORDINALITY ... ORDER BY: rows go in (and take their identity values) in order
            text = (
                f"INSERT INTO {{s}}.{table} ({cols}) SELECT {cols} FROM {_unnest(fields, True)} ORDER BY ord"
            )
            return _SetWrite(q(text), fields)

        instance_updated = [_INSTANCE_FIELDS[i] for i in _INSTANCE_UPDATED]
        self.update_instances = set_from("instances", [*instance_updated, "context", "id"])
        self.update_instances_keep_context = set_from("instances", [*instance_updated, "id"])
        self.update_tokens = set_from("tokens", [*(_TOKEN_FIELDS[i] for i in _TOKEN_UPDATED), "id"])
        self.insert_instances = insert_from("instances", _INSTANCE_FIELDS)
        self.insert_tokens = insert_from("tokens", _TOKEN_FIELDS)
        self.insert_histories = insert_from("history", HistoryEntry.__struct_fields__)
        self.history = q(f"SELECT {_HISTORY_COLS} FROM {{s}}.history WHERE instance_id = %s ORDER BY seq")
        self.instance_exists = q("SELECT 1 FROM {s}.instances WHERE id = %s")
        self.notify = q("SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)")
        # Other nodes on this schema: distinct node ids among the connections named with our
        # prefix, ours excluded. (A Wiggle from before these names is not seen: during a rolling
        # upgrade from one, its pollers get no wake-ups from upgraded nodes and find that work
        # when their long poll ends instead.)
        self.count_peers = (
            "SELECT count(DISTINCT split_part(application_name, ':', 3)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE %(prefix)s "
            "AND split_part(application_name, ':', 3) <> %(node)s"
        )
        claim = (
            f"SELECT {_prefixed(_TOKEN_COLS, 't')}, {_prefixed(_INSTANCE_COLS, 'i')} "
            "FROM {s}.tokens t JOIN {s}.instances i ON i.id = t.instance_id "
            "WHERE t.status = 'READY' AND t.queue = {queue} AND t.available_at <= %s AND i.status = 'RUNNING' "
            "ORDER BY t.available_at LIMIT %s FOR UPDATE OF t, i SKIP LOCKED"
        )
        # One queue: an ordered scan of tokens_ready, stopping after LIMIT rows that could be locked.
        self.claim_one = q(claim.replace("{queue}", "%s"))
        # Several: the same per queue (a "queue = ANY" scan would sort every due token), then the
        # oldest of those. It may lock up to LIMIT tokens per queue for the transaction's few
        # milliseconds; the ones not taken stay READY (next_ready_at makes pollers look again).
        self.claim_many = q(
            "SELECT c.* FROM unnest(%s::text[]) AS qs(queue) CROSS JOIN LATERAL ("
            + claim.replace("{queue}", "qs.queue")
            + ") c ORDER BY c.available_at LIMIT %s"
        )
        self.next_ready = q(
            "SELECT min(x.available_at) FROM unnest(%s::text[]) AS qs(queue), LATERAL ("
            "SELECT available_at FROM {s}.tokens WHERE status = 'READY' AND queue = qs.queue "
            "ORDER BY available_at LIMIT 1) x"
        )
        self.due = q(
            "(SELECT id FROM {s}.tokens WHERE status = 'RUNNING' AND lease_expires_at <= %(now)s "
            "ORDER BY lease_expires_at LIMIT %(n)s) UNION ALL "
            "(SELECT id FROM {s}.tokens WHERE (status = 'WAITING' OR (status = 'AWAITING' AND available_at > 0)) "
            "AND available_at <= %(now)s ORDER BY available_at LIMIT %(n)s)"
        )
        self.next_due = q(
            "SELECT LEAST((SELECT min(lease_expires_at) FROM {s}.tokens WHERE status = 'RUNNING'), "
            "(SELECT min(available_at) FROM {s}.tokens "
            "WHERE status = 'WAITING' OR (status = 'AWAITING' AND available_at > 0)))"
        )
        self.purge = q(
            "WITH doomed AS (SELECT id FROM {s}.instances WHERE status <> 'RUNNING' AND finished_at < %s "
            "ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED), "
            "gone_tokens AS (DELETE FROM {s}.tokens WHERE instance_id IN (SELECT id FROM doomed)), "
            "gone_history AS (DELETE FROM {s}.history WHERE instance_id IN (SELECT id FROM doomed)) "
            "DELETE FROM {s}.instances WHERE id IN (SELECT id FROM doomed) RETURNING id"
        )
        self.insert_definition = q(
            "INSERT INTO {s}.definitions (name, version, definition, registered_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (name, version) DO NOTHING RETURNING registered_at"
        )
        self.definition = q(
            "SELECT definition, registered_at FROM {s}.definitions WHERE name = %s AND version = %s"
        )
        self.latest_version = q(
            "SELECT version FROM {s}.definitions WHERE name = %s ORDER BY registered_at DESC, seq DESC LIMIT 1"
        )
        self.definitions = q(
            "SELECT name, version, registered_at, definition FROM {s}.definitions "
            "WHERE %s = '' OR name = %s ORDER BY name, registered_at, seq"
        )
