"""The heartbeat loop (wiggle/_worker/heartbeats.py): which steps it renews, and when.

The loop's sleep and clock are replaced by deterministic ones, so each test says exactly what
happened while the loop slept.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker import heartbeats as hb
from wiggle._worker.stream import StreamError

from .fakes import FakeTransport

# the loop's sleep is patched on the asyncio module itself; the tests yield with the real one
real_sleep = asyncio.sleep


class Clock:
    """time.monotonic, moved only by the patched sleep."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def patched(monkeypatch: pytest.MonkeyPatch, during_sleep: list) -> Clock:
    """Replace the module's clock and sleep: each sleep advances the clock by its length and runs
    the next action of ``during_sleep`` (what happens while the loop waits)."""
    clock = Clock()

    async def sleep(seconds: float) -> None:
        clock.now += seconds
        if during_sleep:
            during_sleep.pop(0)()
        await real_sleep(0)

    monkeypatch.setattr(hb.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(hb.asyncio, "sleep", sleep)
    return clock


def activation(task_id: str) -> pb.TaskActivation:
    return pb.TaskActivation(task_id=task_id, lease_owner="w1", node_id="n", instance_id="i")


async def run_loop(beats: hb.Heartbeats, turns: int) -> None:
    for _ in range(turns):
        await real_sleep(0)
    await beats.close()


@pytest.mark.asyncio
async def test_a_step_reported_while_the_loop_sleeps_gets_no_heartbeat(monkeypatch):
    a, b = activation("a@1"), activation("b@1")
    transport = FakeTransport()
    beats = hb.Heartbeats(transport, 1.0, lambda: False)
    # while the loop sleeps its first interval, step a is reported (unwatched); b still runs
    patched(monkeypatch, [lambda: beats.unwatch(a)])
    beats.watch(a)
    beats.watch(b)
    await run_loop(beats, 20)
    renewed = [r.task_id for r in transport.heartbeats]
    assert "b@1" in renewed and "a@1" not in renewed


@pytest.mark.asyncio
async def test_a_running_step_is_renewed_each_interval(monkeypatch):
    a = activation("a@1")
    transport = FakeTransport()
    beats = hb.Heartbeats(transport, 1.0, lambda: False)
    patched(monkeypatch, [])
    beats.watch(a)
    await run_loop(beats, 20)
    renewed = [r.task_id for r in transport.heartbeats]
    assert renewed and set(renewed) == {"a@1"}
    assert all(r.lease_owner == "w1" for r in transport.heartbeats)


class AwayFor(FakeTransport):
    """Heartbeats answered UNAVAILABLE (the server restarting) ``times`` times, then taken."""

    def __init__(self, times: int, clock: Clock) -> None:
        super().__init__()
        self.times = times
        self.clock = clock
        self.at: list[float] = []

    async def heartbeat(self, request: pb.HeartbeatTaskRequest, timeout: float) -> pb.ReportResult:
        self.at.append(self.clock.now)
        if self.times:
            self.times -= 1
            raise StreamError(grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        return await super().heartbeat(request, timeout)


@pytest.mark.asyncio
async def test_a_heartbeat_that_found_the_server_away_is_tried_again_a_second_later(monkeypatch):
    # interval 3 s: before, a failed heartbeat counted as a renewal and the next came 3 s later,
    # so an outage of a little over two intervals could cost a lease the report would have kept
    a = activation("a@1")
    clock = patched(monkeypatch, [])
    transport = AwayFor(2, clock)
    beats = hb.Heartbeats(transport, 3.0, lambda: False)
    start = clock.now
    beats.watch(a)
    for _ in range(40):
        if len(transport.at) >= 4:
            break
        await real_sleep(0)
    await beats.close()
    assert [t - start for t in transport.at[:4]] == [3.0, 4.0, 5.0, 8.0]  # back to the interval
    assert [r.task_id for r in transport.heartbeats] == ["a@1", "a@1"]
