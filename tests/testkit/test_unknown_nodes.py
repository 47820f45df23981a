"""A node the instance's workflow version does not have is NotFound at once, in every face.

An outside trial found ``complete_user_task(instance, "nope")`` and ``wait_for(instance,
"nonode")`` waiting out their 30 s timeout for a node that could never come, then raising a
TimeoutError that did not say the name was wrong; ``signal(instance, "nope")`` already said so at
once (wiggle/_engine/signals.py). The definition is known: the kit reads it and refuses the name.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from wiggle import NotFound, Workflow
from wiggle.testing import SyncWorkflowEnvironment, WorkflowEnvironment

from .conftest import Kit

#: Far below the waits' 30 s default: the refusal must not wait for anything.
AT_ONCE = 5.0


def _submit(ctx):
    return {**ctx, "submitted": True}


def _expense(kit: Kit):
    return kit.define("expense").step(_submit).user_task("approve").user_task("pay").build()


async def test_an_unknown_node_or_user_task_is_refused_at_once(kit: Kit) -> None:
    bp = _expense(kit)
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "approve")
        started = time.monotonic()
        with pytest.raises(NotFound) as unknown_task:
            await env.complete_user_task(info, "nope", {})
        with pytest.raises(NotFound) as unknown_node:
            await env.wait_for(info, "nonode")
        with pytest.raises(NotFound) as not_a_task:
            await env.complete_user_task(info, "_submit", {}, wait=False)
        assert time.monotonic() - started < AT_ONCE
        version = bp.version
        assert str(unknown_task.value) == (
            f"workflow {bp.name!r} (version {version}) has no user task 'nope'; its user tasks: 'approve', 'pay'"
        )
        assert str(unknown_node.value) == (
            f"workflow {bp.name!r} (version {version}) has no node 'nonode'; "
            "its nodes: '_submit', 'approve', 'pay', 'end'"
        )
        assert "has no user task '_submit' ('_submit' is a TASK node); its user tasks" in str(
            not_a_task.value
        )
        # the names that exist still work, and the instance was left as it was
        await env.complete_user_task(info, "approve", {"by": "ann"})
        done = await env.complete_user_task(info, "pay", {})
        assert (await env.result(done)).context == {"submitted": True, "by": "ann"}


def test_the_sync_face_and_the_async_view_refuse_them_too() -> None:
    bp = Workflow.define(f"sleepy-{uuid.uuid4().hex[:6]}").sleep("nap", 60).build()  # no user task
    with SyncWorkflowEnvironment([bp]) as env:
        info = env.start_workflow(bp, {})
        started = time.monotonic()
        with pytest.raises(NotFound, match=r"has no user task 'nope'; it has no user task$"):
            env.complete_user_task(info, "nope", {})
        with pytest.raises(NotFound, match=r"has no node 'nope'; its nodes: 'nap', 'end'$"):
            env.wait_for(info, "nope")

        async def from_a_loop() -> None:
            with pytest.raises(NotFound, match="has no user task 'nope'"):
                await env.aio.complete_user_task(info, "nope")
            with pytest.raises(NotFound, match="has no node 'nope'"):
                await env.aio.wait_for(info, "nope")

        asyncio.run(from_a_loop())
        assert time.monotonic() - started < AT_ONCE
        assert env.result(info).status == "COMPLETED"


async def test_a_long_list_of_nodes_is_cut_short() -> None:
    flow = Workflow.define(f"long-{uuid.uuid4().hex[:6]}")
    for n in range(30):
        flow = flow.sleep(f"nap{n}", 1)
    bp = flow.build()
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        with pytest.raises(NotFound) as caught:
            await env.wait_for(info, "nope")
    assert str(caught.value).endswith("'nap19' and 11 more")


def test_an_unknown_environment_setting_names_the_closest_one() -> None:
    """``@pytest.mark.wiggle(workflow=[...])`` said "`ServerConfig` has no field 'workflow'", with
    no word of the environment's own keywords (a docs trial)."""
    from wiggle.testing import WorkflowEnvironment

    with pytest.raises(TypeError, match=r"'workflow' \(did you mean 'workflows'\?\).*worker_options"):
        WorkflowEnvironment(workflow=[])
    with pytest.raises(TypeError, match=r"'lease_milis' \(did you mean 'lease_millis'\?\)"):
        WorkflowEnvironment(lease_milis=5)
