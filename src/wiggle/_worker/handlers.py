"""Calling handlers: sync or async, on the event loop, in the thread pool or inline, within their
step's time limit; what they return.

A handler is given its context as its context type (wiggle/_worker/loaded.py), in a context of its
step's own with ``Step.current()`` set (wiggle/_worker/step.py), and returns the new context, None,
or (a predicate) a bool. ``outcome_of`` turns that into what a report carries, or a non-retryable
``Failure`` that names the problem. Sync handlers run in the thread pool, or inline on the event
loop once the ``InlinePolicy`` trusts them to be quick (WorkerOptions.sync_handlers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec

from .. import _tracing as tracing
from .._histogram import Series
from .._model import Limit
from .._rpc import wiggle_pb2 as pb
from ..workflow import HandlerKind
from .loaded import Handler, LoadedBlueprint, typed_context
from .outcomes import (
    HANDLER_EXITS,
    Context,
    Failure,
    HandlerExited,
    Outcome,
    StepTimedOut,
    failure_of,
    outcome_of,
)
from .stats import WorkerStats
from .step import Step, call_in_step, log_fields_of, span_attributes_of, step_context

__all__ = ["InlinePolicy", "log_failure", "HandlerCaller"]

log = logging.getLogger("wiggle.worker")

T = TypeVar("T")


def _warn_unstoppable(info: Step, limit: Limit | None) -> None:
    """A sync handler abandoned at its step's time limit runs on in its thread, and the server
    has given its concurrency slot to the next attempt of its key: say so where an operator looks
    (docs/flow-control.md#concurrency-limits)."""
    if limit is None:
        return
    log.warning(
        "step %s of instance %s (attempt %d): its sync handler runs on past the time limit, and "
        "its concurrency-limit slot (key %r, max %d) is free for the next attempt: the two may run "
        "at once; write the handler async def (cancelled at the limit) or give its calls shorter "
        "timeouts (docs/flow-control.md#concurrency-limits)",
        info.node_id,
        info.instance_id,
        info.attempt,
        limit.key,
        limit.max,
        extra=log_fields_of(info),
    )


class InlinePolicy:
    """Decides, per sync handler, whether to skip the thread hop (WorkerOptions.sync_handlers)."""

    PROMOTE_AFTER = 8  # quick runs in a row before a handler runs inline

    def __init__(self, mode: str, threshold_ms: float) -> None:
        if mode not in ("auto", "thread", "inline"):
            raise ValueError("sync_handlers must be 'auto', 'thread' or 'inline'")
        self.mode = mode
        self.threshold = threshold_ms / 1000
        self.quick: dict[Handler, int] = {}  # handler -> quick runs in a row (-1: never inline again)
        # (perf_counter at its start, handler) while a handler runs inline: the stall guard reads it
        self.blocking: tuple[float, Handler] | None = None

    def inline(self, fn: Handler) -> bool:
        """Run ``fn`` on the event loop?"""
        if self.mode != "auto":
            return self.mode == "inline"
        return self.quick.get(fn, 0) >= self.PROMOTE_AFTER

    def observe(self, fn: Handler, seconds: float, inline: bool) -> None:
        """Record how long a run of ``fn`` took (called from pool threads too: plain int updates)."""
        if self.mode != "auto":
            return
        count = self.quick.get(fn, 0)
        if count < 0:
            return
        if inline:
            if seconds > self.threshold * 10:
                self.quick[fn] = -1  # it blocked the loop once: never again
                log.info(
                    "handler %s took %.1f ms inline; it runs in the thread pool from now on",
                    getattr(fn, "__name__", fn),
                    seconds * 1000,
                )
        elif seconds <= self.threshold:
            self.quick[fn] = count + 1
        else:
            self.quick[fn] = 0


def _lend_thread(pool: ThreadPoolExecutor, running: concurrent.futures.Future[Any]) -> None:
    """Let ``pool`` start one thread more while ``running`` (a call given up) goes on in its own.

    ThreadPoolExecutor starts a thread on submit while it has fewer than ``_max_workers`` and none
    idle (Python 3.8 to 3.13); its threads never exit, so one started for a lent slot stays idle
    afterwards, as many as handlers were ever stuck at once."""
    with _LENDING:
        pool._max_workers += 1

    def give_back(_: object) -> None:
        with _LENDING:
            pool._max_workers -= 1

    running.add_done_callback(give_back)


_LENDING = threading.Lock()


def _uncancel(task: asyncio.Task[Any] | None) -> None:
    """Withdraw the cancel request ``HandlerCaller.give_up`` made of ``task``, whose handler
    caught the cancellation and ended otherwise: the task goes on (Python 3.11 and later count
    cancel requests, and ``asyncio.timeout`` in that task would misread a leftover one)."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()


def log_failure(info: Step, failure: Failure, loaded: LoadedBlueprint | None = None) -> None:
    """Log a failed attempt with its traceback, or in one line if the handler expected it
    (RetryableError); the context, a payload, is never logged. With ``loaded`` the line says
    whether the step's retry policy allows another attempt (the server decides, by the same
    policy: docs/semantics.md#retries)."""
    if not failure.retryable:
        then = "not retryable"
    elif loaded is None or info.node_id not in loaded.nodes:
        then = "will retry if its policy allows"
    else:
        policy = loaded.blueprint.definition.retry_for(loaded.nodes[info.node_id])
        if policy.allows_another(info.attempt):
            of = f" of {policy.max_attempts}" if policy.max_attempts else ""
            then = f"attempt {info.attempt + 1}{of} follows"
        else:
            then = "its last attempt: the step fails for good"
    log.warning(
        "step %s of instance %s failed (attempt %d, %s): %s%s",
        info.node_id,
        info.instance_id,
        info.attempt,
        then,
        failure.message,
        "" if failure.expected else "\n" + failure.traceback.rstrip(),
        extra=log_fields_of(info),
    )


class _Watched:
    """An async handler's coroutine, awaited so that while it runs (between two of its awaits) the
    stall guard knows it holds the event loop (``InlinePolicy.blocking``, as a sync handler run
    inline): one that blocks (``time.sleep``, a blocking client) is named in the worker's log,
    and the steps it holds are heartbeated from the guard's thread meanwhile (stall_guard.py).
    Before, such a handler cost the other steps their leases without a word (a docs trial).

    Each stretch of the handler runs in ``context``, its step's own (``step_context``), and a
    CancelledError out of it is told apart: one of a cancelled step (a drain's cut, its time
    limit, a give-up) goes on as the cancellation it is; one the handler raised without its step
    being cancelled comes out as a HandlerExited, a failure of the step like any exception
    (``cancel_requested``). Before, it ended the worker's task as if cancelled: nothing was
    reported or logged, and the step waited out its lease (an outside trial)."""

    __slots__ = ("coro", "fn", "policy", "context")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        fn: Handler,
        policy: InlinePolicy,
        context: contextvars.Context,
    ) -> None:
        self.coro = coro
        self.fn = fn
        self.policy = policy
        self.context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, fn, policy, run = self.coro, self.fn, self.policy, self.context.run
        sent: Any = None
        thrown: BaseException | None = None
        cancel_thrown = False  # a CancelledError was passed into the handler (Python 3.10's sign)
        while True:
            policy.blocking = (time.perf_counter(), fn)
            try:
                yielded = run(coro.send, sent) if thrown is None else run(coro.throw, thrown)
            except StopIteration as stop:
                return stop.value
            except asyncio.CancelledError as exc:
                if cancel_requested(asyncio.current_task(), cancel_thrown):
                    raise
                raise HandlerExited(exc) from exc
            finally:
                policy.blocking = None
            try:
                sent, thrown = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 (a cancellation, passed on into the handler)
                sent, thrown = None, exc
                cancel_thrown = cancel_thrown or isinstance(exc, asyncio.CancelledError)


def cancel_requested(task: asyncio.Task[Any] | None, cancel_thrown: bool) -> bool:
    """Whether a CancelledError out of a handler run by ``task`` is its step's cancellation:
    ``task`` was asked to cancel (by the worker's drain, the step's time limit, a give-up, or
    whoever cancels the worker's tasks), which Python 3.11 and later count
    (``Task.cancelling``). A handler that raises CancelledError itself, or lets one out of
    something else it awaited that was cancelled, was not. Python 3.10 does not count: there
    a CancelledError passed into the handler's coroutine (``cancel_thrown``) is the sign."""
    cancelling = getattr(task, "cancelling", None)
    if cancelling is None:
        return cancel_thrown
    return bool(cancelling())


def timed_call(
    policy: InlinePolicy, fn: Handler, args: tuple[object, ...], info: Step, inline: bool
) -> object:
    """Call a sync handler in a context of its step's own (``step_context``: ``Step.current()``,
    the log fields), and tell the policy how long it took. A CancelledError it raises is its
    own (nothing cancels a sync handler): a HandlerExited, a failure of its step."""
    started = time.perf_counter()
    if inline:  # it holds the event loop: the stall guard watches (stall_guard.py)
        policy.blocking = (started, fn)
    try:  # ``step_context`` in one call: this runs every step
        return contextvars.copy_context().run(call_in_step, info, fn, args)
    except asyncio.CancelledError as exc:
        raise HandlerExited(exc) from exc
    finally:
        if inline:
            policy.blocking = None
        policy.observe(fn, time.perf_counter() - started, inline)


class HandlerCaller:
    """Runs a blueprint's handlers for this worker: where (loop, pool, inline) and with which Step."""

    def __init__(self, policy: InlinePolicy, stats: WorkerStats, worker_id: str) -> None:
        self.policy = policy
        self.stats = stats
        self.worker_id = worker_id
        self.pool: ThreadPoolExecutor | None = None  # set by the worker on start
        self._seconds: dict[str, Series] = {}  # workflow -> its handler-seconds series
        # task id -> the asyncio task that awaits its handler, while ``run`` does (``give_up``)
        self.running: dict[str, asyncio.Task[Any]] = {}
        # task id -> why the server ended its attempt, for a handler ``give_up`` cancelled
        self._given_up: dict[str, str] = {}

    def give_up(self, task_id: str, why: str) -> bool:
        """Stop waiting for the handler ``run`` runs for ``task_id``: the server ended its attempt
        (``why``: its refusal, e.g. the instance finished, the attempt passed its time limit, the
        lease was lost). An ``async def`` handler is cancelled, a sync one abandoned in its pool
        thread (it runs on; its result is dropped), as at the step's own time limit; the task
        that awaits ``run`` is cancelled with it, so nothing is reported (the server would refuse
        it). A handler that catches the cancellation and returns has its outcome go on as usual
        (and refused). False if no handler of ``task_id`` was being awaited (an inline one, or
        none)."""
        task = self.running.get(task_id)
        if task is None or task.done() or task_id in self._given_up:
            return False
        self._given_up[task_id] = why
        task.cancel()
        return True

    def step_info(self, act: pb.TaskActivation, node_id: str, attempt: int, timeout: float = 0.0) -> Step:
        """The Step a handler sees for ``node_id`` of the activation ``act``."""
        return Step(
            instance_id=act.instance_id,
            workflow=act.workflow,
            version=act.version,
            node_id=node_id,
            attempt=attempt,
            task_id=act.task_id,
            worker_id=self.worker_id,
            correlation_id=act.correlation_id,
            execution_mode=act.execution_mode,
            timeout=timeout,
            started=time.monotonic() if timeout else 0.0,
        )

    def arguments(
        self, loaded: LoadedBlueprint, node_id: str, kind: str, context: Context
    ) -> tuple[object, ...]:
        """The handler's arguments: the typed context, or for a COMBINE the base and the branches."""
        ctype = loaded.context_types[node_id]
        hint = loaded.mismatch_hint
        if kind == HandlerKind.COMBINE:
            base = typed_context(context["base"], ctype, hint)
            branches = [typed_context(b, ctype, hint) for b in context["branches"]]
            return (base, branches)
        return (typed_context(context, ctype, hint),)

    def runs_inline(self, loaded: LoadedBlueprint, node_id: str) -> bool:
        """Whether ``call`` would run the handler of ``node_id`` inline on the event loop (a sync
        handler the policy trusts): then ``run_sync(..., inline=True)`` does the same as ``run``."""
        blueprint = loaded.blueprint
        if node_id in loaded.timeouts:  # a timed step runs where it can be abandoned: the pool
            return False
        return not blueprint.is_async[node_id] and self.policy.inline(blueprint.handlers[node_id][1])

    async def call(self, loaded: LoadedBlueprint, node_id: str, context: Context, info: Step) -> object:
        """Run the handler of ``node_id`` on ``context``; returns its raw result (exceptions
        propagate; a handler's SystemExit or KeyboardInterrupt as HandlerExited, which a task
        awaiting it, such as ``asyncio.wait_for``'s, does not re-raise out of the event loop, and
        so does a CancelledError it raised without its step being cancelled: ``_Watched``)."""
        try:
            return await self._call(loaded, node_id, context, info)
        except HANDLER_EXITS as exc:
            raise HandlerExited(exc) from exc

    async def _call(self, loaded: LoadedBlueprint, node_id: str, context: Context, info: Step) -> object:
        kind, fn = loaded.blueprint.handlers[node_id]
        args = self.arguments(loaded, node_id, kind, context)
        self.stats.steps += 1
        if loaded.blueprint.is_async[node_id]:
            own = step_context(info)
            result: object = await _Watched(own.run(fn, *args), fn, self.policy, own)
            return result
        if self.policy.inline(fn) and not info.timeout:
            return timed_call(self.policy, fn, args, info, True)
        return await self.in_pool(timed_call, self.policy, fn, args, info, False)

    async def run(
        self,
        loaded: LoadedBlueprint,
        act: pb.TaskActivation,
        node_id: str,
        context: Context,
        attempt: int,
        timeout: float | None = None,
    ) -> Outcome:
        """Run one step on the event loop's side and return its Outcome (a raise becomes a Failure).

        A step with a time limit (``timeout`` seconds; None: its definition's) is given up when
        the limit runs out: an async handler is cancelled, a sync one abandoned in its pool thread
        (it runs on, its result is dropped); the outcome is a retryable timeout failure
        (docs/semantics.md#step-time-limits). The server keeps the same limit on its own clock."""
        kind = loaded.blueprint.handlers[node_id][0]
        if timeout is None:
            timeout = loaded.timeouts.get(node_id, 0) / 1000
        info = self.step_info(act, node_id, attempt, timeout)
        started = time.perf_counter()
        task = asyncio.current_task()
        task_id = act.task_id
        if task is not None:  # a refused heartbeat reaches the handler through it (``give_up``)
            self.running[task_id] = task
        try:
            if tracing.active():
                with tracing.span(
                    f"wiggle.step {node_id}", tracing.INTERNAL, act.traceparent, span_attributes_of(info)
                ):
                    result = await self._call_within(loaded, node_id, context, info)
            else:  # no span, and no span attributes built for nothing
                result = await self._call_within(loaded, node_id, context, info)
        except StepTimedOut as exc:
            failure = Failure(str(exc), True)
            log_failure(info, failure, loaded)
            if not loaded.blueprint.is_async[node_id]:
                _warn_unstoppable(info, loaded.nodes[node_id].limit)
            self.observe(info, started, "failed")
            return failure
        except asyncio.CancelledError:
            why = self._given_up.pop(task_id, None)
            if why is not None:  # else a drain's cut: the caller's to say
                self._gave_up(info, started, why, loaded.blueprint.is_async[node_id])
            raise
        except Exception as exc:  # the handler raised (its exits come as HandlerExited: call): the outcome
            failure = failure_of(exc)
            log_failure(info, failure, loaded)
            self.observe(info, started, "failed")
            return failure
        finally:
            self.running.pop(task_id, None)
            if self._given_up and self._given_up.pop(task_id, None) is not None:
                # the handler caught the cancellation and returned or raised: its outcome goes
                # on (and is refused); the task's cancel request is withdrawn all the same
                _uncancel(task)
        self.observe(info, started, "completed")
        return outcome_of(
            kind, node_id, result, context, loaded.context_types[node_id], loaded.blueprint.context_type
        )

    def _gave_up(self, info: Step, started: float, why: str, is_async: bool) -> None:
        """Log and count an attempt ``give_up`` ended as what it is: not a failure of the handler
        (no traceback, no "attempt 2 follows": the server decided already)."""
        how = "cancelled" if is_async else "abandoned in its pool thread (it runs on; its result is dropped)"
        log.info(
            "step %s of instance %s (attempt %d) given up, its handler %s: the server ended the attempt: %s",
            info.node_id,
            info.instance_id,
            info.attempt,
            how,
            why,
            extra=log_fields_of(info),
        )
        self.observe(info, started, "failed")

    async def _call_within(
        self, loaded: LoadedBlueprint, node_id: str, context: Context, info: Step
    ) -> object:
        """``call``, bounded by the step's time limit when it has one (StepTimedOut past it)."""
        if not info.timeout:
            return await self.call(loaded, node_id, context, info)
        try:
            return await asyncio.wait_for(self.call(loaded, node_id, context, info), info.timeout)
        except asyncio.TimeoutError:
            raise StepTimedOut(
                f"timed out after {info.timeout:g} s (the step's start-to-close limit)"
            ) from None

    def run_sync(
        self,
        loaded: LoadedBlueprint,
        act: pb.TaskActivation,
        node_id: str,
        context: Context,
        attempt: int,
        inline: bool,
        base: Step | None = None,
    ) -> Outcome:
        """Run one sync step right here (a pool thread, or the loop when ``inline``).

        ``base``: a Step of the same activation (a local run's), from which this step's is made
        with its node and attempt, instead of reading the activation's fields again.
        """
        blueprint = loaded.blueprint
        kind, fn = blueprint.handlers[node_id]
        ctype = loaded.context_types[node_id]
        if base is None:
            info = self.step_info(act, node_id, attempt)
        else:
            info = msgspec.structs.replace(base, node_id=node_id, attempt=attempt)
        self.stats.steps += 1
        started = time.perf_counter()
        try:
            if tracing.active():
                with tracing.span(
                    f"wiggle.step {node_id}", tracing.INTERNAL, act.traceparent, span_attributes_of(info)
                ):
                    result = timed_call(
                        self.policy, fn, self.arguments(loaded, node_id, kind, context), info, inline
                    )
            else:  # no span, no span attributes built for nothing; ``arguments`` of a TASK inline
                args = (
                    (typed_context(context, ctype, loaded.mismatch_hint),)
                    if kind != HandlerKind.COMBINE
                    else self.arguments(loaded, node_id, kind, context)
                )
                result = timed_call(self.policy, fn, args, info, inline)
        except (Exception, *HANDLER_EXITS) as exc:
            failure = failure_of(exc)
            log_failure(info, failure, loaded)
            self.observe(info, started, "failed")
            return failure
        seconds = time.perf_counter() - started  # ``observe`` written out: this runs every step
        self.stats.completed += 1
        (self._seconds.get(info.workflow) or self._series(info.workflow)).observe(seconds)
        return outcome_of(kind, node_id, result, context, ctype, blueprint.context_type)

    def observe(self, info: Step, started: float, outcome: str) -> None:
        """Count one handler run and its duration (the worker's /metrics)."""
        seconds = time.perf_counter() - started
        if outcome == "completed":
            self.stats.completed += 1
        else:
            self.stats.failed += 1
        (self._seconds.get(info.workflow) or self._series(info.workflow)).observe(seconds)

    def _series(self, workflow: str) -> Series:
        """The handler-seconds series of ``workflow``, kept for the next steps."""
        series = self._seconds[workflow] = self.stats.handler_seconds.labels((workflow,))
        return series

    async def in_pool(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` in the thread pool with the caller's contextvars.

        A call given up while it runs (a sync step abandoned at its time limit, a drain cut
        short) keeps its thread until the handler returns: the pool gets one thread more for as
        long (``_lend_thread``). Before, each abandoned handler took a thread from the pool for
        good: with as many stuck as the worker's concurrency, the next steps waited for a thread
        while their own time limits ran, and failed "timed out" without having started."""
        pool = self.pool
        assert pool is not None, "the worker is not started"
        ctx = contextvars.copy_context()
        running = pool.submit(ctx.run, fn, *args)
        try:
            return await asyncio.wrap_future(running)
        except asyncio.CancelledError:
            if not running.cancel():  # it has started: its thread is not the pool's while it runs
                _lend_thread(pool, running)
            raise
