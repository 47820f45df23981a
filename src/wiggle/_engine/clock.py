"""The clock's transitions: a lease ran out, a sleep is over, a user task's deadline passed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._model import NodeKind
from .config import LoadedDefinition
from .drive import drive
from .state import Changes, HistoryOutcome, InstanceState, Token, TokenStatus
from .tokens import fail_instance, fail_step, finish_token, move, record

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["expire_lease", "fire_timer", "user_task_deadline"]


def expire_lease(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
) -> Changes:
    """A lease ran out: a retryable failure "lease expired (worker unreachable)"."""
    if token.status != TokenStatus.RUNNING or token.lease_expires_at > now:
        return Changes()
    node = loaded.nodes[token.node_id]
    return fail_step(
        engine,
        loaded,
        state,
        token,
        node,
        "lease expired (worker unreachable)",
        True,
        now,
        Changes(),
        token.lease_owner,
    )


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
