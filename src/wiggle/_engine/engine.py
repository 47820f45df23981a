"""The state machine: pure transitions over (definition, instance, tokens).

No I/O here. A store loads an instance and its active tokens under the instance lock, calls one
transition, and persists the returned ``Changes`` atomically. Every transition validates its
input *before* mutating anything, so a refused request changes nothing. The memory and
PostgreSQL stores share this module and one conformance suite.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgspec

from .. import _fast
from .._model import ExecutionMode, Node, NodeKind, WorkflowDefinition
from ..errors import AlreadyFinished, FailedPrecondition, InvalidArgument, NotFound
from .records import ContextSet, PredicateDone, StepFailed, StepRecord, TaskDone
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryEntry,
    HistoryOutcome,
    Instance,
    InstanceState,
    InstanceStatus,
    JoinState,
    Token,
    TokenStatus,
)

__all__ = ["EngineConfig", "Engine", "LoadedDefinition", "AdvanceOutcome", "Claimed"]

_json = msgspec.json.Encoder()
_WORKER_KINDS = (NodeKind.TASK, NodeKind.PREDICATE)


class EngineConfig(msgspec.Struct):
    """Server-wide rules the engine applies (all from WIGGLE_* settings)."""

    lease_millis: int = 30_000
    execution_mode: ExecutionMode = ExecutionMode.SERVER  # what DEFAULT resolves to
    max_local_steps: int = 1000  # server cap on one local run (0: none); a definition may lower it
    max_payload_bytes: int = 1 << 20  # context, step result, user-task payload
    max_instance_steps: int = 100_000  # runaway guard: worker steps one instance may take
    max_drive_moves: int = 10_000  # runaway guard: server-side moves in one drive


class LoadedDefinition:
    """A registered definition with its compiled graph, cached by the store."""

    __slots__ = ("definition", "version", "graph", "nodes", "json")

    def __init__(self, definition: WorkflowDefinition, version: str | None = None) -> None:
        self.definition = definition
        self.version = version or definition.content_version()
        self.graph = _fast.CompiledGraph(definition)
        self.nodes: dict[str, Node] = definition.node_map()
        self.json = definition.to_json()

    def queue_of(self, node: Node) -> str:
        """The queue a worker node (or a join's combine call) runs on."""
        return node.queue or self.definition.name


class Claimed(msgspec.Struct):
    """A token handed to a worker, with what its activation needs."""

    token: Token
    instance: Instance
    context: dict[str, Any]  # the step's input (for a combine call: base + branches)
    execution_mode: str
    max_local_steps: int


class AdvanceOutcome(msgspec.Struct):
    """The result of AdvanceRun."""

    instance_status: InstanceStatus
    lease_expires_at: int
    token_id: str
    token_status: TokenStatus | str  # "" when the instance had already finished
    applied_steps: int


class Engine:
    """Transitions. One Engine per server; stateless apart from its configuration."""

    def __init__(self, config: EngineConfig | None = None, rng: random.Random | None = None) -> None:
        self.config = config or EngineConfig()
        self.rng = rng or random.Random()

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
            raise InvalidArgument(
                f"{what} is {size} bytes; the limit is {self.config.max_payload_bytes} bytes"
            )
        return value

    @staticmethod
    def context_of(state: InstanceState, token: Token) -> dict[str, Any]:
        """The context a token carries (the instance context on the main line)."""
        return token.context if token.context is not None else state.instance.context

    @staticmethod
    def _set_context(state: InstanceState, token: Token, context: dict[str, Any], changes: Changes) -> None:
        if token.fork_stack:
            token.context = context
        else:
            token.context = None
            state.instance.context = context
            changes.instance_changed = True

    def _new_token(self, state: InstanceState, node_id: str, now: int, changes: Changes) -> Token:
        inst = state.instance
        inst.token_seq += 1
        changes.instance_changed = True
        token = Token(
            id=f"{inst.id}.{inst.token_seq}",
            instance_id=inst.id,
            node_id=node_id,
            status=TokenStatus.READY,
            created_at=now,
        )
        state.tokens[token.id] = token
        changes.tokens[token.id] = token
        return token

    def _finish_token(
        self, state: InstanceState, token: Token, status: TokenStatus, now: int, changes: Changes
    ) -> None:
        token.status = status
        token.finished_at = now
        token.lease_owner = ""
        token.lease_expires_at = 0
        token.local_run_owner = ""
        state.tokens.pop(token.id, None)
        changes.tokens[token.id] = token

    def _record(
        self,
        state: InstanceState,
        token: Token,
        node: Node,
        outcome: HistoryOutcome,
        now: int,
        changes: Changes,
        error: str = "",
        worker: str = "",
        started: int = 0,
    ) -> None:
        changes.history.append(
            HistoryEntry(
                instance_id=state.instance.id,
                token_id=token.id,
                node_id=node.id,
                kind=node.kind.value,
                attempt=token.attempt,
                worker_id=worker,
                started_at=started or now,
                ended_at=now,
                outcome=outcome,
                error=error,
            )
        )

    def _end_instance(
        self,
        state: InstanceState,
        status: InstanceStatus,
        now: int,
        changes: Changes,
        reason: str = "",
        error: str = "",
    ) -> None:
        inst = state.instance
        inst.status = status
        inst.reason = reason
        inst.error = error
        inst.finished_at = now
        inst.updated_at = now
        inst.joins = {}
        changes.instance_changed = True
        changes.finished = True
        for other in list(state.tokens.values()):
            self._finish_token(state, other, TokenStatus.CANCELLED, now, changes)

    def _fail_instance(self, state: InstanceState, error: str, now: int, changes: Changes) -> None:
        self._end_instance(state, InstanceStatus.FAILED, now, changes, error=error)

    # ------------------------------------------------------------------ drive

    def drive(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int, changes: Changes
    ) -> None:
        """Move ``token`` (and any tokens it spawns) until each is parked (docs/semantics.md: node rules)."""
        pending = [token]
        moves = 0
        while pending:
            tok = pending.pop()
            while True:
                if state.instance.status != InstanceStatus.RUNNING:
                    return
                moves += 1
                if moves > self.config.max_drive_moves:
                    self._fail_instance(
                        state,
                        f"runaway: drive moved more than {self.config.max_drive_moves} times without parking "
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
                    tok.available_at = now + node.sleep_millis
                    tok.lease_owner = ""
                    tok.lease_expires_at = 0
                    changes.timers = True
                    break
                if kind is NodeKind.USER_TASK:
                    tok.status = TokenStatus.AWAITING
                    tok.kind = kind.value
                    tok.queue = ""
                    tok.available_at = now + node.timeout_millis if node.timeout_millis > 0 else 0
                    tok.lease_owner = ""
                    tok.lease_expires_at = 0
                    changes.timers = True
                    break
                if kind is NodeKind.END:
                    self._record(state, tok, node, HistoryOutcome.END, now, changes)
                    self._finish_token(state, tok, TokenStatus.DONE, now, changes)
                    if not state.tokens:
                        if node.success:
                            self._end_instance(
                                state, InstanceStatus.COMPLETED, now, changes, reason=node.reason or ""
                            )
                        else:
                            self._end_instance(
                                state,
                                InstanceStatus.FAILED,
                                now,
                                changes,
                                reason=node.reason or "",
                                error=node.reason or node.id,
                            )
                    break
                if kind is NodeKind.FORK:
                    self._record(state, tok, node, HistoryOutcome.FORKED, now, changes)
                    base = self.context_of(state, tok)
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
                        child = self._new_token(state, first, now, changes)
                        child.context = dict(base)
                        child.fork_stack = [*tok.fork_stack, (group, index)]
                        pending.append(child)
                    self._finish_token(state, tok, TokenStatus.DONE, now, changes)
                    break
                if kind is NodeKind.JOIN:
                    if not self._arrive_at_join(loaded, state, tok, node, now, changes, pending):
                        break
                    # the continuation token (tok, reused) moves on
                    continue
                raise AssertionError(f"unknown node kind {kind}")  # pragma: no cover

    def _arrive_at_join(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        tok: Token,
        node: Node,
        now: int,
        changes: Changes,
        pending: list[Token],
    ) -> bool:
        """Park ``tok`` at the join; when the last branch arrives, fold. True if ``tok`` moves on."""
        if not tok.fork_stack:
            self._fail_instance(state, f"join {node.id!r} reached outside its fork", now, changes)
            return False
        group, index = tok.fork_stack[-1]
        join = state.instance.joins.get(group)
        if join is None or join.fork_node != node.fork:
            self._fail_instance(state, f"join {node.id!r} reached by a branch of another fork", now, changes)
            return False
        join.arrived[str(index)] = self.context_of(state, tok)
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
                self._finish_token(state, state.tokens[other_id], TokenStatus.DONE, now, changes)
        try:
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
            self._fail_instance(
                state,
                f"join {node.id!r}: branches {a!r} and {b!r} both changed {conflict.key!r}; declare a combine step",
                now,
                changes,
            )
            return False
        del state.instance.joins[group]
        self._record(state, tok, node, HistoryOutcome.JOINED, now, changes)
        tok.fork_stack = parent_stack
        self._set_context(state, tok, folded, changes)
        assert node.next is not None
        tok.node_id = node.next
        tok.attempt = 1
        tok.last_error = ""
        return True

    # ------------------------------------------------------------------ start

    def start(
        self,
        loaded: LoadedDefinition,
        instance_id: str,
        context: dict[str, Any],
        correlation_id: str,
        now: int,
    ) -> tuple[InstanceState, Changes]:
        """Create an instance at the start node and drive it until parked."""
        self.check_context(context, "context")
        instance = Instance(
            id=instance_id,
            workflow=loaded.definition.name,
            version=loaded.version,
            status=InstanceStatus.RUNNING,
            context=context,
            correlation_id=correlation_id,
            created_at=now,
            updated_at=now,
            joins={},
        )
        state = InstanceState(instance, {})
        changes = Changes()
        changes.created = True
        changes.instance_changed = True
        token = self._new_token(state, loaded.definition.start_node, now, changes)
        self.drive(loaded, state, token, now, changes)
        return state, changes

    # ------------------------------------------------------------------ claim & reports

    def claim(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token: Token,
        owner: str,
        now: int,
        changes: Changes,
    ) -> Claimed:
        """Lease a READY token to ``owner``; the caller has checked it is due and on a served queue."""
        token.status = TokenStatus.RUNNING
        token.lease_owner = owner
        token.lease_expires_at = now + self.config.lease_millis
        token.started_at = now
        mode = self.resolve_mode(loaded)
        # In a LOCAL_* mode the holder may run ahead before it reports: say so on the token.
        token.local_run_owner = (
            owner if mode is not ExecutionMode.SERVER and token.kind != NodeKind.JOIN else ""
        )
        token.local_run_steps = 0
        changes.tokens[token.id] = token
        return Claimed(
            token=token,
            instance=state.instance,
            context=self.context_of(state, token),
            execution_mode=mode.value,
            max_local_steps=self.max_local_steps(loaded),
        )

    def _leased_token(self, state: InstanceState, token_id: str, owner: str) -> Token:
        inst = state.instance
        if inst.status in FINISHED_INSTANCE_STATUSES:
            raise AlreadyFinished(
                f"instance {inst.id} is {inst.status}; the report on token {token_id} was refused",
                inst.status,
            )
        token = state.tokens.get(token_id)
        if token is None:
            raise FailedPrecondition(f"token {token_id} is not active (it already finished or moved on)")
        if token.status != TokenStatus.RUNNING:
            raise FailedPrecondition(f"token {token_id} is {token.status}, not RUNNING (its lease was lost)")
        if token.lease_owner != owner:
            raise FailedPrecondition(
                f"token {token_id} is leased to {token.lease_owner!r}, not {owner!r}; the report was refused"
            )
        return token

    def complete(
        self,
        loaded: LoadedDefinition,
        state: InstanceState,
        token_id: str,
        owner: str,
        now: int,
        context: dict[str, Any] | None = None,
        predicate_value: bool | None = None,
    ) -> Changes:
        """CompleteTask: apply a worker step's result and drive on."""
        token = self._leased_token(state, token_id, owner)
        node = loaded.nodes[token.node_id]
        changes = Changes()
        if node.kind is NodeKind.PREDICATE:
            if predicate_value is None:
                # A predicate reported as a task: non-retryable failure naming the type.
                return self._fail_step(
                    loaded,
                    state,
                    token,
                    node,
                    "predicate returned a context, not a bool",
                    False,
                    now,
                    changes,
                )
        elif predicate_value is not None:
            raise InvalidArgument(
                f"node {node.id!r} is a {node.kind.value}, not a PREDICATE: send context_json"
            )
        if context is not None:
            try:
                self.check_context(context, "step result")
            except InvalidArgument as exc:
                return self._fail_step(loaded, state, token, node, str(exc), False, now, changes)
        self._record(
            state, token, node, HistoryOutcome.COMPLETED, now, changes, worker=owner, started=token.started_at
        )
        if node.kind is NodeKind.JOIN:  # a combine call
            token.context = None
            self._set_context(state, token, context if context is not None else {}, changes)
            next_id = node.next
        else:
            if context is not None:
                self._set_context(state, token, context, changes)
            next_id = loaded.graph.successor(
                node.id, bool(predicate_value) if predicate_value is not None else True
            )
        assert next_id is not None
        if not self._count_step(state, token, now, changes):
            return changes
        self._move(token, next_id)
        state.instance.updated_at = now
        changes.instance_changed = True
        self.drive(loaded, state, token, now, changes)
        return changes

    def _count_step(self, state: InstanceState, token: Token, now: int, changes: Changes) -> bool:
        state.instance.steps += 1
        if state.instance.steps > self.config.max_instance_steps:
            self._fail_instance(
                state,
                f"runaway: more than {self.config.max_instance_steps} steps (last at node {token.node_id!r}); "
                "a loop that never exits?",
                now,
                changes,
            )
            return False
        return True

    @staticmethod
    def _move(token: Token, next_id: str) -> None:
        token.node_id = next_id
        token.attempt = 1
        token.last_error = ""
        token.lease_owner = ""
        token.lease_expires_at = 0

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
        token = self._leased_token(state, token_id, owner)
        node = loaded.nodes[token.node_id]
        return self._fail_step(loaded, state, token, node, message, retryable, now, Changes(), owner)

    def _fail_step(
        self,
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
        message = message[:4000]
        policy = loaded.definition.retry_for(node)
        state.instance.updated_at = now
        changes.instance_changed = True
        worker = worker or token.lease_owner
        if retryable and policy.allows_another(token.attempt):
            self._record(
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
            delay = policy.backoff_millis(token.attempt, self.rng)
            token.attempt += 1
            token.status = TokenStatus.READY
            token.available_at = now + delay
            token.last_error = message
            token.lease_owner = ""
            token.lease_expires_at = 0
            token.local_run_owner = ""
            token.local_run_steps = 0
            token.queue = loaded.queue_of(node)
            changes.tokens[token.id] = token
            changes.ready_queues.add(token.queue)
            if delay > 0:
                changes.timers = True
            return changes
        self._record(
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
        self._finish_token(state, token, TokenStatus.FAILED, now, changes)
        self._fail_instance(state, f"{node.id}: {message}", now, changes)
        return changes

    def heartbeat(self, state: InstanceState, token_id: str, owner: str, now: int) -> tuple[int, Changes]:
        """Extend the lease; returns the new expiry."""
        token = self._leased_token(state, token_id, owner)
        token.lease_expires_at = now + self.config.lease_millis
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
    ) -> tuple[AdvanceOutcome, Changes]:
        """Apply an ordered run of locally executed steps atomically (docs/semantics.md, local runs).

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
        token = self._leased_token(state, token_id, owner)
        if self.resolve_mode(loaded) is ExecutionMode.SERVER and (len(records) > 1 or not final):
            # SERVER mode commits every step before the next runs (docs/semantics.md): a worker
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
        context = self.context_of(state, token)
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
                self.check_context(new_context, "step result")
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
                    self.check_context(contexts[k], "step result")
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
            self._record(
                state, token, node, HistoryOutcome.COMPLETED, now, changes, worker=owner, started=started
            )
            started = now
            if not self._count_step(state, token, now, changes):
                return AdvanceOutcome(inst.status, 0, token.id, token.status, done), changes
            self._move(token, graph.successor(node_id, value) or "")
        if new_context is not context:
            self._set_context(state, token, new_context, changes)
        inst.updated_at = now
        changes.instance_changed = True
        changes.tokens[token.id] = token
        token.started_at = now
        if failure is not None:
            node = loaded.nodes[failure[0]]
            token.lease_owner = owner
            self._fail_step(loaded, state, token, node, failure[1], failure[2], now, changes, owner)
            return AdvanceOutcome(inst.status, 0, token.id, token.status, worker_steps), changes
        next_node = loaded.nodes[token.node_id]
        if final or next_node.kind not in _WORKER_KINDS:
            self.drive(loaded, state, token, now, changes)
            if handback_reason:
                token.local_run_owner = ""
            return AdvanceOutcome(inst.status, 0, token.id, token.status, worker_steps), changes
        token.status = TokenStatus.RUNNING
        token.kind = next_node.kind.value
        token.lease_owner = owner
        token.lease_expires_at = now + self.config.lease_millis
        token.local_run_owner = owner
        token.local_run_steps += worker_steps
        return (
            AdvanceOutcome(inst.status, token.lease_expires_at, token.id, TokenStatus.RUNNING, worker_steps),
            changes,
        )

    # ------------------------------------------------------------------ clock duties

    def expire_lease(self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
        """A lease ran out: a retryable failure "lease expired (worker unreachable)"."""
        if token.status != TokenStatus.RUNNING or token.lease_expires_at > now:
            return Changes()
        node = loaded.nodes[token.node_id]
        return self._fail_step(
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

    def fire_timer(self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int) -> Changes:
        """A SLEEP is over (never early): move on."""
        changes = Changes()
        node = loaded.nodes[token.node_id]
        if token.status != TokenStatus.WAITING or token.available_at > now:
            return changes
        self._record(state, token, node, HistoryOutcome.SLEPT, now, changes, started=token.created_at)
        assert node.next is not None
        self._move(token, node.next)
        state.instance.updated_at = now
        changes.instance_changed = True
        self.drive(loaded, state, token, now, changes)
        return changes

    def user_task_deadline(
        self, loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
    ) -> Changes:
        """A user task's deadline passed: continue at its on-timeout node, or fail the instance."""
        changes = Changes()
        node = loaded.nodes[token.node_id]
        if token.status != TokenStatus.AWAITING or token.available_at <= 0 or token.available_at > now:
            return changes
        state.instance.updated_at = now
        changes.instance_changed = True
        if node.alt_next is None:
            self._record(state, token, node, HistoryOutcome.TIMED_OUT, now, changes, error="timed out")
            self._finish_token(state, token, TokenStatus.FAILED, now, changes)
            self._fail_instance(state, f"user task {node.id!r} timed out", now, changes)
            return changes
        self._record(state, token, node, HistoryOutcome.TIMED_OUT, now, changes)
        self._move(token, node.alt_next)
        self.drive(loaded, state, token, now, changes)
        return changes

    # ------------------------------------------------------------------ outside events

    def cancel(self, state: InstanceState, reason: str, now: int) -> tuple[bool, Changes]:
        """Cancel a RUNNING instance (every active token CANCELLED); a finished one is left alone."""
        changes = Changes()
        if state.instance.status in FINISHED_INSTANCE_STATUSES:
            return False, changes
        self._end_instance(state, InstanceStatus.CANCELLED, now, changes, reason=reason or "cancelled")
        return True, changes

    def complete_user_task(
        self, loaded: LoadedDefinition, state: InstanceState, name: str, payload: dict[str, Any], now: int
    ) -> Changes:
        """Merge ``payload`` into the awaiting token's context and move on."""
        inst = state.instance
        if inst.status in FINISHED_INSTANCE_STATUSES:
            raise FailedPrecondition(f"instance {inst.id} is {inst.status}; it awaits no user task")
        if name not in loaded.nodes or loaded.nodes[name].kind is not NodeKind.USER_TASK:
            raise NotFound(f"workflow {inst.workflow!r} has no user task {name!r}")
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
        self._set_context(state, token, merged, changes)
        self._record(
            state,
            token,
            node,
            HistoryOutcome.COMPLETED,
            now,
            changes,
            worker="(user task)",
            started=token.created_at,
        )
        assert node.next is not None
        self._move(token, node.next)
        inst.updated_at = now
        changes.instance_changed = True
        self.drive(loaded, state, token, now, changes)
        return changes
