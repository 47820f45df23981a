"""Resuming a FAILED instance (docs/semantics.md#resuming-a-failed-instance)."""

from __future__ import annotations

import threading

import grpc
import pytest

from wiggle import FailedPrecondition, InvalidArgument, NotFound, PermanentError, RetryPolicy
from wiggle._rpc import wiggle_pb2 as pb

from .conftest import Harness


class Switch:
    """A handler fails while ``broken`` is set (thread-safe: handlers may run in the pool)."""

    def __init__(self) -> None:
        self.broken = threading.Event()
        self.broken.set()


def _flow(harness: Harness, trace, switch: Switch, base: str):
    def first(ctx):
        trace.hit("first")
        return {**ctx, "first": ctx.get("first", 0) + 1}

    def charge(ctx):
        info = trace.hit("charge")
        if switch.broken.is_set():
            raise RuntimeError(f"card service down (attempt {info.attempt})")
        return {**ctx, "charged": True}

    def last(ctx):
        trace.hit("last")
        return {**ctx, "last": True}

    return (
        harness.define(base)
        .step(first)
        .step(charge, retry=RetryPolicy(max_attempts=2, initial_backoff_millis=10))
        .step(last)
        .build()
    )


async def test_retry_restarts_the_failed_step_with_a_fresh_budget(harness: Harness, trace) -> None:
    switch = Switch()
    bp = _flow(harness, trace, switch, "resume")
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"order": 1})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED" and "card service down" in failed.error
        assert trace.attempts["charge"] == [1, 2]
        switch.broken.clear()
        resumed = await server.client.retry(info.instance_id, requested_by="ops@example")
        assert resumed.status in ("RUNNING", "COMPLETED") and resumed.error == ""
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED" and done.error == "" and done.finished_at >= failed.finished_at
    assert done.context == {"order": 1, "first": 1, "charged": True, "last": True}
    assert trace.steps == ["first", "charge", "charge", "charge", "last"]  # "first" kept, not re-run
    assert trace.attempts["charge"] == [1, 2, 1]  # a fresh attempt budget
    resumes = [e for e in history if e.outcome == "RESUMED"]
    assert [(e.node_id, e.worker_id, e.kind) for e in resumes] == [("charge", "ops@example", "RETRY")]
    outcomes = [(e.node_id, e.outcome) for e in history if e.node_id == "charge"]
    assert outcomes == [
        ("charge", "RETRY"),
        ("charge", "FAILED"),
        ("charge", "RESUMED"),
        ("charge", "COMPLETED"),
    ]


async def test_retry_from_a_named_node_with_a_replacement_context(harness: Harness, trace) -> None:
    switch = Switch()
    bp = _flow(harness, trace, switch, "resume-from")
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"order": 1})
        await harness.finish(server, info.instance_id)
        switch.broken.clear()
        await server.client.retry(info.instance_id, from_node="first", context={"order": 2})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"order": 2, "first": 1, "charged": True, "last": True}
    assert trace.steps == ["first", "charge", "charge", "first", "charge", "last"]
    resumed = [e for e in history if e.outcome == "RESUMED"]
    assert len(resumed) == 1 and resumed[0].node_id == "first" and "replacement context" in resumed[0].error
    assert "@" in resumed[0].worker_id  # the default requester: user@host


async def test_retry_of_a_failed_fork_branch_keeps_the_branch_that_finished(harness: Harness, trace) -> None:
    switch = Switch()

    def left(ctx):
        trace.hit("left")
        return {**ctx, "left": True}

    def right(ctx):
        trace.hit("right")
        if switch.broken.is_set():
            raise PermanentError("right is broken")
        return {**ctx, "right": True}

    def after(ctx):
        trace.hit("after")
        return {**ctx, "after": True}

    bp = (
        harness.define("resume-fork")
        .fork(lambda b: b.step(left), lambda b: b.step(right))
        .join()
        .step(after)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED"
        switch.broken.clear()
        await server.client.retry(info.instance_id)
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"left": True, "right": True, "after": True}
    assert trace.steps.count("right") == 2 and trace.steps.count("after") == 1
    assert trace.steps.count("left") in (1, 2)  # 2 only if "left" had not finished when "right" failed


async def test_retry_bad_input_changes_nothing(harness: Harness, trace, eventually) -> None:
    switch = Switch()
    bp = _flow(harness, trace, switch, "resume-bad")
    fork_bp = (
        harness.define("resume-bad-fork").fork(lambda b: b.step(lambda c: c, name="inside")).join().build()
    )
    async with harness.server() as server:
        await server.client.register(bp)
        await server.client.register(fork_bp)
        running = await server.client.start(bp, {})
        before = await server.client.get(running.instance_id)
        with pytest.raises(FailedPrecondition) as not_failed:
            await server.client.retry(running.instance_id)
        assert "RUNNING" in str(not_failed.value) and "only a FAILED instance" in str(not_failed.value)
        assert await server.client.get(running.instance_id) == before
        with pytest.raises(NotFound):
            await server.client.retry("wi-000000000000000000000000")
        async with server.worker([bp], harness.options()):
            failed = await harness.finish(server, running.instance_id)
        assert failed.status == "FAILED"
        history_before = await server.client.history(running.instance_id)
        with pytest.raises(InvalidArgument) as unknown:
            await server.client.retry(running.instance_id, from_node="no-such-node")
        assert "no-such-node" in str(unknown.value)
        with pytest.raises(InvalidArgument) as end:
            await server.client.retry(running.instance_id, from_node="end")
        assert "END" in str(end.value)
        with pytest.raises(InvalidArgument, match="^context must be a dict"):  # the client's own check
            await server.client.retry(running.instance_id, context=[1])
        with pytest.raises(grpc.RpcError) as not_object:  # the server's, past the client
            await server.client.stub.RetryInstance(
                pb.RetryInstanceRequest(
                    instance_id=running.instance_id, context_json=b"[1]", replace_context=True
                )
            )
        assert "context_json must be a JSON object" in str(not_object.value.details())
        assert await server.client.get(running.instance_id) == failed
        assert await server.client.history(running.instance_id) == history_before
        # a node inside a fork branch is refused too
        forked = await server.client.start(fork_bp, {})
        await server.client.cancel(forked.instance_id, "test")
        with pytest.raises(FailedPrecondition) as cancelled:
            await server.client.retry(forked.instance_id, from_node="inside")
        assert "CANCELLED" in str(cancelled.value)
        # a COMPLETED instance cannot be retried
        switch.broken.clear()
        await server.client.retry(running.instance_id)
        async with server.worker([bp], harness.options()):
            done = await harness.finish(server, running.instance_id)
        with pytest.raises(FailedPrecondition) as completed:
            await server.client.retry(running.instance_id)
        assert "COMPLETED" in str(completed.value)
        assert await server.client.get(running.instance_id) == done


async def test_retry_from_inside_a_fork_is_refused(harness: Harness, trace) -> None:
    def inside(ctx):
        trace.hit("inside")
        raise PermanentError("no")

    bp = (
        harness.define("resume-fork-node")
        .fork(lambda b: b.step(inside), lambda b: b.step(lambda c: c, name="other"))
        .join()
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        failed = await harness.finish(server, info.instance_id)
        with pytest.raises(InvalidArgument) as err:
            await server.client.retry(info.instance_id, from_node="inside")
        after = await server.client.get(info.instance_id)
    assert "inside a fork branch" in str(err.value)
    assert after == failed


async def test_retry_of_an_instance_failed_at_an_end_needs_a_node(harness: Harness, trace) -> None:
    def a(ctx):
        trace.hit("a")
        return {**ctx, "a": ctx.get("a", 0) + 1}

    bp = harness.define("resume-end").step(a).end("rejected", success=False).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED" and failed.error == "rejected"
        history = await server.client.history(info.instance_id)
        with pytest.raises(FailedPrecondition) as err:
            await server.client.retry(info.instance_id)
        assert "no step in progress" in str(err.value) and "from_node" in str(err.value)
        assert await server.client.get(info.instance_id) == failed
        assert await server.client.history(info.instance_id) == history
        await server.client.retry(info.instance_id, from_node="a")
        again = await harness.finish(server, info.instance_id)
    assert again.status == "FAILED" and again.context == {"a": 2}
    assert trace.steps == ["a", "a"]


async def test_retry_after_a_join_conflict_needs_a_node(harness: Harness, trace) -> None:
    def left(ctx):
        trace.hit("left")
        return {**ctx, "k": "left"}

    def right(ctx):
        trace.hit("right")
        return {**ctx, "k": "right"}

    bp = (
        harness.define("resume-conflict").fork(lambda b: b.step(left), lambda b: b.step(right)).join().build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED" and "both changed 'k'" in failed.error
        with pytest.raises(FailedPrecondition):
            await server.client.retry(info.instance_id)
        after = await server.client.get(info.instance_id)
    assert after == failed


@pytest.mark.parametrize("opener", ["fork", "for_each"])
async def test_retry_from_a_join_is_refused(harness: Harness, trace, opener: str) -> None:
    """A join only closes branches: a main-line token restarted there has none to bring, so the
    retry is refused up front, naming the node, and changes nothing (it used to be accepted and
    then fail the instance with "join ... reached outside its fork")."""

    def after(ctx):
        trace.hit("after")
        raise PermanentError("no")

    flow = harness.define(f"resume-join-{opener}")
    if opener == "fork":
        flow = flow.fork(lambda b: b.step(lambda c: {**c, "l": 1}, name="left")).join(name="closing")
    else:
        flow = flow.for_each("xs", lambda b: b.step(lambda c: c, name="per_x"), name="closing_each")
    bp = flow.step(after).build()
    join = next(n.id for n in bp.definition.nodes if n.kind.value == "JOIN")
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"xs": [1, 2]})
        failed = await harness.finish(server, info.instance_id)
        assert failed.status == "FAILED" and trace.steps == ["after"]
        history = await server.client.history(info.instance_id)
        with pytest.raises(InvalidArgument) as err:
            await server.client.retry(info.instance_id, from_node=join)
        assert await server.client.get(info.instance_id) == failed
        assert await server.client.history(info.instance_id) == history
    assert f"node {join!r} is a JOIN" in str(err.value)
