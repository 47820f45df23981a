"""Server histograms and outcome counters under real load through a real server and worker."""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest
from ports import free_port

from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle.testing import EmbeddedServer


def bump(ctx: dict) -> dict:
    return {**ctx, "n": ctx.get("n", 0) + 1}


def picky(ctx: dict) -> dict:
    if ctx.get("bad"):
        raise RuntimeError("bad input")
    return ctx


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def sample(body: str, name: str, **labels: str) -> float:
    """The value of one series of the exposition ``body``."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in body.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}(?:\{{(.*)\}})? (\S+)", line)
        if match and (match.group(1) or "") == want:
            return float(match.group(2))
    shown = [ln for ln in body.splitlines() if ln.startswith(name)]
    raise AssertionError(f"no {name}{{{want}}} in /metrics: {shown}")


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC], ids=lambda m: m.value)
async def test_step_histograms_and_outcomes(mode: ExecutionMode) -> None:
    name = f"hist-{mode.value.lower()}"
    flow = (
        Workflow.define(name)
        .execution(mode)
        .step(bump)
        .step(picky, retry=RetryPolicy.fixed(2, 0.01))
        .step(bump, name="last")
        .build()
    )
    port = free_port()
    async with EmbeddedServer(http_port=port) as server:
        await server.client.register(flow)
        ids = [(await server.client.start(flow, {"bad": i < 2})).instance_id for i in range(6)]
        async with server.worker([flow]):
            for instance_id in ids:
                await server.client.wait(instance_id, timeout=30)
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    assert sample(body, "wiggle_instances_finished_total", workflow=name, status="COMPLETED") == 4
    assert sample(body, "wiggle_instances_finished_total", workflow=name, status="FAILED") == 2
    # attempts reported: 3 steps x 4 completed; 1 + 2 attempts x 2 failed (bump, picky twice)
    runs = sample(body, "wiggle_step_run_seconds_count", workflow=name, queue=name)
    assert runs == 4 * 3 + 2 * 3
    assert sample(body, "wiggle_step_run_seconds_bucket", workflow=name, queue=name, le="+Inf") == runs
    claims = sample(body, "wiggle_step_schedule_to_start_seconds_count", workflow=name, queue=name)
    # SERVER: every attempt is claimed; a local run claims once, then a retry is claimed again
    assert claims == (runs if mode is ExecutionMode.SERVER else 6 + 2)
    assert sample(body, "wiggle_store_mutation_seconds_count", operation="mutate") > 0
