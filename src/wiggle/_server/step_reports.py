"""The workers' side of the instance layer: claims and polls (``Delivery``), step reports
(CompleteTask, FailTask, HeartbeatTask) and local runs' batches (AdvanceRun), each a transition of
the engine under ``Instances.mutate`` (wiggle/_server/instances.py), which this mixes into.

A report that names the worker's queues (``next_queues``) gets its instance's next step leased in
its own commit (``Delivery.chain``); resent after its answer was lost, it gets that step again
(``Delivery.chained_by``; docs/semantics.md#chained-steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._engine.engine import AdvanceOutcome, Claimed, Engine, LoadedDefinition
from .._engine.local_runs import resent_handback
from .._engine.records import StepRecord
from .._engine.state import Changes, InstanceState, split_task_id, token_instance_id
from .._model import ExecutionMode
from ..errors import FailedPrecondition, InvalidArgument
from .clock_duties import token_missing
from .delivery import Delivery
from .failures import attach_traceback, failed_step

if TYPE_CHECKING:
    from .._storage.base import Action

__all__ = ["StepReports"]

R = TypeVar("R")


class StepReports:
    """The worker calls of ``Instances`` (a mixin: ``engine``, ``delivery`` and ``mutate`` are
    the layer's)."""

    engine: Engine
    delivery: Delivery

    if TYPE_CHECKING:

        async def mutate(
            self, instance_id: str, missing: str, action: Action[R], reporter: str = ""
        ) -> tuple[R, InstanceState]: ...

    async def claim(
        self, worker_id: str, queues: list[str], max_tasks: int, *, lease_millis: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``max_tasks`` due READY steps on ``queues`` now (``Delivery.claim``)."""
        return await self.delivery.claim(worker_id, queues, max_tasks, lease_millis=lease_millis)

    async def poll(
        self,
        worker_id: str,
        queues: list[str],
        max_tasks: int,
        wait_seconds: float,
        *,
        lease_millis: int | None = None,
    ) -> list[Claimed]:
        """Claim up to ``max_tasks`` steps, waiting up to ``wait_seconds`` (``Delivery.poll``)."""
        return await self.delivery.poll(worker_id, queues, max_tasks, wait_seconds, lease_millis=lease_millis)

    @property
    def handed_off(self) -> int:
        """Steps leased to a waiting poll by the commit that made them READY (no claim)."""
        return self.delivery.handed_off

    @property
    def chained(self) -> int:
        """Steps leased to the reporting worker in its report's commit (``Delivery.chain``)."""
        return self.delivery.chained

    @property
    def chained_again(self) -> int:
        """Chained steps given again to a report resent after its answer was lost."""
        return self.delivery.chained_again

    async def complete(
        self,
        token_id: str,
        owner: str,
        context: dict[str, Any] | None,
        predicate_value: bool | None,
        *,
        diff: tuple[dict[str, Any], list[str]] | None = None,
    ) -> str:
        """CompleteTask; the instance status.

        ``diff`` (keys set, keys removed) instead of ``context``: applied to the token's context
        as the store holds it under the instance lock, inside the transaction (Engine.complete).
        """
        status, _ = await self.complete_chained(token_id, owner, context, predicate_value, diff=diff)
        return status

    async def complete_chained(
        self,
        token_id: str,
        owner: str,
        context: dict[str, Any] | None,
        predicate_value: bool | None,
        *,
        diff: tuple[dict[str, Any], list[str]] | None = None,
        next_queues: frozenset[str] = frozenset(),
    ) -> tuple[str, Claimed | None]:
        """``complete``, and the next step leased to ``owner`` in the same commit when
        ``next_queues`` (the worker's) names its queue (``Delivery.chain``): (status, that step)."""
        if context is not None and diff is not None:
            raise InvalidArgument("a step result is a context or a diff, not both")
        delivery = self.delivery

        def action(
            loaded: LoadedDefinition, state: InstanceState, now: int
        ) -> tuple[Claimed | None, Changes | None]:
            try:
                changes = self.engine.complete(
                    loaded,
                    state,
                    token_id,
                    owner,
                    now,
                    context=context,
                    predicate_value=predicate_value,
                    diff=diff,
                )
            except FailedPrecondition:
                again = delivery.chained_by(loaded, state, token_id, owner) if next_queues else None
                if again is None:
                    raise
                return again, None  # a resend whose first answer was lost: that answer again
            if not next_queues:
                return None, changes
            return delivery.chain(loaded, state, changes, now, owner, next_queues, token_id), changes

        chained, state = await self.mutate(
            token_instance_id(token_id), token_missing(token_id), action, owner
        )
        return state.instance.status, chained

    async def fail(
        self,
        token_id: str,
        owner: str,
        message: str,
        retryable: bool,
        traceback: str = "",
        release: bool = False,
        no_handler: bool = False,
    ) -> str:
        """FailTask; the instance status. ``traceback`` (bounded) goes on the attempt's history
        entry; with ``release`` the step is given back, no attempt consumed (docs/semantics.md#mixed-fleets).
        ``no_handler``: given back by its worker, which has no handler for the node: that worker's
        claims pass the node over for a while (wiggle/_server/unrunnable.py)."""

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
            if release:
                changes = self.engine.release(loaded, state, token_id, owner, message, now)
                if no_handler:
                    instance = state.instance
                    token = state.tokens[split_task_id(token_id)[0]]
                    self.delivery.unrunnable.note(
                        owner, instance.workflow, instance.version, token.node_id, token.queue
                    )
                return None, changes
            changes = self.engine.fail(loaded, state, token_id, owner, message, retryable, now)
            attach_traceback(changes, None, message, traceback)
            return None, changes

        _, state = await self.mutate(token_instance_id(token_id), token_missing(token_id), action, owner)
        return state.instance.status

    async def heartbeat(
        self, token_id: str, owner: str, *, extend_millis: int | None = None
    ) -> tuple[str, int]:
        """Extend a lease; (instance status, new expiry). ``extend_millis``: the new lease's
        length from now (None: the server's; else clamped, Engine.lease_length)."""
        self.engine.lease_length(extend_millis, "extend_millis")  # refused before the store is touched

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[int, Changes]:
            return self.engine.heartbeat(loaded, state, token_id, owner, now, extend_millis)

        expires, state = await self.mutate(token_instance_id(token_id), token_missing(token_id), action)
        return state.instance.status, expires

    async def advance_run(
        self,
        token_id: str,
        owner: str,
        steps: Sequence[StepRecord],
        final: bool,
        reason: str,
        failure_traceback: str = "",
        *,
        run_offset: int | None = None,
        next_queues: frozenset[str] = frozenset(),
        durations: Sequence[int] = (),
    ) -> AdvanceOutcome:
        """AdvanceRun: apply a local run's steps (see Engine.advance_run).

        ``failure_traceback`` belongs to the batch's failed last step (if any) and goes on its
        history entry. With ``next_queues`` (the worker's; a final batch only) the step the
        handback makes READY next is leased to ``owner`` in the same commit (``Delivery.chain``)
        and returned as the outcome's ``chained``.
        """
        failed = failed_step(steps)
        delivery = self.delivery

        def action(
            loaded: LoadedDefinition, state: InstanceState, now: int
        ) -> tuple[AdvanceOutcome, Changes | None]:
            chains = final and bool(next_queues)
            try:
                outcome, changes = self.engine.advance_run(
                    loaded, state, token_id, owner, steps, final, now, reason, run_offset, durations
                )
            except FailedPrecondition:
                again = delivery.chained_by(loaded, state, token_id, owner) if chains else None
                if again is None:
                    raise
                # a final batch resent after its answer was lost: that answer again, nothing applied
                resent = resent_handback(state, token_id, len(steps), again)
                resent.server_mode = self.engine.resolve_mode(loaded) is ExecutionMode.SERVER
                return resent, None
            outcome.server_mode = self.engine.resolve_mode(loaded) is ExecutionMode.SERVER
            if failed is not None:
                attach_traceback(changes, failed.node_id, failed.message, failure_traceback)
            if chains:
                chained = delivery.chain(loaded, state, changes, now, owner, next_queues, token_id)
                if chained is not None and chained.token.id == outcome.token_id:
                    # the handed-back token itself, leased again with this commit: the reply names
                    # its status after the commit, as the answer to a resent batch does
                    outcome.token_status = chained.token.status
                outcome.chained = chained
            return outcome, changes

        outcome, _ = await self.mutate(token_instance_id(token_id), token_missing(token_id), action, owner)
        return outcome
