"""The reporter's retry-or-drop policy (wiggle/_worker/reporter.py): a refusal is final, an absent
server is retried (docs/semantics.md#fencing: a resent report is refused, never looped on)."""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc
import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.reporter import Reporter
from wiggle._worker.stream import StreamError

from .fakes import FakeTransport, refuse, running


async def test_an_already_settled_answer_is_sent_once_logged_and_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settled = "task wi-1.1@1 is already settled: token wi-1.1 has been claimed again since"
    transport = FakeTransport(refuse(grpc.StatusCode.FAILED_PRECONDITION, settled))
    reporter = Reporter(transport)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="wiggle.worker"):
        result = await reporter.advance(pb.AdvanceRunRequest(task_id="wi-1.1@1", lease_owner="w"))
    assert result is None
    assert len(transport.advanced) == 1  # not retried
    assert [r.getMessage() for r in caplog.records] == [f"AdvanceRun refused, dropped: {settled}"]


async def test_an_unavailable_server_is_retried_until_it_answers() -> None:
    transport = FakeTransport(
        refuse(grpc.StatusCode.UNAVAILABLE), refuse(grpc.StatusCode.DEADLINE_EXCEEDED), running
    )
    reporter = Reporter(transport)  # type: ignore[arg-type]
    result = await reporter.advance(pb.AdvanceRunRequest(task_id="wi-1.1@1", lease_owner="w"))
    assert result is not None and result.instance_status == "RUNNING"
    assert len(transport.advanced) == 3  # the same request each time
    assert len({r.SerializeToString() for r in transport.advanced}) == 1


def unavailable_for(seconds: float) -> list[Any]:
    """AdvanceRun answers: UNAVAILABLE until ``seconds`` from now, then accepted."""
    until = time.monotonic() + seconds

    def reply(request: pb.AdvanceRunRequest) -> pb.AdvanceRunResult:
        if time.monotonic() < until:
            raise StreamError(grpc.StatusCode.UNAVAILABLE, "the server is stopping; poll again")
        return running(request)

    return [reply] * 100


async def test_an_absent_server_is_retried_as_long_as_the_lease_may_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two tries alone last 0.1 s; the server is away 1.5 s, within the step's 3 s lease: the
    # report waits for it instead of giving up and leaving the step to its lease's expiry.
    monkeypatch.setattr(Reporter, "ATTEMPTS", 2)
    transport = FakeTransport(*unavailable_for(1.5))
    reporter = Reporter(transport)  # type: ignore[arg-type]
    result = await reporter.advance(pb.AdvanceRunRequest(task_id="wi-1.1@1", lease_owner="w"), patience=3.0)
    assert result is not None and result.instance_status == "RUNNING"
    assert 3 <= len(transport.advanced) < 20


async def test_without_patience_the_tries_alone_bound_the_retries(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Reporter, "ATTEMPTS", 2)
    transport = FakeTransport(*unavailable_for(60))
    reporter = Reporter(transport)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        result = await reporter.advance(pb.AdvanceRunRequest(task_id="wi-1.1@1", lease_owner="w"))
    assert result is None and len(transport.advanced) == 2
    (record,) = caplog.records
    assert record.getMessage().startswith("AdvanceRun gave up after 2 tries in ")
