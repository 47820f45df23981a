"""OpenTelemetry: one trace spans the client's start, the server's StartInstance and every step a
worker runs (linked through gRPC metadata and the activation), checked with the SDK's in-memory
exporter, on every store and in SERVER and LOCAL_ASYNC modes."""

from __future__ import annotations

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
    return {**ctx, "first": True}


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
    assert sorted(s.name for s in steps) == ["wiggle.step first", "wiggle.step flaky", "wiggle.step flaky"]
    assert all(s.parent.span_id == server_span.context.span_id for s in steps)
    assert {s.attributes["wiggle.instance_id"] for s in steps} == {info.instance_id}
    assert sorted(s.attributes["wiggle.attempt"] for s in steps if s.name.endswith("flaky")) == [1, 2]
    reports = [s for s in mine if s.name.startswith("wiggle.report ")]
    assert reports and all(s.kind == trace.SpanKind.CLIENT for s in reports)
    # nothing of this instance's work ended up in another trace
    assert not [s for s in spans if s.name.startswith("wiggle.step") and s.context.trace_id != trace_id]
