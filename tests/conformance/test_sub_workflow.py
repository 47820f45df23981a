"""Sub-workflows (docs/semantics.md#sub-workflows): start a child, wait without a worker, merge back."""

from __future__ import annotations

import pytest

from wiggle import FailedPrecondition, NotFound, PermanentError, RetryPolicy

from .conftest import Harness


async def _started_child(server, instance_id: str) -> str:
    """The child the instance's only token waits for, once that child exists ("" before)."""
    view = await server.client.get(instance_id)
    child_id = view.tokens[0].child_id if view.tokens else ""
    if not child_id:
        return ""
    try:  # the id is chosen when the token parks; the child exists once the clock started it
        await server.client.get(child_id)
    except NotFound:
        return ""
    return child_id


def _inc(key: str):
    def handler(ctx):
        return {**ctx, key: ctx.get(key, 0) + 1}

    handler.__name__ = f"inc_{key.replace('-', '_')}"
    return handler


async def test_child_context_merges_back_and_both_sides_are_linked(harness: Harness, eventually) -> None:
    child = harness.define("child").step(_inc("x")).sleep("nap", 0.05).step(_inc("y"), name="child_y").build()
    parent = (
        harness.define("parent")
        .step(_inc("x"), name="before")
        .sub_workflow("call", child)
        .step(_inc("z"), name="after")
        .build()
    )
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {"x": 1, "keep": True}, correlation_id="order-7")
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
        sub = [h for h in history if h.node_id == "call"]
        assert [h.outcome for h in sub] == ["CHILD_STARTED", "COMPLETED"]
        child_id = sub[0].child_id
        assert child_id and sub[1].child_id == child_id
        kid = await server.client.get(child_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"x": 3, "y": 1, "z": 1, "keep": True}
    # the child shows its parent, started from the parent's context, and shares its correlation id
    assert kid.status == "COMPLETED" and kid.workflow == child.name
    assert (kid.parent_id, kid.depth, kid.correlation_id) == (info.instance_id, 1, "order-7")
    assert kid.parent_token_id.startswith(info.instance_id + ".")
    assert kid.context == {"x": 3, "y": 1, "keep": True}


async def test_result_key_and_input_keys(harness: Harness) -> None:
    child = harness.define("child-rk").step(_inc("n")).build()
    parent = (
        harness.define("parent-rk")
        .sub_workflow("call", child.name, input_keys=["n"], result_key="sub")
        .build()
    )
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {"n": 41, "secret": "s"})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"n": 41, "secret": "s", "sub": {"n": 42}}


async def test_parent_waits_holding_no_worker(harness: Harness, eventually) -> None:
    child = harness.define("child-wait").user_task("approve").build()
    parent = harness.define("parent-wait").sub_workflow("call", child).step(_inc("done")).build()
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {})

        async def child_waits() -> bool:
            return bool(await _started_child(server, info.instance_id))

        await eventually(child_waits, what="the child started")
        view = await server.client.get(info.instance_id)
        (tok,) = view.tokens
        assert (tok.node_id, tok.status, tok.lease_owner, tok.queue) == ("call", "AWAITING", "", "")
        kid_id = tok.child_id

        async def child_awaits() -> bool:
            return any(t.status == "AWAITING" for t in (await server.client.get(kid_id)).tokens)

        await eventually(child_awaits, what="the child awaits its user task")
        await server.client.complete_user_task(kid_id, "approve", {"ok": 1})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.context == {"ok": 1, "done": 1}


async def test_failed_child_fails_the_step_and_the_retry_policy_applies(harness: Harness, trace) -> None:
    def flaky(ctx):
        step = trace.hit("flaky")
        if len(trace.steps) < 3:
            raise PermanentError(f"bad luck {len(trace.steps)}")
        return {**ctx, "ok": step.instance_id}

    child = harness.define("child-flaky").step(flaky).build()
    parent = harness.define("parent-retry").sub_workflow("call", child, retry=RetryPolicy.fixed(3, 0)).build()
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {})
        done = await harness.finish(server, info.instance_id)
        history = [h for h in await server.client.history(info.instance_id) if h.node_id == "call"]
    assert done.status == "COMPLETED", done.error
    assert [(h.outcome, h.attempt) for h in history] == [
        ("CHILD_STARTED", 1),
        ("RETRY", 1),
        ("CHILD_STARTED", 2),
        ("RETRY", 2),
        ("CHILD_STARTED", 3),
        ("COMPLETED", 3),
    ]
    kids = [h.child_id for h in history if h.outcome == "CHILD_STARTED"]
    assert len(set(kids)) == 3  # a new child per attempt
    assert done.context == {"ok": kids[-1]}
    assert "bad luck 1" in history[1].error and kids[0] in history[1].error


async def test_failed_child_without_retries_left_fails_the_parent(harness: Harness) -> None:
    def boom(ctx):
        raise PermanentError("boom")

    child = harness.define("child-boom").step(boom).build()
    parent = harness.define("parent-boom").sub_workflow("call", child, retry=RetryPolicy.none()).build()
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error.startswith("call: child instance ") and "ended FAILED" in done.error
    assert "boom" in done.error


async def test_failed_child_takes_the_error_branch(harness: Harness) -> None:
    def boom(ctx):
        raise PermanentError("boom")

    child = harness.define("child-err").step(boom).build()
    parent = (
        harness.define("parent-err")
        .sub_workflow("call", child, retry=RetryPolicy.none(), on_error=lambda b: b.step(_inc("handled")))
        .step(_inc("after"))
        .build()
    )
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"handled": 1, "after": 1}


async def test_cancelling_the_parent_cancels_its_children(harness: Harness, eventually) -> None:
    grandchild = harness.define("grandchild-c").user_task("wait").build()
    child = harness.define("child-c").sub_workflow("deeper", grandchild).build()
    parent = harness.define("parent-c").sub_workflow("call", child).build()
    async with harness.server() as server:  # no worker steps: nothing for a worker to serve
        for bp in (grandchild, child, parent):
            await server.client.register(bp)
        info = await server.client.start(parent.name, {})
        ids: list[str] = [info.instance_id]

        async def chain_started() -> bool:
            child_id = await _started_child(server, ids[-1])
            if child_id:
                ids.append(child_id)
            return len(ids) == 3

        await eventually(chain_started, what="parent, child and grandchild started")
        _, changed = await server.client.cancel(info.instance_id, "stop")
        assert changed

        async def all_cancelled() -> bool:
            return [(await server.client.get(i)).status for i in ids] == ["CANCELLED"] * 3

        await eventually(all_cancelled, what="child and grandchild cancelled")
        kid = await server.client.get(ids[1])
    assert kid.reason == f"parent {info.instance_id} is CANCELLED"


async def test_children_of_children(harness: Harness) -> None:
    leaf = harness.define("leaf").step(_inc("n")).build()
    middle = harness.define("middle").step(_inc("n"), name="mid").sub_workflow("to-leaf", leaf).build()
    top = harness.define("top").sub_workflow("to-middle", middle).step(_inc("n"), name="top_n").build()
    async with harness.running([leaf, middle, top]) as (server, _):
        info = await server.client.start(top.name, {"n": 0})
        done = await harness.finish(server, info.instance_id)
        mid_id = next(h.child_id for h in await server.client.history(info.instance_id) if h.child_id)
        leaf_id = next(h.child_id for h in await server.client.history(mid_id) if h.child_id)
        leaf_info = await server.client.get(leaf_id)
    assert done.status == "COMPLETED" and done.context == {"n": 3}
    assert (leaf_info.parent_id, leaf_info.depth) == (mid_id, 2)


async def test_depth_limit_fails_with_a_clear_error(harness: Harness) -> None:
    wf = harness.define("recurse")
    bp = wf.sub_workflow("again", wf.name, retry=RetryPolicy.none()).build()
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp.name, {})
        done = await harness.finish(server, info.instance_id, timeout=30)
    assert done.status == "FAILED"
    assert "would nest 11 deep; the limit is 10" in done.error, done.error


async def test_unknown_child_workflow_is_refused_at_register(harness: Harness) -> None:
    parent = harness.define("orphan").sub_workflow("call", "no-such-workflow").build()
    pinned = (
        harness.define("orphan-pinned").sub_workflow("call", parent.name, version="0123456789abcdef").build()
    )
    async with harness.server() as server:
        with pytest.raises(FailedPrecondition) as err:
            await server.client.register(parent)
        assert str(err.value) == (
            f"sub-workflow node 'call' of {parent.name!r} starts workflow 'no-such-workflow', "
            "which is not registered; register it first"
        )
        with pytest.raises(FailedPrecondition, match="version '0123456789abcdef', which is not registered"):
            await server.client.register(pinned)
        assert await server.client.list_workflows(parent.name) == []
        assert await server.client.list_workflows(pinned.name) == []


async def test_for_each_over_sub_workflows(harness: Harness) -> None:
    def square(ctx):
        return {**ctx, "sq": ctx["item"] ** 2}

    child = harness.define("child-fe").step(square).build()
    parent = (
        harness.define("parent-fe")
        .for_each("xs", lambda b: b.sub_workflow("each", child, input_keys=["item"], result_key="result"))
        .build()
    )
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {"xs": [1, 2, 3]})
        done = await harness.finish(server, info.instance_id)
        listed, _ = await server.client.list(workflow=child.name)
    assert done.status == "COMPLETED", done.error
    assert done.context == {"xs": [1, 2, 3], "results": [{"item": i, "sq": i * i} for i in (1, 2, 3)]}
    assert sorted(c.context["item"] for c in listed) == [1, 2, 3]
    assert {c.parent_id for c in listed} == {info.instance_id}
