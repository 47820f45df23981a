"""A handler's mistakes are its step's outcome, reported at once and named, in every mode on both
stores: a result JSON cannot hold, an exception whose own ``str()`` raises, ``sys.exit()`` or a
KeyboardInterrupt raised in a handler (docs/semantics.md#failure-tracebacks). Before, each of them
crashed the worker's task (or the whole worker) and the step sat until its lease ran out,
"lease expired (worker unreachable)" in its history."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import logging
import sys

import msgspec
import pytest

from wiggle import RetryPolicy

from .conftest import Harness

FAST_RETRY = RetryPolicy.fixed(3, 0.05)
LEASE = 60_000  # a mistake that still cost a lease would time the test out


class Customer:
    def __init__(self, name: str) -> None:
        self.name = name


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


def _no_lease_lost(history) -> None:
    assert not [h for h in history if "lease expired" in h.error], history


def _after_a_first_step(harness: Harness, workflow: str, node: str, fn, how: str):
    """A blueprint whose step ``node`` (``fn``, retried fast) follows a plain first step; a
    ``how`` ending in "timed" gives it a time limit, so that it runs inside asyncio.wait_for."""
    timeout = 30 if how.endswith("timed") else None
    return (
        harness.define(workflow)
        .step(lambda ctx: {**ctx, "first": True}, name="first")
        .step(fn, name=node, retry=FAST_RETRY, timeout=timeout)
        .build()
    )


async def _twice(harness: Harness, bp):
    """Run ``bp`` once (its end and history), then once more on the same worker: the worker goes
    on after the mistake, and the next instance runs to the same end."""
    async with harness.running([bp], lease_millis=LEASE) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
        again = await harness.finish(server, (await server.client.start(bp, {})).instance_id, timeout=20)
    return done, history, again


@pytest.mark.parametrize("handler", ["sync", "async"])
async def test_a_result_json_cannot_hold_fails_the_step_at_once_naming_it(
    harness: Harness, handler: str
) -> None:
    def add_object(ctx):
        return {**ctx, "customer": Customer("ann")}

    async def add_object_async(ctx):
        return add_object(ctx)

    bp = (
        harness.define("unstorable")
        .step(lambda ctx: {**ctx, "first": True}, name="first")
        .step(add_object if handler == "sync" else add_object_async, name="add_object", retry=FAST_RETRY)
        .step(lambda ctx: {**ctx, "never": True}, name="never")
        .build()
    )
    done, history, again = await _twice(harness, bp)
    assert done.status == "FAILED" and again.status == "FAILED", (done, again)
    assert [(h.node_id, h.outcome) for h in history] == [("first", "COMPLETED"), ("add_object", "FAILED")]
    error = history[-1].error
    assert "step 'add_object' returned a context that cannot be stored" in error, error
    assert "Customer" in error and "JSON values" in error, error
    _no_lease_lost(history)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
async def test_a_result_holding_nan_or_infinity_fails_the_step_for_good_naming_where(
    harness: Harness, number: float
) -> None:
    """JSON would store it as null: the next step would read None where the handler left a
    number. The step fails at once (no retry: it would compute the same), naming the key."""
    attempts: list[int] = []

    def price(ctx):
        attempts.append(1)
        return {**ctx, "quote": {"prices": [1.5, number]}}

    bp = (
        harness.define("non_finite")
        .step(lambda ctx: {**ctx, "first": True, "none": None}, name="first")
        .step(price, name="price", retry=FAST_RETRY)
        .step(lambda ctx: {**ctx, "never": True}, name="never")
        .build()
    )
    done, history, again = await _twice(harness, bp)
    assert done.status == "FAILED" and again.status == "FAILED", (done, again)
    assert len(attempts) == 2, attempts  # one attempt per instance: not retried
    assert [(h.node_id, h.outcome) for h in history] == [("first", "COMPLETED"), ("price", "FAILED")]
    error = history[-1].error
    assert f"the context['quote']['prices'][1] is {number!r}" in error, error
    assert "JSON has no NaN or infinity" in error, error
    assert done.context == {"first": True, "none": None}, done.context  # nothing of it was stored
    _no_lease_lost(history)


async def test_an_exception_whose_str_raises_is_reported_all_the_same(harness: Harness) -> None:
    attempts: list[int] = []

    def raises_unprintable(ctx):
        attempts.append(1)
        if len(attempts) == 1:
            raise Unprintable()
        return {**ctx, "done": True}

    bp = harness.define("unprintable").step(raises_unprintable, name="step", retry=FAST_RETRY).build()
    async with harness.running([bp], lease_millis=LEASE) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done
    steps = [(h.node_id, h.attempt, h.outcome) for h in history if h.node_id == "step"]
    assert steps == [("step", 1, "RETRY"), ("step", 2, "COMPLETED")], history
    assert history[0].error.startswith("Unprintable: <its str() raised RuntimeError>"), history[0].error
    _no_lease_lost(history)


@pytest.mark.parametrize(
    "how",
    [
        "sys.exit sync",
        "sys.exit async",
        "KeyboardInterrupt sync",
        "sys.exit async timed",
        "sys.exit sync timed",
    ],
)
async def test_a_handler_that_exits_fails_its_step_and_the_worker_goes_on(harness: Harness, how: str) -> None:
    attempts: list[int] = []

    def leave() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            if how.startswith("KeyboardInterrupt"):
                raise KeyboardInterrupt
            sys.exit(3)

    def sync_step(ctx):
        leave()
        return {**ctx, "done": len(attempts)}

    async def async_step(ctx):
        await asyncio.sleep(0)
        leave()
        return {**ctx, "done": len(attempts)}

    bp = _after_a_first_step(harness, "exits", "leaves", async_step if " async" in how else sync_step, how)
    done, history, again = await _twice(harness, bp)
    assert done.status == "COMPLETED" and again.status == "COMPLETED", (done, again)
    assert done.context == {"first": True, "done": 2}
    retried = [h for h in history if h.outcome == "RETRY"]
    assert [(h.node_id, h.attempt) for h in retried] == [("leaves", 1)], history
    expected = "KeyboardInterrupt" if how.startswith("KeyboardInterrupt") else "SystemExit: 3"
    assert retried[0].error.startswith(expected) and "the worker goes on" in retried[0].error, retried[
        0
    ].error
    _no_lease_lost(history)


@pytest.mark.parametrize(
    "how",
    ["async raised", "async raised timed", "async awaited", "sync raised", "sync raised timed"],
)
async def test_a_cancelled_error_the_worker_did_not_cause_fails_its_step_at_once(
    harness: Harness, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by an outside trial: an ``async def`` handler raising ``asyncio.CancelledError``
    itself (not cancelled by the worker's drain, the step's time limit or a give-up) ended the
    worker's task as if cancelled: no FailTask, nothing logged, and the step came back after its
    lease, "lease expired (worker unreachable)". It is the step's failure, retried by its policy,
    in every mode; so is one out of something the handler awaited that was cancelled elsewhere
    (Python 3.11 and later tell it from the step's own cancellation: wiggle/_worker/handlers.py
    ``cancel_requested``), and a sync handler's (nothing cancels those)."""
    if how == "async awaited" and sys.version_info < (3, 11):
        pytest.skip("Python 3.10 cannot tell it from the step's cancellation (docs/workflows.md#handlers)")
    attempts: list[int] = []

    async def awaits_a_cancelled_task() -> None:
        other = asyncio.ensure_future(asyncio.sleep(3600))
        asyncio.get_running_loop().call_later(0.01, other.cancel)
        await other

    def sync_step(ctx):
        attempts.append(1)
        if len(attempts) == 1:
            raise asyncio.CancelledError("mine")
        return {**ctx, "done": len(attempts)}

    async def async_step(ctx):
        attempts.append(1)
        await asyncio.sleep(0)
        if len(attempts) == 1:
            if how == "async awaited":
                await awaits_a_cancelled_task()
            raise asyncio.CancelledError("mine")
        return {**ctx, "done": len(attempts)}

    bp = _after_a_first_step(
        harness, "cancels", "cancels", async_step if how.startswith("async") else sync_step, how
    )
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        done, history, again = await _twice(harness, bp)
    assert done.status == "COMPLETED" and again.status == "COMPLETED", (done, again)
    assert done.context == {"first": True, "done": 2}
    retried = [h for h in history if h.outcome == "RETRY"]
    assert [(h.node_id, h.attempt) for h in retried] == [("cancels", 1)], history
    said = (
        "(raised by the handler without its step being cancelled: it fails the step like any other exception)"
    )
    assert retried[0].error.startswith("CancelledError") and said in retried[0].error, retried[0].error
    assert "Traceback" in retried[0].traceback, retried[0].traceback
    _no_lease_lost(history)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step cancels of instance")]
    assert len(logged) == 1 and "failed (attempt 1, attempt 2 of 3 follows): CancelledError" in logged[0]
    assert said in logged[0], logged


class Order(msgspec.Struct):
    quantity: int
    note: str = ""


async def test_a_context_that_no_longer_fits_its_type_fails_the_step_for_good(harness: Harness) -> None:
    """A step of a typed workflow set a field to a value of the wrong type (a Struct does not check
    its fields when set): the next step cannot be given an Order, and no retry would change that."""

    def spoil(o: Order) -> Order:
        o.quantity = "many"  # type: ignore[assignment]
        return o

    def ship(o: Order) -> Order:
        o.note = "shipped"
        return o

    bp = harness.define("misfit", Order).step(spoil, retry=FAST_RETRY).step(ship, retry=FAST_RETRY).build()
    async with harness.running([bp], lease_millis=LEASE) as (server, _):
        info = await server.client.start(bp, {"quantity": 3})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED", done
    assert [(h.node_id, h.attempt, h.outcome) for h in history] == [
        ("spoil", 1, "COMPLETED"),
        ("ship", 1, "FAILED"),
    ]
    assert "the context does not fit Order: Expected `int`, got `str` - at `$.quantity`" in history[-1].error


async def test_sync_steps_abandoned_at_their_time_limit_do_not_take_the_worker_s_threads(
    harness: Harness,
) -> None:
    """Found by an outside trial: each sync handler abandoned at its time limit kept its pool
    thread; with as many stuck as the worker's concurrency, a quick timed step waited for a thread
    while its limit ran and failed 'timed out' three times without having started."""
    import threading

    release = threading.Event()

    def stuck(ctx):
        release.wait(30)
        return ctx

    stuck_bp = (
        harness.define("stuck").step(stuck, name="stuck", timeout=0.3, retry=RetryPolicy.fixed(1, 0)).build()
    )
    quick_bp = (
        harness.define("quick")
        .step(lambda ctx: {**ctx, "quick": True}, name="quick", timeout=1.0, retry=RetryPolicy.fixed(3, 0))
        .build()
    )
    try:
        options = harness.options(concurrency=2)
        async with harness.running([stuck_bp, quick_bp], options, lease_millis=LEASE) as (server, _):
            stuck_ids = [(await server.client.start(stuck_bp, {})).instance_id for _ in range(2)]
            for iid in stuck_ids:
                assert (await harness.finish(server, iid, timeout=20)).status == "FAILED"
            quick = await server.client.start(quick_bp, {})
            done = await harness.finish(server, quick.instance_id, timeout=20)
            history = await server.client.history(quick.instance_id)
    finally:
        release.set()
    assert done.status == "COMPLETED", (done, history)
    assert [(h.node_id, h.outcome) for h in history if h.node_id == "quick"] == [("quick", "COMPLETED")], (
        history
    )


@pytest.mark.parametrize("handler", ["sync", "async"])
async def test_a_context_changed_in_place_and_returned_reaches_the_instance(
    harness: Harness, handler: str
) -> None:
    """A handler that appends to a nested list and bumps a nested count in place, then returns
    the context, changes the instance's context in every mode. A local run gave its handler a
    copy sharing its nested lists and dicts with the run's own context, so the step's diff found
    them unchanged and the report left them out: LOCAL_SYNC and LOCAL_ASYNC ended with the lists
    empty where SERVER had them full. A predicate's in-place change changes nothing, as in SERVER."""

    def add(name: str):
        def step(ctx):
            ctx["items"].append(name)
            ctx["inner"]["n"] += 1
            return ctx

        async def step_async(ctx):
            return step(ctx)

        return step if handler == "sync" else step_async

    def meddling_predicate(ctx) -> bool:
        ctx["items"].append("predicate")  # a predicate's context is its own: this is dropped
        return True

    bp = (
        harness.define("in-place")
        .step(add("a"), name="a")
        .step(add("b"), name="b")
        .choose(meddling_predicate, if_true=lambda b: b.step(add("c"), name="c"), name="meddling_predicate")
        .step(lambda ctx: {**ctx, "seen": list(ctx["items"])}, name="seen")
        .build()
    )
    async with harness.running([bp], lease_millis=LEASE) as (server, _):
        info = await server.client.start(bp, {"items": [], "inner": {"n": 0}})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done
    assert done.context == {"items": ["a", "b", "c"], "inner": {"n": 3}, "seen": ["a", "b", "c"]}, (
        done.context
    )
    _no_lease_lost(history)
    assert {h.outcome for h in history} <= {"COMPLETED", "END"}, history  # no retry, no failure


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (datetime.datetime(2024, 1, 1, 12), "['when'] is of type datetime"),
        (decimal.Decimal("1.10"), "['when'] is of type Decimal"),
        ({"a"}, "['when'] is of type set"),
        ({"prices": [{1: "a"}]}, "['when']['prices'][0] is a dict with the int key 1"),
    ],
    ids=["datetime", "decimal", "set", "int-key"],
)
async def test_a_value_json_would_read_back_as_another_type_fails_the_step_for_good(
    harness: Harness, value: object, words: str
) -> None:
    """msgspec writes a datetime or a Decimal as a string, a set as a list, an int key as a string:
    the instance completed and the next step read '1.10' where the handler left a Decimal."""
    attempts: list[int] = []

    def put(ctx):
        attempts.append(1)
        return {**ctx, "when": value}

    bp = (
        harness.define("foreign")
        .step(put, name="put", retry=FAST_RETRY)
        .step(lambda ctx: {**ctx, "never": True}, name="never")
        .build()
    )
    async with harness.running([bp], lease_millis=LEASE) as (server, _):
        info = await server.client.start(bp, {})
        done = await harness.finish(server, info.instance_id, timeout=20)
        history = await server.client.history(info.instance_id)
    assert done.status == "FAILED" and len(attempts) == 1, (done, attempts)
    assert "returned a context that cannot be stored as it is: the context" in done.error, done.error
    assert words in done.error, done.error
    _no_lease_lost(history)
