"""The stall guard (wiggle/_worker/stall_guard.py): a sync handler that runs inline and holds the
worker's event loop past the lease does not cost its step the lease, in any mode. The server is a
`wiggle server` process (an in-process one would be held by the same loop), with 3 s leases."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port
from processes import spawn, stop_all, wait_for_text

from wiggle import AsyncClient, ExecutionMode, Worker, WorkerOptions, Workflow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = spawn(
        tmp_path,
        "server.log",
        "server",
        WIGGLE_PORT=str(port),
        WIGGLE_HTTP_PORT="0",
        WIGGLE_LEASE_MILLIS="3000",
    )
    try:
        wait_for_text(tmp_path / "server.log", "wiggle server listening", proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop_all(proc)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", list(ExecutionMode))
async def test_an_inline_handler_holding_the_loop_past_the_lease_keeps_its_step(
    server: str, mode: ExecutionMode, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []
    lock = threading.Lock()

    def first(ctx):
        return {**ctx, "first": True}

    def slow(ctx):
        with lock:
            runs.append(1)
        time.sleep(7.0)  # on the event loop: no heartbeat from it for more than two leases
        return {**ctx, "slow": True}

    flow = Workflow.define(f"stalled-{mode.value.lower()}").execution(mode).step(first).step(slow).build()
    options = WorkerOptions(sync_handlers="inline", poll_wait_seconds=1.0)
    async with AsyncClient(server) as client, Worker(server, [flow], options) as worker:
        info = await client.result((await client.start(flow, {})).instance_id, timeout=60)
        history = await client.history(info.instance_id)
        assert worker._guard is not None and worker._guard.beats >= 2, "the guard heartbeat the step"
    assert info.context == {"first": True, "slow": True}
    assert runs == [1], f"the step ran {len(runs)} times"
    assert [h.error for h in history if h.error] == [], history
    assert [(h.node_id, h.attempt) for h in history if h.kind == "TASK"] == [("first", 1), ("slow", 1)]
    assert "handler slow has held the event loop for" in caplog.text


async def test_no_guard_where_no_handler_runs_inline(server: str) -> None:
    flow = Workflow.define("never-inline").step(lambda ctx: ctx, name="one").build()
    async with Worker(server, [flow], WorkerOptions(sync_handlers="thread", poll_wait_seconds=1.0)) as worker:
        assert worker._guard is None


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", list(ExecutionMode))
async def test_an_async_handler_that_blocks_is_named_and_keeps_its_step(
    server: str, mode: ExecutionMode, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``async def`` handler calling blocking code holds the loop as an inline one does: it
    cost the worker's steps their leases, and the log named nothing (a docs trial)."""
    runs: list[int] = []

    async def blocks(ctx):
        runs.append(1)
        time.sleep(7.0)  # blocking, inside an async handler
        return {**ctx, "blocked": True}

    flow = Workflow.define(f"async-blocks-{mode.value.lower()}").execution(mode).step(blocks).build()
    options = WorkerOptions(sync_handlers="thread", poll_wait_seconds=1.0)  # the guard for async ones
    async with AsyncClient(server) as client, Worker(server, [flow], options) as worker:
        info = await client.result((await client.start(flow, {})).instance_id, timeout=60)
        history = await client.history(info.instance_id)
        assert worker._guard is not None and worker._guard.beats >= 2, "the guard heartbeat the step"
    assert info.context == {"blocked": True} and runs == [1], (info, runs)
    assert [h.error for h in history if h.error] == [], history
    assert "handler blocks has held the event loop for" in caplog.text
    assert "an async handler that blocks: await asyncio.to_thread" in caplog.text
