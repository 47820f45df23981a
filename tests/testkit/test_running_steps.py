"""A wait held up by a step running on a worker says so, and how to reach the step's time limit.

The clock does not jump while a step runs on a live worker of the environment
(docs/semantics.md#time-in-tests), so a step's own time limit (``timeout=``) and heartbeat
timeout are not skipped over: an outside trial's test of a hung handler waited out its 60 s and
got ``... is still RUNNING after 60.0 s (real) at slow RUNNING`` with no hint. The TimeoutError of
``wait``, ``wait_for`` and ``sleep`` now names the running step and, when it has a time limit, the
``env.advance(...)`` that reaches it (docs/testing.md#a-step-that-hangs).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from wiggle import RetryPolicy, Workflow
from wiggle.testing import WorkflowEnvironment

from .conftest import Kit

ADVANCE = re.compile(r"env\.advance\(timedelta\(seconds=(\d+)\)\)")


def _hanging(started: asyncio.Event):
    async def hang(ctx):
        started.set()
        await asyncio.sleep(3600)  # a service that never answers
        return ctx

    return hang


async def test_a_wait_names_the_running_step_and_the_advance_that_reaches_its_time_limit(kit: Kit) -> None:
    started = asyncio.Event()
    bp = (
        kit.define("hung")
        .step(_hanging(started), name="slow", timeout=timedelta(minutes=5), retry=RetryPolicy.none())
        .build()
    )
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(TimeoutError) as waited:
            await env.result(info, timeout=0.3)
        said = str(waited.value)
        # the seconds are the wait's as measured (0.3, or 0.4 on a busy machine)
        assert re.match(
            rf"instance {info.instance_id} is still RUNNING after 0\.\d s \(real\) at slow RUNNING; ", said
        ), said
        assert re.search(
            r"; step 'slow' is RUNNING on worker test-worker-1 \(attempt 1\), and the clock does not jump "
            r"while a step runs on a worker; its time limit \(timeout=300 s\) runs out in 300 s of virtual "
            r"time: env\.advance\(timedelta\(seconds=300\)\) moves the clock there$",
            said,
        ), said
        with pytest.raises(
            TimeoutError,
            match=r"did not reach 'end' within 0.2 s; it is at slow RUNNING; step 'slow' is RUNNING",
        ):
            await env.wait_for(info, "end", timeout=0.2)
        with pytest.raises(
            TimeoutError, match=r"stayed busy for 0.2 s .*; step 'slow' of instance wi-\S+ is RUNNING"
        ):
            await env.sleep(timedelta(minutes=1), timeout=0.2)
        # what the message says to do is what it takes
        match = ADVANCE.search(said)
        assert match is not None
        await env.advance(timedelta(seconds=int(match.group(1))))
        done = await env.wait(info, timeout=10)
    assert done.status == "FAILED" and "timed out after 300 s" in done.error


async def test_the_heartbeat_timeout_is_named_when_it_runs_out_first() -> None:
    started = asyncio.Event()
    bp = (
        Workflow.define(f"silent-{uuid.uuid4().hex[:6]}")
        .step(
            _hanging(started),
            name="silent",
            timeout=timedelta(hours=1),
            heartbeat_timeout=timedelta(minutes=1),
            retry=RetryPolicy.none(),
        )
        .build()
    )
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(started.wait(), 10)
        await env.advance(timedelta(seconds=20))  # 40 s of its heartbeat timeout are left
        with pytest.raises(TimeoutError) as waited:
            await env.wait(info, timeout=0.3)
        said = str(waited.value)
        assert said.endswith(
            "its heartbeat timeout (heartbeat_timeout=60 s) runs out in 40 s of virtual time: "
            "env.advance(timedelta(seconds=40)) moves the clock there"
        ), said
        await env.advance(timedelta(seconds=40))
        done = await env.wait(info, timeout=10)
    assert done.status == "FAILED" and "heartbeat timed out" in done.error


async def test_a_running_step_without_a_time_limit_is_named_without_an_advance() -> None:
    started = asyncio.Event()
    bp = Workflow.define(f"untimed-{uuid.uuid4().hex[:6]}").step(_hanging(started), name="untimed").build()
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(TimeoutError) as waited:
            await env.wait(info, timeout=0.3)
        await env.cancel(info)
    said = str(waited.value)
    assert said.endswith(
        "step 'untimed' is RUNNING on worker test-worker-1 (attempt 1), and the clock does not jump while "
        "a step runs on a worker; it has no time limit: the wait lasts as long as its handler runs"
    ), said
    assert "advance" not in said


DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


async def test_the_docs_say_so_and_quote_what_the_kit_says() -> None:
    section = DOCS.read_text().split("\n## A step that hangs\n", 1)[1].split("\n## ", 1)[0]
    prose = re.sub(r"\s+", " ", section)
    assert (
        "its own time limit (`.step(fn, timeout=...)`) and its heartbeat timeout (`heartbeat_timeout=...`) "
        "count while it runs, on the virtual clock, and the clock does not jump over them"
    ) in prose, prose
    assert "# file: test_hung_step.py" in section  # a complete example: tests/docs/test_site.py runs it
    quoted = re.search(r"its `TimeoutError` says so: `([^`]+)`", prose)
    assert quoted is not None, prose
    started = asyncio.Event()
    bp = (
        Workflow.define(f"rates-{uuid.uuid4().hex[:6]}")
        .step(_hanging(started), name="fetch_rates", timeout=timedelta(minutes=5), retry=RetryPolicy.none())
        .build()
    )
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(TimeoutError) as waited:
            await env.wait(info, timeout=0.3)
        await env.cancel(info)
    assert str(waited.value).endswith(quoted.group(1)), (str(waited.value), quoted.group(1))
