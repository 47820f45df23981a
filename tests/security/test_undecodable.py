"""Bytes that are not a valid request message get INVALID_ARGUMENT naming the method and the type,
on every RPC of both services and on a WorkerSession stream, and change nothing
(wiggle/_server/decoding.py). Before, grpc answered them UNKNOWN with a Python class name.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc.upstream import wiggle_pb2 as upstream_pb
from wiggle.testing import EmbeddedServer

CORRUPT = b"\xff\xff\xff\xff"  # field 0, an invalid tag: no message of any type parses from it

SERVICES = [
    pb.DESCRIPTOR.services_by_name["WiggleControlPlane"],
    upstream_pb.DESCRIPTOR.services_by_name["WiggleControlPlane"],
]


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer() as embedded:
        yield embedded


async def _raw_call(channel: grpc.aio.Channel, path: str, client_stream: bool, server_stream: bool) -> None:
    if client_stream and server_stream:
        call = channel.stream_stream(path)(iter([CORRUPT]), timeout=10)
        async for _ in call:
            pass
    elif client_stream:
        await channel.stream_unary(path)(iter([CORRUPT]), timeout=10)
    elif server_stream:
        async for _ in channel.unary_stream(path)(CORRUPT, timeout=10):
            pass
    else:
        await channel.unary_unary(path)(CORRUPT, timeout=10)


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.full_name)
async def test_corrupt_bytes_to_every_rpc_are_invalid_argument(
    server: EmbeddedServer, service: object
) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        for method in service.methods:  # type: ignore[attr-defined]
            path = f"/{service.full_name}/{method.name}"  # type: ignore[attr-defined]
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _raw_call(channel, path, method.client_streaming, method.server_streaming)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, caught.value.details())
            details = caught.value.details() or ""
            assert details.startswith(
                f"{method.name}: the request is not a valid {method.input_type.full_name}"
            )


async def test_a_message_nested_past_the_parser_limit_is_invalid_argument(server: EmbeddedServer) -> None:
    # upstream StartInstanceRequest.context is a google.protobuf.Value: nest lists 150 deep (the
    # parser's recursion limit is 100); written by hand, as protobuf will not build it for us
    def length_delimited(field: int, body: bytes) -> bytes:
        size, out = len(body), bytearray()
        while True:
            byte, size = size & 0x7F, size >> 7
            out.append(byte | (0x80 if size else 0))
            if not size:
                break
        return bytes([field << 3 | 2]) + bytes(out) + body

    value = b""
    for _ in range(150):
        value = length_delimited(6, length_delimited(1, value))  # Value.list_value.values[0]
    request = length_delimited(1, b"flow") + length_delimited(2, value)
    path = "/dev.wiggle.proto.WiggleControlPlane/StartInstance"
    async with grpc.aio.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(path)(request, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "StartInstance: the request is not a valid dev.wiggle.proto.StartInstanceRequest" in (
        caught.value.details() or ""
    )
    assert (await server.client.list())[0] == []  # nothing was started


async def test_a_corrupt_frame_ends_only_its_worker_stream(server: EmbeddedServer) -> None:
    path = "/wiggle.v1.WiggleControlPlane/WorkerSession"
    async with grpc.aio.insecure_channel(server.target) as channel:
        good = pb.WorkerBatch(
            messages=[pb.WorkerMessage(request_id=1, poll=pb.PollTasksRequest(worker_id="w", queues=["q"]))]
        ).SerializeToString()
        call = channel.stream_stream(path)(iter([good, CORRUPT]), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "WorkerSession: the request is not a valid wiggle.v1.WorkerBatch" in (
            caught.value.details() or ""
        )
        # the server goes on: a well-formed call on the same channel is served
        await asyncio.wait_for(server.client.list(), 10)


def test_the_services_are_registered_as_generic_handlers_only() -> None:
    # grpc.aio's server waits, for every call it accepts, on one pending call per registered
    # method (asyncio.wait over all of them): registering ours too costs each unary call time
    # and CPU (decoding.py add_service). Every method is still served: the tests above call each.
    from wiggle._server.decoding import add_service

    class Recording:
        def __init__(self) -> None:
            self.generic: list[object] = []
            self.registered: list[str] = []

        def add_generic_rpc_handlers(self, handlers: object) -> None:
            self.generic.append(handlers)

        def add_registered_method_handlers(self, service: str, handlers: object) -> None:
            self.registered.append(service)

    class Servicer:
        def __getattr__(self, name: str) -> object:
            async def method(*args: object) -> None:
                return None

            return method

    server = Recording()
    for service in SERVICES:
        add_service(server, service, Servicer())  # type: ignore[arg-type]
    assert len(server.generic) == 2 and server.registered == []
