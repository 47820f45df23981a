"""A client's starts on one ClientSession stream (wiggle/_client/start_stream.py), against a real
loopback server: one stream for all of a client's starts, an older server without the stream
(unary calls instead), a server that stops (the stream ends by itself and the next start opens
another), a start past its deadline, and a malformed message."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import grpc
import msgspec
import pytest
from held_starts import hold_starts
from ports import free_port

from wiggle import AsyncClient, Client, Workflow
from wiggle._client import core, start_stream
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._server.config import ServerConfig
from wiggle.errors import ErrorCode, NotFound, Unavailable, WiggleError
from wiggle.testing import EmbeddedServer


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx["n"] * 2}


FLOW = Workflow.define("streamed").step(double).build()


pytestmark = pytest.mark.usefixtures("no_tracing")


def starts_seen(server: EmbeddedServer) -> tuple[int, int]:
    seen = server.server.metrics.rpc_calls
    return seen["StartInstance"], seen["StartInstances"]


async def test_every_start_of_a_client_goes_on_one_stream(
    server: EmbeddedServer, eventually: Callable[..., Any]
) -> None:
    metrics = server.server.metrics
    async with AsyncClient(server.target) as client:
        for n in range(3):  # one after another
            await client.start(FLOW, {"n": n})
        infos = await asyncio.gather(*(client.start(FLOW, {"n": n}) for n in range(3, 13)))
        assert metrics.client_sessions_open == 1
        assert len({info.instance_id for info in infos}) == 10
        with pytest.raises(NotFound, match="missing"):  # a start's own error, the stream goes on
            await client.start("missing", {})
        await client.start(FLOW, {"n": 13})
        assert metrics.client_sessions_open == 1
    await eventually(lambda: metrics.client_sessions_open == 0, timeout=30, what="the stream ended")

    def blocking() -> list[str]:
        with Client(server.target) as client:
            ids = [client.start(FLOW, {"n": n}).instance_id for n in range(3)]
            threads = [
                threading.Thread(target=lambda n=n: ids.append(client.start(FLOW, {"n": n}).instance_id))
                for n in range(8)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert metrics.client_sessions_open == 1
            return ids

    ids = await asyncio.to_thread(blocking)
    assert len(set(ids)) == 11
    await eventually(lambda: metrics.client_sessions_open == 0, timeout=30, what="the stream ended")
    assert starts_seen(server)[0] == 0  # no unary StartInstance: every start went on a stream


async def _old_server() -> tuple[grpc.aio.Server, str, list[str]]:
    """A server that knows StartInstance and StartInstances but not ClientSession (older than
    the client): what it was called with is listed."""
    seen: list[str] = []

    def instance(request: pb.StartInstanceRequest, n: int) -> pb.InstanceInfo:
        return pb.InstanceInfo(instance_id=f"old-{n}", workflow=request.workflow, status="RUNNING")

    async def start_instance(request: pb.StartInstanceRequest, context: Any) -> pb.InstanceInfo:
        seen.append("StartInstance")
        return instance(request, len(seen))

    async def start_instances(request: pb.StartInstancesRequest, context: Any) -> pb.StartInstancesResponse:
        seen.append("StartInstances")
        results = [
            pb.StartResult(instance=instance(s, len(seen) * 100 + i)) for i, s in enumerate(request.starts)
        ]
        return pb.StartInstancesResponse(results=results)

    handlers = grpc.method_handlers_generic_handler(
        "wiggle.v1.WiggleControlPlane",
        {
            "StartInstance": grpc.unary_unary_rpc_method_handler(
                start_instance, pb.StartInstanceRequest.FromString, pb.InstanceInfo.SerializeToString
            ),
            "StartInstances": grpc.unary_unary_rpc_method_handler(
                start_instances,
                pb.StartInstancesRequest.FromString,
                pb.StartInstancesResponse.SerializeToString,
            ),
        },
    )
    old = grpc.aio.server()
    old.add_generic_rpc_handlers((handlers,))
    port = old.add_insecure_port("127.0.0.1:0")
    await old.start()
    return old, f"127.0.0.1:{port}", seen


async def test_a_server_without_the_stream_gets_unary_starts() -> None:
    old, target, seen = await _old_server()
    try:
        async with AsyncClient(target) as client:
            first = await client.start("any", {"n": 1})
            assert first.instance_id == "old-1"
            assert not client._stream.usable  # asked once, then never again
            infos = await asyncio.gather(*(client.start("any", {"n": n}) for n in range(5)))
            assert len({info.instance_id for info in infos}) == 5
        assert seen[0] == "StartInstance" and "StartInstances" in seen

        def blocking() -> str:
            with Client(target) as client:
                info = client.start("any", {"n": 1})
                assert not client._stream.usable
                return info.instance_id

        before = len(seen)
        assert (await asyncio.to_thread(blocking)).startswith("old-")
        assert seen[before:] == ["StartInstance"]
    finally:
        await old.stop(None)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_server_that_stops_ends_the_stream_and_the_next_start_opens_another(blocking: bool) -> None:
    # The stream ends by itself when the server stops, so the stop does not wait out its grace
    # (60 s here: the test's 30 s bound would fail first), and a start sent after it reaches the
    # next server on the same address without an error.
    port = free_port()
    first = await EmbeddedServer(ServerConfig(port=port)).start()
    await first.client.register(FLOW)
    target = f"127.0.0.1:{port}"
    sync_client = Client(target) if blocking else None
    async_client = AsyncClient(target)

    async def start(n: int) -> str:
        if sync_client is not None:
            return (await asyncio.to_thread(sync_client.start, FLOW, {"n": n})).instance_id
        return (await async_client.start(FLOW, {"n": n})).instance_id

    try:
        await start(1)
        assert first.server.metrics.client_sessions_open == 1
        await first.client.close()
        await asyncio.wait_for(first.server.stop(grace=60), 30)
        second = await EmbeddedServer(ServerConfig(port=port)).start()
        try:
            await second.client.register(FLOW)
            instance_id = await start(2)
            assert (await second.client.get(instance_id)).context == {"n": 2}
            assert second.server.metrics.client_sessions_open == 1
        finally:
            await second.stop()
    finally:
        if sync_client is not None:
            sync_client.close()
        await async_client.close()


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_start_past_its_deadline_fails_and_the_next_one_opens_a_new_stream(
    server: EmbeddedServer, blocking: bool, monkeypatch: pytest.MonkeyPatch, eventually: Callable[..., Any]
) -> None:
    release = hold_starts(server.server.instances)
    monkeypatch.setattr(core, "CALL_TIMEOUT", 0.5)
    with contextlib.ExitStack() as stack:
        if blocking:
            client = stack.enter_context(Client(server.target))

            async def start(n: int) -> str:
                return (await asyncio.to_thread(client.start, FLOW, {"n": n})).instance_id

        else:
            aclient = AsyncClient(server.target)
            stack.callback(lambda: asyncio.ensure_future(aclient.close()))

            async def start(n: int) -> str:
                return (await aclient.start(FLOW, {"n": n})).instance_id

        with pytest.raises(Unavailable, match=r"no answer within 0\.5 s") as err:
            await start(1)  # a lost answer is a server away: it may or may not have started
        assert err.value.code is ErrorCode.UNAVAILABLE
        await eventually(
            lambda: server.server.metrics.client_sessions_open == 0, timeout=30, what="the late stream ended"
        )
        release.set()
        monkeypatch.setattr(core, "CALL_TIMEOUT", 30.0)
        instance_id = await start(2)
        assert (await server.client.get(instance_id)).context == {"n": 2}
        assert server.server.metrics.client_sessions_open == 1


async def test_a_message_without_a_body_is_refused_and_the_stream_goes_on(server: EmbeddedServer) -> None:
    start = pb.StartInstanceRequest(workflow=FLOW.name, context_json=msgspec.json.encode({"n": 1}))
    messages = [
        pb.ClientMessage(request_id=1),
        pb.ClientMessage(request_id=2, start=pb.StartInstancesRequest(starts=[start])),
    ]
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        replies = {}
        async for frame in stub.ClientSession(iter([pb.ClientBatch(messages=messages)]), timeout=10):
            for reply in frame.messages:
                replies[reply.request_id] = reply
    assert replies[1].WhichOneof("body") == "error"
    assert replies[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert replies[1].error.message == "ClientMessage has no body"
    (result,) = replies[2].started.results
    assert (await server.client.get(result.instance.instance_id)).context == {"n": 1}


class _RacedCall:
    """A ClientSession call whose first write loses a race with the server's answer: gRPC fails the
    write with INTERNAL ("Internal error from Core") and the call's own status, ``final``, arrives
    ``delay`` seconds later (what a real server without the stream does now and then: the race
    cannot be forced on a real one, so this stands in for the call)."""

    def __init__(self, final: grpc.StatusCode, delay: float) -> None:
        self._code = grpc.StatusCode.INTERNAL
        loop = asyncio.get_running_loop()
        loop.call_later(delay, setattr, self, "_code", final)
        self.cancelled = False

    async def write(self, message: Any) -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "Internal error from Core"
        )

    async def code(self) -> grpc.StatusCode:
        return self._code

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class _RacedStub:
    def __init__(self, final: grpc.StatusCode, delay: float) -> None:
        self.calls: list[_RacedCall] = []
        self._final, self._delay = final, delay

    def ClientSession(self) -> _RacedCall:  # noqa: N802 (gRPC's method name)
        self.calls.append(_RacedCall(self._final, self._delay))
        return self.calls[-1]


async def test_a_refusal_that_races_the_first_write_still_gives_the_stream_up() -> None:
    # CI saw it: the first start to a server without ClientSession failed with INTERNAL "Internal
    # error from Core" (the write lost the race with the server's UNIMPLEMENTED) instead of going
    # as a unary call.
    stub = _RacedStub(grpc.StatusCode.UNIMPLEMENTED, delay=0.02)
    stream = start_stream.AsyncStartStream(stub)
    assert await stream.call(pb.StartInstancesRequest(), timeout=5) is None  # a unary call instead
    assert not stream.usable and stub.calls[0].cancelled
    assert await stream.call(pb.StartInstancesRequest(), timeout=5) is None
    assert len(stub.calls) == 1  # asked once, then never again


async def test_a_stream_that_breaks_under_a_write_sends_that_start_as_a_unary_call() -> None:
    # INTERNAL for good: the message never left, so this one start goes as a unary call and the
    # next start tries the stream again.
    stub = _RacedStub(grpc.StatusCode.INTERNAL, delay=0)
    stream = start_stream.AsyncStartStream(stub)
    assert await stream.call(pb.StartInstancesRequest(), timeout=5) is None
    assert stream.usable
    assert await stream.call(pb.StartInstancesRequest(), timeout=5) is None
    assert len(stub.calls) == 2


async def test_a_write_that_fails_otherwise_fails_the_start_with_its_status() -> None:
    stub = _RacedStub(grpc.StatusCode.INTERNAL, delay=0)
    stream = start_stream.AsyncStartStream(stub)

    async def unavailable(message: Any) -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "Socket closed"
        )

    stub.ClientSession = lambda: _with_write(_RacedCall(grpc.StatusCode.UNAVAILABLE, 0), unavailable)  # type: ignore[method-assign]
    with pytest.raises(WiggleError, match="Socket closed") as err:
        await stream.call(pb.StartInstancesRequest(), timeout=5)
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert stream.usable


def _with_write(call: _RacedCall, write: Callable[[Any], Any]) -> _RacedCall:
    call.write = write  # type: ignore[method-assign]
    return call


class _StuckCall(_RacedCall):
    """A ClientSession call whose write never completes (a channel bound to an event loop that no
    longer runs: the trial's AsyncClient made at import, tests/server/test_client_event_loops.py)."""

    async def write(self, message: Any) -> None:
        await asyncio.sleep(3600)

    def done(self) -> bool:
        return False


async def test_a_write_that_never_completes_fails_the_start_within_its_deadline() -> None:
    stub = _RacedStub(grpc.StatusCode.INTERNAL, delay=0)
    calls: list[_StuckCall] = []

    def session() -> _StuckCall:
        calls.append(_StuckCall(grpc.StatusCode.INTERNAL, 0))
        return calls[-1]

    stub.ClientSession = session  # type: ignore[method-assign,assignment]
    stream = start_stream.AsyncStartStream(stub)
    with pytest.raises(Unavailable, match=r"no answer within 0\.3 s"):
        await asyncio.wait_for(stream.call(pb.StartInstancesRequest(), timeout=0.3), 10)
    assert calls[0].cancelled  # dropped: the next start opens another
