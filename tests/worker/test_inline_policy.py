"""WorkerOptions.sync_handlers: quick sync handlers skip the thread hop, slow ones never block the loop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from wiggle import ExecutionMode, Step, WorkerOptions, Workflow
from wiggle._worker.handlers import InlinePolicy as _InlinePolicy
from wiggle.testing import EmbeddedServer


def quick() -> None:
    pass


def test_auto_promotes_after_eight_quick_runs_in_a_row() -> None:
    policy = _InlinePolicy("auto", 0.5)
    for _ in range(7):
        policy.observe(quick, 0.0001, inline=False)
    assert not policy.inline(quick)
    policy.observe(quick, 0.01, inline=False)  # one slow run starts the count again
    for _ in range(7):
        policy.observe(quick, 0.0001, inline=False)
    assert not policy.inline(quick)
    policy.observe(quick, 0.0001, inline=False)
    assert policy.inline(quick)


def test_auto_demotes_for_good_after_one_slow_inline_run() -> None:
    policy = _InlinePolicy("auto", 0.5)
    for _ in range(8):
        policy.observe(quick, 0.0001, inline=False)
    assert policy.inline(quick)
    policy.observe(quick, 0.004, inline=True)  # under 10x the threshold: still trusted
    assert policy.inline(quick)
    policy.observe(quick, 0.006, inline=True)
    assert not policy.inline(quick)
    for _ in range(20):
        policy.observe(quick, 0.0001, inline=False)
    assert not policy.inline(quick)


def test_fixed_modes_and_bad_mode() -> None:
    assert _InlinePolicy("inline", 0.5).inline(quick)
    assert not _InlinePolicy("thread", 0.5).inline(quick)
    with pytest.raises(ValueError, match="sync_handlers"):
        _InlinePolicy("sometimes", 0.5)


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC, ExecutionMode.LOCAL_ASYNC])
async def test_quick_handlers_move_to_the_loop_and_slow_ones_stay_in_the_pool(mode: ExecutionMode) -> None:
    where: list[tuple[str, str, int]] = []
    slow_now = threading.Event()

    def fast_step(ctx: dict[str, Any]) -> dict[str, Any]:
        where.append(("fast", threading.current_thread().name, Step.current().attempt))
        return {**ctx, "n": ctx.get("n", 0) + 1}

    def sometimes_slow(ctx: dict[str, Any]) -> dict[str, Any]:
        where.append(("slow", threading.current_thread().name, Step.current().attempt))
        if slow_now.is_set():
            time.sleep(0.2)  # 40x the threshold
        return ctx

    bp = (
        Workflow.define(f"inline-{mode.value.lower()}")
        .execution(mode)
        .step(fast_step)
        .step(sometimes_slow)
        .build()
    )
    # A threshold of 5 ms: a run in the pool counts as quick even on a loaded machine (at 0.5 ms,
    # the default, one thread hop slowed by a busy machine restarted the count of eight).
    options = WorkerOptions(transport="unary", inline_threshold_ms=5)
    async with EmbeddedServer() as server:
        async with server.worker([bp], options) as worker:
            policy = worker._inline

            async def one() -> None:
                info = await server.client.start(bp, {})
                done = await server.client.result(info.instance_id, timeout=20)
                assert done.context == {"n": 1}

            for _ in range(100):
                if policy.inline(fast_step) and policy.inline(sometimes_slow):
                    break
                await one()
            else:
                raise AssertionError(f"never promoted: {policy.quick}")
            promoted = len(where)
            await one()
            slow_now.set()
            await one()  # sometimes_slow blocks the loop once: back to the pool for good
            await one()
    main = threading.main_thread().name
    fast = [thread for name, thread, _ in where[:promoted] if name == "fast"]
    assert len(fast) >= 8 and all(t != main for t in fast[:8])  # proven in the pool first
    assert all(t == main for name, t, _ in where[promoted:] if name == "fast")  # then inline
    slow = [thread for name, thread, _ in where[promoted:] if name == "slow"]
    assert slow[1] == main and slow[-1] != main  # inline until it blocked, then in the pool
    assert policy.quick[sometimes_slow] == -1
    assert all(attempt == 1 for _, _, attempt in where)  # Step.current() works in both places
