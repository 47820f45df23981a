"""The clock's transitions: a lease ran out, a sleep is over, a user task's deadline passed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._model import Node, NodeKind
from .config import LoadedDefinition
from .drive import drive
from .state import Changes, HistoryOutcome, InstanceState, InstanceStatus, Token, TokenStatus
from .tokens import end_instance, fail_instance, fail_step, finish_token, move, record

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "expire_lease",
    "expiry_kind",
    "expiry_reason",
    "fire_timer",
    "start_deadline",
    "user_task_deadline",
    "workflow_deadline",
]


def expire_lease(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
) -> Changes:
    """A lease ran out: a retryable failure, saying which limit it was (expiry_reason)."""
    if token.status != TokenStatus.RUNNING or token.lease_expires_at > now:
        return Changes()
    node = loaded.nodes[token.node_id]
    reason = expiry_reason(node, token, now)
    return fail_step(engine, loaded, state, token, node, reason, True, now, Changes(), token.lease_owner)


def expiry_kind(node: Node, token: Token, now: int) -> str:
    """Which way a RUNNING token's lease ran out: "timeout" (its attempt's time limit),
    "heartbeat" (its heartbeat timeout) or "lease" (a worker that stopped answering)."""
    if token.deadline_at and now >= token.deadline_at:
        return "timeout"
    return "heartbeat" if node.heartbeat_timeout_millis else "lease"


def expiry_reason(node: Node, token: Token, now: int) -> str:
    """Why a RUNNING token's lease ran out, as its history says it (docs/semantics.md#step-time-limits)."""
    kind = expiry_kind(node, token, now)
    if kind == "timeout":
        return f"timed out after {_seconds(node.timeout_millis)} (the step's start-to-close limit)"
    if kind == "heartbeat":
        return f"heartbeat timed out: no heartbeat for {_seconds(node.heartbeat_timeout_millis)}"
    return "lease expired (worker unreachable)"


def _seconds(millis: int) -> str:
    return f"{millis / 1000:g} s"


def start_deadline(loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
    """A step nobody claimed within its schedule-to-start limit: it fails for good (no retry: a
    retry would wait in the same queue), and so does the instance, naming the step and the limit."""
    changes = Changes()
    if token.status != TokenStatus.READY or not 0 < token.deadline_at <= now:
        return changes
    node = loaded.nodes[token.node_id]
    limit = _seconds(node.schedule_to_start_millis)
    message = f"not started within {limit} (the step's schedule-to-start limit): no worker claimed it"
    state.instance.updated_at = now
    changes.instance_changed = True
    record(
        state, token, node, HistoryOutcome.TIMED_OUT, now, changes, error=message, started=token.available_at
    )
    token.last_error = message
    finish_token(state, token, TokenStatus.FAILED, now, changes)
    fail_instance(state, f"{node.id}: {message}", now, changes, failed=token)
    return changes


def workflow_deadline(loaded: LoadedDefinition, state: InstanceState, now: int) -> Changes:
    """The instance's time limit passed: it fails, wherever it waits; its active tokens are
    cancelled and its children, no longer awaited, are cancelled by the orphan sweep
    (docs/semantics.md#workflow-time-limits). One TIMED_OUT history entry per active token."""
    changes = Changes()
    inst = state.instance
    if inst.status != InstanceStatus.RUNNING or not 0 < inst.deadline_at <= now:
        return changes
    limit = _seconds(inst.timeout_millis)
    message = f"workflow timed out: still running {limit} after its start (its time limit)"
    for token in list(state.tokens.values()):
        node = loaded.nodes[token.node_id]
        record(
            state,
            token,
            node,
            HistoryOutcome.TIMED_OUT,
            now,
            changes,
            error=message,
            started=token.started_at,
        )
    end_instance(state, InstanceStatus.FAILED, now, changes, reason="workflow timed out", error=message)
    return changes


def fire_timer(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
) -> Changes:
    """A SLEEP is over (never early): move on."""
    changes = Changes()
    node = loaded.nodes[token.node_id]
    if token.status != TokenStatus.WAITING or token.available_at > now:
        return changes
    record(state, token, node, HistoryOutcome.SLEPT, now, changes, started=token.started_at)
    assert node.next is not None
    move(token, node.next)
    state.instance.updated_at = now
    changes.instance_changed = True
    drive(engine, loaded, state, token, now, changes)
    return changes


def user_task_deadline(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
) -> Changes:
    """A user task's (or a signal wait's) deadline passed: continue at ``alt_next``, or fail the instance."""
    changes = Changes()
    node = loaded.nodes[token.node_id]
    if token.status != TokenStatus.AWAITING or token.available_at <= 0 or token.available_at > now:
        return changes
    state.instance.updated_at = now
    changes.instance_changed = True
    if node.alt_next is None:
        record(
            state,
            token,
            node,
            HistoryOutcome.TIMED_OUT,
            now,
            changes,
            error="timed out",
            started=token.started_at,
        )
        finish_token(state, token, TokenStatus.FAILED, now, changes)
        what = "signal wait" if node.kind is NodeKind.SIGNAL else "user task"
        # name the signal when the node is not named after it (upstream definitions: ids like n2)
        waited = (
            f" for signal {node.signal!r}" if node.kind is NodeKind.SIGNAL and node.signal != node.id else ""
        )
        fail_instance(state, f"{what} {node.id!r}{waited} timed out", now, changes, failed=token)
        return changes
    record(state, token, node, HistoryOutcome.TIMED_OUT, now, changes, started=token.started_at)
    move(token, node.alt_next)
    drive(engine, loaded, state, token, now, changes)
    return changes
