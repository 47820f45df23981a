"""Buffered signals and a failed instance's retry point survive a server restart (PostgreSQL).

A real server on a fresh schema is stopped and a new one started on the same schema: what the
first accepted must still be there (docs/semantics.md#signal, #resuming-a-failed-instance).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pg import TEST_DATABASE_URL

from wiggle import Workflow
from wiggle.testing import EmbeddedServer

pytestmark = pytest.mark.postgres

BROKEN = threading.Event()


def prepare(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "prepared": True}


def charge(ctx: dict[str, Any]) -> dict[str, Any]:
    if BROKEN.is_set():
        raise RuntimeError("card service down")
    return {**ctx, "charged": True}


FLOW = Workflow.define("restart-signal").step(prepare).wait_signal("paid", key="payment").step(charge).build()


async def test_buffered_signal_and_retry_point_survive_a_restart(pg_schema: str) -> None:  # noqa: F811
    BROKEN.set()
    settings = {"database_url": TEST_DATABASE_URL, "database_schema": pg_schema}
    async with EmbeddedServer(**settings) as first:
        await first.client.register(FLOW)
        info = await first.client.start(FLOW, {})
        sent = await first.client.signal(info.instance_id, "paid", {"amount": 5}, "pay-1")
        assert sent.outcome == "BUFFERED"
    async with EmbeddedServer(**settings) as second:
        kept = await second.client.get(info.instance_id)
        assert [(s.name, s.data, s.signal_id) for s in kept.pending_signals] == [
            ("paid", {"amount": 5}, "pay-1")
        ]
        assert (
            await second.client.signal(info.instance_id, "paid", {"amount": 6}, "pay-1")
        ).outcome == "DUPLICATE"
        async with second.worker([FLOW]):
            failed = await second.client.wait(info.instance_id, timeout=30)
        assert failed.status == "FAILED" and failed.context == {"prepared": True, "payment": {"amount": 5}}
    BROKEN.clear()
    async with EmbeddedServer(**settings) as third:
        await third.client.retry(info.instance_id, requested_by="ops")
        async with third.worker([FLOW]):
            done = await third.client.wait(info.instance_id, timeout=30)
        history = await third.client.history(info.instance_id)
    assert done.status == "COMPLETED" and done.pending_signals == ()
    assert done.context == {"prepared": True, "payment": {"amount": 5}, "charged": True}
    assert [(e.node_id, e.worker_id) for e in history if e.outcome == "RESUMED"] == [("charge", "ops")]
