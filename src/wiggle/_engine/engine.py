"""The state machine: pure transitions over (definition, instance, tokens).

No I/O here. A store loads an instance and its active tokens under the instance lock, calls one
transition, and persists the returned ``Changes`` atomically. Every transition validates its
input *before* mutating anything, so a refused request changes nothing. The memory and
PostgreSQL stores share this package and one conformance suite.

``Engine`` is the facade the instance layer calls. It holds the configuration, resolves the
execution mode, and does the worker transitions (start, claim, complete, fail, heartbeat) and
the outside events (cancel, complete_user_task) itself; the drive loop and joins are in
``drive.py``, AdvanceRun in ``local_runs.py``, the time-driven transitions in ``clock.py``, and
the bookkeeping they share in ``tokens.py``.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import msgspec

from .. import _fast
from .._limits import over_payload
from .._model import ExecutionMode, NodeKind
from .._spelling import with_closest
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from . import clock, local_runs, resume, signals, workflow_limits
from . import drive as driving
from .config import EngineConfig, LoadedDefinition
from .limits import leave as leave_limit
from .local_runs import AdvanceOutcome
from .records import StepRecord
from .start_options import NO_OPTIONS, StartOptions
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryOutcome,
    Instance,
    InstanceIds,
    InstanceState,
    InstanceStatus,
    Token,
    TokenStatus,
    new_instance_id,
    task_id_of,
)
from .tokens import (
    context_of,
    count_step,
    end_instance,
    fail_step,
    finish_token,
    lease_until,
    leased_token,
    move,
    new_token,
    record,
    release_step,
    set_context,
    step_lease,
)

__all__ = ["EngineConfig", "Engine", "LoadedDefinition", "AdvanceOutcome", "Claimed", "MIN_LEASE_MILLIS"]

_json = msgspec.json.Encoder()

#: The shortest lease a claim or heartbeat may ask for (docs/semantics.md#leases).
MIN_LEASE_MILLIS = 1_000


class Claimed(msgspec.Struct):
    """A token handed to a worker, with what its activation needs."""

    token: Token
    instance: Instance
    context: dict[str, Any]  # the step's input (for a combine call: base + branches)
    execution_mode: str
    max_local_steps: int
    task_id: str  # ``<token id>@<claim>``: what every report on this claim names (task_id_of)
    lease_millis: int = 0  # the lease's length: the server's, or the step's heartbeat timeout


class Engine:
    """Transitions. One Engine per server; stateless apart from its configuration."""

    def __init__(self, config: EngineConfig | None = None, rng: random.Random | None = None) -> None:
        self.config = config or EngineConfig()
        self.rng = rng or random.Random()
        # ids of the instances it makes (children of sub-workflows, schedule ticks): those of the
        # layer's clock, which the instance layer sets (wiggle/_server/instances.py)
        self.new_instance_id: InstanceIds = new_instance_id

    # ------------------------------------------------------------------ helpers

    def resolve_mode(self, loaded: LoadedDefinition) -> ExecutionMode:
        """The definition's mode, DEFAULT resolved to the server's WIGGLE_EXECUTION_MODE."""
        mode = loaded.definition.execution_mode
        return self.config.execution_mode if mode is ExecutionMode.DEFAULT else mode

    def max_local_steps(self, loaded: LoadedDefinition) -> int:
        """The local-run cap in force: the smaller of the definition's and the server's (0: none)."""
        caps = [c for c in (loaded.definition.max_local_steps, self.config.max_local_steps) if c > 0]
        return min(caps) if caps else 0

    def check_context(self, value: Any, what: str) -> dict[str, Any]:
        """Validate a JSON object within the size limit; InvalidArgument otherwise."""
        if not isinstance(value, dict):
            raise InvalidArgument(f"{what} must be a JSON object, got {type(value).__name__}")
        size = len(_json.encode(value))
        if size > self.config.max_payload_bytes:
            raise InvalidArgument(over_payload(what, size, self.config.max_payload_bytes))
        return value

    def lease_length(self, requested: int | None, what: str = "lease_millis") -> int:
        """The lease a claim or heartbeat gets: the server's (``requested`` None), else ``requested``
        clamped to [MIN_LEASE_MILLIS, max_lease_millis]; InvalidArgument if it is not an integer."""
        if requested is None:
            return self.config.lease_millis
        if isinstance(requested, bool) or not isinstance(requested, int):
            raise InvalidArgument(f"{what} must be an integer number of milliseconds, got {requested!r}")
        return max(MIN_LEASE_MILLIS, min(requested, self.config.max_lease_millis))

    @staticmethod
    def context_of(state: InstanceState, token: Token) -> dict[str, Any]:
        """The context a token carries (the instance context on the main line)."""
        return context_of(state, token)

    # ------------------------------------------------------------------ drive

    def drive(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
    ) -> None:
        """Move ``token`` (and any tokens it spawns) until each is parked (docs/semantics.md#node-kinds)."""
        driving.drive(self, loaded, state, token, now, changes)

    # ------------------------------------------------------------------ start

    def start(
        self,
        loaded: LoadedDefinition,
        instance_id: str,
        context: dict[str, Any],
        correlation_id: str,
        now: int,
        parent: tuple[str, str, int] = ("", "", 0),
        timeout_millis: int | None = None,
        options: StartOptions = NO_OPTIONS,
    ) -> tuple[InstanceState, Changes]:
        """Create an instance at the start node and drive it until parked.

        ``parent`` is a sub-workflow child's (parent instance, parent token, depth).
        ``timeout_millis``: this start's time limit (None: the options', else the definition's;
        0: none).
        ``options`` (checked, start_options.py): its priority; with a ``start_at`` still ahead
        the instance is SCHEDULED, its first token WAITING for that time (``begin``), not
        driven yet.
        """
        self.check_context(context, "context")
        if timeout_millis is None:
            timeout_millis = options.timeout_millis
        limit = loaded.definition.timeout_millis if timeout_millis is None else timeout_millis
        delayed = options.delayed(now)
        instance = Instance(
            id=instance_id,
            workflow=loaded.definition.name,
            version=loaded.version,
            status=InstanceStatus.SCHEDULED if delayed else InstanceStatus.RUNNING,
            context=context,
            correlation_id=correlation_id,
            created_at=now,
            updated_at=now,
            joins={},
            parent_id=parent[0],
            parent_token=parent[1],
            depth=parent[2],
            timeout_millis=max(limit, 0),
            # a delayed start's time limit counts from its start time (docs/flow-control.md)
            deadline_at=(options.start_at if delayed else now) + limit if limit > 0 else 0,
            priority=options.priority,
            start_at=options.start_at if delayed else 0,
            dedup_key=options.dedup_key,
            dedup_window=options.dedup_window,
        )
        state = InstanceState(instance, {})
        changes = Changes()
        changes.created = True
        changes.instance_changed = True
        limited = loaded.definition.concurrency
        if limited is not None:  # docs/flow-control.md#workflow-concurrency
            instance.conc_key = workflow_limits.label(limited, context)
            instance.conc_max = limited.max
            if not delayed:  # it waits for an admission (wiggle/_engine/workflow_limits.py)
                workflow_limits.hold(state, now, changes)
                return state, changes
        changes.timers = instance.deadline_at > 0  # the clock duties' next due time may be sooner
        token = new_token(state, loaded.definition.start_node, now, changes)
        if delayed:  # a timer the clock duties fire (ClockDuties.clock_action -> begin)
            token.status = TokenStatus.WAITING
            token.available_at = options.start_at
            changes.timers = True
            return state, changes
        self.drive(loaded, state, token, now, changes)
        return state, changes

    def begin(self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
        """A SCHEDULED instance's start time came (never early): RUNNING, its first token driven."""
        changes = Changes()
        inst = state.instance
        if inst.status != InstanceStatus.SCHEDULED or token.status != TokenStatus.WAITING:
            return changes
        if token.available_at > now:
            return changes
        if inst.conc_key:  # a limited workflow's start: it waits for an admission (workflow_limits.py)
            finish_token(state, token, TokenStatus.DONE, now, changes)
            workflow_limits.hold(state, now, changes)
            return changes
        inst.status = InstanceStatus.RUNNING
        inst.updated_at = now
        changes.instance_changed = True
        token.status = TokenStatus.READY
        token.available_at = 0
        changes.tokens[token.id] = token
        self.drive(loaded, state, token, now, changes)
        return changes

    # ------------------------------------------------------------------ claim & reports

    def claim(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token: Token,
        owner: str,
        now: int,
        changes: Changes,
        lease_millis: int | None = None,
    ) -> Claimed:
        """Lease a READY token to ``owner``; the caller has checked it is due and on a served queue.

        The lease lasts ``lease_length(lease_millis)``: the server's, unless the claim asks for
        another length (clamped).
        """
        node = loaded.nodes[token.node_id]
        lease = step_lease(node, self.lease_length(lease_millis))
        token.status = TokenStatus.RUNNING
        token.lease_owner = owner
        token.deadline_at = now + node.timeout_millis if node.timeout_millis else 0
        token.lease_expires_at = lease_until(token, now, lease)
        token.started_at = now
        token.claim += 1  # a new fence: reports of earlier claims are refused (tokens.leased_token)
        token.queue_held = False  # the store's claim marks it when its queue has a max_running
        mode = self.resolve_mode(loaded)
        # In a LOCAL_* mode the holder may run ahead before it reports: say so on the token.
        token.local_run_owner = (
            owner if mode is not ExecutionMode.SERVER and token.kind != NodeKind.JOIN else ""
        )
        token.local_run_steps = 0
        token.chained_from = ""  # Delivery.chain marks the claims it makes
        changes.tokens[token.id] = token
        return self._claimed(loaded, state, token, mode, lease)

    def held_claim(self, loaded: LoadedDefinition, state: InstanceState, token: Token) -> Claimed:
        """What ``claim`` returned for ``token``, a claim that stands (a chained step whose first
        answer was lost, given again: wiggle/_server/delivery.py ``chained_by``); no change."""
        lease = step_lease(loaded.nodes[token.node_id], self.lease_length(None))
        return self._claimed(loaded, state, token, self.resolve_mode(loaded), lease)

    def _claimed(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, mode: ExecutionMode, lease: int
    ) -> Claimed:
        return Claimed(
            token=token,
            instance=state.instance,
            context=self.context_of(state, token),
            execution_mode=mode.value,
            max_local_steps=self.max_local_steps(loaded),
            task_id=task_id_of(token),
            lease_millis=lease,
        )

    def complete(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
        owner: str,
        now: int,
        context: dict[str, Any] | None = None,
        predicate_value: bool | None = None,
        diff: tuple[dict[str, Any], list[str]] | None = None,
    ) -> Changes:
        """CompleteTask: apply a worker step's result and drive on.

        The result is ``context`` (the whole new context), or ``diff``: (keys set, keys removed)
        against the token's context as it is now, under the instance lock (the upstream protocol's
        completions; docs/semantics.md#diff-completions). Either way it is checked like a context.
        """
        if diff is not None:
            if context is not None:
                raise InvalidArgument("a step result is a context or a diff, not both")
            changed, removed = _check_diff(diff)
        token = leased_token(state, token_id, owner, now)
        node = loaded.nodes[token.node_id]
        if diff is not None:
            if node.kind is NodeKind.JOIN:
                raise InvalidArgument(
                    f"node {node.id!r} is a combine step: report its whole context, not a diff"
                )
            context = _fast.apply_diff(self.context_of(state, token), changed, removed)
        changes = Changes()
        if node.kind is NodeKind.PREDICATE:
            if predicate_value is None:
                # A predicate reported as a task: a malformed report, refused like the converse
                # (nothing changes; the step stays leased to its worker, which may report it
                # again). A predicate that returned no bool is the worker's to report with
                # FailTask (wiggle/_worker/outcomes.py).
                sent = (
                    "a diff" if diff is not None else "context_json" if context is not None else "no result"
                )
                raise InvalidArgument(
                    f"node {node.id!r} is a PREDICATE, not a TASK: send predicate_value (true or "
                    f"false); the report carried {sent}"
                )
        elif predicate_value is not None:
            raise InvalidArgument(
                f"node {node.id!r} is a {node.kind.value}, not a PREDICATE: send context_json"
            )
        if context is not None:
            try:
                self.check_context(context, "step result")
            except InvalidArgument as exc:
                return fail_step(self, loaded, state, token, node, str(exc), False, now, changes)
        record(
            state, token, node, HistoryOutcome.COMPLETED, now, changes, worker=owner, started=token.started_at
        )
        if node.kind is NodeKind.JOIN:  # a combine call
            token.context = None
            set_context(state, token, context if context is not None else {}, changes)
            next_id = node.next
        else:
            if context is not None:
                set_context(state, token, context, changes)
            next_id = loaded.graph.successor(
                node.id, bool(predicate_value) if predicate_value is not None else True
            )
        assert next_id is not None
        if not count_step(self, state, token, now, changes):
            return changes
        leave_limit(token, changes)
        move(token, next_id)
        state.instance.updated_at = now
        changes.instance_changed = True
        self.drive(loaded, state, token, now, changes)
        return changes

    def fail(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
        owner: str,
        message: str,
        retryable: bool,
        now: int,
    ) -> Changes:
        """FailTask: retry with backoff while the policy allows, else fail the instance."""
        token = leased_token(state, token_id, owner, now)
        node = loaded.nodes[token.node_id]
        return fail_step(self, loaded, state, token, node, message, retryable, now, Changes(), owner)

    def release(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
        owner: str,
        message: str,
        now: int,
    ) -> Changes:
        """FailTask with ``release``: the worker cannot run the step; READY again, same attempt."""
        token = leased_token(state, token_id, owner, now)
        return release_step(self, loaded, state, token, message, now)

    def heartbeat(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
        owner: str,
        now: int,
        extend_millis: int | None = None,
    ) -> tuple[int, Changes]:
        """Extend the lease to ``now + lease_length(extend_millis)`` (the step's heartbeat timeout
        if shorter; never past the attempt's deadline); returns the new expiry."""
        token = leased_token(state, token_id, owner, now)
        lease = step_lease(loaded.nodes[token.node_id], self.lease_length(extend_millis, "extend_millis"))
        token.lease_expires_at = lease_until(token, now, lease)
        changes = Changes()
        changes.tokens[token.id] = token
        return token.lease_expires_at, changes

    # ------------------------------------------------------------------ AdvanceRun

    def advance_run(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
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
        applied; a mismatch is FAILED_PRECONDITION and changes nothing.
        """
        return local_runs.advance_run(
            self, loaded, state, token_id, owner, steps, final, now, handback_reason, run_offset, durations
        )

    # ------------------------------------------------------------------ clock duties

    def expire_lease(self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
        """A lease ran out: a retryable failure "lease expired (worker unreachable)"."""
        return clock.expire_lease(self, loaded, state, token, now)

    def start_deadline(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
    ) -> Changes:
        """A step nobody claimed within its schedule-to-start limit fails for good."""
        return clock.start_deadline(loaded, state, token, now)

    def workflow_deadline(self, loaded: LoadedDefinition, state: InstanceState, now: int) -> Changes:
        """The instance's time limit passed: it fails with reason "workflow timed out"."""
        return clock.workflow_deadline(loaded, state, now)

    def fire_timer(self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
        """A SLEEP is over (never early): move on."""
        return clock.fire_timer(self, loaded, state, token, now)

    def user_task_deadline(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
    ) -> Changes:
        """A user task's deadline passed: continue at its on-timeout node, or fail the instance."""
        return clock.user_task_deadline(self, loaded, state, token, now)

    # ------------------------------------------------------------------ outside events

    def cancel(self, state: InstanceState, reason: str, now: int) -> tuple[bool, Changes]:
        """Cancel a RUNNING instance (every active token CANCELLED); a finished one is left alone."""
        changes = Changes()
        if state.instance.status in FINISHED_INSTANCE_STATUSES:
            return False, changes
        end_instance(state, InstanceStatus.CANCELLED, now, changes, reason=reason or "cancelled")
        return True, changes

    def signal(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        name: str,
        data: dict[str, Any],
        signal_id: str,
        sender: str,
        now: int,
    ) -> tuple[str, Changes | None]:
        """Deliver or buffer a named signal (docs/semantics.md#signal); (outcome, changes)."""
        return signals.signal(self, loaded, state, name, data, signal_id, sender, now)

    def retry(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        from_node: str,
        context: dict[str, Any] | None,
        requested_by: str,
        now: int,
        *,
        admitted: bool = False,
    ) -> Changes:
        """Resume a FAILED instance (docs/semantics.md#resuming-a-failed-instance).

        An instance with a time limit gets it afresh, counted from the retry: a timed-out instance
        retried would otherwise fail again at once (docs/semantics.md#workflow-time-limits). An
        instance of a limited workflow (workflow_limits.py) is checked, then waits for a slot like
        a start under "queue"; its admission carries the retry out (``admitted``).
        """
        inst = state.instance
        if inst.conc_key and not admitted:
            trial = InstanceState(copy.deepcopy(inst), copy.deepcopy(state.tokens))
            resume.retry(self, loaded, trial, from_node, context, requested_by, now)  # refusals only
            changes = Changes()
            request = workflow_limits.RetryRequest(from_node, context, requested_by)
            workflow_limits.hold(state, now, changes, request)
            return changes
        changes = resume.retry(self, loaded, state, from_node, context, requested_by, now)
        if inst.timeout_millis > 0 and inst.status == InstanceStatus.RUNNING:
            inst.deadline_at = now + inst.timeout_millis
            changes.timers = True
        return changes

    def complete_user_task(
        self, loaded: LoadedDefinition, state: InstanceState, name: str, payload: dict[str, Any], now: int
    ) -> Changes:
        """Merge ``payload`` into the awaiting token's context and move on."""
        inst = state.instance
        if inst.status in FINISHED_INSTANCE_STATUSES:
            raise FailedPrecondition(f"instance {inst.id} is {inst.status}; it awaits no user task")
        if name not in loaded.nodes or loaded.nodes[name].kind is not NodeKind.USER_TASK:
            tasks = sorted(n.id for n in loaded.nodes.values() if n.kind is NodeKind.USER_TASK)
            listed = f"its user tasks: {', '.join(map(repr, tasks))}" if tasks else "it has no user task"
            raise NotFound(
                f"workflow {inst.workflow!r} has no user task {with_closest([name], tasks)}; {listed}"
            )
        self.check_context(payload, "payload")
        waiting = [t for t in state.tokens.values() if t.status == TokenStatus.AWAITING and t.node_id == name]
        if not waiting:
            awaited = sorted(t.node_id for t in state.tokens.values() if t.status == TokenStatus.AWAITING)
            raise FailedPrecondition(
                f"instance {inst.id} is not waiting on user task {name!r}"
                + (
                    f" (it waits on {', '.join(map(repr, awaited))})"
                    if awaited
                    else " (it waits on no user task)"
                )
            )
        token = min(waiting, key=lambda t: t.created_at)
        node = loaded.nodes[name]
        changes = Changes()
        merged = {**self.context_of(state, token), **payload}
        self.check_context(merged, "context after the payload")
        set_context(state, token, merged, changes)
        record(
            state,
            token,
            node,
            HistoryOutcome.COMPLETED,
            now,
            changes,
            worker="(user task)",
            started=token.started_at,
        )
        assert node.next is not None
        move(token, node.next)
        inst.updated_at = now
        changes.instance_changed = True
        self.drive(loaded, state, token, now, changes)
        return changes


def _check_diff(diff: object) -> tuple[dict[str, Any], list[str]]:
    """``diff`` as (keys set, keys removed); InvalidArgument naming what is wrong with it."""
    if not isinstance(diff, tuple) or len(diff) != 2:
        raise InvalidArgument("a step result's diff must be a pair (keys set, keys removed)")
    changed, removed = diff
    if not isinstance(changed, dict) or not all(isinstance(k, str) for k in changed):
        raise InvalidArgument(
            f"a step result's diff must set a JSON object's keys, got {type(changed).__name__}"
        )
    if not isinstance(removed, (list, tuple)) or not all(isinstance(k, str) for k in removed):
        raise InvalidArgument("a step result's diff must remove a list of keys (strings)")
    return changed, list(removed)
