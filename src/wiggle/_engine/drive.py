"""The drive loop: move a token through server-side nodes until it parks (docs/semantics.md#node-kinds).

A worker node (task, predicate) parks the token READY on its queue; a sleep or user task parks it
WAITING / AWAITING; an end finishes it; a fork spawns one token per branch; a join parks branches
until the last arrives and folds their contexts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _fast
from .._model import JoinMerge, Node, NodeKind
from . import children, fanout, lww
from .config import LoadedDefinition
from .signals import take_buffered
from .state import Changes, HistoryOutcome, InstanceState, InstanceStatus, JoinState, Token, TokenStatus
from .tokens import context_of, end_instance, fail_instance, finish_token, new_token, record, set_context

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["drive", "arrive_at_join"]


def drive(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
) -> None:
    """Move ``token`` (and any tokens it spawns) until each is parked (docs/semantics.md#node-kinds)."""
    pending = [token]
    moves = 0
    while pending:
        tok = pending.pop()
        while True:
            if state.instance.status != InstanceStatus.RUNNING:
                return
            moves += 1
            if moves > engine.config.max_drive_moves:
                fail_instance(
                    state,
                    f"runaway: drive moved more than {engine.config.max_drive_moves} times without parking "
                    f"(last at node {tok.node_id!r}); a loop of server nodes?",
                    now,
                    changes,
                )
                return
            node = loaded.nodes[tok.node_id]
            kind = node.kind
            changes.tokens[tok.id] = tok
            if kind is NodeKind.TASK or kind is NodeKind.PREDICATE:
                tok.status = TokenStatus.READY
                tok.kind = kind.value
                tok.queue = loaded.queue_of(node)
                tok.available_at = now
                tok.lease_owner = ""
                tok.lease_expires_at = 0
                tok.local_run_owner = ""
                tok.local_run_steps = 0
                changes.ready_queues.add(tok.queue)
                break
            if kind is NodeKind.SLEEP:
                tok.status = TokenStatus.WAITING
                tok.kind = kind.value
                tok.queue = ""
                tok.started_at = now  # the history entry's started_at (docs/semantics.md#sleep)
                tok.available_at = now + node.sleep_millis
                tok.lease_owner = ""
                tok.lease_expires_at = 0
                changes.timers = True
                break
            if kind is NodeKind.USER_TASK:
                _await(tok, node, now)
                changes.timers = True
                break
            if kind is NodeKind.SIGNAL:
                # A signal sent earlier is consumed at once; otherwise wait (docs/semantics.md#signal).
                if take_buffered(engine, state, tok, node, now, changes):
                    continue
                if state.instance.status != InstanceStatus.RUNNING:
                    return
                _await(tok, node, now)
                if node.timeout_millis > 0:
                    changes.timers = True
                break
            if kind is NodeKind.END:
                record(state, tok, node, HistoryOutcome.END, now, changes)
                finish_token(state, tok, TokenStatus.DONE, now, changes)
                if not state.tokens:
                    if node.success:
                        end_instance(state, InstanceStatus.COMPLETED, now, changes, reason=node.reason or "")
                    else:
                        end_instance(
                            state,
                            InstanceStatus.FAILED,
                            now,
                            changes,
                            reason=node.reason or "",
                            error=node.reason or node.id,
                        )
                break
            if kind is NodeKind.FORK:
                record(state, tok, node, HistoryOutcome.FORKED, now, changes)
                base = context_of(state, tok)
                group = f"{tok.id}@{node.id}@{state.instance.token_seq}"
                state.instance.joins = dict(state.instance.joins)
                state.instance.joins[group] = JoinState(
                    fork_node=node.id,
                    branch_count=len(node.branches),
                    base=base,
                    arrived={},
                    joined_tokens=[],
                )
                changes.instance_changed = True
                for index, first in enumerate(node.branches):
                    child = new_token(state, first, now, changes)
                    child.context = dict(base)
                    child.fork_stack = [*tok.fork_stack, (group, index)]
                    pending.append(child)
                finish_token(state, tok, TokenStatus.DONE, now, changes)
                break
            if kind is NodeKind.JOIN:
                if not arrive_at_join(engine, loaded, state, tok, node, now, changes, pending):
                    break
                # the continuation token (tok, reused) moves on
                continue
            if kind is NodeKind.FOR_EACH:
                try:
                    spawned = fanout.start_for_each(loaded, state, tok, node, now, changes)
                except fanout.NotAList as exc:
                    if changes.created:
                        raise  # at start: refused, nothing is stored (docs/semantics.md#for-each)
                    fail_instance(state, str(exc), now, changes)
                    return
                if not spawned:
                    continue  # an empty list: tok went straight past the join
                pending.extend(spawned)
                break
            if kind is NodeKind.SUB_WORKFLOW:
                children.park(engine, loaded, state, tok, node, now, changes)
                break
            raise AssertionError(f"unknown node kind {kind}")  # pragma: no cover


def _await(tok: Token, node: Node, now: int) -> None:
    """Park ``tok`` AWAITING at a user task or signal wait, due at its deadline (0: none)."""
    tok.status = TokenStatus.AWAITING
    tok.kind = node.kind.value
    tok.queue = ""
    tok.started_at = now
    tok.available_at = now + node.timeout_millis if node.timeout_millis > 0 else 0
    tok.lease_owner = ""
    tok.lease_expires_at = 0


def arrive_at_join(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    tok: Token,
    node: Node,
    now: int,
    changes: Changes,
    pending: list[Token],
) -> bool:
    """Park ``tok`` at the join; when the last branch arrives, fold. True if ``tok`` moves on.

    The fold is strict (``_fast.fold_join``: a conflict runs the combine step or fails the
    instance), or, in a LAST_WRITE_WINS definition, the branches in arrival order (``lww``).
    """
    if not tok.fork_stack:
        fail_instance(state, f"join {node.id!r} reached outside its fork", now, changes)
        return False
    group, index = tok.fork_stack[-1]
    join = state.instance.joins.get(group)
    if join is None or join.fork_node != node.fork:
        fail_instance(state, f"join {node.id!r} reached by a branch of another fork", now, changes)
        return False
    if join.for_each:
        limit = engine.config.max_payload_bytes
        return fanout.arrive_for_each(loaded, state, tok, node, group, join, index, now, changes, limit)
    join.arrived[str(index)] = context_of(state, tok)
    join.joined_tokens.append(tok.id)
    changes.instance_changed = True
    tok.status = TokenStatus.JOINED
    tok.kind = NodeKind.JOIN.value
    tok.queue = ""
    changes.tokens[tok.id] = tok
    if len(join.arrived) < join.branch_count:
        return False
    # Every branch is here: fold, finish the others, and continue with this token.
    branches = [join.arrived[str(i)] for i in range(join.branch_count)]
    fork_node = loaded.nodes[join.fork_node]
    parent_stack = list(tok.fork_stack[:-1])
    for other_id in join.joined_tokens:
        if other_id != tok.id and other_id in state.tokens:
            finish_token(state, state.tokens[other_id], TokenStatus.DONE, now, changes)
    try:
        if loaded.definition.join_merge is JoinMerge.LAST_WRITE_WINS:
            folded = lww.fold_arrivals(join.base, join.arrived.values())  # arrival order
        else:
            folded = _fast.fold_join(join.base, branches)
    except _fast.JoinConflict as conflict:
        if node.combine:
            # The combine handler is user code: a worker runs it as a step at the join.
            tok.fork_stack = parent_stack
            tok.context = {"base": join.base, "branches": branches}
            tok.status = TokenStatus.READY
            tok.kind = NodeKind.JOIN.value
            tok.queue = loaded.queue_of(node)
            tok.available_at = now
            tok.attempt = 1
            changes.ready_queues.add(tok.queue)
            del state.instance.joins[group]
            return False
        a = fork_node.branches[conflict.first]
        b = fork_node.branches[conflict.second]
        fail_instance(
            state,
            f"join {node.id!r}: branches {a!r} and {b!r} both changed {conflict.key!r}; declare a combine step",
            now,
            changes,
        )
        return False
    del state.instance.joins[group]
    record(state, tok, node, HistoryOutcome.JOINED, now, changes)
    tok.fork_stack = parent_stack
    set_context(state, tok, folded, changes)
    assert node.next is not None
    tok.node_id = node.next
    tok.attempt = 1
    tok.last_error = ""
    return True
