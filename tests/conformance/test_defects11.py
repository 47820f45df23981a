"""Regression tests for the three defects of issue #11 (each failed before its fix).

- a task of a Struct-typed workflow returning a Struct of another type (docs/semantics.md#contexts);
- a worker without the handler of a node of the pinned version (docs/semantics.md#mixed-fleets);
- a SLEEP history entry's ``started_at`` (docs/semantics.md#sleep).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from .conftest import Harness


class Order(msgspec.Struct):
    order: int
    done: bool = False


class Other(msgspec.Struct):
    something: str = "else"


async def test_struct_of_another_type_fails_the_step_that_returned_it(harness: Harness, trace) -> None:
    def wrong(ctx: Order) -> Other:
        trace.hit("wrong")
        return Other()

    def after(ctx: Order) -> Order:
        trace.hit("after")
        return Order(order=ctx.order, done=True)

    bp = harness.define("struct-shape", Order).step(wrong).step(after).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"order": 1})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED"
    assert "Other" in done.error and "Order" in done.error and "wrong" in done.error, done.error
    assert done.context == {"order": 1}  # the start context, untouched
    assert trace.steps == ["wrong"]  # not retried, and "after" never ran
    failed = [e for e in history if e.outcome in ("FAILED", "RETRY")]
    assert [(e.node_id, e.outcome) for e in failed] == [("wrong", "FAILED")]


def _old_and_new(harness: Harness, trace) -> tuple[Any, Any]:
    """Two versions of one workflow: the new one adds the step "extra" after "first"."""

    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": True}

    def extra(ctx):
        trace.hit("extra")
        return {**ctx, "extra": True}

    wf = harness.define("mixed-fleet")
    old = type(wf).define(wf.name, dict).execution(harness.mode).step(first).build()
    new = type(wf).define(wf.name, dict).execution(harness.mode).step(first).step(extra).build()
    assert old.version != new.version
    return old, new


async def test_worker_without_the_handler_releases_the_step(harness: Harness, trace, eventually) -> None:
    old, new = _old_and_new(harness, trace)
    async with harness.server() as server:
        await server.client.register(new)
        info = await server.client.start(new, {})
        async with server.worker([old], harness.options()) as old_worker:

            async def released() -> bool:
                now = await server.client.get(info.instance_id)
                return any(t.node_id == "extra" and "no handler" in t.last_error for t in now.tokens)

            # the old worker ran "first" by name, then claimed "extra" and gave it back once: its
            # claims pass "extra" over from then on (it had claimed it again within 0.3 s)
            await eventually(released, what="the old worker to release 'extra'")
            await asyncio.sleep(1.5)
            assert old_worker.stats.released == 1
            during = await server.client.get(info.instance_id)
        assert during.status == "RUNNING", during
        assert [t.attempt for t in during.tokens if t.node_id == "extra"] == [1]
        async with server.worker([new], harness.options()):
            done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED" and done.context == {"first": True, "extra": True}
    assert [e.outcome for e in history if e.node_id == "extra"] == ["COMPLETED"]
    assert [e.attempt for e in history if e.node_id == "extra"] == [1]


async def test_a_worker_runs_the_steps_behind_those_it_gave_back(harness: Harness, trace, eventually) -> None:
    """Many steps it cannot run ahead in the queue: the old worker gives back no more than its
    first claim took, and still runs what it can (docs/semantics.md#mixed-fleets)."""
    old, new = _old_and_new(harness, trace)
    options = harness.options(concurrency=4)
    async with harness.server() as server:
        await server.client.register(new)
        waiting = [(await server.client.start(new, {"n": n})).instance_id for n in range(20)]
        async with server.worker([old], options) as old_worker:

            async def all_at_extra() -> bool:
                views = [await server.client.get(i) for i in waiting]
                return all(any(t.node_id == "extra" for t in v.tokens) for v in views)

            await eventually(all_at_extra, what="every new instance to wait at 'extra'")
            ran = [(await server.client.start(old, {"old": n})).instance_id for n in range(5)]
            for n, instance_id in enumerate(ran):
                done = await harness.finish(server, instance_id)
                assert done.status == "COMPLETED" and done.context == {"old": n, "first": True}
            await asyncio.sleep(1.0)
            given_back = old_worker.stats.released
            assert 1 <= given_back <= 20, given_back
            await asyncio.sleep(1.0)
            assert old_worker.stats.released == given_back  # no more: "extra" is passed over
        async with server.worker([new], options):
            for instance_id in waiting:
                done = await harness.finish(server, instance_id)
                assert done.status == "COMPLETED" and done.context["extra"] is True, done
                history = await server.client.history(instance_id)
                assert [(e.outcome, e.attempt) for e in history if e.node_id == "extra"] == [("COMPLETED", 1)]


async def test_sleep_history_started_at_is_when_the_sleep_began(harness: Harness, trace) -> None:
    def slow(ctx):
        trace.hit("slow")
        time.sleep(0.3)  # the sleep begins clearly after the instance started
        return {**ctx, "slow": True}

    bp = harness.define("sleep-start").step(slow).sleep("nap", 0.05).step(lambda c: c, name="last").build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    by_node = {e.node_id: e for e in history}
    assert by_node["nap"].started_at >= by_node["slow"].ended_at, history
    assert by_node["nap"].started_at <= by_node["nap"].ended_at
    ordered = sorted(history, key=lambda e: (e.started_at, e.ended_at))
    assert [e.node_id for e in ordered if e.node_id in ("slow", "nap", "last")] == ["slow", "nap", "last"]
