"""User tasks: completion merges the payload; a deadline continues on_timeout or fails."""

from __future__ import annotations

from datetime import timedelta

from wiggle import FailedPrecondition

from .conftest import Harness


def _handlers(trace):
    def prepare(ctx):
        trace.hit("prepare")
        return {**ctx, "prepared": True}

    def ship(ctx):
        trace.hit("ship")
        return {**ctx, "shipped": ctx.get("approved", False)}

    def escalate(ctx):
        trace.hit("escalate")
        return {**ctx, "escalated": True}

    return prepare, ship, escalate


async def _awaiting(server, eventually, instance_id: str, name: str):
    async def parked() -> bool:
        info = await server.client.get(instance_id)
        return any(t.node_id == name and t.status == "AWAITING" for t in info.tokens)

    await eventually(parked, what=f"user task {name!r} to be awaited")
    return await server.client.get(instance_id)


async def test_user_task_completed_merges_payload(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = harness.define("approval").step(prepare).user_task("approval").step(ship).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"order": 7})
        parked = await _awaiting(server, eventually, info.instance_id, "approval")
        assert parked.status == "RUNNING"
        assert trace.steps == ["prepare"]
        await server.client.complete_user_task(info.instance_id, "approval", {"approved": True, "by": "ann"})
        done = await harness.finish(server, info.instance_id)
        # the task is no longer awaited: a second completion is refused
        try:
            await server.client.complete_user_task(info.instance_id, "approval", {"approved": False})
        except FailedPrecondition as exc:
            assert "COMPLETED" in str(exc)
        else:
            raise AssertionError("a second completion of the user task was accepted")
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"order": 7, "prepared": True, "approved": True, "by": "ann", "shipped": True}
    assert trace.steps == ["prepare", "ship"]


async def test_user_task_timeout_runs_on_timeout_branch(harness: Harness, trace) -> None:
    prepare, ship, escalate = _handlers(trace)
    bp = (
        harness.define("approval-timeout")
        .step(prepare)
        .user_task("approval", timeout=timedelta(hours=24), on_timeout=lambda b: b.step(escalate))
        .step(ship)
        .build()
    )
    async with harness.env([bp]) as env:  # the test kit: the 24 h deadline passes in virtual time
        done = await env.run(bp, {})
        history = await env.history(done)
    timed_out = next(e for e in history if e.node_id == "approval")
    assert (timed_out.outcome, timed_out.ended_at - done.created_at) == ("TIMED_OUT", 86_400_000)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"prepared": True, "escalated": True, "shipped": False}
    assert trace.steps == ["prepare", "escalate", "ship"]


async def test_user_task_timeout_without_branch_fails(harness: Harness, trace) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = (
        harness.define("approval-fail")
        .step(prepare)
        .user_task("approval", timeout=timedelta(hours=24))
        .step(ship)
        .build()
    )
    async with harness.env([bp]) as env:  # the test kit: the 24 h deadline passes in virtual time
        done = await env.wait(await env.start_workflow(bp, {}))
    assert done.finished_at - done.created_at == 86_400_000
    assert done.status == "FAILED"
    assert done.error == "user task 'approval' timed out"
    assert done.context == {"prepared": True}
    assert trace.steps == ["prepare"]
    assert done.tokens == ()


async def test_user_task_completed_before_deadline_does_not_time_out(
    harness: Harness, trace, eventually
) -> None:
    prepare, ship, escalate = _handlers(trace)
    bp = (
        harness.define("approval-in-time")
        .step(prepare)
        .user_task("approval", timeout=5, on_timeout=lambda b: b.step(escalate))
        .step(ship)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        await _awaiting(server, eventually, info.instance_id, "approval")
        await server.client.complete_user_task(info.instance_id, "approval", {"approved": True})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert trace.steps == ["prepare", "ship"]
    assert done.context == {"prepared": True, "approved": True, "shipped": True}
