"""Failures you can debug: every failed attempt's traceback is logged by the worker and stored in
the history (docs/semantics.md#failure-tracebacks), in every store and execution mode."""

from __future__ import annotations

import logging

import pytest

from wiggle import PermanentError, RetryPolicy

from .conftest import Harness

FAST = RetryPolicy.fixed(2, 0.05)


def charge_card(amount: int) -> None:
    try:
        {}["card"]  # noqa: B018 - the cause the traceback must show
    except KeyError as exc:
        raise RuntimeError(f"card declined for {amount}") from exc


async def test_each_failed_attempt_keeps_its_traceback(
    harness: Harness, trace, caplog: pytest.LogCaptureFixture
) -> None:
    def first(ctx):
        return {**ctx, "first": True}

    def charge(ctx):
        info = trace.hit("charge")
        if info.attempt == 1:
            charge_card(ctx["amount"])
        raise PermanentError("card expired")

    bp = harness.define("tracebacks").retry(FAST).step(first).step(charge).build()
    caplog.set_level(logging.WARNING, logger="wiggle.worker")
    async with harness.running([bp]) as (server, _):
        info = await server.client.start(bp, {"amount": 42})
        done = await harness.finish(server, info.instance_id)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED" and done.error == "charge: PermanentError: card expired"
    failed = [e for e in history if e.node_id == "charge"]
    assert [(e.attempt, e.outcome) for e in failed] == [(1, "RETRY"), (2, "FAILED")]
    retry, final = failed
    assert retry.error == "RuntimeError: card declined for 42"
    assert retry.traceback.startswith("Traceback (most recent call last):")
    # the whole chain: the cause, the frames of the user's code, the exception line
    assert "KeyError: 'card'" in retry.traceback
    assert "The above exception was the direct cause" in retry.traceback
    assert "in charge_card" in retry.traceback and "in charge" in retry.traceback
    assert retry.traceback.rstrip().endswith("RuntimeError: card declined for 42")
    assert final.traceback.rstrip().endswith("PermanentError: card expired")
    assert "card declined" not in final.traceback
    assert all(e.traceback == "" for e in history if e.outcome not in ("RETRY", "FAILED"))
    # the worker logged both attempts with their tracebacks, never the context (a payload)
    logged = [r for r in caplog.records if r.name == "wiggle.worker" and "failed" in r.getMessage()]
    assert len(logged) == 2, [r.getMessage() for r in caplog.records]
    assert "in charge_card" in logged[0].getMessage() and "card expired" in logged[1].getMessage()
    assert logged[0].__dict__["instance_id"] == info.instance_id
    assert logged[0].__dict__["node_id"] == "charge" and logged[0].__dict__["attempt"] == 1
    assert all("{'amount': 42}" not in r.getMessage() for r in logged)
    # the worker's own frames are left out: the traceback starts at the user's handler
    assert "wiggle/_worker" not in retry.traceback and "in charge" in retry.traceback.splitlines()[1]
