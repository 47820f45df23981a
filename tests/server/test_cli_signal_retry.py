"""`wiggle signal` and `wiggle retry` against a running server (issue #11)."""

from __future__ import annotations

import json
import threading
from typing import Any

from wiggle import PermanentError, Workflow
from wiggle.testing import EmbeddedServer

from .test_cli_ops import wiggle

BROKEN = threading.Event()


def bump(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx.get("n", 0) + 1}


def fragile(ctx: dict[str, Any]) -> dict[str, Any]:
    if BROKEN.is_set():
        raise PermanentError("broken on purpose")
    return {**ctx, "fixed": True}


async def test_signal_and_retry_commands() -> None:
    flow = Workflow.define("cli-signal").step(bump).wait_signal("paid").step(fragile).build()
    BROKEN.set()
    async with EmbeddedServer() as server:
        async with server.worker([flow]):
            target = server.target
            started = await wiggle(target, "start", "cli-signal", "--json")
            instance_id = json.loads(started.stdout)["instance_id"]
            # sent at once: buffered if the wait is not reached yet, delivered otherwise
            sent = await wiggle(
                target, "signal", instance_id, "paid", "--data", '{"amount": 5}', "--id", "pay-1", "--json"
            )
            assert sent.returncode == 0, sent.stderr
            assert json.loads(sent.stdout)["outcome"] in ("BUFFERED", "DELIVERED")
            dup = await wiggle(
                target, "signal", instance_id, "paid", "--data", '{"amount": 6}', "--id", "pay-1"
            )
            assert dup.returncode == 0 and "duplicate" in dup.stdout, dup
            unknown = await wiggle(target, "signal", instance_id, "refunded")
            assert unknown.returncode == 3 and "NOT_FOUND" in unknown.stderr and "'paid'" in unknown.stderr
            failed = await server.client.wait(instance_id, timeout=20)
            assert failed.status == "FAILED" and failed.context == {"n": 1, "amount": 5}

            late = await wiggle(target, "signal", instance_id, "paid")
            assert late.returncode != 0 and "FAILED_PRECONDITION" in late.stderr and "FAILED" in late.stderr

            BROKEN.clear()
            retried = await wiggle(target, "retry", instance_id, "--by", "ops", "--wait", "--json")
            assert retried.returncode == 0, retried.stderr
            body = json.loads(retried.stdout)
            assert body["status"] == "COMPLETED" and body["context"] == {"n": 1, "amount": 5, "fixed": True}
            again = await wiggle(target, "retry", instance_id)
            assert again.returncode != 0 and "FAILED_PRECONDITION" in again.stderr
            assert "only a FAILED instance" in again.stderr
            history = await server.client.history(instance_id)
            assert [(e.outcome, e.worker_id) for e in history if e.outcome == "RESUMED"] == [
                ("RESUMED", "ops")
            ]
