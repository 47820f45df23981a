"""AdvanceRun: a local run's steps, validated as a whole batch, then applied (docs/semantics.md#advancerun).

Two halves with one boundary between them: ``plan_run`` reads the batch against the graph and the
token and touches nothing (any refusal is raised there, so a refused batch changes nothing);
``apply_run`` applies the plan it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from .. import _fast
from .._model import ExecutionMode, Handback, NodeKind
from ..errors import FailedPrecondition, InvalidArgument
from .config import LoadedDefinition
from .drive import drive
from .limits import leave as leave_limit
from .records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryOutcome,
    InstanceState,
    InstanceStatus,
    Token,
    TokenStatus,
    split_task_id,
    task_id_of,
)
from .tokens import (
    context_of,
    count_step,
    fail_step,
    lease_until,
    leased_token,
    move,
    record,
    set_context,
    step_lease,
)

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "AdvanceOutcome",
    "PlannedStep",
    "RunPlan",
    "advance_run",
    "plan_run",
    "apply_run",
    "resent_handback",
]

_WORKER_KINDS = (NodeKind.TASK, NodeKind.PREDICATE)


class AdvanceOutcome(msgspec.Struct):
    """The result of AdvanceRun."""

    instance_status: InstanceStatus
    lease_expires_at: int
    token_id: str  # the task id the run goes on under (its claim), or the parked token's id
    token_status: TokenStatus | str  # "" when the instance had already finished
    applied_steps: int
    # A final batch that asked for it: the step its handback made READY next, leased to the same
    # worker in the same commit (the server's Delivery.chain; docs/semantics.md#chained-steps).
    chained: Any = None
    # The instance runs in SERVER mode: the AdvanceRun handed back one step (a worker's drain cut
    # it, or it was claimed as the worker stopped); no local run ended (the server's metrics
    # count it apart: wiggle_step_handbacks_total). Set by the server (step_reports.py).
    server_mode: bool = False


class StepFailure(msgspec.Struct, frozen=True):
    """The failed step a batch ends with: the node, the message, whether it may be retried."""

    node_id: str
    message: str
    retryable: bool


class PlannedStep(NamedTuple):
    """One step a validated batch applies."""

    node_id: str
    value: bool  # a predicate's value; True for a task (the edge the token follows)


class RunPlan(msgspec.Struct):
    """What a validated batch will do, computed without touching the state (plan_run)."""

    token: Token
    nodes: list[PlannedStep]  # the applied steps
    contexts: list[dict[str, Any]]  # the context after each applied step
    failure: StepFailure | None = None  # the batch's failed last step
    other_queue: str = ""  # the batch went on past a queue change: handed back there
    replayed: bool = False  # a resent batch that was applied already: answer, change nothing


def advance_run(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    task_id: str,
    owner: str,
    steps: Sequence[StepRecord],
    final: bool,
    now: int,
    handback_reason: str = "",
    run_offset: int | None = None,
    durations: Sequence[int] = (),
) -> tuple[AdvanceOutcome, Changes]:
    """Apply an ordered run of locally executed steps atomically (docs/semantics.md#advancerun).

    ``steps`` are step records (wiggle._engine.records): TaskDone (a task as its context
    diff), PredicateDone, StepFailed (last only), or ContextSet (a task reported with its
    complete context). The whole run is validated against the graph before anything is
    applied; a mismatch is FAILED_PRECONDITION and changes nothing. ``run_offset``: how many
    steps of this claim the worker reported before this batch (None: not said); a batch resent
    after it was applied is recognised by it and answered again without being applied twice.
    ``durations``: each step's run time in ms as the worker measured it (``step_times``).
    """
    inst = state.instance
    if inst.status in FINISHED_INSTANCE_STATUSES:
        return AdvanceOutcome(inst.status, 0, task_id, "", 0), Changes()
    plan = plan_run(engine, loaded, state, task_id, owner, steps, final, run_offset, now, durations)
    if plan.replayed:
        token = plan.token
        outcome = AdvanceOutcome(
            inst.status, token.lease_expires_at, task_id_of(token), token.status, len(steps)
        )
        return outcome, Changes()
    return apply_run(engine, loaded, state, plan, owner, final, now, handback_reason, durations)


def step_times(durations: Sequence[int], steps: int, claimed_at: int, now: int) -> list[tuple[int, int]]:
    """Each step's (started, ended) epoch ms from the worker's ``durations`` (ms, one per step of
    the batch), the batch ending ``now``: a LOCAL_ASYNC batch's steps ran back to back before its
    flush, so step i ended the durations of the steps after it before ``now``, and began where the
    step before it ended. The first begins at ``claimed_at`` (the claim, or the previous flush),
    as a step's entry always has: a rate limit's claims can be read off the history. An empty list
    when the worker sent none or not one per step (an older worker, another language): the history
    then charges the batch to its first step, as before.

    Before, every step of a LOCAL_ASYNC batch but the first showed 0 ms in the history and in
    ``wiggle_step_duration_seconds`` (an outside operator trial)."""
    if len(durations) != steps or not steps:
        return []
    ends: list[int] = []
    ended = now
    for millis in reversed(durations):
        ends.append(max(ended, claimed_at))
        ended -= max(int(millis), 0)
    ends.reverse()
    return [(claimed_at if i == 0 else ends[i - 1], end) for i, end in enumerate(ends)]


def resent_handback(state: InstanceState, task_id: str, applied: int, chained: Any) -> AdvanceOutcome:
    """The answer to a final batch resent after its answer was lost, when the step its handback
    chained still stands (the server's ``Delivery.chained_by``): ``chained`` again, the token
    as it is now; nothing is applied twice."""
    token_id, _ = split_task_id(task_id)
    token = state.tokens.get(token_id)
    status: TokenStatus | str = token.status if token is not None else ""
    return AdvanceOutcome(state.instance.status, 0, token_id, status, applied, chained=chained)


def plan_run(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    task_id: str,
    owner: str,
    records: Sequence[StepRecord],
    final: bool,
    run_offset: int | None = None,
    now: int = 0,
    durations: Sequence[int] = (),
) -> RunPlan:
    """Validate the batch against the graph and compute its contexts; raise on any mismatch.
    With ``now``, a batch whose first step ended past that step's time limit is refused
    (``_check_deadline``)."""
    token = leased_token(state, task_id, owner)
    _check_mode(engine, loaded, state, task_id, records, final)
    plan = RunPlan(token, [], [], replayed=_check_offset(token, task_id, records, run_offset))
    if plan.replayed:
        return plan
    if now and token.deadline_at and (records or not final):
        _check_deadline(state, task_id, owner, records, now, durations)
    graph = loaded.graph
    expected = token.node_id
    context = context_of(state, token)
    last = len(records) - 1
    for index, step in enumerate(records):
        node_id = step.node_id
        if node_id != expected:
            raise FailedPrecondition(
                f"AdvanceRun step {index} reports node {node_id!r} but task {task_id} is at {expected!r}; "
                "nothing was applied"
            )
        node = loaded.nodes[node_id]
        if node.kind not in _WORKER_KINDS:
            raise FailedPrecondition(
                f"AdvanceRun step {index}: node {node_id!r} is a {node.kind.value}, not a worker step"
            )
        queue = loaded.queue_of(node)
        if queue != token.queue or (index > 0 and (node.limit is not None or node.rate is not None)):
            # A queue change is a handback (docs/semantics.md#chaining-across-queues): the steps
            # before it stand, the token is handed back here, ready on its own queue. So is a step
            # with a concurrency or rate limit past the claimed one: it runs only under a claim of
            # its own (docs/flow-control.md#concurrency-limits), whatever the worker ran.
            plan.other_queue = queue
            return plan
        if isinstance(step, StepFailed):
            if index != last:
                raise FailedPrecondition(f"AdvanceRun step {index} is a failure but more steps follow it")
            plan.failure = StepFailure(node_id, step.message, bool(step.retryable))
            return plan
        value, context = _step_result(node, step, index, context)
        plan.nodes.append(PlannedStep(node_id, value))
        plan.contexts.append(context)
        nxt = graph.successor(node_id, value)
        assert nxt is not None
        expected = nxt
        if index != last and loaded.nodes[expected].kind not in _WORKER_KINDS:
            raise FailedPrecondition(
                f"AdvanceRun step {index + 1}: node {expected!r} is a {loaded.nodes[expected].kind.value}, "
                "a boundary the worker must hand back at"
            )
    return plan


def _check_mode(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    task_id: str,
    records: Sequence[StepRecord],
    final: bool,
) -> None:
    if engine.resolve_mode(loaded) is ExecutionMode.SERVER and (len(records) > 1 or not final):
        # SERVER mode commits every step before the next runs (docs/semantics.md#advancerun): a worker
        # may not chain steps under one claim, whatever it sends.
        raise FailedPrecondition(
            f"workflow {state.instance.workflow!r} runs in execution mode SERVER: one step per claim, "
            f"but AdvanceRun on task {task_id} carried {len(records)} step(s)"
            f"{'' if final else ' and was not final'}; report the step with CompleteTask or "
            "FailTask. Nothing was applied"
        )


def _check_offset(token: Token, task_id: str, records: Sequence[StepRecord], run_offset: int | None) -> bool:
    """True if the batch is one applied already (resent after its answer was lost)."""
    if run_offset is None or run_offset == token.local_run_steps:
        return False
    if run_offset < 0:  # no point of a run: never a resend (the service refuses it first)
        raise InvalidArgument(
            f"AdvanceRun run_offset must be 0 or more, got {run_offset}; nothing was applied"
        )
    if run_offset < token.local_run_steps and run_offset + len(records) == token.local_run_steps:
        return True
    raise FailedPrecondition(
        f"AdvanceRun on task {task_id} starts at step {run_offset} of its run, but the server has "
        f"applied {token.local_run_steps} step(s) of it; nothing was applied"
    )


def _step_result(
    node: Any, step: StepRecord, index: int, context: dict[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """(predicate value, context after the step) of a successful step record."""
    if node.kind is NodeKind.PREDICATE:
        if not isinstance(step, PredicateDone):
            raise FailedPrecondition(
                f"AdvanceRun step {index}: node {node.id!r} is a PREDICATE; report its branch"
            )
        return bool(step.value), context
    if isinstance(step, TaskDone):
        if step.changed or step.removed:
            return True, _fast.apply_diff(context, step.changed, step.removed)
        return True, context
    if isinstance(step, ContextSet):
        return True, step.context
    raise FailedPrecondition(f"AdvanceRun step {index}: node {node.id!r} is a TASK; report its context")


def _oversize_cut(engine: Engine, plan: RunPlan) -> None:
    """Cut the plan at the first step whose context is over the payload limit: that step fails for
    good, the prefix stands (as in SERVER mode). The last context is checked first (one encoding
    in the usual case: nothing is over)."""
    try:
        engine.check_context(plan.contexts[-1], "step result")
        return
    except InvalidArgument:
        pass
    for k, ctx in enumerate(plan.contexts):
        try:
            engine.check_context(ctx, "step result")
        except InvalidArgument as exc:
            plan.failure = StepFailure(plan.nodes[k].node_id, str(exc), False)
            plan.other_queue = ""
            del plan.nodes[k:]
            del plan.contexts[k:]
            return


def apply_run(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    plan: RunPlan,
    owner: str,
    final: bool,
    now: int,
    handback_reason: str = "",
    durations: Sequence[int] = (),
) -> tuple[AdvanceOutcome, Changes]:
    """Apply a batch ``plan_run`` validated: record each step, move the token, then hand back,
    fail the last step, or keep the run going under the same claim."""
    inst = state.instance
    token = plan.token
    changes = Changes()
    claimed_at = token.started_at
    times = step_times(durations, len(plan.nodes) + (plan.failure is not None), claimed_at, now)
    stopped_at = _apply_steps(engine, loaded, state, plan, owner, now, changes, times)
    if stopped_at is not None:  # the instance's step budget ran out
        return AdvanceOutcome(inst.status, 0, token.id, token.status, stopped_at), changes
    applied = len(plan.nodes)
    inst.updated_at = now
    changes.instance_changed = True
    changes.tokens[token.id] = token
    token.started_at = now
    if plan.failure is not None:
        if times:
            token.started_at = times[-1][0]  # the failed step's own start
        node = loaded.nodes[plan.failure.node_id]
        token.lease_owner = owner
        failure = plan.failure
        fail_step(engine, loaded, state, token, node, failure.message, failure.retryable, now, changes, owner)
        return AdvanceOutcome(inst.status, 0, token.id, token.status, applied), changes
    next_node = loaded.nodes[token.node_id]
    if (
        final
        or plan.other_queue
        or next_node.kind not in _WORKER_KINDS
        or loaded.queue_of(next_node) != token.queue
        or next_node.limit is not None
        or next_node.rate is not None
    ):
        # A handback: the worker's, or the server's at a boundary or a queue change; never a token
        # left leased to a worker that will not run it.
        if handback_reason == Handback.CUT.value:
            # the step at the token had started on the worker: say why it runs again
            cut_at = times[applied - 1][1] if times and applied else claimed_at
            message = f"cut by the drain of worker {owner} before it finished; runs again, same attempt"
            record(state, token, next_node, HistoryOutcome.RELEASED, now, changes, message, owner, cut_at)
        drive(engine, loaded, state, token, now, changes)
        if handback_reason or plan.other_queue or not final:
            token.local_run_owner = ""
        return AdvanceOutcome(inst.status, 0, token.id, token.status, applied), changes
    token.status = TokenStatus.RUNNING
    token.kind = next_node.kind.value
    token.lease_owner = owner
    # the run goes on at next_node: that step's own time limits apply from now
    token.deadline_at = now + next_node.timeout_millis if next_node.timeout_millis else 0
    token.lease_expires_at = lease_until(token, now, step_lease(next_node, engine.config.lease_millis))
    token.local_run_owner = owner
    token.local_run_steps += applied
    outcome = AdvanceOutcome(
        inst.status, token.lease_expires_at, task_id_of(token), TokenStatus.RUNNING, applied
    )
    return outcome, changes


def _check_deadline(
    state: InstanceState,
    task_id: str,
    owner: str,
    records: Sequence[StepRecord],
    now: int,
    durations: Sequence[int],
) -> None:
    """Refuse a batch whose first step (the one the token's deadline is for) ended past its
    start-to-close time limit, as a late CompleteTask or FailTask is refused: the attempt timed
    out and the clock duties apply its retry policy (docs/semantics.md#step-time-limits). Before,
    a local run's late report was applied until the timeout sweep came round (an outside audit).

    The first step ended the run times of the batch's later steps before ``now`` when the worker
    sent one per step (``step_times``); a single step, or an empty batch that only renews the
    lease, ends ``now``. A batch of several steps without run times (an older worker, another
    language) cannot say when its first step ended: it is not refused here."""
    if len(durations) == len(records) and records:
        ended = now - sum(max(int(m), 0) for m in durations[1:])
    elif len(records) <= 1:
        ended = now
    else:
        return
    leased_token(state, task_id, owner, max(ended, 1))


def _apply_steps(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    plan: RunPlan,
    owner: str,
    now: int,
    changes: Changes,
    times: list[tuple[int, int]] | None = None,
) -> int | None:
    """Record each planned step and move the token past it, then set the batch's last context.
    Returns how many steps stood if the instance's step budget ran out on the way (None: all did);
    the context is then the one after the step at which it ran out.
    ``times``: each step's (started, ended), from the worker's durations (``step_times``);
    without them the batch's first step is charged from the claim, the others get none."""
    token = plan.token
    context = context_of(state, token)
    if plan.contexts and plan.contexts[-1] is not context:
        _oversize_cut(engine, plan)
    began, ended = token.started_at, 0  # 0: ``now``
    for done, step in enumerate(plan.nodes):
        node = loaded.nodes[step.node_id]
        if times:
            began, ended = times[done]
        record(
            state,
            token,
            node,
            HistoryOutcome.COMPLETED,
            now,
            changes,
            worker=owner,
            started=began,
            ended=ended,
        )
        began = now
        if not count_step(engine, state, token, now, changes):
            # The guard failed the instance at this step. The history records it and the steps
            # before it as COMPLETED, so the context is the one after it, as in SERVER mode
            # (Engine.complete sets a step's context, then counts it).
            if plan.contexts and plan.contexts[done] is not context:
                set_context(state, token, plan.contexts[done], changes)
            return done
        leave_limit(token, changes)
        move(token, loaded.graph.successor(step.node_id, step.value) or "")
    if plan.contexts and plan.contexts[-1] is not context:
        set_context(state, token, plan.contexts[-1], changes)
    return None
