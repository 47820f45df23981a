"""A call that gets no answer within its deadline is taken for a server away (core.no_answer,
docs/failover.md#what-a-client-does-while-the-server-is-away): Unavailable, and a call safe to
repeat is asked again while the client's patience lasts.

A network-fault trial: a start that got no answer within 30 s raised a plain WiggleError with the
code DEADLINE_EXCEEDED, and one with a request_id was not asked again, though the docs say such
starts are repeated for up to ``patience``; the unary calls' DEADLINE_EXCEEDED was the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from both_clients import EitherClient
from held_starts import hold_starts

from wiggle import Unavailable, Workflow
from wiggle._client import core
from wiggle._rpc import wiggle_pb2 as pb
from wiggle.testing import EmbeddedServer

FLOW = Workflow.define("lost-answers").wait_signal("go").build()


pytestmark = pytest.mark.usefixtures("no_tracing")


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_start_with_a_request_id_whose_answer_is_lost_is_asked_again(
    blocking: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # patience counts from the first failure: a first try that used up its whole deadline (here
    # longer than the patience, as the defaults make them equal) is still asked again
    async with EmbeddedServer() as server:
        await server.client.register(FLOW)
        client = EitherClient(server.target, blocking, patience=1.0)
        try:
            await client.call("get_workflow", FLOW.name)  # it has reached its server
            release = hold_starts(server.server.instances)
            monkeypatch.setattr(core, "CALL_TIMEOUT", 1.2)
            asyncio.get_running_loop().call_later(1.8, release.set)  # the first try goes unanswered
            info = await asyncio.wait_for(
                client.call("start", FLOW, {"n": 1}, correlation_id="lost-1", request_id="lost-1"), 20
            )
            page, _ = await server.client.list(correlation_id="lost-1")
            assert [i.instance_id for i in page] == [info.instance_id]  # one instance: repeats are safe
            monkeypatch.setattr(core, "CALL_TIMEOUT", 30.0)
        finally:
            await client.close()


async def _answers_late() -> tuple[grpc.aio.Server, str]:
    """A server whose first GetInstance and every CompleteUserTask are never answered (a frozen
    server, a network that drops the replies); the later GetInstance calls are."""
    asked: list[str] = []

    async def get_instance(request: pb.GetInstanceRequest, context: Any) -> pb.InstanceInfo:
        asked.append(request.instance_id)
        if len(asked) == 1:
            await asyncio.sleep(60)
        return pb.InstanceInfo(instance_id=request.instance_id, workflow="w", status="RUNNING")

    async def complete_user_task(request: pb.CompleteUserTaskRequest, context: Any) -> pb.InstanceInfo:
        await asyncio.sleep(60)
        return pb.InstanceInfo(instance_id=request.instance_id, workflow="w", status="RUNNING")

    handlers = grpc.method_handlers_generic_handler(
        "wiggle.v1.WiggleControlPlane",
        {
            "GetInstance": grpc.unary_unary_rpc_method_handler(
                get_instance, pb.GetInstanceRequest.FromString, pb.InstanceInfo.SerializeToString
            ),
            "CompleteUserTask": grpc.unary_unary_rpc_method_handler(
                complete_user_task, pb.CompleteUserTaskRequest.FromString, pb.InstanceInfo.SerializeToString
            ),
        },
    )
    late = grpc.aio.server()
    late.add_generic_rpc_handlers((handlers,))
    port = late.add_insecure_port("127.0.0.1:0")
    await late.start()
    return late, f"127.0.0.1:{port}"


@pytest.fixture
async def late_server() -> AsyncIterator[str]:
    server, target = await _answers_late()
    try:
        yield target
    finally:
        await server.stop(None)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_unary_call_without_an_answer_is_unavailable_and_asked_again_if_safe(
    late_server: str, blocking: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core, "CALL_TIMEOUT", 0.3)
    client = EitherClient(late_server, blocking)
    try:
        got = await asyncio.wait_for(client.call("get", "wi-late"), 20)  # the first try's answer was lost
        assert got.instance_id == "wi-late"
        with pytest.raises(Unavailable, match=r"got no answer within 0\.3 s") as lost:
            await asyncio.wait_for(client.call("complete_user_task", "wi-late", "approve"), 20)
        assert "may or may not have been applied" in str(lost.value)
    finally:
        await client.close()
