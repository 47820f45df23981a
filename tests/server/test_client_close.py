"""``close()`` with calls in flight, and calls after it (wiggle/_client/link.py,
docs/api/clients.md#closing-a-client).

An outside trial closed an AsyncClient with starts and waits in flight: every task, though
nobody had cancelled it, ended with a bare CancelledError, and its starts had been applied; the
blocking client raised "Locally cancelled by application!"; a call after close raised gRPC's
UsageError (async) or ValueError (blocking). Both clients now raise ClientClosed, saying which of
the two it is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from held_starts import hold_starts

from wiggle import AsyncClient, Client, ClientClosed, WiggleError, Workflow
from wiggle.errors import ErrorCode
from wiggle.testing import EmbeddedServer

FLOW = Workflow.define("closing").wait_signal("go").build()  # stays RUNNING: something to wait for


pytestmark = pytest.mark.usefixtures("no_tracing")


def cut_off(error: object) -> bool:
    return (
        isinstance(error, ClientClosed)
        and "cut off by close()" in str(error)
        and "may or may not" in str(error)
    )


def after_close(error: object) -> bool:
    return isinstance(error, ClientClosed) and str(error).startswith("the client is closed")


async def test_an_async_client_closed_with_calls_in_flight(
    server: EmbeddedServer, eventually: Callable[..., Any]
) -> None:
    running = await server.client.start(FLOW, {})
    client = AsyncClient(server.target)
    await client.start(FLOW, {})  # the stream is open
    release = hold_starts(server.server.instances)
    starts = [asyncio.ensure_future(client.start(FLOW, {"n": n}, request_id=f"cut-{n}")) for n in range(20)]
    waits = [asyncio.ensure_future(client.wait(running, timeout=30)) for _ in range(3)]
    cancelled = asyncio.ensure_future(client.wait(running, timeout=30))
    await asyncio.sleep(0.3)  # the starts are held in the server, the waits wait there
    cancelled.cancel()  # its owner cancels it as the client closes: its cancellation stays its own
    await client.close()
    started = await asyncio.gather(*starts, return_exceptions=True)
    waited = await asyncio.gather(*waits, return_exceptions=True)
    assert not any(task.cancelled() for task in starts + waits)
    assert all(cut_off(o) for o in waited), waited
    # the batch in flight was cut off; the starts queued behind it were never sent, and say so
    assert all(cut_off(o) or after_close(o) for o in started), started
    assert any(cut_off(o) for o in started)
    if hasattr(asyncio.Task, "cancelling"):  # Python 3.11 and later
        assert cancelled.cancelled()
    else:  # 3.10 cannot tell its owner's cancel from close()'s (start_stream.py cancelled_by_its_caller)
        assert cancelled.cancelled() or cut_off(cancelled.exception())
    assert ClientClosed.code is ErrorCode.CANCELLED and issubclass(ClientClosed, WiggleError)

    for call in (lambda: client.get(running), lambda: client.start(FLOW, {}), lambda: client.wait(running)):
        with pytest.raises(ClientClosed) as refused:
            await call()
        assert after_close(refused.value), refused.value
    await client.close()  # a second close does nothing

    release.set()  # the cut starts had reached the server: each may or may not have started,
    async with AsyncClient(server.target) as again:  # and a repeat with its request id is safe
        repeated = await asyncio.gather(*(again.start(FLOW, {}, request_id=f"cut-{n}") for n in range(20)))
    assert len({info.instance_id for info in repeated}) == 20


async def test_a_blocking_client_closed_with_calls_in_flight(server: EmbeddedServer) -> None:
    running = await server.client.start(FLOW, {})
    client = Client(server.target)
    await asyncio.to_thread(client.start, FLOW, {})  # the stream is open
    release = hold_starts(server.server.instances)
    outcomes: list[object] = []

    def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            outcomes.append(method(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 (compared below)
            outcomes.append(exc)

    threads = [threading.Thread(target=call, args=(client.start, FLOW, {"n": n})) for n in range(8)]
    threads += [
        threading.Thread(target=call, args=(client.wait, running), kwargs={"timeout": 30}) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    await asyncio.sleep(0.3)
    await asyncio.to_thread(client.close)
    for thread in threads:
        await asyncio.to_thread(thread.join, 30)
    assert len(outcomes) == len(threads)
    # the start in flight and the waits were cut off; the starts still queued behind it were never
    # sent, and say so
    assert all(cut_off(o) or after_close(o) for o in outcomes), outcomes
    assert sum(cut_off(o) for o in outcomes) >= 4

    for method, args in ((client.get, (running,)), (client.start, (FLOW, {}))):
        with pytest.raises(ClientClosed) as refused:
            await asyncio.to_thread(method, *args)
        assert after_close(refused.value), refused.value
    client.close()
    release.set()
