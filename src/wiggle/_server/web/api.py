"""The dashboard's JSON API: one function per page, over the instance layer (docs/dashboard.md).

Every function returns plain JSON-able data; the pages (pages.py) render the same data as HTML,
so what a page shows is exactly what its API returns. An instance (and its tokens and history)
is the gRPC read model (``instance_view``: wiggle/_wire/convert.py, read back by
wiggle/_wire/replies.py), with what the pages derive from it added beside.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..._engine.state import (
    LIVE_INSTANCE_STATUSES,
    HistoryEntry,
    Instance,
    InstanceStatus,
    Token,
    TokenStatus,
)
from ..._model import NodeKind, WorkflowDefinition, validate_name
from ..._spelling import with_closest
from ..._storage.base import CONTEXT_FIELD_PATTERN, InstanceQuery, InstanceView
from ..._storage.ops import QueueStat
from ..._wire.convert import history_to_pb, instance_to_pb, queues_to_pb
from ..._wire.replies import history_from_pb, instance_from_pb, queue_from_pb
from ...errors import InvalidArgument
from ..instance_service import PAGE_TOKEN_PATTERN
from ..instances import Instances
from ..pollers import Pollers
from ..schedules import correlation_of
from ..timings import step_outcome
from .states import node_states, retry_choices, signal_waits, token_times
from .times import iso, time_arg

__all__ = [
    "Sources",
    "LIST_PARAMS",
    "check_list_params",
    "check_params",
    "instances_page",
    "instance_page",
    "workflows_page",
    "queues_page",
    "queue_views",
    "cluster_page",
    "node_states",
    "children",
    "signal_names",
    "instance_view",
    "retrying",
    "STATUSES",
    "MAX_PAGE_SIZE",
]

STATUSES = tuple(s.value for s in InstanceStatus)
MAX_PAGE_SIZE = 500


class Sources:
    """What the pages read: the instance layer, this node's pollers, the queue-lag monitor."""

    def __init__(
        self, instances: Instances, pollers: Pollers, lag: Any = None, grpc_address: str = ""
    ) -> None:
        self.instances = instances
        self.pollers = pollers
        self.lag = lag  # a QueueLagMonitor (wiggle/_server/lag.py) or None
        self.grpc_address = grpc_address  # host:port of this node's gRPC port (/api/cluster)


def _builtins(value: object) -> Any:
    return msgspec.to_builtins(value)


def _context_arg(raw: str) -> tuple[tuple[str, str], ...]:
    """``field = value`` (or ``ctx.field = value``; a value in quotes is taken as it is written)."""
    raw = raw.strip()
    if not raw:
        return ()
    field, eq, value = raw.partition("=")
    field = field.strip().removeprefix("ctx.")
    if not eq or not CONTEXT_FIELD_PATTERN.fullmatch(field):
        raise InvalidArgument(
            f"ctx must be FIELD = VALUE with FIELD a top-level context field (letters, digits, '_'), got {raw!r}"
        )
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if "\x00" in value:
        raise InvalidArgument("ctx's value must not hold U+0000")
    return ((field, value),)


#: The query parameters ``instance_query`` reads (docs/dashboard.md#get-apiinstances).
LIST_PARAMS = frozenset(
    {
        "workflow",
        "status",
        "correlation_id",
        "schedule_id",
        "parent_id",
        "created_after",
        "created_before",
        "node",
        "text",
        "ctx",
        "children",
        "page_size",
        "page_token",
        "with_context",
    }
)


def check_params(args: Mapping[str, str], allowed: frozenset[str], what: str) -> None:
    """InvalidArgument for a query parameter ``what`` (a JSON answer) does not read, with the
    closest it does: a misspelt filter (``stauts=FAILED``) was ignored, and the JSON list, or a
    bulk action's count, was every instance's. The pages take their own links' parameters and
    are left lenient."""
    unknown = sorted(set(args) - allowed)
    if not unknown:
        return
    if not allowed:
        raise InvalidArgument(
            f"{what} takes no query parameters, got {', '.join(map(repr, unknown))}; it answers "
            "the whole of what it shows"
        )
    raise InvalidArgument(
        f"unknown {what} parameter {with_closest(unknown, sorted(allowed))}; the {what} takes "
        f"{', '.join(sorted(allowed))}"
    )


def check_list_params(args: Mapping[str, str]) -> None:
    """``check_params`` for the instance list and the bulk actions (LIST_PARAMS)."""
    check_params(args, LIST_PARAMS, "list")


def _flag(args: Mapping[str, str], name: str) -> bool:
    return args.get(name, "").strip().lower() in ("1", "true", "on", "yes")


def instance_query(args: Mapping[str, str], now: int = 0) -> InstanceQuery:
    """The list filters of a request (query string), checked; InvalidArgument names a bad one.
    ``now``: the server's clock, that relative times ("2h") count back from."""
    status = args.get("status", "").strip().upper()
    if status and status not in STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    raw_size = args.get("page_size", "").strip() or "50"
    try:
        size = int(raw_size)
    except ValueError:
        raise InvalidArgument(f"page_size must be an integer, got {raw_size!r}") from None
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidArgument(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {size}")
    workflow = args.get("workflow", "").strip()
    if workflow:
        validate_name(workflow, "workflow")
    correlation_id = args.get("correlation_id", "").strip()
    schedule_id = args.get("schedule_id", "").strip()
    if schedule_id:  # a schedule's instances carry its correlation id (wiggle/_server/schedules.py)
        validate_name(schedule_id, "schedule_id")
        if correlation_id and correlation_id != correlation_of(schedule_id):
            raise InvalidArgument(
                f"schedule_id {schedule_id!r} and correlation_id {correlation_id!r} disagree; give one"
            )
        correlation_id = correlation_of(schedule_id)
    parent_id = args.get("parent_id", "").strip()
    if parent_id:
        validate_name(parent_id, "parent_id")
    page_token = args.get("page_token", "").strip()
    if page_token and not PAGE_TOKEN_PATTERN.fullmatch(page_token):
        raise InvalidArgument(
            f"page_token {page_token[:40]!r} is not a page token; pass the next_page_token of the previous page"
        )
    node = args.get("node", "").strip()
    if node:
        validate_name(node, "node")
    text = args.get("text", "").strip()
    if len(text) > 200 or "\x00" in text:
        raise InvalidArgument(f"text must be at most 200 characters without U+0000, got {len(text)}")
    return InstanceQuery(
        workflow=workflow,
        status=status,
        correlation_id=correlation_id,
        parent_id=parent_id,
        created_after=time_arg(args.get("created_after", ""), "created_after", now),
        created_before=time_arg(args.get("created_before", ""), "created_before", now),
        page_size=size,
        page_token=page_token,
        # a parent's children are what a parent filter asks for; else they hide behind the toggle
        top_level=not (parent_id or _flag(args, "children")),
        node=node,
        text=text,
        context=_context_arg(args.get("ctx", "")),
        # a list row carries no context unless asked: a page of large contexts stalled the server
        with_context=_flag(args, "with_context"),
    )


async def instances_page(src: Sources, args: Mapping[str, str]) -> dict[str, Any]:
    """Instances newest first with the filters of ``args``, one page, and the counts by status."""
    now = src.instances.clock.now()
    query = instance_query(args, now)
    views, next_token = await src.instances.list_instances(query)
    counts = await src.instances.store.count_by_status()
    by_status = {s: 0 for s in STATUSES}
    for workflow, per in counts.items():
        if query.workflow and workflow != query.workflow:
            continue
        for status, n in per.items():
            by_status[status] = by_status.get(status, 0) + n
    return {
        "now": now,
        "filters": {
            "workflow": query.workflow,
            "status": query.status,
            "correlation_id": query.correlation_id,
            "parent_id": query.parent_id,
            "created_after": iso(query.created_after),
            "created_before": iso(query.created_before),
            "node": query.node,
            "text": query.text,
            "ctx": " ".join(f"{f} = {v}" for f, v in query.context),
            "children": not query.top_level and not query.parent_id,
            "page_size": query.page_size,
            "page_token": query.page_token,
            "with_context": query.with_context,
        },
        "created_after_ms": query.created_after,
        "created_before_ms": query.created_before,
        "counts": by_status,
        "instances": [
            {
                **instance_view(v, with_tokens=False, with_context=query.with_context),
                "at": sorted({t.node_id for t in v.tokens}),
                "retrying": retrying(v.tokens),
            }
            for v in views
        ],
        "next_page_token": next_token,
        # the bulk actions; the HTTP side turns off those the caller's roles may not take
        "actions": {"bulk_cancel": True, "bulk_retry": True},
    }


def retrying(tokens: Sequence[Token]) -> list[dict[str, Any]]:
    """The steps of a RUNNING instance that failed and go again: each active token past its
    first attempt, READY (in its backoff, or due and waiting for a worker) or RUNNING again,
    with the error of its last attempt. The list shows them where a finished instance shows its
    error: an instance failing attempt after attempt is RUNNING with no error of its own."""
    return [
        {
            "node_id": t.node_id,
            "attempt": t.attempt,
            "status": str(t.status),
            "next_attempt_at": t.available_at if t.status == TokenStatus.READY else 0,
            "last_error": t.last_error,
        }
        for t in sorted(tokens, key=lambda t: t.node_id)
        if t.attempt > 1 and t.status in (TokenStatus.READY, TokenStatus.RUNNING)
    ]


def children(tokens: Sequence[Token], history: Sequence[HistoryEntry]) -> list[dict[str, str]]:
    """The sub-workflow instances this instance started: (child id, node), first seen first."""
    seen: dict[str, str] = {}
    for e in history:
        if e.child_id:
            seen.setdefault(e.child_id, e.node_id)
    for t in tokens:
        if t.child_id:
            seen.setdefault(t.child_id, t.node_id)
    return [{"instance_id": c, "node_id": n} for c, n in seen.items()]


def signal_names(definition: WorkflowDefinition) -> list[str]:
    """The signals the workflow's SIGNAL nodes wait for, then its user tasks (a signal completes one)."""
    waits = [n.signal for n in definition.nodes if n.kind is NodeKind.SIGNAL and n.signal]
    tasks = [n.id for n in definition.nodes if n.kind is NodeKind.USER_TASK]
    return sorted(set(waits)) + sorted(set(tasks) - set(waits))


async def instance_page(src: Sources, instance_id: str) -> dict[str, Any]:
    """One instance: its record, tokens (with the moments they wait for), history (tracebacks),
    node states, the actions it allows now, its definition."""
    validate_name(instance_id, "instance_id")
    view = await src.instances.get_instance(instance_id)
    history = await src.instances.history(instance_id)
    record = await src.instances.get_workflow(view.instance.workflow, view.instance.version)
    definition = record.loaded.definition
    now = src.instances.clock.now()
    states, labels = node_states(history, view.tokens, definition, now, view.instance)
    inst = view.instance
    kinds = {n.id: n.kind for n in definition.nodes}
    awaiting = [
        t.node_id
        for t in view.tokens
        if t.status == TokenStatus.AWAITING and kinds.get(t.node_id) is NodeKind.USER_TASK
    ]
    shown = instance_view(view)
    delayed = inst.status == InstanceStatus.SCHEDULED  # its WAITING token is the delayed start's
    times = {t.id: token_times(t, kinds.get(t.node_id), now, delayed) for t in view.tokens}
    return {
        "now": now,
        "instance": {**shown, **_counted(inst, history)},
        "tokens": [{**t, "times": times[t["token_id"]]} for t in shown.pop("tokens")],
        "history": [
            {
                **_builtins(history_from_pb(history_to_pb(e))),
                "duration_ms": max(e.ended_at - e.started_at, 0) if e.started_at else 0,
            }
            for e in history
        ],
        "children": children(view.tokens, history),
        "node_states": states,
        "node_labels": labels,
        "awaiting_user_tasks": awaiting,
        "awaiting_signals": signal_waits(view.tokens, definition),
        "actions": {
            "cancel": inst.status in LIVE_INSTANCE_STATUSES,
            "complete_user_task": awaiting,
            "retry": inst.status == InstanceStatus.FAILED,
            "retry_from": retry_choices(inst, definition) if inst.status == InstanceStatus.FAILED else None,
            "signal": inst.status in LIVE_INSTANCE_STATUSES,
            "signal_names": signal_names(definition),
        },
        "definition": _builtins(definition),
    }


def instance_view(view: InstanceView, with_tokens: bool = True, with_context: bool = True) -> dict[str, Any]:
    """An instance as JSON, exactly as the gRPC answers carry it (GetInstance, ListInstances:
    wiggle/_wire/convert.py instance_to_pb) and every client reads it (wiggle/_wire/replies.py
    instance_from_pb): one read model, so a page and a client never disagree on a field.
    ``with_context`` False (a list that did not ask for them): no ``context`` key at all, rather
    than an empty context a reader could take for the instance's."""
    out = dict(_builtins(instance_from_pb(instance_to_pb(view, with_tokens, with_context))))
    if not with_context:
        del out["context"]
    return out


def _counted(inst: Instance, history: Sequence[HistoryEntry]) -> dict[str, Any]:
    """What the Instance page adds to the read model: the step attempts its history holds and
    how many did not complete (``steps``, the runaway guard's count, leaves out failed attempts),
    and a running instance's workflow time limit."""
    attempts = [o for o in (step_outcome(e) for e in history) if o is not None]
    return {
        "deadline_at": inst.deadline_at if inst.status == InstanceStatus.RUNNING else 0,
        "steps": inst.steps,
        "step_attempts": len(attempts),
        "failed_attempts": sum(1 for o in attempts if o != "completed"),
    }


async def workflows_page(src: Sources) -> dict[str, Any]:
    """Every registered version with its mode and graph, and instances per status per workflow."""
    records = await src.instances.list_workflows()
    counts = await src.instances.store.count_by_status()
    return {
        "workflows": [
            {
                "name": r.loaded.definition.name,
                "version": r.loaded.version,
                "registered_at": r.registered_at,
                "execution_mode": r.loaded.definition.execution_mode.value,
                "nodes": len(r.loaded.definition.nodes),
                "definition": _builtins(r.loaded.definition),
            }
            for r in records
        ],
        "counts": {w: {s: per.get(s, 0) for s in STATUSES} for w, per in sorted(counts.items())},
    }


async def queues_page(src: Sources) -> dict[str, Any]:
    """Per queue: what ListQueues answers (depth, leased steps, the queue's limits, the steps
    holding and waiting for a key's slot, the rate's wait), with what the page adds beside: the
    lag monitor's view, the schedule-to-start waits and the workers polling it on this node."""
    now = src.instances.clock.now()
    stats = await src.instances.store.queue_stats(now)
    pollers = src.pollers.snapshot()
    lag = src.lag.snapshot() if src.lag is not None else {}
    waits = schedule_to_start_by_queue(src.instances)
    names = sorted({s.queue for s in stats} | {q for p in pollers for q in p.queues} | set(lag))
    by_name = {s.queue: s for s in stats}
    shown = {
        row["queue"]: row for row in queue_views([by_name.get(n) or QueueStat(queue=n) for n in names], now)
    }
    holds = src.instances.delivery.unrunnable.holds
    out = []
    for name in names:
        in_flight = by_name[name].in_flight if name in by_name else {}
        out.append(
            {
                **shown[name],
                "lag": lag.get(name),
                "schedule_to_start": waits.get(name),
                "workers": [
                    {
                        "worker_id": p.worker_id,
                        "last_seen": p.last_seen,
                        "first_seen": p.first_seen,
                        "polls": p.polls,
                        "in_flight": in_flight.get(p.worker_id, 0),
                        # the nodes it gave back for lack of a handler, passed over in its claims
                        # for a while (wiggle/_server/unrunnable.py)
                        "passes_over": [
                            {"workflow": w, "version": v, "node": n, "for_seconds": round(left, 1)}
                            for w, v, n, left in holds(p.worker_id, name)
                        ],
                    }
                    for p in pollers
                    if name in p.queues
                ],
            }
        )
    return {"now": now, "queues": out}


def queue_views(stats: Sequence[QueueStat], now: int) -> list[dict[str, Any]]:
    """Each queue as the gRPC read model carries it (ListQueues: wiggle/_wire/convert.py
    queues_to_pb, read back as every client reads it: wiggle/_wire/replies.py queue_from_pb),
    so the page and ``wiggle queues --json`` never disagree on a field. Without its workers
    (the page lists this node's pollers itself); the oldest ready step's age keeps the page's
    name, ``oldest_ready_age_ms``."""
    out = []
    for msg in queues_to_pb(stats, [], now).queues:
        row = _builtins(queue_from_pb(msg))
        del row["workers"]
        row["oldest_ready_age_ms"] = row.pop("oldest_ready_age_millis")
        out.append(row)
    return out


def schedule_to_start_by_queue(instances: Instances) -> dict[str, dict[str, float | None]]:
    """Per queue since this node started: steps claimed, mean wait, and the bucket bound under
    which 95% of the waits fell (seconds; from the schedule-to-start histogram; None: above the
    largest bucket, 300 s)."""
    merged: dict[str, tuple[list[int], float]] = {}
    hist = instances.timings.schedule_to_start
    for (workflow, queue), counts in hist.counts.items():
        total, seconds = merged.get(queue, ([0] * len(counts), 0.0))
        added = [a + b for a, b in zip(total, counts, strict=True)]
        merged[queue] = (added, seconds + hist.sums[(workflow, queue)])
    out: dict[str, dict[str, float | None]] = {}
    for queue, (counts, seconds) in merged.items():
        n = sum(counts)
        if not n:
            continue
        running, p95 = 0, None  # None: above the largest bucket
        for bound, c in zip((*hist.buckets, None), counts, strict=True):
            running += c
            if running >= 0.95 * n:
                p95 = bound
                break
        out[queue] = {"claimed": n, "mean_seconds": seconds / n, "p95_seconds_at_most": p95}
    return out


async def cluster_page(src: Sources) -> dict[str, Any]:
    """The server nodes on this store, the clock leader, and this node's readiness."""
    nodes = await src.instances.store.cluster_nodes()
    ready = await src.instances.store.readiness()
    now = src.instances.clock.now()
    # A node records no gRPC port in the store (the database sees only the address it connects
    # from, ``address``): this node's own, the one answering, is its ``grpc_address``; the others
    # answer with theirs at their own /api/cluster (docs/dashboard.md#get-apicluster).
    return {
        "nodes": [{**_builtins(n), "grpc_address": src.grpc_address if n.this_node else ""} for n in nodes],
        "readiness": _builtins(ready),
        "now": now,
    }
