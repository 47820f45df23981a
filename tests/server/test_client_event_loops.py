"""An AsyncClient and event loops (wiggle/_client/link.py, docs/api/clients.md#one-asyncclient-per-event-loop).

An outside trial of an asyncio web service: an AsyncClient made at import, before any loop ran,
then used inside ``asyncio.run``, never returned from ``start`` (its stream's write waited for a
loop that never ran) and ``get`` failed with asyncio's "attached to a different loop". Its channel
is now made on the first call, in the loop that runs it. A client used from a second loop (after
the first closed, or another thread's) raised asyncio's and gRPC's own errors and gRPC logged
tracebacks; it now says the rule with WrongEventLoop, a WiggleError.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from wiggle import AsyncClient, WiggleError, Workflow, WrongEventLoop
from wiggle.testing import EmbeddedServer

T = TypeVar("T")


def done(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


FLOW = Workflow.define("event-loops").step(done).build()


def in_a_thread(work: Callable[[], T]) -> T:
    """``work()`` on a thread of its own (where no event loop runs yet), its result or its error."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    if errors:
        raise errors[0]
    return results[0]


async def test_a_client_made_before_its_event_loop_runs_works_in_that_loop(server: EmbeddedServer) -> None:
    def module_level() -> str:
        # as at a web app's import: an event loop is set (asyncio.get_event_loop() made one), none
        # runs, and asyncio.run runs another
        idle = asyncio.new_event_loop()
        asyncio.set_event_loop(idle)
        try:
            client = AsyncClient(server.target)

            async def use() -> str:
                started = await asyncio.wait_for(client.start(FLOW, {"n": 1}), 10)
                got = await asyncio.wait_for(client.get(started), 10)
                await client.close()
                return got.instance_id

            return asyncio.run(use())
        finally:
            asyncio.set_event_loop(None)
            idle.close()

    instance_id = await asyncio.to_thread(in_a_thread, module_level)
    assert (await server.client.get(instance_id)).context == {"n": 1}


async def test_a_client_used_on_a_second_loop_says_the_rule(
    server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    client = AsyncClient(server.target)
    try:
        await client.start(FLOW, {})  # this loop is the client's: its first call ran here

        def other_thread(call: Callable[[], Coroutine[Any, Any, Any]]) -> BaseException | None:
            async def attempt() -> BaseException | None:
                try:
                    await asyncio.wait_for(call(), 10)
                except BaseException as exc:  # noqa: BLE001 (compared below)
                    return exc
                return None

            return asyncio.run(attempt())

        for call in (lambda: client.start(FLOW, {}), lambda: client.get("wi-x"), client.close):
            error = await asyncio.to_thread(in_a_thread, lambda call=call: other_thread(call))
            assert isinstance(error, WrongEventLoop), error
            assert isinstance(error, WiggleError) and isinstance(error, RuntimeError)
            assert "which is another one" in str(error)
            assert "Use one AsyncClient per event loop" in str(error)
        assert (await client.start(FLOW, {})).instance_id  # its own loop goes on
    finally:
        await client.close()

    def two_runs() -> tuple[str, BaseException | None]:
        late = AsyncClient(server.target)
        first = asyncio.run(late.start(FLOW, {})).instance_id  # that loop closes with asyncio.run

        async def again() -> BaseException | None:
            try:
                await asyncio.wait_for(late.get(first), 10)
            except BaseException as exc:  # noqa: BLE001 (compared below)
                return exc
            finally:
                await late.close()  # its loop is gone: closes without a word
            return None

        return first, asyncio.run(again())

    first, error = await asyncio.to_thread(in_a_thread, two_runs)
    assert isinstance(error, WrongEventLoop), error
    assert "which is closed now" in str(error)
    assert (await server.client.get(first)).instance_id == first
    await asyncio.sleep(0.2)  # anything gRPC would hand to the closed loop has come by now
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


async def test_the_channel_read_outside_any_loop_says_why() -> None:
    client = AsyncClient("127.0.0.1:1")
    with pytest.raises(WrongEventLoop, match="outside a running event loop"):
        await asyncio.to_thread(lambda: client.channel)
    await client.close()
