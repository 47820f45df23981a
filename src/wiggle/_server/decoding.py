"""Registering a gRPC service so that a request that is not a valid protobuf message of its type
is refused with INVALID_ARGUMENT naming the method and the type, instead of grpc's UNKNOWN.

grpc runs a method's request deserializer before any handler code: the generated
``add_..._to_server`` functions pass ``Message.FromString``, and a ``DecodeError`` there (corrupt
bytes, a message nested deeper than protobuf's recursion limit) reaches the caller as UNKNOWN with
a Python class name in it. ``add_service`` registers the same methods (as a generic handler) with a
deserializer that turns such bytes
into an ``Undecodable`` value, and a behavior that answers it with INVALID_ARGUMENT — for each
message of a request stream too — before the servicer sees it. Nothing else changes: the call is
refused, nothing is read or written, and other calls go on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = ["Refused", "Undecodable", "add_service"]


class Undecodable:
    """Bytes that did not parse as the method's request type, and why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(parse: Callable[[bytes], Message]) -> Callable[[bytes], Message | Undecodable]:
    def decode(data: bytes) -> Message | Undecodable:
        try:
            return parse(data)
        except DecodeError as exc:
            return Undecodable(str(exc))

    return decode


def _refusal(method: MethodDescriptor, bad: Undecodable) -> str:
    return (
        f"{method.name}: the request is not a valid {method.input_type.full_name} message "
        f"({bad.reason}); send a message of that type, as the published .proto defines it"
    )


def _unary_request(method: MethodDescriptor, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.__class__ is Undecodable:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(method, request))
        return await inner(request, context)

    return behavior


def _unary_request_stream(method: MethodDescriptor, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if request.__class__ is Undecodable:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(method, request))
        async for reply in inner(request, context):
            yield reply

    return behavior


class Refused(Exception):
    """Raised by a refusing request stream at its first undecodable message."""


class _Refusing:
    """A request stream that stops at its first undecodable message (raising ``Refused`` to
    whoever reads it, the servicer or a task of its own); the call then ends with
    INVALID_ARGUMENT (``refuse``), once the servicer has returned."""

    __slots__ = ("method", "requests", "bad")

    def __init__(self, method: MethodDescriptor, requests: AsyncIterator[Any]) -> None:
        self.method = method
        self.requests = requests
        self.bad: Undecodable | None = None

    async def each(self) -> AsyncIterator[Any]:
        async for request in self.requests:
            if request.__class__ is Undecodable:
                self.bad = request
                raise Refused(_refusal(self.method, request))
            yield request

    async def refuse(self, context: grpc.aio.ServicerContext) -> None:
        """INVALID_ARGUMENT if the stream held an undecodable message."""
        if self.bad is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(self.method, self.bad))


def _stream_request(method: MethodDescriptor, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        stream = _Refusing(method, requests)
        try:
            reply = await inner(stream.each(), context)
        except Refused:
            reply = None
        await stream.refuse(context)
        return reply

    return behavior


def _stream_request_stream(method: MethodDescriptor, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        stream = _Refusing(method, requests)
        try:
            async for reply in inner(stream.each(), context):
                yield reply
        except Refused:
            pass
        await stream.refuse(context)

    return behavior


def add_service(server: grpc.aio.Server, service: ServiceDescriptor, servicer: Any) -> None:
    """Register ``servicer``'s methods of ``service`` on ``server`` (in place of the generated
    ``add_<Service>Servicer_to_server``), refusing undecodable requests with INVALID_ARGUMENT."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        reply = message_factory.GetMessageClass(method.output_type)
        inner = getattr(servicer, method.name)
        decode = _tolerant(request.FromString)
        encode = reply.SerializeToString
        if method.client_streaming and method.server_streaming:
            handler = grpc.stream_stream_rpc_method_handler(
                _stream_request_stream(method, inner), decode, encode
            )
        elif method.client_streaming:
            handler = grpc.stream_unary_rpc_method_handler(_stream_request(method, inner), decode, encode)
        elif method.server_streaming:
            handler = grpc.unary_stream_rpc_method_handler(
                _unary_request_stream(method, inner), decode, encode
            )
        else:
            handler = grpc.unary_unary_rpc_method_handler(_unary_request(method, inner), decode, encode)
        handlers[method.name] = handler
    # As a generic handler only, not also as registered methods (which the generated
    # add_..._to_server does): grpc.aio's server keeps one pending call per registered method and
    # waits on all of them (asyncio.wait) for every call it accepts, so our ~50 methods cost each
    # unary call about 30 us of the server's CPU and 0.05-0.15 ms of latency (bench/README.md,
    # "Round sixteen"; grpc/grpc pull request 43461 is the fix upstream).
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
