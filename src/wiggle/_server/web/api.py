"""The dashboard's JSON API: one function per page, over the instance layer (docs/dashboard.md).

Every function returns plain JSON-able data; the pages (pages.py) render the same data as HTML,
so what a page shows is exactly what its API returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..._engine.state import LIVE_INSTANCE_STATUSES, HistoryEntry, InstanceStatus, Token, TokenStatus
from ..._model import NodeKind, WorkflowDefinition, validate_name
from ..._storage.base import InstanceQuery
from ...errors import InvalidArgument
from ..instance_service import PAGE_TOKEN_PATTERN
from ..instances import Instances
from ..operator import OPERATOR_KIND
from ..pollers import Pollers
from ..schedules import correlation_of

__all__ = [
    "Sources",
    "instances_page",
    "instance_page",
    "workflows_page",
    "queues_page",
    "cluster_page",
    "node_states",
    "children",
    "signal_names",
    "STATUSES",
    "MAX_PAGE_SIZE",
]

STATUSES = tuple(s.value for s in InstanceStatus)
MAX_PAGE_SIZE = 500


class Sources:
    """What the pages read: the instance layer, this node's pollers, the queue-lag monitor."""

    def __init__(self, instances: Instances, pollers: Pollers, lag: Any = None) -> None:
        self.instances = instances
        self.pollers = pollers
        self.lag = lag  # a QueueLagMonitor (wiggle/_server/lag.py) or None


def _builtins(value: object) -> Any:
    return msgspec.to_builtins(value)


def _ms_arg(args: Mapping[str, str], name: str) -> int:
    raw = args.get(name, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"{name} must be a time in milliseconds since the epoch, got {raw!r}") from None
    if value < 0:
        raise InvalidArgument(f"{name} must not be negative, got {value}")
    return value


def instance_query(args: Mapping[str, str]) -> InstanceQuery:
    """The list filters of a request (query string), checked; InvalidArgument names a bad one."""
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
    return InstanceQuery(
        workflow=workflow,
        status=status,
        correlation_id=correlation_id,
        parent_id=parent_id,
        created_after=_ms_arg(args, "created_after"),
        created_before=_ms_arg(args, "created_before"),
        page_size=size,
        page_token=page_token,
    )


async def instances_page(src: Sources, args: Mapping[str, str]) -> dict[str, Any]:
    """Instances newest first with the filters of ``args``, one page, and the counts by status."""
    query = instance_query(args)
    views, next_token = await src.instances.list_instances(query)
    counts = await src.instances.store.count_by_status()
    by_status = {s: 0 for s in STATUSES}
    for workflow, per in counts.items():
        if query.workflow and workflow != query.workflow:
            continue
        for status, n in per.items():
            by_status[status] = by_status.get(status, 0) + n
    return {
        "filters": {
            "workflow": query.workflow,
            "status": query.status,
            "correlation_id": query.correlation_id,
            "parent_id": query.parent_id,
            "created_after": query.created_after,
            "created_before": query.created_before,
            "page_size": query.page_size,
            "page_token": query.page_token,
        },
        "counts": by_status,
        "instances": [
            {
                "instance_id": v.instance.id,
                "workflow": v.instance.workflow,
                "version": v.instance.version,
                "status": str(v.instance.status),
                "correlation_id": v.instance.correlation_id,
                "created_at": v.instance.created_at,
                "updated_at": v.instance.updated_at,
                "finished_at": v.instance.finished_at,
                "error": v.instance.error,
                "parent_id": v.instance.parent_id,
                "at": sorted({t.node_id for t in v.tokens}),
            }
            for v in views
        ],
        "next_page_token": next_token,
    }


def node_states(
    history: Sequence[HistoryEntry], tokens: Sequence[Token]
) -> tuple[dict[str, str], dict[str, str]]:
    """(state, label) per node id, from the history and the active tokens.

    States: done, failed, retrying (failed, another attempt due), ready (waiting for a worker),
    running, local-run ("in a local run by <worker>"), sleeping, awaiting (a user task), joined.
    """
    states: dict[str, str] = {}
    labels: dict[str, str] = {}
    for e in history:
        if e.kind == OPERATOR_KIND:
            continue
        if e.outcome == "FAILED":
            states[e.node_id], labels[e.node_id] = "failed", f"failed (attempt {e.attempt})"
        elif e.outcome == "RETRY":
            states[e.node_id], labels[e.node_id] = "retrying", f"attempt {e.attempt} failed"
        else:
            states[e.node_id] = "done"
            labels[e.node_id] = "done" + (" (timed out)" if e.outcome == "TIMED_OUT" else "")
    for t in tokens:
        if t.status == TokenStatus.RUNNING and t.local_run_owner:
            state, label = "local-run", f"in a local run by {t.local_run_owner}"
        elif t.status == TokenStatus.RUNNING:
            state, label = "running", f"running on {t.lease_owner} (attempt {t.attempt})"
        elif t.status == TokenStatus.READY:
            retry = f", attempt {t.attempt}" if t.attempt > 1 else ""
            state, label = "ready", f"waiting for a worker{retry}"
        elif t.status == TokenStatus.WAITING:
            state, label = "sleeping", "sleeping"
        elif t.status == TokenStatus.AWAITING:
            state, label = "awaiting", "awaiting a person"
        elif t.status == TokenStatus.JOINED:
            state, label = "joined", "waiting at the join"
        else:
            continue
        states[t.node_id], labels[t.node_id] = state, label
    return states, labels


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
    """One instance: its record, tokens, history (tracebacks), node states, its definition."""
    validate_name(instance_id, "instance_id")
    view = await src.instances.get_instance(instance_id)
    history = await src.instances.history(instance_id)
    record = await src.instances.get_workflow(view.instance.workflow, view.instance.version)
    states, labels = node_states(history, view.tokens)
    inst = view.instance
    awaiting = [t.node_id for t in view.tokens if t.status == TokenStatus.AWAITING]
    return {
        "instance": {
            "instance_id": inst.id,
            "workflow": inst.workflow,
            "version": inst.version,
            "status": str(inst.status),
            "reason": inst.reason,
            "error": inst.error,
            "correlation_id": inst.correlation_id,
            "schedule_id": inst.schedule_id,
            "parent_id": inst.parent_id,
            "created_at": inst.created_at,
            "updated_at": inst.updated_at,
            "finished_at": inst.finished_at,
            "steps": inst.steps,
            "context": inst.context,
        },
        "tokens": [_builtins(t) for t in view.tokens],
        "history": [
            {**_builtins(e), "duration_ms": max(e.ended_at - e.started_at, 0) if e.started_at else 0}
            for e in history
        ],
        "children": children(view.tokens, history),
        "node_states": states,
        "node_labels": labels,
        "awaiting_user_tasks": awaiting,
        "actions": {
            "cancel": inst.status in LIVE_INSTANCE_STATUSES,
            "complete_user_task": awaiting,
            "retry": inst.status == InstanceStatus.FAILED,
            "signal": inst.status in LIVE_INSTANCE_STATUSES,
            "signal_names": signal_names(record.loaded.definition),
        },
        "definition": _builtins(record.loaded.definition),
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
    """Per queue: depth, the oldest ready step's age, leased steps, the workers polling it."""
    now = src.instances.clock.now()
    stats = await src.instances.store.queue_stats(now)
    pollers = src.pollers.snapshot()
    lag = src.lag.snapshot() if src.lag is not None else {}
    waits = schedule_to_start_by_queue(src.instances)
    names = sorted({s.queue for s in stats} | {q for p in pollers for q in p.queues} | set(lag))
    by_name = {s.queue: s for s in stats}
    out = []
    for name in names:
        s = by_name.get(name)
        in_flight = s.in_flight if s is not None else {}
        out.append(
            {
                "queue": name,
                "ready": s.ready if s else 0,
                "delayed": s.delayed if s else 0,
                "oldest_ready_age_ms": now - s.oldest_ready_at if s and s.oldest_ready_at else 0,
                "running": s.running if s else 0,
                "in_local_run": s.in_local_run if s else 0,
                "lag": lag.get(name),
                "schedule_to_start": waits.get(name),
                "workers": [
                    {
                        "worker_id": p.worker_id,
                        "last_seen": p.last_seen,
                        "first_seen": p.first_seen,
                        "polls": p.polls,
                        "in_flight": in_flight.get(p.worker_id, 0),
                    }
                    for p in pollers
                    if name in p.queues
                ],
            }
        )
    return {"now": now, "queues": out}


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
    return {"nodes": [_builtins(n) for n in nodes], "readiness": _builtins(ready), "now": now}
