"""Diff completions and client-chosen lease lengths on each store (docs/semantics.md#diff-completions,
docs/semantics.md#leases): the engine support of the upstream Wiggle protocol."""

from __future__ import annotations

import msgspec
import pytest

from wiggle._engine.state import InstanceStatus, TokenStatus
from wiggle._limits import PAYLOAD_REMEDY
from wiggle._server.instances import Instances
from wiggle.errors import InvalidArgument

from .upstream_kit import (  # noqa: F401  (layer_fixture: the fixture ``layer``)
    LEASE,
    MAX_LEASE,
    OWNER,
    begin,
    claim_all,
    fork_definition,
    layer_fixture,
    task_definition,
    unique,
)


async def test_a_diff_sets_and_removes_keys_of_the_current_context(layer: Instances) -> None:
    definition = task_definition(unique("diff"))
    instance_id = await begin(layer, definition, {"a": 1, "b": 2, "c": 3})
    (claimed,) = await claim_all(layer, definition.name, 1)
    status = await layer.complete(claimed.token.id, OWNER, None, None, diff=({"a": 10, "d": 4}, ["b"]))
    assert status == InstanceStatus.COMPLETED
    assert (await layer.get_instance(instance_id)).instance.context == {"a": 10, "c": 3, "d": 4}


async def test_a_diff_on_a_branch_applies_to_the_branch_context(layer: Instances) -> None:
    definition = fork_definition(unique("diff-fork"))
    instance_id = await begin(layer, definition, {"x": 0, "y": 0})
    claimed = {c.token.node_id: c for c in await claim_all(layer, definition.name, 2)}
    await layer.complete(claimed["b0"].token.id, OWNER, None, None, diff=({"a": 1}, ["y"]))
    await layer.complete(claimed["b1"].token.id, OWNER, None, None, diff=({"x": 2}, []))
    done = (await layer.get_instance(instance_id)).instance
    assert done.status == InstanceStatus.COMPLETED
    assert done.context == {"x": 2, "a": 1}


async def test_an_oversize_diff_result_fails_the_step_like_a_context(layer: Instances) -> None:
    definition = task_definition(unique("diff-big"))
    instance_id = await begin(layer, definition, {"a": 1})
    (claimed,) = await claim_all(layer, definition.name, 1)
    status = await layer.complete(claimed.token.id, OWNER, None, None, diff=({"big": "x" * 5000}, []))
    assert status == InstanceStatus.FAILED
    done = (await layer.get_instance(instance_id)).instance
    assert done.error.startswith("t: step result is ") and done.error.endswith(
        "the limit is 4096 bytes" + PAYLOAD_REMEDY
    )
    assert done.context == {"a": 1}
    (entry,) = [h for h in await layer.history(instance_id) if h.node_id == "t"]
    assert entry.outcome == "FAILED"  # for good: not retried


async def test_context_and_diff_together_are_refused_and_change_nothing(layer: Instances) -> None:
    definition = task_definition(unique("diff-both"))
    instance_id = await begin(layer, definition, {"a": 1})
    (claimed,) = await claim_all(layer, definition.name, 1)
    before = msgspec.to_builtins(await layer.get_instance(instance_id))
    with pytest.raises(InvalidArgument, match="a context or a diff, not both"):
        await layer.complete(claimed.token.id, OWNER, {"a": 2}, None, diff=({"a": 3}, []))
    with pytest.raises(InvalidArgument, match="diff must remove a list of keys"):
        await layer.complete(claimed.token.id, OWNER, None, None, diff=({"a": 3}, [1]))  # type: ignore[list-item]
    assert msgspec.to_builtins(await layer.get_instance(instance_id)) == before


@pytest.mark.parametrize(
    ("asked", "lease"), [(None, LEASE), (50, 1_000), (5_000, 5_000), (10**12, MAX_LEASE)]
)
async def test_a_claim_s_lease_is_clamped(layer: Instances, asked: int | None, lease: int) -> None:
    definition = task_definition(unique("lease"))
    instance_id = await begin(layer, definition, {})
    now = layer.now()
    (claimed,) = await claim_all(layer, definition.name, 1, lease_millis=asked)
    assert claimed.token.lease_expires_at == now + lease
    (stored,) = (await layer.get_instance(instance_id)).tokens  # as the store keeps it
    assert stored.status == TokenStatus.RUNNING and stored.lease_expires_at == now + lease


async def test_poll_passes_the_lease_on(layer: Instances) -> None:
    definition = task_definition(unique("lease-poll"))
    await begin(layer, definition, {})
    now = layer.now()
    (claimed,) = await layer.poll(OWNER, [definition.name], 1, 0.0, lease_millis=2_500)
    assert claimed.token.lease_expires_at == now + 2_500


@pytest.mark.parametrize(
    ("asked", "lease"), [(None, LEASE), (10, 1_000), (120_000, 120_000), (10**9, MAX_LEASE)]
)
async def test_a_heartbeat_extends_by_the_length_asked(
    layer: Instances, asked: int | None, lease: int
) -> None:
    definition = task_definition(unique("beat"))
    instance_id = await begin(layer, definition, {})
    (claimed,) = await claim_all(layer, definition.name, 1, lease_millis=2_000)
    layer.clock.advance(1_500)  # type: ignore[attr-defined]
    now = layer.now()
    status, expires = await layer.heartbeat(claimed.token.id, OWNER, extend_millis=asked)
    assert status == InstanceStatus.RUNNING and expires == now + lease
    (stored,) = (await layer.get_instance(instance_id)).tokens
    assert stored.lease_expires_at == now + lease


async def test_a_short_lease_expires_at_its_own_time(layer: Instances) -> None:
    definition = task_definition(unique("lease-expiry"))
    instance_id = await begin(layer, definition, {})
    await claim_all(layer, definition.name, 1, lease_millis=1_000)
    # (the PostgreSQL schema is shared: other tests' leases may expire too, so look at this token)
    await layer.run_clock_duties(layer.now() + 999)
    (token,) = (await layer.get_instance(instance_id)).tokens
    assert token.status == TokenStatus.RUNNING
    await layer.run_clock_duties(layer.now() + 1_000)
    (token,) = (await layer.get_instance(instance_id)).tokens
    assert token.status == TokenStatus.READY and token.last_error == "lease expired (worker unreachable)"


async def test_a_bad_lease_length_is_refused_before_anything_is_claimed(layer: Instances) -> None:
    definition = task_definition(unique("lease-bad"))
    await begin(layer, definition, {})
    with pytest.raises(InvalidArgument, match="lease_millis must be an integer number of milliseconds"):
        await layer.claim(OWNER, [definition.name], 1, lease_millis=1.5)  # type: ignore[arg-type]
    await claim_all(layer, definition.name, 1)  # still READY
