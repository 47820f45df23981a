"""The memory store holds a bounded number of instances; the retention purge interval is a setting."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from wiggle import Workflow
from wiggle.errors import NotFound, ResourceExhausted
from wiggle.testing import EmbeddedServer


class Ctx(msgspec.Struct):
    n: int = 0


def idle(c: Ctx) -> Ctx:
    return c


# no worker serves this queue: every instance stays RUNNING until cancelled
PARKED = Workflow.define("parked-wf", Ctx).step(idle, queue="nobody-serves-this").build()


async def test_bound_refuses_starts_when_every_instance_runs_and_evicts_finished_first() -> None:
    async with EmbeddedServer(max_live_instances=3) as server:
        client = server.client
        await client.register(PARKED)
        running = [await client.start(PARKED, Ctx(n=i)) for i in range(3)]
        with pytest.raises(ResourceExhausted, match="holds 3 running instances.*--max-live-instances"):
            await client.start(PARKED, Ctx(n=99))
        page, _ = await client.list(page_size=10)
        assert len(page) == 3  # the refused start created nothing
        await client.cancel(running[0].instance_id)
        fourth = await client.start(PARKED, Ctx(n=4))  # the cancelled one makes room
        with pytest.raises(NotFound):
            await client.get(running[0].instance_id)
        assert (await client.get(fourth.instance_id)).status == "RUNNING"
        for kept in running[1:]:
            assert (await client.get(kept.instance_id)).status == "RUNNING"
        assert server.server.store.evicted == 1  # type: ignore[attr-defined]


async def test_no_bound_when_zero() -> None:
    # 0 turns the bound off: past what a bound of 3 refuses (above), every start is taken and kept
    async with EmbeddedServer(max_live_instances=0) as server:
        await server.client.register(PARKED)
        started = [await server.client.start(PARKED, Ctx(n=i)) for i in range(5)]
        page, _ = await server.client.list(page_size=10)
        assert sorted(i.instance_id for i in page) == sorted(s.instance_id for s in started)
        assert {i.status for i in page} == {"RUNNING"}
        assert server.server.store.evicted == 0  # type: ignore[attr-defined]


async def test_purge_interval_is_a_setting() -> None:
    async with EmbeddedServer(retention_seconds=0, purge_interval_seconds=0.05) as server:
        client = server.client
        await client.register(PARKED)
        started = await client.start(PARKED, Ctx())
        await client.cancel(started.instance_id)
        for _ in range(400):  # the purge loop runs every 50 ms; wait for it, not for a duration
            try:
                await client.get(started.instance_id)
            except NotFound:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the finished instance was never purged")


async def test_the_purge_leaves_nothing_of_a_finished_instance_behind() -> None:
    """Found by an outside soak: a purged instance's id stayed in the store's list of finished
    instances (eviction's order), which grew by one id per instance for the server's life."""
    async with EmbeddedServer(retention_seconds=0, purge_interval_seconds=0.05) as server:
        client = server.client
        store = server.server.store  # type: ignore[attr-defined]
        await client.register(PARKED)
        for round_ in range(3):
            started = [await client.start(PARKED, Ctx(n=i)) for i in range(50)]
            for info in started:
                await client.cancel(info.instance_id)
            for _ in range(400):  # the purge loop runs every 50 ms; wait for it, not for a duration
                if not store._instances:
                    break
                await asyncio.sleep(0.05)
            assert not store._instances, f"round {round_}: not purged"
            assert not store._finished and not store._history and store.ledger.used == 0, round_
