"""OpenTelemetry: one trace spans the client's start, the server's StartInstance and every step a
worker runs (linked through gRPC metadata and the activation), checked with the SDK's in-memory
exporter, on every store and in SERVER and LOCAL_ASYNC modes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pg import STORES, TEST_DATABASE_URL

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle.testing import EmbeddedServer

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(tracer_provider)
    yield
    tracer_provider.shutdown()


def first(ctx: dict) -> dict:
    with trace.get_tracer("app").start_as_current_span("app work first"):  # under the step's span
        return {**ctx, "first": True}


async def second(ctx: dict) -> dict:
    # each handler runs in a context of its step's own (wiggle/_worker/step.py step_context),
    # copied inside the step's span: a span the handler starts is the step span's child
    with trace.get_tracer("app").start_as_current_span("app work second"):
        await asyncio.sleep(0)
        return {**ctx, "second": True}


def flaky(ctx: dict) -> dict:
    if not ctx.get("again"):
        raise RuntimeError("once")
    return ctx


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_ASYNC], ids=lambda m: m.value)
async def test_one_trace_spans_client_server_and_worker(
    mode: ExecutionMode,
    store: str,
    pg_schema: str,  # noqa: F811
) -> None:
    EXPORTER.clear()
    flow = (
        Workflow.define(f"traced-{mode.value.lower()}-{store}")
        .execution(mode)
        .step(first)
        .step(second)
        .step(flaky, retry=RetryPolicy.fixed(2, 0.01))
        .build()
    )
    settings = (
        {"database_url": TEST_DATABASE_URL, "database_schema": pg_schema} if store == "postgres" else {}
    )
    async with EmbeddedServer(**settings) as server:
        await server.client.register(flow)
        async with server.worker([flow]):
            info = await server.client.start(flow, {})
            done = await server.client.wait(info.instance_id, timeout=30)
    assert done.status == "FAILED"  # flaky never passes: two attempts, both traced
    spans = EXPORTER.get_finished_spans()
    (start,) = [s for s in spans if s.name == "wiggle.start"]
    trace_id = start.context.trace_id
    mine = [s for s in spans if s.context.trace_id == trace_id]
    (server_span,) = [s for s in mine if s.name == "wiggle.StartInstance"]
    assert start.kind == trace.SpanKind.CLIENT and start.parent is None
    assert server_span.kind == trace.SpanKind.SERVER and server_span.parent.span_id == start.context.span_id
    steps = [s for s in mine if s.name.startswith("wiggle.step ")]
    assert sorted(s.name for s in steps) == [
        "wiggle.step first",
        "wiggle.step flaky",
        "wiggle.step flaky",
        "wiggle.step second",
    ]
    for name in ("first", "second"):
        (step,) = [s for s in steps if s.name == f"wiggle.step {name}"]
        (work,) = [s for s in mine if s.name == f"app work {name}"]
        assert work.parent.span_id == step.context.span_id
    assert all(s.parent.span_id == server_span.context.span_id for s in steps)
    assert {s.attributes["wiggle.instance_id"] for s in steps} == {info.instance_id}
    assert sorted(s.attributes["wiggle.attempt"] for s in steps if s.name.endswith("flaky")) == [1, 2]
    reports = [s for s in mine if s.name.startswith("wiggle.report ")]
    assert reports and all(s.kind == trace.SpanKind.CLIENT for s in reports)
    # nothing of this instance's work ended up in another trace
    assert not [s for s in spans if s.name.startswith("wiggle.step") and s.context.trace_id != trace_id]


def kid(ctx: dict) -> dict:
    return {**ctx, "kid": True}


@pytest.mark.parametrize("store", STORES)
async def test_a_sub_workflow_joins_its_parents_trace_and_a_schedule_tick_starts_its_instances(
    store: str,
    pg_schema: str,  # noqa: F811
) -> None:
    EXPORTER.clear()
    child = Workflow.define(f"traced-child-{store}").step(kid).build()
    parent = (
        Workflow.define(f"traced-parent-{store}")
        .step(first)
        .sub_workflow("call", child, result_key="c")
        .build()
    )
    ticking = Workflow.define(f"traced-ticking-{store}").step(first, name="tick_step").build()
    settings = (
        {"database_url": TEST_DATABASE_URL, "database_schema": pg_schema} if store == "postgres" else {}
    )
    async with EmbeddedServer(**settings) as server:
        client = server.client
        for flow in (child, parent, ticking):
            await client.register(flow)
        async with server.worker([child, parent, ticking]):
            info = await client.start(parent, {})
            assert (await client.wait(info.instance_id, timeout=30)).status == "COMPLETED"
            await client.create_schedule(f"traced-{store}", ticking, {}, every=1.0)
            for _ in range(400):
                page, _ = await client.list(workflow=ticking.name, status="COMPLETED")
                if page:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the schedule's instance did not complete")
            await client.delete_schedule(f"traced-{store}")
            scheduled = page[-1]
        (child_info,), _ = await client.list(workflow=child.name)
    spans = EXPORTER.get_finished_spans()

    # the parent's trace holds the child's step, under the sub-workflow span
    (server_span,) = [
        s
        for s in spans
        if s.name == "wiggle.StartInstance" and s.attributes["wiggle.workflow"] == parent.name
    ]
    trace_id = server_span.context.trace_id
    (sub,) = [s for s in spans if s.name == f"wiggle.sub_workflow {child.name}"]
    assert sub.context.trace_id == trace_id
    assert sub.attributes["wiggle.instance_id"] == child_info.instance_id
    (kid_step,) = [s for s in spans if s.name == "wiggle.step kid"]
    assert kid_step.context.trace_id == trace_id and kid_step.parent.span_id == sub.context.span_id
    assert kid_step.attributes["wiggle.instance_id"] == child_info.instance_id
    parent_steps = [s for s in spans if s.name == "wiggle.step first" and s.context.trace_id == trace_id]
    assert len(parent_steps) == 1

    # the schedule's instance: its steps are under the tick's span, in the tick's trace
    ticks = [
        s
        for s in spans
        if s.name == "wiggle.schedule.tick" and s.attributes["wiggle.instance_id"] == scheduled.instance_id
    ]
    assert len(ticks) == 1, [s.attributes for s in spans if s.name == "wiggle.schedule.tick"]
    (tick,) = ticks
    assert tick.attributes["wiggle.schedule_id"] == f"traced-{store}" and tick.parent is None
    tick_steps = [
        s
        for s in spans
        if s.name == "wiggle.step tick_step" and s.attributes["wiggle.instance_id"] == scheduled.instance_id
    ]
    assert len(tick_steps) == 1
    assert tick_steps[0].context.trace_id == tick.context.trace_id
    assert tick_steps[0].parent.span_id == tick.context.span_id


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


def unprintable(ctx: dict) -> dict:
    if not ctx.get("again"):
        raise Unprintable()
    return ctx


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_ASYNC], ids=lambda m: m.value)
async def test_a_traced_step_reports_its_own_exception_even_one_whose_str_raises(mode: ExecutionMode) -> None:
    """The SDK recorded a span's exception with ``str(exc)``: for an exception whose __str__
    raises, that second exception replaced the handler's, and the step reported
    'RuntimeError: __str__ exploded' (seen when this module's provider was set before
    tests/conformance/test_handler_mistakes.py ran in the same process)."""
    EXPORTER.clear()
    flow = (
        Workflow.define(f"traced-unprintable-{mode.value.lower()}")
        .execution(mode)
        .step(unprintable, retry=RetryPolicy.fixed(1, 0))
        .build()
    )
    async with EmbeddedServer() as server:
        await server.client.register(flow)
        async with server.worker([flow]):
            info = await server.client.start(flow, {})
            done = await server.client.wait(info.instance_id, timeout=30)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED", done
    assert [h.error for h in history if h.node_id == "unprintable"] == [
        "Unprintable: <its str() raised RuntimeError>"
    ], history
    (step,) = [s for s in EXPORTER.get_finished_spans() if s.name == "wiggle.step unprintable"]
    assert step.status.status_code == trace.StatusCode.ERROR
    assert step.status.description == "Unprintable: <its str() raised RuntimeError>"
    assert [e.attributes["exception.message"] for e in step.events if e.name == "exception"] == [
        "<its str() raised RuntimeError>"
    ]
