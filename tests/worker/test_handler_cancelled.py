"""A CancelledError out of a handler is told apart (wiggle/_worker/handlers.py ``_Watched``,
``cancel_requested``): its step's cancellation (the worker's drain, the step's time limit, a
give-up) goes on as one; one the handler raised without its step being cancelled is a failure of
the step, carried as a HandlerExited. Python 3.10, which does not count a task's cancel requests,
takes a CancelledError passed into the handler for the sign: simulated here on any version.
The end-to-end behaviour, every mode on both stores: tests/conformance/test_handler_mistakes.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from wiggle import Workflow
from wiggle._worker import handlers
from wiggle._worker.handlers import cancel_requested
from wiggle._worker.outcomes import Failure, HandlerExited

from .fakes import FakeTransport, Harness


class _Uncounted:
    """A task as Python 3.10 has it: no ``cancelling``."""


@pytest.fixture(params=["counted", "python 3.10"])
def counting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python 3.10":
        monkeypatch.setattr(
            handlers, "cancel_requested", lambda task, thrown: cancel_requested(_Uncounted(), thrown)
        )  # type: ignore[arg-type]
    return str(request.param)


def test_without_counted_cancel_requests_a_cancellation_passed_in_is_the_sign() -> None:
    assert cancel_requested(_Uncounted(), True) is True  # type: ignore[arg-type]
    assert cancel_requested(_Uncounted(), False) is False  # type: ignore[arg-type]


async def _call(fn: Any) -> Any:
    harness = Harness(Workflow.define("cancelled").step(fn, name="step").build(), FakeTransport())
    try:
        act = harness.activation(execution_mode="SERVER")
        info = harness.caller.step_info(act, "step", 1)
        return await harness.caller.call(harness.loaded, "step", {}, info)
    finally:
        harness.close()


async def test_a_cancelled_error_the_handler_raises_is_its_failure(counting: str) -> None:
    async def raises(ctx: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("mine")

    with pytest.raises(HandlerExited) as raised:
        await _call(raises)
    assert isinstance(raised.value.exited, asyncio.CancelledError)


async def test_a_handler_whose_task_is_cancelled_is_cancelled(counting: str) -> None:
    started = asyncio.Event()
    seen: list[str] = []

    async def hangs(ctx: dict[str, Any]) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return ctx

    task = asyncio.ensure_future(_call(hangs))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and task.cancelled()


async def test_a_cancelled_error_a_sync_handler_raises_is_its_failure() -> None:
    def raises(ctx: dict[str, Any]) -> dict[str, Any]:
        raise asyncio.CancelledError("mine")

    for inline in (True, False):
        harness = Harness(Workflow.define("cancelled").step(raises, name="step").build(), FakeTransport())
        try:
            act = harness.activation(execution_mode="SERVER")
            if inline:
                outcome = harness.caller.run_sync(harness.loaded, act, "step", {}, 1, True)
            else:
                outcome = await harness.caller.run(harness.loaded, act, "step", {}, 1)
        finally:
            harness.close()
        assert isinstance(outcome, Failure) and outcome.retryable, outcome
        assert outcome.message == (
            "CancelledError: mine (raised by the handler without its step being cancelled: it fails "
            "the step like any other exception)"
        )
        assert "Traceback" in outcome.traceback and "raise asyncio.CancelledError" in outcome.traceback
