"""An ``async def`` handler that runs until it is cancelled, and events that say what happened
to it (the give-up tests: tests/testkit/test_attempt_over.py, tests/worker/test_drain_attempt_over.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any


class Hang:
    """``handler`` (node name ``hang``) sets ``started`` when it runs and ``cancelled`` when it
    is cancelled; it never returns by itself."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()

    def handler(self) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        async def hang(ctx: dict[str, Any]) -> dict[str, Any]:
            self.started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return ctx

        return hang
