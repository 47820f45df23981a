"""Regression tests for the three defects of issue #11 (each failed before its fix).

- a task of a Struct-typed workflow returning a Struct of another type (docs/semantics.md#contexts);
- a worker without the handler of a node of the pinned version (docs/semantics.md#mixed-fleets);
- a SLEEP history entry's ``started_at`` (docs/semantics.md#sleep).
"""

from __future__ import annotations

import time

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
