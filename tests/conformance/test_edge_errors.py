"""Errors at the edge: wrong state, unknown names, size limits (docs/semantics.md#errors and #limits)."""

from __future__ import annotations

import pytest

from wiggle import FailedPrecondition, InvalidArgument, NotFound, RetryPolicy

from .conftest import Harness

LIMIT = 1000


def _flow(harness: Harness, trace, base: str):
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    def later(ctx):
        trace.hit("later")
        return {**ctx, "later": True}

    return harness.define(base).step(first).user_task("approval").step(later).build()


async def test_complete_user_task_in_the_wrong_state(harness: Harness, trace) -> None:
    bp = _flow(harness, trace, "ut-wrong-state")
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})  # no worker: still READY at "first"
        before = await server.client.get(info.instance_id)
        with pytest.raises(FailedPrecondition) as err:
            await server.client.complete_user_task(info.instance_id, "approval", {"ok": True})
        after = await server.client.get(info.instance_id)
    assert "approval" in str(err.value)
    assert after == before


async def test_complete_unknown_user_task(harness: Harness, trace) -> None:
    bp = _flow(harness, trace, "ut-unknown")
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        before = await server.client.get(info.instance_id)
        with pytest.raises(NotFound) as err:
            await server.client.complete_user_task(info.instance_id, "no-such-task", {})
        with pytest.raises(NotFound):  # a worker step is not a user task either
            await server.client.complete_user_task(info.instance_id, "first", {})
        with pytest.raises(NotFound):
            await server.client.complete_user_task("wi-000000000000000000000000", "approval", {})
        after = await server.client.get(info.instance_id)
    assert "no-such-task" in str(err.value)
    assert after == before


async def test_oversize_context_at_start(harness: Harness, trace) -> None:
    bp = _flow(harness, trace, "big-start")
    async with harness.server(max_payload_bytes=LIMIT) as server:
        await server.client.register(bp)
        with pytest.raises(InvalidArgument) as err:
            await server.client.start(bp, {"blob": "x" * 2 * LIMIT})
        listed, _ = await server.client.list(workflow=bp.name)
    message = str(err.value)
    assert "bytes" in message and str(LIMIT) in message, message
    assert listed == []  # nothing was stored


async def test_oversize_user_task_payload(harness: Harness, trace, eventually) -> None:
    bp = _flow(harness, trace, "big-payload")
    async with harness.running([bp], max_payload_bytes=LIMIT) as (server, _):
        info = await server.client.start(bp, {})

        async def awaiting() -> bool:
            return any(t.status == "AWAITING" for t in (await server.client.get(info.instance_id)).tokens)

        await eventually(awaiting, what="the user task")
        before = await server.client.get(info.instance_id)
        with pytest.raises(InvalidArgument) as err:
            await server.client.complete_user_task(info.instance_id, "approval", {"blob": "x" * 2 * LIMIT})
        after = await server.client.get(info.instance_id)
    assert str(LIMIT) in str(err.value)
    assert after == before


async def test_step_result_over_the_limit_fails_the_step_for_good(harness: Harness, trace) -> None:
    def small(ctx):
        trace.hit("small")
        return {**ctx, "small": True}

    def bloat(ctx):
        trace.hit("bloat")
        return {**ctx, "blob": "x" * 2 * LIMIT}

    def never(ctx):
        trace.hit("never")
        return ctx

    # the policy would allow three attempts: an oversize result is not retried
    bp = (
        harness.define("big-result")
        .retry(RetryPolicy.fixed(3, 0.05))
        .step(small)
        .step(bloat)
        .step(never)
        .build()
    )
    async with harness.running([bp], max_payload_bytes=LIMIT) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error.startswith("bloat: "), done.error
    assert "bytes" in done.error and f"limit is {LIMIT}" in done.error, done.error
    assert trace.steps == ["small", "bloat"]
    assert done.context == {"small": True}  # the successful prefix stands, the oversize result does not
