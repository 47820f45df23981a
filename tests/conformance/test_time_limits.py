"""Time limits (docs/semantics.md#step-time-limits, #workflow-time-limits), on both stores and in
every execution mode: a hung step is timed out and retried while its worker lives on, a report
after the deadline changes nothing, a silent step is given up at its heartbeat timeout, and a
workflow past its limit fails wherever it waits (its children cancelled)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import grpc
import pytest

from wiggle import RetryPolicy, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._worker.heartbeats import Heartbeats, Lease

from .conftest import Harness

FAST_RETRY = RetryPolicy.fixed(3, 0.05)


def _define(harness: Harness, base: str, **limits: float) -> Workflow:
    return Workflow.define(harness.define(base).name, **limits).execution(harness.mode)


def _clean(history, allowed_retries: dict[str, int]) -> None:
    """No lease expiry anywhere; retries only where the test asked for them."""
    assert not [h for h in history if "lease expired" in h.error], history
    retries: dict[str, int] = {}
    for h in history:
        if h.outcome == "RETRY":
            retries[h.node_id] = retries.get(h.node_id, 0) + 1
    assert retries == allowed_retries, history


@pytest.mark.parametrize("handler", ["sync", "async"])
async def test_a_hung_step_is_timed_out_and_retried_while_its_worker_lives(
    harness: Harness, handler: str
) -> None:
    release = threading.Event()
    attempts: list[int] = []

    def hang_sync(ctx):
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            release.wait(30)  # hangs past its limit; abandoned in its thread, never killed
        return {**ctx, "charged": len(attempts)}

    async def hang_async(ctx):
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            await asyncio.sleep(30)  # cancelled at its limit
        return {**ctx, "charged": len(attempts)}

    fn = hang_sync if handler == "sync" else hang_async
    bp = (
        _define(harness, "hung")
        .step(lambda ctx: {**ctx, "before": True}, name="before")
        .step(fn, name="charge", timeout=1.0, retry=FAST_RETRY)
        .step(lambda ctx: {**ctx, "after": True}, name="after")
        .build()
    )
    try:
        async with harness.running([bp]) as (server, _):
            info = await server.client.start(bp, {})
            done = await harness.finish(server, info.instance_id, timeout=30)
            history = await server.client.history(info.instance_id)
    finally:
        release.set()
    assert done.status == "COMPLETED", done.error
    assert done.context == {"before": True, "charged": 2, "after": True}
    charge = [h for h in history if h.node_id == "charge"]
    assert [(h.attempt, h.outcome) for h in charge] == [(1, "RETRY"), (2, "COMPLETED")]
    assert "timed out after 1 s" in charge[0].error
    _clean(history, {"charge": 1})


async def _raw_claim(server, queue: str) -> pb.TaskActivation:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        for _ in range(50):
            reply = await stub.PollTasks(
                pb.PollTasksRequest(worker_id="raw-worker", queues=[queue], max_tasks=1, wait_millis=200)
            )
            if reply.tasks:
                return reply.tasks[0]
    raise AssertionError(f"nothing to claim on {queue!r}")


async def test_a_report_after_the_deadline_is_refused_and_changes_nothing(harness: Harness) -> None:
    bp = _define(harness, "late").step(lambda ctx: ctx, name="slow", timeout=1.0).build()
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {"n": 1})
        act = await _raw_claim(server, bp.name)
        assert act.deadline_at > 0 and act.deadline_at <= act.lease_expires_at
        await asyncio.sleep(1.3)  # past the attempt's deadline
        before = await server.client.get(info.instance_id)
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CompleteTask(
                    pb.CompleteTaskRequest(
                        task_id=act.task_id, lease_owner="raw-worker", context_json=b'{"n": 2}'
                    )
                )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # refused as timed out, or as no longer held if the clock duties applied the timeout first
        assert any(w in (refused.value.details() or "") for w in ("timed out", "is READY, not RUNNING"))
        after = await server.client.get(info.instance_id)
        assert after.context == before.context == {"n": 1}

        async def retried() -> bool:
            return any(h.outcome == "RETRY" for h in await server.client.history(info.instance_id))

        for _ in range(100):
            if await retried():
                break
            await asyncio.sleep(0.05)
        history = await server.client.history(info.instance_id)
    slow = [h for h in history if h.node_id == "slow"]
    assert slow and slow[0].outcome == "RETRY" and "start-to-close" in slow[0].error, history


async def test_a_silent_step_is_given_up_at_its_heartbeat_timeout(harness: Harness) -> None:
    bp = _define(harness, "silent").step(lambda ctx: ctx, name="quiet", heartbeat_timeout=1.0).build()
    async with harness.server(lease_millis=60_000) as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        act = await _raw_claim(server, bp.name)
        # the lease is the heartbeat timeout, not the server's 60 s
        assert act.lease_millis == 1000
        for _ in range(100):  # no heartbeat: given up after about a second, not a minute
            history = await server.client.history(info.instance_id)
            if history:
                break
            await asyncio.sleep(0.05)
    assert history and history[0].outcome == "RETRY", history
    assert "heartbeat timed out: no heartbeat for 1 s" in history[0].error


async def test_heartbeats_keep_a_step_with_a_heartbeat_timeout_alive(harness: Harness) -> None:
    """A worker heartbeats a step at a third of its heartbeat timeout, whatever the server's
    lease: a step that takes two and a half times its heartbeat timeout completes on its first
    attempt."""

    async def long(ctx):
        await asyncio.sleep(5.0)
        return {**ctx, "done": True}

    bp = _define(harness, "beating").step(long, name="long", heartbeat_timeout=2.0).build()
    async with harness.running([bp], lease_millis=60_000) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=30)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert [h.error for h in history if h.error] == []
    _clean(history, {})


async def test_a_step_with_a_heartbeat_timeout_after_another_step_is_kept_alive(harness: Harness) -> None:
    """The worker heartbeats a step at a third of its heartbeat timeout also when the step comes
    after another one: chained to a report, polled while the worker's heartbeats wait out a long
    pause, or reached inside a local run (whose lease the step's timeout shortens)."""

    async def long(ctx):
        await asyncio.sleep(5.0)
        return {**ctx, "done": True}

    bp = (
        _define(harness, "beating-later")
        .step(lambda ctx: {**ctx, "before": True}, name="before")
        .step(long, name="long", heartbeat_timeout=2.0)
        .step(lambda ctx: {**ctx, "after": True}, name="after")
        .build()
    )
    async with harness.running([bp], lease_millis=60_000) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=30)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"before": True, "done": True, "after": True}
    assert [h.error for h in history if h.error] == []
    _clean(history, {})


async def test_a_silent_step_inside_a_run_is_given_up_at_its_own_heartbeat_timeout(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step with a heartbeat timeout that a local run reaches holds that timeout on the server
    while it runs (LOCAL_ASYNC flushes before it): a worker silent past it loses that step, charged
    to that step, not to the step the run began with."""
    attempts: list[int] = []
    quiet = asyncio.Event()
    beat = Heartbeats._beat

    async def beat_unless_quiet(self: Heartbeats, act: pb.TaskActivation, lease: Lease | None) -> None:
        if not quiet.is_set():  # the worker goes silent while the first attempt runs
            await beat(self, act, lease)

    monkeypatch.setattr(Heartbeats, "_beat", beat_unless_quiet)

    async def silent(ctx):
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            quiet.set()
            await asyncio.sleep(4.0)
            quiet.clear()
        return {**ctx, "silent": len(attempts)}

    bp = (
        _define(harness, "silent-later")
        .step(lambda ctx: {**ctx, "before": True}, name="before")
        .step(silent, name="silent", heartbeat_timeout=1.0, retry=FAST_RETRY)
        .build()
    )
    async with harness.running([bp], lease_millis=60_000) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=30)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"before": True, "silent": 2}
    given_up = [h for h in history if h.outcome == "RETRY"]
    assert [(h.node_id, h.attempt) for h in given_up] == [("silent", 1)], history
    assert "heartbeat timed out: no heartbeat for 1 s" in given_up[0].error
    assert [h.outcome for h in history if h.node_id == "before"] == ["COMPLETED"], history


@pytest.mark.parametrize("waits_in", ["sleep", "signal", "user_task", "child"])
async def test_a_workflow_past_its_time_limit_fails_wherever_it_waits(
    harness: Harness, waits_in: str
) -> None:
    child = _define(harness, "child").sleep("nap", 3600).build()
    wf = _define(harness, "limited", timeout=60).step(lambda ctx: {**ctx, "began": True}, name="begin")
    if waits_in == "sleep":
        wf.sleep("nap", 3600)
    elif waits_in == "signal":
        wf.wait_signal("go")
    elif waits_in == "user_task":
        wf.user_task("approve")
    else:
        wf.sub_workflow("call", child)
    bp = wf.step(lambda ctx: ctx, name="never").build()
    async with harness.env([child, bp]) as env:  # the test kit: the hour passes in virtual time
        info = await env.start_workflow(bp, {})
        done = await env.wait(info)
        history = await env.history(done)
        children = [h.child_id for h in history if h.child_id]
        kids = [await env.client.get(c) for c in children]
        if kids:
            kids = [await env.wait(k) for k in kids]
    assert done.status == "FAILED" and done.reason == "workflow timed out", done
    assert "still running 60 s after its start" in done.error
    assert [h.node_id for h in history if h.outcome == "TIMED_OUT"] == [
        {"sleep": "nap", "signal": "go", "user_task": "approve", "child": "call"}[waits_in]
    ]
    assert "never" not in [h.node_id for h in history]
    assert all(k.status == "CANCELLED" for k in kids), kids
    _clean(history, {})


async def test_a_retried_instance_gets_its_time_limit_afresh(harness: Harness) -> None:
    bp = _define(harness, "again", timeout=60).user_task("approve").step(lambda ctx: ctx, name="ship").build()
    async with harness.env([bp]) as env:
        done = await env.wait(await env.start_workflow(bp, {}))
        assert done.status == "FAILED" and done.reason == "workflow timed out"
        retried = await env.client.retry(done.instance_id)
        assert retried.status == "RUNNING"
        await env.complete_user_task(retried.instance_id, "approve", {"ok": True})
        again = await env.wait(retried)
    assert again.status == "COMPLETED", again.error


async def test_a_start_sets_its_own_time_limit_over_the_workflows(harness: Harness) -> None:
    """client.start(timeout=) / start_many(timeout=) / the test kit's start_workflow(timeout=):
    the instance's limit instead of Workflow.define(timeout=); 0 means none."""
    bp = _define(harness, "own", timeout=60).user_task("approve").step(lambda ctx: ctx, name="ship").build()
    async with harness.env([bp]) as env:
        t0 = env.clock.now()
        short = await env.start_workflow(bp, {}, timeout=5)
        [many] = await env.client.start_many(bp, [{}], timeout=timedelta(seconds=7))
        unlimited = await env.start_workflow(bp, {}, timeout=0)
        default = await env.start_workflow(bp, {})
        done = [await env.wait(i) for i in (short, many, default)]
        await env.advance(3600)  # an hour later, the one started without a limit still waits
        still = await env.client.get(unlimited.instance_id)
    assert [d.reason for d in done] == ["workflow timed out"] * 3
    assert [d.finished_at - t0 for d in done] == [5000, 7000, 60_000]
    assert still.status == "RUNNING"


async def test_a_bad_start_time_limit_is_refused(harness: Harness) -> None:
    from wiggle import InvalidArgument

    bp = _define(harness, "badtimeout").step(lambda ctx: ctx, name="s").build()
    async with harness.server() as server:
        await server.client.register(bp)
        with pytest.raises(InvalidArgument, match="timeout must not be negative"):
            await server.client.start(bp, {}, timeout=-1)
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.StartInstance(pb.StartInstanceRequest(workflow=bp.name, timeout_millis=-5))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "timeout must be between 0" in (refused.value.details() or "")
        assert (await server.client.list(workflow=bp.name))[0] == []


async def test_bad_limits_are_refused_when_the_workflow_is_built(harness: Harness) -> None:
    """Bad limits are refused when the workflow is built, naming the field."""
    from wiggle import InvalidArgument

    with pytest.raises(InvalidArgument, match="heartbeat_timeout_millis 500 is below the minimum 1000 ms"):
        _define(harness, "bad").step(lambda c: c, name="s", heartbeat_timeout=0.5).build()
    with pytest.raises(InvalidArgument, match="timeout must be positive"):
        _define(harness, "bad").step(lambda c: c, name="s", timeout=0).build()
    with pytest.raises(InvalidArgument, match="timeout"):
        Workflow.define("bad-limit", timeout=-5)


async def test_a_step_nobody_claims_in_time_fails_for_good(harness: Harness) -> None:
    """schedule_to_start: no worker serves the queue, so the step fails once its limit passes,
    without a retry (another attempt would wait in the same queue), and the instance with it."""
    bp = (
        _define(harness, "unclaimed")
        .step(
            lambda ctx: ctx, name="waits", queue=f"nobody-{harness.define('q').name}", schedule_to_start=1.0
        )
        .build()
    )
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {"n": 1})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED", done
    assert "waits: not started within 1 s (the step's schedule-to-start limit)" in done.error
    assert [(h.node_id, h.outcome) for h in history] == [("waits", "TIMED_OUT")]
    _clean(history, {})


async def test_a_step_claimed_in_time_runs_as_usual(harness: Harness) -> None:
    """schedule_to_start does not touch a step that is claimed in time, nor the steps after it
    (their deadline is their own), in any mode."""
    bp = (
        _define(harness, "claimed")
        .step(lambda ctx: {**ctx, "a": 1}, name="a", schedule_to_start=30)
        .step(lambda ctx: {**ctx, "b": 1}, name="b", schedule_to_start=30, timeout=30)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    steps = [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"]
    assert steps == [("a", "COMPLETED", 1), ("b", "COMPLETED", 1)]
    _clean(history, {})
