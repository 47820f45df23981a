"""A client's calls across a server restart (docs/failover.md#what-a-client-does-while-the-server-is-away):
those safe to repeat (reads, register, cancel, an identified signal, schedule and queue settings)
are asked again while the server answers UNAVAILABLE and land once it is back; those that may or
may not have happened (a signal without an id, completing a user task, a retry, a schedule's
creation, deletion or trigger) raise Unavailable at once, for the caller to decide."""

from __future__ import annotations

import asyncio
import time

import pytest
from both_clients import EitherClient
from pg import TEST_DATABASE_URL
from ports import free_port

from wiggle import AsyncClient, Workflow
from wiggle._server.config import ServerConfig
from wiggle.errors import Unavailable
from wiggle.testing import EmbeddedServer

WAITS = Workflow.define("restart-waits").wait_signal("paid").user_task("approve").build()


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_calls_safe_to_repeat_ride_through_a_restart_and_the_others_fail_at_once(
    blocking: bool, pg_schema: str
) -> None:
    port = free_port()
    config = ServerConfig(port=port, database_url=TEST_DATABASE_URL, database_schema=pg_schema)
    old = await EmbeddedServer(config).start()
    new: EmbeddedServer | None = None
    target = f"127.0.0.1:{port}"
    client = EitherClient(target, blocking)
    call = client.call

    try:
        await call("register", WAITS)
        signalled = (await call("start", WAITS, {})).instance_id
        doomed = (await call("start", WAITS, {})).instance_id
        await call("create_schedule", "nightly", WAITS, {}, every=3600)
        await old.client.close()
        await asyncio.wait_for(old.server.stop(grace=60), 30)

        # not safe to repeat: Unavailable at once (this client has reached its server before)
        for name, args, kwargs in [
            ("signal", (signalled, "paid", {"x": 1}), {}),
            ("complete_user_task", (signalled, "approve"), {}),
            ("retry", (doomed,), {}),
            ("create_schedule", ("hourly", WAITS, {}), {"every": 3600}),
            ("delete_schedule", ("nightly",), {}),
            ("trigger_schedule", ("nightly",), {}),
        ]:
            began = time.monotonic()
            with pytest.raises(Unavailable):
                await asyncio.wait_for(call(name, *args, **kwargs), 20)
            assert time.monotonic() - began < 2.0, name

        # safe to repeat: asked again until the server is back
        calls = {
            "get": call("get", signalled),
            "list": call("list", workflow="restart-waits"),
            "history": call("history", signalled),
            "get_workflow": call("get_workflow", "restart-waits"),
            "list_workflows": call("list_workflows"),
            "register": call("register", WAITS),
            "cancel": call("cancel", doomed, "no longer wanted"),
            "signal": call("signal", signalled, "paid", {"amount": 5}, "payment-1"),
            "get_schedule": call("get_schedule", "nightly"),
            "list_schedules": call("list_schedules"),
            "pause_schedule": call("pause_schedule", "nightly"),
            "queues": call("queues"),
            "set_queue_limit": call("set_queue_limit", "payments", max_running=3),
        }
        pending = {name: asyncio.ensure_future(c) for name, c in calls.items()}
        await asyncio.sleep(1.5)
        assert [name for name, task in pending.items() if task.done()] == []  # still asking
        new = await EmbeddedServer(config).start()
        done = {name: await asyncio.wait_for(task, 20) for name, task in pending.items()}

        assert done["get"].instance_id == signalled
        assert {i.instance_id for i in done["list"][0]} == {signalled, doomed}
        assert isinstance(done["history"], list)  # answered (a waiting instance has no steps yet)
        assert done["get_workflow"].name == "restart-waits"
        cancelled, changed = done["cancel"]
        assert cancelled.status == "CANCELLED" and changed
        assert done["signal"].outcome in ("DELIVERED", "BUFFERED")
        assert done["pause_schedule"].paused
        # each change landed once
        assert (await new.client.get(doomed)).status == "CANCELLED"
        again = await call("signal", signalled, "paid", {"amount": 5}, "payment-1")
        assert again.outcome == "DUPLICATE"
        assert (await new.client.get_schedule("nightly")).paused
        limits = {q.queue: q for q in await new.client.queues()}
        assert limits["payments"].max_running == 3
    finally:
        await client.close()
        if new is not None:
            await new.stop()
        await old.server.stop(grace=0)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_patience_bounds_how_long_a_client_asks_again(blocking: bool) -> None:
    # patience=0: a client that must not wait (a request handler with its own deadline) gets
    # Unavailable at once, waits included; patience=1: after about a second
    port = free_port()
    server = await EmbeddedServer(ServerConfig(port=port)).start()
    target = f"127.0.0.1:{port}"
    hasty = EitherClient(target, blocking, patience=0)
    brief = EitherClient(target, blocking, patience=1.0)
    try:
        await hasty.call("register", WAITS)
        instance_id = (await hasty.call("start", WAITS, {})).instance_id
        await brief.call("get", instance_id)  # both have reached the server
        await server.stop()
        for what, call in [
            ("get", hasty.call("get", instance_id)),
            ("wait", hasty.call("wait", instance_id, 60)),
            ("start", hasty.call("start", WAITS, {}, request_id="r-1")),
        ]:
            began = time.monotonic()
            with pytest.raises(Unavailable):
                await asyncio.wait_for(call, 20)
            assert time.monotonic() - began < 0.9, what
        began = time.monotonic()
        with pytest.raises(Unavailable):
            await asyncio.wait_for(brief.call("get", instance_id), 20)
        assert 0.9 <= time.monotonic() - began < 8
    finally:
        await hasty.close()
        await brief.close()
    with pytest.raises(ValueError, match="patience must be >= 0 seconds"):
        AsyncClient(target, patience=-1)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_client_that_never_reached_its_server_says_where_it_looked(blocking: bool) -> None:
    target = f"127.0.0.1:{free_port()}"  # a closed local port: no server was ever there
    client = EitherClient(target, blocking)
    try:
        with pytest.raises(Unavailable) as caught:
            await asyncio.wait_for(client.call("get", "wi-nothing"), 20)
    finally:
        await client.close()
    assert f"(is a `wiggle server` running at {target}? none has answered there yet)" in str(caught.value)

    async with EmbeddedServer() as server:  # one that has answered before says nothing of the kind
        reached = EitherClient(server.target, blocking, patience=0)
        try:
            await reached.call("register", WAITS)
            await server.stop()
            with pytest.raises(Unavailable) as away:
                await asyncio.wait_for(reached.call("get", "wi-nothing"), 20)
        finally:
            await reached.close()
    assert "is a `wiggle server` running" not in str(away.value), away.value


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_every_call_to_a_target_never_reached_says_where_it_looked(blocking: bool) -> None:
    # an outside trial: get and a start with a request_id said so, a start without one and
    # complete_user_task did not (they are not asked again, and failed before the words were added)
    target = f"127.0.0.1:{free_port()}"
    client = EitherClient(target, blocking)
    hint = f"(is a `wiggle server` running at {target}? none has answered there yet)"
    try:
        for name, args, kwargs in [
            ("start", ("w", {}), {}),
            ("start_many", ("w", [{}]), {}),
            ("complete_user_task", ("wi-nothing", "approve"), {}),
            ("signal", ("wi-nothing", "paid"), {}),
            ("retry", ("wi-nothing",), {}),
            ("create_schedule", ("hourly", "w", {}), {"every": 3600}),
            ("delete_schedule", ("hourly",), {}),
            ("trigger_schedule", ("hourly",), {}),
        ]:
            with pytest.raises(Unavailable) as caught:
                await asyncio.wait_for(client.call(name, *args, **kwargs), 20)
            assert hint in str(caught.value), (name, caught.value)
    finally:
        await client.close()
