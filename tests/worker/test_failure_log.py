"""A failed attempt's log line says what the step's retry policy does next: another attempt (of
how many) or none. It said "will retry if its policy allows" on the last attempt too."""

from __future__ import annotations

import logging

import pytest

from wiggle import RetryPolicy, Workflow
from wiggle.testing import EmbeddedServer


def boom(ctx: dict) -> dict:
    raise ValueError("no stock")


async def test_each_failed_attempt_says_whether_another_follows(caplog: pytest.LogCaptureFixture) -> None:
    bp = Workflow.define("failure-log").step(boom, retry=RetryPolicy.fixed(2, 0.01)).build()
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        async with EmbeddedServer() as server, server.worker([bp]):
            info = await server.client.start(bp, {})
            done = await server.client.wait(info.instance_id, timeout=20)
    assert done.status == "FAILED"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step boom of instance")]
    assert len(lines) == 2, lines
    assert "failed (attempt 1, attempt 2 of 2 follows): ValueError: no stock" in lines[0], lines[0]
    assert "failed (attempt 2, its last attempt: the step fails for good): ValueError: no stock" in lines[1]
