"""Sub-workflow defects: the depth limit multiplied by retries, retrying a parent whose child
failed, and retry from a node inside a for_each body (docs/semantics.md#sub-workflows,
docs/semantics.md#resuming-a-failed-instance)."""

from __future__ import annotations

import threading

import pytest

from wiggle import InvalidArgument, PermanentError, RetryPolicy

from .conftest import Harness


async def test_self_recursion_fails_the_whole_chain_once_without_retries(harness: Harness) -> None:
    depth = 3
    wf = harness.define("recurse-once")
    bp = wf.sub_workflow("again", wf.name).build()  # the workflow's default retry policy: 3 attempts
    async with harness.server() as server:
        server.server.engine.config.max_sub_workflow_depth = depth
        await server.client.register(bp)
        info = await server.client.start(bp.name, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        listed, _ = await server.client.list(workflow=bp.name, page_size=200)
        histories = {i.instance_id: await server.client.history(i.instance_id) for i in listed}
    assert done.status == "FAILED"
    assert f"would nest {depth + 1} deep; the limit is {depth}" in done.error, done.error
    # one instance per level, each failed once: no level retried its child
    assert len(listed) == depth + 1, [(i.depth, i.status) for i in listed]
    assert sorted(i.depth for i in listed) == list(range(depth + 1))
    assert {i.status for i in listed} == {"FAILED"}
    assert {i.reason for i in listed} == {"sub-workflow depth limit"}  # what each parent goes by
    for instance_id, history in histories.items():
        assert not [h for h in history if h.outcome == "RETRY"], (instance_id, history)
        assert [h.outcome for h in history if h.node_id == "again"][-1] == "FAILED", history
    deepest = next(i for i in listed if i.depth == depth)
    assert deepest.error.startswith(f"sub-workflow 'again': starting {bp.name!r} would nest {depth + 1} deep")


async def test_depth_limit_failure_is_not_retried_even_with_retries_left(harness: Harness) -> None:
    wf = harness.define("recurse-retry")
    bp = wf.sub_workflow("again", wf.name, retry=RetryPolicy.fixed(5, 0)).build()
    async with harness.server() as server:
        server.server.engine.config.max_sub_workflow_depth = 2
        await server.client.register(bp)
        info = await server.client.start(bp.name, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        listed, _ = await server.client.list(workflow=bp.name, page_size=200)
    assert done.status == "FAILED" and "would nest 3 deep; the limit is 2" in done.error, done.error
    assert len(listed) == 3


class Switch:
    """A handler fails while ``broken`` is set (thread-safe: handlers may run in the pool)."""

    def __init__(self) -> None:
        self.broken = threading.Event()
        self.broken.set()


async def test_plain_retry_of_a_parent_whose_child_failed_restarts_the_sub_workflow_step(
    harness: Harness, trace
) -> None:
    switch = Switch()

    def work(ctx):
        trace.hit("work")
        if switch.broken.is_set():
            raise PermanentError("not yet")
        return {**ctx, "worked": True}

    child = harness.define("child-retry").step(work).build()
    parent = harness.define("parent-retry").sub_workflow("call", child, retry=RetryPolicy.none()).build()
    async with harness.running([child, parent]) as (server, _):
        info = await server.client.start(parent.name, {"n": 1})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED" and "not yet" in failed.error, failed.error
        switch.broken.clear()
        resumed = await server.client.retry(info.instance_id, requested_by="ops")
        assert resumed.error == ""
        done = await harness.finish(server, info.instance_id)
        history = [h for h in await server.client.history(info.instance_id) if h.node_id == "call"]
    assert done.status == "COMPLETED", done.error
    assert done.context == {"n": 1, "worked": True}
    assert [h.outcome for h in history] == [
        "CHILD_STARTED",
        "FAILED",
        "RESUMED",
        "CHILD_STARTED",
        "COMPLETED",
    ]
    kids = [h.child_id for h in history if h.outcome == "CHILD_STARTED"]
    assert len(set(kids)) == 2 and all(kids)  # a new child for the restarted step
    assert trace.steps == ["work", "work"]


async def test_retry_from_inside_a_for_each_body_is_refused_and_changes_nothing(
    harness: Harness, trace
) -> None:
    def work(ctx):
        trace.hit("work")
        raise PermanentError("no")

    bp = harness.define("resume-for-each").for_each("xs", lambda b: b.step(work)).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"xs": [1, 2]})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED"
        history = await server.client.history(info.instance_id)
        with pytest.raises(InvalidArgument) as err:
            await server.client.retry(info.instance_id, from_node="work")
        after = await server.client.get(info.instance_id)
        history_after = await server.client.history(info.instance_id)
    assert "'work'" in str(err.value) and "inside a for_each body" in str(err.value), str(err.value)
    assert after == failed
    assert history_after == history


async def test_retry_from_a_fork_branch_inside_a_for_each_body_is_refused(harness: Harness, trace) -> None:
    def left(ctx):
        trace.hit("left")
        raise PermanentError("no")

    def right(ctx):
        return ctx

    bp = (
        harness.define("resume-for-each-fork")
        .for_each("xs", lambda b: b.fork(lambda f: f.step(left), lambda f: f.step(right)).join())
        .step(right, name="after")
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"xs": [1]})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED"
        for node in ("left", "fork", "join"):
            with pytest.raises(InvalidArgument) as err:
                await server.client.retry(info.instance_id, from_node=node)
            message = str(err.value)
            assert f"{node!r}" in message and "inside a for_each body" in message, message
        after = await server.client.get(info.instance_id)
    assert after == failed
