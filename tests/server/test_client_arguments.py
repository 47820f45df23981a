"""What the clients take, as the test kit does (wiggle/_testing/environment.py), on both clients:

- every call that names an instance takes its id or the InstanceInfo a start or a read returned
  (an InstanceInfo was protobuf's "TypeError: bad argument type for built-in operation");
  anything else is InvalidArgument naming the argument;
- every duration is a timedelta or seconds: a schedule's ``every`` (a timedelta was
  "TypeError: type datetime.timedelta doesn't define __round__ method"), a wait's ``timeout``
  and the client's ``patience``;
- a start's context that is not a JSON object (a list, a string) is refused before it is sent,
  naming the argument, instead of by the server naming its wire field ("context_json must be a
  JSON object, got list");
- a list's context filter sends a number or a bool as its JSON text (``{"vip": True}`` sent
  "True", and found nothing), and refuses None, a list or a dict naming the field.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from both_clients import EitherClient
from pg import STORES, TEST_DATABASE_URL, temp_schema

from wiggle import AsyncClient, Client, FailedPrecondition, InvalidArgument, Worker, Workflow
from wiggle.testing import EmbeddedServer


def finish(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "finished": True}


FLOW = Workflow.define("client-arguments").user_task("approve").wait_signal("go").step(finish).build()
QUICK = Workflow.define("client-arguments-quick").step(finish).build()


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer() as server, server.worker([FLOW, QUICK]):
        await server.client.register(FLOW)
        await server.client.register(QUICK)
        yield server


@pytest.fixture(params=[False, True], ids=["async", "blocking"])
async def client(request: pytest.FixtureRequest, server: EmbeddedServer) -> AsyncIterator[EitherClient]:
    either = EitherClient(server.target, request.param)
    try:
        yield either
    finally:
        await either.close()


async def test_every_call_naming_an_instance_takes_its_info(client: EitherClient) -> None:
    info = await client.call("start", FLOW, {"n": 1})
    assert (await client.call("get", info)).instance_id == info.instance_id
    await client.call("complete_user_task", info, "approve", {"approved": True})
    sent = await client.call("signal", info, "go", {"x": 1})
    assert sent.instance.instance_id == info.instance_id
    done = await client.call("result", info, timedelta(seconds=30))
    assert done.context == {"n": 1, "approved": True, "x": 1, "finished": True}
    assert (await client.call("wait", done, timedelta(seconds=1))).status == "COMPLETED"
    assert "finish" in [e.node_id for e in await client.call("history", done)]
    snapshot, changed = await client.call("cancel", done)
    assert snapshot.instance_id == info.instance_id and not changed
    with pytest.raises(FailedPrecondition):  # the id got through: a COMPLETED one is not resumed
        await client.call("retry", done)


@pytest.mark.parametrize(
    "method, args",
    [
        ("get", ()),
        ("wait", (1.0,)),
        ("result", (1.0,)),
        ("cancel", ()),
        ("history", ()),
        ("complete_user_task", ("approve",)),
        ("signal", ("go",)),
        ("retry", ()),
    ],
)
async def test_an_instance_named_by_anything_else_is_invalid_argument_naming_it(
    client: EitherClient, method: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await client.call(method, 42, *args)
    assert str(err.value) == "instance_id must be an instance id (a str) or an InstanceInfo, got int"


async def test_a_schedule_every_takes_a_timedelta(client: EitherClient) -> None:
    made = await client.call("create_schedule", "daily", QUICK, {"n": 1}, every=timedelta(days=1))
    assert made.interval_seconds == 86400
    changed = await client.call("update_schedule", "daily", QUICK, {"n": 1}, every=timedelta(minutes=90))
    assert changed.interval_seconds == 5400
    with pytest.raises(InvalidArgument, match="^every must be a timedelta"):
        await client.call("create_schedule", "weekly", QUICK, every="7d")


async def test_a_wait_timeout_takes_a_timedelta_and_refuses_other_things(client: EitherClient) -> None:
    info = await client.call("start", QUICK, {"n": 2})
    assert (await client.call("result", info, timeout=timedelta(seconds=30))).context["finished"]
    for method in ("wait", "result"):
        with pytest.raises(InvalidArgument, match="^timeout must be a timedelta \\(or seconds\\), got '5'"):
            await client.call(method, info, timeout="5")
    waiting = await client.call("start", FLOW, {})
    with pytest.raises(TimeoutError, match="still RUNNING after 0.2 s"):
        await client.call("result", waiting, timedelta(milliseconds=200))
    # a negative timeout was taken for none at all: wait answered with a snapshot, saying nothing
    for method in ("wait", "result"):
        for negative in (-1, timedelta(seconds=-1), float("nan")):
            with pytest.raises(InvalidArgument, match="^timeout must be >= 0 seconds"):
                await client.call(method, waiting, timeout=negative)
    assert (await client.call("wait", waiting, timeout=0)).status == "RUNNING"  # 0: as it is now


async def test_a_negative_duration_is_named_in_seconds(client: EitherClient) -> None:
    """It was shown as Python's repr of the timedelta: "got datetime.timedelta(days=-1, seconds=86399)"."""
    with pytest.raises(InvalidArgument) as refused:
        await client.call("start", QUICK, {"n": 1}, start_delay=timedelta(seconds=-1))
    assert str(refused.value) == "start_delay must not be negative, got -1 s"


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_patience_takes_a_timedelta(blocking: bool) -> None:
    kind = Client if blocking else AsyncClient
    made: Any = kind("127.0.0.1:1", patience=timedelta(seconds=1.5))
    try:
        assert made.patience == 1.5
    finally:
        closed = made.close()
        if not blocking:
            await closed
    with pytest.raises(ValueError, match="patience must be >= 0 seconds"):
        kind("127.0.0.1:1", patience=timedelta(seconds=-1))


@pytest.mark.parametrize("context, kind", [([1, 2], "list"), ("text", "str"), (42, "int")])
async def test_a_context_that_is_not_an_object_is_refused_naming_the_argument(
    client: EitherClient, context: Any, kind: str
) -> None:
    refusal = re.escape(f"must be a dict (a JSON object) or a msgspec.Struct, got {kind}")
    with pytest.raises(InvalidArgument, match=f"^context {refusal}$"):
        await client.call("start", QUICK, context)
    with pytest.raises(InvalidArgument, match=f"^context {refusal}$"):
        await client.call("start", QUICK.name, context)  # by name too: nothing to check it against
    with pytest.raises(InvalidArgument, match=f"^context {refusal}$"):
        await client.call("create_schedule", "s", QUICK, context, every=60)
    with pytest.raises(InvalidArgument, match=f"^context 1 {refusal}$"):
        await client.call("start_many", QUICK, [{}, context])
    instances, _ = await client.call("list", workflow=QUICK.name)
    assert instances == []  # nothing was started
    assert await client.call("list_schedules") == []


@pytest.fixture(params=STORES)
async def searched(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    """A server on each store holding one instance of SEARCHED with CONTEXT (and one with none)."""
    with contextlib.ExitStack() as stack:
        settings: dict[str, Any] = {}
        if request.param == "postgres":
            settings = {
                "database_url": TEST_DATABASE_URL,
                "database_schema": stack.enter_context(temp_schema()),
            }
        async with EmbeddedServer(**settings) as server:
            await server.client.register(SEARCHED)
            await server.client.start(SEARCHED, CONTEXT)
            await server.client.start(SEARCHED, {})
            yield server


SEARCHED = Workflow.define("client-arguments-search").user_task("hold").build()
CONTEXT = {
    "vip": True,
    "off": False,
    "total": 1e20,
    "ratio": 1.5,
    "n": 3,
    "big": 2**70,
    "s": "x",
    "items": [1, 2],
    "nested": {"a": 1, "b": [True, None]},
    "nul": ["a\x00b"],
    "none": None,
}


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_context_filter_sends_numbers_and_booleans_as_json_text(
    searched: EmbeddedServer, blocking: bool
) -> None:
    """``list(context={"vip": True})`` sent "True" and found nothing; the stores compare JSON's
    "true" (docs/dashboard.md#searching), and an object or an array as its compact JSON text."""
    client = EitherClient(searched.target, blocking)
    try:

        async def found(context: Any) -> int:
            instances, _ = await client.call("list", workflow=SEARCHED.name, context=context)
            return len(instances)

        for field, value in [("vip", True), ("off", False), ("total", 1e20), ("ratio", 1.5), ("n", 3)]:
            assert await found({field: value}) == 1, (field, value)
        assert await found({"big": 2**70}) == 1
        assert await found({"vip": "true", "n": "3", "total": "1e20", "s": "x"}) == 1  # as text too
        assert await found({"vip": False}) == 0
        assert await found({"n": 3.0}) == 0  # 3.0 is JSON's "3.0": a float field's value, not 3
        # an object or an array: its compact JSON text, as stored, on either store
        assert await found({"items": "[1,2]", "nested": '{"a":1,"b":[true,null]}'}) == 1
        assert await found({"items": "[1, 2]"}) == 0
        assert await found({"nul": '["ab"]'}) == 1  # U+0000 is left out (PostgreSQL's text has none)
        for value, kind in [([1, 2], "list"), ({"a": 1}, "dict"), ((1, 2), "tuple")]:
            with pytest.raises(InvalidArgument) as err:
                await found({"items": value})
            assert str(err.value).startswith(
                f"context filter 'items' takes a str, a number or a bool, got {kind} (an object or "
                "an array field matches its compact JSON text: pass that string, e.g. '[1,2]')"
            ), err.value
        with pytest.raises(
            InvalidArgument, match="^context filter 'none' is None: a null field never matches"
        ):
            await found({"none": None})
        with pytest.raises(InvalidArgument, match="^context filter 'ratio' is nan: JSON has no NaN"):
            await found({"ratio": float("nan")})
        with pytest.raises(
            InvalidArgument, match="^context filter 'when' takes a str, a number or a bool, got date"
        ):
            await found({"when": datetime.date(2024, 1, 1)})
        with pytest.raises(InvalidArgument, match=r"^context must be a dict of field -> value .*got list$"):
            await found([("s", "x")])
        with pytest.raises(InvalidArgument, match="^context's field names must be strings, got int$"):
            await found({1: "x"})
    finally:
        await client.close()


@pytest.mark.parametrize(
    "method, args, kwargs, argument",
    [
        ("start", (QUICK, {}), {"correlation_id": 42}, "correlation_id"),
        ("start", (QUICK, {}), {"request_id": 42}, "request_id"),
        ("start", (QUICK, {}), {"version": 1}, "version"),
        ("start_many", (QUICK, [{}]), {"correlation_id": 42}, "correlation_id"),
        ("start_many", (QUICK, [{}]), {"request_id": 42}, "request_id"),
        ("signal", ("IID", 5), {}, "name"),
        ("signal", ("IID", "go"), {"signal_id": 5}, "signal_id"),
        ("signal", ("IID", "go"), {"sender": 5}, "sender"),
        ("cancel", ("IID", 5), {}, "reason"),
        ("complete_user_task", ("IID", 5), {}, "name"),
        ("retry", ("IID",), {"from_node": 5}, "from_node"),
        ("retry", ("IID",), {"requested_by": 5}, "requested_by"),
        ("list", (), {"text": 5}, "text"),
        ("list", (), {"node": 5}, "node"),
        ("list", (), {"status": 5}, "status"),
        ("list", (), {"correlation_id": 5}, "correlation_id"),
        ("list", (), {"parent_id": 5}, "parent_id"),
        ("list", (), {"schedule_id": 5}, "schedule_id"),
        ("list", (), {"page_token": 5}, "page_token"),
        ("get_workflow", (QUICK.name, 1), {}, "version"),
        ("get_schedule", (5,), {}, "schedule_id"),
        ("trigger_schedule", (5,), {}, "schedule_id"),
        ("create_schedule", ("s", QUICK), {"every": 60, "timezone": 5}, "timezone"),
        ("set_queue_limit", (5,), {}, "queue"),
    ],
)
async def test_a_text_argument_of_another_type_is_refused_naming_it(
    client: EitherClient, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], argument: str
) -> None:
    """Each was protobuf's "TypeError: bad argument type for built-in operation", naming nothing;
    ``dedup_key=5`` said "dedup_key must be a string, got int", as each now does."""
    if "IID" in args:
        info = await client.call("start", FLOW, {})
        args = tuple(info.instance_id if a == "IID" else a for a in args)
    with pytest.raises(InvalidArgument) as err:
        await client.call(method, *args, **kwargs)
    assert str(err.value) == f"{argument} must be a string, got int"
    with pytest.raises(InvalidArgument, match="^dedup_key must be a string, got int$"):
        await client.call("start", QUICK, {}, dedup_key=5)


async def test_a_blueprint_names_its_workflow_wherever_a_workflow_name_is_taken(client: EitherClient) -> None:
    """``list(workflow=bp)``, ``get_workflow(bp)``, ``list_workflows(bp)`` and
    ``list_schedules(bp)`` met protobuf's "bad argument type"; ``start`` and ``register`` took one."""
    info = await client.call("start", QUICK, {"n": 1})
    instances, _ = await client.call("list", workflow=QUICK)
    assert [i.instance_id for i in instances] == [info.instance_id]
    assert (await client.call("get_workflow", QUICK)).name == QUICK.name
    assert [w.name for w in await client.call("list_workflows", QUICK)] == [QUICK.name]
    await client.call("create_schedule", "hourly", QUICK, {}, every=3600)
    assert [s.schedule_id for s in await client.call("list_schedules", QUICK)] == ["hourly"]
    assert await client.call("list_schedules", FLOW) == []
    for method, args, kwargs, named in [
        ("list", (), {"workflow": 5}, r"list\(\) takes a workflow name or a Blueprint as workflow, got int"),
        ("get_workflow", (5,), {}, r"get_workflow\(\) takes a workflow name or a Blueprint as name, got int"),
        ("list_workflows", (5,), {}, r"list_workflows\(\) takes a workflow name or a Blueprint as name"),
        ("list_schedules", (5,), {}, r"list_schedules\(\) takes a workflow name or a Blueprint as workflow"),
    ]:
        with pytest.raises(TypeError, match=f"^{named}"):
            await client.call(method, *args, **kwargs)


async def test_a_list_takes_aware_datetimes_and_refuses_other_times_and_page_sizes(
    client: EitherClient,
) -> None:
    """``created_after=<datetime>`` met "'datetime.datetime' object cannot be interpreted as an
    integer"; an int is epoch milliseconds, as before."""
    info = await client.call("start", QUICK, {})
    now = datetime.datetime.now(datetime.timezone.utc)
    hour = timedelta(hours=1)

    async def ids(**kwargs: Any) -> list[str]:
        instances, _ = await client.call("list", workflow=QUICK.name, **kwargs)
        return [i.instance_id for i in instances]

    assert await ids(created_after=now - hour) == [info.instance_id]
    assert await ids(created_after=now + hour) == []
    assert await ids(created_before=now - hour) == []
    assert await ids(created_before=now + hour, created_after=now - hour) == [info.instance_id]
    assert await ids(created_after=int((now + hour).timestamp() * 1000)) == []  # epoch ms
    assert await ids(created_after=int((now - hour).timestamp() * 1000)) == [info.instance_id]
    with pytest.raises(
        InvalidArgument, match="^created_after must be timezone-aware, got the naive datetime"
    ):
        await ids(created_after=datetime.datetime(2024, 1, 1))
    with pytest.raises(
        InvalidArgument,
        match=r"^created_before must be a timezone-aware datetime or epoch milliseconds \(an int\), got str$",
    ):
        await ids(created_before="2024-01-01")
    with pytest.raises(InvalidArgument, match="^created_after must be .* got bool$"):
        await ids(created_after=True)
    for size in (True, "10", 2.5, -1):
        with pytest.raises(InvalidArgument, match="^page_size must be a whole number"):
            await ids(page_size=size)


async def test_data_and_contexts_are_refused_naming_the_argument_not_the_wire_field(
    client: EitherClient,
) -> None:
    """``signal(iid, "go", [1, 2])`` said "data_json must be a JSON object, got list",
    ``complete_user_task`` "payload_json ...", a start over the payload limit "context_json is
    2000008 bytes": each named a wire field the caller never wrote."""
    info = await client.call("start", FLOW, {"n": 1})
    object_refusal = "must be a dict (a JSON object) or a msgspec.Struct, got list"
    with pytest.raises(InvalidArgument, match=f"^data {re.escape(object_refusal)}$"):
        await client.call("complete_user_task", info, "approve", [1, 2])
    with pytest.raises(InvalidArgument, match=f"^data {re.escape(object_refusal)}$"):
        await client.call("signal", info, "go", [1, 2])
    with pytest.raises(InvalidArgument, match=f"^context {re.escape(object_refusal)}$"):
        await client.call("retry", info, context=[1, 2])
    big = {"q": "x" * 2_000_000}
    size = len(json.dumps(big, separators=(",", ":")))
    over = f"is {size} bytes; the limit is 1048576 bytes (the server's WIGGLE_MAX_PAYLOAD_BYTES"
    with pytest.raises(InvalidArgument, match=f"^context {re.escape(over)}"):
        await client.call("start", QUICK, big)
    with pytest.raises(InvalidArgument, match=f"^context {re.escape(over)}"):
        await client.call("create_schedule", "big", QUICK, big, every=60)
    with pytest.raises(InvalidArgument, match=f"^data {re.escape(over)}"):
        await client.call("complete_user_task", info, "approve", big)
    await client.call("complete_user_task", info, "approve", {"ok": True})
    with pytest.raises(InvalidArgument, match=f"^data {re.escape(over)}"):
        await client.call("signal", info, "go", big)
    now = await client.call("get", info)
    assert now.context == {"n": 1, "ok": True}, now


@pytest.mark.parametrize(
    "target, message",
    [
        (
            "http://127.0.0.1:47105",
            "server address 'http://127.0.0.1:47105' is a URL (http://): a target is host:port, "
            "e.g. '127.0.0.1:47105'",
        ),
        (
            "https://wiggle.example",
            "server address 'https://wiggle.example' is a URL (https://): a target is host:port, "
            "e.g. 'wiggle.example:7233' (a wiggle server listens on 7233 unless told otherwise)",
        ),
        ("grpc://[::1]:5", "is a URL (grpc://): a target is host:port, e.g. '[::1]:5'"),
        (
            "127.0.0.1",
            "server address '127.0.0.1' has no port: add it, e.g. '127.0.0.1:7233' (a wiggle server "
            "listens on 7233 unless told otherwise); without one gRPC dials port 443",
        ),
        ("[::1]", "server address '[::1]' has no port: add it, e.g. '[::1]:7233'"),
        ("localhost:http", "server address 'localhost:http' is not host:port"),
        # a mistyped port reached another server: gRPC took 112746 as 112746 - 65536
        ("127.0.0.1:112746", "server address '127.0.0.1:112746': port 112746 is not between 1 and 65535"),
        ("127.0.0.1:0", "port 0 is not between 1 and 65535"),
        (["127.0.0.1:1", "http://127.0.0.2:2"], "server address 'http://127.0.0.2:2' is a URL"),
        ("127.0.0.1:1,localhost", "server address 'localhost' has no port"),
    ],
)
def test_a_target_that_is_a_url_or_has_no_port_is_refused_at_once(target: Any, message: str) -> None:
    """``Client("http://127.0.0.1:47105")`` waited 3 s and said "Unavailable errors resolving
    http://..."; ``Client("127.0.0.1")`` dialled port 443. A worker's target is checked when it is
    made (its names are resolved at its start), and ``--target`` alike (tests/integration/test_bad_settings.py)."""
    for make in (Client, AsyncClient):
        with pytest.raises(ValueError) as err:
            make(target)
        assert message in str(err.value), err.value
    with pytest.raises(ValueError) as err:
        Worker(target, [QUICK])
    assert message in str(err.value), err.value


@pytest.mark.parametrize(
    "target", ["127.0.0.1:7233", "[::1]:7233", "dns:///wiggle.internal:7233", "unix:/tmp/w.sock"]
)
def test_host_port_and_grpc_s_own_target_forms_are_taken(target: str) -> None:
    with Client(target) as made:
        assert made.target == target
    Worker(target, [QUICK])
