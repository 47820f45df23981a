"""Bad input for SignalInstance and RetryInstance over the wire (issue #11), on every store.

Each refusal has the right status code and a message naming the problem, and changes nothing.
"""

from __future__ import annotations

import grpc

from wiggle import Workflow
from wiggle._rpc import wiggle_pb2 as pb

from .test_bad_input import SERVER_FLOW, Wire, edge  # noqa: F401 - the fixture is used by name

WAITS = Workflow.define("bad-input-signal").wait_signal("paid").build()


async def _register(wire: Wire) -> None:
    await wire.stub.RegisterWorkflow(pb.RegisterWorkflowRequest(definition_json=WAITS.definition.to_json()))


async def test_signal_bad_input(edge: Wire) -> None:  # noqa: F811
    await _register(edge)
    info = await edge.start(WAITS, {})
    before = await edge.state(info.instance_id)
    cases = [
        (pb.SignalInstanceRequest(name="paid"), grpc.StatusCode.INVALID_ARGUMENT, "instance_id"),
        (pb.SignalInstanceRequest(instance_id=info.instance_id), grpc.StatusCode.INVALID_ARGUMENT, "name"),
        (
            pb.SignalInstanceRequest(instance_id=info.instance_id, name="paid", data_json=b"[1]"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "data_json",
        ),
        (
            pb.SignalInstanceRequest(instance_id=info.instance_id, name="paid", data_json=b"{not json"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "data_json",
        ),
        (
            pb.SignalInstanceRequest(instance_id=info.instance_id, name="paid", signal_id="bad id"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "signal_id",
        ),
        (
            pb.SignalInstanceRequest(instance_id=info.instance_id, name="shipped"),
            grpc.StatusCode.NOT_FOUND,
            "'shipped'",
        ),
        (
            pb.SignalInstanceRequest(instance_id="wi-000000000000000000000000", name="paid"),
            grpc.StatusCode.NOT_FOUND,
            "does not exist",
        ),
        (
            pb.SignalInstanceRequest(
                instance_id=info.instance_id, name="paid", data_json=b'{"x": "' + b"y" * (1 << 20) + b'"}'
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "limit",
        ),
    ]
    for request, code, fragment in cases:
        details = await edge.fails("SignalInstance", request, code)
        assert fragment in details, (request, details)
    assert await edge.state(info.instance_id) == before


async def test_signal_to_a_finished_instance_is_failed_precondition(edge: Wire) -> None:  # noqa: F811
    await _register(edge)
    info = await edge.start(WAITS, {})
    await edge.stub.CancelInstance(pb.CancelInstanceRequest(instance_id=info.instance_id, reason="x"))
    before = await edge.state(info.instance_id)
    details = await edge.fails(
        "SignalInstance",
        pb.SignalInstanceRequest(instance_id=info.instance_id, name="paid", data_json=b"{}"),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "CANCELLED" in details and "'paid'" in details
    assert await edge.state(info.instance_id) == before


async def test_retry_bad_input(edge: Wire) -> None:  # noqa: F811
    info = await edge.start(SERVER_FLOW, {})
    before = await edge.state(info.instance_id)
    cases = [
        (pb.RetryInstanceRequest(), grpc.StatusCode.INVALID_ARGUMENT, "instance_id"),
        (
            pb.RetryInstanceRequest(instance_id=info.instance_id, from_node="bad node"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "from_node",
        ),
        (
            pb.RetryInstanceRequest(instance_id=info.instance_id, replace_context=True, context_json=b"[]"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "context_json",
        ),
        (
            pb.RetryInstanceRequest(instance_id=info.instance_id),
            grpc.StatusCode.FAILED_PRECONDITION,
            "only a FAILED instance",
        ),
        (
            pb.RetryInstanceRequest(instance_id="wi-000000000000000000000000"),
            grpc.StatusCode.NOT_FOUND,
            "does not exist",
        ),
    ]
    for request, code, fragment in cases:
        details = await edge.fails("RetryInstance", request, code)
        assert fragment in details, (request, details)
    assert await edge.state(info.instance_id) == before
