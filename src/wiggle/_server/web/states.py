"""What each node of one instance is doing, for the Instance page: its state, a short label, and
the moments it waits for (a sleep's wake-up, a user task's or signal wait's deadline, a retry's
next attempt, a running step's time limit; docs/semantics.md#time-limits).

Read from the history, the active tokens (wiggle/_engine/state.py) and the open fork barriers
(``Instance.joins``) with the definition's node kinds; nothing here changes anything.

A token's ``available_at`` means something else at each kind, so each gets its own words: a user
task's or signal wait's deadline (0: none), a sleep's wake-up, a delayed start's time, a retry's
next attempt, and at a SUB_WORKFLOW only when the server re-reads the child next
(``child_recheck_millis``, wiggle/_engine/children.py): no deadline, and not shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._engine.resume import RETRY_RULES, enclosing
from ..._engine.state import HistoryEntry, Instance, InstanceStatus, JoinState, Token, TokenStatus
from ..._model import NodeKind, WorkflowDefinition
from ..operator import OPERATOR_KIND

__all__ = ["node_states", "token_times", "span", "retry_choices", "signal_waits", "token_kind"]


def span(ms: int) -> str:
    """A duration to come, short: "12 s", "4 min", "2.5 h", "3 d"; "now" when due or past."""
    if ms <= 0:
        return "now"
    if ms < 60_000:
        return f"{max(ms // 1000, 1)} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} min"
    if ms < 86_400_000:
        return f"{ms / 3_600_000:.1f} h"
    return f"{ms / 86_400_000:.1f} d"


def token_kind(token: Token, kind: NodeKind | None) -> NodeKind | None:
    """The kind of node ``token`` is at: the definition's (``kind``), else the token's own record
    of it (a definition without the node: the token still says what it parked at)."""
    if kind is not None:
        return kind
    try:
        return NodeKind(token.kind)
    except ValueError:
        return None


def token_times(
    token: Token, kind: NodeKind | None, now: int, delayed_start: bool = False
) -> list[dict[str, Any]]:
    """The moments ``token`` waits for, each {"what", "at"} (ms): when it wakes (a sleep), when it
    starts (the first token of a delayed start: ``delayed_start``, its instance SCHEDULED), its
    deadline (a user task's or signal wait's timeout), its next attempt, when it must start, when
    its attempt times out, its lease's end. A sub-workflow's token waits for its child, not for a
    time: none."""
    out: list[tuple[str, int]] = []
    status = token.status
    kind = token_kind(token, kind)
    if status == TokenStatus.WAITING:
        out.append(("starts at" if delayed_start else "wakes at", token.available_at))
    elif status == TokenStatus.AWAITING:
        if kind is not NodeKind.SUB_WORKFLOW:  # its available_at is the child's next re-check
            out.append(("deadline", token.available_at))
    elif status == TokenStatus.READY:
        if token.available_at > now:
            out.append(("next attempt at" if token.attempt > 1 else "due at", token.available_at))
        out.append(("must start by", token.deadline_at))  # the step's schedule-to-start limit
    elif status == TokenStatus.RUNNING:
        out.append(("times out at", token.deadline_at))
        if not token.local_run_owner:
            out.append(("lease until", token.lease_expires_at))
    return [{"what": what, "at": at} for what, at in out if at > 0]


def _history_states(history: Sequence[HistoryEntry]) -> tuple[dict[str, str], dict[str, str]]:
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
    return states, labels


def _deadline(at: int, now: int) -> str:
    """A wait's deadline as a label's second part ("" for none)."""
    if not at:
        return ""
    return f", deadline in {span(at - now)}" if at > now else ", deadline passed"


def _token_state(
    t: Token, kind: NodeKind | None, signal: str, now: int, instance: Instance | None
) -> tuple[str, str]:
    """(state, label) of a node where the active token ``t`` is (in ``instance``, when known)."""
    kind = token_kind(t, kind)
    if t.status == TokenStatus.RUNNING:
        state, label = (
            ("local-run", f"in a local run by {t.local_run_owner}")
            if t.local_run_owner
            else ("running", f"running on {t.lease_owner} (attempt {t.attempt})")
        )
        if t.deadline_at:
            label += f", times out in {span(t.deadline_at - now)}"
        return state, label
    if t.status == TokenStatus.READY:
        if t.attempt > 1 and t.available_at > now:
            return "retrying", f"attempt {t.attempt} in {span(t.available_at - now)}"
        retry = f", attempt {t.attempt}" if t.attempt > 1 else ""
        return "ready", f"waiting for a worker{retry}"
    if t.status == TokenStatus.WAITING:
        if _delayed(instance):
            return "scheduled", f"delayed start, starts in {span(t.available_at - now)}"
        return "sleeping", f"sleeping, wakes in {span(t.available_at - now)}"
    if t.status == TokenStatus.AWAITING:
        if kind is NodeKind.SUB_WORKFLOW:  # no deadline: available_at is the child's re-check
            verb = "waits for" if t.started_at else "starting"
            return "child", f"{verb} child {t.child_id}" if t.child_id else "starting its child"
        if kind is NodeKind.SIGNAL:
            return "signal", f"awaiting signal {signal}{_deadline(t.available_at, now)}"
        return "awaiting", f"awaiting a person{_deadline(t.available_at, now)}"
    joins = instance.joins if instance is not None else {}
    join = joins.get(t.fork_stack[-1][0]) if t.fork_stack else None
    if join is not None and not join.for_each:
        return "joined", f"{len(join.arrived)} of {join.branch_count} branches here, waiting for the rest"
    return "joined", "waiting at the join for the other branches"


def _delayed(instance: Instance | None) -> bool:
    """A SCHEDULED instance's WAITING token is its delayed start's, not a sleep (the engine's own
    test: wiggle/_engine/engine.py ``begin``)."""
    return instance is not None and instance.status == InstanceStatus.SCHEDULED


def _barrier_states(joins: Mapping[str, JoinState], states: dict[str, str], labels: dict[str, str]) -> None:
    """A FORK or FOR_EACH whose branches are under way: how far they are (its history says only
    "done", which it is as a step, while its branches may have far to go)."""
    per: dict[str, list[int]] = {}  # fork node -> [finished, started, total, for_each]
    for join in joins.values():
        counts = per.setdefault(join.fork_node, [0, 0, 0, int(join.for_each)])
        if join.for_each:
            counts[0] += len(join.results) + join.merged_count  # STRICT keeps results, LWW a count
            counts[1] += join.started
        else:
            counts[0] += len(join.arrived)
            counts[1] += join.branch_count
        counts[2] += join.branch_count
    for node_id, (finished, started, total, for_each) in per.items():
        states[node_id] = "forked"
        if for_each:
            labels[node_id] = f"{finished} of {total} done, {started - finished} under way"
        else:
            labels[node_id] = f"{finished} of {total} branches at the join"


def node_states(
    history: Sequence[HistoryEntry],
    tokens: Sequence[Token],
    definition: WorkflowDefinition | None = None,
    now: int = 0,
    instance: Instance | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """(state, label) per node id, from the history, the active tokens and, given ``instance``,
    its open fork barriers (``joins``) and whether it waits for a delayed start.

    States: done, failed, retrying (failed, another attempt due), ready (waiting for a worker),
    running, local-run ("in a local run by <worker>"), sleeping, scheduled (a delayed start),
    awaiting (a user task), signal (a signal wait), child (a sub-workflow: "waits for child
    <id>"), forked (a fork or for-each whose branches are under way), joined. A waiting node's
    label says when its wait ends (``now`` relative) when it has an end.
    """
    states, labels = _history_states(history)
    if instance is not None:
        _barrier_states(instance.joins, states, labels)
    nodes = definition.node_map() if definition is not None else {}
    for t in tokens:
        if t.status not in (
            TokenStatus.RUNNING,
            TokenStatus.READY,
            TokenStatus.WAITING,
            TokenStatus.AWAITING,
            TokenStatus.JOINED,
        ):
            continue
        node = nodes.get(t.node_id)
        kind = node.kind if node is not None else None
        signal = (node.signal or t.node_id) if node is not None else t.node_id
        states[t.node_id], labels[t.node_id] = _token_state(t, kind, signal, now, instance)
    return states, labels


def signal_waits(tokens: Sequence[Token], definition: WorkflowDefinition) -> list[dict[str, str]]:
    """The signal waits the instance is in now: {"node_id", "signal"}, one per node."""
    nodes = definition.node_map()
    out: dict[str, str] = {}
    for t in tokens:
        node = nodes.get(t.node_id)
        if t.status == TokenStatus.AWAITING and node is not None and node.kind is NodeKind.SIGNAL:
            out.setdefault(t.node_id, node.signal or t.node_id)
    return [{"node_id": n, "signal": s} for n, s in out.items()]


def retry_choices(inst: Instance, definition: WorkflowDefinition) -> dict[str, Any]:
    """What a retry of the FAILED ``inst`` may restart from (docs/semantics.md#resuming-a-failed-instance):
    the nodes it failed at ("" when none can be restarted as they were: a node must be named),
    and every node a retry may name (on the main line, not an END or a JOIN)."""
    point = inst.retry_point
    failed_at = sorted({t.node_id for t in point.tokens}) if point is not None else []
    restartable = point is not None and any(t.status != TokenStatus.JOINED for t in point.tokens)
    inside = enclosing(definition)
    nodes = [n.id for n in definition.nodes if not RETRY_RULES[n.kind].refused and n.id not in inside]
    return {"failed_at": failed_at if restartable else [], "needs_from_node": not restartable, "nodes": nodes}
