"""A step still running when a worker's drain runs out is cut (docs/semantics.md#graceful-stop):
it is handed back at once, READY on the server without an attempt spent, and a local run hands
back with it the steps it finished and had not reported. Before, the cut step waited out its
lease ("lease expired (worker unreachable)" in its history), and a LOCAL_ASYNC run's finished,
unflushed steps ran again after it, their first runs nowhere in the history (two outside trials).
The cut step's first run has its own history entry, RELEASED (handback reason CUT), so every run
of a step is explained."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from .conftest import Harness

LEASE = 60_000  # a cut step left to its lease would time the test out


@pytest.mark.parametrize("handler", ["sync", "async"])
async def test_a_cut_step_is_handed_back_with_the_steps_finished_before_it(
    harness: Harness, handler: str
) -> None:
    calls: Counter[str] = Counter()
    gate = threading.Event()  # holds the first run of the slow step (a sync one in its thread)

    def step(name: str):
        def run(ctx):
            calls[name] += 1
            return {**ctx, name: calls[name]}

        return run

    def slow_sync(ctx):
        calls["slow"] += 1
        if calls["slow"] == 1:
            gate.wait(30)
        return {**ctx, "slow": calls["slow"]}

    async def slow_async(ctx):
        calls["slow"] += 1
        if calls["slow"] == 1:
            await asyncio.sleep(30)
        return {**ctx, "slow": calls["slow"]}

    bp = (
        harness.define("drain-cut")
        .step(step("pre"), name="pre")
        .step(step("mid"), name="mid")
        .step(slow_sync if handler == "sync" else slow_async, name="slow")
        .step(step("post"), name="post")
        .build()
    )
    try:
        async with harness.server(lease_millis=LEASE) as server:
            async with server.worker([bp], harness.options()) as first:
                info = await server.client.start(bp, {})
                for _ in range(1000):
                    if calls["slow"]:
                        break
                    await asyncio.sleep(0.01)
                await first.close(timeout=0.2)  # the drain runs out with slow running: cut
            async with server.worker([bp], harness.options()):
                done = await harness.finish(server, info.instance_id, timeout=15)
            history = await server.client.history(info.instance_id)
    finally:
        gate.set()
    assert done.status == "COMPLETED", done
    assert done.context == {"pre": 1, "mid": 1, "slow": 2, "post": 1}, done.context
    assert dict(calls) == {"pre": 1, "mid": 1, "slow": 2, "post": 1}, calls
    assert not [h for h in history if "lease expired" in h.error], history
    assert [(h.node_id, h.attempt, h.outcome) for h in history if h.outcome != "END"] == [
        ("pre", 1, "COMPLETED"),
        ("mid", 1, "COMPLETED"),
        ("slow", 1, "RELEASED"),  # why it ran twice: the history explains every run (a trial)
        ("slow", 1, "COMPLETED"),
        ("post", 1, "COMPLETED"),
    ], history
    (cut,) = [h for h in history if h.outcome == "RELEASED"]
    assert cut.error.startswith("cut by the drain of worker ") and cut.worker_id, cut
    assert cut.error.endswith("before it finished; runs again, same attempt"), cut
