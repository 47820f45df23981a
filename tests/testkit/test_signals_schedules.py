"""Signals and schedules in virtual time, in every mode, on every store.

A signal sent by the environment's helper, a signal wait's deadline skipped like a user task's,
and a daily schedule firing on its virtual ticks while ``env.sleep`` lets days pass. Each asserts
on the virtual timestamps in history (or the instances' created_at) and never waits for a real
timer.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from wiggle import RetryPolicy, Workflow
from wiggle.client import HistoryEntry
from wiggle.testing import SyncWorkflowEnvironment

from .conftest import Kit

HOUR = 3_600_000
DAY = 24 * HOUR


def _entries(history: list[HistoryEntry], node: str) -> list[HistoryEntry]:
    return [e for e in history if e.node_id == node]


def _define(base: str) -> Workflow[Any]:
    return Workflow.define(f"{base}-{uuid.uuid4().hex[:8]}")


def prepare(ctx):
    return {**ctx, "prepared": True}


def finish(ctx):
    return {**ctx, "finished": True}


def expire(ctx):
    return {**ctx, "expired": True}


async def test_signal_helper_delivers_after_virtual_hours(kit: Kit) -> None:
    bp = (
        kit.define("signal")
        .step(prepare)
        .wait_signal("go", name="await_go", timeout=timedelta(days=1), on_timeout=lambda b: b.step(expire))
        .step(finish)
        .build()
    )
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "await_go")
        await env.advance(timedelta(hours=2))  # short of the deadline: nothing fires
        sent = await env.signal(info, "go", {"by": "test"}, signal_id="s-1")
        again = await env.signal(info.instance_id, "go", {"by": "again"}, signal_id="s-1")
        done = await env.result(info)
        history = await env.history(done)
    assert sent.outcome == "DELIVERED"
    assert again.outcome == "DUPLICATE"  # the same signal_id changes nothing
    assert done.context == {"prepared": True, "by": "test", "finished": True}
    (wait,) = _entries(history, "await_go")
    assert wait.outcome != "TIMED_OUT"
    assert wait.ended_at - t0 == 2 * HOUR
    assert _entries(history, "finish")[0].started_at == t0 + 2 * HOUR
    assert not _entries(history, "expire")


async def test_a_signal_sent_early_is_buffered(kit: Kit) -> None:
    bp = kit.define("early").sleep("nap", timedelta(hours=5)).wait_signal("go").step(finish).build()
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        info = await env.start_workflow(bp, {})
        sent = await env.signal(info, "go", {"early": True})
        done = await env.result(info)
        history = await env.history(done)
    assert sent.outcome == "BUFFERED"
    assert done.context == {"early": True, "finished": True}
    (slept,) = _entries(history, "nap")
    assert slept.ended_at - t0 == 5 * HOUR
    assert done.finished_at == t0 + 5 * HOUR  # the buffered signal was taken on arrival, no wait


async def test_a_signal_wait_deadline_is_skipped(kit: Kit) -> None:
    bp = (
        kit.define("signal-deadline")
        .step(prepare)
        .wait_signal("go", name="await_go", timeout=timedelta(hours=12), on_timeout=lambda b: b.step(expire))
        .build()
    )
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        done = await env.run(bp, {})
        history = await env.history(done)
        assert env.now_millis() - t0 == 12 * HOUR  # exactly to the deadline, not past it
    assert done.context == {"prepared": True, "expired": True}
    (wait,) = _entries(history, "await_go")
    assert wait.outcome == "TIMED_OUT"
    assert wait.ended_at - t0 == 12 * HOUR
    (expired,) = _entries(history, "expire")
    assert expired.started_at == t0 + 12 * HOUR == done.finished_at


async def test_a_missed_signal_deadline_without_branch_fails_in_virtual_time(kit: Kit) -> None:
    bp = (
        kit.define("signal-fail")
        .step(prepare)
        .wait_signal("go", timeout=timedelta(days=3))
        .step(finish)
        .build()
    )
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        done = await env.run(bp, {}, check=False)
    assert done.status == "FAILED"
    assert done.finished_at - t0 == 3 * DAY


async def test_a_daily_schedule_fires_on_its_virtual_ticks(kit: Kit) -> None:
    bp = kit.define("daily").step(finish).build()
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        schedule = await env.create_schedule(
            f"daily-{uuid.uuid4().hex[:6]}", bp, {"n": 1}, every=timedelta(days=1)
        )
        first = schedule.next_tick_at
        assert t0 < first <= t0 + DAY
        await env.sleep(
            timedelta(milliseconds=first + 2 * DAY - t0)
        )  # through three ticks, ending on the third
        assert env.now_millis() == first + 2 * DAY
        page, _ = await env.client.list(workflow=bp.name)
        instances = sorted(page, key=lambda i: i.created_at)
        done = [await env.result(i) for i in instances]
        after = await env.client.get_schedule(schedule.schedule_id)
    assert [i.created_at for i in instances] == [first, first + DAY, first + 2 * DAY]
    assert all(d.context == {"n": 1, "finished": True} for d in done)
    assert after.fired == 3
    assert after.next_tick_at == first + 3 * DAY


async def test_a_schedule_made_through_the_client_ticks_in_virtual_time(kit: Kit) -> None:
    # Not through env.create_schedule: the skipping still learns the schedule's workflow, so the
    # instances a tick starts (with a step taking an hour of backoff) hold the clock until done.
    tries: list[int] = []

    def flaky(ctx):
        tries.append(1)
        if len(tries) % 2:
            raise RuntimeError("every first try fails")
        return ctx

    bp = kit.define("direct").step(flaky, retry=RetryPolicy.fixed(2, 3600)).build()
    async with kit.env() as env:
        await env.client.register(bp)
        await env.start_worker([bp])
        env.skipper.workflows.discard(bp.name)  # as if the worker had been started elsewhere
        t0 = env.now_millis()
        schedule = await env.client.create_schedule(f"direct-{uuid.uuid4().hex[:6]}", bp, every=DAY / 1000)
        await env.sleep(timedelta(days=2, hours=1))  # the second tick and its hour of backoff
        page, _ = await env.client.list(workflow=bp.name)
        histories = [await env.history(i) for i in sorted(page, key=lambda i: i.created_at)]
    assert [i.status for i in page] == ["COMPLETED", "COMPLETED"]
    first = schedule.next_tick_at
    assert first == t0 + DAY
    for n, history in enumerate(histories):
        assert [(e.started_at, e.outcome) for e in _entries(history, "flaky")] == [
            (first + n * DAY, "RETRY"),
            (first + n * DAY + HOUR, "COMPLETED"),
        ]


async def test_advance_jumps_once_over_schedule_ticks(kit: Kit) -> None:
    # advance is one jump: the clock duty runs at its end only, so a daily schedule fires once
    # (catch-up NONE), at the end of the jump; sleep (above) stops at every tick instead.
    bp = kit.define("jump").step(finish).build()
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        schedule = await env.create_schedule(f"jump-{uuid.uuid4().hex[:6]}", bp, every=timedelta(days=1))
        await env.advance(timedelta(days=3))
        await env.sleep(0)  # let the started instance run
        page, _ = await env.client.list(workflow=bp.name)
        after = await env.client.get_schedule(schedule.schedule_id)
    assert [i.created_at for i in page] == [t0 + 3 * DAY]
    assert after.fired == 1


async def test_sleep_without_timers_ends_exactly_at_its_end(kit: Kit) -> None:
    async with kit.env() as env:
        t0 = env.now_millis()
        await env.sleep(timedelta(hours=3))
        assert env.now_millis() - t0 == 3 * HOUR
        await env.sleep(0)
        assert env.now_millis() - t0 == 3 * HOUR


async def test_schedule_ticks_do_not_run_time_away_from_an_unbounded_wait(kit: Kit) -> None:
    # A user task without a deadline waits on a person: a schedule's ticks must not make the
    # wait jump from day to day (it times out, in real time, naming what it waits on).
    bp = kit.define("person").user_task("approve").build()
    ticked = kit.define("ticked").step(finish).build()
    async with kit.env([bp, ticked]) as env:
        t0 = env.now_millis()
        await env.create_schedule(f"s-{uuid.uuid4().hex[:6]}", ticked, every=timedelta(days=1))
        info = await env.start_workflow(bp, {})
        try:
            await env.wait(info, timeout=0.3)
        except TimeoutError as exc:
            assert "approve" in str(exc)
        else:
            raise AssertionError("the wait should time out")
        assert env.now_millis() == t0


def test_sync_environment_signal_sleep_and_schedule() -> None:
    bp = (
        _define("sync-signal")
        .step(prepare)
        .wait_signal("go", name="await_go", timeout=timedelta(hours=6), on_timeout=lambda b: b.step(expire))
        .build()
    )
    daily = _define("sync-daily").step(finish).build()
    with SyncWorkflowEnvironment([bp, daily]) as env:
        t0 = env.now_millis()
        info = env.start_workflow(bp, {})
        env.wait_for(info, "await_go")
        assert env.signal(info, "go", {"ok": True}).outcome == "DELIVERED"
        assert env.result(info).context == {"prepared": True, "ok": True}
        schedule = env.create_schedule("sync-daily", daily, every=timedelta(days=1))
        env.sleep(timedelta(milliseconds=schedule.next_tick_at + DAY - t0))
        page, _ = env.client.list(workflow=daily.name)
        created = sorted(i.created_at for i in page)
    assert created == [schedule.next_tick_at, schedule.next_tick_at + DAY]
