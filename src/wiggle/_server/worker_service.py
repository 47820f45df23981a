"""The service's worker RPC handlers: poll for steps, report them, heartbeat, advance a local run.

A mixin of ``ControlPlane`` (wiggle/_server/service.py), which routes the RPCs here; requests are
validated at this edge before the instance layer (wiggle/_server/instances.py) sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _fast
from .._engine.engine import Claimed
from .._engine.records import StepRecord
from .._engine.state import TokenStatus
from .._fast import MAX_BATCH_STEPS
from .._model import Handback
from .._rpc import wiggle_pb2 as pb
from .._wire import convert
from .._wire.payload import check_depth, decode_object, too_deep
from .._wire.status import STOPPING
from ..errors import InvalidArgument, Unavailable
from .instances import Instances
from .pollers import Pollers
from .service_limits import (
    ServiceLimits,
    chain_queues,
    check_session,
    check_task_id,
    poll_queues,
    wait_seconds,
)

if TYPE_CHECKING:
    from .service import Metrics

__all__ = ["WorkerHandlers", "HANDBACK_REASONS"]

#: The reasons an AdvanceRun may give for a handback (``wiggle._model.Handback``; "" gives none).
#: Each becomes a label value of wiggle_local_run_handbacks_total (wiggle_step_handbacks_total for
#: a SERVER-mode step): any other text is refused, so a worker cannot grow /metrics without bound.
HANDBACK_REASONS = frozenset(h.value for h in Handback)


def _check_handback_reason(reason: str) -> None:
    """InvalidArgument unless ``reason`` is empty or one of HANDBACK_REASONS."""
    if not reason or reason in HANDBACK_REASONS:
        return
    shown = repr(reason[:40]) + (f"... ({len(reason)} characters)" if len(reason) > 40 else "")
    raise InvalidArgument(
        f"AdvanceRun handback_reason {shown} is not a handback reason; send one of "
        f"{', '.join(h.value for h in Handback)}, or none; nothing was applied"
    )


class WorkerHandlers:
    """The worker RPCs (PollTasks, CompleteTask, FailTask, HeartbeatTask, AdvanceRun)."""

    instances: Instances
    limits: ServiceLimits
    pollers: Pollers
    metrics: Metrics

    async def poll_tasks(self, request: pb.PollTasksRequest) -> pb.PollTasksResponse:
        """Claim steps on the worker's queues, waiting up to ``wait_millis`` for some."""
        max_tasks = request.max_tasks or 1
        queues = poll_queues(request.worker_id, request.queues, max_tasks, "max_tasks", self.limits)
        wait = wait_seconds(request.wait_millis, self.limits)
        session = check_session(request.worker_session)
        self.pollers.seen(request.worker_id, queues)
        if session:  # another process under this id ends the holds of the one before
            self.instances.delivery.unrunnable.seen(request.worker_id, session)
        claimed = await self.instances.poll(request.worker_id, queues, max_tasks, wait)
        if claimed:
            self.pollers.claimed(c.token.queue for c in claimed)
        elif self.instances.closing.is_set():  # the worker polls again, elsewhere or once this one is back
            raise Unavailable(f"{STOPPING}; poll again")
        config = self.instances.config
        response = pb.PollTasksResponse()
        tasks = response.tasks
        for c in claimed:
            convert.activation_to_pb(c, config, tasks)  # made in the response: no copies
        return response

    async def complete_task(self, request: pb.CompleteTaskRequest) -> pb.ReportResult:
        """A step's result: the new context, or a predicate's value."""
        check_task_id(request.task_id)
        which = request.WhichOneof("result")
        ctx: dict[str, Any] | None = None
        value: bool | None = None
        if which == "context_json":
            ctx = decode_object(request.context_json, "context_json", None)
        elif which == "predicate_value":
            value = request.predicate_value
        status, chained = await self.instances.complete_chained(
            request.task_id, request.lease_owner, ctx, value, next_queues=self._chain(request.next_queues)
        )
        response = pb.ReportResult(instance_status=status)
        if chained is not None:
            self._chained_into(chained, response.next_task)
        return response

    async def fail_task(self, request: pb.FailTaskRequest) -> pb.ReportResult:
        """A step failed; retried by its policy unless not ``retryable``."""
        check_task_id(request.task_id)
        status = await self.instances.fail(
            request.task_id,
            request.lease_owner,
            request.message or "step failed",
            request.retryable,
            traceback=request.traceback,
            release=request.release,
            no_handler=request.release,  # a worker releases a step only for that
        )
        return pb.ReportResult(instance_status=status)

    async def heartbeat_task(self, request: pb.HeartbeatTaskRequest) -> pb.ReportResult:
        """Extend a lease."""
        check_task_id(request.task_id)
        status, expires = await self.instances.heartbeat(request.task_id, request.lease_owner)
        return pb.ReportResult(instance_status=status, lease_expires_at=expires)

    async def advance_run(self, request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
        """Apply the steps of a local run (LOCAL_SYNC / LOCAL_ASYNC)."""
        check_task_id(request.task_id)
        if request.steps_batch and len(request.steps):
            raise InvalidArgument("AdvanceRun sets both steps and steps_batch; send one of them")
        run_offset = request.run_offset if request.HasField("run_offset") else None
        if run_offset is not None and run_offset < 0:
            raise InvalidArgument(
                f"AdvanceRun run_offset must be 0 or more (the steps of this claim reported before "
                f"this batch), got {run_offset}; nothing was applied"
            )
        _check_handback_reason(request.handback_reason)
        if len(request.steps) > MAX_BATCH_STEPS:  # as decode_batch bounds steps_batch
            raise InvalidArgument(f"steps has {len(request.steps)} steps; the limit is {MAX_BATCH_STEPS}")
        steps: Sequence[StepRecord]
        if request.steps_batch:
            check_depth(request.steps_batch, "steps_batch")
            try:
                steps = _fast.decode_batch(request.steps_batch)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
            except RecursionError:  # unbalanced brackets check_depth left to the decoder
                raise too_deep("steps_batch") from None
        else:
            steps = [convert.step_record_from_pb(s) for s in request.steps]
        if request.next_queues and not request.final:
            raise InvalidArgument(
                "AdvanceRun names next_queues but is not final: only a handback can bring the "
                "next step; send next_queues with final=true"
            )
        outcome = await self.instances.advance_run(
            request.task_id,
            request.lease_owner,
            steps,
            request.final,
            request.handback_reason,
            request.failure_traceback,
            run_offset=run_offset,
            next_queues=self._chain(request.next_queues),
            durations=request.step_millis,
        )
        if outcome.server_mode:
            # a SERVER-mode step handed back (a drain's cut, a claim as the worker stopped): no
            # local run ended, so it is not one in the local-run families (an outside trial's
            # cut step read as a local run of 0 steps)
            if request.handback_reason:
                self.metrics.observe_step_handback(request.handback_reason)
        elif request.final or outcome.token_status != TokenStatus.RUNNING:
            # the run's length: the steps its earlier batches reported (run_offset) and this one's
            # (a worker that sends no run_offset: this batch's alone)
            self.metrics.observe_run((run_offset or 0) + outcome.applied_steps, request.handback_reason)
        result = pb.AdvanceRunResult(
            instance_status=outcome.instance_status,
            lease_expires_at=outcome.lease_expires_at,
            parked_task_id=outcome.token_id,
            token_status=outcome.token_status,
            applied_steps=outcome.applied_steps,
        )
        if outcome.chained is not None:
            self._chained_into(outcome.chained, result.next_task)
        return result

    def _chain(self, next_queues: Iterable[str]) -> frozenset[str]:
        """The queues a report may bring its instance's next step from: those it names (checked,
        ``chain_queues``), none once the server is stopping (the step stays READY for a poll)."""
        queues = chain_queues(next_queues)
        return frozenset() if self.instances.closing.is_set() else queues

    def _chained_into(self, chained: Claimed, into: pb.TaskActivation) -> None:
        """A report's answer carries the step leased with it (docs/semantics.md#chained-steps):
        counted as its queue's claim, written into the answer's ``next_task``."""
        self.pollers.claimed((chained.token.queue,))
        into.CopyFrom(convert.activation_to_pb(chained, self.instances.config))
