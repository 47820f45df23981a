"""The blocking Client called on the thread of the event loop its own server runs on (an
EmbeddedServer or a WorkflowEnvironment started in that loop) holds the loop still, so the server
can never answer: the call raises RuntimeError at once, naming the loop and the ways out, instead
of "StartInstances got no answer within 30 s" half a minute later (wiggle/_client/hosting.py).

And nothing else is refused: the same call made in a thread, or made on a loop that hosts no
server of its target (the server on another thread's loop, or none on this loop at all, as in a
Jupyter cell talking to a remote server), is answered as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from wiggle import Client, Workflow
from wiggle.testing import EmbeddedServer, WorkflowEnvironment


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {"n": ctx["n"] * 2}


FLOW = Workflow.define("on-its-servers-loop").step(double).build()


def _refused(call: Any, *args: Any) -> str:
    with pytest.raises(RuntimeError) as err:
        call(*args)
    return str(err.value)


def _says_why_and_what_to_do(message: str, target: str) -> None:
    assert f"the wiggle server at {target} runs on the event loop of this thread" in message, message
    assert "use AsyncClient" in message and "asyncio.to_thread" in message, message


async def test_a_blocking_call_on_the_loop_of_its_embedded_server_is_refused_at_once() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(FLOW)
        with Client(server.target) as client:
            _says_why_and_what_to_do(_refused(client.start, FLOW, {"n": 1}), server.target)
            # every call, not only a start (a unary call as a streamed one)
            _says_why_and_what_to_do(_refused(client.register, FLOW), server.target)
            _says_why_and_what_to_do(_refused(client.get, "no-such-instance"), server.target)
            _says_why_and_what_to_do(_refused(client.list_workflows), server.target)
            # "localhost" reaches the server bound to 127.0.0.1 just the same
            with Client(server.target.replace("127.0.0.1", "localhost")) as by_name:
                _says_why_and_what_to_do(_refused(by_name.list_workflows), server.target)
        instances, _ = await server.client.list(workflow=FLOW.name)
        assert instances == []  # refused before anything was sent


async def test_a_blocking_call_on_the_loop_of_the_async_test_environment_is_refused() -> None:
    async with WorkflowEnvironment([FLOW]) as env:
        with Client(env.target) as client:
            _says_why_and_what_to_do(_refused(client.start, FLOW, {"n": 1}), env.target)
        # the environment's own AsyncClient, on the same loop, is the way
        info = await env.client.start(FLOW, {"n": 2})
        assert (await env.result(info)).context == {"n": 4}


async def test_the_same_blocking_call_in_a_thread_is_answered() -> None:
    async with EmbeddedServer() as server, server.worker([FLOW]):
        await server.client.register(FLOW)
        with Client(server.target) as client:
            info = await asyncio.to_thread(client.start, FLOW, {"n": 3})
            done = await asyncio.to_thread(client.result, info.instance_id, 30.0)
            assert done.context == {"n": 6}


@pytest.fixture
def server_on_another_thread() -> Iterator[str]:
    """An EmbeddedServer on an event loop of a thread of its own (as SyncWorkflowEnvironment runs
    one): its target."""
    started = threading.Event()
    target: list[str] = []
    stop: list[asyncio.Event] = []

    async def host() -> None:
        async with EmbeddedServer() as server, server.worker([FLOW]):
            await server.client.register(FLOW)
            stop.append(asyncio.Event())
            target.append(server.target)
            started.set()
            await stop[0].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(host(),), daemon=True)
    thread.start()
    assert started.wait(30), "the server on the other thread did not start"
    try:
        yield target[0]
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        loop.close()


@pytest.mark.parametrize("own_server", [False, True], ids=["no-server-here", "another-server-here"])
async def test_a_blocking_call_from_a_loop_that_does_not_host_its_server_is_answered(
    server_on_another_thread: str, own_server: bool
) -> None:
    """Called on this loop, the blocking client holds it still while it waits; its server, on
    another thread's loop, answers all the same, whether or not this loop hosts a server of its
    own (with another port)."""

    async def call() -> None:
        with Client(server_on_another_thread) as client:
            info = client.start(FLOW, {"n": 5})
            assert client.result(info.instance_id, 30.0).context == {"n": 10}

    if own_server:
        async with EmbeddedServer() as here:
            assert here.target != server_on_another_thread
            await call()
    else:
        await call()
