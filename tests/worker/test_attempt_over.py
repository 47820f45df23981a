"""A step whose attempt the server ended is given up on the worker (wiggle/_worker/heartbeats.py
``give_up``, HandlerCaller.give_up): a refused heartbeat cancels an ``async def`` handler and
abandons a sync one in its thread, as the step's own time limit does, and nothing is reported.
Before, a SERVER step's handler ran on after its heartbeat was refused (instance cancelled, lease
lost, attempt timed out on the server's clock) until it ended by itself, its result then refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc
import pytest

from wiggle import Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.heartbeats import Heartbeats
from wiggle._worker.reporter import Reporter
from wiggle._worker.server_step import run_server_step
from wiggle._worker.stream import StreamError

from .fakes import FakeTransport, Harness

REFUSAL = "instance i1 is CANCELLED; the report on task t1@1 was refused"


class Refusing(FakeTransport):
    """Heartbeats refused with FAILED_PRECONDITION, as the server refuses an ended attempt's."""

    async def heartbeat(self, request: pb.HeartbeatTaskRequest, timeout: float) -> pb.ReportResult:
        self.heartbeats.append(request)
        raise StreamError(grpc.StatusCode.FAILED_PRECONDITION, REFUSAL)


def server_step(fn: Any, transport: FakeTransport) -> tuple[Harness, Heartbeats, pb.TaskActivation]:
    """A harness whose heartbeats come every 50 ms and reach its caller as a worker's do."""
    harness = Harness(Workflow.define("over").step(fn, name="hang").build(), transport)
    heartbeats = Heartbeats(transport, 0.05, lambda: False, harness.caller.give_up)
    act = harness.activation(execution_mode="SERVER")
    return harness, heartbeats, act


async def run_step(harness: Harness, heartbeats: Heartbeats, act: pb.TaskActivation) -> asyncio.Task[Any]:
    """Run the step as the poller does, in a task of its own; the task, once done (5 s at most)."""
    reporter = Reporter(harness.transport, timeout=5)
    task = asyncio.ensure_future(run_server_step(harness.caller, reporter, heartbeats, harness.loaded, act))
    await asyncio.wait({task}, timeout=5)
    assert task.done(), "the step still runs 5 s on"
    return task


async def test_a_refused_heartbeat_cancels_an_async_handler() -> None:
    cancelled = asyncio.Event()

    async def hang(ctx: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ctx

    transport = Refusing()
    harness, heartbeats, act = server_step(hang, transport)
    try:
        started = time.monotonic()
        task = await run_step(harness, heartbeats, act)
        assert cancelled.is_set() and task.cancelled()
        assert time.monotonic() - started < 2
        assert not transport.failed and not transport.completed  # nothing the server would refuse
        assert harness.caller.running == {}
    finally:
        await heartbeats.close()
        harness.close()


async def test_a_refused_heartbeat_abandons_a_sync_handler_in_its_thread() -> None:
    release = threading.Event()

    def block(ctx: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)
        return ctx

    transport = Refusing()
    harness, heartbeats, act = server_step(block, transport)
    try:
        task = await run_step(harness, heartbeats, act)
        assert task.cancelled() and not release.is_set()  # its thread still runs it: abandoned
        assert not transport.failed and not transport.completed
    finally:
        release.set()
        await heartbeats.close()
        harness.close()


async def test_a_handler_that_catches_the_cancellation_still_leaves_its_task_uncancelled() -> None:
    seen = []

    async def stubborn(ctx: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
        return {**ctx, "finished": True}

    transport = Refusing()
    harness, heartbeats, act = server_step(stubborn, transport)
    reporter = Reporter(transport, timeout=5)

    async def step_then_cancel_requests() -> int:
        await run_server_step(harness.caller, reporter, heartbeats, harness.loaded, act)
        task = asyncio.current_task()
        return task.cancelling() if hasattr(task, "cancelling") else 0  # counted from Python 3.11

    try:
        started = time.monotonic()
        left = await asyncio.wait_for(asyncio.ensure_future(step_then_cancel_requests()), 5)
        assert seen == ["cancelled"] and time.monotonic() - started < 2
        assert left == 0  # the give-up's cancel request is withdrawn: the worker's task goes on
        assert len(transport.completed) == 1  # its result goes on (a server refuses it)
    finally:
        await heartbeats.close()
        harness.close()


async def test_a_heartbeat_taken_cancels_nothing() -> None:
    done = asyncio.Event()

    async def slow(ctx: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.3)  # six heartbeats, each renewed
        done.set()
        return ctx

    transport = FakeTransport()
    harness, heartbeats, act = server_step(slow, transport)
    try:
        task = await run_step(harness, heartbeats, act)
        assert not task.cancelled() and done.is_set() and transport.heartbeats and not transport.failed
        assert len(transport.completed) == 1
    finally:
        await heartbeats.close()
        harness.close()


@pytest.mark.parametrize("watched", [True, False])
async def test_give_up_reaches_only_a_watched_step(watched: bool) -> None:
    calls: list[tuple[str, str]] = []

    def on_over(task_id: str, why: str) -> bool:
        calls.append((task_id, why))
        return True

    heartbeats = Heartbeats(FakeTransport(), 1.0, lambda: False, on_over)
    act = pb.TaskActivation(task_id="t9@1", lease_owner="w1", node_id="n", instance_id="i9")
    if watched:
        heartbeats.watch(act)
    try:
        assert heartbeats.give_up("t9@1", "over") is watched
        assert calls == ([("t9@1", "over")] if watched else [])
        assert heartbeats.attempt_over(asyncio.current_task()) == ("over" if watched else None)
        assert "t9@1" not in heartbeats.watched
    finally:
        await heartbeats.close()
