"""WorkflowEnvironment: an embedded server on a virtual clock, in-process workers, a client, helpers.

Time stands still unless moved: ``advance(delta)`` moves it by hand, and while the test waits on
the environment (``result``, ``run``, ``wait``) with time skipping on, the clock jumps to the next
due moment whenever every live instance waits on time (skipping.py). Between the test's own
calls time never jumps, so a test can act on an instance (complete a user task, cancel it)
before a deadline it set up fires. See docs/semantics.md#time-in-tests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import msgspec

from .._client import core
from .._clock import VirtualClock
from .._engine.config import LoadedDefinition
from .._engine.state import (
    FINISHED_INSTANCE_STATUSES,
    InstanceState,
    split_task_id,
    token_instance_id,
)
from .._engine.tokens import leased_token
from .._model import ExecutionMode, NodeKind
from .._server.app import WiggleServer
from .._server.config import ServerConfig
from .._storage.base import InstanceView
from .._workflow_compile import registration_order
from ..client import AsyncClient, HistoryEntry, InstanceInfo, ScheduleInfo, SignalResult
from ..errors import FailedPrecondition, NotFound
from ..worker import Worker, WorkerOptions
from ..workflow import Blueprint

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._client.types import StartOptions
from .arguments import (
    check_worker_naming,
    checked_flag,
    checked_mode,
    checked_text,
    checked_worker_options,
    checked_workers,
    checked_workflows,
    epoch_millis,
    millis_of,
    wait_seconds,
    with_settings,
)
from .diagnosis import UNSERVED_CHECK_SECONDS, UNSERVED_SECONDS, Diagnosis
from .helpers import path_of
from .skipping import TimeSkipper

__all__ = ["WorkflowEnvironment", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 30.0  # real seconds a wait may take before it fails the test
CHECK_SECONDS = 0.005  # how often a wait re-checks whether every instance waits on time
SHOWN_NAMES = 20  # a NotFound names at most this many nodes


def _names(names: Sequence[str]) -> str:
    """``'a', 'b', 'c'``, the first SHOWN_NAMES of ``names`` (a generated workflow may have hundreds)."""
    shown = ", ".join(map(repr, names[:SHOWN_NAMES]))
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


async def _drop_schema(url: str, schema: str) -> None:
    import psycopg  # only with a database URL: the postgres extra is installed then

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # a name we generated


class WorkflowEnvironment:
    """A server, workers and a client for testing workflows, on a clock the test controls.

    ``async with WorkflowEnvironment([blueprint]) as env: done = await env.run(blueprint, ctx)``.

    ``workflows`` are registered and served by ``workers`` in-process workers (``worker_options``
    for each; their ids are ``test-worker-1``...; none when no workflow has a worker step:
    sleeps, signal waits and user tasks need no worker). ``database_url`` selects PostgreSQL (each
    environment in its own schema unless ``database_schema`` is given; the memory store
    otherwise). ``execution_mode`` is what a workflow's DEFAULT mode means here. ``start``
    (an aware datetime) is where virtual time begins (default: now). ``time_skipping=False``
    leaves the clock to ``advance``. Other ``settings`` go to ``ServerConfig``.
    """

    def __init__(
        self,
        workflows: Iterable[Blueprint[Any]] = (),
        *,
        workers: int = 1,
        worker_options: WorkerOptions | None = None,
        database_url: str = "",
        database_schema: str = "",
        execution_mode: ExecutionMode | str = ExecutionMode.SERVER,
        time_skipping: bool = True,
        start: datetime | None = None,
        **settings: Any,
    ) -> None:
        # Each argument checked before anything is made (arguments.py: its checks name it).
        self.workflows = checked_workflows(workflows)
        self.worker_count = checked_workers(workers)
        self.worker_options = checked_worker_options(worker_options) or WorkerOptions(poll_wait_seconds=1.0)
        database_url = checked_text(database_url, "database_url")
        database_schema = checked_text(database_schema, "database_schema")
        check_worker_naming(self.worker_count, self.worker_options)
        self.time_skipping = checked_flag(time_skipping, "time_skipping")
        self.clock = VirtualClock(epoch_millis(start))
        config = ServerConfig(port=0, execution_mode=checked_mode(execution_mode))
        if database_url:
            schema = database_schema or f"wiggle_env_{uuid.uuid4().hex[:12]}"
            config = msgspec.structs.replace(config, database_url=database_url, database_schema=schema)
        if settings:
            config = with_settings(config, settings)
        self.server = WiggleServer(config, clock=self.clock)
        # A step a worker gives back for want of its handler waits 200 ms of the server's time
        # before the next claim, for another worker to take it. On a clock that stands still that
        # wait is a moment to jump to, and a worker without the handler releasing it again and
        # again ran virtual time on by minutes a second, expiring deadlines nobody waited out: here
        # it is due at once, so the releases cost real time only (docs/testing.md).
        self.server.engine.config.release_delay_millis = 0
        self.skipper = TimeSkipper(self.server.instances, self.clock, self._live_worker)
        self.skipper.workflows.update(bp.name for bp in self.workflows)
        self.workers: list[Worker] = []
        self._worker_ids: set[str] = set()
        self._diagnosis = Diagnosis(
            self.server.instances,
            self.server.service.pollers,
            self.clock,
            self.skipper,
            self.workers,
            self._live_worker,
        )
        self._workers_started = 0
        self._client: AsyncClient | None = None
        self._started = False
        self._drop_schema = bool(database_url) and not database_schema  # ours: dropped on stop

    # ------------------------------------------------------------------ lifecycle

    @property
    def target(self) -> str:
        """host:port of the embedded server."""
        return self.server.target

    @property
    def client(self) -> AsyncClient:
        """An AsyncClient connected to the embedded server."""
        if self._client is None:
            self._client = AsyncClient(self.target)
        return self._client

    async def start(self) -> WorkflowEnvironment:
        """Start the server, register the workflows and start the workers."""
        if self._started:
            return self
        await self.server.start()
        self._started = True
        try:
            # Bound here to the environment's loop, even with no workflow to register: an
            # AsyncClient serves the loop its channel is made on, on its first use
            # (wiggle/_client/link.py), and AsyncView.client (sync.py) reaches this client from
            # other threads, whose first touch would bind it to their loop.
            self.client.channel  # noqa: B018
            for bp in registration_order(self.workflows):  # a sub-workflow's child first
                await self.client.register(bp)
            if self._needs_workers():
                for _ in range(self.worker_count):
                    await self.start_worker(self.workflows)
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        """Stop the workers, the client and the server; drop the schema the environment made up."""
        for worker in list(self.workers):
            await self.stop_worker(worker)
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._started:
            self._started = False
            await self.server.stop(grace=1.0)
            if self._drop_schema:
                await _drop_schema(self.server.config.database_url, self.server.config.database_schema)

    async def __aenter__(self) -> WorkflowEnvironment:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ workers

    async def start_worker(
        self, blueprints: Iterable[Blueprint[Any]] | None = None, options: WorkerOptions | None = None
    ) -> Worker:
        """Start one more in-process worker (for ``blueprints``, by default the environment's)."""
        opts = options or self.worker_options
        if not opts.worker_id:
            self._workers_started += 1  # ids never repeat, even after a worker stopped
            opts = msgspec.structs.replace(opts, worker_id=f"test-worker-{self._workers_started}")
        served = list(self.workflows if blueprints is None else blueprints)
        self.skipper.workflows.update(bp.name for bp in served)
        worker = Worker(self.client, served, opts)
        await worker.start()
        self.workers.append(worker)
        self._worker_ids.add(worker.worker_id)
        return worker

    async def stop_worker(
        self, worker: Worker, timeout: timedelta | float = 1.0, *, crash: bool = False
    ) -> None:
        """Stop ``worker`` as ``Worker.close`` does: its running steps get ``timeout`` seconds,
        then are cut and handed back (READY at once, no attempt spent), a local run's unreported
        steps with them. ``crash=True`` stops it as a killed process would: the steps it leaves
        running wait out their leases (which time skipping reaches) and count as failed attempts
        ("lease expired (worker unreachable)"), a LOCAL_ASYNC run's unreported steps run again."""
        seconds = wait_seconds(timeout)
        if not crash:  # a step the server ended is given up now, not waited for and then cut
            await self._give_up_ended_attempts([worker])
        self._worker_ids.discard(worker.worker_id)
        if worker in self.workers:
            self.workers.remove(worker)
        worker._crashing = crash
        await worker.close(timeout=seconds)

    def _needs_workers(self) -> bool:
        """Whether the environment's workflows give a worker something to serve.

        A workflow without worker steps (only sleeps, signal waits, user tasks...) runs on the
        server alone; a Worker with no queue refuses to start, so none is started for it.
        """
        queues = self.worker_options.queues
        if queues is not None:
            return bool(self.workflows) and bool(queues)
        return any(bp.queues() for bp in self.workflows)

    def _live_worker(self, worker_id: str) -> bool:
        return bool(worker_id) and worker_id in self._worker_ids

    async def _give_up_ended_attempts(self, workers: Iterable[Worker] | None = None) -> None:
        """Tell each worker (of the environment, or ``workers``) which of the steps it runs the
        server has ended, as a refused heartbeat would: the worker gives them up at once (an
        async handler cancelled, a sync one abandoned in its thread), as at a real time limit.

        Called after the clock moves (``advance``) and after ``cancel``. A worker's own
        heartbeats come every third of the lease in real time, and its own time limits count in
        real time too, so without this a handler the virtual clock had timed out ran on for its
        limit's real seconds (an outside trial's async handler outlived its FAILED instance by
        5 s). The server's state is read, not heartbeated: a heartbeat would renew the lease of
        every step still held, and so move the heartbeat timeouts the test is reaching."""
        now = self.clock.now()
        for worker in list(self.workers if workers is None else workers):
            for task_id, owner in worker._running_attempts():
                why = await self._attempt_ended(task_id, owner, now)
                if why is not None:
                    worker._give_up(task_id, why)

    async def _attempt_ended(self, task_id: str, owner: str, now: int) -> str | None:
        """Why the server would refuse a heartbeat of ``task_id`` by ``owner`` now (its attempt
        is over), or None while the attempt holds: the check a report meets (leased_token)."""
        token_id, _ = split_task_id(task_id)
        try:
            view = await self.server.instances.get_instance(token_instance_id(token_id))
        except NotFound:
            return f"instance {token_instance_id(token_id)} no longer exists"
        state = InstanceState(view.instance, {t.id: t for t in view.tokens})
        try:
            leased_token(state, task_id, owner, now)
        except FailedPrecondition as exc:
            return str(exc)
        return None

    # ------------------------------------------------------------------ time

    def now(self) -> datetime:
        """The virtual time (UTC)."""
        return datetime.fromtimestamp(self.clock.now() / 1000, tz=timezone.utc)

    def now_millis(self) -> int:
        """The virtual time in epoch milliseconds (the unit of every timestamp in history)."""
        return self.clock.now()

    async def advance(self, delta: timedelta | float) -> datetime:
        """Move virtual time forward by ``delta`` (a timedelta or seconds) and run what became due.

        A step running on a worker of the environment whose time limit (or heartbeat timeout)
        this passes is given up on the worker at once: an ``async def`` handler is cancelled, a
        sync one abandoned in its thread, as at a real limit."""
        self.clock.advance(millis_of(delta, "advance"))
        await self.skipper.tick()
        await self._give_up_ended_attempts()
        return self.now()

    async def sleep(self, delta: timedelta | float, timeout: timedelta | float = DEFAULT_TIMEOUT) -> datetime:
        """Let ``delta`` of virtual time pass, stopping at every due moment on the way.

        Unlike ``advance`` (one jump, then one round of clock duties), each timer, deadline and
        schedule tick before the end fires at its own moment, and the steps it releases run
        before time moves on: a daily schedule over ``sleep(timedelta(days=3))`` starts three
        instances, each at its tick. TimeoutError if the instances stay busy ``timeout`` s (real).
        """
        target = self.clock.now() + millis_of(delta, "sleep")
        timeout = wait_seconds(timeout)
        deadline = time.monotonic() + timeout
        while True:
            if await self.skipper.skip(until=target):
                continue
            if self.clock.now() >= target and not await self.skipper.busy():
                return self.now()
            if time.monotonic() >= deadline:
                views = await self.skipper.live()
                running = await self._diagnosis.running(views) + await self._diagnosis.holding(views)
                raise TimeoutError(
                    f"sleep: instances stayed busy for {timeout} s (real) at virtual {self.now().isoformat()}"
                    + "".join(f"; {hint}" for hint in running)
                )
            await asyncio.sleep(CHECK_SECONDS)

    # ------------------------------------------------------------------ instances

    async def start_workflow(
        self,
        workflow: Blueprint[Any] | str,
        context: Any = None,
        *,
        correlation_id: str = "",
        request_id: str = "",
        **options: Unpack[StartOptions],
    ) -> InstanceInfo:
        """Start an instance (registering the blueprint first); its snapshot.

        The start options are the client's (docs/flow-control.md); a ``start_delay`` counts on
        the environment's virtual clock, and ``start_at`` is a moment on it (``now()``).
        """
        if isinstance(workflow, Blueprint):
            await self.client.register(workflow)
        self.skipper.workflows.add(workflow.name if isinstance(workflow, Blueprint) else workflow)
        return await self.client.start(
            workflow,
            context,
            correlation_id=correlation_id,
            request_id=request_id,
            **options,
        )

    async def wait(
        self,
        instance_id: str | InstanceInfo,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        *,
        skip: bool | None = None,
    ) -> InstanceInfo:
        """Wait until the instance finishes (any status), skipping idle time; TimeoutError if it does not.

        ``skip`` overrides the environment's ``time_skipping`` for this wait.
        """
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        skipping = self.time_skipping if skip is None else checked_flag(skip, "skip")
        instances = self.server.instances
        timeout = wait_seconds(timeout)
        started = time.monotonic()
        deadline = started + timeout
        stranded_since: float | None = None  # since when a step waits on a queue nobody serves
        checked_at = started
        while True:
            view = await instances.wait_finished(iid, CHECK_SECONDS)
            if view.instance.status in FINISHED_INSTANCE_STATUSES:
                return await self.client.get(iid)
            self.skipper.workflows.add(view.instance.workflow)  # started by any client: still ours
            if skipping and await self.skipper.skip():
                continue
            now = time.monotonic()
            if now - checked_at >= UNSERVED_CHECK_SECONDS:
                checked_at = now
                stranded = bool(self._diagnosis.unserved(await self.client.get(iid)))
                if not stranded and skipping:  # time waits on another instance's unserved step
                    stranded = await self._diagnosis.held_for_good(view)
                stranded_since = (stranded_since or now) if stranded else None
            gave_up = stranded_since is not None and now - stranded_since >= UNSERVED_SECONDS
            if now >= deadline or gave_up:
                info = await self.client.get(iid)
                raise await self._diagnosis.still_running(
                    info, view.instance.status, now - started, skipping, gave_up
                )

    async def _definition(self, iid: str) -> LoadedDefinition:
        """The definition the instance of id ``iid`` runs: its workflow's version."""
        instance = (await self.server.instances.get_instance(iid)).instance
        return (await self.server.instances.get_workflow(instance.workflow, instance.version)).loaded

    async def result(
        self, instance_id: str | InstanceInfo, timeout: timedelta | float = DEFAULT_TIMEOUT
    ) -> InstanceInfo:
        """Wait for completion; WorkflowFailed if it FAILED or was CANCELLED, TimeoutError if it runs on."""
        seconds = wait_seconds(timeout)
        return core.check_result(await self.wait(instance_id, seconds), seconds)

    async def run(
        self,
        workflow: Blueprint[Any] | str,
        context: Any = None,
        *,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        check: bool = True,
    ) -> InstanceInfo:
        """Start an instance and wait for it to finish, in one call (``check``: raise unless COMPLETED)."""
        timeout = wait_seconds(timeout)  # before the start: a wrong one starts nothing
        info = await self.start_workflow(workflow, context)
        if check:
            return await self.result(info, timeout)
        return await self.wait(info, timeout)

    async def wait_for(
        self,
        instance_id: str | InstanceInfo,
        node: str,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        *,
        skip: bool | None = None,
    ) -> InstanceInfo:
        """Wait until a token of the instance is at ``node``, or has been; its snapshot.

        The instance's history decides as well as its tokens: a step passed between two looks
        (started, finished and moved on at once), or one run before the call, counts as reached,
        and this returns at once with the snapshot as it is then, the token maybe past ``node``.
        Idle time is skipped on the way (unless ``skip`` or the environment says otherwise), but
        never past the arrival: the clock jumps only while no token of the instance is or has
        been at ``node``, so a deadline or timer that starts at ``node`` (or after it) has not
        run when this returns, unless it was due at the arrival already. For a user task:
        ``await env.wait_for(info, "approve")``, then ``complete_user_task``. AssertionError,
        with the path it took, if the instance finishes without reaching ``node``; NotFound at
        once if the instance's workflow version has no node ``node`` (a node of a sub-workflow
        is its child instance's).
        """
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        skipping = self.time_skipping if skip is None else checked_flag(skip, "skip")
        timeout = wait_seconds(timeout)
        deadline = time.monotonic() + timeout
        loaded = await self._definition(iid)
        if node not in loaded.nodes:
            raise NotFound(
                f"workflow {loaded.definition.name!r} (version {loaded.version}) has no node {node!r}; "
                f"its nodes: {_names([n.id for n in loaded.definition.nodes])}"
            )

        async def reached(views: Sequence[InstanceView] = ()) -> bool:
            # A token there now (in ``views``, the skipper's look), or an arrival in the history:
            # a quick step's token is gone before the next look (CHECK_SECONDS later), and
            # before, such a wait ran the instance to its end and said it never got there.
            there = any(v.instance.id == iid and any(t.node_id == node for t in v.tokens) for v in views)
            return there or any(e.node_id == node for e in await self.server.instances.history(iid))

        while True:
            info = await self.client.get(iid)
            if any(t.node_id == node for t in info.tokens):
                return info
            if await reached():  # in the history, maybe after ``info`` was read: read it again
                return await self.client.get(iid)
            if info.finished:
                raise AssertionError(
                    f"instance {iid} finished ({info.status}) without reaching {node!r}; "
                    f"its path: {path_of(await self.client.history(iid))}"
                )
            self.skipper.workflows.add(info.workflow)
            if skipping and await self.skipper.skip(hold=reached):
                continue
            if time.monotonic() >= deadline:
                raise await self._diagnosis.not_reached(info, node, timeout, skipping)
            await asyncio.sleep(CHECK_SECONDS)

    async def complete_user_task(
        self, instance_id: str | InstanceInfo, name: str, data: Any = None, *, wait: bool = True
    ) -> InstanceInfo:
        """Complete the user task ``name`` (waiting until the instance reaches it unless ``wait=False``).

        NotFound at once, naming the user tasks there are, if the instance's workflow version has
        no user task ``name`` (nothing would ever wait on it).
        """
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        loaded = await self._definition(iid)
        task = loaded.nodes.get(name)
        if task is None or task.kind is not NodeKind.USER_TASK:
            tasks = [n.id for n in loaded.definition.nodes if n.kind is NodeKind.USER_TASK]
            raise NotFound(
                f"workflow {loaded.definition.name!r} (version {loaded.version}) has no user task {name!r}"
                + (f" ({name!r} is a {task.kind.value} node)" if task is not None else "")
                + (f"; its user tasks: {_names(tasks)}" if tasks else "; it has no user task")
            )
        if wait:
            await self.wait_for(iid, name)
        return await self.client.complete_user_task(iid, name, data)

    async def signal(
        self,
        instance_id: str | InstanceInfo,
        name: str,
        data: Any = None,
        signal_id: str | None = None,
        *,
        sender: str = "",
    ) -> SignalResult:
        """Send the signal ``name`` with ``data`` to the instance (``client.signal``); what it did.

        Sent at once, whether or not the instance waits for it yet (an early signal is buffered).
        ``sender`` says who sent it, as for ``client.signal``: the history entry of a signal a wait
        takes at once shows it (``(signal paid from billing)``).
        """
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        return await self.client.signal(iid, name, data, signal_id, sender=sender)

    async def create_schedule(
        self,
        schedule_id: str,
        workflow: Blueprint[Any] | str,
        context: Any = None,
        *,
        every: timedelta | float | None = None,
        cron: str = "",
        **options: Any,
    ) -> ScheduleInfo:
        """Create a schedule (``client.create_schedule``; ``options`` pass through) on virtual time.

        Its ticks are counted from the virtual now; time skipping (``sleep``, and waits with a
        bounded due moment) stops at each. The workflow's instances count as live.
        """
        if isinstance(workflow, Blueprint):
            await self.client.register(workflow)
        self.skipper.workflows.add(workflow.name if isinstance(workflow, Blueprint) else workflow)
        seconds = None if every is None else millis_of(every, "every") / 1000
        return await self.client.create_schedule(
            schedule_id, workflow, context, every=seconds, cron=cron, **options
        )

    async def cancel(self, instance_id: str | InstanceInfo, reason: str = "cancelled") -> InstanceInfo:
        """Cancel the instance; its snapshot. A step of it running on a worker of the
        environment is given up there at once (an ``async def`` handler is cancelled)."""
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        info, _ = await self.client.cancel(iid, reason)
        await self._give_up_ended_attempts()
        return info

    async def history(self, instance_id: str | InstanceInfo) -> list[HistoryEntry]:
        """Every step attempt and event of the instance, in order (timestamps in virtual time)."""
        iid = instance_id if isinstance(instance_id, str) else instance_id.instance_id
        return await self.client.history(iid)

    async def path(self, instance_id: str | InstanceInfo) -> list[str]:
        """The nodes the instance went through, in the order the visits began: a token's attempts
        at a node are one visit, however parallel branches interleave (``path_of``)."""
        return path_of(await self.history(instance_id))

    async def assert_path(self, instance_id: str | InstanceInfo, expected: Sequence[str]) -> None:
        """AssertionError, showing both paths, unless the instance went through exactly ``expected``."""
        taken = await self.path(instance_id)
        if taken != list(expected):
            raise AssertionError(f"path taken {taken} is not the expected {list(expected)}")
