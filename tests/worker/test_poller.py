"""The pull loop's stop: a claim whose reply comes after the poll was abandoned is handed back."""

from __future__ import annotations

import asyncio

import pytest

from wiggle._model import Handback
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.poller import Poller
from wiggle._worker.reporter import Reporter

from .fakes import FakeTransport


class LateReplyTransport(FakeTransport):
    """A poll that waits until it is abandoned; the server's reply (one claim) arrives just after."""

    def __init__(self) -> None:
        super().__init__()
        self.polling = asyncio.Event()
        self.on_orphan_tasks = None

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        self.polling.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            late = pb.TaskActivation(task_id="tok-1@1", lease_owner=request.worker_id, node_id="a")
            assert self.on_orphan_tasks is not None
            asyncio.get_running_loop().call_soon(self.on_orphan_tasks, [late])
            raise
        raise AssertionError("unreachable")


@pytest.mark.asyncio
async def test_a_claim_that_lands_after_stop_is_handed_back_unstarted() -> None:
    transport = LateReplyTransport()
    started: list[pb.TaskActivation] = []

    async def execute(activation: pb.TaskActivation) -> None:
        started.append(activation)

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 2, 1.0, execute)
    transport.on_orphan_tasks = poller.hand_back_orphans
    poller.start()
    await asyncio.wait_for(transport.polling.wait(), 5)
    await poller.stop(timeout=5)
    assert started == []  # nothing starts once the worker drains
    (handback,) = transport.advanced
    assert (handback.task_id, handback.lease_owner, handback.final) == ("tok-1@1", "w1", True)
    assert handback.handback_reason == Handback.SHUTDOWN.value
    assert not handback.steps  # no step ran: the attempt is not spent
