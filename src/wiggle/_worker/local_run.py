"""The local-run driver: one claimed token driven through consecutive same-queue steps.

In LOCAL_SYNC and LOCAL_ASYNC (see ``ExecutionMode`` in wiggle/_model.py) the worker keeps the
claimed token and runs the steps that follow it on the same queue itself, reporting them with
AdvanceRun: every step in LOCAL_SYNC, at flush points in LOCAL_ASYNC (``local_batch_size`` steps, a
``.checkpoint()`` step, ``flush_interval``), and at the handback, when the next node is not one it
may run (``CompiledGraph.classify``), the worker closes, the lease runs low, the run reached
``max_local_steps`` or the instance stopped running.

Consecutive sync handlers run back to back inside one thread-pool call (a "segment") up to the
next flush point, so a long LOCAL_ASYNC run pays one thread hop, not one per step; ``async def``
handlers run on the event loop, one at a time.

No probe: a LOCAL_* activation says its server implements AdvanceRun (the two arrived together,
proto/wiggle/_rpc/wiggle.proto). A server that answers UNIMPLEMENTED anyway (another
implementation of the protocol) still gets every step: the run reports its first step, the one
it claimed, with CompleteTask or FailTask, the steps it ran after that are dropped and run again
SERVER style (as after an unclean LOCAL_ASYNC death), and the worker runs every later activation
SERVER style.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from .. import _fast
from .. import _tracing as tracing
from .._engine.state import InstanceStatus, TokenStatus
from .._limits import over_payload
from .._model import ExecutionMode, Handback
from .._rpc import wiggle_pb2 as pb
from ..workflow import HandlerKind
from .handlers import HandlerCaller
from .heartbeats import Heartbeats, Lease
from .loaded import LoadedBlueprint
from .options import WorkerOptions
from .outcomes import Context, Failure, Outcome, encoded_result
from .records import StepRecord, encode_records, step_record, task_record
from .reporter import AdvanceUnsupported, Reporter
from .server_step import decode_context, hand_back_cut, report_outcome
from .stats import WorkerStats

__all__ = ["Decision", "AdvanceSupport", "LocalRunEnv", "LocalRun"]

log = logging.getLogger("wiggle.worker")

_decode_context: Callable[[bytes], Context] = msgspec.json.Decoder(dict).decode


class Decision(enum.Enum):
    """What a local run does after a step."""

    NEXT = "next"  # run the next step, keep buffering
    FLUSH = "flush"  # commit the buffered steps (AdvanceRun, not final), then run the next step
    HANDBACK = "handback"  # commit the buffered steps and hand the token back (AdvanceRun, final)


class _Stop(enum.Enum):
    """Why a sync segment stopped before running a step (the driver carries on elsewhere)."""

    ASYNC = "async"  # the next handler is ``async def``: run it on the event loop
    THREAD = "thread"  # the next handler is not trusted inline: run the segment in the pool


class Decided(NamedTuple):
    """A decision and, for a handback, its reason."""

    decision: Decision
    reason: Handback | None = None


_NEXT = Decided(Decision.NEXT)  # the two decisions without a reason, made once (one per step)
_FLUSH = Decided(Decision.FLUSH)


class AdvanceSupport:
    """What this worker learned about its server's AdvanceRun: None until the first answer."""

    __slots__ = ("supported",)

    def __init__(self) -> None:
        self.supported: bool | None = None


class LocalRunEnv(NamedTuple):
    """Everything a local run uses of its worker."""

    caller: HandlerCaller
    reporter: Reporter
    heartbeats: Heartbeats
    options: WorkerOptions
    stats: WorkerStats
    queues: frozenset[str]
    closing: Callable[[], bool]
    advance: AdvanceSupport
    # True while the worker closes and hands back what its drain cuts (False: the test kit's
    # crash, ``WorkflowEnvironment.stop_worker(crash=True)``, leaves it to the leases)
    hands_back_cuts: Callable[[], bool] = lambda: False


class _Abandon(Exception):
    """The server refused a report: the instance finished or the lease was lost."""


#: Handbacks after which the step made READY next may come back with the answer (chained steps).
_CHAINED_HANDBACKS = frozenset((Handback.FORK, Handback.JOIN, Handback.OTHER_QUEUE))


class LocalRun:
    """One claimed token driven locally; ``await LocalRun(env, loaded, act).run()``.

    ``next_queues`` (the worker's queues, or empty): a handback at a fork, a join or a queue change
    asks for the step it makes READY next (docs/semantics.md#chained-steps); ``run()`` returns it.
    """

    def __init__(
        self,
        env: LocalRunEnv,
        loaded: LoadedBlueprint,
        act: pb.TaskActivation,
        next_queues: Sequence[str] = (),
    ) -> None:
        self.env = env
        self.next_queues = next_queues
        self.next_task: pb.TaskActivation | None = None  # the step a handback brought
        self.loaded = loaded
        self.act = act
        self.sync = act.execution_mode == ExecutionMode.LOCAL_SYNC.value
        self.batch: list[StepRecord] = []
        self.lease = Lease(act.lease_expires_at, act.lease_millis)  # its length: the current step's
        self.steps_run = 0
        self.last_flush = time.monotonic()
        self.max_steps = act.max_local_steps
        # the server's lease, which a step without a heartbeat timeout gets when the run reaches it
        hb = loaded.heartbeat_timeouts
        self.server_lease = env.heartbeats.lease_millis if act.node_id in hb else act.lease_millis
        # read once: the activation's fields are protobuf attributes, decoded on every read
        self.payload_limit = act.max_payload_bytes
        self.task_id = act.task_id
        self.lease_owner = act.lease_owner
        # A run chains on its claim's queue only: a queue change is a handback, on the worker as
        # on the server, whatever else this worker serves (docs/semantics.md#chaining-across-queues).
        self.run_queues = frozenset((act.queue,))
        self.reported = 0  # steps of this claim the server has accepted (AdvanceRun's run_offset)
        self.step_base = env.caller.step_info(act, act.node_id, act.attempt)  # each step's Step, made from it
        # where the run is: the node to run next, its context and attempt
        self.node_id = act.node_id
        # ``context`` is the run's context as the server will have it once the batch is flushed,
        # the base of the next step's diff; ``encoded`` its JSON, from which each handler gets a
        # context of its own (``handler_context``)
        self.context: Context = decode_context(act)
        self.encoded: bytes = act.context_json or b"{}"
        self.attempt = act.attempt
        # the claimed step's (kind, outcome), kept until the first flush is accepted: a server
        # without AdvanceRun gets it SERVER style (module docstring)
        self.first: tuple[str, Outcome] | None = None
        self.fell_back = False
        self.failure_traceback = ""  # of the failed step that ends the batch (sent with it)
        self.flushing = False  # an AdvanceRun of this run is on its way
        # a flush a cut came during (``_hand_back_cut``): its steps, reported but not acknowledged,
        # or whether it was the run's own handback
        self.unacknowledged = 0
        self.final_unacknowledged = False
        # each buffered step's run time in ms (AdvanceRun step_millis: the history's step times),
        # and when the step running now began (perf_counter)
        self.millis: list[int] = []
        self.began = 0.0

    # ------------------------------------------------------------------ deciding

    def _lease_low(self) -> bool:
        lease_ms = self.lease.millis or self.env.heartbeats.lease_millis
        remaining = self.lease.expires_at - time.time() * 1000
        return remaining < lease_ms * self.env.options.lease_margin

    def after(self, kind: str, outcome: Outcome) -> Decided:
        """Record a step's outcome and decide what comes next."""
        self.millis.append(int((time.perf_counter() - self.began) * 1000))  # one per batch record
        node_id = self.node_id
        graph = self.loaded.graph
        self.steps_run += 1
        if self.steps_run == 1:
            self.first = (kind, outcome)
        if isinstance(outcome, Failure):
            # A mid-run failure: flush the successful prefix with the failure (the server retries).
            self.batch.append(step_record(node_id, outcome))
            self.failure_traceback = outcome.traceback
            return Decided(Decision.HANDBACK, Handback.RETRY)
        if kind == HandlerKind.PREDICATE:
            value = bool(outcome)
            self.batch.append(step_record(node_id, value))
            next_id = graph.successor(node_id, value)
        else:
            if outcome is None:
                self.batch.append(task_record(node_id, {}, []))
            else:
                assert isinstance(outcome, dict)
                limit = self.payload_limit
                encoded = encoded_result(node_id, outcome)  # can JSON hold it? (else the flush fails)
                if isinstance(encoded, Failure):
                    self.batch.append(step_record(node_id, encoded))
                    return Decided(Decision.HANDBACK, Handback.RETRY)
                size = len(encoded)
                if limit and size > limit:
                    # The server would refuse it: fail this step for good, as SERVER mode does.
                    message = over_payload("step result", size, limit)
                    self.batch.append(step_record(node_id, Failure(message, False)))
                    return Decided(Decision.HANDBACK, Handback.RETRY)
                changed, removed = _fast.diff(self.context, outcome)
                self.batch.append(task_record(node_id, changed, removed))
                self.context = outcome
                self.encoded = encoded
            next_id = graph.successor(node_id, True)
        assert next_id is not None
        reason = graph.classify(next_id, self.run_queues)
        if reason is None:
            if self.env.closing():
                reason = Handback.SHUTDOWN
            elif self.lease.abandoned:
                reason = Handback.NOT_RUNNING
            elif self.max_steps and self.steps_run >= self.max_steps:
                reason = Handback.MAX_STEPS
            elif self._lease_low():
                reason = Handback.LEASE_BUDGET
        if reason is not None:
            return Decided(Decision.HANDBACK, reason)
        self.node_id = next_id
        self.attempt = 1
        opts = self.env.options
        flush_around = self.loaded.flush_around
        if (
            self.sync
            or len(self.batch) >= opts.local_batch_size
            or graph.is_checkpoint(node_id)
            # a step with a time limit or a heartbeat timeout starts and ends with a flush, so the
            # server's deadline and lease (set when the token reaches the step) are that step's
            # alone (docs/semantics.md#step-time-limits)
            or node_id in flush_around
            or next_id in flush_around
            or (opts.flush_interval > 0 and time.monotonic() - self.last_flush >= opts.flush_interval)
        ):
            return _FLUSH
        return _NEXT

    # ------------------------------------------------------------------ running

    def sync_segment(self, inline: bool = False) -> Decided | _Stop:
        """Run sync handlers back to back until a flush point or an async handler.

        In a pool thread (``inline`` False), or on the event loop for as long as each handler
        is one the inline policy trusts to be quick (else THREAD: hand the rest to the pool).
        """
        blueprint = self.loaded.blueprint
        caller = self.env.caller
        while True:
            node_id = self.node_id
            if blueprint.is_async[node_id]:
                return _Stop.ASYNC
            if node_id in self.loaded.timeouts:
                return _Stop.ASYNC  # a timed step runs where its deadline can be kept (_async_step)
            kind, fn = blueprint.handlers[node_id]
            if inline and not caller.policy.inline(fn):
                return _Stop.THREAD
            self.began = time.perf_counter()
            outcome = caller.run_sync(
                self.loaded, self.act, node_id, self.handler_context(), self.attempt, inline, self.step_base
            )
            step = self.after(kind, outcome)
            if step.decision is not Decision.NEXT:
                return step

    async def _async_step(self) -> Decided:
        """Run the next step, whose handler is ``async def`` or which has a time limit (each
        step its own), from the event loop."""
        node_id = self.node_id
        kind = self.loaded.blueprint.handlers[node_id][0]
        self.began = time.perf_counter()
        outcome = await self.env.caller.run(
            self.loaded, self.act, node_id, self.handler_context(), self.attempt
        )
        return self.after(kind, outcome)

    def handler_context(self) -> Context:
        """The context a step's handler gets: decoded anew from the run's JSON, its own down to
        the last nested list and dict. A handler that changes a nested value in place and returns
        the context must not change ``self.context`` with it: the step's diff against it would
        find that value unchanged and leave it out of the report, and the server's context would
        lose it (an outside trial: ``ctx["items"].append(x); return ctx`` lost every append in
        LOCAL_SYNC and LOCAL_ASYNC, kept them in SERVER). A predicate changing its context in
        place changes nothing, as in SERVER mode."""
        return _decode_context(self.encoded)

    async def run(self) -> pb.TaskActivation | None:
        """Drive the run to its handback (or until the server stops it); the next step the
        handback brought, if it asked for one (``next_queues``)."""
        env = self.env
        env.heartbeats.watch(self.act, self.lease)
        try:
            while True:
                # The next steps right here while the policy trusts their handlers inline (no
                # await in between); it runs nothing if the next handler is async or is not trusted.
                step = self.sync_segment(inline=True)
                if step is _Stop.THREAD:
                    step = await env.caller.in_pool(self.sync_segment)
                elif step is _Stop.ASYNC:
                    step = await self._async_step()
                if isinstance(step, _Stop):
                    continue  # the next handler is async (or went back to the pool): go round
                if step.decision is Decision.HANDBACK:
                    await self.flush(True, step.reason)
                    return self.next_task
                if step.decision is Decision.FLUSH and not await self.flush(False, None):
                    return None
        except _Abandon:
            return None
        except asyncio.CancelledError:
            if env.hands_back_cuts():  # the worker's drain ran out: cut
                await self._hand_back_cut()
            raise
        finally:
            env.heartbeats.unwatch(self.act)
            if not self.fell_back:
                env.stats.local_runs.observe(self.steps_run)

    async def _hand_back_cut(self) -> None:
        """The worker's drain ran out while this run was at a step (``Worker.close``): hand back
        the steps it finished and has not reported, with the token READY at the step that was
        cut, instead of leaving them to the lease. Before, a LOCAL_ASYNC run's finished steps ran
        again after the lease expired, and its history showed one "lease expired" entry for all
        of them (two outside trials); now only the cut step runs again, at once, on another
        worker, without an attempt spent. A handback that fails (the server away) leaves the
        token to its lease, as before.

        A sync segment still running in a pool thread goes on with the step it is at; whatever it
        records after this is dropped (the run is over), and the step runs again elsewhere.

        A cut that comes while a flush is on its way follows that flush: the transport does not
        withdraw it (stream.py), so the hand-back counts its steps as reported and hands the run
        back where the flush left it, the step there unstarted (SHUTDOWN, no history entry);
        before, the run sat leased to the stopped worker until its lease ran out (an outside
        durability trial). A cut during the run's own handback needs nothing more."""
        if self.final_unacknowledged:
            return
        started = not self.unacknowledged  # after a flush the run waits for its answer
        request = pb.AdvanceRunRequest(
            task_id=self.task_id,
            lease_owner=self.lease_owner,
            steps_batch=encode_records(list(self.batch)),
            run_offset=self.reported + self.unacknowledged,
            final=True,
            step_millis=list(self.millis),
        )
        if self.failure_traceback:
            request.failure_traceback = self.failure_traceback
        self.batch = []
        if not await hand_back_cut(self.env.reporter, request, started):
            log.info("a cut run of %s was not handed back; its lease expires", self.act.instance_id)
            return
        self.env.stats.handbacks[request.handback_reason] += 1

    def _take_batch(self, final: bool, reason: Handback | None) -> pb.AdvanceRunRequest:
        """The AdvanceRun of the buffered steps, which it takes out of the buffer."""
        # only the fields that are set (every step's flush in LOCAL_SYNC: defaults cost to pass too)
        request = pb.AdvanceRunRequest(
            task_id=self.task_id,
            lease_owner=self.lease_owner,
            steps_batch=encode_records(self.batch),
            run_offset=self.reported,
        )
        request.step_millis.extend(self.millis)
        if final:
            request.final = True
        if reason is not None:
            request.handback_reason = reason.value
            if self.next_queues and reason in _CHAINED_HANDBACKS:
                request.next_queues.extend(self.next_queues)
        if self.failure_traceback:
            request.failure_traceback = self.failure_traceback
        self.batch = []
        self.millis = []
        self.failure_traceback = ""
        return request

    async def flush(self, final: bool, reason: Handback | None) -> bool:
        """AdvanceRun with the buffered steps; False if the run must stop (instance not RUNNING)."""
        sent = len(self.batch)
        request = self._take_batch(final, reason)
        self.last_flush = time.monotonic()
        stats = self.env.stats
        patience = (self.lease.millis or self.env.heartbeats.lease_millis) / 1000  # reporter.py
        self.flushing = True
        try:
            if tracing.active():
                with tracing.span("wiggle.report AdvanceRun", tracing.CLIENT, self.act.traceparent):
                    result = await self.env.reporter.advance(request, patience)
            else:
                result = await self.env.reporter.advance(request, patience)
        except AdvanceUnsupported:
            await self._fall_back()
            return False
        except asyncio.CancelledError:
            # the batch goes on to the server all the same (stream.py): the cut's hand-back
            # follows it, or is not needed if it was the handback
            self.unacknowledged = sent
            self.final_unacknowledged = final
            raise
        finally:
            self.flushing = False
        if reason is not None:
            stats.handbacks[reason.value] += 1
        if result is None:
            raise _Abandon()
        self.env.advance.supported = True
        self.first = None
        self.reported += sent
        if final and result.HasField("next_task"):
            self.next_task = result.next_task
        if result.instance_status != InstanceStatus.RUNNING:
            # cancelled, or finished otherwise, while the run went on: nothing is wrong here
            if result.applied_steps < sent:
                log.info(
                    "AdvanceRun on %s: instance %s is %s; the run stops, its %d unreported step(s) dropped",
                    self.task_id,
                    self.act.instance_id,
                    result.instance_status,
                    sent - result.applied_steps,
                )
        elif result.applied_steps < sent and not final:
            log.warning(
                "AdvanceRun on %s applied %d of %d steps (the server handed the run back)",
                self.task_id,
                result.applied_steps,
                sent,
            )
        if result.instance_status != InstanceStatus.RUNNING or (
            not final and result.token_status != TokenStatus.RUNNING
        ):
            if not final:
                stats.handbacks[Handback.NOT_RUNNING.value] += 1
            return False
        if result.lease_expires_at:
            self.lease.expires_at = result.lease_expires_at
        if self.loaded.heartbeat_timeouts:
            self._lease_of_the_step()
        return True

    def _lease_of_the_step(self) -> None:
        """The run goes on at ``node_id`` (the server has set its lease): heartbeat at a third of
        that step's heartbeat timeout, or of the server's lease after one."""
        millis = self.loaded.heartbeat_timeouts.get(self.node_id) or self.server_lease
        if millis != self.lease.millis:
            self.lease.millis = millis
            self.env.heartbeats.watch(self.act, self.lease)

    async def _fall_back(self) -> None:
        """The server has no AdvanceRun: report the claimed step SERVER style, and stop here."""
        if self.env.advance.supported is not False:
            log.warning("server has no AdvanceRun; running every workflow in SERVER style")
        self.env.advance.supported = False
        if self.first is None:
            # An earlier flush of this run was accepted: the claimed step is committed, and the
            # lease on the token the run holds now expires, so the server redelivers it.
            log.error(
                "AdvanceRun became unimplemented mid-run; the lease expires and the step is redelivered"
            )
            raise _Abandon()
        if self.steps_run > 1:
            log.info(
                "%d locally run steps of %s run again SERVER style", self.steps_run - 1, self.act.instance_id
            )
        kind, outcome = self.first
        self.fell_back = True
        await report_outcome(self.env.reporter, self.act, kind, outcome)
