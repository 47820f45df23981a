"""A DYN_FORK (fork_each) over a list missing from the context skips straight through, as upstream's
client documents ("an empty or missing list skips straight through"), at the start and later on.

Only for definitions registered through the upstream service: our own protocol's for_each keeps
refusing (at start) or failing (later) on a missing list (docs/semantics.md#for-each).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from wiggle import Workflow
from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb
from wiggle.client import AsyncClient
from wiggle.errors import InvalidArgument

from .service_kit import INVALID, STORES, Up, document, end, open_server, task, unique, value


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(request.param, VirtualClock(start=1_700_000_000_000)) as server:
        yield server


def _fork_each(name: str, prepare: bool = False) -> dict[str, Any]:
    nodes = [
        {
            "id": "each",
            "kind": "DYN_FORK",
            "name": "each",
            "itemsKey": "items",
            "itemKey": "item",
            "branches": ["p"],
            "next": "j",
        },
        task("p", name, "price", "j"),
        {"id": "j", "kind": "JOIN", "name": "j", "next": "n3"},
        task("n3", name, "after", "end"),
        end(),
    ]
    if prepare:
        nodes.insert(0, task("n0", name, "prepare", "each"))
    return document(name, nodes)


async def _finish(up: Up, name: str, iid: str) -> None:
    after = await up.claim(name)
    assert after.step_name == "after"
    await up.complete(after, {"after": True})
    assert await up.status(iid) == "COMPLETED"


async def test_a_missing_list_at_the_start_skips_the_fork_each(up: Up) -> None:
    name = unique("up-each-missing")
    await up.register(_fork_each(name))
    iid = await up.start(name, {"k": 1})  # no "items": not refused
    await _finish(up, name, iid)
    assert await up.context(iid) == {"k": 1, "after": True}  # no list, no results key appears
    path = [(e.node_id, e.outcome) for e in await up.history(iid)]
    assert [n for n, _ in path] == ["each", "j", "after", "end"]
    assert not any(n == "price" for n, _ in path)


async def test_a_list_still_missing_after_a_step_skips_the_fork_each(up: Up) -> None:
    name = unique("up-each-later")
    await up.register(_fork_each(name, prepare=True))
    iid = await up.start(name, {"k": 1})
    prepare = await up.claim(name)
    assert prepare.step_name == "prepare"
    await up.complete(prepare, {"prepared": True})  # leaves "items" unset
    await _finish(up, name, iid)
    assert await up.context(iid) == {"k": 1, "prepared": True, "after": True}


async def test_a_present_list_still_fans_out_and_a_non_list_is_still_refused(up: Up) -> None:
    name = unique("up-each-present")
    await up.register(_fork_each(name))
    iid = await up.start(name, {"items": [1, 2]})
    prices = await up.poll(name, max_tasks=2)
    assert sorted(t.step_name for t in prices) == ["price", "price"]
    for t in prices:
        await up.complete(t, {})
    await _finish(up, name, iid)
    details = await up.fails(
        "StartInstance", upb.StartInstanceRequest(workflow=name, context=value({"items": 5})), INVALID
    )
    assert "must be a list, but it is a int" in details, details


async def test_our_own_protocol_still_refuses_a_missing_list(up: Up) -> None:
    bp = (
        Workflow.define(unique("ours-each"))
        .for_each("items", lambda b: b.step(lambda ctx: ctx, name="work"))
        .build()
    )
    client = AsyncClient(up.server.target)
    try:
        await client.register(bp)
        with pytest.raises(InvalidArgument, match="'items' must be a list, but it is missing"):
            await client.start(bp, {"k": 1})
    finally:
        await client.close()
