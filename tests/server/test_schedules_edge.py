"""Schedules at the gRPC edge and in the ``wiggle schedule`` command (docs/semantics.md#schedules).

Bad input gets INVALID_ARGUMENT or NOT_FOUND with a message naming the problem, and changes
nothing; the command's verbs work against a real server, with the documented exit codes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator

import grpc
import msgspec
import pytest

from wiggle import Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.errors import InvalidArgument, NotFound
from wiggle.testing import EmbeddedServer


def noop(ctx: dict) -> dict:
    return ctx


FLOW = Workflow.define("sched-edge").step(noop).build()


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(max_payload_bytes=4096) as server:
        await server.client.register(FLOW)
        await server.client.create_schedule("keep", FLOW, {"a": 1}, every=60)
        yield server


def _spec(**fields: object) -> pb.ScheduleSpec:
    base: dict[str, object] = {"id": "new", "workflow": FLOW.name, "interval_millis": 5000}
    base.update(fields)
    return pb.ScheduleSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "request_", "code", "needle"),
    [
        ("CreateSchedule", _spec(interval_millis=0, cron="*/5 * * *"), "INVALID_ARGUMENT", "has 4 fields"),
        (
            "CreateSchedule",
            _spec(interval_millis=0, cron="0 25 * * *"),
            "INVALID_ARGUMENT",
            "cron expression",
        ),
        (
            "CreateSchedule",
            _spec(interval_millis=0, cron="0 3 * * *", timezone="Nowhere/Special"),
            "INVALID_ARGUMENT",
            "'Nowhere/Special' is not a known IANA time zone",
        ),
        ("CreateSchedule", _spec(workflow="ghost"), "NOT_FOUND", "workflow 'ghost' is not registered"),
        (
            "CreateSchedule",
            _spec(interval_millis=0),
            "INVALID_ARGUMENT",
            "needs an interval (every, more than 0",
        ),
        ("CreateSchedule", _spec(overlap="SOMETIMES"), "INVALID_ARGUMENT", "overlap 'SOMETIMES'"),
        (
            "CreateSchedule",
            _spec(context_json=b"[1]"),
            "INVALID_ARGUMENT",
            "context_json must be a JSON object",
        ),
        (
            "CreateSchedule",
            _spec(context_json=b"{" * 1),
            "INVALID_ARGUMENT",
            "context_json is not valid JSON",
        ),
        (
            "CreateSchedule",
            _spec(context_json=msgspec.json.encode({"x": "y" * 5000})),
            "INVALID_ARGUMENT",
            "the limit is 4096 bytes",
        ),
        ("CreateSchedule", _spec(id="keep"), "FAILED_PRECONDITION", "schedule 'keep' already exists"),
        ("UpdateSchedule", _spec(id="keep", workflow="ghost"), "NOT_FOUND", "workflow 'ghost'"),
        ("UpdateSchedule", _spec(id="keep", timezone="Bad/Zone"), "INVALID_ARGUMENT", "Bad/Zone"),
        ("UpdateSchedule", _spec(id="nope"), "NOT_FOUND", "schedule 'nope' does not exist"),
        (
            "GetSchedule",
            pb.ScheduleRequest(schedule_id="nope"),
            "NOT_FOUND",
            "schedule 'nope' does not exist",
        ),
        (
            "GetSchedule",
            pb.ScheduleRequest(schedule_id=""),
            "INVALID_ARGUMENT",
            "schedule_id must not be empty",
        ),
        ("PauseSchedule", pb.ScheduleRequest(schedule_id="nope"), "NOT_FOUND", "'nope'"),
        ("ResumeSchedule", pb.ScheduleRequest(schedule_id="nope"), "NOT_FOUND", "'nope'"),
        ("DeleteSchedule", pb.ScheduleRequest(schedule_id="nope"), "NOT_FOUND", "'nope'"),
        ("TriggerSchedule", pb.ScheduleRequest(schedule_id="nope"), "NOT_FOUND", "'nope'"),
        (
            "ListSchedules",
            pb.ListSchedulesRequest(workflow=" x"),
            "INVALID_ARGUMENT",
            "surrounding whitespace",
        ),
    ],
)
async def test_bad_requests_are_refused_and_change_nothing(
    server: EmbeddedServer, method: str, request_: object, code: str, needle: str
) -> None:
    before = await server.client.list_schedules()
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(stub, method)(request_, timeout=10)
    assert err.value.code().name == code, err.value.details()
    assert needle in (err.value.details() or "")
    after = await server.client.list_schedules()
    assert [(s.schedule_id, s.workflow, s.interval_seconds, s.context, s.paused, s.fired) for s in after] == [
        (s.schedule_id, s.workflow, s.interval_seconds, s.context, s.paused, s.fired) for s in before
    ]
    items, _ = await server.client.list(page_size=100)
    assert items == []  # nothing was started


async def test_client_errors_are_wiggle_errors(server: EmbeddedServer) -> None:
    made = await server.client.create_schedule("lower", FLOW, every=5, overlap="buffer_one", catchup="all")
    assert (made.overlap, made.catchup) == ("BUFFER_ONE", "ALL")  # policies are not case-sensitive
    await server.client.delete_schedule("lower")
    with pytest.raises(InvalidArgument, match="cron expression"):
        await server.client.create_schedule("c", FLOW, cron="not a cron at all")
    with pytest.raises(NotFound, match="schedule 'zz' does not exist"):
        await server.client.get_schedule("zz")


async def _wiggle(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wiggle.cli", "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_verbs(server: EmbeddedServer) -> None:
    t = server.target
    made = await _wiggle(
        t, "schedule", "create", "nightly", FLOW.name, "--cron", "0 3 * * *", "--timezone", "Europe/Paris",
        "--context", '{"k": 2}', "--overlap", "buffer_one", "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert (info["cron"], info["timezone"], info["overlap"], info["context"]) == (
        "0 3 * * *",
        "Europe/Paris",
        "BUFFER_ONE",
        {"k": 2},
    )
    assert len(info["next_fire_times"]) == 3
    listed = await _wiggle(t, "schedule", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["SCHEDULE", "WORKFLOW", "WHEN", "NEXT", "FIRED"]
    assert sorted(row.split()[0] for row in rows) == ["keep", "nightly"]
    lowered = await _wiggle(t, "schedule", "create", "lc", FLOW.name, "--every", "60", "--overlap", "allow")
    assert lowered.returncode == 0 and "overlap ALLOW" in lowered.stdout, lowered.stderr
    wrong = await _wiggle(
        t, "schedule", "create", "wrong", FLOW.name, "--every", "60", "--overlap", "sometimes"
    )
    assert wrong.returncode == 2 and "invalid choice: 'SOMETIMES'" in wrong.stderr, wrong.stderr
    assert (await _wiggle(t, "schedule", "delete", "lc")).returncode == 0
    paused = await _wiggle(t, "schedule", "pause", "nightly")
    assert paused.returncode == 0 and "(paused)" in paused.stdout
    resumed = await _wiggle(t, "schedule", "resume", "nightly", "--json")
    assert json.loads(resumed.stdout)["paused"] is False
    fired = await _wiggle(t, "schedule", "trigger", "nightly")
    assert fired.returncode == 0, fired.stderr
    instance = await server.client.get(fired.stdout.strip())
    assert (instance.schedule_id, instance.context) == ("nightly", {"k": 2})
    gone = await _wiggle(t, "schedule", "delete", "nightly")
    assert gone.returncode == 0 and "deleted" in gone.stdout
    assert [s.schedule_id for s in await server.client.list_schedules()] == ["keep"]
    # exit codes: NOT_FOUND 3, INVALID_ARGUMENT 2
    missing = await _wiggle(t, "schedule", "delete", "nightly")
    assert missing.returncode == 3 and "NOT_FOUND" in missing.stderr
    bad = await _wiggle(t, "schedule", "create", "x", FLOW.name, "--cron", "99 * * * *")
    assert bad.returncode == 2 and "cron expression" in bad.stderr
    both = await _wiggle(t, "schedule", "create", "x", FLOW.name, "--cron", "* * * * *", "--every", "5")
    assert both.returncode == 2 and "exactly one of --every" in both.stderr
    assert [s.schedule_id for s in await server.client.list_schedules()] == ["keep"]
