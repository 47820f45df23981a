"""Fork and join: branch context copies, the fold in branch order, nesting, conflicts, combine."""

from __future__ import annotations

import time

from .conftest import Harness


def _setter(trace, name: str, key: str, value, seen: dict, delay: float = 0.0, remove: str | None = None):
    def handler(ctx):
        trace.hit(name)
        seen[name] = dict(ctx)
        if delay:
            time.sleep(delay)
        out = {**ctx, key: value}
        if remove is not None:
            out.pop(remove, None)
        return out

    handler.__name__ = name
    return handler


def _assert_order(steps: list[str], *chain: str) -> None:
    positions = [steps.index(s) for s in chain]
    assert positions == sorted(positions), f"{chain} ran out of order in {steps}"


async def test_fork_join_two_branches(harness: Harness, trace) -> None:
    seen: dict = {}

    def prep(ctx):
        trace.hit("prep")
        return {**ctx, "base": 1, "tmp": "x"}

    left = _setter(trace, "left", "l", 1, seen, delay=0.05, remove="tmp")
    right = _setter(trace, "right", "r", 2, seen)

    def after(ctx):
        trace.hit("after")
        seen["after"] = dict(ctx)
        return {**ctx, "after": True}

    bp = (
        harness.define("fork2")
        .step(prep)
        .fork(lambda b: b.step(left), lambda b: b.step(right))
        .join()
        .step(after)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    # each branch's diff against the fork-time context, folded: left removed "tmp"
    assert done.context == {"base": 1, "l": 1, "r": 2, "after": True}
    # each branch ran on its own copy of the fork-time context
    assert seen["left"] == {"base": 1, "tmp": "x"}
    assert seen["right"] == {"base": 1, "tmp": "x"}
    assert seen["after"] == {"base": 1, "l": 1, "r": 2}
    assert sorted(trace.steps) == ["after", "left", "prep", "right"]
    assert trace.steps[0] == "prep" and trace.steps[-1] == "after"


async def test_fork_join_three_branches(harness: Harness, trace) -> None:
    seen: dict = {}
    p = _setter(trace, "p", "p", "P", seen, delay=0.05)
    q = _setter(trace, "q", "q", "Q", seen)
    r = _setter(trace, "r", "qr", "QR", seen)
    s = _setter(trace, "s", "s", "S", seen)

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = (
        harness.define("fork3")
        .fork(lambda b: b.step(p), lambda b: b.step(q).step(r), lambda b: b.step(s))
        .join()
        .step(after)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"n": 0})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"n": 0, "p": "P", "q": "Q", "qr": "QR", "s": "S", "after": True}
    assert seen["p"] == {"n": 0} and seen["q"] == {"n": 0} and seen["s"] == {"n": 0}
    assert seen["r"] == {"n": 0, "q": "Q"}  # a branch sees its own earlier steps only
    assert sorted(trace.steps) == ["after", "p", "q", "r", "s"]
    _assert_order(trace.steps, "q", "r", "after")
    assert trace.steps[-1] == "after"


async def test_nested_fork_folds_innermost_first(harness: Harness, trace) -> None:
    seen: dict = {}
    outer_a = _setter(trace, "outer_a", "a", 1, seen)
    inner_x = _setter(trace, "inner_x", "x", 10, seen, delay=0.03)
    inner_y = _setter(trace, "inner_y", "y", 20, seen)
    outer_b = _setter(trace, "outer_b", "b", 2, seen)

    def inner_done(ctx):
        trace.hit("inner_done")
        seen["inner_done"] = dict(ctx)
        return {**ctx, "inner": ctx["x"] + ctx["y"]}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = (
        harness.define("nested")
        .fork(
            lambda b: (
                b.step(outer_a)
                .fork(lambda c: c.step(inner_x), lambda c: c.step(inner_y), name="inner_fork")
                .join(name="inner_join")
                .step(inner_done)
            ),
            lambda b: b.step(outer_b),
            name="outer_fork",
        )
        .join(name="outer_join")
        .step(after)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"a": 1, "x": 10, "y": 20, "inner": 30, "b": 2, "after": True}
    assert seen["inner_x"] == {"a": 1} and seen["inner_y"] == {"a": 1}
    assert seen["inner_done"] == {"a": 1, "x": 10, "y": 20}  # the outer branch b is not visible
    assert seen["outer_b"] == {}
    _assert_order(trace.steps, "outer_a", "inner_x", "inner_done", "after")
    _assert_order(trace.steps, "inner_y", "inner_done")
    assert sorted(trace.steps) == sorted(["outer_a", "inner_x", "inner_y", "inner_done", "outer_b", "after"])


async def test_join_conflict_without_combine_fails_naming_key_and_branches(harness: Harness, trace) -> None:
    seen: dict = {}
    ca = _setter(trace, "ca", "k", 1, seen)
    cb = _setter(trace, "cb", "k", 2, seen)

    def after(ctx):
        trace.hit("after")
        return ctx

    bp = (
        harness.define("conflict").fork(lambda b: b.step(ca), lambda b: b.step(cb)).join().step(after).build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"k": 0})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert (
        done.error
        == "join 'join': branches 'ca' and 'cb' both changed 'k'; give the join a combine function (.join(combine=fn)) or let each branch change keys of its own"
    )
    assert done.context == {"k": 0}  # nothing was folded
    assert sorted(trace.steps) == ["ca", "cb"]
    assert done.tokens == ()


async def test_join_conflict_with_combine(harness: Harness, trace) -> None:
    seen: dict = {}
    # the first branch finishes last: the combine still sees the branches in branch order
    ca = _setter(trace, "ca", "k", 1, seen, delay=0.1)
    cb = _setter(trace, "cb", "k", 2, seen)

    def combine(base, branches):
        info = trace.hit("combine")
        seen["combine"] = (dict(base), [dict(b) for b in branches], info.node_id)
        return {**base, "k": sum(b["k"] for b in branches), "order": [b["k"] for b in branches]}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = (
        harness.define("combine")
        .fork(lambda b: b.step(ca), lambda b: b.step(cb))
        .join(combine)
        .step(after)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"k": 0, "keep": True})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.reason == "" and done.error == ""
    assert done.context == {"k": 3, "keep": True, "order": [1, 2], "after": True}
    base, branches, node = seen["combine"]
    assert base == {"k": 0, "keep": True}
    assert branches == [{"k": 1, "keep": True}, {"k": 2, "keep": True}]
    assert node == "join"
    assert sorted(trace.steps[:2]) == ["ca", "cb"]
    assert trace.steps[2:] == ["combine", "after"]


async def test_combine_is_not_called_without_conflict(harness: Harness, trace) -> None:
    seen: dict = {}
    ca = _setter(trace, "ca", "a", 1, seen)
    cb = _setter(trace, "cb", "b", 2, seen)

    def combine(base, branches):
        trace.hit("combine")
        return base

    bp = harness.define("no-conflict").fork(lambda b: b.step(ca), lambda b: b.step(cb)).join(combine).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"a": 1, "b": 2}
    assert sorted(trace.steps) == ["ca", "cb"]
