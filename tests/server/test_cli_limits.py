"""``wiggle queues set-limit`` and ``wiggle start --workflow-timeout`` against a running server
(docs/flow-control.md#queue-limits, #a-starts-own-time-limit)."""

from __future__ import annotations

import json

from wiggle import Workflow
from wiggle.testing import EmbeddedServer

from .test_cli_ops import wiggle


async def test_set_limit_shows_the_limits_and_clear_removes_them() -> None:
    async with EmbeddedServer() as server:
        target = server.target
        set_ = await wiggle(target, "queues", "set-limit", "stripe", "--rate", "50/1s", "--max-running", "4")
        assert set_.returncode == 0, set_.stderr
        assert "at most 4 running (0 in use); 50 claims per 1 s" in set_.stdout
        shown = await wiggle(target, "queues", "--json")
        [stripe] = [q for q in json.loads(shown.stdout) if q["queue"] == "stripe"]
        assert (stripe["max_running"], stripe["rate_max"], stripe["rate_period_millis"]) == (4, 50, 1000)
        per_minute = await wiggle(target, "queues", "set-limit", "stripe", "--rate", "600/m")
        assert per_minute.returncode == 0 and "600 claims per 60 s" in per_minute.stdout, per_minute
        cleared = await wiggle(target, "queues", "set-limit", "stripe", "--clear")
        assert cleared.returncode == 0, cleared.stderr
        assert "stripe" not in [
            q["queue"] for q in json.loads((await wiggle(target, "queues", "--json")).stdout)
        ]
        for bad, words in [
            (["--rate", "fifty/s"], "is not N/PERIOD"),
            ([], "say what to limit"),
            (["--clear", "--max-running", "2"], "--clear removes"),
            (["--rate", "5/-1s"], "must not be negative"),
        ]:
            refused = await wiggle(target, "queues", "set-limit", "stripe", *bad)
            assert refused.returncode == 2, (bad, refused.stdout, refused.stderr)
            assert words in refused.stderr, (bad, refused.stderr)


async def test_start_takes_the_instances_own_time_limit() -> None:
    flow = Workflow.define("cli-timed", timeout=3600).user_task("approve").build()
    async with EmbeddedServer() as server:
        await server.client.register(flow)
        started = await wiggle(server.target, "start", "cli-timed", "--workflow-timeout", "1s", "--json")
        assert started.returncode == 0, started.stderr
        done = await server.client.wait(json.loads(started.stdout)["instance_id"], timeout=30)
    assert done.status == "FAILED" and done.reason == "workflow timed out", done
    assert "1 s" in done.error
