"""Failure and retry: attempts, backoff, exhaustion, permanent errors, lease expiry."""

from __future__ import annotations

import asyncio

from wiggle import PermanentError, RetryPolicy

from .conftest import Harness

FAST = RetryPolicy.fixed(3, 0.05)


def _steps(trace):
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    def last(ctx):
        trace.hit("last")
        return {**ctx, "last": True}

    return first, last


async def test_retry_then_success_shows_attempts_1_2_3(harness: Harness, trace) -> None:
    first, last = _steps(trace)

    def flaky(ctx):
        info = trace.hit("flaky")
        if info.attempt < 3:
            raise ValueError(f"flake {info.attempt}")
        return {**ctx, "flaky": info.attempt}

    bp = harness.define("retry-ok").retry(FAST).step(first).step(flaky).step(last).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"first": True, "flaky": 3, "last": True}
    assert trace.steps == ["first", "flaky", "flaky", "flaky", "last"]
    assert trace.attempts["flaky"] == [1, 2, 3]
    assert trace.attempts["first"] == [1] and trace.attempts["last"] == [1]
    retries = [(e.attempt, e.error) for e in history if e.node_id == "flaky" and e.outcome == "RETRY"]
    assert retries == [(1, "ValueError: flake 1"), (2, "ValueError: flake 2")]


async def test_retry_waits_for_the_backoff(harness: Harness, trace) -> None:
    def flaky(ctx):
        info = trace.hit("flaky")
        if info.attempt == 1:
            raise RuntimeError("once")
        return ctx

    # Virtual time (the test kit): an hour of backoff is skipped, and the history shows it exactly.
    bp = harness.define("retry-backoff").step(flaky, retry=RetryPolicy.fixed(2, 3600)).build()
    async with harness.env([bp]) as env:
        done = await env.run(bp, {})
        history = await env.history(done)
    assert done.status == "COMPLETED"
    assert trace.attempts["flaky"] == [1, 2]
    failed, retried = [e for e in history if e.node_id == "flaky"]
    assert (failed.outcome, retried.outcome) == ("RETRY", "COMPLETED")
    gap = retried.started_at - failed.ended_at
    assert gap == 3_600_000, f"the retry ran {gap} ms after the failure; the backoff is 3600000 ms"


async def test_retries_exhausted_fail_the_instance(harness: Harness, trace) -> None:
    first, last = _steps(trace)

    def flaky(ctx):
        info = trace.hit("flaky")
        raise ValueError(f"boom {info.attempt}")

    bp = harness.define("retry-exhausted").retry(FAST).step(first).step(flaky).step(last).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"x": 1})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error == "flaky: ValueError: boom 3"
    assert done.context == {"x": 1, "first": True}
    assert trace.steps == ["first", "flaky", "flaky", "flaky"]
    assert trace.attempts["flaky"] == [1, 2, 3]
    assert done.tokens == ()


async def test_permanent_error_is_not_retried(harness: Harness, trace) -> None:
    first, last = _steps(trace)

    def picky(ctx):
        trace.hit("picky")
        raise PermanentError("card declined")

    bp = harness.define("permanent").retry(FAST).step(first).step(picky).step(last).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error == "picky: PermanentError: card declined"
    assert trace.steps == ["first", "picky"]
    assert trace.attempts["picky"] == [1]


async def test_node_policy_overrides_the_workflow_default(harness: Harness, trace) -> None:
    def once(ctx):
        trace.hit("once")
        raise ValueError("no")

    bp = harness.define("node-policy").retry(FAST).step(once, retry=RetryPolicy.none()).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error == "once: ValueError: no"
    assert trace.attempts["once"] == [1]


async def test_lease_expiry_redelivers_to_another_worker(harness: Harness, trace) -> None:
    started = asyncio.Event()

    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    async def hang(ctx):
        info = trace.hit("hang")
        if info.worker_id == "worker-one":
            started.set()
            await asyncio.sleep(60)  # the worker dies before this returns
        return {**ctx, "hang": info.attempt}

    def last(ctx):
        trace.hit("last")
        return {**ctx, "last": True}

    bp = harness.define("lease").retry(FAST).step(first).step(hang).step(last).build()
    # Virtual time (the test kit): once worker-one is gone, the clock jumps to its lease's expiry.
    async with harness.env([bp], workers=0, lease_millis=60_000) as env:
        w1 = await env.start_worker([bp], harness.options(worker_id="worker-one"))
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(started.wait(), 10)
        await env.stop_worker(
            w1, timeout=0.01, crash=True
        )  # killed: the running step is abandoned, nothing reported
        await env.start_worker([bp], harness.options(worker_id="worker-two"))
        done = await env.wait(info)
        history = await env.history(info)
    assert done.status == "COMPLETED" and done.error == ""
    assert trace.workers["hang"] == ["worker-one", "worker-two"]
    assert trace.workers["last"] == ["worker-two"]
    expired = [(e.node_id, e.attempt, e.error) for e in history if e.outcome == "RETRY"]
    (lost,) = [e for e in history if e.outcome == "RETRY"]
    assert lost.ended_at - lost.started_at == 60_000  # expired when the lease ran out, in virtual time
    if harness.mode.value == "LOCAL_ASYNC":
        # Nothing was flushed: the server still had the token at "first", so the expiry is a
        # failed attempt of "first" and the whole unflushed run is replayed.
        assert expired == [("first", 1, "lease expired (worker unreachable)")]
        assert trace.steps == ["first", "hang", "first", "hang", "last"]
        assert trace.attempts["first"] == [1, 2]
        assert trace.attempts["hang"] == [1, 1]
        assert done.context == {"first": True, "hang": 1, "last": True}
    else:
        # "first" was committed before "hang" ran: only the step in flight runs again.
        assert expired == [("hang", 1, "lease expired (worker unreachable)")]
        assert trace.steps == ["first", "hang", "hang", "last"]
        assert trace.attempts["hang"] == [1, 2]
        assert done.context == {"first": True, "hang": 2, "last": True}
