"""The queue-lag monitor: hysteresis on synthetic looks, then real load through a real server
(warning once while a queue has no worker, recovery once a worker drains it, gauges exported)."""

from __future__ import annotations

import asyncio
import logging
import urllib.request

import pytest
from ports import free_port

from wiggle import ExecutionMode, Workflow
from wiggle._server.config import from_mapping
from wiggle._server.lag import QueueLagMonitor
from wiggle._storage.memory import MemoryStore
from wiggle._storage.ops import QueueStat
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer


def look(age_ms: int, now: int = 1_000_000) -> list[QueueStat]:
    return [QueueStat(queue="q", ready=3, oldest_ready_at=now - age_ms)]


def test_hysteresis_warns_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    monitor = QueueLagMonitor(MemoryStore(), warn_millis=1000, clear_millis=500, interval_seconds=1)
    caplog.set_level(logging.INFO, logger="wiggle.lag")
    states = []
    for age in (200, 1000, 900, 600, 1200, 499, 800, 999, 1000, 0):
        (lag,) = monitor.observe(look(age), 1_000_000)
        states.append(lag.lagging)
    # starts at 1000 and holds above 500 (the clear threshold), ends below it, starts again at 1000
    assert states == [False, True, True, True, True, False, False, False, True, False]
    assert monitor.warnings == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        len(warnings) == 2
        and "queue q is falling behind: 3 steps ready, the oldest waiting 1.0 s" in warnings[0]
    )
    assert sum("caught up" in r.getMessage() for r in caplog.records) == 2
    assert all(r.__dict__.get("queue") == "q" for r in caplog.records)


def test_thresholds_are_checked() -> None:
    with pytest.raises(ValueError, match="clear_millis"):
        QueueLagMonitor(MemoryStore(), warn_millis=100, clear_millis=100, interval_seconds=1)
    with pytest.raises(InvalidArgument, match="--queue-lag-clear-millis .* must be below"):
        from_mapping({"queue_lag_warn_millis": 100, "queue_lag_clear_millis": 200}, env={})


def bump(ctx: dict) -> dict:
    return {**ctx, "n": ctx.get("n", 0) + 1}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_ASYNC], ids=lambda m: m.value)
async def test_a_queue_without_workers_lags_and_recovers(
    mode: ExecutionMode, caplog: pytest.LogCaptureFixture
) -> None:
    flow = (
        Workflow.define(f"lagging-{mode.value.lower()}")
        .execution(mode)
        .step(bump)
        .step(bump, name="again")
        .build()
    )
    caplog.set_level(logging.INFO, logger="wiggle.lag")
    port = free_port()
    settings = dict(queue_lag_warn_millis=300, queue_lag_clear_millis=100, queue_lag_interval_millis=50)
    async with EmbeddedServer(http_port=port, **settings) as server:
        monitor = server.server.lag
        await server.client.register(flow)
        ids = [(await server.client.start(flow, {})).instance_id for _ in range(20)]
        # a look taken while the last starts were still committing can already lag (the first
        # step 300 ms old on a slow machine) with fewer steps ready: wait for one after them
        while not ((seen := monitor.queues.get(flow.name)) and seen.lagging and seen.ready == len(ids)):
            await asyncio.sleep(0.02)
        lagging = monitor.queues[flow.name]
        assert lagging.ready == 20 and lagging.oldest_ready_age_ms >= 300
        for _ in range(5):  # more looks while it still lags: no second warning
            await asyncio.sleep(0.06)
        assert monitor.warnings == 1
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert f'wiggle_queue_lagging{{queue="{flow.name}"}} 1.0' in body
        assert f'wiggle_queue_ready_steps{{queue="{flow.name}"}} 20.0' in body
        assert "wiggle_queue_lag_warnings_total 1.0" in body
        async with server.worker([flow]):
            for instance_id in ids:
                assert (await server.client.wait(instance_id, timeout=30)).status == "COMPLETED"
            while monitor.queues.get(flow.name) is not None and monitor.queues[flow.name].lagging:
                await asyncio.sleep(0.02)
        assert monitor.warnings == 1
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert f'wiggle_queue_lagging{{queue="{flow.name}"}} 1.0' not in body
    messages = [r.getMessage() for r in caplog.records if r.name == "wiggle.lag"]
    assert sum("falling behind" in m for m in messages) == 1
    assert sum("caught up" in m for m in messages) == 1


async def test_steps_in_a_local_run_are_not_lag() -> None:
    import threading

    release = threading.Event()

    def slow(ctx: dict) -> dict:
        release.wait(30)
        return ctx

    flow = Workflow.define("lag-local-run").execution(ExecutionMode.LOCAL_ASYNC).step(bump).step(slow).build()
    settings = dict(queue_lag_warn_millis=100, queue_lag_clear_millis=50, queue_lag_interval_millis=20)
    async with EmbeddedServer(**settings) as server:
        monitor = server.server.lag
        async with server.worker([flow]):
            ids = [(await server.client.start(flow, {})).instance_id for _ in range(2)]
            try:
                while not (monitor.queues.get(flow.name) and monitor.queues[flow.name].in_local_run == 2):
                    await asyncio.sleep(0.02)
                start = monitor._last_at
                # parked-looking for well past the threshold: shown as in a local run, never lagging
                while monitor._last_at - start < 500:
                    await asyncio.sleep(0.02)
                    assert not monitor.queues[flow.name].lagging
                seen = monitor.queues[flow.name]
                assert (seen.ready, seen.running, seen.in_local_run) == (0, 2, 2)
            finally:
                release.set()
            for instance_id in ids:
                assert (await server.client.wait(instance_id, timeout=30)).status == "COMPLETED"
        assert monitor.warnings == 0
