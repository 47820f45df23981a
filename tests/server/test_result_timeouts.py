"""``result()`` that times out says where the instance waits (wiggle/_client/core.py
where_it_waits), with both clients: a step no worker claims names its queue, a running step its
worker, a sleep its time, a wait for a signal what it waits for."""

from __future__ import annotations

import asyncio

import pytest
from both_clients import EitherClient

from wiggle import Worker, WorkerOptions, Workflow
from wiggle.testing import EmbeddedServer


async def long(ctx):
    await asyncio.sleep(30)
    return ctx


UNSERVED = Workflow.define("unserved").step(lambda ctx: ctx, name="price", queue="orders").build()
RUNNING = Workflow.define("long-running").step(long, name="long", queue="slow").build()
SLEEPING = Workflow.define("sleeping").sleep("nap", 3600).build()
SIGNALLED = Workflow.define("signalled").wait_signal("paid").build()


async def timed_out(
    client: EitherClient, flow, seconds: float = 1.0, started: list[str] | None = None
) -> str:
    """The TimeoutError's message of ``result()`` on a new instance of ``flow`` (its id appended
    to ``started``)."""
    info = await client.call("start", flow, {})
    if started is not None:
        started.append(info.instance_id)
    with pytest.raises(TimeoutError) as caught:
        await client.call("result", info.instance_id, timeout=seconds)
    return str(caught.value)


async def _given_back(client: EitherClient, instance_ids: list[str]) -> str:
    """Until the step of one of the instances is READY with a give-back's error on it: its id.
    (A worker gives one such step back, then passes the node over for a while:
    docs/semantics.md#mixed-fleets.)"""
    for _ in range(200):
        for instance_id in instance_ids:
            (token,) = (await client.call("get", instance_id)).tokens
            if str(token.status) == "READY" and token.last_error:
                return instance_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"no give-back within 10 s: {token}")


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_result_that_times_out_says_where_the_instance_waits(blocking: bool) -> None:
    async with EmbeddedServer() as server:
        client = EitherClient(server.target, blocking)
        try:
            for flow in (UNSERVED, RUNNING, SLEEPING, SIGNALLED):
                await client.call("register", flow)
            unserved: list[str] = []
            said = await timed_out(client, UNSERVED, started=unserved)
            assert said.endswith(
                "is still RUNNING after 1.0 s: step 'price' is READY on queue 'orders', attempt 1 "
                "(is a worker serving queue 'orders'?)"
            ), said
            # a worker polls the queue but has no handler: its give-back says so, not a guess
            other = (
                Workflow.define("other-orders").step(lambda ctx: ctx, name="other", queue="orders").build()
            )
            async with Worker(
                server.target, [other], WorkerOptions(worker_id="w-old", poll_wait_seconds=1.0)
            ):
                unserved.append((await client.call("start", UNSERVED, {})).instance_id)
                given_back = await _given_back(client, unserved)
            # the worker is gone (while it runs the step is now and then RUNNING on it, between
            # a claim and its give-back); the give-back's error stays on the READY step
            await _given_back(client, [given_back])
            with pytest.raises(TimeoutError) as caught:
                await client.call("result", given_back, timeout=1.0)
            said = str(caught.value)
            assert "(last error: worker w-old has no handler for node 'price'" in said, said
            assert "is a worker serving" not in said, said
            worker = Worker(
                server.target,
                [RUNNING],
                WorkerOptions(worker_id="w-slow", poll_wait_seconds=1.0, drain_seconds=0.1),
            )
            async with worker:
                said = await timed_out(client, RUNNING, 3.0)
            assert said.endswith("step 'long' is RUNNING on worker w-slow, attempt 1"), said
            said = await timed_out(client, SLEEPING)
            assert said.endswith("'nap' waits for its time (a sleep, or a retry's backoff)"), said
            said = await timed_out(client, SIGNALLED)
            assert said.endswith("'paid' waits for a signal or a person"), said
        finally:
            await client.close()
