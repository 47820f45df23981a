"""SyncWorkflowEnvironment: the WorkflowEnvironment for plain sync code, its loop in a thread.

The environment (server, workers, virtual clock) lives on an event loop of its own thread; each
sync method runs the matching coroutine there and waits. ``env.aio`` offers the same methods as
coroutines that can be awaited from *any* event loop (a pytest-asyncio test's, for instance), and
a client whose calls can be too, so one environment serves sync and async tests alike (the pytest
plugin relies on it).

The forwarded methods of both classes are generated from WorkflowEnvironment's by
scripts/gen_testkit_faces.py (between its marker comments; tests/testkit/test_faces_drift.py
fails when they drift): the API is written once, in environment.py.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from ..client import AsyncClient, Client, HistoryEntry, InstanceInfo, ScheduleInfo, SignalResult
from ..worker import Worker, WorkerOptions
from ..workflow import Blueprint

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._client.types import StartOptions
from .arguments import check_arguments
from .environment import DEFAULT_TIMEOUT, WorkflowEnvironment

__all__ = ["SyncWorkflowEnvironment", "AsyncView"]

T = TypeVar("T")


class SyncWorkflowEnvironment:
    """``with SyncWorkflowEnvironment([blueprint]) as env: done = env.run(blueprint, ctx)``.

    Takes the arguments of ``WorkflowEnvironment``; ``env.aio`` has the async methods.
    """

    def __init__(self, workflows: Iterable[Blueprint[Any]] = (), **options: Any) -> None:
        # Checked here, before anything starts: the environment itself is made at the start, on
        # the loop's thread, and list(workflows) met "'Blueprint' object is not iterable".
        self._workflows = check_arguments(workflows, options)
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._env: WorkflowEnvironment | None = None
        self._client: Client | None = None

    # ------------------------------------------------------------------ lifecycle

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._loop is None:
            coro.close()
            raise RuntimeError("the environment is not started: use `with SyncWorkflowEnvironment(...)`")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._submit(coro).result()

    @property
    def env(self) -> WorkflowEnvironment:
        """The async environment (its coroutines run on this environment's own loop only)."""
        if self._env is None:
            raise RuntimeError("the environment is not started: use `with SyncWorkflowEnvironment(...)`")
        return self._env

    def start(self) -> SyncWorkflowEnvironment:
        """Start the loop thread, then the environment on it."""
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="wiggle-test-env", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

        async def make() -> WorkflowEnvironment:
            env = WorkflowEnvironment(self._workflows, **self._options)
            return await env.start()

        try:
            self._env = self._call(make())
        except BaseException:
            self._shutdown()
            raise
        return self

    def stop(self) -> None:
        """Stop the environment and its loop thread."""
        if self._client is not None:
            Client.close(self._client)  # its own close does nothing (_OwnedClient)
            self._client = None
        if self._env is not None:
            try:
                self._call(self._env.stop())
            finally:
                self._env = None
                self._shutdown()

    def _shutdown(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def __enter__(self) -> SyncWorkflowEnvironment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def target(self) -> str:
        """host:port of the embedded server."""
        return self.env.target

    @property
    def client(self) -> Client:
        """A sync Client connected to the embedded server.

        The environment closes it when it stops: its ``close`` (and ``with env.client as c:``)
        leaves it open, as ``env.aio.client``'s does (``_EnvironmentClient``), since later
        calls on ``env.client`` use it again.
        """
        if self._client is None:
            self._client = _OwnedClient(self.target)
        return self._client

    @property
    def aio(self) -> AsyncView:
        """The same helpers as coroutines, awaitable from any event loop."""
        return AsyncView(self)

    # ------------------------------------------------------------------ helpers (see WorkflowEnvironment)

    # --- forwarded to WorkflowEnvironment: made by scripts/gen_testkit_faces.py, do not edit ---
    def start_worker(
        self, blueprints: Iterable[Blueprint[Any]] | None = None, options: WorkerOptions | None = None
    ) -> Worker:
        """Start one more in-process worker (for ``blueprints``, by default the environment's)."""
        return self._call(self.env.start_worker(blueprints, options))

    def stop_worker(self, worker: Worker, timeout: timedelta | float = 1.0, *, crash: bool = False) -> None:
        """Stop ``worker`` as ``Worker.close`` does: its running steps get ``timeout`` seconds,
        then are cut and handed back (READY at once, no attempt spent), a local run's unreported
        steps with them. ``crash=True`` stops it as a killed process would: the steps it leaves
        running wait out their leases (which time skipping reaches) and count as failed attempts
        ("lease expired (worker unreachable)"), a LOCAL_ASYNC run's unreported steps run again."""
        self._call(self.env.stop_worker(worker, timeout, crash=crash))

    def now(self) -> datetime:
        """The virtual time (UTC)."""
        return self.env.now()

    def now_millis(self) -> int:
        """The virtual time in epoch milliseconds (the unit of every timestamp in history)."""
        return self.env.now_millis()

    def advance(self, delta: timedelta | float) -> datetime:
        """Move virtual time forward by ``delta`` (a timedelta or seconds) and run what became due.

        A step running on a worker of the environment whose time limit (or heartbeat timeout)
        this passes is given up on the worker at once: an ``async def`` handler is cancelled, a
        sync one abandoned in its thread, as at a real limit."""
        return self._call(self.env.advance(delta))

    def sleep(self, delta: timedelta | float, timeout: timedelta | float = DEFAULT_TIMEOUT) -> datetime:
        """Let ``delta`` of virtual time pass, stopping at every due moment on the way.

        Unlike ``advance`` (one jump, then one round of clock duties), each timer, deadline and
        schedule tick before the end fires at its own moment, and the steps it releases run
        before time moves on: a daily schedule over ``sleep(timedelta(days=3))`` starts three
        instances, each at its tick. TimeoutError if the instances stay busy ``timeout`` s (real).
        """
        return self._call(self.env.sleep(delta, timeout))

    def start_workflow(
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
        return self._call(
            self.env.start_workflow(
                workflow,
                context,
                correlation_id=correlation_id,
                request_id=request_id,
                **options,
            )
        )

    def wait(
        self,
        instance_id: str | InstanceInfo,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        *,
        skip: bool | None = None,
    ) -> InstanceInfo:
        """Wait until the instance finishes (any status), skipping idle time; TimeoutError if it does not.

        ``skip`` overrides the environment's ``time_skipping`` for this wait.
        """
        return self._call(self.env.wait(instance_id, timeout, skip=skip))

    def result(
        self, instance_id: str | InstanceInfo, timeout: timedelta | float = DEFAULT_TIMEOUT
    ) -> InstanceInfo:
        """Wait for completion; WorkflowFailed if it FAILED or was CANCELLED, TimeoutError if it runs on."""
        return self._call(self.env.result(instance_id, timeout))

    def run(
        self,
        workflow: Blueprint[Any] | str,
        context: Any = None,
        *,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        check: bool = True,
    ) -> InstanceInfo:
        """Start an instance and wait for it to finish, in one call (``check``: raise unless COMPLETED)."""
        return self._call(self.env.run(workflow, context, timeout=timeout, check=check))

    def wait_for(
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
        return self._call(self.env.wait_for(instance_id, node, timeout, skip=skip))

    def complete_user_task(
        self, instance_id: str | InstanceInfo, name: str, data: Any = None, *, wait: bool = True
    ) -> InstanceInfo:
        """Complete the user task ``name`` (waiting until the instance reaches it unless ``wait=False``).

        NotFound at once, naming the user tasks there are, if the instance's workflow version has
        no user task ``name`` (nothing would ever wait on it).
        """
        return self._call(self.env.complete_user_task(instance_id, name, data, wait=wait))

    def signal(
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
        return self._call(self.env.signal(instance_id, name, data, signal_id, sender=sender))

    def create_schedule(
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
        return self._call(
            self.env.create_schedule(
                schedule_id,
                workflow,
                context,
                every=every,
                cron=cron,
                **options,
            )
        )

    def cancel(self, instance_id: str | InstanceInfo, reason: str = "cancelled") -> InstanceInfo:
        """Cancel the instance; its snapshot. A step of it running on a worker of the
        environment is given up there at once (an ``async def`` handler is cancelled)."""
        return self._call(self.env.cancel(instance_id, reason))

    def history(self, instance_id: str | InstanceInfo) -> list[HistoryEntry]:
        """Every step attempt and event of the instance, in order (timestamps in virtual time)."""
        return self._call(self.env.history(instance_id))

    def path(self, instance_id: str | InstanceInfo) -> list[str]:
        """The nodes the instance went through, in the order the visits began: a token's attempts
        at a node are one visit, however parallel branches interleave (``path_of``)."""
        return self._call(self.env.path(instance_id))

    def assert_path(self, instance_id: str | InstanceInfo, expected: Sequence[str]) -> None:
        """AssertionError, showing both paths, unless the instance went through exactly ``expected``."""
        self._call(self.env.assert_path(instance_id, expected))

    # --- end of the forwarded methods ---


class AsyncView:
    """A SyncWorkflowEnvironment's helpers as coroutines, awaitable from any event loop.

    The twin of WorkflowEnvironment for an async test on a fixture (``env = wiggle_env.aio``):
    every method of the environment but its lifecycle (``start`` / ``stop`` belong to whoever
    owns it), with the same parameters; what is a coroutine there is one here, and the clock
    reads (``now``, ``now_millis``) are plain calls, as there. ``client`` is an AsyncClient whose
    calls run on the environment's loop (``_EnvironmentClient``).
    """

    def __init__(self, owner: SyncWorkflowEnvironment) -> None:
        self._owner = owner

    def _await(self, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        return asyncio.wrap_future(self._owner._submit(coro))

    @property
    def _env(self) -> WorkflowEnvironment:
        return self._owner.env

    # Written by hand: scripts/gen_testkit_faces.py forwards the environment's coroutines to the
    # view, but not start_worker / stop_worker (its NOT_ON_THE_VIEW) nor the plain clock reads.
    # tests/testkit/test_api_parity.py holds their parameters to the environment's.

    @property
    def target(self) -> str:
        """host:port of the embedded server."""
        return self._owner.target

    @property
    def client(self) -> AsyncClient:
        """The environment's AsyncClient, its calls awaitable from any event loop.

        ``await env.client.list(workflow=...)`` from the test's loop: each call runs on the
        environment's own loop, where its channel lives (``_EnvironmentClient``); code that takes
        an AsyncClient takes it. Its channel works on that loop only and is not lent: a
        ``Worker`` refuses it (``start_worker`` starts one of the environment). The environment
        closes it when it stops (its workers share the channel): ``close`` does nothing.
        """
        return _EnvironmentClient(self._owner)

    async def start_worker(
        self, blueprints: Iterable[Blueprint[Any]] | None = None, options: WorkerOptions | None = None
    ) -> Worker:
        """Start one more in-process worker (for ``blueprints``, by default the environment's).

        It runs on the environment's loop: stop it with ``stop_worker``, not with its own methods.
        """
        return await self._await(self._env.start_worker(blueprints, options))

    async def stop_worker(
        self, worker: Worker, timeout: timedelta | float = 1.0, *, crash: bool = False
    ) -> None:
        """Stop ``worker`` (``WorkflowEnvironment.stop_worker``: handed back, or as a crash)."""
        await self._await(self._env.stop_worker(worker, timeout, crash=crash))

    def now(self) -> datetime:
        """The virtual time (UTC)."""
        return self._env.now()

    def now_millis(self) -> int:
        """The virtual time in epoch milliseconds (the unit of every timestamp in history)."""
        return self._env.now_millis()

    # --- forwarded to WorkflowEnvironment: made by scripts/gen_testkit_faces.py, do not edit ---
    async def advance(self, delta: timedelta | float) -> datetime:
        """Move virtual time forward by ``delta`` (a timedelta or seconds) and run what became due.

        A step running on a worker of the environment whose time limit (or heartbeat timeout)
        this passes is given up on the worker at once: an ``async def`` handler is cancelled, a
        sync one abandoned in its thread, as at a real limit."""
        return await self._await(self._env.advance(delta))

    async def sleep(self, delta: timedelta | float, timeout: timedelta | float = DEFAULT_TIMEOUT) -> datetime:
        """Let ``delta`` of virtual time pass, stopping at every due moment on the way.

        Unlike ``advance`` (one jump, then one round of clock duties), each timer, deadline and
        schedule tick before the end fires at its own moment, and the steps it releases run
        before time moves on: a daily schedule over ``sleep(timedelta(days=3))`` starts three
        instances, each at its tick. TimeoutError if the instances stay busy ``timeout`` s (real).
        """
        return await self._await(self._env.sleep(delta, timeout))

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
        return await self._await(
            self._env.start_workflow(
                workflow,
                context,
                correlation_id=correlation_id,
                request_id=request_id,
                **options,
            )
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
        return await self._await(self._env.wait(instance_id, timeout, skip=skip))

    async def result(
        self, instance_id: str | InstanceInfo, timeout: timedelta | float = DEFAULT_TIMEOUT
    ) -> InstanceInfo:
        """Wait for completion; WorkflowFailed if it FAILED or was CANCELLED, TimeoutError if it runs on."""
        return await self._await(self._env.result(instance_id, timeout))

    async def run(
        self,
        workflow: Blueprint[Any] | str,
        context: Any = None,
        *,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        check: bool = True,
    ) -> InstanceInfo:
        """Start an instance and wait for it to finish, in one call (``check``: raise unless COMPLETED)."""
        return await self._await(self._env.run(workflow, context, timeout=timeout, check=check))

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
        return await self._await(self._env.wait_for(instance_id, node, timeout, skip=skip))

    async def complete_user_task(
        self, instance_id: str | InstanceInfo, name: str, data: Any = None, *, wait: bool = True
    ) -> InstanceInfo:
        """Complete the user task ``name`` (waiting until the instance reaches it unless ``wait=False``).

        NotFound at once, naming the user tasks there are, if the instance's workflow version has
        no user task ``name`` (nothing would ever wait on it).
        """
        return await self._await(self._env.complete_user_task(instance_id, name, data, wait=wait))

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
        return await self._await(self._env.signal(instance_id, name, data, signal_id, sender=sender))

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
        return await self._await(
            self._env.create_schedule(
                schedule_id,
                workflow,
                context,
                every=every,
                cron=cron,
                **options,
            )
        )

    async def cancel(self, instance_id: str | InstanceInfo, reason: str = "cancelled") -> InstanceInfo:
        """Cancel the instance; its snapshot. A step of it running on a worker of the
        environment is given up there at once (an ``async def`` handler is cancelled)."""
        return await self._await(self._env.cancel(instance_id, reason))

    async def history(self, instance_id: str | InstanceInfo) -> list[HistoryEntry]:
        """Every step attempt and event of the instance, in order (timestamps in virtual time)."""
        return await self._await(self._env.history(instance_id))

    async def path(self, instance_id: str | InstanceInfo) -> list[str]:
        """The nodes the instance went through, in the order the visits began: a token's attempts
        at a node are one visit, however parallel branches interleave (``path_of``)."""
        return await self._await(self._env.path(instance_id))

    async def assert_path(self, instance_id: str | InstanceInfo, expected: Sequence[str]) -> None:
        """AssertionError, showing both paths, unless the instance went through exactly ``expected``."""
        await self._await(self._env.assert_path(instance_id, expected))

    # --- end of the forwarded methods ---


class _OwnedClient(Client):
    """``wiggle_env.client``: a sync Client the environment owns. ``with wiggle_env.client as c:``
    closed it for good, and every later ``wiggle_env.client`` call raised ClientClosed (an outside
    trial); ``close`` does nothing here, and SyncWorkflowEnvironment.stop closes it
    (``Client.close``), as the async view's client is closed by its environment only."""

    def close(self) -> None:
        """Nothing: the environment closes its client when it stops."""

    def __repr__(self) -> str:
        return f"<Client of the test environment at {self.target}>"


class _EnvironmentClient(AsyncClient):
    """``wiggle_env.aio.client``: the environment's AsyncClient, awaitable from any event loop.

    An AsyncClient serves the event loop of its first call (grpc.aio binds its channel there:
    wiggle/_client/link.py), and the environment's client serves the environment's loop (this
    module's thread): awaited from a test's loop, its calls fail with WrongEventLoop. Here each
    coroutine method of AsyncClient runs there instead and is awaited from the caller's loop, as
    AsyncView's helpers are; plain attributes (``target``, ``patience``, ``credentials``) are the
    client's. Its ``channel`` and ``stub`` are refused: they work on the environment's loop only
    (so a ``Worker``, which shares its client's channel, refuses it too: wiggle/_worker/worker.py).
    The environment makes the client when it
    starts and closes it when it stops, so ``close`` and ``async with`` leave it open.

    It is an AsyncClient (``isinstance`` holds, code typed for one takes it), made without one's
    ``__init__``, which would open a channel on the caller's loop: every coroutine method of
    AsyncClient is forwarded (``_forwarded``, set on the class below), whatever it is called.
    An outside trial found it was not one, though docs/testing.md said so.
    """

    #: A Worker given this client refuses it (wiggle/_worker/worker.py): its channel is not lent.
    lends_no_channel = True

    def __init__(self, owner: SyncWorkflowEnvironment) -> None:  # no AsyncClient.__init__: no channel
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("channel", "stub"):
            raise _refused(name)
        return getattr(self._owner.env.client, name)

    @property
    def channel(self) -> grpc.aio.Channel:
        """Refused: the environment's channel works on its own loop only."""
        raise _refused("channel")

    @property
    def stub(self) -> Any:
        """Refused, as ``channel``."""
        raise _refused("stub")

    async def close(self) -> None:
        """Nothing: the environment closes its client when it stops."""

    async def __aenter__(self) -> _EnvironmentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"<AsyncClient of the test environment at {self._owner.target}, awaitable from any loop>"


def _refused(name: str) -> AttributeError:
    """What ``wiggle_env.aio.client`` says of an attribute it does not offer (its channel's)."""
    return AttributeError(
        f"wiggle_env.aio.client offers AsyncClient's calls, not {name!r}: the environment's channel "
        "works on its own loop only (make an AsyncClient(wiggle_env.target) on yours; for a worker, "
        "await wiggle_env.aio.start_worker([...]), which runs it on the environment's loop)"
    )


def _forwarded(name: str, method: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., Awaitable[T]]:
    """``_EnvironmentClient``'s ``name``: AsyncClient's ``method`` of the environment's client, run
    on the environment's loop and awaited from the caller's."""

    @functools.wraps(method)
    async def call(self: _EnvironmentClient, *args: Any, **kwargs: Any) -> T:
        client = self._owner.env.client
        coro: Coroutine[Any, Any, T] = getattr(client, name)(*args, **kwargs)
        return await asyncio.wrap_future(self._owner._submit(coro))

    return call


for _name, _method in vars(AsyncClient).items():
    if (
        not _name.startswith("_")
        and inspect.iscoroutinefunction(_method)
        and _name not in vars(_EnvironmentClient)
    ):
        setattr(_EnvironmentClient, _name, _forwarded(_name, _method))
