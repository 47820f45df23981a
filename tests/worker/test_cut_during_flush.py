"""A drain's cut that comes while a local run's flush is on its way (wiggle/_worker/local_run.py
``_hand_back_cut``): the flush goes on to the server (the stream transport does not withdraw
it), so the hand-back follows it, counting its steps, and hands the run back where it left off."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from wiggle import ExecutionMode, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.local_run import LocalRun

from .fakes import FakeTransport, Harness


def one(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "one": True}


def two(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "two": True}


class SlowFirstFlush(FakeTransport):
    """The first AdvanceRun's answer never comes (the worker is cut while it waits); the rest
    are answered at once."""

    def __init__(self) -> None:
        super().__init__()
        self.first_sent = asyncio.Event()

    async def advance(self, request: pb.AdvanceRunRequest, timeout: float) -> pb.AdvanceRunResult:
        if not self.advanced:
            self.advanced.append(request)
            self.first_sent.set()
            await asyncio.sleep(3600)
        return await super().advance(request, timeout)


@pytest.mark.parametrize("mode", ["LOCAL_SYNC", "LOCAL_ASYNC"])
async def test_a_cut_during_a_flush_hands_the_run_back_after_it(mode: str) -> None:
    # An outside durability trial: cut while a flush was on its way, the run was left leased to
    # the stopped worker until its lease ran out (its next step charged "lease expired").
    bp = Workflow.define("cut-flush").execution(ExecutionMode(mode)).step(one).step(two).build()
    transport = SlowFirstFlush()
    harness = Harness(bp, transport, closing=False)
    options = msgspec.structs.replace(harness.options, local_batch_size=1)  # LOCAL_ASYNC flushes each step
    env = harness.env._replace(hands_back_cuts=lambda: True, options=options)
    try:
        run = LocalRun(env, harness.loaded, harness.activation(execution_mode=mode))
        task = asyncio.ensure_future(run.run())
        await asyncio.wait_for(transport.first_sent.wait(), 10)
        task.cancel()  # the drain's cut, the first step's flush on its way
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await harness.heartbeats.close()
        harness.close()
    flush, handback = transport.advanced
    assert not flush.final and flush.run_offset == 0
    assert handback.final and handback.run_offset == 1, handback  # after the flush's one step
    assert handback.handback_reason == "SHUTDOWN" and handback.steps_batch in (
        b"",
        b"[]",
    )  # "two" never started
