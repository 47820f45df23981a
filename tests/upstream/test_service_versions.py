"""Upstream version numbers through the service (docs/upstream.md#version-numbers), and
GetWorkflow's answer for a workflow registered through our own service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format

from wiggle import Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import NOT_FOUND, STORES, Up, flow, open_server, unique

INT32_MAX = 2**31 - 1


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(request.param) as server:
        yield server


def _derived(content_hash: str) -> int:
    """docs/upstream.md#version-numbers: the 64-bit hash modulo 2**31-1, plus one."""
    return int(content_hash, 16) % INT32_MAX + 1


async def _serve(up: Up, name: str, *ids: str) -> list[list[str]]:
    """Serve ``name``'s queue until the instances ``ids`` finish; the steps each ran."""
    ran: dict[str, list[str]] = {i: [] for i in ids}
    while [i for i in ids if await up.status(i) == "RUNNING"]:
        t = await up.claim(name)
        ran[t.instance_id].append(t.step_name)
        await up.complete(t, {t.step_name: True})
    return [ran[i] for i in ids]


async def test_an_explicit_version_is_answered_and_startable(up: Up) -> None:
    name = unique("up-v")
    result = await up.register(flow(name, "a", "b", version=7))
    assert (result.name, result.version, result.nodes) == (name, "7", 3)
    again = await up.register(flow(name, "a", "b", version=7))  # the same again: the same answer
    assert again.version == "7"
    iid = await up.start(name, version=7)
    assert (await up.get(iid)).instance.version == 7
    got = await up.stub.GetWorkflow(upb.GetWorkflowRequest(name=name), timeout=15)
    assert got.definition["version"] == 7
    await up.fails("StartInstance", upb.StartInstanceRequest(workflow=name, version=8), NOT_FOUND)


async def test_re_registering_a_version_moves_the_number_not_running_instances(up: Up) -> None:
    name = unique("up-v-move")
    await up.register(flow(name, "a", version=7))
    old = await up.start(name, version=7)
    moved = await up.register(flow(name, "a", "b", version=7))  # a different graph, the same number
    assert moved.version == "7" and moved.nodes == 3
    new = await up.start(name, version=7)
    latest = await up.start(name)
    got = await up.stub.GetWorkflow(upb.GetWorkflowRequest(name=name), timeout=15)
    assert got.definition["version"] == 7 and len(got.definition["nodes"]) == 3
    assert (await up.get(new)).instance.version == 7
    # the instance started before keeps the graph it started with
    assert await _serve(up, name, old, new, latest) == [["a"], ["a", "b"], ["a", "b"]]
    # its number is no longer 7 (7 names the new graph), but the number it shows still starts that graph
    shown = (await up.get(old)).instance.version
    assert shown != 7 and 1 <= shown <= INT32_MAX
    again = await up.start(name, version=shown)
    assert await _serve(up, name, again) == [["a"]]


def _ours(name: str) -> Any:
    def validate(ctx: dict) -> dict:
        return ctx

    def in_stock(ctx: dict) -> bool:
        return True

    def charge(ctx: dict) -> dict:
        return ctx

    return (
        Workflow.define(name)
        .step(validate)
        .gate(in_stock, name="in-stock")
        .step(charge, queue="payments")
        .build()
    )


async def test_a_workflow_registered_through_our_service(up: Up) -> None:
    name = unique("up-ours")
    bp = _ours(name)
    info = await up.ours.RegisterWorkflow(
        pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()), timeout=15
    )
    number = _derived(info.version)
    listed = await up.stub.ListWorkflows(upb.Empty(), timeout=15)
    assert name in listed.workflows
    got = json_format.MessageToDict((await up.stub.GetWorkflow(upb.GetWorkflowRequest(name=name))).definition)
    assert got["name"] == name and got["version"] == number
    assert sorted(got["queues"]) == sorted([name, "payments"])

    # what upstream's Worker._reconcile reads (wiggle-client 0.1.1 worker.py): the TASK and
    # PREDICATE nodes by "activity", each with its "kind" and the "queue" it polls
    steps = {
        n["activity"]: n for n in got["nodes"] if n.get("kind") in ("TASK", "PREDICATE") and "activity" in n
    }
    assert {a: (n["kind"], n.get("queue", name)) for a, n in steps.items()} == {
        f"{name}#validate": ("TASK", name),
        f"{name}#in-stock": ("PREDICATE", name),
        f"{name}#charge": ("TASK", "payments"),
    }
    assert got["startNode"] in {n["id"] for n in got["nodes"]}

    iid = await up.start(name, {"n": 1}, version=number)
    detail = await up.get(iid)
    assert detail.instance.version == number
    assert (await up.info(iid)).version == info.version  # our hash
    assert (await up.claim(name)).activity == f"{name}#validate"

    # and upstream's JSON is a definition upstream's protocol accepts
    back = await up.register(got)
    assert (back.name, back.version, back.nodes) == (name, str(number), len(got["nodes"]))
