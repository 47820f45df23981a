"""A mixed fleet: one of our workers and one upstream-client worker on the same queues.

``mix-up`` is registered through upstream's protocol (by upstream's Worker), ``mix-ours``
through ours (by our Client); each has four steps on the workflow's queue. Both workers serve
both workflows at once (upstream's binds ``mix-ours`` by name, ours serves ``mix-up`` by node
name, SERVER-style: docs/semantics.md#mixed-fleets). Every instance completes with every step
stamped once, and both workers ran steps of both workflows.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from wiggle import AsyncClient, Worker, WorkerOptions, Workflow

from .servers import SCENARIOS, ServerProcess

STEPS = ("s1", "s2", "s3", "s4")
INSTANCES = 24


def _ours(name: str) -> Workflow[dict[str, Any]]:
    def stamp(step: str) -> Any:
        async def handler(o: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.02)  # a little work, so neither worker drains the queue alone
            return {**o, step: "ours", "total": o.get("total", 0) + 1}

        return handler

    flow = Workflow.define(name)
    for step in STEPS:
        flow = flow.step(stamp(step), name=step)
    return flow


async def _run(target: str, upstream_python: str, tmp_path: Path) -> tuple[list[Any], dict[str, int]]:
    stop = tmp_path / "stop"
    async with AsyncClient(target) as client:
        ours = _ours("mix-ours").build()
        await client.register(ours)
        upstream = subprocess.Popen(
            [upstream_python, str(SCENARIOS / "mixed_fleet.py"), target, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SCENARIOS,
        )
        try:
            assert upstream.stdout is not None
            ready = await asyncio.to_thread(upstream.stdout.readline)
            assert ready.strip() == "ready", ready + (upstream.stderr.read() if upstream.stderr else "")
            # ours serves mix-up by node name (a blueprint of another version, never registered)
            worker = Worker(
                client,
                [ours, _ours("mix-up").build()],
                WorkerOptions(register=False, concurrency=4, poll_wait_seconds=0.5),
            )
            await worker.start()
            try:
                ids = []
                for i in range(INSTANCES):
                    flow = "mix-up" if i % 2 else "mix-ours"
                    ids.append((await client.start(flow, {"n": i})).instance_id)
                finished = [await client.result(i, timeout=120) for i in ids]
            finally:
                await worker.close()
        finally:
            stop.touch()
            out, err = await asyncio.to_thread(upstream.communicate, timeout=60)
        assert upstream.returncode == 0, out + err
    return finished, dict(json.loads(out.strip().splitlines()[-1]))


def test_our_worker_and_upstream_worker_share_the_queues(
    upstream_python: str, server: ServerProcess, tmp_path: Path
) -> None:
    finished, upstream_ran = asyncio.run(_run(server.target, upstream_python, tmp_path))
    by_us: dict[str, int] = {}
    for info in finished:
        assert info.status == "COMPLETED", info
        ctx = info.context
        assert ctx["total"] == len(STEPS), ctx  # every step ran exactly once
        for step in STEPS:
            assert ctx[step] in ("ours", "upstream"), ctx
            if ctx[step] == "ours":
                by_us[info.workflow] = by_us.get(info.workflow, 0) + 1
    upstream_by_flow = {
        flow: sum(n for key, n in upstream_ran.items() if key.startswith(flow + "/"))
        for flow in ("mix-up", "mix-ours")
    }
    total_steps = INSTANCES * len(STEPS)
    assert sum(by_us.values()) + sum(upstream_by_flow.values()) == total_steps
    # both workers served both workflows (one registered through each protocol)
    assert by_us.get("mix-up", 0) > 0 and by_us.get("mix-ours", 0) > 0, (by_us, upstream_ran)
    assert upstream_by_flow["mix-up"] > 0 and upstream_by_flow["mix-ours"] > 0, (by_us, upstream_ran)
