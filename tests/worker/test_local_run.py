"""The local-run driver against a fake transport: every Decision and handback path."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgspec
import pytest

from wiggle import ExecutionMode, Handback, PermanentError, Workflow
from wiggle._fast import decode_batch
from wiggle._limits import PAYLOAD_REMEDY
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.local_run import Decision
from wiggle._worker.options import WorkerOptions

from .fakes import FakeTransport, Harness, refuse


def s1(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "s1": True}


def s2(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "s2": True}


def s3(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "s3": True}


async def a2(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "a2": True}


def boom(ctx: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("boom")


def never(ctx: dict[str, Any]) -> dict[str, Any]:
    raise PermanentError("no")


def linear(mode: ExecutionMode = ExecutionMode.LOCAL_ASYNC, *fns: Any) -> Any:
    wf = Workflow.define("lr").execution(mode)
    for fn in fns or (s1, s2, s3):
        wf = wf.step(fn)
    return wf.build()


def records(request: pb.AdvanceRunRequest) -> list[tuple[Any, ...]]:
    # a record as the tuple of its wire form: ("T", node, changed, removed), ("P", node, value)...
    return (
        [tuple(msgspec.to_builtins(r)) for r in decode_batch(request.steps_batch)]
        if request.steps_batch
        else []
    )


@pytest.fixture
async def harnesses() -> AsyncIterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for h in made:
        h.close()


def harness(made: list[Harness], bp: Any, transport: FakeTransport, **kw: Any) -> Harness:
    h = Harness(bp, transport, **kw)
    made.append(h)
    return h


async def test_local_async_buffers_the_run_and_hands_back_once(harnesses: list[Harness]) -> None:
    transport = FakeTransport()
    h = harness(harnesses, linear(), transport)
    await h.run()
    [request] = transport.advanced
    assert request.final and request.handback_reason == Handback.TERMINAL.value
    assert records(request) == [
        ("T", "s1", {"s1": True}, []),
        ("T", "s2", {"s2": True}, []),
        ("T", "s3", {"s3": True}, []),
    ]
    assert (h.stats.local_runs.count, h.stats.local_runs.steps) == (1, 3) and h.stats.steps == 3
    assert h.stats.handbacks == {"TERMINAL": 1}
    assert h.env.advance.supported is True


async def test_local_sync_flushes_every_step(harnesses: list[Harness]) -> None:
    transport = FakeTransport()
    h = harness(harnesses, linear(ExecutionMode.LOCAL_SYNC), transport)
    await h.run(execution_mode="LOCAL_SYNC")
    assert [(r.final, len(records(r))) for r in transport.advanced] == [(False, 1), (False, 1), (True, 1)]


@pytest.mark.parametrize("sync_handlers", ["thread", "inline"])
async def test_batch_size_flushes_and_async_handlers_join_the_run(
    harnesses: list[Harness], sync_handlers: str
) -> None:
    transport = FakeTransport()
    options = WorkerOptions(local_batch_size=2, flush_interval=0)
    h = harness(
        harnesses,
        linear(ExecutionMode.LOCAL_ASYNC, s1, a2, s3),
        transport,
        options=options,
        sync_handlers=sync_handlers,
    )
    await h.run()
    assert [[r[1] for r in records(x)] for x in transport.advanced] == [["s1", "a2"], ["s3"]]
    assert [x.final for x in transport.advanced] == [False, True]


async def test_a_checkpoint_flushes_after_its_step(harnesses: list[Harness]) -> None:
    bp = Workflow.define("cp").execution(ExecutionMode.LOCAL_ASYNC).step(s1).checkpoint().step(s2).build()
    transport = FakeTransport()
    await harness(harnesses, bp, transport).run()
    assert [[r[1] for r in records(x)] for x in transport.advanced] == [["s1"], ["s2"]]


@pytest.mark.parametrize("fn, retryable", [(boom, True), (never, False)])
async def test_a_failing_step_hands_back_for_retry_with_the_prefix(
    harnesses: list[Harness], fn: Any, retryable: bool
) -> None:
    transport = FakeTransport()
    h = harness(harnesses, linear(ExecutionMode.LOCAL_ASYNC, s1, fn, s3), transport)
    await h.run()
    [request] = transport.advanced
    assert request.final and request.handback_reason == Handback.RETRY.value
    message = "RuntimeError: boom" if retryable else "PermanentError: no"
    assert records(request) == [("T", "s1", {"s1": True}, []), ("F", fn.__name__, message, retryable)]


async def test_a_predicate_records_its_branch(harnesses: list[Harness]) -> None:
    def big(ctx: dict[str, Any]) -> bool:
        return False

    bp = (
        Workflow.define("pr")
        .execution(ExecutionMode.LOCAL_ASYNC)
        .choose(big, if_true=lambda b: b.step(s1), if_false=lambda b: b.step(s2))
        .build()
    )
    transport = FakeTransport()
    await harness(harnesses, bp, transport).run()
    assert [r[:3] for r in records(transport.advanced[0])] == [("P", "big", False), ("T", "s2", {"s2": True})]


async def test_a_result_over_the_payload_limit_fails_the_step_for_good(harnesses: list[Harness]) -> None:
    transport = FakeTransport()
    await harness(harnesses, linear(), transport).run(max_payload_bytes=5)
    assert records(transport.advanced[0]) == [
        ("F", "s1", "step result is 11 bytes; the limit is 5 bytes" + PAYLOAD_REMEDY, False)
    ]


@pytest.mark.parametrize(
    "fields, closing, reason",
    [
        ({"max_local_steps": 2}, False, Handback.MAX_STEPS),
        ({}, True, Handback.SHUTDOWN),
        ({"lease_expires_at": 1}, False, Handback.LEASE_BUDGET),
    ],
    ids=["max-steps", "closing", "lease-low"],
)
async def test_handback_reasons_before_the_next_step(
    harnesses: list[Harness], fields: dict[str, Any], closing: bool, reason: Handback
) -> None:
    transport = FakeTransport()
    h = harness(harnesses, linear(), transport, closing=closing)
    run = await h.run(**fields)
    [request] = transport.advanced
    assert request.final and request.handback_reason == reason.value
    assert run.steps_run == (2 if reason is Handback.MAX_STEPS else 1)


async def test_a_token_that_stopped_running_ends_the_run_at_a_flush(harnesses: list[Harness]) -> None:
    stopped = pb.AdvanceRunResult(instance_status="RUNNING", token_status="CANCELLED")
    transport = FakeTransport(lambda request: stopped)
    h = harness(harnesses, linear(ExecutionMode.LOCAL_SYNC), transport)
    await h.run(execution_mode="LOCAL_SYNC")
    assert len(transport.advanced) == 1  # s2 never ran
    assert h.stats.steps == 1 and h.stats.handbacks == {"NOT_RUNNING": 1}


async def test_a_cancelled_instance_ends_the_run_with_a_note_not_a_warning(
    harnesses: list[Harness], caplog: pytest.LogCaptureFixture
) -> None:
    # An outside audit: cancelling an instance mid-run logged "WARNING AdvanceRun ... applied 0
    # of 1 steps (the server handed the run back)", pointing operators the wrong way.
    cancelled = pb.AdvanceRunResult(instance_status="CANCELLED", applied_steps=0)
    transport = FakeTransport(lambda request: cancelled)
    h = harness(harnesses, linear(ExecutionMode.LOCAL_SYNC), transport)
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        await h.run(execution_mode="LOCAL_SYNC")
    assert len(transport.advanced) == 1 and h.stats.handbacks == {"NOT_RUNNING": 1}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("wiggle")], (
        caplog.text
    )
    assert "is CANCELLED; the run stops, its 1 unreported step(s) dropped" in caplog.text


async def test_a_refused_flush_abandons_the_run(harnesses: list[Harness]) -> None:
    transport = FakeTransport(refuse(grpc.StatusCode.FAILED_PRECONDITION))
    h = harness(harnesses, linear(ExecutionMode.LOCAL_SYNC), transport)
    await h.run(execution_mode="LOCAL_SYNC")
    assert len(transport.advanced) == 1 and h.stats.steps == 1
    assert transport.completed == [] and transport.failed == []
    assert (h.stats.local_runs.count, h.stats.local_runs.steps) == (1, 1)


async def test_an_unavailable_server_is_retried(harnesses: list[Harness]) -> None:
    transport = FakeTransport(refuse(grpc.StatusCode.UNAVAILABLE))
    h = harness(harnesses, linear(), transport)
    await h.run()
    assert len(transport.advanced) == 2
    assert records(transport.advanced[0]) == records(transport.advanced[1])


@pytest.mark.parametrize("fn", [s1, boom])
async def test_without_advance_run_the_claimed_step_is_reported_server_style(
    harnesses: list[Harness], fn: Any
) -> None:
    transport = FakeTransport(refuse(grpc.StatusCode.UNIMPLEMENTED))
    h = harness(harnesses, linear(ExecutionMode.LOCAL_ASYNC, fn, s2, s3), transport)
    await h.run(context_json=b'{"v": 1}')
    assert len(transport.advanced) == 1
    assert h.env.advance.supported is False
    assert h.stats.local_runs.count == 0  # no local run took effect
    if fn is s1:
        [complete] = transport.completed
        assert (complete.task_id, complete.lease_owner) == ("t1@1", "w1")
        assert msgspec.json.decode(complete.context_json) == {"v": 1, "s1": True}  # s1's context only
        assert transport.failed == []
    else:
        [fail] = transport.failed
        assert (fail.message, fail.retryable) == ("RuntimeError: boom", True)
        assert transport.completed == []


def test_decision_is_an_enum() -> None:
    assert [d.name for d in Decision] == ["NEXT", "FLUSH", "HANDBACK"]
