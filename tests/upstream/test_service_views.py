"""Reads and instance control through upstream Wiggle's service: GetInstance's tokens,
ListInstances' limit and filters, CancelInstance, HealthCheck and GetCluster.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import NOT_FOUND, STORES, WORKER, Up, document, end, flow, open_server, plain, task, unique


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(request.param, VirtualClock(start=1_700_000_000_000)) as server:
        yield server


async def test_get_instance_shows_its_tokens(up: Up) -> None:
    name = unique("up-tokens")
    await up.register(
        document(
            name,
            [
                {"id": "f", "kind": "FORK", "branches": ["w", "s"]},
                task("w", name, "work", "j"),
                {"id": "s", "kind": "SIGNAL", "name": "go", "next": "j"},
                {"id": "j", "kind": "JOIN", "next": "end"},
                end(),
            ],
        )
    )
    iid = await up.start(name, {"k": 1})
    detail = await up.get(iid)
    assert detail.instance.id == iid and detail.instance.workflow == name
    assert detail.instance.status == "RUNNING"
    tokens = {t.node_id: t for t in detail.tokens}
    assert sorted(tokens) == ["s", "work"]
    ready, waiting = tokens["work"], tokens["s"]
    assert (ready.kind, ready.status, ready.activity, ready.attempt) == ("TASK", "READY", f"{name}#work", 1)
    assert not ready.HasField("lease_owner")
    assert (waiting.kind, waiting.status, waiting.activity) == ("SIGNAL", "AWAITING", "")

    t = await up.claim(name)
    running = {x.node_id: x for x in (await up.get(iid)).tokens}["work"]
    assert (running.id, running.status, running.lease_owner) == (t.task_id, "RUNNING", WORKER)
    await up.stub.FailTask(
        upb.TaskFailureRequest(task_id=t.task_id, lease_owner=WORKER, message="blip", retryable=True),
        timeout=15,
    )
    retried = {x.node_id: x for x in (await up.get(iid)).tokens}["work"]
    assert (retried.status, retried.attempt, retried.last_error) == ("READY", 2, "blip")
    assert not retried.HasField("lease_owner")


async def test_list_instances_limit_and_filters(up: Up) -> None:
    one, two = unique("up-list-a"), unique("up-list-b")
    await up.register(flow(one, "a"))
    await up.register(flow(two, "a"))
    assert up.clock is not None
    started = []
    for flow_name in (one, one, one, two, two):
        up.clock.advance(10)  # each a little newer than the one before
        started.append(await up.start(flow_name, {}))
    ones, twos = started[:3], started[3:]
    t = await up.claim(one)
    await up.complete(t, None)
    done = t.instance_id

    async def ids(**fields: Any) -> list[str]:
        listed = await up.stub.ListInstances(upb.ListInstancesRequest(**fields), timeout=15)
        return [i.id for i in listed.instances]

    assert await ids() == started[::-1]  # newest first; the default limit covers them all
    assert await ids(limit=2) == [twos[1], twos[0]]
    assert await ids(limit=4) == started[:0:-1]
    assert await ids(workflow=two) == twos[::-1]
    assert await ids(workflow=one, limit=1) == [ones[2]]
    assert await ids(status="COMPLETED") == [done]
    assert sorted(await ids(workflow=one, status="RUNNING")) == sorted(set(ones) - {done})
    assert len(await ids(workflow=one, status="RUNNING", limit=1)) == 1
    assert await ids(workflow=two, status="COMPLETED") == []
    assert await ids(workflow="no-such-flow") == []
    listed = await up.stub.ListInstances(upb.ListInstancesRequest(status="COMPLETED"), timeout=15)
    [view] = listed.instances
    assert (view.workflow, view.status) == (one, "COMPLETED")


async def test_cancel_answers_the_id_and_a_second_cancel_is_harmless(up: Up) -> None:
    name = unique("up-cancel")
    await up.register(flow(name, "a", "b"))
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name)
    reply = await up.stub.CancelInstance(
        upb.CancelInstanceRequest(instance_id=iid, reason="no longer needed")
    )
    assert reply.cancelled == iid
    cancelled = (await up.get(iid)).instance
    assert (cancelled.status, cancelled.termination_reason) == ("CANCELLED", "no longer needed")
    before = await up.snapshot()
    again = await up.stub.CancelInstance(
        upb.CancelInstanceRequest(instance_id=iid, reason="again"), timeout=15
    )
    assert again.cancelled == iid
    assert await up.snapshot() == before  # the first reason stands
    # the worker that held the step learns it lost it
    await up.fails("CompleteTask", upb.TaskResultRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    # a finished instance is left as it is
    other = await up.start(name)
    for step in ("a", "b"):
        s = await up.claim(name)
        assert (s.instance_id, s.step_name) == (other, step)
        await up.complete(s, None)
    reply = await up.stub.CancelInstance(upb.CancelInstanceRequest(instance_id=other), timeout=15)
    assert reply.cancelled == other and await up.status(other) == "COMPLETED"


async def test_health_check_is_up(up: Up) -> None:
    health = await up.stub.HealthCheck(upb.Empty(), timeout=15)
    assert health.status == "UP"
    assert health.node == up.server.target


async def test_get_cluster_lists_this_node(up: Up, eventually: Callable[..., Any]) -> None:
    async def leads() -> bool:
        view = await up.stub.GetCluster(upb.Empty(), timeout=15)
        return view.leader

    await eventually(leads, timeout=30, what="this node leads the clock duties")
    view = await up.stub.GetCluster(upb.Empty(), timeout=15)
    me = [m for m in view.members if m.id == view.self]
    assert len(me) == 1 and me[0].leader and me[0].alive
    assert [m.id for m in view.members if m.leader] == [view.self]
    health = await up.stub.HealthCheck(upb.Empty(), timeout=15)
    assert health.leader


async def test_an_integer_no_double_holds_fails_the_step_but_not_the_reads(up: Up) -> None:
    # a context started through our service may hold any integer; upstream's Value holds doubles
    name = unique("up-bigint")
    await up.register(flow(name, "a"))
    big = 2**70 + 1
    started = await up.ours.StartInstance(
        pb.StartInstanceRequest(workflow=name, context_json=b'{"big": %d, "fine": 3}' % big), timeout=15
    )
    iid = started.instance_id
    # sent to an upstream worker, it would come back rounded: the step fails, naming why
    assert not await up.poll(name, wait_millis=0)
    detail = await up.get(iid)
    assert detail.instance.status == "FAILED"
    assert "cannot send this step to an upstream worker" in detail.instance.error
    assert f"the integer {big}" in detail.instance.error and "['big']" in detail.instance.error
    # reads show it as its decimal text, never rounded, and never fail on it
    assert plain(detail.instance.context) == {"big": str(big), "fine": 3}
    listed = await up.stub.ListInstances(upb.ListInstancesRequest(), timeout=15)
    assert [plain(i.context) for i in listed.instances if i.id == iid] == [{"big": str(big), "fine": 3}]
    assert json.loads((await up.info(iid)).context_json) == {"big": big, "fine": 3}  # stored as it was
