"""The Worker: wires options, transport, handlers, the pull loop, heartbeats and local runs together.

Lifecycle only; each job lives in its own module of this package (see ``__init__``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._client.targets import check_targets
from .._logging import configure_logging
from .._loop import run
from .._model import ExecutionMode, NodeKind
from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._security.credentials import Credentials, check_credentials
from ..client import AsyncClient, Client
from ..workflow import Blueprint, Workflow
from .connect import register_when_reachable
from .handlers import HandlerCaller, InlinePolicy
from .heartbeats import Heartbeats
from .http import Pulse, WorkerHttp, start_worker_http
from .loaded import LoadedBlueprint
from .local_run import AdvanceSupport, LocalRun, LocalRunEnv
from .options import WorkerOptions, check_options
from .outcomes import Context
from .poller import Poller
from .reporter import Reporter
from .server_step import release_step, run_server_step
from .stall_guard import StallGuard
from .stats import WorkerStats
from .step import Step
from .stream import StreamTransport
from .transport import CountedTransport, Transport, UnaryTransport

__all__ = ["Worker"]

log = logging.getLogger("wiggle.worker")

_LOCAL_MODES = (ExecutionMode.LOCAL_SYNC.value, ExecutionMode.LOCAL_ASYNC.value)


class Worker:
    """Runs the steps of ``blueprints`` pulled from a server.

    ``Worker("127.0.0.1:7233", [blueprint], WorkerOptions(concurrency=16))``; then ``run()``
    (blocking, stops on SIGINT/SIGTERM), or ``await start()`` ... ``await close()``.
    """

    def __init__(
        self,
        client_or_target: AsyncClient | str | Sequence[str],
        blueprints: Iterable[Blueprint[Any]],
        options: WorkerOptions | None = None,
        *,
        credentials: Credentials | None = None,
    ) -> None:
        self.options = options or WorkerOptions()
        check_options(self.options)
        # several addresses (a list, "a:1,b:2", or a DNS name resolving to several): the worker's
        # channel moves to another server when its own is down (wiggle/_client/targets.py)
        self._target = client_or_target
        check_credentials(credentials)
        self._credentials = credentials  # None: WIGGLE_TLS_CA, WIGGLE_TOKEN, ... (credentials.py)
        self._client = _shared_client(client_or_target)
        self._own_client = self._client is None
        self.blueprints = _blueprint_list(blueprints)
        if not self.blueprints:
            raise ValueError("a worker needs at least one blueprint")
        for index, bp in enumerate(self.blueprints):
            if not isinstance(bp, Blueprint):
                hint = " (call .build() on it)" if isinstance(bp, Workflow) else ""
                raise TypeError(
                    f"blueprints[{index}] is a {type(bp).__name__}, not a Blueprint{hint}: a worker "
                    "runs built workflows, Workflow.define(...)...build()"
                )
        self._exact: dict[tuple[str, str], LoadedBlueprint] = {}
        self._by_name: dict[str, list[LoadedBlueprint]] = {}
        for bp in self.blueprints:
            loaded = LoadedBlueprint(bp)
            self._exact[(bp.name, bp.version)] = loaded
            self._by_name.setdefault(bp.name, []).append(loaded)
        used = set().union(*(bp.queues() for bp in self.blueprints))
        queues = self.options.queues
        if queues is None:
            queues = sorted(used)
        if not queues:
            raise ValueError("the worker serves no queues")
        unused = sorted(set(queues) - used)
        if unused:  # a typo serves nothing and says nothing (a docs trial); an old version's queue is fine
            log.warning(
                "this worker serves %s, which no step of its blueprints uses (theirs: %s): a typo? "
                "(a queue that an older version of a workflow used is fine: its steps run by name)",
                ", ".join(map(repr, unused)),
                ", ".join(sorted(used)) or "none",
            )
        self.queues: frozenset[str] = frozenset(queues)
        self._chain_queues = sorted(self.queues)  # a report asking for its next step names them
        self.worker_id = (
            self.options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        )
        self.stats = WorkerStats()
        self._warned_missing: set[tuple[str, str, str]] = set()
        self._inline = InlinePolicy(self.options.sync_handlers, self.options.inline_threshold_ms)
        self._caller = HandlerCaller(self._inline, self.stats, self.worker_id)
        self._advance = AdvanceSupport()
        self._http: WorkerHttp | None = None  # /healthz, /readyz, /metrics (http.py)
        self._pulse = Pulse()  # the event loop's turns, for /healthz (only with the HTTP port)
        # where the worker is (what /readyz says): "not started", "starting" (waiting for its
        # server), "running", "draining", "stopped"; written on the loop (only by _enter), read by
        # the HTTP thread. _running and _closing are read on the hot path: plain attributes
        self._phase = "not started"
        self._running = False
        self._closing = False
        self._crashing = False  # the test kit's stop_worker(crash=True): cuts left to their leases
        #: steps (or local runs) the last close cut at the end of its drain (wiggle worker exits
        #: at once then, not waiting for a sync handler's thread: wiggle/_cli/worker.py)
        self.cut_steps = 0
        self._hurry = asyncio.Event()  # a second stop signal: cut the drain short (run_async)
        self._transport: Transport | None = None
        self._reporter: Reporter | None = None
        self._heartbeats: Heartbeats | None = None
        self._poller: Poller | None = None
        self._guard: StallGuard | None = None
        self._run_env: LocalRunEnv | None = None

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Connect, register the blueprints, start pulling."""
        if self._running:
            return
        opts = self.options
        self._hurry.clear()
        self._enter("starting")  # before the port opens: its first /readyz says so
        try:
            # the port first: a probe is answered while the worker waits for its server
            self._http = start_worker_http(self, self._pulse, opts.metrics_port, opts.metrics_host)
            if self._client is None:
                assert not isinstance(self._target, AsyncClient)
                self._client = AsyncClient(self._target, credentials=self._credentials, balance=opts.balance)
            if opts.register:  # waits, up to connect_seconds, for a server that is not there yet
                await register_when_reachable(self._client, self.blueprints, opts.connect_seconds)
        except BaseException:  # no server, a port taken, or stopped meanwhile: undo the above
            self._enter("not started")
            await self._let_go()
            raise
        stub = pb_grpc.WiggleControlPlaneStub(self._client.channel)
        inner: Transport
        stream: StreamTransport | None = None
        if opts.transport == "stream":
            inner = stream = StreamTransport(stub)
        else:
            inner = UnaryTransport(stub)
        transport = self._transport = CountedTransport(inner, self.stats.calls)
        reporter = self._reporter = Reporter(transport)
        reporter.latency = self.stats.report_seconds
        heartbeats = self._heartbeats = Heartbeats(
            transport, opts.heartbeat_seconds, lambda: self._running, self._caller.give_up
        )
        self._caller.pool = ThreadPoolExecutor(
            opts.threads or opts.concurrency, thread_name_prefix="wiggle-step"
        )
        has_async = any(any(bp.is_async.values()) for bp in self.blueprints)
        if opts.sync_handlers != "thread" or has_async:  # a handler may hold the loop: heartbeat then
            self._guard = StallGuard(self._inline, heartbeats, self._blocking_client)
            self._guard.start()
        self._run_env = LocalRunEnv(
            caller=self._caller,
            reporter=reporter,
            heartbeats=heartbeats,
            options=opts,
            stats=self.stats,
            queues=self.queues,
            closing=lambda: self._closing,
            advance=self._advance,
            hands_back_cuts=self._hands_back_cuts,
        )
        poller = self._poller = Poller(
            transport,
            reporter,
            self.worker_id,
            sorted(self.queues),
            opts.concurrency,
            opts.poll_wait_seconds,
            self._execute,
        )
        if stream is not None:
            stream.on_orphan_tasks = poller.hand_back_orphans
        self._enter("running")
        poller.start()
        log.info("worker %s serving %s", self.worker_id, ", ".join(sorted(self.queues)))

    async def close(self, timeout: float | None = None) -> None:
        """Stop pulling, let running steps finish (local runs flush and hand back), disconnect.

        Running steps get ``timeout`` seconds (default ``options.drain_seconds``, 30); a step
        still running then is cut and handed back, READY at once on the server (no attempt
        spent), with the steps its local run finished and had not reported; one whose hand-back
        fails waits out its lease (docs/deployment.md)."""
        if not self._running:
            return
        if timeout is None:
            timeout = self.options.drain_seconds
        self._enter("draining")
        if self._poller is not None:
            # a crash (the test kit's) asks nothing: a killed process sends no heartbeat
            check = None if self._crashing else self._check_attempts
            self.cut_steps, ended = await self._poller.stop(timeout, self._hurry, check, self._attempt_over)
            when = "at a second stop signal" if self._hurry.is_set() else f"after the {timeout:g} s drain"
            if self.cut_steps:
                log.warning(
                    "%d step(s) still running %s were cut and handed back: each runs again on "
                    "another worker (WorkerOptions.drain_seconds, WIGGLE_WORKER_DRAIN_SECONDS)",
                    self.cut_steps,
                    when,
                )
            if ended:  # not cut: the server had ended them (their handlers were given up)
                log.info(
                    "%d step(s) still running %s were stopped, not handed back: the server had "
                    "ended their attempts (instance finished, time limit passed or lease lost)",
                    ended,
                    when,
                )
        if self._guard is not None:
            await asyncio.to_thread(self._guard.stop)
            self._guard = None
        if self._heartbeats is not None:
            await self._heartbeats.close()
        if self._transport is not None:
            await self._transport.close()
        if self._caller.pool is not None:
            self._caller.pool.shutdown(wait=False)
        self._enter("stopped")
        await self._let_go()

    def _blocking_client(self) -> Client:
        """A blocking client to this worker's server, for the stall guard's thread."""
        assert self._client is not None
        return Client(self._client.target, credentials=self._client.credentials)

    def handler_threads_left(self, grace: float = 1.0) -> int:
        """After ``close()``: how many pool threads still run a handler ``grace`` seconds on (a
        step cut at the drain's end, or a sync step abandoned at its time limit). Python waits
        for them at exit; ``wiggle worker`` does not (wiggle/_cli/worker.py)."""
        pool = self._caller.pool
        threads = list(getattr(pool, "_threads", ()))  # ThreadPoolExecutor's own, 3.8 to 3.13
        deadline = time.monotonic() + grace
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(thread.is_alive() for thread in threads)

    def _enter(self, phase: str) -> None:
        self._phase = phase
        self._running = phase == "running"
        self._closing = phase in ("draining", "stopped")

    async def _let_go(self) -> None:
        """Close the HTTP port, the loop's pulse and the client this worker made."""
        if self._http is not None:
            await asyncio.to_thread(self._http.close)  # waits for the serving thread's next turn
            self._http = None
        await self._pulse.stop()
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None

    def readiness(self) -> tuple[bool, str]:
        """(ready, why), what the HTTP port's /readyz answers: ready while the worker serves its
        queues and its server answers its polls. Safe from any thread (it reads attributes the
        worker's loop writes)."""
        phase = self._phase
        if phase == "starting":
            given = self._target
            target = given.target if isinstance(given, AsyncClient) else given
            target = target if isinstance(target, str) else ",".join(target)
            return False, f"waiting for its server at {target}"
        if phase != "running":
            return False, f"the worker is {phase}"
        poller = self._poller
        trouble = poller.trouble if poller is not None else None
        if trouble is not None:
            since, why = trouble
            return False, f"its polls have failed for {time.monotonic() - since:.1f} s: {why}"
        return True, f"serving {', '.join(sorted(self.queues))}"

    async def run_async(self) -> None:
        """Run until cancelled or until SIGINT/SIGTERM, then close gracefully: running steps get
        ``options.drain_seconds``, and a second signal cuts them at once. A signal while the
        worker still waits for its server to answer ends the wait."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:  # the first stops (a drain); a second cuts what still runs
            if stop.is_set() and not self._hurry.is_set():
                log.warning("a second stop signal: cutting the steps still running")
                self._hurry.set()
            elif not stop.is_set():
                running = len(self._poller.tasks) if self._poller is not None else 0
                log.info(
                    "stopping: %d step(s) running get up to %g s to finish (WorkerOptions.drain_seconds); "
                    "a second stop signal cuts them",
                    running,
                    self.options.drain_seconds,
                )
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal)
        stopped = asyncio.ensure_future(stop.wait())
        starting = asyncio.ensure_future(self.start())
        try:
            await asyncio.wait((starting, stopped), return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a start that failed raises here
                await stopped
            else:
                log.info("worker %s stopped before its server answered", self.worker_id)
        finally:
            stopped.cancel()
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            await self.close()

    def run(self) -> None:
        """Blocking form of run_async, on the loop ``options.event_loop`` names (uvloop where it
        is installed, by default).

        A process whose root logger has no handler gets Wiggle's (WIGGLE_LOG_LEVEL,
        WIGGLE_LOG_FORMAT); a program that set up logging itself keeps its setup.
        """
        configure_logging(only_if_unconfigured=True)
        # uvloop where installed (WorkerOptions.event_loop, wiggle/_loop.py)
        run(self.run_async(), self.options.event_loop, "WorkerOptions.event_loop (WIGGLE_WORKER_EVENT_LOOP)")

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -------------------------------------------------------------- handlers

    async def call_handler(
        self, blueprint: Blueprint[Any], node_id: str, context: Context, info: Step
    ) -> object:
        """Run the handler of ``node_id`` of ``blueprint`` (one this worker serves) on ``context``.

        Returns the handler's raw result; its exception propagates. Only while the worker runs.
        """
        loaded = self._exact.get((blueprint.name, blueprint.version))
        if loaded is None:
            raise ValueError(f"this worker does not serve {blueprint.name!r} version {blueprint.version}")
        return await self._caller.call(loaded, node_id, context, info)

    # -------------------------------------------------------------- executing

    def _lookup(self, act: pb.TaskActivation) -> tuple[LoadedBlueprint | None, bool]:
        exact = self._exact.get((act.workflow, act.version))
        if exact is not None:
            return exact, True
        for loaded in self._by_name.get(act.workflow, ()):
            if act.node_id in loaded.blueprint.handlers:
                return loaded, False
        return None, False

    def _hands_back_cuts(self) -> bool:
        """Whether the step cut now (the current task's) is handed back: the worker is closing,
        not as a crash, and the server has not ended the step's attempt (nothing to hand back)."""
        if not self._closing or self._crashing:
            return False
        heartbeats = self._heartbeats
        return heartbeats is None or heartbeats.attempt_over(asyncio.current_task()) is None

    async def _check_attempts(self) -> None:
        """At the drain's end, before the cut: ask the server about each step still running (a
        heartbeat each, within a second), so that one whose attempt it ended (its instance
        finished meanwhile, say) is given up, not cut and reported as handed back."""
        if self._heartbeats is not None:
            await self._heartbeats.check_now(1.0)

    def _attempt_over(self, task: asyncio.Task[None]) -> bool:
        """Whether ``task`` (the poller's) runs a step whose attempt the server ended."""
        return self._heartbeats is not None and self._heartbeats.attempt_over(task) is not None

    def _running_attempts(self) -> list[tuple[str, str]]:
        """(task id, lease owner) of each step this worker runs now (the test kit asks its
        server about them after it moves the clock: wiggle/_testing/environment.py)."""
        heartbeats = self._heartbeats
        if heartbeats is None:
            return []
        return [(act.task_id, act.lease_owner) for act, _, _ in list(heartbeats.watched.values())]

    def _give_up(self, task_id: str, why: str) -> bool:
        """Give up the step of ``task_id``: its attempt is over on the server (``why``), as a
        refused heartbeat says (Heartbeats.give_up). False if it no longer runs here."""
        return self._heartbeats is not None and self._heartbeats.give_up(task_id, why)

    async def _execute(self, act: pb.TaskActivation) -> None:
        """Run ``act`` in its slot, then each next step its report took in the same call
        (docs/semantics.md#chained-steps), up to ``chain_steps`` in a row and while the chain
        has run less than ``chain_seconds``; then the slot is free for the poller again."""
        stats = self.stats
        stats.in_flight += 1
        try:
            options = self.options
            chain = options.chain_steps
            until = time.monotonic() + options.chain_seconds if options.chain_seconds else math.inf
            taken = 0
            following: pb.TaskActivation | None = act
            while following is not None:
                ask = taken < chain and not self._closing and (taken == 0 or time.monotonic() < until)
                following = await self._execute_one(following, self._chain_queues if ask else ())
                if following is None:
                    break
                poller = self._poller
                if poller is not None and poller.given_back(following.task_id):
                    break  # the late first answer of a resent report brought it: released already
                if self._closing and poller is not None:  # asked before close() began
                    poller.hand_back_orphans([following])
                    break
                taken += 1
                stats.chained += 1
        finally:
            stats.in_flight -= 1

    def _execute_one(
        self, act: pb.TaskActivation, next_queues: Sequence[str] = ()
    ) -> Coroutine[Any, Any, pb.TaskActivation | None]:
        """The coroutine that runs ``act``: released, a local run, or one SERVER-style step. With
        ``next_queues`` (the worker's queues) its CompleteTask, or its local run's handback at a
        fork, a join or a queue change, asks for the instance's next step; it returns the step
        that came with the answer, if any."""
        assert self._reporter is not None and self._heartbeats is not None and self._run_env is not None
        loaded, exact = self._lookup(act)
        if act.lease_millis and (loaded is None or act.node_id not in loaded.heartbeat_timeouts):
            self._heartbeats.lease_millis = act.lease_millis  # the server's (not a step's own)
        if loaded is None:
            message = (
                f"worker {self.worker_id} has no handler for node {act.node_id!r} of workflow "
                f"{act.workflow!r} version {act.version}"
            )
            self.stats.released += 1
            key = (act.workflow, act.version, act.node_id)
            if key not in self._warned_missing:  # once per node: it may bounce back here many times
                self._warned_missing.add(key)
                log.warning(
                    "%s; the step is released for a worker that has it (no attempt consumed)", message
                )
            return release_step(self._reporter, act, message)
        local = (
            exact
            and self.options.use_local_modes
            and act.kind != NodeKind.JOIN
            and act.execution_mode in _LOCAL_MODES
            and self._advance.supported is not False
        )
        if local:
            return LocalRun(self._run_env, loaded, act, next_queues).run()
        return run_server_step(
            self._caller, self._reporter, self._heartbeats, loaded, act, next_queues, self._hands_back_cuts
        )


def _blueprint_list(blueprints: Iterable[Blueprint[Any]]) -> list[Blueprint[Any]]:
    """``blueprints`` as a list; TypeError saying what to pass for a lone Blueprint (or Workflow
    builder), which met "'Blueprint' object is not iterable", or anything else not iterable (as
    the test kit's ``workflows``: wiggle/_testing/arguments.py). The items are checked after."""
    if isinstance(blueprints, (Blueprint, Workflow)):
        raise TypeError(
            f"blueprints is a list of Blueprints, got the {type(blueprints).__name__} {blueprints.name!r} "
            "itself: pass blueprints=[...] (Worker(target, [flow]))"
        )
    try:
        return list(blueprints)
    except TypeError:
        raise TypeError(f"blueprints is a list of Blueprints, got {type(blueprints).__name__}") from None


def _shared_client(client_or_target: AsyncClient | str | Sequence[str]) -> AsyncClient | None:
    """The client whose channel a worker given ``client_or_target`` shares (None: it makes its own).

    The test kit's ``wiggle_env.aio.client`` lends none (wiggle/_testing/sync.py): refused. The
    channel itself is not read here: an AsyncClient makes it on its first call, in that call's
    loop, and a worker is often made before its loop runs."""
    if not isinstance(client_or_target, AsyncClient):
        check_targets(client_or_target)  # its names are resolved by its client, at the start
        return None
    if getattr(client_or_target, "lends_no_channel", False):
        raise TypeError(
            "a Worker shares its client's channel, and wiggle_env.aio.client lends none (its "
            "channel works on the environment's loop only): await wiggle_env.aio.start_worker([...])"
        )
    return client_or_target
