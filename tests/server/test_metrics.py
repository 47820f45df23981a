"""The Prometheus endpoint shows RPC counts and local-run handbacks."""

import asyncio
import urllib.request

import msgspec
import pytest
from mixed_fleet_versions import mixed_versions
from ports import free_port

from wiggle import ExecutionMode, Workflow
from wiggle.testing import EmbeddedServer


class Ctx(msgspec.Struct):
    n: int = 0


def bump(c: Ctx) -> Ctx:
    c.n += 1
    return c


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


async def test_metrics_endpoint_reports_rpcs_and_handbacks() -> None:
    port = free_port()
    bp = (
        Workflow.define("metrics-wf", Ctx)
        .execution(ExecutionMode.LOCAL_ASYNC)
        .step(bump)
        .step(bump, name="again")
        .build()
    )
    async with EmbeddedServer(http_port=port) as server:
        async with server.worker([bp]):
            info = await server.client.start(bp, Ctx())
            done = await server.client.result(info.instance_id, timeout=20)
            assert done.context == {"n": 2}
        # in a thread: the HTTP port is served by this process's event loop
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        handed = server.server.instances.handed_off
    assert 'wiggle_rpc_calls_total{method="AdvanceRun"}' in body
    assert 'wiggle_local_run_handbacks_total{reason="TERMINAL"} 1.0' in body
    assert "wiggle_local_run_steps_bucket" in body
    assert f"wiggle_steps_handed_off_total {float(handed)}" in body
    assert "wiggle_steps_chained_again_total 0.0" in body  # no answer was lost


async def test_a_local_sync_run_is_counted_by_its_length_not_its_last_batch() -> None:
    """LOCAL_SYNC reports each step in its own AdvanceRun: the run-length histogram counted the
    final batch's one step, so its median read 1 whatever the runs' length (an operator trial:
    sum +10 over ten runs of 4 steps; the worker's own histogram said 40)."""
    port = free_port()
    bp = (
        Workflow.define("metrics-run-length", Ctx)
        .execution(ExecutionMode.LOCAL_SYNC)
        .step(bump)
        .step(bump, name="b")
        .step(bump, name="c")
        .step(bump, name="d")
        .build()
    )
    async with EmbeddedServer(http_port=port) as server:
        async with server.worker([bp]):
            for _ in range(3):
                info = await server.client.start(bp, Ctx())
                assert (await server.client.result(info.instance_id, timeout=20)).context == {"n": 4}
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    assert "wiggle_local_run_steps_count 3.0" in body, body
    assert "wiggle_local_run_steps_sum 12.0" in body, body


async def test_a_worker_without_a_handler_is_counted_and_its_hold_shown(eventually) -> None:
    """wiggle_steps_given_back_no_handler counts the give-backs, wiggle_worker_node_holds the
    holds in force (docs/semantics.md#mixed-fleets)."""
    port = free_port()
    old, new = mixed_versions("metrics-mixed")
    async with EmbeddedServer(http_port=port) as server:
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert "wiggle_steps_given_back_no_handler_total 0.0" in body
        assert "wiggle_worker_node_holds 0.0" in body
        await server.client.register(new)
        await server.client.start(new, {})
        async with server.worker([old]) as worker:
            unrunnable = server.server.instances.delivery.unrunnable
            await eventually(lambda: unrunnable.holds(worker.worker_id), what="the give-back")
            body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            assert worker.stats.released == 1
    assert "wiggle_steps_given_back_no_handler_total 1.0" in body
    assert "wiggle_worker_node_holds 1.0" in body


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_ASYNC])
async def test_a_step_cut_by_a_drain_is_a_local_run_only_in_a_local_mode(mode: ExecutionMode) -> None:
    """An outside trial: a SERVER-mode step cut by its worker's drain (handed back CUT) was
    counted as a local run of 0 steps (wiggle_local_run_handbacks_total{reason="CUT"},
    wiggle_local_run_steps_count). It is a SERVER-mode step handed back: counted in
    wiggle_step_handbacks_total; a local run cut the same way stays a local run."""
    port = free_port()
    running = asyncio.Event()

    async def slow(c: Ctx) -> Ctx:
        running.set()
        await asyncio.sleep(60)  # outlasts the drain
        return c

    bp = Workflow.define(f"metrics-cut-{mode.value.lower()}", Ctx).execution(mode).step(slow).build()
    async with EmbeddedServer(http_port=port) as server:
        worker = server.worker([bp])
        await worker.start()
        try:
            await server.client.start(bp, Ctx())
            await asyncio.wait_for(running.wait(), 20)
        finally:
            await worker.close(timeout=0.2)  # the drain runs out: the step is cut and handed back
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    released = [line for line in body.splitlines() if line.startswith("wiggle_step_attempts_total{")]
    assert any('outcome="released"' in line and line.endswith(" 1.0") for line in released), released
    if mode is ExecutionMode.SERVER:
        assert 'wiggle_step_handbacks_total{reason="CUT"} 1.0' in body, body
        assert "wiggle_local_run_handbacks_total{" not in body, body
        assert "wiggle_local_run_steps_count 0.0" in body, body
    else:
        assert 'wiggle_local_run_handbacks_total{reason="CUT"} 1.0' in body, body
        assert "wiggle_local_run_steps_count 1.0" in body, body
        assert "wiggle_step_handbacks_total{" not in body, body
