"""The dispatch table covers the service exactly, and the stream's bodies agree with it."""

from __future__ import annotations

import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._server.service import ControlPlane, Route
from wiggle._server.session import BODIES
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer

SERVICE = pb.DESCRIPTOR.services_by_name["WiggleControlPlane"]


@pytest.fixture
def plane() -> ControlPlane:
    return EmbeddedServer().server.service


def test_every_unary_rpc_has_a_route_of_its_request_type(plane: ControlPlane) -> None:
    unary = {m.name: m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming}
    assert set(plane.routes) == set(unary)
    for name, method in unary.items():
        assert plane.routes[name].request.DESCRIPTOR is method.input_type, name
        assert callable(getattr(plane, name)), name  # the gRPC entry point exists


def test_stream_bodies_name_routes_with_matching_types(plane: ControlPlane) -> None:
    worker_fields = pb.WorkerMessage.DESCRIPTOR.fields_by_name
    server_fields = pb.ServerMessage.DESCRIPTOR.fields_by_name
    for body, (method, reply_field) in BODIES.items():
        assert worker_fields[body].message_type is plane.routes[method].request.DESCRIPTOR, body
        unary = SERVICE.methods_by_name[method]
        assert server_fields[reply_field].message_type is unary.output_type, body
    oneof = {f.name for f in pb.WorkerMessage.DESCRIPTOR.oneofs_by_name["body"].fields}
    assert oneof - set(BODIES) == {"cancel"}  # cancel is handled by the stream itself


async def test_a_route_refuses_a_request_of_another_type() -> None:
    async def handler(request: pb.GetInstanceRequest) -> pb.InstanceInfo:
        return pb.InstanceInfo(instance_id=request.instance_id)

    route = Route(pb.GetInstanceRequest, handler)
    assert (await route(pb.GetInstanceRequest(instance_id="wi-1"))).instance_id == "wi-1"
    with pytest.raises(InvalidArgument, match="expected a GetInstanceRequest, got a GetHistoryRequest"):
        await route(pb.GetHistoryRequest())
