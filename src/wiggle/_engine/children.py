"""SUB_WORKFLOW: a token that waits for a child instance (docs/semantics.md#sub-workflows).

Pure transitions of the *parent*; the instance layer (wiggle/_server/instances.py) does the
cross-instance part. At the node the token parks AWAITING with the child's id already chosen and
stored on it, due at once: the clock duty then inserts the child under that id (a second attempt
finds it and inserts nothing, so a crash in between never starts two) and records the start here.
When the child finishes, ``child_finished`` resumes the parent; it checks the token still waits
for that very child, so a repeated wake-up changes nothing. While the child runs, the token stays
due every ``child_recheck_millis``: a wake-up lost to a crash is made good then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from .._limits import storable_text
from .._model import Node
from ..errors import InvalidArgument
from .config import LoadedDefinition
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryEntry,
    HistoryOutcome,
    Instance,
    InstanceState,
    InstanceStatus,
    Token,
    TokenStatus,
)
from .tokens import context_of, end_instance, finish_token, move, set_context

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "DEPTH_LIMIT_REASON",
    "ChildSpec",
    "park",
    "child_spec",
    "child_started",
    "child_finished",
    "child_not_started",
]

#: The reason of an instance that failed at the sub-workflow depth limit, itself or in a child:
#: its parent's SUB_WORKFLOW step then fails without retry (a new child would nest as deep).
DEPTH_LIMIT_REASON = "sub-workflow depth limit"


class ChildSpec(msgspec.Struct, frozen=True):
    """What the instance layer needs to start a waiting token's child."""

    parent_id: str
    parent_token: str
    child_id: str
    workflow: str
    version: str
    context: dict[str, Any]
    correlation_id: str
    depth: int
    priority: int = 0  # the parent's: a child inherits it (docs/flow-control.md#priorities)
    traceparent: str = ""  # the parent's trace, which the child's steps join (docs/semantics.md#tracing)


def park(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    tok: Token,
    node: Node,
    now: int,
    changes: Changes,
) -> None:
    """Park ``tok`` at the SUB_WORKFLOW ``node``, its child chosen and due to start.

    Past ``max_sub_workflow_depth`` the step fails at once, without retry or ``on_error``, and so
    does the instance, with reason DEPTH_LIMIT_REASON.
    """
    depth = state.instance.depth + 1
    limit = engine.config.max_sub_workflow_depth
    if depth > limit:
        # Not retryable, and no on_error: nesting deeper again would hit the same limit. The
        # instance is marked (its reason) so that each ancestor fails its step once, unretried.
        message = (
            f"sub-workflow {node.id!r}: starting {node.workflow!r} would nest {depth} deep; the limit is "
            f"{limit} (a workflow that starts itself without a way out?)"
        )
        tok.kind = node.kind.value
        tok.child_id = ""
        changes.history.append(_entry(state, tok, HistoryOutcome.FAILED, now, now, message))
        _fail_instance_at(state, tok, message, message, DEPTH_LIMIT_REASON, now, changes)
        return
    tok.status = TokenStatus.AWAITING
    tok.kind = node.kind.value
    tok.queue = ""
    tok.available_at = now  # due: the clock duty starts the child
    tok.lease_owner = ""
    tok.lease_expires_at = 0
    tok.local_run_owner = ""
    tok.local_run_steps = 0
    tok.started_at = 0  # set when the child's start is recorded
    tok.child_id = engine.new_instance_id(now)
    changes.tokens[tok.id] = tok
    changes.timers = True


def waiting(state: InstanceState, token_id: str, child_id: str) -> Token | None:
    """The token ``token_id`` if it still waits for the child ``child_id``."""
    if state.instance.status != InstanceStatus.RUNNING:
        return None
    tok = state.tokens.get(token_id)
    if tok is None or tok.status != TokenStatus.AWAITING or tok.child_id != child_id or not child_id:
        return None
    return tok


def child_spec(loaded: LoadedDefinition, state: InstanceState, tok: Token) -> ChildSpec:
    """The child a waiting token starts: its id, workflow, version and context."""
    node = loaded.nodes[tok.node_id]
    assert node.workflow is not None
    context = context_of(state, tok)
    if node.input_keys is not None:
        context = {k: context[k] for k in node.input_keys if k in context}
    return ChildSpec(
        parent_id=state.instance.id,
        parent_token=tok.id,
        child_id=tok.child_id,
        workflow=node.workflow,
        version=node.version or "",
        context=dict(context),
        correlation_id=state.instance.correlation_id,
        depth=state.instance.depth + 1,
        priority=state.instance.priority,
        traceparent=state.instance.traceparent,
    )


def child_started(
    engine: Engine, state: InstanceState, token_id: str, child_id: str, now: int
) -> Changes | None:
    """The child exists: record its start once, and wait (re-checking now and then)."""
    tok = waiting(state, token_id, child_id)
    if tok is None:
        return None
    changes = Changes()
    if tok.started_at == 0:
        tok.started_at = now
        changes.history.append(_entry(state, tok, HistoryOutcome.CHILD_STARTED, now, now))
    tok.available_at = now + engine.config.child_recheck_millis
    changes.tokens[tok.id] = tok
    changes.timers = True
    return changes


def child_finished(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token_id: str, child: Instance, now: int
) -> Changes | None:
    """The child ``child`` finished: merge its context and move on, retry, or take the error path."""
    tok = waiting(state, token_id, child.id)
    if tok is None or child.status not in FINISHED_INSTANCE_STATUSES:  # (SCHEDULED: waits for a slot)
        return None
    recorded = None
    if tok.started_at == 0:
        # The child ran to its end before this instance recorded its start: the clock duty starts
        # the child and records the start on the parent in two transactions (wiggle/_server/
        # subflows.py), and a child whose steps are handed straight to a waiting worker can finish
        # in between. Its start is recorded now, first, so that each attempt's history holds the
        # child's start and its outcome (the record that comes later finds the token moved on).
        tok.started_at = child.created_at or now
        recorded = _entry(state, tok, HistoryOutcome.CHILD_STARTED, tok.started_at, tok.started_at)
    changes = _finished(engine, loaded, state, tok, child, now)
    if recorded is not None:
        changes.history.insert(0, recorded)
    return changes


def _finished(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, tok: Token, child: Instance, now: int
) -> Changes:
    """``child_finished`` once the child's start is recorded."""
    node = loaded.nodes[tok.node_id]
    if child.status == InstanceStatus.COMPLETED:
        base = context_of(state, tok)
        merged = {**base, node.result_key: child.context} if node.result_key else {**base, **child.context}
        try:
            engine.check_context(merged, f"context after sub-workflow {node.id!r}")
        except InvalidArgument as exc:
            return _failed(engine, loaded, state, tok, node, str(exc), False, now)
        changes = Changes()
        set_context(state, tok, merged, changes)
        changes.history.append(_entry(state, tok, HistoryOutcome.COMPLETED, tok.started_at or now, now))
        assert node.next is not None
        move(tok, node.next)
        tok.child_id = ""
        state.instance.updated_at = now
        changes.instance_changed = True
        engine.drive(loaded, state, tok, now, changes)
        return changes
    why = child.error or child.reason or str(child.status).lower()
    message = f"child instance {child.id} ({child.workflow}) ended {child.status}: {why}"
    if child.status == InstanceStatus.FAILED and child.reason == DEPTH_LIMIT_REASON:
        # The chain is too deep: a new child would fail the same way (docs/semantics.md#sub-workflows).
        return _failed(engine, loaded, state, tok, node, message, False, now, DEPTH_LIMIT_REASON)
    return _failed(engine, loaded, state, tok, node, message, child.status == InstanceStatus.FAILED, now)


def child_not_started(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    token_id: str,
    child_id: str,
    error: str,
    now: int,
) -> Changes | None:
    """The child could not be started (its workflow is gone, its context refused): the step fails."""
    tok = waiting(state, token_id, child_id)
    if tok is None:
        return None
    return _failed(engine, loaded, state, tok, loaded.nodes[tok.node_id], error, False, now)


def _entry(
    state: InstanceState, tok: Token, outcome: HistoryOutcome, started: int, now: int, error: str = ""
) -> HistoryEntry:
    return HistoryEntry(
        instance_id=state.instance.id,
        token_id=tok.id,
        node_id=tok.node_id,
        kind=tok.kind,
        attempt=tok.attempt,
        worker_id="",
        started_at=started,
        ended_at=now,
        outcome=outcome,
        error=error,
        child_id=tok.child_id,
    )


def _failed(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    tok: Token,
    node: Node,
    message: str,
    retryable: bool,
    now: int,
    reason: str = "",
) -> Changes:
    """The step failed: a new child after the backoff, else the error branch, else the instance fails
    (with ``reason``), the token kept as its retry point: a plain ``retry`` starts a new child."""
    message = storable_text(message)
    changes = Changes()
    state.instance.updated_at = now
    changes.instance_changed = True
    policy = loaded.definition.retry_for(node)
    started = tok.started_at or now
    if retryable and policy.allows_another(tok.attempt):
        changes.history.append(_entry(state, tok, HistoryOutcome.RETRY, started, now, message))
        tok.available_at = now + policy.backoff_millis(tok.attempt, engine.rng)
        tok.attempt += 1
        tok.last_error = message
        tok.started_at = 0
        tok.child_id = engine.new_instance_id(now)
        changes.tokens[tok.id] = tok
        changes.timers = True
        return changes
    changes.history.append(_entry(state, tok, HistoryOutcome.FAILED, started, now, message))
    if node.alt_next is not None:
        move(tok, node.alt_next)
        tok.child_id = ""
        tok.last_error = message
        engine.drive(loaded, state, tok, now, changes)
        return changes
    _fail_instance_at(state, tok, message, f"{node.id}: {message}", reason, now, changes)
    return changes


def _fail_instance_at(
    state: InstanceState, tok: Token, message: str, error: str, reason: str, now: int, changes: Changes
) -> None:
    """The SUB_WORKFLOW step ``tok`` failed for good: the instance fails, ``tok`` its retry point."""
    tok.last_error = message
    finish_token(state, tok, TokenStatus.FAILED, now, changes)
    end_instance(state, InstanceStatus.FAILED, now, changes, reason=reason, error=error, failed=tok)
