"""What the clients refuse before sending anything, saying what to do: a start given a Blueprint
whose context type is a msgspec.Struct with a context that does not fit (InvalidArgument naming
the workflow and the field; else the first step fails its attempts on msgspec's ValidationError),
and register() given a Workflow builder instead of its Blueprint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from both_clients import EitherClient

from wiggle import Workflow
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer


class Order(msgspec.Struct):
    order_id: int
    quantity: int
    note: str = ""


class Other(msgspec.Struct):
    foo: int


def price(order: Order) -> Order:
    return order


TYPED = Workflow.define("typed-orders", Order).step(price).build()
# waits first: a user task's data may complete the context before any handler sees it
WAITS_FIRST = Workflow.define("typed-approval", Order).user_task("approve").step(price).build()


@pytest.fixture(params=[False, True], ids=["async", "blocking"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[EitherClient]:
    async with EmbeddedServer() as server:
        await server.client.register(TYPED)
        await server.client.register(WAITS_FIRST)
        either = EitherClient(server.target, request.param)
        try:
            yield either
        finally:
            await either.close()


async def started(client: EitherClient, workflow: str) -> int:
    instances, _ = await client.call("list", workflow=workflow)
    return len(instances)


@pytest.mark.parametrize(
    "context, message",
    [
        (
            {"order_id": 1, "quantity": "x"},
            "context of workflow 'typed-orders' does not fit Order: Expected `int`, got `str` - at `$.quantity`",
        ),
        (
            {"quantity": 3},
            "context of workflow 'typed-orders' does not fit Order: Object missing required field `order_id`",
        ),
        (None, "does not fit Order: Object missing required field `order_id`"),
        (["not", "an", "object"], "does not fit Order: Expected `object`, got `array`"),
        (
            Other(foo=1),
            "context of workflow 'typed-orders' does not fit Order: got a Struct of type Other (pass one of "
            "type Order, or a dict of its fields)",
        ),
    ],
)
async def test_a_context_that_does_not_fit_is_refused_before_anything_is_sent(
    client: EitherClient, context: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await client.call("start", TYPED, context)
    assert message in str(err.value), err.value
    with pytest.raises(InvalidArgument) as bulk:
        await client.call("start_many", TYPED, [{"order_id": 1, "quantity": 1}, context])
    assert "context 1 of workflow 'typed-orders' does not fit Order" in str(bulk.value), bulk.value
    with pytest.raises(InvalidArgument, match="does not fit Order"):
        await client.call("create_schedule", "typed-every-hour", TYPED, context, every=3600)
    assert await started(client, "typed-orders") == 0
    assert await client.call("list_schedules") == []


async def test_contexts_that_fit_start_and_names_and_waiting_workflows_are_not_checked(
    client: EitherClient,
) -> None:
    await client.call("start", TYPED, {"order_id": 1, "quantity": 2})
    await client.call("start", TYPED, Order(order_id=2, quantity=3))
    await client.call("start_many", TYPED, [{"order_id": 3, "quantity": 1}, Order(order_id=4, quantity=1)])
    assert await started(client, "typed-orders") == 4
    # by name the client does not know the type; the server takes any object
    await client.call("start", "typed-orders", {"order_id": 1, "quantity": "x"})
    assert await started(client, "typed-orders") == 5
    # a user task first: its data may complete the context
    await client.call("start", WAITS_FIRST, {"quantity": 3})
    assert await started(client, "typed-approval") == 1


async def test_a_bulk_start_says_which_calls_went_before_the_context_that_does_not_fit(
    client: EitherClient,
) -> None:
    contexts = [{"order_id": i, "quantity": 1} for i in range(3)] + [{"order_id": "four", "quantity": 1}]
    with pytest.raises(InvalidArgument) as err:
        await client.call("start_many", TYPED, contexts, chunk_size=2, request_id="bulk-1")
    text = str(err.value)
    assert "context 3 of workflow 'typed-orders' does not fit Order: Expected `int`, got `str`" in text
    assert "contexts 0 to 1 were started (repeated with the same request_id" in text, text
    assert await started(client, "typed-orders") == 2  # the first call's; the second was not sent


async def test_register_given_the_builder_says_to_build_it(client: EitherClient) -> None:
    unbuilt = Workflow.define("typed-unbuilt", Order).step(price)
    with pytest.raises(TypeError) as err:
        await client.call("register", unbuilt)
    assert "got the Workflow builder 'typed-unbuilt': call .build() on it" in str(err.value), err.value
    with pytest.raises(TypeError, match="got int"):
        await client.call("register", 42)


DICTS = Workflow.define("dict-orders").user_task("approve").step(lambda ctx: ctx, name="echo").build()


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
async def test_a_nan_or_an_infinity_is_refused_naming_where_it_is(
    client: EitherClient, number: float
) -> None:
    """JSON has no NaN or infinity (msgspec writes null): sent, the value would come back as None."""
    await client.call("register", DICTS)
    bad = {"quote": {"prices": [1.5, number]}}
    where = f"['quote']['prices'][1] is {number!r}: JSON has no NaN or infinity"
    with pytest.raises(
        InvalidArgument, match=rf"^the context{where}".replace("[", r"\[").replace("]", r"\]")
    ):
        await client.call("start", "dict-orders", bad)
    with pytest.raises(InvalidArgument) as bulk:
        await client.call("start_many", "dict-orders", [{"ok": 1.0}, bad])
    assert f"context 1{where}" in str(bulk.value), bulk.value
    with pytest.raises(InvalidArgument, match="does not fit Order|JSON has no NaN"):
        await client.call("start", TYPED, {"order_id": 1, "quantity": 1, "note": "x", **bad})
    with pytest.raises(InvalidArgument, match="JSON has no NaN"):
        await client.call("create_schedule", "nan-every-hour", "dict-orders", bad, every=3600)
    assert await started(client, "dict-orders") == 0
    assert await client.call("list_schedules") == []

    info = await client.call("start", "dict-orders", {"quote": {"prices": [1.5, None]}})  # None is fine
    with pytest.raises(InvalidArgument) as data:
        await client.call("complete_user_task", info.instance_id, "approve", bad)
    assert f"the user task's data{where}" in str(data.value), data.value
    with pytest.raises(InvalidArgument) as sent:
        await client.call("signal", info.instance_id, "go", {"level": number})
    assert f"the signal's data['level'] is {number!r}" in str(sent.value), sent.value
    now = await client.call("get", info.instance_id)
    assert (now.status, now.context) == ("RUNNING", {"quote": {"prices": [1.5, None]}}), now


async def test_a_value_json_would_read_back_as_another_type_is_refused_naming_where(
    client: EitherClient,
) -> None:
    """msgspec writes a date as a string, a set as a list: a start's context holding one was
    stored changed (an outside SDK trial: ``{"d": date(2024, 1, 1)}`` came back ``'2024-01-01'``)."""
    import datetime

    await client.call("register", DICTS)
    bad = {"order": {"placed": datetime.date(2024, 1, 1)}}
    with pytest.raises(InvalidArgument, match=r"^the context\['order'\]\['placed'\] is of type date"):
        await client.call("start", "dict-orders", bad)
    with pytest.raises(InvalidArgument, match=r"is of type set"):
        await client.call("start", "dict-orders", {"tags": {"a"}})
    assert await started(client, "dict-orders") == 0
    info = await client.call("start", "dict-orders", {"ok": True})
    with pytest.raises(InvalidArgument, match=r"the user task's data\['when'\] is of type datetime"):
        await client.call(
            "complete_user_task", info.instance_id, "approve", {"when": datetime.datetime(2024, 1, 1)}
        )
    now = await client.call("get", info.instance_id)
    assert (now.status, now.context) == ("RUNNING", {"ok": True}), now


async def test_a_workflow_builder_not_built_is_refused_naming_build(client: EitherClient) -> None:
    """``client.start(Workflow.define(...).step(f), ...)`` met protobuf's "bad argument type for
    built-in operation" (a docs trial)."""
    builder = Workflow.define("not-built").step(lambda ctx: ctx, name="a")
    with pytest.raises(
        TypeError,
        match=r"start\(\) takes a workflow name or a Blueprint, got the Workflow builder 'not-built': call \.build\(\)",
    ):
        await client.call("start", builder, {})
    with pytest.raises(TypeError, match=r"call \.build\(\)"):
        await client.call("start_many", builder, [{}])
