"""The routes table (wiggle/_server/routes.py) against both service descriptors: every method has
exactly one row and a handler, every row has roles, and every role not in a row is refused
PERMISSION_DENIED, by a real server (TLS, identity file, loopback) and by the dispatcher."""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from security.certs import Authority  # tests/security/certs.py

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc.upstream import wiggle_pb2 as upb
from wiggle._security.credentials import Credentials
from wiggle._security.tokens import Identity, Role, hash_token
from wiggle._server import routes
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle._server.guard import CALLER, RequestGuard
from wiggle._server.routes import ROUTES, Kind, Rpc, Scope, allowed_roles
from wiggle._server.service import ControlPlane
from wiggle.errors import PermissionDenied
from wiggle.testing import EmbeddedServer

SERVICES = (
    pb.DESCRIPTOR.services_by_name["WiggleControlPlane"],
    upb.DESCRIPTOR.services_by_name["WiggleControlPlane"],
)
METHODS: dict[str, MethodDescriptor] = {
    f"/{service.full_name}/{m.name}": m for service in SERVICES for m in service.methods
}
#: one credential per role; the worker may serve every queue (scoping is not what is tested here)
CALLERS = {Role.ADMIN: "ops", Role.CLIENT: "app", Role.WORKER: "any-worker", Role.VIEWER: "watcher"}


def test_every_method_of_each_descriptor_has_exactly_one_row() -> None:
    counts = Counter(row.method for row in ROUTES)
    assert {m for m, n in counts.items() if n > 1} == set()
    assert set(counts) == set(METHODS), set(counts) ^ set(METHODS)


@pytest.mark.parametrize("row", ROUTES, ids=lambda r: r.method)
def test_every_row_has_roles_a_kind_matching_its_method_and_a_handler(row: Rpc) -> None:
    assert row.roles and all(isinstance(r, Role) for r in row.roles)
    assert Role.ADMIN in row.roles  # admin may call everything
    method = METHODS[row.method]
    streaming = method.client_streaming or method.server_streaming
    assert (row.kind is Kind.STREAM) == streaming
    if row.scope is not None:  # a scoped worker call: only workers besides admin, fields to scope
        assert row.roles == {Role.ADMIN, Role.WORKER}
        fields = method.input_type.fields_by_name
        assert (
            {"queues", "worker_id"} <= set(fields) if row.scope is Scope.QUEUES else "lease_owner" in fields
        )


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.full_name)
def test_each_service_binds_every_row_to_a_handler_and_an_entry_point(service: Any) -> None:
    server = WiggleServer(ServerConfig())
    plane = server.service if service.full_name == "wiggle.v1.WiggleControlPlane" else server.upstream
    unary = {m.name for m in service.methods if not (m.client_streaming or m.server_streaming)}
    assert set(plane.routes) == unary
    for row in ROUTES:
        if row.service != service.full_name:
            continue
        entry = getattr(plane, row.name)  # what wiggle/_server/decoding.py registers
        if row.kind is Kind.STREAM:
            assert inspect.isasyncgenfunction(entry), row.method
            continue
        route = plane.routes[row.name]
        assert inspect.iscoroutinefunction(entry) and inspect.iscoroutinefunction(route.handler), row.method
        assert route.request is message_factory.GetMessageClass(METHODS[row.method].input_type)
        assert (route.roles, route.scope) == (row.roles, row.scope)
        assert route.metric == ("upstream." if plane is server.upstream else "") + row.name


def test_a_method_without_a_row_stops_the_service_from_being_built(monkeypatch: pytest.MonkeyPatch) -> None:
    plane = EmbeddedServer().server.service
    without = tuple(r for r in ROUTES if r.method != "/wiggle.v1.WiggleControlPlane/RetryInstance")
    monkeypatch.setattr(routes, "ROUTES", without)
    with pytest.raises(LookupError, match=r"methods without a row in ROUTES \['RetryInstance'\]"):
        ControlPlane(plane.instances, plane.metrics)


def test_a_row_of_the_wrong_kind_stops_the_service_from_being_built(monkeypatch: pytest.MonkeyPatch) -> None:
    plane = EmbeddedServer().server.service
    wrong = tuple(r._replace(kind=Kind.STREAM) if r.name == "GetHistory" else r for r in ROUTES)
    monkeypatch.setattr(routes, "ROUTES", wrong)
    with pytest.raises(LookupError, match="GetHistory: the row says stream"):
        ControlPlane(plane.instances, plane.metrics)


def test_a_method_with_no_row_is_admin_only() -> None:
    assert allowed_roles("/wiggle.v1.WiggleControlPlane/FutureThing") == {Role.ADMIN}
    assert allowed_roles("/dev.wiggle.proto.WiggleControlPlane/FutureThing") == {Role.ADMIN}
    assert allowed_roles("StartInstance") == allowed_roles("/wiggle.v1.WiggleControlPlane/StartInstance")


async def test_the_dispatcher_refuses_each_role_not_in_a_row() -> None:
    """Each message of a WorkerSession goes through the dispatcher, not the interceptor: the guard
    checks the route's roles there, for every unary route of both services."""
    server = WiggleServer(ServerConfig())
    server.service.guard = server.upstream.guard = RequestGuard()
    refused = 0
    for plane in (server.service, server.upstream):
        for name, route in plane.routes.items():
            for role in set(Role) - route.roles:
                reset = CALLER.set(Identity("caller", frozenset({role}), frozenset({"*"})))
                try:
                    with pytest.raises(PermissionDenied, match=f"may not call {name}; it needs one of"):
                        await plane.dispatch(name, route.request())
                finally:
                    CALLER.reset(reset)
                refused += 1
            assert plane.metrics.rpc_errors[route.metric] == len(set(Role) - route.roles)
    assert refused == sum(len(set(Role) - r.roles) for r in ROUTES if r.kind is Kind.UNARY)


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[WiggleServer, Path]]:
    """A server with TLS and an identity file with one credential per role, on a loopback port."""
    ca = Authority(tmp_path)
    cert, key = ca.issue("localhost", server=True)
    auth = tmp_path / "identities.json"
    entries = [
        {"name": name, "roles": [role.value], "token_sha256": hash_token(f"tok-{name}"), "queues": ["*"]}
        for role, name in CALLERS.items()
    ]
    auth.write_text(json.dumps({"identities": entries}))
    server = WiggleServer(ServerConfig(port=0, tls_cert=str(cert), tls_key=str(key), auth_file=str(auth)))
    await server.start()
    try:
        yield server, ca.ca_file
    finally:
        await server.stop(grace=0.5)


async def _call(channel: grpc.aio.Channel, method: MethodDescriptor, path: str) -> grpc.aio.AioRpcError:
    request = message_factory.GetMessageClass(method.input_type)()
    reply = message_factory.GetMessageClass(method.output_type)
    serialize, parse = Message.SerializeToString, reply.FromString
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        if method.client_streaming:
            # No message: the role is refused when the call begins, and a message written while
            # the refusal arrives can fail in the client's own gRPC core first ("Internal error
            # from Core", StatusCode.INTERNAL), hiding the server's status.
            async for _ in channel.stream_stream(path, serialize, parse)(iter(()), timeout=10):
                pass
        else:
            await channel.unary_unary(path, serialize, parse)(request, timeout=10)
    return refused.value


@pytest.mark.parametrize("role", sorted(set(Role) - {Role.ADMIN}, key=lambda r: r.value))
async def test_a_call_by_a_role_not_in_the_row_is_permission_denied(
    secured: tuple[WiggleServer, Path], role: Role
) -> None:
    server, ca_file = secured
    who = CALLERS[role]
    credentials = Credentials(ca_file=str(ca_file), token=f"tok-{who}").channel_credentials()
    denied = [row for row in ROUTES if role not in row.roles]
    assert denied  # every role other than admin is kept out of some RPC
    async with grpc.aio.secure_channel(server.target, credentials) as channel:
        for row in denied:
            error = await _call(channel, METHODS[row.method], row.method)
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED, (row.method, error.details())
            assert f"{who!r} (roles: {role.value}) may not call {row.name}" in (error.details() or "")
    assert server.metrics.rpc_calls == Counter()  # refused before any handler was counted or run
