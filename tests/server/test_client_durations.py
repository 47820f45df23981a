"""Durations the clients cannot send (far past the server's 10-year limit) are InvalidArgument naming
the argument and the limit, on both clients, before any call: never protobuf's bare ValueError."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from both_clients import EitherClient

from wiggle import Workflow
from wiggle._limits import MAX_DURATION_MILLIS
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer

TEN_YEARS = MAX_DURATION_MILLIS // 1000


def _step(ctx: dict) -> dict:
    return ctx


FLOW = Workflow.define("client-durations").step(_step).build()


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"start_delay": 1e30}, "start_delay"),
        ({"start_delay": 2.0**63}, "start_delay"),
        ({"start_delay": timedelta(days=10**8)}, "start_delay"),
        ({"start_delay": TEN_YEARS + 1}, "start_delay"),
        ({"timeout": 1e30}, "timeout"),
        ({"dedup_key": "k", "dedup_window": 1e30}, "dedup_window"),
    ],
)
async def test_a_duration_past_the_limit_is_invalid_argument_naming_it(
    server: EmbeddedServer, blocking: bool, options: dict[str, Any], field: str
) -> None:
    client = EitherClient(server.target, blocking)
    try:
        with pytest.raises(InvalidArgument) as err:
            await client.call("start", FLOW, {}, **options)
        message = str(err.value)
        assert message.startswith(f"{field} is ") and f"the limit is {TEN_YEARS} seconds" in message, message
        with pytest.raises(InvalidArgument, match=rf"every is 1e\+30 seconds; the limit is {TEN_YEARS}"):
            await client.call("create_schedule", "s-huge", FLOW, every=1e30)
        instances, _ = await client.call("list", workflow=FLOW.name)
        assert instances == []
        assert await client.call("list_schedules") == []
        # the longest delay there is still starts (SCHEDULED for ten years)
        info = await client.call("start", FLOW, {}, start_delay=timedelta(seconds=TEN_YEARS))
        assert info.status == "SCHEDULED"
    finally:
        await client.close()
