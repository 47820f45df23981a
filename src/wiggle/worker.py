"""The worker: pulls steps from the server, runs plain Python functions, reports the results.

A worker never accepts connections: it long-polls ``PollTasks`` for the queues it serves, runs
each claimed step (sync handlers in a thread pool, ``async def`` handlers on the event loop),
heartbeats while a step runs, and reports with ``CompleteTask``/``FailTask`` (SERVER mode) or
``AdvanceRun`` (LOCAL_SYNC / LOCAL_ASYNC: the local-run driver of local-execution-design.md §8).

Durability: in SERVER and LOCAL_SYNC every step is committed before the next one runs; in
LOCAL_ASYNC a run of steps is committed at its handback (or every ``local_batch_size`` steps,
after a ``.checkpoint()`` step, or every ``flush_interval`` seconds), so an unclean death re-runs
the unflushed steps. ``close()`` drains: a local run stops chaining at its next step boundary and
flushes what it computed, so a rolling deploy loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import msgspec

from . import _fast
from ._model import ExecutionMode, Handback
from ._rpc import wiggle_pb2 as pb
from ._rpc import wiggle_pb2_grpc as pb_grpc
from .client import AsyncClient
from .errors import PermanentError
from .workflow import Blueprint, HandlerKind

__all__ = ["Worker", "WorkerOptions", "Step", "WorkerStats"]

log = logging.getLogger("wiggle.worker")
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

_current_step: contextvars.ContextVar[Step] = contextvars.ContextVar("wiggle_step")


class Step(msgspec.Struct, frozen=True):
    """What a running handler can know about its step: ``Step.current()`` inside a handler."""

    instance_id: str
    workflow: str
    version: str
    node_id: str
    attempt: int  # 1-based: failures of this step so far + 1
    task_id: str
    worker_id: str
    correlation_id: str
    execution_mode: str

    @staticmethod
    def current() -> Step:
        """The step being executed; LookupError outside a handler."""
        return _current_step.get()


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


class WorkerOptions(msgspec.Struct, kw_only=True):
    """How a worker runs.

    concurrency: steps (or local runs) in flight at once. queues: the queues served (default:
    every queue of the registered blueprints). local_batch_size: LOCAL_ASYNC flushes after this
    many buffered steps (default WIGGLE_LOCAL_BATCH_SIZE or 64). flush_interval: LOCAL_ASYNC also
    flushes when this many seconds passed since the last flush (default
    WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS / 1000, else 0: only by size, checkpoint and handback). use_local_modes: False makes
    the worker ignore execution_mode and report every step with CompleteTask (SERVER style).
    transport: "stream" multiplexes every call over one bidirectional stream (fast path);
    "unary" uses one RPC per call (the documented contract).
    sync_handlers: where plain (non-async) handlers run. "thread": always in the thread pool, so
    a slow or blocking handler never delays the event loop. "inline": always on the event loop
    (only for handlers known to be quick). "auto" (default): a handler runs in the pool until
    it has finished quicker than inline_threshold_ms eight times in a row; from then on it runs
    inline, saving the thread hop (about a third of a worker's CPU on trivial steps), and the
    first inline run slower than ten times the threshold sends it back to the pool for good.
    """

    concurrency: int = 16
    queues: Sequence[str] | None = None
    worker_id: str = ""
    poll_wait_seconds: float = 10.0
    heartbeat_seconds: float = 0.0  # 0: a third of the server's lease
    local_batch_size: int = msgspec.field(default_factory=lambda: _env_int("WIGGLE_LOCAL_BATCH_SIZE", 64))
    flush_interval: float = msgspec.field(
        default_factory=lambda: _env_int("WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS", 0) / 1000
    )
    lease_margin: float = 0.25  # hand back when less than this share of the lease is left
    use_local_modes: bool = True
    transport: str = "stream"
    register: bool = True  # register the blueprints on start
    threads: int = 0  # thread pool for sync handlers; 0: concurrency
    sync_handlers: str = "auto"  # "auto" | "thread" | "inline" (see the class docstring)
    inline_threshold_ms: float = 0.5


class _InlinePolicy:
    """Decides, per sync handler, whether to skip the thread hop (WorkerOptions.sync_handlers)."""

    PROMOTE_AFTER = 8  # quick runs in a row before a handler runs inline

    def __init__(self, mode: str, threshold_ms: float) -> None:
        if mode not in ("auto", "thread", "inline"):
            raise ValueError("sync_handlers must be 'auto', 'thread' or 'inline'")
        self.mode = mode
        self.threshold = threshold_ms / 1000
        self.quick: dict[Any, int] = {}  # handler -> quick runs in a row (-1: never inline again)

    def inline(self, fn: Any) -> bool:
        """Run ``fn`` on the event loop?"""
        if self.mode != "auto":
            return self.mode == "inline"
        return self.quick.get(fn, 0) >= self.PROMOTE_AFTER

    def observe(self, fn: Any, seconds: float, inline: bool) -> None:
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


class WorkerStats:
    """Counters of what this worker did (tests and the benchmark read them)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # RPCs sent, by method
        self.steps = 0  # handler executions
        self.handbacks: Counter[str] = Counter()
        self.local_run_lengths: list[int] = []


class _Abandon(Exception):
    """The server refused a report: the instance finished or the lease was lost."""


# ---------------------------------------------------------------------- transports


class _Unary:
    """One RPC per call."""

    def __init__(self, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.stub = stub

    async def call(self, method: str, request: Any, timeout: float) -> Any:
        return await getattr(self.stub, method)(request, timeout=timeout)

    async def close(self) -> None:
        pass


class _StreamError(grpc.RpcError):  # type: ignore[misc]  # grpc ships no type stubs
    """An error reply on the worker stream, shaped like an AioRpcError."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_CODES = {c.value[0]: c for c in grpc.StatusCode}
_BODY = {
    "PollTasks": "poll",
    "CompleteTask": "complete",
    "FailTask": "fail",
    "HeartbeatTask": "heartbeat",
    "AdvanceRun": "advance",
}


class _Stream:
    """Every worker call multiplexed over one WorkerSession stream; reconnects when it breaks."""

    def __init__(self, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.stub = stub
        self._call: Any = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._outgoing: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
        self.on_orphan_tasks: Any = None  # called with activations nobody waits for any more

    async def _ensure(self) -> Any:
        if self._call is not None:
            return self._call
        async with self._lock:
            if self._call is None:
                outgoing: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
                self._outgoing = outgoing

                async def requests() -> Any:
                    # gRPC allows one write at a time: every caller enqueues, this one writes
                    # whatever is queued as one frame.
                    while True:
                        message = await outgoing.get()
                        if message is None:
                            return
                        frame = [message]
                        while not outgoing.empty():
                            more = outgoing.get_nowait()
                            if more is None:
                                yield pb.WorkerBatch(messages=frame)
                                return
                            frame.append(more)
                        yield pb.WorkerBatch(messages=frame)

                call = self.stub.WorkerSession(requests())
                self._call = call
                self._reader = asyncio.ensure_future(self._read(call))
        return self._call

    async def _read(self, call: Any) -> None:
        error: BaseException | None = None
        try:
            while True:
                frame = await call.read()
                if frame is grpc.aio.EOF:
                    break
                for message in frame.messages:
                    self._deliver(message)
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as exc:
            error = exc
        finally:
            if self._call is call:
                self._call = None
            pending, self._pending = self._pending, {}
            for future in pending.values():
                if not future.done():
                    if isinstance(error, grpc.RpcError):
                        future.set_exception(error)
                    else:
                        future.set_exception(
                            _StreamError(grpc.StatusCode.UNAVAILABLE, "worker stream closed")
                        )

    def _deliver(self, message: pb.ServerMessage) -> None:
        future = self._pending.pop(message.request_id, None)
        body = message.WhichOneof("body")
        if future is None or future.done():
            if body == "tasks" and message.tasks.tasks and self.on_orphan_tasks is not None:
                self.on_orphan_tasks(list(message.tasks.tasks))  # claimed after we stopped waiting
            return
        if body == "error":
            code = _CODES.get(message.error.code, grpc.StatusCode.UNKNOWN)
            future.set_exception(_StreamError(code, message.error.message))
        else:
            future.set_result(getattr(message, body))

    async def call(self, method: str, request: Any, timeout: float) -> Any:
        await self._ensure()
        self._next_id += 1
        rid = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        message = pb.WorkerMessage(request_id=rid)
        getattr(message, _BODY[method]).CopyFrom(request)
        self._outgoing.put_nowait(message)
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            self._cancel_remote(rid)
            raise _StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} timed out") from None
        except asyncio.CancelledError:
            self._pending.pop(rid, None)
            self._cancel_remote(rid)
            raise

    def _cancel_remote(self, rid: int) -> None:
        if self._call is not None:
            self._outgoing.put_nowait(
                pb.WorkerMessage(request_id=rid, cancel=pb.CancelRequest(request_id=rid))
            )

    async def close(self) -> None:
        call = self._call
        self._call = None
        if call is not None:
            self._outgoing.put_nowait(None)
            call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader


# ---------------------------------------------------------------------- the worker


class _Loaded:
    __slots__ = ("blueprint", "graph", "nodes")

    def __init__(self, blueprint: Blueprint[Any]) -> None:
        self.blueprint = blueprint
        self.graph = _fast.CompiledGraph(blueprint.definition)
        self.nodes = blueprint.definition.node_map()


class Worker:
    """Runs the steps of ``blueprints`` pulled from a server.

    ``Worker("127.0.0.1:7233", [blueprint], WorkerOptions(concurrency=16))``; then ``run()``
    (blocking, stops on SIGINT/SIGTERM), or ``await start()`` ... ``await close()``.
    """

    def __init__(
        self,
        client_or_target: AsyncClient | str,
        blueprints: Iterable[Blueprint[Any]],
        options: WorkerOptions | None = None,
    ) -> None:
        self.options = options or WorkerOptions()
        if self.options.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.options.local_batch_size < 1:
            raise ValueError("local_batch_size must be >= 1")
        if self.options.transport not in ("stream", "unary"):
            raise ValueError("transport must be 'stream' or 'unary'")
        self._target = client_or_target
        self._client: AsyncClient | None = (
            client_or_target if isinstance(client_or_target, AsyncClient) else None
        )
        self._own_client = self._client is None
        self.blueprints = list(blueprints)
        if not self.blueprints:
            raise ValueError("a worker needs at least one blueprint")
        self._exact: dict[tuple[str, str], _Loaded] = {}
        self._by_name: dict[str, list[_Loaded]] = {}
        for bp in self.blueprints:
            loaded = _Loaded(bp)
            self._exact[(bp.name, bp.version)] = loaded
            self._by_name.setdefault(bp.name, []).append(loaded)
        queues = self.options.queues
        if queues is None:
            queues = sorted(set().union(*(bp.queues() for bp in self.blueprints)))
        if not queues:
            raise ValueError("the worker serves no queues")
        self.queues: frozenset[str] = frozenset(queues)
        self._queue_list = sorted(self.queues)
        self.worker_id = (
            self.options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        )
        self.stats = WorkerStats()
        self._inline = _InlinePolicy(self.options.sync_handlers, self.options.inline_threshold_ms)
        self._running = False
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._transport: _Unary | _Stream | None = None
        self._advance_supported: bool | None = None
        self._orphans: set[asyncio.Task[Any]] = set()
        self._probe: asyncio.Future[None] | None = None
        # in-flight steps and local runs, heartbeated by one loop: task id -> (activation, run, since)
        self._watched: dict[str, tuple[pb.TaskActivation, _LocalRun | None, float]] = {}
        self._heartbeater: asyncio.Task[None] | None = None
        self._lease_millis = 30_000

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Connect, register the blueprints, start pulling."""
        if self._running:
            return
        if self._client is None:
            assert isinstance(self._target, str)
            self._client = AsyncClient(self._target)
        stub = pb_grpc.WiggleControlPlaneStub(self._client.channel)
        if self.options.transport == "stream":
            stream = _Stream(stub)
            stream.on_orphan_tasks = self._hand_back_orphans
            self._transport = stream
        else:
            self._transport = _Unary(stub)
        self._pool = ThreadPoolExecutor(
            self.options.threads or self.options.concurrency, thread_name_prefix="wiggle-step"
        )
        self._slots = asyncio.Semaphore(self.options.concurrency)
        if self.options.register:
            for bp in self.blueprints:
                await self._client.register(bp)
        self._running = True
        self._closing = False
        self._poller = asyncio.ensure_future(self._poll_loop())
        log.info("worker %s serving %s", self.worker_id, ", ".join(self._queue_list))

    async def close(self, timeout: float = 30.0) -> None:
        """Stop pulling, let running steps finish (local runs flush and hand back), disconnect."""
        if not self._running:
            return
        self._closing = True
        self._running = False
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(BaseException):
                await self._poller
        if self._tasks:
            done, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
        await asyncio.sleep(0.05)  # let a reply to the abandoned poll arrive and be handed back
        if self._orphans:
            await asyncio.wait(set(self._orphans), timeout=5.0)
        if self._heartbeater is not None:
            self._heartbeater.cancel()
            with contextlib.suppress(BaseException):
                await self._heartbeater
            self._heartbeater = None
        if self._transport is not None:
            await self._transport.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def run_async(self) -> None:
        """Run until cancelled or until SIGINT/SIGTERM, then close gracefully."""
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await self.close()

    def run(self) -> None:
        """Blocking form of run_async."""
        asyncio.run(self.run_async())

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -------------------------------------------------------------- RPC plumbing

    async def _rpc(self, method: str, request: Any, timeout: float = 30.0) -> Any:
        assert self._transport is not None
        self.stats.calls[method] += 1
        return await self._transport.call(method, request, timeout)

    # -------------------------------------------------------------- polling

    async def _poll_loop(self) -> None:
        assert self._slots is not None
        backoff = 0.1
        while self._running:
            await self._slots.acquire()
            free = 1
            while not self._slots.locked():
                await self._slots.acquire()
                free += 1
                if free >= self.options.concurrency:
                    break
            try:
                request = pb.PollTasksRequest(
                    worker_id=self.worker_id,
                    queues=self._queue_list,
                    max_tasks=free,
                    wait_millis=int(self.options.poll_wait_seconds * 1000),
                )
                response = await self._rpc("PollTasks", request, timeout=self.options.poll_wait_seconds + 30)
                backoff = 0.1
            except asyncio.CancelledError:
                for _ in range(free):
                    self._slots.release()
                raise
            except grpc.RpcError as exc:
                for _ in range(free):
                    self._slots.release()
                code = exc.code() if hasattr(exc, "code") else None
                if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED):
                    log.error("PollTasks refused: %s", exc.details() if hasattr(exc, "details") else exc)
                else:
                    log.debug("PollTasks failed (%s); retrying in %.1f s", code, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            tasks = list(response.tasks)
            for _ in range(free - len(tasks)):
                self._slots.release()
            for activation in tasks:
                task = asyncio.ensure_future(self._execute(activation))
                self._tasks.add(task)
                task.add_done_callback(self._task_done)

    def _hand_back_orphans(self, activations: list[pb.TaskActivation]) -> None:
        """A poll we abandoned claimed these anyway: hand them back at once, attempt unspent."""
        for act in activations:
            request = pb.AdvanceRunRequest(
                task_id=act.task_id,
                lease_owner=act.lease_owner,
                final=True,
                handback_reason=Handback.SHUTDOWN.value,
            )
            task = asyncio.ensure_future(self._report("AdvanceRun", request))
            self._orphans.add(task)
            task.add_done_callback(self._orphans.discard)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        assert self._slots is not None
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("worker task crashed", exc_info=task.exception())

    # -------------------------------------------------------------- executing

    def _lookup(self, act: pb.TaskActivation) -> tuple[_Loaded | None, bool]:
        exact = self._exact.get((act.workflow, act.version))
        if exact is not None:
            return exact, True
        for loaded in self._by_name.get(act.workflow, ()):
            if act.node_id in loaded.blueprint.handlers:
                return loaded, False
        return None, False

    async def _execute(self, act: pb.TaskActivation) -> None:
        if act.lease_millis:
            self._lease_millis = act.lease_millis
        loaded, exact = self._lookup(act)
        if loaded is None:
            await self._report_fail(
                act,
                f"worker {self.worker_id} has no handler for node {act.node_id!r} of workflow "
                f"{act.workflow!r} version {act.version}",
                True,
            )
            return
        local = (
            exact
            and self.options.use_local_modes
            and act.kind != "JOIN"
            and act.execution_mode in (ExecutionMode.LOCAL_SYNC.value, ExecutionMode.LOCAL_ASYNC.value)
        )
        if local and self._advance_supported is None:
            if self._probe is None:
                self._probe = asyncio.ensure_future(self._probe_advance(act))
            await asyncio.shield(self._probe)
            if self._advance_supported is None:
                self._probe = None  # inconclusive (the token moved on?): the next activation asks again
        if local and self._advance_supported:
            await _LocalRun(self, loaded, act).run()
        else:
            await self._run_one(loaded, act)

    async def _probe_advance(self, act: pb.TaskActivation) -> None:
        """Does the server implement AdvanceRun? (An empty, non-final AdvanceRun is a heartbeat.)"""
        try:
            await self._rpc(
                "AdvanceRun", pb.AdvanceRunRequest(task_id=act.task_id, lease_owner=act.lease_owner)
            )
            self._advance_supported = True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                log.warning("server has no AdvanceRun; running every workflow in SERVER style")
                self._advance_supported = False
            else:
                self._advance_supported = None  # unknown still: decide on a later activation

    def _step_info(self, loaded: _Loaded, act: pb.TaskActivation, node_id: str, attempt: int) -> Step:
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
        )

    async def call_handler(self, loaded: _Loaded, node_id: str, context: dict[str, Any], info: Step) -> Any:
        """Run the handler of ``node_id`` on ``context``; returns its raw result."""
        kind, fn = loaded.blueprint.handlers[node_id]
        ctype = loaded.blueprint.context_type
        if kind == HandlerKind.COMBINE:
            base = _typed(context["base"], ctype)
            branches = [_typed(b, ctype) for b in context["branches"]]
            args: tuple[Any, ...] = (base, branches)
        else:
            args = (_typed(context, ctype),)
        self.stats.steps += 1
        if loaded.blueprint.is_async[node_id]:
            token = _current_step.set(info)
            try:
                return await fn(*args)
            finally:
                _current_step.reset(token)
        inline = self._inline.inline(fn)
        if inline:
            return _timed_call(self._inline, fn, args, info, True)
        assert self._pool is not None
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, ctx.run, _timed_call, self._inline, fn, args, info, False
        )

    async def _run_one(self, loaded: _Loaded, act: pb.TaskActivation) -> None:
        """SERVER style: one step, CompleteTask or FailTask."""
        context = _decode(act.context_json) if act.context_json else {}
        info = self._step_info(loaded, act, act.node_id, act.attempt)
        self._watch(act, None)
        kind = loaded.blueprint.handlers[act.node_id][0]
        try:
            try:
                result = await self.call_handler(loaded, act.node_id, context, info)
                outcome = _outcome(kind, act.node_id, result, context)
            except Exception as exc:  # the handler raised: report it
                await self._report_fail(act, _describe(exc), not isinstance(exc, PermanentError))
                return
        finally:
            self._unwatch(act)
        if isinstance(outcome, _Failure):
            await self._report_fail(act, outcome.message, outcome.retryable)
            return
        request = pb.CompleteTaskRequest(task_id=act.task_id, lease_owner=act.lease_owner)
        if kind == HandlerKind.PREDICATE:
            request.predicate_value = bool(outcome)
        elif outcome is not None:
            request.context_json = _encode(outcome)
        await self._report("CompleteTask", request)

    async def _report(self, method: str, request: Any) -> Any:
        """Send a report; a refusal (the instance moved on) is logged and dropped."""
        delay = 0.1
        for _ in range(8):
            try:
                return await self._rpc(method, request)
            except grpc.RpcError as exc:
                code = exc.code()
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    await asyncio.sleep(delay)  # the server restarts or the database is down: retry
                    delay = min(delay * 2, 3.0)
                    continue
                log.info("%s refused: %s", method, exc.details())
                return None
        log.warning(
            "%s gave up after retries; the lease will expire and the step will be redelivered", method
        )
        return None

    async def _report_fail(self, act: pb.TaskActivation, message: str, retryable: bool) -> None:
        await self._report(
            "FailTask",
            pb.FailTaskRequest(
                task_id=act.task_id, lease_owner=act.lease_owner, message=message, retryable=retryable
            ),
        )

    def _watch(self, act: pb.TaskActivation, run: _LocalRun | None) -> None:
        """Heartbeat ``act`` while it runs (one loop serves every in-flight step of this worker)."""
        self._watched[act.task_id] = (act, run, time.monotonic())
        if self._heartbeater is None or self._heartbeater.done():
            self._heartbeater = asyncio.ensure_future(self._heartbeat_loop())

    def _unwatch(self, act: pb.TaskActivation) -> None:
        self._watched.pop(act.task_id, None)

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat_seconds or max(self._lease_millis / 3000, 0.05)
        while self._watched or self._running:
            await asyncio.sleep(interval)
            now = time.monotonic()
            due = [(a, r) for a, r, since in list(self._watched.values()) if now - since >= interval * 0.9]
            if due:
                await asyncio.gather(*(self._heartbeat(a, r) for a, r in due))

    async def _heartbeat(self, act: pb.TaskActivation, run: _LocalRun | None) -> None:
        request = pb.HeartbeatTaskRequest(task_id=act.task_id, lease_owner=act.lease_owner)
        try:
            result = await self._rpc("HeartbeatTask", request)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and act.task_id in self._watched:
                log.info("step %s of %s abandoned: %s", act.node_id, act.instance_id, exc.details())
                if run is not None:
                    run.abandoned = True
                self._unwatch(act)
            return
        if run is not None:
            run.lease_expires_at = max(run.lease_expires_at, result.lease_expires_at)


# ---------------------------------------------------------------------- the local-run driver


class _Failure:
    __slots__ = ("message", "retryable")

    def __init__(self, message: str, retryable: bool) -> None:
        self.message = message
        self.retryable = retryable


def _timed_call(policy: _InlinePolicy, fn: Any, args: tuple[Any, ...], info: Step, inline: bool) -> Any:
    """Call a sync handler with its Step set, and tell the policy how long it took."""
    token = _current_step.set(info)
    started = time.perf_counter()
    try:
        return fn(*args)
    finally:
        policy.observe(fn, time.perf_counter() - started, inline)
        _current_step.reset(token)


def _typed(value: dict[str, Any], ctype: type[Any]) -> Any:
    if ctype is dict:
        return dict(value)
    return msgspec.convert(value, ctype)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _outcome(kind: str, node_id: str, result: Any, before: dict[str, Any]) -> Any:
    """A handler's result as a context dict / bool, or a non-retryable _Failure naming the problem."""
    if kind == HandlerKind.PREDICATE:
        if not isinstance(result, bool):
            return _Failure(f"predicate {node_id!r} returned {type(result).__name__}, not bool", False)
        return result
    if result is None:
        return None if kind == HandlerKind.TASK else before.get("base", {})
    if isinstance(result, dict):
        return result
    if isinstance(result, msgspec.Struct):
        return msgspec.to_builtins(result)
    return _Failure(f"step {node_id!r} returned {type(result).__name__}; return the context (or None)", False)


class _LocalRun:
    """One claimed token driven locally through consecutive same-queue steps (design doc §4, §8).

    Consecutive *sync* handlers run back to back inside one thread-pool call (a "segment"), up
    to the next flush point, so a long LOCAL_ASYNC run pays one thread hop, not one per step.
    ``async def`` handlers run on the event loop, one at a time.
    """

    def __init__(self, worker: Worker, loaded: _Loaded, act: pb.TaskActivation) -> None:
        self.worker = worker
        self.loaded = loaded
        self.act = act
        self.sync = act.execution_mode == ExecutionMode.LOCAL_SYNC.value
        self.batch: list[tuple[Any, ...]] = []
        self.lease_expires_at = act.lease_expires_at
        self.abandoned = False
        self.steps_run = 0
        self.last_flush = time.monotonic()
        self.max_steps = act.max_local_steps
        # where the run is: the node to run next, its context and attempt
        self.node_id = act.node_id
        self.context: dict[str, Any] = _decode(act.context_json) if act.context_json else {}
        self.attempt = act.attempt

    def _lease_low(self) -> bool:
        lease_ms = self.act.lease_millis or self.worker._lease_millis
        remaining = self.lease_expires_at - time.time() * 1000
        return remaining < lease_ms * self.worker.options.lease_margin

    def _after(self, kind: str, outcome: Any) -> tuple[str, Handback | None]:
        """Record a step's outcome and decide: ("next", None), ("flush", None), ("handback", reason)."""
        node_id = self.node_id
        graph = self.loaded.graph
        self.steps_run += 1
        if isinstance(outcome, _Failure):
            # A mid-run failure: flush the successful prefix with the failure (the server retries).
            self.batch.append(("F", node_id, outcome.message, outcome.retryable))
            return "handback", Handback.RETRY
        if kind == HandlerKind.PREDICATE:
            self.batch.append(("P", node_id, outcome))
            next_id = graph.successor(node_id, outcome)
        else:
            if outcome is None:
                self.batch.append(("T", node_id, {}, []))
            else:
                limit = self.act.max_payload_bytes
                if limit:
                    size = len(_encode(outcome))
                    if size > limit:
                        # The server would refuse it: fail this step for good, as SERVER mode does.
                        message = f"step result is {size} bytes; the limit is {limit} bytes"
                        self.batch.append(("F", node_id, message, False))
                        return "handback", Handback.RETRY
                changed, removed = _fast.diff(self.context, outcome)
                self.batch.append(("T", node_id, changed, removed))
                self.context = outcome
            next_id = graph.successor(node_id, True)
        assert next_id is not None
        worker = self.worker
        reason = graph.classify(next_id, worker.queues)
        if reason is None:
            if worker._closing:
                reason = Handback.SHUTDOWN
            elif self.abandoned:
                reason = Handback.NOT_RUNNING
            elif self.max_steps and self.steps_run >= self.max_steps:
                reason = Handback.MAX_STEPS
            elif self._lease_low():
                reason = Handback.LEASE_BUDGET
        if reason is not None:
            return "handback", reason
        self.node_id = next_id
        self.attempt = 1
        opts = worker.options
        if (
            self.sync
            or len(self.batch) >= opts.local_batch_size
            or graph.is_checkpoint(node_id)
            or (opts.flush_interval > 0 and time.monotonic() - self.last_flush >= opts.flush_interval)
        ):
            return "flush", None
        return "next", None

    def _sync_segment(self, inline: bool = False) -> tuple[str, Handback | None]:
        """Run sync handlers back to back until a flush point or an async handler.

        In a pool thread (``inline`` False), or on the event loop for as long as each handler
        is one the inline policy trusts to be quick ("thread": hand the rest to the pool).
        """
        blueprint = self.loaded.blueprint
        worker = self.worker
        policy = worker._inline
        while True:
            node_id = self.node_id
            if blueprint.is_async[node_id]:
                return "async", None
            kind, fn = blueprint.handlers[node_id]
            if inline and not policy.inline(fn):
                return "thread", None
            info = worker._step_info(self.loaded, self.act, node_id, self.attempt)
            worker.stats.steps += 1
            try:
                result = _timed_call(
                    policy, fn, (_typed(self.context, blueprint.context_type),), info, inline
                )
                outcome = _outcome(kind, node_id, result, self.context)
            except Exception as exc:
                outcome = _Failure(_describe(exc), not isinstance(exc, PermanentError))
            decision = self._after(kind, outcome)
            if decision[0] != "next":
                return decision

    async def run(self) -> None:
        worker = self.worker
        loop = asyncio.get_running_loop()
        blueprint = self.loaded.blueprint
        worker._watch(self.act, self)
        try:
            while True:
                node_id = self.node_id
                if blueprint.is_async[node_id]:
                    kind = blueprint.handlers[node_id][0]
                    info = worker._step_info(self.loaded, self.act, node_id, self.attempt)
                    try:
                        result = await worker.call_handler(self.loaded, node_id, self.context, info)
                        outcome = _outcome(kind, node_id, result, self.context)
                    except Exception as exc:
                        outcome = _Failure(_describe(exc), not isinstance(exc, PermanentError))
                    decision = self._after(kind, outcome)
                else:
                    decision = ("thread", None)
                    if worker._inline.inline(blueprint.handlers[node_id][1]):
                        decision = self._sync_segment(inline=True)
                    if decision[0] == "thread":
                        assert worker._pool is not None
                        ctx = contextvars.copy_context()
                        decision = await loop.run_in_executor(worker._pool, ctx.run, self._sync_segment)
                    if decision[0] == "async":
                        continue
                what, reason = decision
                if what == "handback":
                    await self._flush(True, reason)
                    return
                if what == "flush":
                    if not await self._flush(False, None):
                        return
        except _Abandon:
            return
        finally:
            worker._unwatch(self.act)
            worker.stats.local_run_lengths.append(self.steps_run)

    async def _flush(self, final: bool, reason: Handback | None) -> bool:
        """AdvanceRun with the buffered steps; False if the run must stop (instance not RUNNING)."""
        request = pb.AdvanceRunRequest(
            task_id=self.act.task_id,
            lease_owner=self.act.lease_owner,
            steps_batch=_fast.encode_batch(self.batch),
            final=final,
            handback_reason=reason.value if reason is not None else "",
        )
        self.batch = []
        self.last_flush = time.monotonic()
        if reason is not None:
            self.worker.stats.handbacks[reason.value] += 1
        result = await self.worker._report("AdvanceRun", request)
        if result is None:
            raise _Abandon()
        if result.instance_status != "RUNNING" or (not final and result.token_status != "RUNNING"):
            if not final:
                self.worker.stats.handbacks[Handback.NOT_RUNNING.value] += 1
            return False
        if result.lease_expires_at:
            self.lease_expires_at = result.lease_expires_at
        return True
