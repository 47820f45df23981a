"""Token and instance bookkeeping the transitions share.

Create, move and finish tokens, record history, end the instance, check a worker's lease, count
steps against the runaway guard, and fail a step (retry with backoff or fail the instance). Like
every engine module: no I/O, and nothing is mutated before the input is validated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from .._limits import storable_text
from .._model import Node
from ..errors import AlreadyFinished, FailedPrecondition
from .config import LoadedDefinition
from .limits import assign as assign_limit
from .limits import leave as leave_limit
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryEntry,
    HistoryOutcome,
    InstanceState,
    InstanceStatus,
    RetryPoint,
    Token,
    TokenStatus,
    split_task_id,
)

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "context_of",
    "count_step",
    "end_instance",
    "fail_instance",
    "fail_step",
    "finish_token",
    "lease_until",
    "leased_token",
    "move",
    "new_token",
    "record",
    "release_step",
    "set_context",
    "start_deadline",
    "step_lease",
]


def context_of(state: InstanceState, token: Token) -> dict[str, Any]:
    """The context a token carries (the instance context on the main line)."""
    return token.context if token.context is not None else state.instance.context


def set_context(state: InstanceState, token: Token, context: dict[str, Any], changes: Changes) -> None:
    """Give ``token`` its new context: its own on a branch, the instance's on the main line."""
    if token.fork_stack:
        token.context = context
    else:
        token.context = None
        state.instance.context = context
        changes.instance_changed = True


def new_token(state: InstanceState, node_id: str, now: int, changes: Changes) -> Token:
    """A new READY token at ``node_id``, numbered from the instance's token sequence."""
    inst = state.instance
    inst.token_seq += 1
    changes.instance_changed = True
    token = Token(
        id=f"{inst.id}.{inst.token_seq}",
        instance_id=inst.id,
        node_id=node_id,
        status=TokenStatus.READY,
        created_at=now,
        priority=inst.priority,
    )
    state.tokens[token.id] = token
    changes.tokens[token.id] = token
    return token


def finish_token(state: InstanceState, token: Token, status: TokenStatus, now: int, changes: Changes) -> None:
    """End ``token`` with ``status``: it leaves the active set and its lease is cleared."""
    leave_limit(token, changes)
    token.status = status
    token.finished_at = now
    token.lease_owner = ""
    token.lease_expires_at = 0
    token.deadline_at = 0
    token.local_run_owner = ""
    state.tokens.pop(token.id, None)
    changes.tokens[token.id] = token


def record(
    state: InstanceState,
    token: Token,
    node: Node,
    outcome: HistoryOutcome,
    now: int,
    changes: Changes,
    error: str = "",
    worker: str = "",
    started: int = 0,
    ended: int = 0,
) -> None:
    """Append one history entry for ``token`` at ``node`` (``started``, ``ended``: its times when
    not ``now``)."""
    changes.history.append(
        HistoryEntry(
            instance_id=state.instance.id,
            token_id=token.id,
            node_id=node.id,
            kind=node.kind.value,
            attempt=token.attempt,
            worker_id=worker,
            started_at=started or now,
            ended_at=ended or now,
            outcome=outcome,
            error=error,
        )
    )


def end_instance(
    state: InstanceState,
    status: InstanceStatus,
    now: int,
    changes: Changes,
    reason: str = "",
    error: str = "",
    failed: Token | None = None,
) -> None:
    """Finish the instance with ``status``; every token still active is CANCELLED.

    A FAILED instance keeps a RetryPoint: copies of its active tokens (and of ``failed``, the
    token whose step failed) and its open joins, what ``retry`` restarts from
    (docs/semantics.md#resuming-a-failed-instance).
    """
    inst = state.instance
    if status is InstanceStatus.FAILED:
        kept = [msgspec.structs.replace(t) for t in state.tokens.values()]
        if failed is not None and failed.id not in state.tokens:
            kept.append(msgspec.structs.replace(failed))
        inst.retry_point = RetryPoint(tokens=kept, joins=dict(inst.joins))
    inst.status = status
    inst.reason = reason
    inst.error = error
    inst.finished_at = now
    inst.updated_at = now
    inst.joins = {}
    changes.instance_changed = True
    changes.finished = True
    for other in list(state.tokens.values()):
        if other.status == TokenStatus.RUNNING and other.lease_owner and other is not failed:
            _record_dropped(state, other, status, now, changes)
        finish_token(state, other, TokenStatus.CANCELLED, now, changes)


def _record_dropped(
    state: InstanceState, token: Token, status: InstanceStatus, now: int, changes: Changes
) -> None:
    """A history entry for an attempt a worker is running when its instance finishes: its report
    will be refused, and nothing else would show that it ran (an outside trial: a cancelled
    order's history had no trace of the step that was charging the card)."""
    worker = token.lease_owner
    changes.history.append(
        HistoryEntry(
            instance_id=state.instance.id,
            token_id=token.id,
            node_id=token.node_id,
            kind=token.kind,
            attempt=token.attempt,
            worker_id=worker,
            started_at=token.started_at or now,
            ended_at=now,
            outcome=HistoryOutcome.CANCELLED,
            error=f"the instance became {status.value} while this attempt ran on worker {worker}; "
            "its result will not be applied",
        )
    )


def fail_instance(
    state: InstanceState, error: str, now: int, changes: Changes, failed: Token | None = None
) -> None:
    """Finish the instance FAILED with ``error`` (``failed``: the token whose step failed)."""
    end_instance(state, InstanceStatus.FAILED, now, changes, error=error, failed=failed)


def move(token: Token, next_id: str) -> None:
    """Put ``token`` on ``next_id`` with a fresh attempt, no lease and no deadline (a caller with
    a RUNNING limited token calls ``leave_limit`` first, to wake its queue)."""
    token.node_id = next_id
    token.limit_key = ""
    token.limit_max = 0
    token.rate_key = ""
    token.rate_max = token.rate_period_millis = 0
    token.attempt = 1
    token.last_error = ""
    token.lease_owner = ""
    token.lease_expires_at = 0
    token.deadline_at = 0


def leased_token(state: InstanceState, task_id: str, owner: str, now: int = 0) -> Token:
    """The RUNNING token that ``task_id`` claimed, leased to ``owner``; the report is refused otherwise.

    ``task_id`` is ``<token id>@<claim>`` (task_id_of): a report for an earlier claim of the token
    (a resent report whose first answer was lost, after the same worker claimed the token's next
    step) is refused and changes nothing (docs/semantics.md#fencing). A bare token id (no claim)
    is taken from in-process callers only; the gRPC edges refuse it (wiggle/_wire/fencing.py).
    With ``now``, a report that comes after the attempt's start-to-close deadline is refused too:
    the attempt timed out, and the clock duties apply that (docs/semantics.md#step-time-limits).
    """
    inst = state.instance
    token_id, claim = split_task_id(task_id)
    if inst.status in FINISHED_INSTANCE_STATUSES:
        raise AlreadyFinished(
            f"instance {inst.id} is {inst.status}; the report on task {task_id} was refused",
            inst.status,
        )
    token = state.tokens.get(token_id)
    if token is None:
        raise FailedPrecondition(
            f"task {task_id} is already settled: token {token_id} is not active any more "
            "(it finished or moved on); the report was refused and nothing changed"
        )
    if claim is not None and claim != token.claim:
        raise FailedPrecondition(
            f"task {task_id} is already settled: token {token_id} has been claimed again since "
            f"(claim {token.claim}, now {token.status} at node {token.node_id!r}); the report was refused "
            "and nothing changed"
        )
    if token.status != TokenStatus.RUNNING:
        raise FailedPrecondition(
            f"task {task_id} is not held any more: token {token_id} is {token.status}, not RUNNING, at "
            f"node {token.node_id!r} (the step was reported already, or its lease ran out); the report "
            "was refused and nothing changed"
        )
    if token.lease_owner != owner:
        # the holder's id is not named: a worker learns nothing about another worker's lease
        raise FailedPrecondition(
            f"task {task_id} is leased to another worker, not {owner[:200]!r}; the report was refused"
        )
    if now and token.deadline_at and now >= token.deadline_at:
        raise FailedPrecondition(
            f"task {task_id} timed out: its attempt passed its time limit at node {token.node_id!r} "
            f"{now - token.deadline_at} ms ago; the report was refused and the step follows its retry policy"
        )
    return token


def count_step(engine: Engine, state: InstanceState, token: Token, now: int, changes: Changes) -> bool:
    """Count one worker step; False (and the instance failed) past the runaway guard."""
    state.instance.steps += 1
    if state.instance.steps > engine.config.max_instance_steps:
        fail_instance(
            state,
            f"runaway: more than {engine.config.max_instance_steps} steps (last at node {token.node_id!r}); "
            "a loop that never exits?",
            now,
            changes,
        )
        return False
    return True


def fail_step(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    token: Token,
    node: Node,
    message: str,
    retryable: bool,
    now: int,
    changes: Changes,
    worker: str = "",
) -> Changes:
    message = storable_text(message)
    leave_limit(token, changes)
    policy = loaded.definition.retry_for(node)
    state.instance.updated_at = now
    changes.instance_changed = True
    worker = worker or token.lease_owner
    if retryable and policy.allows_another(token.attempt):
        record(
            state,
            token,
            node,
            HistoryOutcome.RETRY,
            now,
            changes,
            error=message,
            worker=worker,
            started=token.started_at,
        )
        delay = policy.backoff_millis(token.attempt, engine.rng)
        token.attempt += 1
        token.status = TokenStatus.READY
        token.available_at = now + delay
        token.last_error = message
        token.lease_owner = ""
        token.lease_expires_at = 0
        token.local_run_owner = ""
        token.local_run_steps = 0
        token.queue = loaded.queue_of(node)
        start_deadline(token, node, changes)
        assign_limit(state, token, node)
        changes.tokens[token.id] = token
        changes.ready_queues.add(token.queue)
        if delay > 0:
            changes.timers = True
        return changes
    record(
        state,
        token,
        node,
        HistoryOutcome.FAILED,
        now,
        changes,
        error=message,
        worker=worker,
        started=token.started_at,
    )
    token.last_error = message
    finish_token(state, token, TokenStatus.FAILED, now, changes)
    fail_instance(state, f"{node.id}: {message}", now, changes, failed=token)
    return changes


def release_step(
    engine: Engine, loaded: LoadedDefinition, state: InstanceState, token: Token, message: str, now: int
) -> Changes:
    """Give a claimed step back without consuming an attempt (docs/semantics.md#mixed-fleets).

    The worker that claimed it cannot run it (no handler for the node of the pinned version): the
    token is READY again, with the same attempt, after a short delay so that another worker can
    claim it. No history entry: a step can bounce many times while only unfit workers poll.
    """
    node = loaded.nodes[token.node_id]
    changes = Changes()
    leave_limit(token, changes)
    token.status = TokenStatus.READY
    token.available_at = now + engine.config.release_delay_millis
    token.last_error = storable_text(message)
    token.lease_owner = ""
    token.lease_expires_at = 0
    token.local_run_owner = ""
    token.local_run_steps = 0
    token.queue = loaded.queue_of(node)
    start_deadline(token, node, changes)
    assign_limit(state, token, node)
    changes.tokens[token.id] = token
    changes.ready_queues.add(token.queue)
    changes.timers = True
    return changes


def step_lease(node: Node, lease: int) -> int:
    """The lease a claim or heartbeat of ``node`` gets: ``lease``, or the step's heartbeat timeout
    when it has one (silence that long gives the attempt up; docs/semantics.md#step-time-limits)."""
    return node.heartbeat_timeout_millis or lease


def lease_until(token: Token, now: int, lease: int) -> int:
    """``now + lease``, but never past the attempt's start-to-close deadline: the lease sweep
    (clock.expire_lease) is what applies the deadline."""
    expiry = now + lease
    return min(expiry, token.deadline_at) if token.deadline_at else expiry


def start_deadline(token: Token, node: Node, changes: Changes) -> None:
    """A READY token at a worker step with a schedule-to-start limit: the moment it fails unless
    claimed (``deadline_at`` of a READY token; a claim replaces it by the attempt's own deadline;
    docs/semantics.md#step-time-limits). 0 when the step has none."""
    limit = node.schedule_to_start_millis
    token.deadline_at = token.available_at + limit if limit else 0
    if limit:
        changes.timers = True
