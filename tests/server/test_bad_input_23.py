"""Bad input over the wire (raw stubs), batch 23: schedules, for_each bounds, bulk request ids.

Each case answers INVALID_ARGUMENT with a message naming the problem and changes nothing; every
test runs on the memory store and, with WIGGLE_TEST_POSTGRES=1, on PostgreSQL (a schema of its own).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import msgspec
import psycopg
import pytest
from pg import STORES, TEST_DATABASE_URL, async_temp_schema
from psycopg import sql

from wiggle import Workflow
from wiggle._engine.schedules import MAX_TIMEZONE_LENGTH
from wiggle._limits import MAX_FOR_EACH_CONCURRENCY, MAX_FOR_EACH_ITEMS
from wiggle._model import MAX_NAME_LENGTH
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer

from .test_bad_input import _h  # a named handler that returns its context

WORKER = "worker-23"


PLAIN = Workflow.define("bi23-plain").step(_h("a")).build()
# the list is in the context at start: the for_each is reached before any worker step
FAN = Workflow.define("bi23-fan").for_each("xs", lambda b: b.step(_h("body")), name="fe").build()
# the widest for_each allowed: a start with a list past the limit used to fail "runaway"
WIDE = (
    Workflow.define("bi23-wide")
    .for_each("xs", lambda b: b.step(_h("body")), name="fe", concurrency=MAX_FOR_EACH_CONCURRENCY)
    .build()
)
# the list is produced by a step: the for_each is reached later
LATER = (
    Workflow.define("bi23-later")
    .step(_h("make"))
    .for_each("xs", lambda b: b.step(_h("body")), name="fe", concurrency=MAX_FOR_EACH_CONCURRENCY)
    .build()
)
FLOWS = (PLAIN, FAN, WIDE, LATER)


class Wire:
    """A server (on one store) and a raw stub on a grpc.aio channel."""

    def __init__(self, server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub, schema: str) -> None:
        self.server = server
        self.stub = stub
        self.schema = schema  # "" on the memory store

    async def fails(
        self, method: str, request, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
    ) -> str:
        """Call ``method``; assert it fails with ``code``; return the details."""
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(self.stub, method)(request, timeout=30)
        assert err.value.code() == code, f"{method}: {err.value.code()} {err.value.details()}"
        details = err.value.details() or ""
        assert details, f"{method} failed without a message"
        return details

    async def start(self, bp, context: dict) -> pb.InstanceInfo:
        return await self.stub.StartInstance(
            pb.StartInstanceRequest(workflow=bp.name, context_json=msgspec.json.encode(context)), timeout=30
        )

    async def instances(self) -> list[str]:
        response = await self.stub.ListInstances(pb.ListInstancesRequest(page_size=1000), timeout=10)
        return [i.instance_id for i in response.instances]

    async def schedules(self) -> list[pb.ScheduleInfo]:
        response = await self.stub.ListSchedules(pb.ListSchedulesRequest(), timeout=10)
        return list(response.schedules)

    async def workflows(self) -> list[tuple[str, str]]:
        response = await self.stub.ListWorkflows(pb.ListWorkflowsRequest(), timeout=10)
        return [(w.name, w.version) for w in response.workflows]

    def stored_request_ids(self) -> list[str]:
        """Every request id the store keeps (the memory store's map, or the PostgreSQL table)."""
        if not self.schema:
            return list(self.server.server.store._requests)  # type: ignore[attr-defined]
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            query = sql.SQL("SELECT request_id FROM {}.start_requests").format(sql.Identifier(self.schema))
            return [row[0] for row in conn.execute(query).fetchall()]


@pytest.fixture(params=STORES)
async def wire(request: pytest.FixtureRequest) -> AsyncIterator[Wire]:
    async with contextlib.AsyncExitStack() as stack:
        settings: dict = {"max_payload_bytes": 1 << 20}
        schema = ""
        if request.param == "postgres":
            schema = await stack.enter_async_context(async_temp_schema())
            settings["database_url"] = TEST_DATABASE_URL
            settings["database_schema"] = schema
        server = await stack.enter_async_context(EmbeddedServer(**settings))
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.target))
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        for bp in FLOWS:
            await stub.RegisterWorkflow(
                pb.RegisterWorkflowRequest(definition_json=bp.definition.to_json()), timeout=10
            )
        yield Wire(server, stub, schema)


async def still_answers(wire: Wire) -> None:
    """The server serves a normal request after the bad one."""
    info = await wire.start(PLAIN, {"ok": True})
    assert info.status == "RUNNING"


def _spec(workflow: str = PLAIN.name, context: dict | None = None, **fields: object) -> pb.ScheduleSpec:
    base: dict[str, object] = {
        "id": "s23",
        "workflow": workflow,
        "interval_millis": 60_000,
        "context_json": msgspec.json.encode(context or {}),
    }
    base.update(fields)
    return pb.ScheduleSpec(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- 1. time zones


@pytest.mark.parametrize("length", [MAX_TIMEZONE_LENGTH + 1, 300, 5000])
async def test_overlong_timezone_is_invalid_argument(wire: Wire, length: int) -> None:
    zone = "A" * length
    for method in ("CreateSchedule", "UpdateSchedule"):
        if method == "UpdateSchedule":
            await wire.stub.CreateSchedule(_spec(), timeout=10)
        before = await wire.schedules()
        details = await wire.fails(method, _spec(interval_millis=0, cron="0 3 * * *", timezone=zone))
        assert "timezone" in details and f"{length} characters" in details, details
        assert f"the limit is {MAX_TIMEZONE_LENGTH}" in details, details
        assert zone not in details  # named by its length, not echoed
        assert await wire.schedules() == before
    await still_answers(wire)


@pytest.mark.parametrize("zone", ["America", "Europe", "zone.tab", "Europe/" + "x" * 56])
async def test_a_timezone_zoneinfo_cannot_open_is_invalid_argument(wire: Wire, zone: str) -> None:
    """A directory of the zone database, or a file in it that is no zone: not a known time zone."""
    details = await wire.fails("CreateSchedule", _spec(interval_millis=0, cron="0 3 * * *", timezone=zone))
    assert f"timezone {zone!r} is not a known IANA time zone" in details, details
    assert await wire.schedules() == []
    await still_answers(wire)


async def test_the_longest_iana_names_are_accepted(wire: Wire) -> None:
    for i, zone in enumerate(["America/Argentina/ComodRivadavia", "America/Indiana/Indianapolis", "UTC"]):
        info = await wire.stub.CreateSchedule(
            _spec(id=f"z{i}", interval_millis=0, cron="0 3 * * *", timezone=zone), timeout=10
        )
        assert info.spec.timezone == zone


# ---------------------------------------------------------------------------- 2. a context that cannot start


@pytest.mark.parametrize(
    ("context", "needles"),
    [
        ({}, ["for_each 'fe'", "context key 'xs' must be a list, but it is missing"]),
        ({"xs": 5}, ["for_each 'fe'", "context key 'xs' must be a list, but it is a int"]),
        ({"xs": {"a": 1}}, ["for_each 'fe'", "must be a list, but it is a dict"]),
        (
            {"xs": [0] * (MAX_FOR_EACH_ITEMS + 1)},
            ["for_each 'fe'", f"has {MAX_FOR_EACH_ITEMS + 1} elements", f"the limit is {MAX_FOR_EACH_ITEMS}"],
        ),
    ],
    ids=["missing", "int", "dict", "too-long"],
)
async def test_schedule_whose_context_cannot_start_is_invalid_argument(
    wire: Wire, context: dict, needles: list[str]
) -> None:
    # a start with that context is refused ...
    start_details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=FAN.name, context_json=msgspec.json.encode(context)),
    )
    # ... and so is a schedule whose ticks would start with it, naming the same reason
    details = await wire.fails("CreateSchedule", _spec(FAN.name, context))
    assert "schedule 's23'" in details and FAN.name in details, details
    assert start_details in details, details
    for needle in needles:
        assert needle in details, details
    assert await wire.schedules() == []

    # an update to such a context is refused too; the schedule is unchanged
    await wire.stub.CreateSchedule(_spec(FAN.name, {"xs": [1, 2]}), timeout=10)
    before = await wire.schedules()
    details = await wire.fails("UpdateSchedule", _spec(FAN.name, context))
    for needle in needles:
        assert needle in details, details
    assert await wire.schedules() == before
    assert await wire.instances() == []  # the checks started nothing
    await still_answers(wire)


async def test_schedule_moved_to_a_workflow_its_context_cannot_start_is_refused(wire: Wire) -> None:
    await wire.stub.CreateSchedule(_spec(PLAIN.name, {"n": 1}), timeout=10)
    before = await wire.schedules()
    details = await wire.fails("UpdateSchedule", _spec(FAN.name, {"n": 1}))
    assert "for_each 'fe'" in details and "'xs' must be a list, but it is missing" in details, details
    assert await wire.schedules() == before


async def test_schedule_whose_context_can_start_is_accepted_and_starts_nothing(wire: Wire) -> None:
    info = await wire.stub.CreateSchedule(_spec(FAN.name, {"xs": [1, 2, 3]}), timeout=10)
    assert info.spec.workflow == FAN.name
    # the check ran a start without storing it: no instance exists until a tick or a trigger
    assert await wire.instances() == []
    started = await wire.stub.TriggerSchedule(pb.ScheduleRequest(schedule_id="s23"), timeout=10)
    assert started.status == "RUNNING"
    assert await wire.instances() == [started.instance_id]


# ---------------------------------------------------------------------------- 3. for_each concurrency


def _with_concurrency(concurrency: int) -> bytes:
    """FAN's definition JSON, its for_each's concurrency set (the builder would refuse it)."""
    definition = msgspec.json.decode(FAN.definition.to_json())
    definition["name"] = "bi23-conc"
    (fe,) = [n for n in definition["nodes"] if n["id"] == "fe"]
    fe["concurrency"] = concurrency
    return msgspec.json.encode(definition)


@pytest.mark.parametrize("concurrency", [MAX_FOR_EACH_CONCURRENCY + 1, 2**31 - 1])
async def test_for_each_concurrency_past_the_limit_is_invalid_argument(wire: Wire, concurrency: int) -> None:
    before = await wire.workflows()
    details = await wire.fails(
        "RegisterWorkflow", pb.RegisterWorkflowRequest(definition_json=_with_concurrency(concurrency))
    )
    assert "for_each 'fe'" in details and f"concurrency is {concurrency}" in details, details
    assert f"the limit is {MAX_FOR_EACH_CONCURRENCY}" in details, details
    assert await wire.workflows() == before
    with pytest.raises(InvalidArgument, match=f"the limit is {MAX_FOR_EACH_CONCURRENCY}"):
        Workflow.define("bi23-conc").for_each(
            "xs", lambda b: b.step(_h("body")), concurrency=concurrency
        ).build()


async def test_for_each_concurrency_at_the_limit_is_accepted(wire: Wire) -> None:
    info = await wire.stub.RegisterWorkflow(
        pb.RegisterWorkflowRequest(definition_json=_with_concurrency(MAX_FOR_EACH_CONCURRENCY)), timeout=10
    )
    assert info.name == "bi23-conc"


# ---------------------------------------------------------------------------- 4. for_each list length


@pytest.mark.parametrize("bp", [FAN, WIDE], ids=["default-concurrency", "widest"])
async def test_for_each_list_past_the_limit_refuses_the_start(wire: Wire, bp) -> None:
    length = MAX_FOR_EACH_ITEMS + 1
    details = await wire.fails(
        "StartInstance",
        pb.StartInstanceRequest(workflow=bp.name, context_json=msgspec.json.encode({"xs": [0] * length})),
    )
    assert "for_each 'fe'" in details and f"has {length} elements" in details, details
    assert f"the limit is {MAX_FOR_EACH_ITEMS}" in details and "runaway" not in details, details
    assert await wire.instances() == []
    # the same for one context of a bulk start, which then starts nothing
    details = await wire.fails(
        "StartInstances",
        pb.StartInstancesRequest(
            workflow=bp.name,
            contexts_json=[b'{"xs": [1]}', msgspec.json.encode({"xs": [0] * length})],
        ),
    )
    assert "context 1 of 2" in details and f"has {length} elements" in details, details
    assert await wire.instances() == []
    await still_answers(wire)


async def test_for_each_list_at_the_limit_starts(wire: Wire) -> None:
    info = await wire.start(FAN, {"xs": [0] * MAX_FOR_EACH_ITEMS})
    assert info.status == "RUNNING", info.error


async def test_for_each_list_grown_past_the_limit_later_fails_the_instance_clearly(wire: Wire) -> None:
    info = await wire.start(LATER, {})
    assert info.status == "RUNNING"
    polled = await wire.stub.PollTasks(
        pb.PollTasksRequest(worker_id=WORKER, queues=[LATER.name], max_tasks=1, wait_millis=2000), timeout=10
    )
    (task,) = polled.tasks
    length = MAX_FOR_EACH_ITEMS + 1
    await wire.stub.CompleteTask(
        pb.CompleteTaskRequest(
            task_id=task.task_id, lease_owner=WORKER, context_json=msgspec.json.encode({"xs": [0] * length})
        ),
        timeout=30,
    )
    done = await wire.stub.GetInstance(pb.GetInstanceRequest(instance_id=info.instance_id), timeout=10)
    assert done.status == "FAILED"
    assert "runaway" not in done.error, done.error
    assert "for_each 'fe'" in done.error and f"has {length} elements" in done.error, done.error
    assert f"the limit is {MAX_FOR_EACH_ITEMS}" in done.error, done.error


# ---------------------------------------------------------------------------- 5. bulk start request ids


async def test_bulk_request_id_that_would_be_stored_too_long_is_invalid_argument(wire: Wire) -> None:
    contexts = [b"{}", b"{}"]
    for rid_length, first_index in (
        (MAX_NAME_LENGTH - 1, 0),
        (MAX_NAME_LENGTH, 0),
        (MAX_NAME_LENGTH - 2, 10),
    ):
        rid = "r" * rid_length
        details = await wire.fails(
            "StartInstances",
            pb.StartInstancesRequest(
                workflow=PLAIN.name, contexts_json=contexts, request_id=rid, first_index=first_index
            ),
        )
        assert "request_id" in details and f"{rid_length} characters" in details, details
        assert f"the limit is {MAX_NAME_LENGTH}" in details, details
    assert await wire.instances() == []
    assert wire.stored_request_ids() == []


async def test_bulk_request_ids_stored_are_never_longer_than_the_limit(wire: Wire) -> None:
    rid = "r" * (MAX_NAME_LENGTH - 2)  # "<rid>:0" and "<rid>:9" are exactly the limit
    request = pb.StartInstancesRequest(workflow=PLAIN.name, contexts_json=[b"{}"] * 10, request_id=rid)
    first = await wire.stub.StartInstances(request, timeout=10)
    assert len(first.instance_ids) == 10
    again = await wire.stub.StartInstances(request, timeout=10)  # idempotent: the same instances
    assert list(again.instance_ids) == list(first.instance_ids)
    single = "s" * MAX_NAME_LENGTH
    one = await wire.stub.StartInstance(
        pb.StartInstanceRequest(workflow=PLAIN.name, request_id=single), timeout=10
    )
    stored = wire.stored_request_ids()
    assert sorted(stored) == sorted([f"{rid}:{i}" for i in range(10)] + [single])
    assert max(len(r) for r in stored) == MAX_NAME_LENGTH
    assert len(await wire.instances()) == 11 and one.instance_id in await wire.instances()
