"""A worker's drain does not cut, nor claim to hand back, a step whose attempt the server ended.

Before the cut at the drain's end the worker heartbeats every step still running (Worker.close,
Heartbeats.check_now): one the server refuses (its instance finished meanwhile, its time limit
passed, its lease lost) is given up, and the log says so, rather than "cut and handed back:
each runs again on another worker" for a step that runs nowhere again (an outside trial's
teardown said that of a step whose instance had FAILED).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from hanging import Hang

from wiggle import Worker, WorkerOptions, Workflow
from wiggle.testing import WorkflowEnvironment


async def test_a_step_of_a_cancelled_instance_is_not_cut_at_the_drain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle.worker")
    hanging = Hang()
    started, cancelled, hang = hanging.started, hanging.cancelled, hanging.handler()

    bp = Workflow.define(f"drained-{uuid.uuid4().hex[:6]}").step(hang).build()
    async with WorkflowEnvironment([bp], workers=0) as env:
        # a worker of its own, not the environment's: nothing but the worker itself learns of the
        # cancel (its heartbeats come every 10 s, a third of the 30 s lease)
        worker = Worker(env.client, [bp], WorkerOptions(poll_wait_seconds=1.0, worker_id="own"))
        await worker.start()
        try:
            info = await env.start_workflow(bp, {})
            assert await asyncio.to_thread(started.wait, 10)
            await env.client.cancel(info.instance_id, "no longer wanted")
        finally:
            await worker.close(timeout=0.3)
    assert worker.cut_steps == 0
    assert cancelled.is_set()
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "cut and handed back" in m], said
    assert any(
        "1 step(s) still running after the 0.3 s drain were stopped, not handed back: the server had "
        "ended their attempts" in m
        for m in said
    ), said


async def test_a_step_still_held_is_cut_and_handed_back() -> None:
    hanging = Hang()
    started, hang = hanging.started, hanging.handler()

    bp = Workflow.define(f"held-{uuid.uuid4().hex[:6]}").step(hang).build()
    async with WorkflowEnvironment([bp], workers=0) as env:
        worker = Worker(env.client, [bp], WorkerOptions(poll_wait_seconds=1.0, worker_id="own"))
        await worker.start()
        try:
            info = await env.start_workflow(bp, {})
            assert await asyncio.to_thread(started.wait, 10)
        finally:
            await worker.close(timeout=0.3)
        assert worker.cut_steps == 1
        history = await env.history(info)
        assert [e.outcome for e in history if e.node_id == "hang"] == ["RELEASED"]
