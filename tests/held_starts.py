"""Holding a test server's starts: the tests of the start batching
(tests/server/test_start_batching.py) and of the start stream (tests/server/test_start_stream.py)
keep a start in the server until the test lets it go."""

from __future__ import annotations

import asyncio
from typing import Any


def hold_starts(instances: Any) -> asyncio.Event:
    """Make every start of ``instances`` (wiggle/_server/instances.py) wait, in the server, until
    the returned event is set; starts after that go straight through."""
    original = instances.start_with
    release = asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        if not release.is_set():
            await release.wait()
        return await original(*args, **kwargs)

    instances.start_with = held
    return release
