"""A step the virtual clock times out is given up on the worker at once (docs/testing.md#a-step-that-hangs).

An outside trial: after ``env.advance(5 s)`` past an ``async def`` step's 5 s limit the instance
was FAILED at once, but its handler ran on until 5 s of real time had passed (the worker's own
limit counts in real time), and the environment's teardown then logged that the step was "cut
and handed back: each runs again on another worker". Now the environment tells its workers,
after ``advance`` and ``cancel``, which of their steps the server has ended, and they give them
up as at a real limit: an async handler is cancelled, a sync one abandoned in its thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from hanging import Hang

from wiggle import RetryPolicy

from .conftest import Kit

REAL_LIMIT = 30  # seconds: a handler still running this long after the advance is not given up


def _after(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "after": True}


def _no_cut(caplog: pytest.LogCaptureFixture) -> None:
    said = [r.getMessage() for r in caplog.records if "cut and handed back" in r.getMessage()]
    assert not said, said


async def test_an_async_handler_is_cancelled_when_advance_passes_its_limit(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle")
    hanging = Hang()
    started, cancelled, hang = hanging.started, hanging.cancelled, hanging.handler()

    bp = kit.define("hang").step(hang, timeout=REAL_LIMIT, retry=RetryPolicy.none()).step(_after).build()
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        assert await asyncio.to_thread(started.wait, 10)
        moved = time.monotonic()
        await env.advance(timedelta(seconds=REAL_LIMIT))
        done = await env.wait(info, timeout=10)
        assert done.status == "FAILED" and f"timed out after {REAL_LIMIT} s" in (done.error or "")
        assert await asyncio.to_thread(cancelled.wait, 5), "the handler ran on past the advance"
        assert time.monotonic() - moved < 5
        (worker,) = env.workers
    assert worker.cut_steps == 0
    _no_cut(caplog)


async def test_a_sync_handler_is_abandoned_when_advance_passes_its_limit(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    started, release = threading.Event(), threading.Event()

    def block(ctx: dict[str, Any]) -> dict[str, Any]:
        started.set()
        release.wait(REAL_LIMIT + 5)
        return ctx

    bp = kit.define("block").step(block, timeout=REAL_LIMIT, retry=RetryPolicy.none()).build()
    try:
        async with kit.env([bp]) as env:
            info = await env.start_workflow(bp, {})
            assert await asyncio.to_thread(started.wait, 10)
            await env.advance(timedelta(seconds=REAL_LIMIT))
            done = await env.wait(info, timeout=10)
            assert done.status == "FAILED"
            (worker,) = env.workers
            for _ in range(200):  # its slot is free again while its thread still blocks
                if worker.stats.in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            assert worker.stats.in_flight == 0 and not release.is_set()
    finally:
        release.set()
    assert worker.cut_steps == 0
    _no_cut(caplog)


async def test_cancel_gives_up_a_running_async_handler(kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
    hanging = Hang()
    started, cancelled, hang = hanging.started, hanging.cancelled, hanging.handler()

    bp = kit.define("untimed").step(hang).step(_after).build()
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        assert await asyncio.to_thread(started.wait, 10)
        assert (await env.cancel(info)).status == "CANCELLED"
        assert await asyncio.to_thread(cancelled.wait, 5), "the handler of a cancelled instance ran on"
        (worker,) = env.workers
    assert worker.cut_steps == 0
    _no_cut(caplog)


async def test_an_advance_short_of_the_limit_gives_nothing_up(kit: Kit) -> None:
    started, finish = threading.Event(), asyncio.Event()

    async def wait_for_finish(ctx: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await finish.wait()
        return {**ctx, "finished": True}

    bp = kit.define("short").step(wait_for_finish, timeout=60, retry=RetryPolicy.none()).build()
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        assert await asyncio.to_thread(started.wait, 10)
        await env.advance(timedelta(seconds=20))  # short of its limit and of the 30 s lease
        finish.set()
        done = await env.result(info, timeout=10)
    assert done.context["finished"]
