"""The pull loop: a claim whose reply comes after the poll was abandoned is handed back at stop;
a failed poll backs off, to a second at most while the server is away."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from typing import Any

import grpc
import pytest

from wiggle._model import Handback
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.poller import Poller
from wiggle._worker.reporter import Reporter
from wiggle._worker.stream import StreamError

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


class FailingPolls(FakeTransport):
    """Every poll fails with ``code`` at once."""

    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__()
        self.code = code

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        raise StreamError(self.code, "the server is stopping; poll again")


@pytest.mark.parametrize(
    "code, longest",
    [
        (grpc.StatusCode.UNAVAILABLE, 1.0),  # the server is away: look for it every second at most
        (grpc.StatusCode.DEADLINE_EXCEEDED, 1.0),
        (grpc.StatusCode.PERMISSION_DENIED, 5.0),  # a refusal: repeated (and logged) less often
    ],
)
async def test_a_failed_poll_backs_off_to_a_second_while_the_server_is_away(
    code: grpc.StatusCode, longest: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    enough = asyncio.Event()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 10:
            enough.set()
        await real_sleep(0)

    monkeypatch.setattr("wiggle._worker.poller.asyncio.sleep", sleep)
    transport = FailingPolls(code)

    async def execute(activation: pb.TaskActivation) -> None:
        raise AssertionError("no poll succeeds")

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 1, 1.0, execute)
    poller.start()
    await asyncio.wait_for(enough.wait(), 5)
    await poller.stop(timeout=1)
    assert pauses[:5] == [0.1, 0.2, 0.4, 0.8, 1.6 if longest > 1.6 else longest]
    assert max(pauses) == longest and pauses[9] == longest


class AwayThenBack(FakeTransport):
    """Three polls fail UNAVAILABLE (the server stops and restarts), then polls are answered."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0
        self.answered = asyncio.Event()

        self.waits: list[int] = []  # each poll's wait_millis

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        self.polls += 1
        self.waits.append(request.wait_millis)
        if self.polls <= 3:
            raise StreamError(grpc.StatusCode.UNAVAILABLE, "the server is stopping; poll again")
        if self.polls >= 5:
            self.answered.set()
        await asyncio.sleep(0.01)
        return pb.PollTasksResponse()


#: asyncio.sleep itself: a test may patch the poller's pauses (asyncio.sleep) to none
_REAL_SLEEP = asyncio.sleep


async def _poll_until_answered(transport: Any, poll_wait: float) -> None:
    """A poller on ``transport`` (which has an ``answered`` event and never hands out a step),
    run until a poll was answered, a moment more, then stopped."""

    async def execute(activation: pb.TaskActivation) -> None:
        raise AssertionError("no step is polled")

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 1, poll_wait, execute)
    poller.start()
    await asyncio.wait_for(transport.answered.wait(), 5)
    await _REAL_SLEEP(0.05)
    await poller.stop(timeout=1)


async def test_an_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("wiggle._worker.poller.asyncio.sleep", lambda seconds: _REAL_SLEEP(0))
    transport = AwayThenBack()
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        await _poll_until_answered(transport, 1.0)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == (
        "WARNING",
        "server unavailable (UNAVAILABLE: the server is stopping; poll again); polling again every second at most",
    )
    assert (
        said[1][0] == "INFO"
        and said[1][1].startswith("reached a server again after ")
        # neutral: a worker paused itself (SIGSTOP) said "without one", as if no server had run
        and said[1][1].endswith(" s without an answer; polling q")
    )
    assert len(said) == 2, said


async def test_polls_do_not_wait_for_work_until_one_is_answered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first poll a server answers after an outage ends the trouble (/readyz) at once: the
    polls sent while in trouble ask for no wait; the long polls resume once one is answered."""
    monkeypatch.setattr("wiggle._worker.poller.asyncio.sleep", lambda seconds: _REAL_SLEEP(0))
    transport = AwayThenBack()
    await _poll_until_answered(transport, 1.0)
    assert transport.waits[:5] == [1000, 0, 0, 0, 1000], transport.waits


class TimedOutThenBack(FakeTransport):
    """The first poll is never answered (the server hangs) and fails DEADLINE_EXCEEDED late, as
    a real one does ``poll_wait_seconds + 30`` after it was sent; the next one is answered (by
    this server or another of a fail-over list: the worker cannot tell)."""

    def __init__(self, hang: float) -> None:
        super().__init__()
        self.hang = hang
        self.polls = 0
        self.answered = asyncio.Event()

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        self.polls += 1
        if self.polls == 1:
            await asyncio.sleep(self.hang)
            raise StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, "PollTasks timed out")
        self.answered.set()
        await asyncio.sleep(0.01)
        return pb.PollTasksResponse()


async def test_an_outage_is_counted_from_when_the_failed_poll_should_have_been_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outside trial's worker logged "server back after 20.7 s" for an outage that began with a
    poll timing out: the count began when the poll failed, its timeout after it was sent, not
    when its answer was due. The poll waits 0.05 s for work and fails 0.6 s after it was sent:
    the outage is 0.55 s at least."""
    transport = TimedOutThenBack(hang=0.6)
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        await _poll_until_answered(transport, 0.05)
    (back,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    match = re.fullmatch(r"reached a server again after (\d+\.\d) s without an answer; polling q", back)
    assert match is not None, back
    assert 0.5 <= float(match.group(1)) < 3, back


async def test_readiness_counts_the_trouble_from_the_same_moment() -> None:
    transport = TimedOutThenBack(hang=0.6)
    seen: list[float] = []

    async def execute(activation: pb.TaskActivation) -> None:
        raise AssertionError("no step is polled")

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 1, 0.05, execute)
    poller.start()
    while transport.polls < 2:
        if poller.trouble is not None:
            seen.append(time.monotonic() - poller.trouble[0])
        await asyncio.sleep(0.005)
    await poller.stop(timeout=1)
    assert seen and seen[0] >= 0.5, seen  # /readyz: "its polls have failed for 0.5 s"


class CancelledByItself(FakeTransport):
    """One activation, whose execution raises CancelledError although nothing cancelled it."""

    def __init__(self) -> None:
        super().__init__()
        self.given = False

    async def poll(self, request: pb.PollTasksRequest, timeout: float) -> pb.PollTasksResponse:
        if self.given:
            await asyncio.sleep(timeout)
            return pb.PollTasksResponse()
        self.given = True
        return pb.PollTasksResponse(tasks=[pb.TaskActivation(task_id="t1@1", node_id="a")])


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() counts cancel requests from 3.11")
async def test_a_worker_task_ended_by_a_cancelled_error_nobody_asked_for_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler's own CancelledError is its step's failure (wiggle/_worker/handlers.py
    ``_Watched``); any other that ends a worker's task without a cancel said nothing before, and
    the step waited out its lease in silence (an outside trial). One that a cancel caused says
    nothing still: a drain's cut, a give-up."""
    transport = CancelledByItself()
    ended = asyncio.Event()

    async def execute(activation: pb.TaskActivation) -> None:
        asyncio.get_running_loop().call_soon(ended.set)
        raise asyncio.CancelledError("raised, not cancelled")

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 2, 0.05, execute)
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        poller.start()
        await asyncio.wait_for(ended.wait(), 5)
        await asyncio.sleep(0.05)
        await poller.stop(timeout=1)
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith(
        "worker task ended by a CancelledError although nothing cancelled it"
    )
    assert record.exc_info is not None and "raised, not cancelled" in str(record.exc_info[1])


async def test_a_worker_task_cut_by_the_drain_is_not_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = CancelledByItself()
    started = asyncio.Event()

    async def execute(activation: pb.TaskActivation) -> None:
        started.set()
        await asyncio.sleep(3600)

    poller = Poller(transport, Reporter(transport, timeout=5), "w1", ["q"], 2, 0.05, execute)
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        poller.start()
        await asyncio.wait_for(started.wait(), 5)
        cut, _ = await poller.stop(timeout=0.05)
    assert cut == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records
