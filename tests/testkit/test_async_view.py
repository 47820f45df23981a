"""``wiggle_env.aio`` is a full twin of the environment for an async test: its client, its workers
and its clock too, all usable from the test's own event loop (another loop than the environment's).

An outside trial found the view without ``client``, ``start_worker``, ``stop_worker`` and ``now``:
an async test had to fall back on the sync object, whose client blocks the test's loop (and the
environment's own AsyncClient fails there: grpc.aio binds a channel to the loop it was made on).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from wiggle import AsyncClient, Worker, Workflow
from wiggle.testing import SyncWorkflowEnvironment, WorkflowEnvironment

START = datetime(2031, 5, 1, tzinfo=timezone.utc)


def _ship(ctx):
    return {**ctx, "shipped": True}


async def test_the_view_s_client_workers_and_clock_work_from_the_test_s_loop() -> None:
    bp = Workflow.define(f"view-{uuid.uuid4().hex[:6]}").sleep("nap", timedelta(days=1)).step(_ship).build()
    with SyncWorkflowEnvironment([bp], start=START, workers=0) as sync:
        env = sync.aio
        assert env.now() == START and env.now_millis() == int(START.timestamp() * 1000)
        assert env.target == sync.target
        client = env.client
        info = await client.start(bp, {"order": 1})  # made on the test's loop, run on the environment's
        assert (await client.get(info.instance_id)).workflow == bp.name
        assert [w.name for w in await client.list_workflows(bp.name)] == [bp.name]
        assert client.target == sync.target and client.patience == sync.env.client.patience
        worker = await env.start_worker([bp])
        assert worker.worker_id == "test-worker-1" and sync.env.workers == [worker]
        done = await env.result(info)
        assert env.now() == START + timedelta(days=1)
        await env.stop_worker(worker)
        assert sync.env.workers == []
        async with client as same:  # the environment owns the client: leaving it closes nothing
            assert same is client
        await client.close()
        assert (await env.client.get(info.instance_id)).status == "COMPLETED"
        with pytest.raises(AttributeError, match="works on its own loop only"):
            client.channel  # noqa: B018
    assert done.context == {"order": 1, "shipped": True}


async def test_the_view_s_client_works_in_an_environment_with_no_workflow() -> None:
    # nothing to register at start: the client is made on the environment's loop all the same
    with SyncWorkflowEnvironment() as sync:
        assert await sync.aio.client.list_workflows() == []


def test_a_signal_names_its_sender_in_every_face() -> None:
    bp = Workflow.define(f"paid-{uuid.uuid4().hex[:6]}").wait_signal("paid").step(_ship).build()
    with SyncWorkflowEnvironment([bp]) as env:
        first, second = env.start_workflow(bp, {}), env.start_workflow(bp, {})
        env.wait_for(first, "paid")
        env.wait_for(second, "paid")
        env.signal(first, "paid", {"amount": 5}, sender="billing")

        async def from_a_loop() -> None:
            await env.aio.signal(second, "paid", {"amount": 6}, sender="refunds")

        asyncio.run(from_a_loop())
        senders = [[e.worker_id for e in env.history(i) if e.node_id == "paid"] for i in (first, second)]
    assert senders == [["(signal paid from billing)"], ["(signal paid from refunds)"]]


async def test_the_async_environment_takes_the_sender_too() -> None:
    bp = Workflow.define(f"paid-{uuid.uuid4().hex[:6]}").wait_signal("paid").build()
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "paid")
        await env.signal(info, "paid", {}, "id-1", sender="ops")
        done = await env.result(info)
        assert [e.worker_id for e in await env.history(done) if e.node_id == "paid"] == [
            "(signal paid from ops)"
        ]


async def test_the_view_s_client_is_an_async_client_and_a_worker_refuses_it_saying_why() -> None:
    """docs/testing.md said ``wiggle_env.aio.client`` is an AsyncClient; an outside trial found it
    was not (``isinstance`` False), while ``Worker`` took what is not one for a target and failed
    on it. It is one now, each of AsyncClient's calls forwarded to the environment's loop; a
    Worker, which shares its client's channel, refuses it at once, naming the way that works."""
    bp = Workflow.define(f"typed-{uuid.uuid4().hex[:6]}").step(_ship).build()
    with SyncWorkflowEnvironment([bp]) as sync:
        client = sync.aio.client
        assert isinstance(client, AsyncClient)
        calls = [
            n
            for n, v in vars(AsyncClient).items()
            if not n.startswith("_") and inspect.iscoroutinefunction(v)
        ]
        assert "start" in calls and "result" in calls
        for name in calls:  # none reaches AsyncClient's own, whose channel this client has not
            assert getattr(type(client), name) is not getattr(AsyncClient, name), name
            assert inspect.signature(getattr(client, name)) == inspect.signature(
                getattr(sync.env.client, name)
            )

        async def place(c: AsyncClient) -> str:  # code of the application, typed for an AsyncClient
            done = await c.result(await c.start(bp, {"order": 2}), timeout=10)
            return str(done.status)

        assert await place(client) == "COMPLETED"
        with pytest.raises(
            TypeError, match=r"a Worker shares its client's channel, and wiggle_env.aio.client lends none"
        ):
            Worker(client, [bp])
        with pytest.raises(TypeError, match=r"await wiggle_env\.aio\.start_worker\(\[\.\.\.\]\)"):
            Worker(client, [bp])
        worker = await sync.aio.start_worker([bp])  # the way that works
        await sync.aio.stop_worker(worker)
