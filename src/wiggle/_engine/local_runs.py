"""AdvanceRun: a local run's steps, validated as a whole batch, then applied (docs/semantics.md#advancerun)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .. import _fast
from .._model import ExecutionMode, NodeKind
from ..errors import FailedPrecondition, InvalidArgument
from .config import LoadedDefinition
from .drive import drive
from .records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryOutcome,
    InstanceState,
    InstanceStatus,
    TokenStatus,
)
from .tokens import context_of, count_step, fail_step, leased_token, move, record, set_context

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["AdvanceOutcome", "advance_run"]

_WORKER_KINDS = (NodeKind.TASK, NodeKind.PREDICATE)


class AdvanceOutcome(msgspec.Struct):
    """The result of AdvanceRun."""

    instance_status: InstanceStatus
    lease_expires_at: int
    token_id: str
    token_status: TokenStatus | str  # "" when the instance had already finished
    applied_steps: int


def advance_run(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    token_id: str,
    owner: str,
    steps: Sequence[StepRecord],
    final: bool,
    now: int,
    handback_reason: str = "",
) -> tuple[AdvanceOutcome, Changes]:
    """Apply an ordered run of locally executed steps atomically (docs/semantics.md#advancerun).

    ``steps`` are step records (wiggle._engine.records): TaskDone (a task as its context
    diff), PredicateDone, StepFailed (last only), or ContextSet (a task reported with its
    complete context). The whole run is validated against the graph before anything is
    applied; a mismatch is FAILED_PRECONDITION and changes nothing.
    """
    records = steps
    inst = state.instance
    changes = Changes()
    if inst.status in FINISHED_INSTANCE_STATUSES:
        return AdvanceOutcome(inst.status, 0, token_id, "", 0), changes
    token = leased_token(state, token_id, owner)
    if engine.resolve_mode(loaded) is ExecutionMode.SERVER and (len(records) > 1 or not final):
        # SERVER mode commits every step before the next runs (docs/semantics.md#advancerun): a worker
        # may not chain steps under one claim, whatever it sends.
        raise FailedPrecondition(
            f"workflow {inst.workflow!r} runs in execution mode SERVER: one step per claim, "
            f"but AdvanceRun on token {token_id} carried {len(records)} step(s)"
            f"{'' if final else ' and was not final'}; report the step with CompleteTask or "
            "FailTask. Nothing was applied"
        )
    # ---- validate the path, compute the context, touch nothing
    graph = loaded.graph
    expected = token.node_id
    context = context_of(state, token)
    new_context = context
    failure: tuple[str, str, bool] | None = None
    last = len(records) - 1
    applied: list[tuple[str, bool]] = []  # (node, predicate value)
    contexts: list[dict[str, Any]] = []  # the context after each applied step
    for index, step in enumerate(records):
        node_id = step.node_id
        if node_id != expected:
            raise FailedPrecondition(
                f"AdvanceRun step {index} reports node {node_id!r} but token {token_id} is at {expected!r}; "
                "nothing was applied"
            )
        node = loaded.nodes[node_id]
        if node.kind not in _WORKER_KINDS:
            raise FailedPrecondition(
                f"AdvanceRun step {index}: node {node_id!r} is a {node.kind.value}, not a worker step"
            )
        if loaded.queue_of(node) != token.queue:
            raise FailedPrecondition(
                f"AdvanceRun step {index}: node {node_id!r} is on queue {loaded.queue_of(node)!r}, "
                f"not {token.queue!r} (a queue change is a handback)"
            )
        if isinstance(step, StepFailed):
            if index != last:
                raise FailedPrecondition(f"AdvanceRun step {index} is a failure but more steps follow it")
            failure = (node_id, step.message, bool(step.retryable))
            break
        if node.kind is NodeKind.PREDICATE:
            if not isinstance(step, PredicateDone):
                raise FailedPrecondition(
                    f"AdvanceRun step {index}: node {node_id!r} is a PREDICATE; report its branch"
                )
            value = bool(step.value)
        else:
            if isinstance(step, TaskDone):
                if step.changed or step.removed:
                    new_context = _fast.apply_diff(new_context, step.changed, step.removed)
            elif isinstance(step, ContextSet):
                new_context = step.context
            else:
                raise FailedPrecondition(
                    f"AdvanceRun step {index}: node {node_id!r} is a TASK; report its context"
                )
            value = True
        applied.append((node_id, value))
        contexts.append(new_context)
        nxt = graph.successor(node_id, value)
        assert nxt is not None
        expected = nxt
        if index != last and loaded.nodes[expected].kind not in _WORKER_KINDS:
            raise FailedPrecondition(
                f"AdvanceRun step {index + 1}: node {expected!r} is a {loaded.nodes[expected].kind.value}, "
                "a boundary the worker must hand back at"
            )
    oversize = ""
    if new_context is not context:
        try:
            engine.check_context(new_context, "step result")
        except InvalidArgument as exc:
            oversize = str(exc)
    # ---- apply
    worker_steps = len(applied)
    started = token.started_at
    if oversize and applied:
        # The first step that made the context too big fails for good; the prefix stands.
        k = 0
        while k < len(contexts):
            try:
                engine.check_context(contexts[k], "step result")
            except InvalidArgument as exc:
                oversize = str(exc)
                break
            k += 1
        failure = (applied[k][0], oversize, False)
        del applied[k:]
        new_context = contexts[k - 1] if k > 0 else context
        worker_steps = len(applied)
    for done, (node_id, value) in enumerate(applied):
        node = loaded.nodes[node_id]
        record(state, token, node, HistoryOutcome.COMPLETED, now, changes, worker=owner, started=started)
        started = now
        if not count_step(engine, state, token, now, changes):
            return AdvanceOutcome(inst.status, 0, token.id, token.status, done), changes
        move(token, graph.successor(node_id, value) or "")
    if new_context is not context:
        set_context(state, token, new_context, changes)
    inst.updated_at = now
    changes.instance_changed = True
    changes.tokens[token.id] = token
    token.started_at = now
    if failure is not None:
        node = loaded.nodes[failure[0]]
        token.lease_owner = owner
        fail_step(engine, loaded, state, token, node, failure[1], failure[2], now, changes, owner)
        return AdvanceOutcome(inst.status, 0, token.id, token.status, worker_steps), changes
    next_node = loaded.nodes[token.node_id]
    if final or next_node.kind not in _WORKER_KINDS:
        drive(engine, loaded, state, token, now, changes)
        if handback_reason:
            token.local_run_owner = ""
        return AdvanceOutcome(inst.status, 0, token.id, token.status, worker_steps), changes
    token.status = TokenStatus.RUNNING
    token.kind = next_node.kind.value
    token.lease_owner = owner
    token.lease_expires_at = now + engine.config.lease_millis
    token.local_run_owner = owner
    token.local_run_steps += worker_steps
    return (
        AdvanceOutcome(inst.status, token.lease_expires_at, token.id, TokenStatus.RUNNING, worker_steps),
        changes,
    )
