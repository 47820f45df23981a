"""docs/semantics.md#schedules: a schedule starts instances that workers run, in every store and mode.

Real time here (a one-second interval, the shortest): tests wait for what must happen, with a
generous ceiling, and never assert on how long it took. The tick rules themselves (catch-up,
overlap, one instance per tick) are checked in virtual time in tests/server/test_schedules.py.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from wiggle import InstanceInfo, InvalidArgument
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.testing import EmbeddedServer

from .conftest import Harness


async def _scheduled(server: EmbeddedServer, schedule_id: str) -> list[InstanceInfo]:
    items, _ = await server.client.list(correlation_id=f"schedule:{schedule_id}", page_size=1000)
    return items


async def _until(
    server: EmbeddedServer, schedule_id: str, count: int, timeout: float = 30.0
) -> list[InstanceInfo]:
    """The schedule's instances once ``count`` of them finished (fails after ``timeout`` s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        items = await _scheduled(server, schedule_id)
        if sum(i.finished for i in items) >= count:
            return items
        assert loop.time() < deadline, f"{len(items)} instances, fewer than {count} finished: {items}"
        await asyncio.sleep(0.2)


async def test_interval_schedule_runs_through_workers(harness: Harness) -> None:
    def bump(ctx: dict[str, Any]) -> dict[str, Any]:
        return {**ctx, "n": ctx["n"] + 1}

    def double(ctx: dict[str, Any]) -> dict[str, Any]:
        return {**ctx, "n": ctx["n"] * 2}

    flow = harness.define("tick").step(bump).step(double).build()
    sid = f"every-second-{uuid.uuid4().hex[:8]}"
    async with harness.running([flow]) as (server, _):
        client = server.client
        created = await client.create_schedule(sid, flow, {"n": 1}, every=1, overlap="ALLOW")
        assert created.interval_seconds == 1 and len(created.next_fire_times) == 3
        items = await _until(server, sid, 2)
        done = [i for i in items if i.finished]
        for info in done:
            assert (info.status, info.context, info.schedule_id) == ("COMPLETED", {"n": 4}, sid)
            assert info.correlation_id == f"schedule:{sid}" and info.schedule_tick_at > 0
        ticks = [i.schedule_tick_at for i in items]
        assert len(set(ticks)) == len(ticks)  # one instance per tick
        assert all((t - created.next_fire_times[0]) % 1000 == 0 for t in ticks)

        paused = await client.pause_schedule(sid)
        assert paused.paused and paused.next_fire_times == ()
        before = len(await _scheduled(server, sid))
        triggered = await client.trigger_schedule(sid)  # a trigger works while paused
        assert triggered.schedule_id == sid
        info = await harness.finish(server, triggered.instance_id)
        assert info.context == {"n": 4}
        assert len(await _scheduled(server, sid)) == before + 1

        listed = await client.list_schedules(flow.name)
        assert [s.schedule_id for s in listed] == [sid]
        assert listed[0].fired == before + 1
        await client.delete_schedule(sid)
        assert await client.list_schedules(flow.name) == []
        # the instances it started stay
        assert len(await _scheduled(server, sid)) == before + 1


async def test_an_interval_with_a_time_zone_is_refused_by_the_client_and_the_server(
    server_harness: Harness,
) -> None:
    """An outside trial: ``create_schedule(..., every=60, timezone="Europe/Paris")`` was taken and
    the zone stored on an interval, where it means nothing (``wiggle schedule create --every 60
    --timezone ...`` was refused). Now the client refuses it, and the server a raw request with
    both; UTC, the default every client sends with an interval, is still taken."""
    flow = server_harness.define("zoned").step(lambda ctx: ctx, name="s").build()
    cron_id, every_id = f"{flow.name}-cron", f"{flow.name}-every"
    async with server_harness.server() as server:
        client = server.client
        await client.register(flow)
        await client.create_schedule(cron_id, flow, {}, cron="0 3 * * *", timezone="Europe/Paris")
        await client.create_schedule(every_id, flow, {}, every=60)
        try:
            before = await client.list_schedules(flow)
            for call in (client.create_schedule, client.update_schedule):
                with pytest.raises(InvalidArgument) as err:
                    await call(every_id, flow, {}, every=60, timezone="Europe/Paris")
                assert str(err.value).startswith(
                    "timezone 'Europe/Paris' applies to a cron schedule only: every=60 ticks every so many"
                ), str(err.value)
            async with grpc.aio.insecure_channel(server.target) as channel:
                stub = pb_grpc.WiggleControlPlaneStub(channel)
                for method, sid in (("CreateSchedule", f"{flow.name}-raw"), ("UpdateSchedule", every_id)):
                    spec = pb.ScheduleSpec(
                        id=sid, workflow=flow.name, interval_millis=60_000, timezone="Europe/Paris"
                    )
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await getattr(stub, method)(spec)
                    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                    assert (refused.value.details() or "").startswith(
                        "timezone 'Europe/Paris' applies to a cron schedule only: an interval (every 60 s)"
                    ), refused.value.details()
                assert await client.list_schedules(flow) == before
                for zone in ("UTC", ""):  # what clients send with an interval: taken
                    spec = pb.ScheduleSpec(
                        id=f"{flow.name}-{zone or 'unset'}",
                        workflow=flow.name,
                        interval_millis=60_000,
                        timezone=zone,
                    )
                    assert (await stub.CreateSchedule(spec)).spec.timezone == "UTC"
            moved = await client.update_schedule(cron_id, flow, {}, every=120)  # the cron's zone is not kept
            assert (moved.interval_seconds, moved.timezone) == (120, "UTC")
        finally:  # the store is shared: a schedule left would fire on a later test's virtual clock
            for schedule in await client.list_schedules(flow):
                await client.delete_schedule(schedule.schedule_id)
