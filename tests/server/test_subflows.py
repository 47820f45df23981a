"""The cross-instance steps of sub-workflows (wiggle/_server/subflows.py), on both stores.

Each step is idempotent and a lost one is made good: a child's finish whose wake-up of the parent
was lost is found at the parent's next re-check; a clock duty repeated after the child was
inserted starts no second child.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pg import TEST_DATABASE_URL

from wiggle import Workflow
from wiggle._engine.children import child_spec
from wiggle._engine.engine import Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import InstanceState, InstanceStatus, TokenStatus, now_millis
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._server.subflows import ORPHAN_SWEEP_MILLIS
from wiggle._storage.base import InstanceQuery
from wiggle._storage.memory import MemoryStore
from wiggle._storage.postgres import PostgresStore
from wiggle.errors import FailedPrecondition

RECHECK = 5_000


@pytest.fixture(params=["memory", "postgres"])
async def instances(request: pytest.FixtureRequest) -> AsyncIterator[Instances]:
    if request.param == "memory":
        store: Any = MemoryStore()
    else:
        store = PostgresStore(TEST_DATABASE_URL, schema=request.getfixturevalue("pg_schema"))
    await store.open()
    try:
        yield Instances(store, Engine(EngineConfig(child_recheck_millis=RECHECK)))
    finally:
        await store.close()


async def _register(instances: Instances, tag: str) -> tuple[str, str]:
    child = Workflow.define(f"sf-child-{tag}").user_task("go").build()
    parent = Workflow.define(f"sf-parent-{tag}").sub_workflow("call", child, result_key="kid").build()
    await instances.register(child.definition)
    await instances.register(parent.definition)
    return child.name, parent.name


async def _child_of(instances: Instances, parent_id: str) -> str:
    view = await instances.get_instance(parent_id)
    (tok,) = view.tokens
    assert tok.status == TokenStatus.AWAITING and tok.child_id
    return tok.child_id


async def test_a_lost_wake_up_is_made_good_at_the_recheck(instances: Instances, monkeypatch) -> None:
    _, parent = await _register(instances, "lost")
    view = await instances.start(parent, "", {"a": 1}, "")
    await instances.run_clock_duties(now_millis())  # starts the child
    child_id = await _child_of(instances, view.instance.id)
    assert (await instances.get_instance(child_id)).instance.parent_id == view.instance.id

    async def lost(*args: object) -> None:  # the server dies right after the child's commit
        return None

    with monkeypatch.context() as patch:
        patch.setattr(instances.subflows, "follow_up", lost)
        await instances.complete_user_task(child_id, "go", {"b": 2})
    assert (await instances.get_instance(child_id)).instance.status == InstanceStatus.COMPLETED
    assert (await instances.get_instance(view.instance.id)).instance.status == InstanceStatus.RUNNING

    await instances.run_clock_duties(now_millis())  # not due yet: nothing happens
    assert (await instances.get_instance(view.instance.id)).instance.status == InstanceStatus.RUNNING
    await instances.run_clock_duties(now_millis() + RECHECK + 1)
    done = (await instances.get_instance(view.instance.id)).instance
    assert done.status == InstanceStatus.COMPLETED
    assert done.context == {"a": 1, "kid": {"a": 1, "b": 2}}
    entries = [(h.outcome, h.child_id) for h in await instances.history(view.instance.id)]
    assert entries[:2] == [("CHILD_STARTED", child_id), ("COMPLETED", child_id)]


async def test_a_repeated_start_and_wake_up_change_nothing(instances: Instances) -> None:
    child, parent = await _register(instances, "twice")
    view = await instances.start(parent, "", {}, "")
    await instances.run_clock_duties(now_millis())
    child_id = await _child_of(instances, view.instance.id)
    before = await instances.history(view.instance.id)
    # the clock duty again, as after a crash between the child's insert and the parent's record
    state = await instances.store.get_instance(view.instance.id)
    record = await instances.store.get_workflow(parent)
    spec = child_spec(
        record.loaded, InstanceState(state.instance, {t.id: t for t in state.tokens}), state.tokens[0]
    )
    await instances.subflows.start_child(spec)
    listed, _ = await instances.list_instances(InstanceQuery(workflow=child))
    assert [v.instance.id for v in listed] == [child_id]
    assert await instances.history(view.instance.id) == before
    # the child finishes; its wake-up delivered twice moves the parent once
    await instances.complete_user_task(child_id, "go", {})
    kid = (await instances.get_instance(child_id)).instance
    await instances.subflows.resume_parent(kid)
    outcomes = [h.outcome for h in await instances.history(view.instance.id) if h.node_id == "call"]
    assert outcomes == ["CHILD_STARTED", "COMPLETED"]


async def test_unknown_child_at_start_is_refused_and_nothing_is_stored(instances: Instances) -> None:
    definition = WorkflowDefinition(
        name="sf-orphan",
        start_node="call",
        nodes=(
            Node(id="call", kind=NodeKind.SUB_WORKFLOW, workflow="sf-missing", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    )
    # stored behind the instance layer's back (as by a server of an older release)
    await instances.store.put_definition(LoadedDefinition(definition))
    with pytest.raises(FailedPrecondition, match="starts workflow 'sf-missing', which is not registered"):
        await instances.start("sf-orphan", "", {}, "")
    listed, _ = await instances.list_instances(InstanceQuery(workflow="sf-orphan"))
    assert listed == []


async def test_a_lost_cancel_cascade_is_made_good_by_the_orphan_sweep(
    instances: Instances, monkeypatch
) -> None:
    _, parent = await _register(instances, "orphan-sweep")
    view = await instances.start(parent, "", {}, "")
    now = now_millis()
    await instances.run_clock_duties(now)  # starts the child (and sweeps: nothing to do)
    child_id = await _child_of(instances, view.instance.id)

    async def lost(*args: object) -> None:  # the server dies right after the parent's commit
        return None

    with monkeypatch.context() as patch:
        patch.setattr(instances.subflows, "follow_up", lost)
        await instances.cancel(view.instance.id, "stop")
    assert (await instances.get_instance(child_id)).instance.status == InstanceStatus.RUNNING
    assert await instances.store.orphaned_children(10) == [(child_id, view.instance.id)]

    await instances.run_clock_duties(now + ORPHAN_SWEEP_MILLIS + 1)
    kid = (await instances.get_instance(child_id)).instance
    assert kid.status == InstanceStatus.CANCELLED
    assert kid.reason == f"parent {view.instance.id} is no longer running"
    assert await instances.store.orphaned_children(10) == []
