"""A fake Transport and a LocalRunEnv around it, for driving the worker's parts without a server."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from wiggle import Blueprint
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.handlers import HandlerCaller, InlinePolicy
from wiggle._worker.heartbeats import Heartbeats
from wiggle._worker.loaded import LoadedBlueprint
from wiggle._worker.local_run import AdvanceSupport, LocalRun, LocalRunEnv
from wiggle._worker.options import WorkerOptions
from wiggle._worker.reporter import Reporter
from wiggle._worker.stats import WorkerStats
from wiggle._worker.stream import StreamError

AdvanceReply = Callable[[pb.AdvanceRunRequest], pb.AdvanceRunResult]


def running(request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
    """The server accepted the steps; the instance and the token keep running."""
    return pb.AdvanceRunResult(instance_status="RUNNING", token_status="RUNNING")


def refuse(code: grpc.StatusCode, details: str = "refused") -> AdvanceReply:
    """An AdvanceRun reply that is an error with ``code``."""

    def reply(request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
        raise StreamError(code, details)

    return reply


class FakeTransport:
    """Records every request; AdvanceRun answers come from ``advance_replies`` (then ``running``)."""

    def __init__(self, *advance_replies: AdvanceReply) -> None:
        self.advance_replies = list(advance_replies)
        self.advanced: list[pb.AdvanceRunRequest] = []
        self.completed: list[pb.CompleteTaskRequest] = []
        self.failed: list[pb.FailTaskRequest] = []
        self.heartbeats: list[pb.HeartbeatTaskRequest] = []

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        return pb.PollTasksResponse()

    async def complete(self, request: pb.CompleteTaskRequest, timeout: float) -> pb.ReportResult:
        self.completed.append(request)
        return pb.ReportResult(instance_status="RUNNING")

    async def fail(self, request: pb.FailTaskRequest, timeout: float) -> pb.ReportResult:
        self.failed.append(request)
        return pb.ReportResult(instance_status="RUNNING")

    async def heartbeat(self, request: pb.HeartbeatTaskRequest, timeout: float) -> pb.ReportResult:
        self.heartbeats.append(request)
        return pb.ReportResult(instance_status="RUNNING")

    async def advance(self, request: pb.AdvanceRunRequest, timeout: float) -> pb.AdvanceRunResult:
        self.advanced.append(request)
        reply = self.advance_replies.pop(0) if self.advance_replies else running
        return reply(request)

    async def close(self) -> None:
        pass


class Harness:
    """A LocalRunEnv over a FakeTransport, and a way to run one activation through it."""

    def __init__(
        self,
        blueprint: Blueprint[Any],
        transport: FakeTransport,
        options: WorkerOptions | None = None,
        closing: bool = False,
        sync_handlers: str = "thread",
    ) -> None:
        self.options = options or WorkerOptions(local_batch_size=64, flush_interval=0)
        self.transport = transport
        self.stats = WorkerStats()
        self.caller = HandlerCaller(InlinePolicy(sync_handlers, 0.5), self.stats, "w1")
        self.caller.pool = ThreadPoolExecutor(2)
        self.heartbeats = Heartbeats(transport, 0, lambda: False)
        self.closing = closing
        self.env = LocalRunEnv(
            caller=self.caller,
            reporter=Reporter(transport, timeout=5),
            heartbeats=self.heartbeats,
            options=self.options,
            stats=self.stats,
            queues=frozenset(blueprint.queues()),
            closing=lambda: self.closing,
            advance=AdvanceSupport(),
        )
        self.loaded = LoadedBlueprint(blueprint)

    def activation(self, **fields: Any) -> pb.TaskActivation:
        """A claimed activation of the blueprint's first node."""
        bp = self.loaded.blueprint
        graph = self.loaded.graph
        start = bp.definition.start_node
        values: dict[str, Any] = {
            "task_id": "t1@1",
            "queue": graph.queues[graph.index[start]],  # the claim's queue, as the server sends it
            "instance_id": "i1",
            "workflow": bp.name,
            "version": bp.version,
            "node_id": bp.definition.start_node,
            "attempt": 1,
            "context_json": b"{}",
            "lease_owner": "w1",
            "lease_expires_at": int(time.time() * 1000) + 60_000,
            "lease_millis": 60_000,
            "execution_mode": "LOCAL_ASYNC",
        }
        values.update(fields)
        return pb.TaskActivation(**values)

    async def run(self, **fields: Any) -> LocalRun:
        """Drive one local run to its end."""
        run = LocalRun(self.env, self.loaded, self.activation(**fields))
        await run.run()
        await self.heartbeats.close()
        return run

    def close(self) -> None:
        assert self.caller.pool is not None
        self.caller.pool.shutdown(wait=True)
