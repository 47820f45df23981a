"""Our gRPC service, wiggle.v1.WiggleControlPlane: its handlers' state, its stream, Metrics.

Its RPCs are rows of the routes table (``ROUTES``, wiggle/_server/routes.py: method, handler,
roles, kind), from which ``RoutedService`` builds the entry points and the dispatch table
(``ControlPlane.routes``: method name -> Route) that the unary calls and the WorkerSession
stream (wiggle/_server/session.py) share; errors become status codes in one place
(wiggle/_server/faults.py, wiggle/_wire/status.py). Requests are validated at this edge, before
the instance layer sees them, by the handlers: instance_service.py (definitions and instances),
worker_service.py (worker calls) and schedule_service.py (schedules).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc

from .._histogram import Histogram
from .._rpc import wiggle_pb2 as pb
from .instance_service import InstanceHandlers
from .instances import Instances
from .pollers import Pollers
from .routes import Route, RoutedService
from .schedule_service import ScheduleHandlers
from .service_limits import ServiceLimits
from .session import CLIENT, WORKER, serve_session
from .worker_service import WorkerHandlers

__all__ = ["ControlPlane", "Metrics", "ServiceLimits", "Route"]

log = logging.getLogger("wiggle.server")


class Metrics:
    """Counters the server keeps: RPCs by method, local-run lengths and handback reasons."""

    RUN_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 1000)
    #: server-side RPC latency (s); a long poll waits up to 60 s (wiggle/_server/delivery.py)
    RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

    def __init__(self) -> None:
        self.rpc_calls: Counter[str] = Counter()
        self.rpc_errors: Counter[str] = Counter()
        self.rpc_seconds = Histogram(self.RPC_BUCKETS)  # (method,): timed by routes.py's dispatcher
        self.sessions_open = 0  # WorkerSession streams open on this node
        self.client_sessions_open = 0  # ClientSession streams open on this node
        self.handbacks: Counter[str] = Counter()
        self.step_handbacks: Counter[str] = Counter()  # SERVER-mode steps handed back, by reason
        self.local_run_steps: Counter[int] = Counter()  # bucket upper bound -> count
        self.local_steps_total = 0

    def observe_run(self, steps: int, reason: str) -> None:
        """Record one finished local run (its handback)."""
        self.handbacks[reason or "UNSPECIFIED"] += 1
        self.local_steps_total += steps
        for bound in self.RUN_LENGTH_BUCKETS:
            if steps <= bound:
                self.local_run_steps[bound] += 1
                return
        self.local_run_steps[0] += 1  # 0: above the last bucket

    def observe_step_handback(self, reason: str) -> None:
        """Record one SERVER-mode step its worker handed back (AdvanceRun): not a local run."""
        self.step_handbacks[reason] += 1

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of every counter."""
        return {
            "rpc_calls": dict(self.rpc_calls),
            "rpc_errors": dict(self.rpc_errors),
            "handbacks": dict(self.handbacks),
            "step_handbacks": dict(self.step_handbacks),
            "local_run_steps": {str(k): v for k, v in self.local_run_steps.items()},
            "local_steps_total": self.local_steps_total,
        }


class ControlPlane(InstanceHandlers, WorkerHandlers, RoutedService):
    """WiggleControlPlane over the instance layer (wiggle/_server/instances.py)."""

    descriptor = pb.DESCRIPTOR.services_by_name["WiggleControlPlane"]

    def __init__(
        self, instances: Instances, metrics: Metrics | None = None, limits: ServiceLimits | None = None
    ) -> None:
        self.instances = instances
        self.metrics = metrics or Metrics()
        self.limits = limits or ServiceLimits.from_config(instances.config)
        self.pollers = Pollers(instances.now)  # the workers polling this node (the dashboard's Queues page)
        self.schedule_handlers = ScheduleHandlers(instances.schedules, self.limits.max_payload_bytes)
        #: run on every request before its handler (access control: wiggle/_server/guard.py)
        self.guard = None
        self.bind_routes()

    @property
    def closing(self) -> asyncio.Event:
        """Set when the server stops (``let_go``): each session stream answers what it read and
        ends (session.py)."""
        return self.instances.closing

    def let_go(self) -> None:
        """The server is stopping: its session streams answer what they read and end, its long
        polls and waits end now (``Instances.let_go``), and no report brings a next step, so that
        the server's stop waits only for the calls in flight (docs/operations.md#stopping-a-server)."""
        self.instances.let_go()

    async def worker_session(
        self, request_iterator: AsyncIterator[pb.WorkerBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServerBatch]:
        """WorkerSession: multiplexed worker requests on one stream, each through the dispatch
        table as the unary call it stands for (session.py)."""
        self.metrics.sessions_open += 1
        try:
            async with contextlib.aclosing(
                serve_session(
                    request_iterator,
                    self.dispatch,
                    self.instances.delivery.give_back_steps,
                    WORKER,
                    self.closing,
                )
            ) as batches:
                async for batch in batches:
                    yield batch
        finally:
            self.metrics.sessions_open -= 1

    async def client_session(
        self, request_iterator: AsyncIterator[pb.ClientBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ClientReplyBatch]:
        """ClientSession: a client's starts on one stream, each through the dispatch table as the
        StartInstances call it stands for (session.py); ends on its own when the server stops, as a
        WorkerSession does."""
        self.metrics.client_sessions_open += 1
        try:
            async with contextlib.aclosing(
                serve_session(request_iterator, self.dispatch, _no_steps, CLIENT, self.closing)
            ) as batches:
                async for batch in batches:
                    yield batch
        finally:
            self.metrics.client_sessions_open -= 1


def _no_steps(steps: list[tuple[str, str]]) -> None:
    """A ClientSession's replies lease no steps: nothing to give back."""
