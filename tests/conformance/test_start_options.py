"""docs/flow-control.md as tests: priorities (and their aging), delayed starts, deduplication keys.

Every scenario runs on every store x execution mode (conftest.py), on the test kit's virtual
clock: time only moves when a test moves it (``advance``) or a wait skips idle time.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest

from wiggle import Client, InstanceStatus, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle.errors import InvalidArgument
from wiggle.testing import WorkflowEnvironment

from .conftest import Harness

pytestmark = pytest.mark.asyncio


def one_step(harness: Harness, log: list[Any] | None = None) -> Any:
    """A workflow of one worker step that logs its context's ``n`` (the claim order)."""
    wf = harness.define("opts")

    def work(ctx: dict[str, Any]) -> dict[str, Any]:
        if log is not None:
            log.append(ctx["n"])
        return {**ctx, "done": True}

    return wf.step(work).build()


async def assert_clean(env: WorkflowEnvironment, instance_id: str) -> None:
    """One attempt per step, nothing retried, no lease expired."""
    history = await env.history(instance_id)
    assert history, "no history"
    for entry in history:
        assert entry.attempt == 1, entry
        assert entry.outcome != "RETRY", entry
        assert "lease" not in entry.error, entry


async def listed(env: WorkflowEnvironment, **query: Any) -> list[Any]:
    """The instances ``query`` selects (one page is all these tests make)."""
    page, _ = await env.client.list(**query)
    return page


async def drain(harness: Harness, env: WorkflowEnvironment, ids: list[str]) -> None:
    """One worker with one slot: claims go one at a time, in the server's order."""
    await env.start_worker(options=harness.options(concurrency=1))
    for instance_id in ids:
        info = await env.result(instance_id)
        assert info.status == InstanceStatus.COMPLETED
        await assert_clean(env, instance_id)


# ---------------------------------------------------------------------- priorities


async def test_a_higher_priority_is_claimed_first_and_equal_priorities_stay_fifo(harness: Harness) -> None:
    log: list[Any] = []
    bp = one_step(harness, log)
    async with harness.env([bp], workers=0) as env:
        ids = []
        for n in ("low-1", "low-2", "low-3"):
            ids.append((await env.start_workflow(bp, {"n": n})).instance_id)
        for n in ("high-1", "high-2", "high-3"):
            info = await env.start_workflow(bp, {"n": n}, priority=10)
            assert info.priority == 10
            assert all(t.status == "READY" for t in info.tokens)
            ids.append(info.instance_id)
        await drain(harness, env, ids)
    assert log == ["high-1", "high-2", "high-3", "low-1", "low-2", "low-3"]


async def test_negative_priorities_go_last(harness: Harness) -> None:
    log: list[Any] = []
    bp = one_step(harness, log)
    async with harness.env([bp], workers=0) as env:
        ids = [
            (await env.start_workflow(bp, {"n": "batch"}, priority=-5)).instance_id,
            (await env.start_workflow(bp, {"n": "default"})).instance_id,
        ]
        await drain(harness, env, ids)
    assert log == ["default", "batch"]


async def test_a_waiting_step_ages_one_level_per_minute(harness: Harness) -> None:
    """The starvation bound: priority p goes as if ready p minutes earlier, no more."""
    log: list[Any] = []
    bp = one_step(harness, log)
    async with harness.env([bp], workers=0, time_skipping=False) as env:
        ids = [(await env.start_workflow(bp, {"n": "old-low"})).instance_id]  # rank t0
        await env.advance(timedelta(seconds=30))
        # ready 30 s later, one level higher: rank t0 - 30 s, ahead of old-low
        ids.append((await env.start_workflow(bp, {"n": "young-high"}, priority=1)).instance_id)
        await env.advance(timedelta(seconds=45))
        # ready 75 s later, one level higher: rank t0 + 15 s, behind old-low (it waited > 1 min)
        ids.append((await env.start_workflow(bp, {"n": "late-high"}, priority=1)).instance_id)
        # ready 75 s later, three levels higher: rank t0 - 105 s, first
        ids.append((await env.start_workflow(bp, {"n": "late-top"}, priority=3)).instance_id)
        await drain(harness, env, ids)
    assert log == ["late-top", "young-high", "old-low", "late-high"]


async def test_sub_workflows_inherit_the_parents_priority(harness: Harness) -> None:
    child_wf = harness.define("child")
    child = child_wf.step(lambda ctx: {**ctx, "child": True}, name="inner").build()
    parent = harness.define("parent").sub_workflow("call", child).build()
    async with harness.env([child, parent]) as env:
        info = await env.start_workflow(parent, {}, priority=7)
        done = await env.result(info)
        assert done.status == InstanceStatus.COMPLETED
        child_ids = [e.child_id for e in await env.history(info) if e.child_id]
        assert child_ids
        for child_id in child_ids:
            assert (await env.client.get(child_id)).priority == 7


async def test_a_schedule_gives_its_priority_to_every_instance_it_starts(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp]) as env:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        schedule = await env.create_schedule(sid, bp, {"n": 0}, every=60, priority=-20)
        assert schedule.priority == -20
        await env.sleep(timedelta(seconds=150))
        started = await listed(env, workflow=bp.name)
        assert len(started) == 2 and {i.priority for i in started} == {-20}
        with pytest.raises(InvalidArgument, match="priority"):
            await env.client.update_schedule(sid, bp, {"n": 0}, every=60, priority=200)
        assert (await env.client.get_schedule(sid)).priority == -20
        # the schema is shared: a schedule left behind would fire when other tests move time
        await env.client.delete_schedule(sid)


# ---------------------------------------------------------------------- delayed starts


async def test_a_delayed_start_is_scheduled_and_begins_at_its_time_not_before(harness: Harness) -> None:
    log: list[Any] = []
    bp = one_step(harness, log)
    async with harness.env([bp], time_skipping=False) as env:
        created = env.now_millis()
        info = await env.start_workflow(bp, {"n": 1}, start_delay=timedelta(hours=1))
        assert info.status == InstanceStatus.SCHEDULED
        assert info.start_at == created + 3_600_000
        assert [(t.status, t.available_at) for t in info.tokens] == [("WAITING", info.start_at)]
        scheduled = await listed(env, workflow=bp.name, status="SCHEDULED")
        assert [i.instance_id for i in scheduled] == [info.instance_id]

        await env.advance(timedelta(minutes=59, seconds=59))
        still = await env.client.get(info.instance_id)
        assert still.status == InstanceStatus.SCHEDULED and log == []
        assert await env.history(info) == []

        await env.advance(timedelta(seconds=1))  # its time: the clock duty begins it
        done = await env.result(info)
        assert done.status == InstanceStatus.COMPLETED and log == [1]
        history = await env.history(info)
        assert history[0].started_at == info.start_at  # begun at its time, on the virtual clock
        await assert_clean(env, info.instance_id)


async def test_a_delayed_start_at_a_moment_runs_then_with_time_skipping(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp]) as env:
        at = env.now() + timedelta(days=2)
        info = await env.start_workflow(bp, {"n": 1}, start_at=at)
        assert info.status == InstanceStatus.SCHEDULED
        done = await env.result(info)  # the skipper jumps to the start time
        assert done.status == InstanceStatus.COMPLETED
        history = await env.history(info)
        assert history[0].started_at >= int(at.timestamp() * 1000)
        await assert_clean(env, info.instance_id)


async def test_a_scheduled_instance_can_be_cancelled_before_it_starts(harness: Harness) -> None:
    log: list[Any] = []
    bp = one_step(harness, log)
    async with harness.env([bp], time_skipping=False) as env:
        info = await env.start_workflow(bp, {"n": 1}, start_delay=600)
        cancelled = await env.cancel(info, "not needed")
        assert cancelled.status == InstanceStatus.CANCELLED
        assert cancelled.tokens == ()
        await env.advance(timedelta(hours=1))
        after = await env.client.get(info.instance_id)
    assert after.status == InstanceStatus.CANCELLED and log == []


async def test_a_signal_to_a_scheduled_instance_waits_for_it_buffered(harness: Harness) -> None:
    wf = harness.define("signalled")
    bp = wf.wait_signal("go").step(lambda ctx: {**ctx, "ran": True}, name="after").build()
    async with harness.env([bp]) as env:
        info = await env.start_workflow(bp, {}, start_delay=timedelta(hours=3))
        sent = await env.signal(info, "go", {"by": "early"})
        assert sent.outcome == "BUFFERED"
        assert sent.instance.status == InstanceStatus.SCHEDULED
        done = await env.result(info)
        assert done.context == {"by": "early", "ran": True}
        await assert_clean(env, info.instance_id)


async def test_a_delayed_start_is_idempotent_by_request_id(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp], time_skipping=False) as env:
        rid = f"r-{uuid.uuid4().hex}"
        first = await env.start_workflow(bp, {"n": 1}, start_delay=60, request_id=rid)
        again = await env.start_workflow(bp, {"n": 1}, start_delay=60, request_id=rid)
        assert again.instance_id == first.instance_id
        assert again.status == InstanceStatus.SCHEDULED and not again.deduplicated
        assert len(await listed(env, workflow=bp.name)) == 1


async def test_start_many_takes_a_priority_and_a_delay(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp], time_skipping=False) as env:
        await env.client.register(bp)
        ids = await env.client.start_many(bp, [{"n": i} for i in range(3)], priority=4, start_delay=30)
        infos = [await env.client.get(i) for i in ids]
        assert {(i.status, i.priority) for i in infos} == {(InstanceStatus.SCHEDULED, 4)}


# ---------------------------------------------------------------------- deduplication


async def test_a_live_key_answers_with_its_holder(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp], workers=0) as env:
        first = await env.start_workflow(bp, {"n": 1}, dedup_key="order-42")
        assert not first.deduplicated and first.dedup_key == "order-42"
        second = await env.start_workflow(bp, {"n": 2}, dedup_key="order-42")
        assert second.deduplicated and second.instance_id == first.instance_id
        assert second.context == {"n": 1}  # the holder, unchanged
        other = await env.start_workflow(bp, {"n": 3}, dedup_key="order-43")
        assert not other.deduplicated and other.instance_id != first.instance_id
        assert len(await listed(env, workflow=bp.name)) == 2


async def test_a_key_is_held_for_its_window_after_the_holder_finishes(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp], time_skipping=False) as env:
        first = await env.start_workflow(bp, {"n": 1}, dedup_key="k", dedup_window=timedelta(minutes=10))
        assert first.dedup_window_millis == 600_000
        await env.result(first)
        within = await env.start_workflow(bp, {"n": 2}, dedup_key="k")
        assert within.deduplicated and within.instance_id == first.instance_id
        assert within.status == InstanceStatus.COMPLETED
        await env.advance(timedelta(minutes=10))
        after = await env.start_workflow(bp, {"n": 3}, dedup_key="k")
        assert not after.deduplicated and after.instance_id != first.instance_id
        await env.result(after)


async def test_without_a_window_a_key_is_free_once_its_holder_finished(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp]) as env:
        first = await env.start_workflow(bp, {"n": 1}, dedup_key="k")
        await env.result(first)
        second = await env.start_workflow(bp, {"n": 2}, dedup_key="k")
        assert not second.deduplicated and second.instance_id != first.instance_id
        cancelled = await env.start_workflow(bp, {"n": 3}, dedup_key="c", start_delay=60)
        await env.cancel(cancelled)
        third = await env.start_workflow(bp, {"n": 4}, dedup_key="c")
        assert not third.deduplicated and third.instance_id != cancelled.instance_id


async def test_keys_are_per_workflow_and_a_scheduled_holder_counts(harness: Harness) -> None:
    a, b = one_step(harness), one_step(harness)
    async with harness.env([a, b], workers=0) as env:
        held = await env.start_workflow(a, {"n": 1}, dedup_key="k", start_delay=3600)
        same = await env.start_workflow(a, {"n": 2}, dedup_key="k")
        assert same.deduplicated and same.instance_id == held.instance_id
        assert same.status == InstanceStatus.SCHEDULED
        elsewhere = await env.start_workflow(b, {"n": 3}, dedup_key="k")
        assert not elsewhere.deduplicated


async def test_a_deduplicated_request_id_answers_the_same_on_a_repeat(harness: Harness) -> None:
    bp = one_step(harness)
    async with harness.env([bp], workers=0) as env:
        holder = await env.start_workflow(bp, {"n": 1}, dedup_key="k")
        rid = f"r-{uuid.uuid4().hex}"
        first = await env.start_workflow(bp, {"n": 2}, dedup_key="k", request_id=rid)
        again = await env.start_workflow(bp, {"n": 2}, dedup_key="k", request_id=rid)
        assert first.instance_id == again.instance_id == holder.instance_id
        assert first.deduplicated and again.deduplicated
        assert len(await listed(env, workflow=bp.name)) == 1


async def test_concurrent_starts_with_one_key_create_one_instance(harness: Harness) -> None:
    """Several threads, each its own client, over two servers on one store when PostgreSQL."""
    bp = one_step(harness)
    if harness.store == "postgres":
        extra = harness.server()
    else:
        extra = None
    async with harness.env([bp], workers=0) as env:
        targets = [env.target]
        if extra is not None:
            await extra.__aenter__()
            targets.append(extra.target)
        try:
            answers: list[tuple[str, bool]] = []
            errors: list[BaseException] = []
            gate = threading.Barrier(8)

            def starter(i: int) -> None:
                try:
                    with Client(targets[i % len(targets)]) as client:
                        gate.wait()
                        for n in range(5):
                            info = client.start(bp.name, {"n": (i, n)}, dedup_key="one")
                            answers.append((info.instance_id, info.deduplicated))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=starter, args=(i,)) for i in range(8)]
            for thread in threads:
                thread.start()
            # the server runs on this loop: join the threads from another one
            await asyncio.to_thread(lambda: [thread.join() for thread in threads])
        finally:
            if extra is not None:
                await extra.__aexit__(None, None, None)
        assert not errors, errors
        assert len(answers) == 40
        assert len({iid for iid, _ in answers}) == 1
        assert [d for _, d in answers].count(False) == 1
        assert len(await listed(env, workflow=bp.name)) == 1


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"start_delay": timedelta(seconds=-1)}, "start_delay"),
        ({"start_at": datetime(2030, 1, 1)}, "start_at"),  # naive: which zone?
        ({"start_at": datetime.fromisoformat("2030-01-01T00:00:00+00:00"), "start_delay": 5}, "start_at"),
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"dedup_window": 60}, "dedup_window"),
        ({"dedup_key": "k" * 257}, "dedup_key"),
    ],
)
async def test_bad_start_options_are_refused_naming_the_field(
    harness: Harness, options: dict[str, Any], field: str
) -> None:
    bp = one_step(harness)
    async with harness.env([bp], workers=0) as env:
        with pytest.raises(InvalidArgument, match=field):
            await env.start_workflow(bp, {"n": 1}, **options)
        assert await listed(env, workflow=bp.name) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"start_delay_millis": -5}, "start_delay"),
        ({"start_at": 1, "start_delay_millis": 5}, "start_at"),
        ({"start_at": -1}, "start_at"),
        ({"priority": 1000}, "priority"),
        ({"dedup_window_millis": -1, "dedup_key": "k"}, "dedup_window"),
    ],
)
async def test_the_wire_refuses_bad_start_options_with_invalid_argument(
    harness: Harness, fields: dict[str, Any], field: str
) -> None:
    bp = one_step(harness)
    async with harness.env([bp], workers=0) as env:
        request = pb.StartInstanceRequest(workflow=bp.name, **fields)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await env.client.stub.StartInstance(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (caught.value.details() or "")
        assert await listed(env, workflow=bp.name) == []


async def test_a_delayed_starts_time_limit_counts_from_its_start_time(harness: Harness) -> None:
    """Workflow time limits (docs/semantics.md#time-limits) begin with the instance, not before."""
    name = f"limited-{harness.mode.value.lower().replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    wf = Workflow.define(name, dict, timeout=timedelta(minutes=10)).execution(harness.mode)
    bp = wf.sleep("nap", timedelta(minutes=5)).step(lambda ctx: {**ctx, "done": True}, name="work").build()
    async with harness.env([bp]) as env:
        info = await env.start_workflow(bp, {}, start_delay=timedelta(hours=1))
        done = await env.result(info)  # 1 h SCHEDULED, then 5 min of sleep: inside its 10 min
        assert done.status == InstanceStatus.COMPLETED and done.context == {"done": True}
        await assert_clean(env, info.instance_id)
