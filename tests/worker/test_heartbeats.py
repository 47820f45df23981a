"""The heartbeat loop (wiggle/_worker/heartbeats.py): which steps it renews, and when.

The loop's sleep and clock are replaced by deterministic ones, so each test says exactly what
happened while the loop slept.
"""

from __future__ import annotations

import asyncio

import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker import heartbeats as hb

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
