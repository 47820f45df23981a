"""The worker's optional /metrics under real load through a real server."""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest
from ports import free_port

from wiggle import ExecutionMode, RetryPolicy, WorkerOptions, Workflow
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


def value(body: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", body, re.M)
    assert match, f"no {series} in {body}"
    return float(match.group(1))


async def test_worker_metrics_count_steps_reports_and_local_runs() -> None:
    flow = (
        Workflow.define("worker-metrics")
        .execution(ExecutionMode.LOCAL_ASYNC)
        .step(bump)
        .step(picky, retry=RetryPolicy.fixed(2, 0.01))
        .build()
    )
    port = free_port()
    async with EmbeddedServer() as server:
        options = WorkerOptions(metrics_port=port, worker_id="wm-1", poll_wait_seconds=1.0)
        async with server.worker([flow], options):
            ids = [(await server.client.start(flow, {"bad": i == 0})).instance_id for i in range(4)]
            for instance_id in ids:
                await server.client.wait(instance_id, timeout=30)
            body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    # 4 x bump; picky: 3 good + 2 failed attempts of the bad one
    assert value(body, 'wiggle_worker_steps_total{outcome="completed"}') == 7
    assert value(body, 'wiggle_worker_steps_total{outcome="failed"}') == 2
    assert value(body, 'wiggle_worker_handler_seconds_count{workflow="worker-metrics"}') == 9
    assert value(body, 'wiggle_worker_report_seconds_count{rpc="AdvanceRun"}') >= 4
    assert value(body, "wiggle_worker_local_run_steps_count") >= 4
    assert value(body, 'wiggle_worker_slots{worker_id="wm-1"}') == 16
    assert value(body, 'wiggle_worker_slots_in_use{worker_id="wm-1"}') >= 0


async def test_worker_metrics_count_chained_steps() -> None:
    """SERVER mode: each report but an instance's last brings the next step (chained steps)."""
    flow = Workflow.define("worker-metrics-chain").step(bump).step(bump, name="again").step(picky).build()
    port = free_port()
    async with EmbeddedServer() as server:
        options = WorkerOptions(metrics_port=port, worker_id="wm-2", poll_wait_seconds=1.0)
        async with server.worker([flow], options):
            ids = [(await server.client.start(flow, {})).instance_id for _ in range(4)]
            for instance_id in ids:
                await server.client.wait(instance_id, timeout=30)
            body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    assert value(body, "wiggle_worker_steps_chained_total") == 8
    assert value(body, 'wiggle_worker_steps_total{outcome="completed"}') == 12
    assert value(body, 'wiggle_worker_rpc_calls_total{method="CompleteTask"}') == 12


def test_a_bad_metrics_port_is_refused() -> None:
    from wiggle._worker.options import check_options

    with pytest.raises(ValueError, match="metrics_port must be between 0 .off. and 65535, got 70000"):
        check_options(WorkerOptions(metrics_port=70000))


def test_local_run_lengths_are_counted_per_bucket_not_kept_one_by_one() -> None:
    """Found by an outside soak: the worker kept every local run's length in a list for its whole
    life (one entry per run, and each scrape walked it nine times)."""
    from types import SimpleNamespace

    from wiggle._worker.metrics import WorkerCollector
    from wiggle._worker.stats import WorkerStats

    stats = WorkerStats()
    for steps in (1, 3, 3, 20, 2_000):
        stats.local_runs.observe(steps)
    assert (stats.local_runs.count, stats.local_runs.steps, stats.local_runs.longest) == (5, 2_027, 2_000)
    assert not any(isinstance(v, list) for v in vars(stats).values())  # nothing that grows per run
    worker = SimpleNamespace(stats=stats, worker_id="w", options=WorkerOptions())
    (family,) = [f for f in WorkerCollector(worker).collect() if f.name == "wiggle_worker_local_run_steps"]
    got = {s.labels.get("le", s.name.rsplit("_", 1)[-1]): s.value for s in family.samples}
    assert got == {
        "1": 1, "2": 1, "5": 3, "10": 3, "20": 4, "50": 4, "100": 4, "1000": 4, "+Inf": 5, "count": 5, "sum": 2_027,
    }  # fmt: skip
