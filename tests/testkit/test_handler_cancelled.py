"""A handler that raises ``asyncio.CancelledError`` itself fails its step in the test kit as on a
worker: at once, retried by its policy (its backoff skipped like any), in every mode.

Found by an outside trial: the environment's worker dropped the step without a word (it took the
CancelledError for its own cancellation), and since the clock does not jump while a step runs on
a worker of the environment, the wait hung until its real timeout, saying "step ... is RUNNING
... it has no time limit: the wait lasts as long as its handler runs" of a handler long gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from wiggle import RetryPolicy

from .conftest import Kit


async def raise_cancel(ctx: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    raise asyncio.CancelledError("mine")


async def test_a_handler_raising_cancelled_error_fails_its_step_and_the_wait_ends(kit: Kit) -> None:
    bp = kit.define("raisec").step(raise_cancel, retry=RetryPolicy.fixed(2, 60)).build()
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        done = await env.wait(info, timeout=10)
        history = await env.history(info)
        now = env.now_millis()
    assert done.status == "FAILED", (done, history)
    steps = [(h.node_id, h.attempt, h.outcome) for h in history if h.node_id == "raise_cancel"]
    assert steps == [("raise_cancel", 1, "RETRY"), ("raise_cancel", 2, "FAILED")], history
    for entry in history[:2]:
        assert entry.error.startswith(
            "CancelledError: mine (raised by the handler without its step being cancelled"
        )
    assert "lease expired" not in done.error, done.error
    assert now - info.created_at >= 60_000  # the retry's backoff, skipped on the virtual clock
