"""Signals (docs/semantics.md#signal): delivery, buffering, duplicates, deadlines, bad input."""

from __future__ import annotations

import grpc
import pytest

from wiggle import FailedPrecondition, InvalidArgument, NotFound
from wiggle._rpc import wiggle_pb2 as pb

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


async def _awaiting(server, eventually, instance_id: str, node: str):
    async def parked() -> bool:
        info = await server.client.get(instance_id)
        return any(t.node_id == node and t.status == "AWAITING" for t in info.tokens)

    await eventually(parked, what=f"signal wait {node!r} to be reached")
    return await server.client.get(instance_id)


async def test_signal_delivered_to_a_waiting_token(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = harness.define("sig").step(prepare).wait_signal("approved").step(ship).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"order": 7})
        await _awaiting(server, eventually, info.instance_id, "approved")
        assert trace.steps == ["prepare"]
        sent = await server.client.signal(info.instance_id, "approved", {"approved": True}, sender="ann")
        assert sent.outcome == "DELIVERED" and sent.delivered
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"order": 7, "prepared": True, "approved": True, "shipped": True}
    assert trace.steps == ["prepare", "ship"]
    signalled = [e for e in history if e.outcome == "SIGNALLED"]
    assert [(e.node_id, e.kind, e.worker_id) for e in signalled] == [
        ("approved", "SIGNAL", "(signal approved from ann)")
    ]


async def test_signal_sent_early_is_buffered_then_consumed(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = harness.define("sig-early").step(prepare).wait_signal("approved", key="approval").step(ship).build()
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})  # no worker yet: READY at "prepare"
        sent = await server.client.signal(info.instance_id, "approved", {"by": "bob"}, "sig-1", sender="bob")
        assert sent.outcome == "BUFFERED"
        assert [(s.name, s.data, s.signal_id) for s in sent.instance.pending_signals] == [
            ("approved", {"by": "bob"}, "sig-1")
        ]
        again = await server.client.signal(info.instance_id, "approved", {"by": "eve"}, "sig-1")
        assert again.outcome == "DUPLICATE"
        assert len(again.instance.pending_signals) == 1
        async with server.worker([bp], harness.options()):
            done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"prepared": True, "approval": {"by": "bob"}, "shipped": False}
    assert done.pending_signals == ()
    # the sender of a buffered signal reaches the history too (it was dropped)
    assert [e.worker_id for e in history if e.outcome == "SIGNALLED"] == ["(signal approved from bob)"]
    assert trace.steps == ["prepare", "ship"]


async def test_duplicate_signal_id_is_not_applied_twice(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = (
        harness.define("sig-dup")
        .step(prepare)
        .wait_signal("go", name="first-go")
        .wait_signal("go", name="second-go")
        .step(ship)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        await _awaiting(server, eventually, info.instance_id, "first-go")
        first = await server.client.signal(info.instance_id, "go", {"n": 1}, "same-id")
        assert first.outcome == "DELIVERED"
        await _awaiting(server, eventually, info.instance_id, "second-go")
        dup = await server.client.signal(info.instance_id, "go", {"n": 2}, "same-id")
        assert dup.outcome == "DUPLICATE"
        still = await server.client.get(info.instance_id)
        assert [t.node_id for t in still.tokens] == ["second-go"] and still.context["n"] == 1
        second = await server.client.signal(info.instance_id, "go", {"n": 3}, "other-id")
        assert second.outcome == "DELIVERED"
        done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.context["n"] == 3


async def test_signal_deadline_takes_the_timeout_path(harness: Harness, trace) -> None:
    prepare, ship, escalate = _handlers(trace)
    bp = (
        harness.define("sig-timeout")
        .step(prepare)
        .wait_signal("approved", timeout=0.2, on_timeout=lambda b: b.step(escalate))
        .step(ship)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED"
    assert done.context == {"prepared": True, "escalated": True, "shipped": False}
    assert trace.steps == ["prepare", "escalate", "ship"]
    assert [e.outcome for e in history if e.node_id == "approved"] == ["TIMED_OUT"]


async def test_signal_deadline_without_path_fails(harness: Harness, trace) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = (
        harness.define("sig-timeout-fail")
        .step(prepare)
        .wait_signal("approved", timeout=0.2)
        .step(ship)
        .build()
    )
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id)
    assert done.status == "FAILED"
    assert done.error == "signal wait 'approved' timed out"
    assert trace.steps == ["prepare"]


async def test_signal_bad_input_changes_nothing(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = harness.define("sig-bad").step(prepare).wait_signal("approved").step(ship).build()
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {})
        before = await _awaiting(server, eventually, info.instance_id, "approved")
        with pytest.raises(NotFound) as unknown:
            await server.client.signal(info.instance_id, "no-such-signal", {})
        assert "no-such-signal" in str(unknown.value) and "'approved'" in str(unknown.value)
        with pytest.raises(InvalidArgument, match="^data must be a dict"):  # the client's own check
            await server.client.signal(info.instance_id, "approved", [1, 2])
        with pytest.raises(grpc.RpcError) as not_object:  # the server's, past the client
            await server.client.stub.SignalInstance(
                pb.SignalInstanceRequest(instance_id=info.instance_id, name="approved", data_json=b"[1,2]")
            )
        assert "data_json must be a JSON object" in str(not_object.value.details())
        with pytest.raises(NotFound):
            await server.client.signal("wi-000000000000000000000000", "approved", {})
        assert await server.client.get(info.instance_id) == before
        await server.client.signal(info.instance_id, "approved", {"approved": True})
        done = await harness.finish(server, info.instance_id)
        with pytest.raises(FailedPrecondition) as finished:
            await server.client.signal(info.instance_id, "approved", {"late": True})
        assert "COMPLETED" in str(finished.value)
        after = await server.client.get(info.instance_id)
        history = await server.client.history(info.instance_id)
    assert after == done and after.pending_signals == ()
    assert len([e for e in history if e.outcome == "SIGNALLED"]) == 1


async def test_a_signal_named_after_a_user_task_completes_it(harness: Harness, trace, eventually) -> None:
    prepare, ship, _ = _handlers(trace)
    bp = harness.define("sig-ut").step(prepare).user_task("approval").step(ship).build()
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        before = await server.client.get(info.instance_id)
        # a user task is not buffered: before it is awaited the signal is refused, changing nothing
        with pytest.raises(FailedPrecondition) as early:
            await server.client.signal(info.instance_id, "approval", {"approved": True}, "s-1")
        assert "not waiting on user task 'approval'" in str(early.value)
        assert await server.client.get(info.instance_id) == before
        async with server.worker([bp], harness.options()):
            await _awaiting(server, eventually, info.instance_id, "approval")
            sent = await server.client.signal(info.instance_id, "approval", {"approved": True}, "s-1")
            assert sent.outcome == "DELIVERED"
            done = await harness.finish(server, info.instance_id)
        dup = await server.client.signal(info.instance_id, "approval", {"approved": False}, "s-1")
    assert dup.outcome == "DUPLICATE"
    assert done.status == "COMPLETED" and done.context == {
        "prepared": True,
        "approved": True,
        "shipped": True,
    }
