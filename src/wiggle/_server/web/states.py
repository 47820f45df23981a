"""What each node of one instance is doing, for the Instance page: its state, a short label, and
the moments it waits for (a sleep's wake-up, a user task's or signal wait's deadline, a retry's
next attempt, a running step's time limit; docs/semantics.md#time-limits).

Read from the history and the active tokens (wiggle/_engine/state.py) with the definition's node
kinds; nothing here changes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._engine.resume import RETRY_RULES, enclosing
from ..._engine.state import HistoryEntry, Instance, Token, TokenStatus
from ..._model import NodeKind, WorkflowDefinition
from ..operator import OPERATOR_KIND

__all__ = ["node_states", "token_times", "span", "retry_choices", "signal_waits"]


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


def token_times(token: Token, kind: NodeKind | None, now: int) -> list[dict[str, Any]]:
    """The moments ``token`` waits for, each {"what", "at"} (ms): when it wakes, its deadline,
    its next attempt, when it must start, when its attempt times out, its lease's end."""
    out: list[tuple[str, int]] = []
    status = token.status
    if status == TokenStatus.WAITING:
        out.append(("wakes at", token.available_at))
    elif status == TokenStatus.AWAITING:
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


def _token_state(t: Token, kind: NodeKind | None, signal: str, now: int) -> tuple[str, str]:
    """(state, label) of a node where the active token ``t`` is."""
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
        return "sleeping", f"sleeping, wakes in {span(t.available_at - now)}"
    if t.status == TokenStatus.AWAITING:
        state, label = (
            ("signal", f"awaiting signal {signal}")
            if kind is NodeKind.SIGNAL
            else ("awaiting", "awaiting a person")
        )
        if t.available_at:
            label += f", deadline in {span(t.available_at - now)}"
        return state, label
    return "joined", "waiting at the join"


def node_states(
    history: Sequence[HistoryEntry],
    tokens: Sequence[Token],
    definition: WorkflowDefinition | None = None,
    now: int = 0,
) -> tuple[dict[str, str], dict[str, str]]:
    """(state, label) per node id, from the history and the active tokens.

    States: done, failed, retrying (failed, another attempt due), ready (waiting for a worker),
    running, local-run ("in a local run by <worker>"), sleeping, awaiting (a user task), signal
    (a signal wait), joined. A waiting node's label says when its wait ends (``now`` relative).
    """
    states, labels = _history_states(history)
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
        states[t.node_id], labels[t.node_id] = _token_state(t, kind, signal, now)
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
