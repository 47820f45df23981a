"""How a worker logs a failed step (wiggle/_worker/handlers.py log_failure): a RetryableError, a
failure the handler expected, in one line; anything else with its traceback."""

from __future__ import annotations

import logging

import pytest

from wiggle import PermanentError, RetryableError
from wiggle._worker.handlers import log_failure
from wiggle._worker.outcomes import failure_of
from wiggle._worker.step import Step

STEP = Step(
    instance_id="wi-1",
    workflow="orders",
    version="v",
    node_id="charge",
    attempt=1,
    task_id="wi-1.1@1",
    worker_id="w",
    correlation_id="",
    execution_mode="SERVER",
)


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


@pytest.mark.parametrize(
    "exc, retryable, one_line",
    [
        (RetryableError("gateway timed out"), True, True),
        (ConnectionError("gateway timed out"), True, False),
        (PermanentError("card declined"), False, False),
    ],
)
def test_an_expected_failure_is_one_line_the_others_carry_their_traceback(
    caplog: pytest.LogCaptureFixture, exc: Exception, retryable: bool, one_line: bool
) -> None:
    failure = failure_of(_raised(exc))
    assert failure.retryable is retryable
    assert "Traceback" in failure.traceback  # kept for the history either way
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        log_failure(STEP, failure)
    (record,) = caplog.records
    text = record.getMessage()
    assert text.startswith("step charge of instance wi-1 failed (attempt 1, ")
    assert f"{type(exc).__name__}: " in text
    assert ("\n" not in text) is one_line and ("Traceback" in text) is not one_line
