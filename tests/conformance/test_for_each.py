"""for_each (docs/semantics.md#for-each): one branch per element, bounded, results in input order."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
import pytest

from wiggle import InvalidArgument

from .conftest import Harness


class InFlight:
    """How many branch handlers run at once, at most (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


async def test_results_in_input_order_with_element_and_index(harness: Harness, trace) -> None:
    seen: list[tuple[int, str, bool]] = []
    flight = InFlight()

    def square(ctx):
        trace.hit("square")
        with flight:
            seen.append((ctx["index"], ctx["item"], "words" in ctx))
            time.sleep(0.01 * (5 - ctx["index"] % 5))  # later elements finish first
            return {**ctx, "result": f"{ctx['item']}:{ctx['index']}", "scratch": 1}

    def after(ctx):
        return {**ctx, "after": True}

    bp = harness.define("fe").for_each("words", lambda b: b.step(square), concurrency=2).step(after).build()
    words = [f"w{i}" for i in range(9)]
    async with harness.running([bp], harness.options(concurrency=4)) as (server, _):
        info = await server.client.start(bp.name, {"words": words, "keep": 1})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    # the fork-time context, plus the results in input order; branch scratch keys are dropped
    assert done.context == {
        "words": words,
        "keep": 1,
        "results": [f"w{i}:{i}" for i in range(9)],
        "after": True,
    }
    # each branch got its element and index, without the list
    assert sorted(seen) == [(i, f"w{i}", False) for i in range(9)]
    assert flight.most <= 2
    outcomes = [(h.node_id, h.outcome) for h in history if h.kind in ("FOR_EACH", "JOIN")]
    assert outcomes == [("for_each", "FORKED"), ("for_each.join", "JOINED")]


async def test_custom_keys_and_nested_in_a_fork(harness: Harness) -> None:
    def tag(ctx):
        return {**ctx, "out": ctx["x"] * 10 + ctx["i"]}

    def other(ctx):
        return {**ctx, "other": True}

    bp = (
        harness.define("fe-keys")
        .fork(
            lambda b: b.for_each(
                "xs", lambda e: e.step(tag), item_key="x", index_key="i", output_key="out", result_key="tags"
            ),
            lambda b: b.step(other),
        )
        .join()
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp.name, {"xs": [3, 1, 2]})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"xs": [3, 1, 2], "tags": [30, 11, 22], "other": True}


async def test_empty_list_goes_straight_to_the_join(harness: Harness, trace) -> None:
    def body(ctx):
        trace.hit("body")
        return ctx

    def after(ctx):
        trace.hit("after")
        return {**ctx, "n": len(ctx["results"])}

    bp = harness.define("fe-empty").for_each("items", lambda b: b.step(body)).step(after).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp.name, {"items": []})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"items": [], "results": [], "n": 0}
    assert trace.steps == ["after"]


async def test_not_a_list_at_start_is_refused_and_nothing_is_stored(harness: Harness) -> None:
    def body(ctx):
        return ctx

    bp = harness.define("fe-bad").for_each("items", lambda b: b.step(body)).build()
    async with harness.running([bp]) as (server, _):
        for bad, found in (({"items": {"a": 1}}, "a dict"), ({"items": "abc"}, "a str"), ({}, "missing")):
            with pytest.raises(InvalidArgument) as err:
                await server.client.start(bp.name, bad)
            assert "'for_each'" in str(err.value) and "'items'" in str(err.value), err.value
            assert f"must be a list, but it is {found}" in str(err.value)
        assert await server.client.list(workflow=bp.name) == ([], "")


async def test_not_a_list_after_a_step_fails_the_instance_naming_the_key(harness: Harness) -> None:
    def prep(ctx):
        return {**ctx, "items": 7}

    def body(ctx):
        return ctx

    bp = harness.define("fe-late").step(prep).for_each("items", lambda b: b.step(body)).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp.name, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error == "for_each 'for_each': context key 'items' must be a list, but it is a int"


async def test_a_failing_branch_fails_the_instance(harness: Harness) -> None:
    from wiggle import PermanentError

    def body(ctx):
        if ctx["item"] == 2:
            raise PermanentError("two is bad")
        return {**ctx, "result": ctx["item"]}

    bp = harness.define("fe-fail").for_each("items", lambda b: b.step(body)).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp.name, {"items": [1, 2, 3]})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert "two is bad" in done.error


class Order(msgspec.Struct):
    id: str
    items: list[str]
    results: list[Any] = []


class Packing(msgspec.Struct):
    """A for_each body's own context type: the element, its index, and the keys it reads."""

    item: str
    index: int
    id: str
    result: str = ""


def _pack_as_dict(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "result": f"{ctx['id']}:{ctx['item']}"}


def _pack_as_struct(ctx: Packing) -> Packing:
    return msgspec.structs.replace(ctx, result=f"{ctx.id}#{ctx.index}")


def _pack_unannotated(ctx):  # type: ignore[no-untyped-def]
    return ctx


@pytest.mark.parametrize(
    ("body", "results"),
    [(_pack_as_dict, ["o1:a", "o1:b", "o1:c"]), (_pack_as_struct, ["o1#0", "o1#1", "o1#2"])],
)
async def test_a_struct_typed_workflow_s_body_gets_the_type_its_handler_asks_for(
    harness: Harness, body: Any, results: list[str]
) -> None:
    """A branch's context (the fork-time context without its list, plus element and index) does not
    fit the workflow's Struct (its list field is missing): every body step failed ContextMismatch.
    A handler annotated dict gets a dict, one annotated with a Struct of its own gets that."""
    bp = harness.define("typed-for-each", Order).for_each("items", lambda b: b.step(body)).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, Order(id="o1", items=["a", "b", "c"]))
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"id": "o1", "items": ["a", "b", "c"], "results": results}
    assert {h.outcome for h in history} <= {"COMPLETED", "FORKED", "JOINED", "END"}, history


async def test_a_struct_typed_body_step_that_does_not_fit_says_what_to_annotate(harness: Harness) -> None:
    bp = (
        harness.define("typed-for-each-plain", Order)
        .for_each("items", lambda b: b.step(_pack_unannotated))
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, Order(id="o1", items=["a"]))
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert "does not fit Order" in done.error and "annotate their handler's parameter with dict" in done.error
