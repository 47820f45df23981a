"""How a worker talks to the server: the typed ``Transport`` protocol and its unary form.

Two implementations carry the same five worker calls: ``UnaryTransport`` (one RPC per call, the
documented contract in proto/wiggle/_rpc/wiggle.proto) and ``stream.StreamTransport`` (every call
multiplexed over one WorkerSession stream, the fast path). ``CountedTransport`` counts the calls
into ``WorkerStats.calls`` by RPC name. Errors are ``grpc.RpcError`` with ``code()`` and
``details()``, whichever the transport.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Coroutine
from typing import Any, Protocol

import grpc

from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc

__all__ = ["Transport", "UnaryTransport", "CountedTransport", "DEFAULT_TIMEOUT", "AWAY"]

#: Seconds a report may take before it fails with DEADLINE_EXCEEDED (and is retried).
DEFAULT_TIMEOUT = 30.0

#: the codes of a server that is away (stopping, restarting, failing over, unreachable), not of a
#: request it refused: the poller, the reporter and the heartbeats ask again soon after these
AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Transport(Protocol):
    """The worker's five calls to the server, and closing the connection they use."""

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        """PollTasks: claim up to ``max_tasks`` activations, waiting up to ``wait_millis``."""
        ...

    async def complete(self, request: pb.CompleteTaskRequest, timeout: float) -> pb.ReportResult:
        """CompleteTask: a SERVER-style step succeeded."""
        ...

    async def fail(self, request: pb.FailTaskRequest, timeout: float) -> pb.ReportResult:
        """FailTask: a step raised (or returned something unusable)."""
        ...

    async def heartbeat(self, request: pb.HeartbeatTaskRequest, timeout: float) -> pb.ReportResult:
        """HeartbeatTask: renew the lease of a running step."""
        ...

    async def advance(self, request: pb.AdvanceRunRequest, timeout: float) -> pb.AdvanceRunResult:
        """AdvanceRun: commit a local run's buffered steps (and hand back when ``final``)."""
        ...

    async def close(self) -> None:
        """Release what the transport holds (the channel belongs to the client)."""
        ...


class UnaryTransport:
    """One RPC per call."""

    def __init__(self, stub: pb_grpc.WiggleControlPlaneStub) -> None:
        self.stub = stub

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        """PollTasks as one RPC."""
        reply: pb.PollTasksResponse = await self.stub.PollTasks(request, timeout=timeout)
        return reply

    async def complete(self, request: pb.CompleteTaskRequest, timeout: float) -> pb.ReportResult:
        """CompleteTask as one RPC."""
        reply: pb.ReportResult = await self.stub.CompleteTask(request, timeout=timeout)
        return reply

    async def fail(self, request: pb.FailTaskRequest, timeout: float) -> pb.ReportResult:
        """FailTask as one RPC."""
        reply: pb.ReportResult = await self.stub.FailTask(request, timeout=timeout)
        return reply

    async def heartbeat(self, request: pb.HeartbeatTaskRequest, timeout: float) -> pb.ReportResult:
        """HeartbeatTask as one RPC."""
        reply: pb.ReportResult = await self.stub.HeartbeatTask(request, timeout=timeout)
        return reply

    async def advance(self, request: pb.AdvanceRunRequest, timeout: float) -> pb.AdvanceRunResult:
        """AdvanceRun as one RPC."""
        reply: pb.AdvanceRunResult = await self.stub.AdvanceRun(request, timeout=timeout)
        return reply

    async def close(self) -> None:
        """Nothing to release: the channel belongs to the client."""


class CountedTransport:
    """A Transport that counts every call it forwards, by RPC name (tests and the benchmark read them).

    Each call counts and returns the inner transport's coroutine (no coroutine of its own).
    """

    def __init__(self, inner: Transport, calls: Counter[str]) -> None:
        self.inner = inner
        self.calls = calls

    def poll(self, request: pb.PollTasksRequest, timeout: float) -> Coroutine[Any, Any, pb.PollTasksResponse]:
        """Count and forward PollTasks."""
        self.calls["PollTasks"] += 1
        return self.inner.poll(request, timeout)

    def complete(
        self, request: pb.CompleteTaskRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.ReportResult]:
        """Count and forward CompleteTask."""
        self.calls["CompleteTask"] += 1
        return self.inner.complete(request, timeout)

    def fail(self, request: pb.FailTaskRequest, timeout: float) -> Coroutine[Any, Any, pb.ReportResult]:
        """Count and forward FailTask."""
        self.calls["FailTask"] += 1
        return self.inner.fail(request, timeout)

    def heartbeat(
        self, request: pb.HeartbeatTaskRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.ReportResult]:
        """Count and forward HeartbeatTask."""
        self.calls["HeartbeatTask"] += 1
        return self.inner.heartbeat(request, timeout)

    def advance(
        self, request: pb.AdvanceRunRequest, timeout: float
    ) -> Coroutine[Any, Any, pb.AdvanceRunResult]:
        """Count and forward AdvanceRun."""
        self.calls["AdvanceRun"] += 1
        return self.inner.advance(request, timeout)

    async def close(self) -> None:
        """Close the inner transport."""
        await self.inner.close()
