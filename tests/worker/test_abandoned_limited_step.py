"""A sync handler abandoned at its step's time limit runs on in its thread, while the server has
given its concurrency-limit slot to the next attempt of its key: the worker says so at WARNING,
naming the key and what to do (wiggle/_worker/handlers.py ``_warn_unstoppable``;
docs/flow-control.md#concurrency-limits). An outside trial saw a charge's retry run beside its
abandoned first attempt with nothing in the log but the timeout."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import pytest

from wiggle import Limit, RetryPolicy, Workflow
from wiggle.testing import WorkflowEnvironment


@pytest.mark.parametrize("limited", [True, False])
async def test_an_abandoned_sync_handler_of_a_limited_step_is_warned_of(
    caplog: pytest.LogCaptureFixture, limited: bool
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle.worker")
    release = threading.Event()

    def charge(ctx: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)  # past the 0.3 s limit: abandoned, it runs on until released
        return ctx

    limit = Limit(key="customer_id", max=1) if limited else None
    bp = (
        Workflow.define(f"abandoned-{uuid.uuid4().hex[:6]}")
        .step(charge, timeout=0.3, retry=RetryPolicy.fixed(1, 0.1), concurrency=limit)
        .build()
    )
    try:
        async with WorkflowEnvironment([bp]) as env:
            done = await env.run(bp, {"customer_id": "c1"}, check=False)
            assert done.status == "FAILED"
    finally:
        release.set()
    said = [r for r in caplog.records if "runs on past the time limit" in r.getMessage()]
    if not limited:
        assert said == []
        return
    (record,) = said
    assert record.levelno == logging.WARNING
    assert (
        "its sync handler runs on past the time limit, and its concurrency-limit slot (key "
        "'customer_id', max 1) is free for the next attempt: the two may run at once"
    ) in record.getMessage()
