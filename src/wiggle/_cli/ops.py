"""The ``wiggle`` command's operator views: workflows, describe (the graph as text), doctor."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TextIO

from .._client.types import QueueInfo, WorkflowInfo
from .._clock import WALL_CLOCK
from .._model import Node, NodeKind, WorkflowDefinition

__all__ = ["print_workflows", "print_queues", "describe", "doctor_checks", "EXTRAS"]

#: Optional extras and the module each one installs (what `wiggle doctor` looks for).
EXTRAS: tuple[tuple[str, str, str], ...] = (
    ("postgres", "psycopg", "the PostgreSQL store"),
    ("metrics", "prometheus_client", "Prometheus /metrics"),
    ("dashboard", "aiohttp", "the web dashboard, /healthz and /readyz"),
    ("otel", "opentelemetry.sdk", "OpenTelemetry tracing"),
)


def _ms(value: int) -> str:
    if value % 1000 == 0:
        return f"{value // 1000} s"
    return f"{value} ms"


def print_workflows(items: Sequence[WorkflowInfo], out: TextIO) -> None:
    """One line per registered version under a header."""
    from .views import when as fmt

    print(f"{'NAME':<24} {'VERSION':<16} {'MODE':<11} {'NODES':>5}  REGISTERED", file=out)
    for w in items:
        d = w.definition
        print(
            f"{w.name:<24} {w.version:<16} {d.execution_mode.value:<11} {len(d.nodes):>5}  {fmt(w.registered_at)}",
            file=out,
        )


#: A worker whose last poll is older than this is not counted as polling (a poll waits up to
#: ``poll_wait_seconds``, 10 s; the server's ``wiggle_workers_connected`` uses the same 90 s,
#: wiggle/_server/metrics_families.py). The server lists a worker for 10 minutes after its last
#: poll (FORGET_AFTER_MILLIS, wiggle/_server/pollers.py).
POLLING_SECONDS = 90


def _ago(ms: int) -> str:
    """A duration in ms as short text: 0.4 s, 12 s, 3.2 min."""
    if ms < 10_000:
        return f"{ms / 1000:.1f} s"
    if ms < 120_000:
        return f"{ms // 1000} s"
    return f"{ms / 60_000:.1f} min"


def print_queues(items: Sequence[QueueInfo], out: TextIO, now: int | None = None) -> None:
    """One line per queue under a header, then the workers polling it, indented, each with the age
    of its last poll. WORKERS counts those that polled within POLLING_SECONDS or hold steps of
    the queue (a worker whose every slot is busy does not poll); the others, listed for a while
    after they stopped, are counted apart ("1 (+2 not polling)"). ``now``: ms, this host's clock
    unless given."""
    now = WALL_CLOCK.now() if now is None else now
    print(
        f"{'QUEUE':<24} {'READY':>6} {'DELAYED':>7} {'OLDEST':>9} {'RUNNING':>7} {'LOCAL':>6}  WORKERS",
        file=out,
    )
    for q in items:
        oldest = f"{q.oldest_ready_age_millis / 1000:.1f} s" if q.ready else "-"
        ages = {w.worker_id: max(now - w.last_seen, 0) for w in q.workers}
        quiet = [w for w in q.workers if ages[w.worker_id] > POLLING_SECONDS * 1000]
        gone = sum(1 for w in quiet if not w.in_flight)  # no poll for a while, nothing held
        workers = f"{len(q.workers) - gone}" + (f" (+{gone} not polling)" if gone else "")
        print(
            f"{q.queue:<24} {q.ready:>6} {q.delayed:>7} {oldest:>9} {q.running:>7} {q.in_local_run:>6}  {workers}",
            file=out,
        )
        limits = _queue_limits(q)
        if limits:
            print(f"  limits: {limits}", file=out)
        for w in q.workers:
            line = f"  worker {w.worker_id}: {w.in_flight} in flight, last poll {_ago(ages[w.worker_id])} ago"
            if w in quiet:
                line += " (every slot busy, or stopped)" if w.in_flight else " (not polling: stopped?)"
            print(line, file=out)
            for held in w.passes_over:  # docs/semantics.md#mixed-fleets
                print(
                    f"    no handler: passes over {held.node} of {held.workflow} version {held.version}"
                    f" (offered again in {_ago(max(held.held_until - now, 0))})",
                    file=out,
                )


def _queue_limits(q: QueueInfo) -> str:
    """A queue's limits and their state, in words ("" when it has none and none hold anything):
    the Queues page's "limits" and "key slots" columns (wiggle/_server/web/pages.py)."""
    parts = []
    if q.max_running:
        parts.append(f"at most {q.max_running} running ({q.running} in use)")
    if q.rate_max:
        parts.append(f"{q.rate_max} claims per {_ms(q.rate_period_millis)}")
    if q.rate_limited_until:
        when = datetime.fromtimestamp(q.rate_limited_until / 1000, tz=timezone.utc)
        parts.append(f"rate limited until {when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}")
    if q.limit_held or q.limit_waiting:
        parts.append(f"{q.limit_held} running under a key's limit, {q.limit_waiting} waiting for their key")
    if q.rate_waiting:
        when = datetime.fromtimestamp(q.rate_waiting_until / 1000, tz=timezone.utc)
        stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        parts.append(f"{q.rate_waiting} waiting for their key's rate, the next at {stamp}")
    return "; ".join(parts)


def _next(node: Node) -> str:
    return f"-> {node.next}" if node.next else "-> end"


def _timeout(node: Node) -> str:
    """A USER_TASK's or SIGNAL's deadline edge ("" without a deadline)."""
    if not node.timeout_millis:
        return ""
    return f"; after {_ms(node.timeout_millis)} -> {node.alt_next or 'the instance fails'}"


def _predicate(node: Node) -> str:
    return f"true -> {node.next}, false -> {node.alt_next}"


def _fork(node: Node) -> str:
    return f"branches {', '.join(node.branches)}; joins at {node.join}"


def _join(node: Node) -> str:
    return f"joins {node.fork}" + (" (combine handler)" if node.combine else "") + f" -> {node.next}"


def _sleep(node: Node) -> str:
    return f"sleeps {_ms(node.sleep_millis)} -> {node.next}"


def _user_task(node: Node) -> str:
    return _next(node) + _timeout(node)


def _end(node: Node) -> str:
    status = "COMPLETED" if node.success else "FAILED"
    return f"ends the instance {status}" + (f" (reason {node.reason})" if node.reason else "")


def _signal(node: Node) -> str:
    into = f" into {node.result_key}" if node.result_key else ""
    return f"on signal {node.signal}{into} {_next(node)}{_timeout(node)}"


def _sub_workflow(node: Node) -> str:
    pinned = f" version {node.version}" if node.version else ""
    on_error = f"; on error -> {node.alt_next}" if node.alt_next else ""
    return f"child {node.workflow}{pinned} {_next(node)}{on_error}"


def _for_each(node: Node) -> str:
    body = ", ".join(node.branches)
    return f"body {body} per element of {node.items_key}; joins at {node.join}"


#: How ``describe`` shows each node kind's edges (every NodeKind has one: a test checks).
EDGES: dict[NodeKind, Callable[[Node], str]] = {
    NodeKind.TASK: _next,
    NodeKind.PREDICATE: _predicate,
    NodeKind.SLEEP: _sleep,
    NodeKind.FORK: _fork,
    NodeKind.JOIN: _join,
    NodeKind.USER_TASK: _user_task,
    NodeKind.END: _end,
    NodeKind.SIGNAL: _signal,
    NodeKind.SUB_WORKFLOW: _sub_workflow,
    NodeKind.FOR_EACH: _for_each,
}


def _edges(node: Node) -> str:
    return EDGES[node.kind](node)


def describe(info: WorkflowInfo, out: TextIO) -> None:
    """The graph as text: one line per node in walk order from the start, with its edges."""
    d: WorkflowDefinition = info.definition
    nodes = d.node_map()
    print(f"workflow   {info.name} (version {info.version})", file=out)
    print(f"mode       {d.execution_mode.value}", file=out)
    if d.default_retry is not None:
        r = d.default_retry
        print(
            f"retry      {r.max_attempts or 'unlimited'} attempts, from {_ms(r.initial_backoff_millis)}",
            file=out,
        )
    print(f"{'NODE':<24} {'KIND':<12} {'QUEUE':<20} EDGES", file=out)
    order: list[str] = []
    pending = [d.start_node]
    while pending:
        node_id = pending.pop(0)
        if node_id in order or node_id not in nodes:
            continue
        order.append(node_id)
        n = nodes[node_id]
        pending.extend(x for x in (n.next, n.alt_next, *n.branches, n.join) if x)
    order.extend(n.id for n in d.nodes if n.id not in order)
    for node_id in order:
        n = nodes[node_id]
        queue = n.queue or (d.name if n.is_worker_step or n.combine else "")
        marks = " [checkpoint]" if node_id in d.checkpoints else ""
        start = "> " if node_id == d.start_node else "  "
        print(f"{start}{node_id:<22} {n.kind.value:<12} {queue:<20} {_edges(n)}{marks}", file=out)


def doctor_checks(
    target: str, database_url: str, schema: str, server: bool = True
) -> list[tuple[str, bool | None, str]]:
    """(check, ok, detail) for the server, the schema, the extras and the hot paths. ``ok`` is
    None for what was not there to check and is no failure: an optional extra not installed, the
    schema with no database URL, the server with ``server`` False (``--no-server``: a database
    checked while no server runs, as in a restore; the table shows "-", not "yes")."""
    from .. import _fast
    from .._version import __version__

    checks: list[tuple[str, bool | None, str]] = [
        ("wiggle", True, f"{__version__} on Python {sys.version.split()[0]}"),
        ("hot paths", True, f"{_fast.IMPL} ({_fast.IMPL_REASON})"),
    ]
    for extra, module, what in EXTRAS:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            checks.append((f"extra {extra}", True, f"installed ({what})"))
        else:
            checks.append(
                (
                    f"extra {extra}",
                    None,
                    f"optional, not installed ({what}): pip install 'wiggle-workflows[{extra}]'",
                )
            )
    if server:
        name, ok, detail = asyncio.run(_server_check(target))
        if not ok and database_url:  # a database checked while no server runs (a restore's step)
            detail += "; with no server running, --no-server checks the database alone"
        checks.append((name, ok, detail))
    else:
        checks.append(("server", None, "--no-server: not checked"))
    if database_url:
        checks.append(asyncio.run(_schema_check(database_url, schema)))
        checks.append(asyncio.run(_vacuum_check(database_url)))
    else:
        checks.append(("schema", None, "no --database-url / WIGGLE_DATABASE_URL: not checked"))
    return checks


async def _vacuum_check(url: str) -> tuple[str, bool, str]:
    """Autovacuum on: Wiggle updates and deletes rows all day (every step, the retention purge),
    and without it their space is never reused. An outside soak on a database with autovacuum
    off grew the instances table to 1 GB while it held a few hundred rows."""
    try:
        import psycopg
    except ImportError:
        return ("autovacuum", False, "psycopg is not installed: pip install 'wiggle-workflows[postgres]'")
    try:
        async with await psycopg.AsyncConnection.connect(url, connect_timeout=5) as conn:
            cur = await conn.execute("SELECT current_setting('autovacuum'), current_setting('track_counts')")
            row = await cur.fetchone()
    except psycopg.Error as exc:
        return ("autovacuum", False, f"database unreachable: {str(exc).strip().splitlines()[0]}")
    from .._storage.postgres.db import vacuum_problem

    problem = vacuum_problem(*(row if row else ("", "")))
    if problem is None:
        return ("autovacuum", True, "on (dead rows of steps and purged instances are reclaimed)")
    return ("autovacuum", False, problem)


async def _server_check(target: str) -> tuple[str, bool, str]:
    from ..client import AsyncClient
    from ..errors import WiggleError

    try:
        async with AsyncClient(target) as client:
            workflows = await asyncio.wait_for(client.list_workflows(), 5)
    except (WiggleError, asyncio.TimeoutError, OSError) as exc:
        return ("server", False, f"{target} unreachable: {exc}")
    return ("server", True, f"{target} answers ({len(workflows)} workflow version(s) registered)")


async def _schema_check(url: str, schema: str) -> tuple[str, bool, str]:
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        return ("schema", False, "psycopg is not installed: pip install 'wiggle-workflows[postgres]'")
    from .._storage.postgres import migration_files

    newest = migration_files()[-1][0]
    try:
        async with await psycopg.AsyncConnection.connect(url, connect_timeout=5) as conn:
            cur = await conn.execute(
                sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_version").format(
                    sql.Identifier(schema)
                )
            )
            row = await cur.fetchone()
    except psycopg.errors.UndefinedTable:
        return ("schema", False, f"schema {schema!r} has no Wiggle tables: run `wiggle migrate`")
    except psycopg.Error as exc:
        return ("schema", False, f"database unreachable: {str(exc).strip().splitlines()[0]}")
    current = int(row[0]) if row else 0
    if current < newest:
        return (
            "schema",
            False,
            f"schema {schema!r} at version {current}, this Wiggle needs {newest}: run `wiggle migrate`",
        )
    if current > newest:
        return (
            "schema",
            False,
            f"schema {schema!r} at version {current}, newer than this Wiggle ({newest}): upgrade",
        )
    return ("schema", True, f"schema {schema!r} at version {current}, current")
