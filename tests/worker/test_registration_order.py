"""A worker (and the test environment) registers a sub-workflow's child before its parent,
whatever order it was given them in: the server refuses a parent whose child is not registered
("register it first"), so ``wiggle worker flows:PARENT_FIRST`` failed to start, and a set of
blueprints failed or not by the set's order (wiggle/_workflow_compile.py registration_order)."""

from __future__ import annotations

from typing import Any

from wiggle import Workflow
from wiggle._workflow_compile import registration_order
from wiggle.testing import EmbeddedServer, SyncWorkflowEnvironment


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx["n"] * 2}


def done(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "done": True}


def _flows(prefix: str) -> tuple[Any, Any, Any]:
    leaf = Workflow.define(f"{prefix}-leaf", dict).step(double).build()
    middle = Workflow.define(f"{prefix}-middle", dict).sub_workflow("leaf", leaf).build()
    top = Workflow.define(f"{prefix}-top", dict).sub_workflow("middle", middle).step(done).build()
    return top, middle, leaf


def test_children_come_before_their_parents_and_the_rest_keeps_its_order() -> None:
    top, middle, leaf = _flows("order")
    other = Workflow.define("order-other", dict).step(done).build()
    assert [b.name for b in registration_order([top, other, middle, leaf])] == [
        "order-leaf",
        "order-middle",
        "order-top",
        "order-other",
    ]
    assert registration_order([leaf, middle, top]) == [leaf, middle, top]  # already in order
    ping = Workflow.define("ping", dict).sub_workflow("other", "pong").build()
    pong = Workflow.define("pong", dict).sub_workflow("other", "ping").build()
    assert registration_order([ping, pong]) == [pong, ping]  # a cycle: each placed once


async def test_a_worker_given_the_parent_first_registers_both_and_runs_them() -> None:
    top, middle, leaf = _flows("worker")
    async with EmbeddedServer() as server:
        async with server.worker([top, middle, leaf]):  # the parent first
            info = await server.client.start(top, {"n": 3})
            finished = await server.client.wait(info, timeout=30)
    assert finished.status == "COMPLETED", finished
    assert finished.context == {"n": 6, "done": True}


def test_the_test_environment_given_the_parent_first_runs_it() -> None:
    top, middle, leaf = _flows("env")
    with SyncWorkflowEnvironment({top, middle, leaf}) as env:  # a set: any order
        finished = env.run(top, {"n": 5})
    assert finished.context == {"n": 10, "done": True}
