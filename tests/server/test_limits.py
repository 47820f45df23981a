"""ServiceLimits: the bounds the service enforces come from one struct, not constants in handlers."""

from __future__ import annotations

import grpc
import pytest

from wiggle import Workflow
from wiggle._engine.engine import EngineConfig
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._server.service import ControlPlane, ServiceLimits
from wiggle.testing import EmbeddedServer

FLOW = Workflow.define("limits-flow").step(lambda ctx: ctx, name="a").build()


def test_limits_take_the_payload_limit_from_the_engine() -> None:
    limits = ServiceLimits.from_config(EngineConfig(max_payload_bytes=4096))
    assert limits.max_payload_bytes == 4096
    assert (limits.max_tasks_per_poll, limits.max_page_size, limits.default_page_size) == (256, 1000, 50)


async def test_the_service_enforces_its_limits() -> None:
    server = EmbeddedServer()
    base = server.server.service
    limits = ServiceLimits(max_tasks_per_poll=2, max_page_size=3, max_payload_bytes=200, max_wait_seconds=0.0)
    server.server.service = ControlPlane(base.instances, base.metrics, limits)
    async with server:
        await server.client.register(FLOW)
        stub = server.client.stub
        for request, method, fragment in (
            (pb.PollTasksRequest(worker_id="w", queues=["q"], max_tasks=3), "PollTasks", "between 1 and 2"),
            (pb.ListInstancesRequest(page_size=4), "ListInstances", "between 1 and 3"),
            (
                pb.StartInstanceRequest(workflow=FLOW.name, context_json=b'{"x": "' + b"y" * 300 + b'"}'),
                "StartInstance",
                "the limit is 200 bytes",
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await getattr(stub, method)(request, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert fragment in (err.value.details() or "")
        # max_wait_seconds 0: a long poll on an empty queue answers at once, with nothing
        reply = await stub.PollTasks(
            pb.PollTasksRequest(worker_id="w", queues=["empty"], max_tasks=2, wait_millis=60_000), timeout=10
        )
        assert list(reply.tasks) == []
        page = await stub.ListInstances(pb.ListInstancesRequest(page_size=3), timeout=10)
        assert list(page.instances) == []
