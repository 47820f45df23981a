"""``wait_for(instance, node)`` decides from the history as well as the tokens
(wiggle/_testing/environment.py): a step passed between two looks, or before the call, counts as
reached. It polled the tokens only, so a quick step's token was gone before it looked: it said
"finished (COMPLETED) without reaching 'ship'" of an instance whose path was
['receive', 'cool_off', 'ship', 'end'], and ``wait_for(info, "receive")`` after receive had run
ran the instance to its end, moving the clock 2 h (an outside trial)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from .conftest import Kit


def receive(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "received": True}


def ship(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "shipped": True}


def _flow(kit: Kit) -> Any:
    return kit.define("wait-for").step(receive).sleep("cool_off", timedelta(hours=2)).step(ship).build()


async def test_a_step_passed_quickly_is_reached(kit: Kit) -> None:
    flow = _flow(kit)
    async with kit.env([flow]) as env:
        info = await env.start_workflow(flow, {})
        at_ship = await env.wait_for(info, "ship")  # there, or past it
        assert any(t.node_id == "ship" for t in at_ship.tokens) or "ship" in await env.path(info)
        assert (await env.wait_for(info, "end")).status == "COMPLETED"


async def test_a_node_passed_before_the_call_is_reached_at_once(kit: Kit) -> None:
    flow = _flow(kit)
    async with kit.env([flow]) as env:
        info = await env.start_workflow(flow, {})
        at_sleep = await env.wait_for(info, "cool_off")
        assert [t.node_id for t in at_sleep.tokens] == ["cool_off"]
        before = env.now_millis()
        again = await env.wait_for(info, "receive")  # ran already: no wait, no jump
        assert again.status == "RUNNING"
        assert env.now_millis() == before
        done = await env.result(info)
        assert env.now_millis() - before == 2 * 3_600_000
        assert done.context == {"received": True, "shipped": True}


async def test_the_clock_stops_at_the_arrival(kit: Kit) -> None:
    # A step passed between two looks, then a sleep: the clock does not jump over the sleep.
    flow = kit.define("wait-for-stop").step(receive).step(ship).sleep("settle", timedelta(days=1)).build()
    async with kit.env([flow]) as env:
        info = await env.start_workflow(flow, {})
        start = env.now_millis()
        await env.wait_for(info, "ship")
        assert env.now_millis() == start
        assert (await env.client.get(info.instance_id)).status == "RUNNING"


async def test_a_node_never_reached_is_said_with_the_path(kit: Kit) -> None:
    flow = kit.define("wait-for-gate").step(receive).gate(lambda ctx: False, name="open").step(ship).build()
    async with kit.env([flow]) as env:
        info = await env.start_workflow(flow, {})
        with pytest.raises(
            AssertionError,
            match=r"finished \(COMPLETED\) without reaching 'ship'; its path: \['receive', 'open', 'gated.open'\]",
        ):
            await env.wait_for(info, "ship")
