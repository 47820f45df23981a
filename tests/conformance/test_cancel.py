"""Cancellation in every token state: CANCELLED with the reason, late reports refused, nothing runs.

Workers here heartbeat every 50 ms, so a running step learns of the cancellation quickly (the
rule: "a worker learns of it at its next heartbeat or report"); that also makes LOCAL_ASYNC, whose
cancellation is otherwise best-effort mid-run, stop chaining before the next step.
"""

from __future__ import annotations

import asyncio
import threading

from wiggle import FailedPrecondition

from .conftest import Harness

REASON = "customer changed their mind"


class Gate:
    """A handler blocks on ``release`` (a thread-pool handler); ``started`` says it is blocked."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def block(self) -> None:
        self.started.set()
        if not self.release.wait(30):
            raise RuntimeError("never released")


def _options(harness: Harness):
    return harness.options(heartbeat_seconds=0.05)


async def _tokens(server, instance_id: str) -> dict[str, str]:
    info = await server.client.get(instance_id)
    return {t.node_id: t.status for t in info.tokens}


async def _cancel_and_check(server, instance_id: str):
    info, changed = await server.client.cancel(instance_id, REASON)
    assert changed is True
    assert info.status == "CANCELLED"
    assert info.reason == REASON
    assert info.tokens == ()  # every active token CANCELLED (leases cleared)
    return info


async def _late_report_refused(harness: Harness, server, worker, eventually, runs_before: int) -> None:
    """Wait until the released step's run ended without applying anything: a local run's
    AdvanceRun applied nothing; a SERVER step was given up at its refused heartbeat (its handler
    abandoned in its thread: docs/semantics.md#cancellation) and reports nothing."""
    if harness.local:
        # AdvanceRun on a cancelled instance applies nothing and returns its status
        await eventually(lambda: worker.stats.local_runs.count > runs_before, what="the local run to end")
    else:
        await eventually(lambda: worker.stats.in_flight == 0, what="the worker to give the step up")
        assert server.server.metrics.rpc_errors["CompleteTask"] == 0  # no late report to refuse


async def _heartbeat_refused(server, eventually) -> None:
    await eventually(
        lambda: server.server.metrics.rpc_errors["HeartbeatTask"] >= 1, what="a refused heartbeat"
    )
    await asyncio.sleep(0.1)  # let the refusal reach the worker before the step returns


async def test_cancel_ready_no_worker(harness: Harness, trace) -> None:
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    bp = harness.define("cancel-ready").step(first).build()
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {"v": 1})
        assert await _tokens(server, info.instance_id) == {"first": "READY"}
        cancelled = await _cancel_and_check(server, info.instance_id)
        async with server.worker([bp], _options(harness)):
            await asyncio.sleep(0.3)  # a worker now finds nothing to do
        final = await server.client.get(info.instance_id)
        # cancelling again changes nothing and says so
        again, changed = await server.client.cancel(info.instance_id, "again")
    assert trace.steps == []
    assert final == cancelled
    assert final.context == {"v": 1}
    assert changed is False and again.status == "CANCELLED" and again.reason == REASON


async def test_cancel_running_refuses_the_late_report(harness: Harness, trace, eventually) -> None:
    gate = Gate()

    def block(ctx):
        trace.hit("block")
        gate.block()
        return {**ctx, "block": True}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = harness.define("cancel-running").step(block).step(after).build()
    try:
        async with harness.running([bp], _options(harness)) as (server, worker):
            info = await server.client.start(bp, {"v": 1})
            await eventually(gate.started.is_set, what="the step to start")
            assert await _tokens(server, info.instance_id) == {"block": "RUNNING"}
            cancelled = await _cancel_and_check(server, info.instance_id)
            await _heartbeat_refused(server, eventually)
            gate.release.set()
            await _late_report_refused(harness, server, worker, eventually, 0)
            await asyncio.sleep(0.1)
            final = await server.client.get(info.instance_id)
            history = await server.client.history(info.instance_id)
    finally:
        gate.release.set()
    assert trace.steps == ["block"]
    assert final == cancelled
    assert final.context == {"v": 1}
    assert not [e for e in history if e.node_id == "block" and e.outcome == "COMPLETED"]
    # the attempt that ran through the cancel is in the history (an outside trial found none)
    assert [e.outcome for e in history if e.node_id == "block"] == ["CANCELLED"], history


async def test_cancel_waiting_during_sleep(harness: Harness, trace) -> None:
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    def later(ctx):
        trace.hit("later")
        return {**ctx, "later": True}

    bp = harness.define("cancel-waiting").step(first).sleep("nap", 3600).step(later).build()
    # Virtual time (the test kit): the clock is moved past the sleep's end by hand.
    async with harness.env([bp], time_skipping=False, worker_options=_options(harness)) as env:
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "nap")
        due = (await env.client.get(info.instance_id)).tokens[0].available_at
        cancelled = await _cancel_and_check(env, info.instance_id)
        await env.advance(
            (due - env.now_millis()) / 1000 + 1
        )  # past the sleep's end: the timer must not fire
        final = await env.client.get(info.instance_id)
    assert trace.steps == ["first"]
    assert final == cancelled
    assert final.context == {"first": True}


async def test_cancel_awaiting_user_task(harness: Harness, trace, eventually) -> None:
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    def later(ctx):
        trace.hit("later")
        return {**ctx, "later": True}

    bp = harness.define("cancel-awaiting").step(first).user_task("approval").step(later).build()
    async with harness.running([bp], _options(harness)) as (server, _):
        info = await server.client.start(bp, {})

        async def awaiting() -> bool:
            return (await _tokens(server, info.instance_id)) == {"approval": "AWAITING"}

        await eventually(awaiting, what="the user task")
        cancelled = await _cancel_and_check(server, info.instance_id)
        try:
            await server.client.complete_user_task(info.instance_id, "approval", {"ok": True})
        except FailedPrecondition as exc:
            assert "CANCELLED" in str(exc)
        else:
            raise AssertionError("completing a user task of a cancelled instance was accepted")
        await asyncio.sleep(0.1)
        final = await server.client.get(info.instance_id)
    assert trace.steps == ["first"]
    assert final == cancelled
    assert final.context == {"first": True}


async def test_cancel_with_one_branch_joined(harness: Harness, trace, eventually) -> None:
    gate = Gate()

    def quick(ctx):
        trace.hit("quick")
        return {**ctx, "quick": True}

    def slow(ctx):
        trace.hit("slow")
        gate.block()
        return {**ctx, "slow": True}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = (
        harness.define("cancel-joined")
        .fork(lambda b: b.step(quick), lambda b: b.step(slow))
        .join()
        .step(after)
        .build()
    )
    try:
        async with harness.running([bp], _options(harness)) as (server, worker):
            info = await server.client.start(bp, {"v": 1})
            await eventually(gate.started.is_set, what="the slow branch to start")

            async def one_joined() -> bool:
                tokens = (await server.client.get(info.instance_id)).tokens
                return sorted(t.status for t in tokens) == ["JOINED", "RUNNING"]

            await eventually(one_joined, what="the quick branch to reach the join")
            cancelled = await _cancel_and_check(server, info.instance_id)
            await _heartbeat_refused(server, eventually)
            gate.release.set()
            await _late_report_refused(harness, server, worker, eventually, 1)
            await asyncio.sleep(0.1)
            final = await server.client.get(info.instance_id)
            history = await server.client.history(info.instance_id)
    finally:
        gate.release.set()
    assert sorted(trace.steps) == ["quick", "slow"]
    assert final == cancelled
    assert final.context == {"v": 1}
    # the slow step's attempt that ran through the cancel has its entry, and nothing else ran on
    (dropped,) = [e for e in history if e.node_id in ("slow", "join", "after") and e.outcome != "RETRY"]
    assert (dropped.node_id, dropped.outcome, dropped.attempt) == ("slow", "CANCELLED", 1), history
    assert dropped.error.startswith("the instance became CANCELLED while this attempt ran on worker "), (
        dropped
    )


async def test_cancel_finished_instance_changes_nothing(harness: Harness, trace) -> None:
    def only(ctx):
        trace.hit("only")
        return {**ctx, "only": True}

    bp = harness.define("cancel-finished").step(only).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
        after, changed = await server.client.cancel(info.instance_id, REASON)
    assert changed is False
    assert after == done
    assert after.status == "COMPLETED" and after.reason == ""
