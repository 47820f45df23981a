"""The drive loop: move a token through server-side nodes until it parks (docs/semantics.md#node-kinds).

A worker node (task, predicate) parks the token READY on its queue; a sleep or user task parks it
WAITING / AWAITING; an end finishes it; a fork spawns one token per branch; a join parks branches
until the last arrives and folds their contexts.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _fast
from .._model import JoinMerge, Node, NodeKind
from . import children, fanout, lww
from .config import LoadedDefinition
from .limits import assign as assign_limit
from .signals import take_buffered
from .state import Changes, HistoryOutcome, InstanceState, InstanceStatus, JoinState, Token, TokenStatus
from .tokens import (
    context_of,
    end_instance,
    fail_instance,
    finish_token,
    new_token,
    record,
    set_context,
    start_deadline,
)

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["drive", "arrive_at_join", "After", "DriveRun", "DRIVERS"]


class After(enum.Enum):
    """What the drive loop does once a node has taken the token (the value of a DRIVERS entry)."""

    PARKED = "parked"  # the token waits (or is gone): drive the next pending token
    MOVES_ON = "moves on"  # the token went on to another node: drive it there
    STOPPED = "stopped"  # the instance is no longer running: the drive ends


class DriveRun:
    """One call of ``drive``: what every node kind's driver reads and writes."""

    __slots__ = ("engine", "loaded", "state", "now", "changes", "pending")

    def __init__(
        self, engine: Engine, loaded: LoadedDefinition, state: InstanceState, now: int, changes: Changes
    ) -> None:
        self.engine = engine
        self.loaded = loaded
        self.state = state
        self.now = now
        self.changes = changes
        self.pending: list[Token] = []  # tokens a fork or for_each spawned, still to drive


def drive(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
) -> None:
    """Move ``token`` (and any tokens it spawns) until each is parked (docs/semantics.md#node-kinds)."""
    run = DriveRun(engine, loaded, state, now, changes)
    run.pending.append(token)
    moves = 0
    limit = engine.config.max_drive_moves
    while run.pending:
        tok = run.pending.pop()
        while True:
            if state.instance.status != InstanceStatus.RUNNING:
                return
            moves += 1
            if moves > limit:
                fail_instance(
                    state,
                    f"runaway: drive moved more than {limit} times without parking "
                    f"(last at node {tok.node_id!r}); a loop of server nodes?",
                    now,
                    changes,
                )
                return
            node = loaded.nodes[tok.node_id]
            changes.tokens[tok.id] = tok
            after = DRIVERS[node.kind](run, tok, node)
            if after is After.PARKED:
                break
            if after is After.STOPPED:
                return


# ---------------------------------------------------------------------------- one driver per kind


def _drive_worker_step(run: DriveRun, tok: Token, node: Node) -> After:
    """A TASK or PREDICATE: READY on its queue for a worker to claim."""
    tok.status = TokenStatus.READY
    tok.kind = node.kind.value
    tok.queue = run.loaded.queue_of(node)
    tok.available_at = run.now
    tok.lease_owner = ""
    tok.lease_expires_at = 0
    tok.local_run_owner = ""
    tok.local_run_steps = 0
    start_deadline(tok, node, run.changes)
    assign_limit(run.state, tok, node)
    run.changes.ready_queues.add(tok.queue)
    return After.PARKED


def _drive_sleep(run: DriveRun, tok: Token, node: Node) -> After:
    """WAITING until the sleep is over."""
    tok.status = TokenStatus.WAITING
    tok.kind = node.kind.value
    tok.queue = ""
    tok.started_at = run.now  # the history entry's started_at (docs/semantics.md#sleep)
    tok.available_at = run.now + node.sleep_millis
    tok.lease_owner = ""
    tok.lease_expires_at = 0
    run.changes.timers = True
    return After.PARKED


def _drive_user_task(run: DriveRun, tok: Token, node: Node) -> After:
    """AWAITING a person (or its deadline)."""
    _await(tok, node, run.now)
    run.changes.timers = True
    return After.PARKED


def _drive_signal(run: DriveRun, tok: Token, node: Node) -> After:
    """A signal sent earlier is consumed at once; otherwise wait (docs/semantics.md#signal)."""
    if take_buffered(run.engine, run.state, tok, node, run.now, run.changes):
        return After.MOVES_ON
    if run.state.instance.status != InstanceStatus.RUNNING:
        return After.STOPPED
    _await(tok, node, run.now)
    if node.timeout_millis > 0:
        run.changes.timers = True
    return After.PARKED


def _drive_end(run: DriveRun, tok: Token, node: Node) -> After:
    """The token is done; the last one ends the instance, COMPLETED or FAILED as the END says."""
    state, now, changes = run.state, run.now, run.changes
    record(state, tok, node, HistoryOutcome.END, now, changes)
    finish_token(state, tok, TokenStatus.DONE, now, changes)
    if not state.tokens:
        if node.success:
            end_instance(state, InstanceStatus.COMPLETED, now, changes, reason=node.reason or "")
        else:
            reason = node.reason or ""
            end_instance(state, InstanceStatus.FAILED, now, changes, reason=reason, error=reason or node.id)
    return After.PARKED


def _drive_fork(run: DriveRun, tok: Token, node: Node) -> After:
    """One token per branch, each on a copy of the context; the barrier waits at the join."""
    state, now, changes = run.state, run.now, run.changes
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
        diffs=run.engine.config.join_diffs,
    )
    changes.instance_changed = True
    for index, first in enumerate(node.branches):
        child = new_token(state, first, now, changes)
        child.context = dict(base)
        child.fork_stack = [*tok.fork_stack, (group, index)]
        run.pending.append(child)
    finish_token(state, tok, TokenStatus.DONE, now, changes)
    return After.PARKED


def _drive_join(run: DriveRun, tok: Token, node: Node) -> After:
    """A branch arrives; the last one's token (reused) moves on with the folded context."""
    moves_on = arrive_at_join(run.engine, run.loaded, run.state, tok, node, run.now, run.changes, run.pending)
    return After.MOVES_ON if moves_on else After.PARKED


def _drive_for_each(run: DriveRun, tok: Token, node: Node) -> After:
    """A slice of branches, one per element (docs/semantics.md#for-each)."""
    try:
        spawned = fanout.start_for_each(run.loaded, run.state, tok, node, run.now, run.changes)
    except fanout.NotAList as exc:
        if run.changes.created:
            raise  # at start: refused, nothing is stored (docs/semantics.md#for-each)
        fail_instance(run.state, str(exc), run.now, run.changes)
        return After.STOPPED
    if not spawned:
        return After.MOVES_ON  # an empty list: tok went straight past the join
    run.pending.extend(spawned)
    return After.PARKED


def _drive_sub_workflow(run: DriveRun, tok: Token, node: Node) -> After:
    """Parked with the child's id; the server starts the child (wiggle/_engine/children.py)."""
    children.park(run.engine, run.loaded, run.state, tok, node, run.now, run.changes)
    return After.PARKED


#: What the drive does at each node kind (every NodeKind has one: a test checks,
#: tests/engine/test_kind_tables.py).
DRIVERS: dict[NodeKind, Callable[[DriveRun, Token, Node], After]] = {
    NodeKind.TASK: _drive_worker_step,
    NodeKind.PREDICATE: _drive_worker_step,
    NodeKind.SLEEP: _drive_sleep,
    NodeKind.FORK: _drive_fork,
    NodeKind.JOIN: _drive_join,
    NodeKind.USER_TASK: _drive_user_task,
    NodeKind.END: _drive_end,
    NodeKind.SIGNAL: _drive_signal,
    NodeKind.SUB_WORKFLOW: _drive_sub_workflow,
    NodeKind.FOR_EACH: _drive_for_each,
}


def _await(tok: Token, node: Node, now: int) -> None:
    """Park ``tok`` AWAITING at a user task or signal wait, due at its deadline (0: none)."""
    tok.status = TokenStatus.AWAITING
    tok.kind = node.kind.value
    tok.queue = ""
    tok.started_at = now
    tok.available_at = now + node.timeout_millis if node.timeout_millis > 0 else 0
    tok.lease_owner = ""
    tok.lease_expires_at = 0


# ---------------------------------------------------------------------------- joins


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
    arrived = context_of(state, tok)
    if join.diffs:  # only what the branch changed: the fold needs no more (_branch)
        arrived, removed = _fast.diff(join.base, arrived)
        if removed:
            join.removed = {**join.removed, str(index): removed}
    join.arrived[str(index)] = arrived
    join.joined_tokens.append(tok.id)
    changes.instance_changed = True
    tok.status = TokenStatus.JOINED
    tok.kind = NodeKind.JOIN.value
    tok.queue = ""
    changes.tokens[tok.id] = tok
    if len(join.arrived) < join.branch_count:
        return False
    return _fold(loaded, state, tok, node, group, join, now, changes)


def _branch(join: JoinState, index: str) -> dict[str, Any]:
    """The context branch ``index`` arrived with (made again from its changes: ``JoinState.diffs``)."""
    arrived = join.arrived[index]
    if not join.diffs:
        return arrived
    return _fast.apply_diff(join.base, arrived, join.removed.get(index, []))


def _fold(
    loaded: LoadedDefinition,
    state: InstanceState,
    tok: Token,
    node: Node,
    group: str,
    join: JoinState,
    now: int,
    changes: Changes,
) -> bool:
    """Every branch is here: fold, finish the others, and continue with ``tok`` (True), or hand the
    conflict to the combine step or fail the instance (False)."""
    branches = [_branch(join, str(i)) for i in range(join.branch_count)]
    parent_stack = list(tok.fork_stack[:-1])
    for other_id in join.joined_tokens:
        if other_id != tok.id and other_id in state.tokens:
            finish_token(state, state.tokens[other_id], TokenStatus.DONE, now, changes)
    try:
        if loaded.definition.join_merge is JoinMerge.LAST_WRITE_WINS:
            folded = lww.fold_arrivals(join.base, [_branch(join, i) for i in join.arrived])  # arrival order
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
        fork_node = loaded.nodes[join.fork_node]
        a = fork_node.branches[conflict.first]
        b = fork_node.branches[conflict.second]
        fail_instance(
            state,
            f"join {node.id!r}: branches {a!r} and {b!r} both changed {conflict.key!r}; give the join a combine function (.join(combine=fn)) or let each branch change keys of its own",
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
