"""LAST_WRITE_WINS joins on each store (docs/semantics.md#last-write-wins-joins); STRICT unchanged.

Each arrival at a join is its own transaction, so the join state goes through the store's
encoding between arrivals: a later arrival with a lower branch index must still count as later.
"""

from __future__ import annotations

import pytest

from wiggle._engine.state import InstanceStatus
from wiggle._model import JoinMerge
from wiggle._server.instances import Instances

from .upstream_kit import (  # noqa: F401  (layer_fixture: the fixture ``layer``)
    begin,
    claim_all,
    complete_with,
    for_each_definition,
    fork_definition,
    layer_fixture,
    unique,
)


@pytest.mark.parametrize("first", ["b0", "b1"])
async def test_fork_the_later_arrival_wins_a_key_both_wrote(layer: Instances, first: str) -> None:
    definition = fork_definition(unique("lww-fork"))
    instance_id = await begin(layer, definition, {"keep": 1, "x": 0})
    claimed = {c.token.node_id: c for c in await claim_all(layer, definition.name, 2)}
    later = "b1" if first == "b0" else "b0"
    assert await complete_with(layer, claimed[first], x=first) == InstanceStatus.RUNNING
    assert await complete_with(layer, claimed[later], x=later) == InstanceStatus.COMPLETED
    done = (await layer.get_instance(instance_id)).instance
    assert done.context == {"keep": 1, "x": later}


async def test_fork_keeps_every_branch_s_own_keys_and_removals(layer: Instances) -> None:
    definition = fork_definition(unique("lww-keys"), branches=3)
    instance_id = await begin(layer, definition, {"keep": 1, "gone": True, "same": "s"})
    claimed = {c.token.node_id: c for c in await claim_all(layer, definition.name, 3)}
    await complete_with(layer, claimed["b2"], c=3)
    # b1 removes a key; b0, arriving later, leaves it as it was at the fork: no write, still gone
    b1 = {k: v for k, v in claimed["b1"].context.items() if k != "gone"}
    await layer.complete(claimed["b1"].token.id, "w-1", {**b1, "b": 2}, None)
    await complete_with(layer, claimed["b0"], a=1, same="s")  # same value as at the fork: no write
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.COMPLETED
    assert done.context == {"keep": 1, "same": "s", "a": 1, "b": 2, "c": 3}


async def test_fork_a_removal_after_a_write_removes(layer: Instances) -> None:
    definition = fork_definition(unique("lww-rm"))
    instance_id = await begin(layer, definition, {"x": 0})
    claimed = {c.token.node_id: c for c in await claim_all(layer, definition.name, 2)}
    await complete_with(layer, claimed["b1"], x=1)
    await layer.complete(claimed["b0"].token.id, "w-1", {}, None)  # removes x, arriving later
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.COMPLETED
    assert done.context == {}


async def test_strict_fork_still_fails_on_a_conflict(layer: Instances) -> None:
    definition = fork_definition(unique("strict-fork"), merge=JoinMerge.STRICT)
    instance_id = await begin(layer, definition, {"x": 0})
    claimed = {c.token.node_id: c for c in await claim_all(layer, definition.name, 2)}
    await complete_with(layer, claimed["b1"], x=1)
    await complete_with(layer, claimed["b0"], x=0.5)
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.FAILED
    assert (
        done.error
        == "join 'join': branches 'b0' and 'b1' both changed 'x'; give the join a combine function (.join(combine=fn)) or let each branch change keys of its own"
    )


async def test_for_each_merges_writes_in_arrival_order(layer: Instances) -> None:
    definition = for_each_definition(unique("lww-fe"), concurrency=2)
    base = {"items": ["a", "b", "c"], "keep": 1, "tmp": True}
    instance_id = await begin(layer, definition, base)
    first = {c.context["itemIndex"]: c for c in await claim_all(layer, definition.name, 2)}
    assert first[0].context == {"keep": 1, "tmp": True, "item": "a", "itemIndex": 0}  # no list
    # element 1 arrives first and its token goes round to element 2
    await complete_with(layer, first[1], last=first[1].context["item"], seen_b=True)
    (third,) = await claim_all(layer, definition.name, 1)
    assert third.context == {"keep": 1, "tmp": True, "item": "c", "itemIndex": 2}
    third_ctx = {k: v for k, v in third.context.items() if k != "tmp"}  # removes tmp
    await layer.complete(third.token.id, "w-1", {**third_ctx, "last": "c", "item": "changed"}, None)
    view = await layer.get_instance(instance_id)
    assert view.instance.status == InstanceStatus.RUNNING
    await complete_with(layer, first[0], last="a", seen_a=True, itemIndex=99)
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.COMPLETED
    # base + the merged writes; element 0 arrived last so its "last" wins; no item, index or results
    assert done.context == {"items": ["a", "b", "c"], "keep": 1, "last": "a", "seen_a": True, "seen_b": True}


async def test_for_each_empty_list_goes_straight_on_unchanged(layer: Instances) -> None:
    definition = for_each_definition(unique("lww-fe-empty"))
    instance_id = await begin(layer, definition, {"items": [], "keep": 1})
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.COMPLETED
    assert done.context == {"items": [], "keep": 1}
    history = [(h.node_id, h.outcome) for h in await layer.history(instance_id)]
    assert history == [("fe", "FORKED"), ("fe.join", "JOINED"), ("end", "END")]


async def test_strict_for_each_still_collects_results(layer: Instances) -> None:
    definition = for_each_definition(unique("strict-fe"), merge=JoinMerge.STRICT)
    instance_id = await begin(layer, definition, {"items": [1, 2]})
    for claimed in reversed(await claim_all(layer, definition.name, 2)):
        await complete_with(layer, claimed, result=claimed.context["item"] * 10, scratch=1)
    done = (await layer.get_instance(instance_id)).instance
    assert done.context == {"items": [1, 2], "results": [10, 20]}
