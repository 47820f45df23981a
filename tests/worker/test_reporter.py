"""The reporter's retry-or-drop policy (wiggle/_worker/reporter.py): a refusal is final, an absent
server is retried (docs/semantics.md#fencing: a resent report is refused, never looped on)."""

from __future__ import annotations

import logging

import grpc
import pytest

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.reporter import Reporter

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
