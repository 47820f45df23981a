"""Rows <-> structs: the column layout of instances, tokens and history, and how values are encoded.

Columns are named after the Struct fields (wiggle/_engine/state.py), in field order, so a row and
a Struct map positionally. The set-based writes (statements.py) take one array literal per
column, built here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..._engine.state import HistoryEntry, Instance, JoinState, PendingSignal, RetryPoint, Token
from ..base import InstanceView

__all__ = [
    "HISTORY_COLS",
    "HISTORY_WRITE_FIELDS",
    "INSTANCE_COLS",
    "INSTANCE_FIELDS",
    "INSTANCE_UPDATED",
    "I_JOINS",
    "N_INSTANCE",
    "N_TOKEN",
    "SQL_TYPES",
    "TOKEN_COLS",
    "TOKEN_FIELDS",
    "TOKEN_UPDATED",
    "array_literals",
    "encode",
    "encode_instance_json",
    "history_from",
    "history_rows",
    "instance_from",
    "instance_row",
    "token_from",
    "token_row",
    "token_seq",
    "token_update",
    "views",
]

encode = msgspec.json.Encoder().encode
decode_context = msgspec.json.Decoder(dict[str, Any]).decode
decode_joins = msgspec.json.Decoder(dict[str, JoinState]).decode
decode_fork_stack = msgspec.json.Decoder(list[tuple[str, int]]).decode
decode_signals = msgspec.json.Decoder(list[PendingSignal]).decode
decode_signal_ids = msgspec.json.Decoder(list[str]).decode
decode_retry_point = msgspec.json.Decoder(RetryPoint).decode

# Columns are named after the Struct fields, in field order, so rows and Structs map positionally
# (msgspec.structs.astuple one way, Token(*row) the other). A new field needs a migration.
TOKEN_FIELDS: tuple[str, ...] = Token.__struct_fields__
INSTANCE_FIELDS: tuple[str, ...] = Instance.__struct_fields__
TOKEN_COLS = ", ".join(TOKEN_FIELDS)
INSTANCE_COLS = ", ".join(INSTANCE_FIELDS)
HISTORY_COLS = ", ".join(HistoryEntry.__struct_fields__)
# A history row is an entry's columns and ``more``: the other entries its transaction wrote for
# the same instance, packed (migration 0023; ``history_rows``).
HISTORY_WRITE_FIELDS: tuple[str, ...] = (*HistoryEntry.__struct_fields__, "more")
N_TOKEN = len(TOKEN_FIELDS)
N_INSTANCE = len(INSTANCE_FIELDS)
T_CONTEXT = TOKEN_FIELDS.index("context")
T_FORK_STACK = TOKEN_FIELDS.index("fork_stack")
I_CONTEXT = INSTANCE_FIELDS.index("context")
I_JOINS = INSTANCE_FIELDS.index("joins")
# The signal and retry columns (migration 0003): JSON in bytea like joins; retry_point NULL when unset.
I_SIGNALS = INSTANCE_FIELDS.index("signals")
I_SIGNAL_IDS = INSTANCE_FIELDS.index("signal_ids")
I_RETRY_POINT = INSTANCE_FIELDS.index("retry_point")
TOKEN_IMMUTABLE = ("id", "instance_id", "created_at")
TOKEN_UPDATED = [i for i, f in enumerate(TOKEN_FIELDS) if f not in TOKEN_IMMUTABLE]
INSTANCE_IMMUTABLE = (
    "id",
    "workflow",
    "version",
    "context",
    "correlation_id",
    "created_at",
    "schedule_id",
    "schedule_tick_at",
    "traceparent",
    "priority",
    "start_at",
    "dedup_key",
    "dedup_window",
    "conc_key",
    "conc_max",
)
INSTANCE_UPDATED = [i for i, f in enumerate(INSTANCE_FIELDS) if f not in INSTANCE_IMMUTABLE]


# The SQL type of every column (migrations/), for the unnest() arrays of the set-based writes.
SQL_TYPES: dict[str, str] = {
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
    "schedule_id": "text",
    "schedule_tick_at": "bigint",
    "signals": "bytea",
    "signal_ids": "bytea",
    "retry_point": "bytea",
    "parent_id": "text",
    "parent_token": "text",
    "depth": "integer",
    "child_id": "text",
    "traceback": "text",
    "traceparent": "text",
    "claim": "integer",
    "deadline_at": "bigint",
    "timeout_millis": "bigint",
    "priority": "integer",
    "start_at": "bigint",
    "dedup_key": "text",
    "dedup_window": "bigint",
    "limit_key": "text",
    "limit_max": "integer",
    "queue_held": "boolean",
    "chained_from": "text",
    "conc_key": "text",
    "conc_max": "integer",
    "conc_since": "bigint",
    "conc_retry": "text",
    "rate_key": "text",
    "rate_max": "integer",
    "rate_period_millis": "bigint",
    "more": "bytea",
}
_missing_types = {*TOKEN_FIELDS, *INSTANCE_FIELDS, *HistoryEntry.__struct_fields__} - set(SQL_TYPES)
assert not _missing_types, f"no SQL type for column(s) {sorted(_missing_types)}"


def text_array(column: tuple[Any, ...] | list[str]) -> str:
    """A text[] literal of ``column``'s strings: passed as one text parameter, it costs psycopg one
    string where a list costs it a dumper lookup per element (writes.py ``write_checked``)."""
    if not column:
        return "{}"
    # every element quoted (empty strings, commas, braces, "NULL"); inside quotes only \ and " are special
    joined = '","'.join(column)
    if "\\" not in joined and joined.count('"') == 2 * (len(column) - 1):
        return '{"' + joined + '"}'  # the usual case: nothing to escape, no Python per element
    return '{"' + '","'.join(v.replace("\\", "\\\\").replace('"', '\\"') for v in column) + '"}'


def _int_array(column: tuple[Any, ...]) -> str:
    return "{" + ",".join(map(str, column)) + "}"


def _bool_array(column: tuple[Any, ...]) -> str:
    return "{" + ",".join("t" if v else "f" for v in column) + "}"


def _bytea_array(column: tuple[Any, ...]) -> str:
    return "{" + ",".join("NULL" if v is None else '"\\\\x' + v.hex() + '"' for v in column) + "}"


_ARRAY_LITERAL: dict[str, Callable[[tuple[Any, ...]], str]] = {
    "text": text_array,
    "integer": _int_array,
    "bigint": _int_array,
    "bytea": _bytea_array,
    "boolean": _bool_array,
}


def array_literals(fields: list[str] | tuple[str, ...]) -> Callable[[list[Any]], list[str]]:
    """Rows -> the parameters of an unnest() write on ``fields``: one array literal per column.

    Built here rather than by psycopg's list adapter, which costs several times more per element
    (it inspects every element's type); every column but the bytea ones is NOT NULL.
    """
    encoders = [_ARRAY_LITERAL[SQL_TYPES[f]] for f in fields]

    def columns(rows: list[Any]) -> list[str]:
        return [encode(column) for encode, column in zip(encoders, zip(*rows, strict=True), strict=True)]

    return columns


_H_FIELDS = HistoryEntry.__struct_fields__
_H_TOKEN, _H_WORKER = _H_FIELDS.index("token_id"), _H_FIELDS.index("worker_id")
_H_REQUIRED = _H_FIELDS.index("error")  # the fields before it have no default
assert _H_FIELDS[0] == "instance_id"  # a packed entry is the fields after it


def _packed(entry: HistoryEntry, token_id: str, worker_id: str) -> list[Any]:
    """An entry in a history row's ``more``: its fields after instance_id, trailing "" left out,
    and its token and worker null where they are the row's (most are: one run, one worker)."""
    values = list(msgspec.structs.astuple(entry))
    end = len(values)
    while end > _H_REQUIRED and values[end - 1] == "":
        end -= 1
    if values[_H_TOKEN] == token_id:
        values[_H_TOKEN] = None
    if values[_H_WORKER] == worker_id:
        values[_H_WORKER] = None
    return values[1:end]


def history_rows(entries: list[HistoryEntry], rows: list[Any]) -> None:
    """Appends to ``rows`` the history rows of one transaction's ``entries``: one row per run of
    consecutive entries of one instance, the first entry in the row's columns and the others, in
    order, packed into ``more`` (a JSON array of arrays; migration 0023). A LOCAL_ASYNC run of 20
    steps is one row of about 1.2 kB, not 20 rows and 40 index entries (bench/README.md, "Round
    twenty-two")."""
    n = len(entries)
    if n == 1:
        rows.append((*msgspec.structs.astuple(entries[0]), None))
        return
    i = 0
    while i < n:
        first = entries[i]
        j = i + 1
        while j < n and entries[j].instance_id == first.instance_id:
            j += 1
        more = None
        if j > i + 1:
            token_id, worker_id = first.token_id, first.worker_id
            more = encode([_packed(e, token_id, worker_id) for e in entries[i + 1 : j]])
        rows.append((*msgspec.structs.astuple(first), more))
        i = j


_decode_more = msgspec.json.Decoder(list[list[Any]]).decode


def history_from(rows: list[Any]) -> list[HistoryEntry]:
    """The entries of an instance's history rows (``HISTORY_COLS`` and ``more``, in seq order)."""
    out: list[HistoryEntry] = []
    for row in rows:
        first = HistoryEntry(*row[:-1])
        out.append(first)
        if row[-1] is not None:
            for values in _decode_more(row[-1]):  # the fields after instance_id
                if values[_H_TOKEN - 1] is None:
                    values[_H_TOKEN - 1] = first.token_id
                if values[_H_WORKER - 1] is None:
                    values[_H_WORKER - 1] = first.worker_id
                out.append(HistoryEntry(first.instance_id, *values))
    return out


def instance_from(row: Any, o: int = 0) -> Instance:
    values = list(row[o : o + N_INSTANCE])
    values[I_CONTEXT] = decode_context(values[I_CONTEXT])
    # Most instances wait on no join and no signal: their columns hold the empty JSON value
    joins = values[I_JOINS]
    values[I_JOINS] = {} if joins == b"{}" else decode_joins(joins)
    signals = values[I_SIGNALS]
    values[I_SIGNALS] = [] if signals == b"[]" else decode_signals(signals)
    signal_ids = values[I_SIGNAL_IDS]
    values[I_SIGNAL_IDS] = [] if signal_ids == b"[]" else decode_signal_ids(signal_ids)
    point = values[I_RETRY_POINT]
    values[I_RETRY_POINT] = None if point is None else decode_retry_point(point)
    return Instance(*values)


def token_from(row: Any, o: int = 0) -> Token:
    values = list(row[o : o + N_TOKEN])
    context = values[T_CONTEXT]
    fork_stack = values[T_FORK_STACK]
    values[T_CONTEXT] = None if context is None else decode_context(context)
    values[T_FORK_STACK] = [] if fork_stack is None else decode_fork_stack(fork_stack)
    return Token(*values)


def token_seq(token: Token) -> int:
    return int(token.id.rpartition(".")[2] or 0)


def views(rows: list[Any]) -> list[InstanceView]:
    """Instances with their active tokens from rows of (instance columns, token columns or NULLs)."""
    views: list[InstanceView] = []
    for row in rows:
        if not views or views[-1].instance.id != row[0]:
            views.append(InstanceView(instance_from(row), []))
        if row[N_INSTANCE] is not None:
            views[-1].tokens.append(token_from(row, N_INSTANCE))
    for view in views:
        view.tokens.sort(key=token_seq)
    return views


def token_row(t: Token) -> list[Any]:
    """Every column of a token, in column order."""
    values = list(msgspec.structs.astuple(t))
    values[T_CONTEXT] = None if t.context is None else encode(t.context)
    values[T_FORK_STACK] = encode(t.fork_stack) if t.fork_stack else None  # NULL off the fork lines
    return values


def token_update(t: Token) -> list[Any]:
    """The SET values of a token's UPDATE, then its id."""
    values = token_row(t)
    return [values[i] for i in TOKEN_UPDATED] + [t.id]


def instance_row(inst: Instance) -> list[Any]:
    values = list(msgspec.structs.astuple(inst))
    values[I_CONTEXT] = encode(inst.context)
    encode_instance_json(values, inst)
    return values


def encode_instance_json(values: list[Any], inst: Instance) -> None:
    """Encode in ``values`` (an instance's fields in order) the JSON columns other than the context."""
    values[I_JOINS] = encode(inst.joins) if inst.joins else b"{}"
    values[I_SIGNALS] = encode(inst.signals) if inst.signals else b"[]"
    values[I_SIGNAL_IDS] = encode(inst.signal_ids) if inst.signal_ids else b"[]"
    values[I_RETRY_POINT] = None if inst.retry_point is None else encode(inst.retry_point)
