"""The operator's reads on PostgreSQL: counts, queue depths, readiness and the cluster's nodes.

Autocommit reads, each one statement (docs/postgres-plans.md covers the hot paths, not these:
they run when a person looks, or once per queue-lag interval).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ...errors import WiggleError
from ..base import SchemaMissing
from ..ops import NodeInfo, QueueStat, Readiness
from .claim_terms import DB_NOW_MILLIS, key_held
from .db import Database, short
from .migrations import lock_key, migration_files

__all__ = [
    "count_by_status",
    "queue_ready_statement",
    "queue_stats",
    "readiness",
    "cluster_nodes",
    "leases_of",
]


def _s(schema: str) -> str:
    return sql.Identifier(schema).as_string()


async def count_by_status(db: Database, schema: str) -> dict[str, dict[str, int]]:
    """{workflow: {status: n}} over every kept instance."""
    rows = await db.fetch(
        "count_by_status", f"SELECT workflow, status, count(*) FROM {_s(schema)}.instances GROUP BY 1, 2"
    )
    out: dict[str, dict[str, int]] = {}
    for workflow, status, n in rows:
        out.setdefault(workflow, {})[status] = int(n)
    return out


def queue_ready_statement(schema: str) -> str:
    """Per queue, its READY tokens: due, delayed, the oldest due, the due ones waiting for their
    concurrency-limit key or their key's rate, and that rate's next moment (parameters ``now`` and
    ``rate_now``)."""
    s = _s(schema)
    # a due step waiting for its key's rate: its key's moment ``w`` is ahead of the rate clock by
    # more than the rate's tolerance (wiggle/_storage/queue_limits.py rate_admit)
    rate_wait = (
        f"available_at <= %(now)s AND w > COALESCE(%(rate_now)s::float8, {DB_NOW_MILLIS}) + tol + 1e-6"
    )
    return (
        f"SELECT queue, count(*) FILTER (WHERE available_at <= %(now)s), "
        f"count(*) FILTER (WHERE available_at > %(now)s), "
        f"coalesce(min(available_at) FILTER (WHERE available_at <= %(now)s), 0), "
        # due steps whose concurrency-limit key is full (docs/flow-control.md#concurrency-limits)
        f"count(*) FILTER (WHERE available_at <= %(now)s AND limit_key <> '' AND "
        f"{key_held('t.limit_key').replace('{s}', s)} >= limit_max), "
        # due steps waiting for their key's rate (docs/flow-control.md#per-key-rate-limits)
        f"count(*) FILTER (WHERE {rate_wait}), coalesce(min(ceil(w - tol - 1e-6)) FILTER (WHERE {rate_wait}), 0) "
        f"FROM (SELECT t.*, CASE WHEN t.rate_key = '' THEN NULL "
        f"ELSE (SELECT r.tat FROM {s}.rate_keys r WHERE r.key = t.rate_key) END AS w, "
        f"greatest(0, 1 - t.rate_period_millis::float8 / greatest(t.rate_max, 1)) AS tol "
        f"FROM {s}.tokens t WHERE status = 'READY') t GROUP BY queue"
    )


async def queue_stats(db: Database, schema: str, now: int, rate_now: int | None = None) -> list[QueueStat]:
    """Per queue: due and delayed READY tokens, the oldest due one, leased tokens per owner.
    ``rate_now``: the clock of per-key rates (None: the database's)."""
    s = _s(schema)
    ready = await db.fetch("queue_stats", queue_ready_statement(schema), {"now": now, "rate_now": rate_now})
    running = await db.fetch(
        "queue_stats",
        f"SELECT queue, lease_owner, local_run_owner <> '', count(*), count(*) FILTER (WHERE limit_key <> '') "
        f"FROM {s}.tokens WHERE status = 'RUNNING' GROUP BY 1, 2, 3",
    )
    stats: dict[str, QueueStat] = {}
    for queue, due, delayed, oldest, waiting, rate_waiting, rate_until in ready:
        stats[queue] = QueueStat(
            queue=queue,
            ready=int(due),
            delayed=int(delayed),
            oldest_ready_at=int(oldest),
            limit_waiting=int(waiting),
            rate_waiting=int(rate_waiting),
            rate_waiting_until=int(rate_until),
        )
    for queue, owner, local, n, limited in running:
        stat = stats.setdefault(queue, QueueStat(queue=queue))
        stat.running += int(n)
        stat.limit_held += int(limited)
        if local:
            stat.in_local_run += int(n)
        stat.in_flight = {**stat.in_flight, owner: stat.in_flight.get(owner, 0) + int(n)}
    return [stats[q] for q in sorted(stats)]


async def leases_of(db: Database, schema: str, owner_prefix: str, limit: int) -> list[tuple[str, str, int]]:
    """Leased tokens of owners starting with ``owner_prefix``: (task id, owner, claimed at). For a
    revocation (rare): the RUNNING tokens through the tokens_leases index, filtered."""
    rows = await db.fetch(
        "leases_of",
        f"SELECT id || '@' || claim, lease_owner, started_at FROM {_s(schema)}.tokens "
        "WHERE status = 'RUNNING' AND starts_with(lease_owner, %(prefix)s) LIMIT %(limit)s",
        {"prefix": owner_prefix, "limit": limit},
    )
    return [(str(task), str(owner), int(at)) for task, owner, at in rows]


async def readiness(db: Database, schema: str) -> Readiness:
    """Ready when the database answers and the schema is at this Wiggle's newest migration."""
    expected = migration_files()[-1][0]
    try:
        rows = await db.fetch(
            "readiness", f"SELECT coalesce(max(version), 0) FROM {_s(schema)}.schema_version"
        )
    except SchemaMissing as exc:  # the database answers: its tables are not there
        return Readiness(ready=False, detail=str(exc), expected_version=expected)
    except (WiggleError, psycopg.Error) as exc:
        # the store's Unavailable says "database unavailable: ..." itself (db.py): said once, not
        # "database unavailable: database unavailable: no connection within 5 s" (an outside trial)
        why = short(exc)
        detail = why if why.startswith("database unavailable") else f"database unavailable: {why}"
        return Readiness(ready=False, detail=detail, expected_version=expected)
    current = int(rows[0][0]) if rows else 0
    if current != expected:
        return Readiness(
            ready=False,
            detail=f"schema {schema!r} is at version {current}, this server needs {expected}",
            schema_version=current,
            expected_version=expected,
        )
    return Readiness(ready=True, detail="ready", schema_version=current, expected_version=expected)


async def cluster_nodes(db: Database, schema: str, prefix: str, this_node: str) -> list[NodeInfo]:
    """The nodes connected on ``schema`` (by their application_name prefix) and the clock leader."""
    key = lock_key("clock", schema)
    hi, lo = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    rows: list[Any] = await db.fetch(
        "cluster_nodes",
        "SELECT split_part(substr(a.application_name, length(%(prefix)s) + 1), ':', 1) AS node, "
        "min(extract(epoch FROM a.backend_start) * 1000)::bigint, "
        "max(extract(epoch FROM greatest(a.state_change, a.query_start, a.backend_start)) * 1000)::bigint, "
        "coalesce(min(host(a.client_addr)), 'local'), "
        "bool_or(EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' "
        "AND l.granted AND l.classid = %(hi)s::oid AND l.objid = %(lo)s::oid AND l.objsubid = 1)) "
        "FROM pg_stat_activity a WHERE a.application_name LIKE %(prefix)s || '%%' "
        "AND a.datname = current_database() GROUP BY 1 ORDER BY 1",
        {"prefix": prefix, "hi": hi, "lo": lo},
    )
    return [
        NodeInfo(
            node_id=node,
            this_node=node == this_node,
            clock_leader=bool(leader),
            connected_since=int(since or 0),
            last_seen=int(seen or 0),
            address=addr,
        )
        for node, since, seen, addr, leader in rows
    ]
