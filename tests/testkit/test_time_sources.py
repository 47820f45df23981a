"""Every source of workflow time, skipped in virtual time, in every mode, on every store.

Each test covers hours or days of virtual time and asserts on the history's virtual timestamps;
it finishes in a fraction of a second of real time (nothing here waits for a real timer).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from wiggle import RetryPolicy, WorkerOptions, Workflow
from wiggle.client import HistoryEntry

from .conftest import Kit

HOUR = 3_600_000
DAY = 24 * HOUR


def _entries(history: list[HistoryEntry], node: str) -> list[HistoryEntry]:
    return [e for e in history if e.node_id == node]


async def test_a_seven_day_sleep_is_skipped(kit: Kit) -> None:
    def before(ctx):
        return {**ctx, "before": True}

    def after(ctx):
        return {**ctx, "after": True}

    bp = kit.define("sleep").step(before).sleep("nap", timedelta(days=7)).step(after).build()
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        done = await env.run(bp, {})
        history = await env.history(done)
        assert env.now_millis() - t0 == 7 * DAY  # virtual time moved exactly to the sleep's end
    assert done.context == {"before": True, "after": True}
    (slept,) = _entries(history, "nap")
    (first,) = _entries(history, "before")
    (last,) = _entries(history, "after")
    assert slept.outcome == "SLEPT"
    assert slept.ended_at - first.ended_at == 7 * DAY
    assert last.started_at == slept.ended_at == done.finished_at
    assert first.started_at == t0


async def test_retry_backoff_is_skipped(kit: Kit) -> None:
    tries: list[int] = []

    def flaky(ctx):
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError("not yet")
        return {"tries": len(tries)}

    policy = RetryPolicy.exponential(3, 3600, multiplier=2.0, max_seconds=86400)
    bp = kit.define("backoff").step(flaky, retry=policy).build()
    async with kit.env([bp]) as env:
        t0 = env.now_millis()
        done = await env.run(bp, {})
        history = await env.history(done)
    assert done.context == {"tries": 3}
    attempts = _entries(history, "flaky")
    assert [(e.attempt, e.outcome) for e in attempts] == [(1, "RETRY"), (2, "RETRY"), (3, "COMPLETED")]
    assert [e.started_at - t0 for e in attempts] == [0, HOUR, 3 * HOUR]  # 1 h, then 2 h of backoff


async def test_a_user_task_deadline_is_skipped(kit: Kit) -> None:
    def prepare(ctx):
        return {**ctx, "prepared": True}

    def escalate(ctx):
        return {**ctx, "escalated": True}

    bp = (
        kit.define("deadline")
        .step(prepare)
        .user_task("approve", timeout=timedelta(hours=24), on_timeout=lambda b: b.step(escalate))
        .build()
    )
    async with kit.env([bp]) as env:
        done = await env.run(bp, {})
        history = await env.history(done)
    assert done.context == {"prepared": True, "escalated": True}
    (prepared,) = _entries(history, "prepare")
    (timed_out,) = _entries(history, "approve")
    assert timed_out.outcome == "TIMED_OUT"
    assert timed_out.ended_at - prepared.ended_at == DAY


async def test_a_user_task_completed_before_its_deadline_never_times_out(kit: Kit) -> None:
    def ship(ctx):
        return {**ctx, "shipped": True}

    bp = kit.define("approve").user_task("approve", timeout=timedelta(hours=24)).step(ship).build()
    async with kit.env([bp]) as env:
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "approve")  # time stands still while the test acts
        await env.advance(timedelta(hours=23))
        await env.complete_user_task(info, "approve", {"ok": True})
        done = await env.result(info)
        history = await env.history(done)
    assert done.context == {"ok": True, "shipped": True}
    (approved,) = _entries(history, "approve")
    assert approved.outcome == "COMPLETED"
    assert approved.ended_at - done.created_at == 23 * HOUR


async def test_an_expired_lease_of_a_gone_worker_is_skipped(kit: Kit) -> None:
    hanging = asyncio.Event()
    seen: list[str] = []

    async def work(ctx):
        seen.append(ctx.get("worker", ""))
        from wiggle import Step

        if Step.current().worker_id == "test-worker-1":
            hanging.set()
            await asyncio.sleep(60)  # abandoned: its worker stops without reporting
        return {"done_by": Step.current().worker_id}

    bp = kit.define("lease").retry(RetryPolicy.fixed(3, 0)).step(work).build()
    async with kit.env([bp], workers=0, lease_millis=90_000) as env:
        first = await env.start_worker([bp], WorkerOptions(worker_id="test-worker-1", poll_wait_seconds=1.0))
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(hanging.wait(), 10)
        await env.stop_worker(first, timeout=0.01, crash=True)  # a killed worker: its lease expires
        await env.start_worker([bp], WorkerOptions(worker_id="test-worker-2", poll_wait_seconds=1.0))
        done = await env.result(info)
        history = await env.history(done)
    assert done.context == {"done_by": "test-worker-2"}
    attempts = _entries(history, "work")
    assert [(e.attempt, e.outcome, e.worker_id) for e in attempts] == [
        (1, "RETRY", "test-worker-1"),
        (2, "COMPLETED", "test-worker-2"),
    ]
    assert attempts[0].error == "lease expired (worker unreachable)"
    assert attempts[0].ended_at - attempts[0].started_at == 90_000  # the lease, in virtual time


async def test_advance_moves_time_by_hand(kit: Kit) -> None:
    def after(ctx):
        return {"after": True}

    bp = kit.define("manual").sleep("nap", timedelta(hours=1)).step(after).build()
    async with kit.env([bp], time_skipping=False) as env:
        t0 = env.now_millis()
        info = await env.start_workflow(bp, {})
        await env.wait_for(info, "nap")
        await env.advance(timedelta(minutes=59))
        assert (await env.client.get(info.instance_id)).tokens[0].status == "WAITING"
        await env.advance(60)  # seconds
        done = await env.wait(info)
        history = await env.history(done)
    assert done.status == "COMPLETED"
    assert env.now_millis() - t0 == HOUR  # 59 min + 60 s
    (slept,) = _entries(history, "nap")
    assert slept.ended_at - t0 == HOUR  # fired when the clock reached its end, not before


async def test_several_workers_share_the_work_in_virtual_time(kit: Kit) -> None:
    gate = asyncio.Event()
    inside: set[str] = set()

    async def meet(ctx):
        from wiggle import Step

        inside.add(Step.current().worker_id)
        if len(inside) == 2:
            gate.set()
        await asyncio.wait_for(gate.wait(), 10)  # each worker runs one step at a time: both must help
        return {"worker": Step.current().worker_id}

    def after(ctx):
        return ctx

    bp = kit.define("pair").step(meet).sleep("nap", timedelta(days=1)).step(after).build()
    options = WorkerOptions(concurrency=1, poll_wait_seconds=1.0)
    async with kit.env([bp], workers=2, worker_options=options) as env:
        t0 = env.now_millis()
        one = await env.start_workflow(bp, {})
        two = await env.start_workflow(bp, {})
        done = [await env.result(one), await env.result(two)]
    assert inside == {"test-worker-1", "test-worker-2"}
    assert {d.context["worker"] for d in done} == inside
    assert all(d.finished_at - t0 == DAY for d in done)


async def test_concurrent_waits_jump_to_each_due_moment_in_turn(kit: Kit) -> None:
    def done(ctx):
        return ctx

    bp = kit.define("staggered").sleep("nap", timedelta(hours=1)).step(done).build()
    slow = kit.define("staggered-slow").sleep("nap", timedelta(hours=5)).step(done).build()
    async with kit.env([bp, slow]) as env:
        t0 = env.now_millis()
        one, two = await env.start_workflow(bp, {}), await env.start_workflow(slow, {})
        first, second = await asyncio.gather(env.result(one), env.result(two))
    assert (first.finished_at - t0, second.finished_at - t0) == (HOUR, 5 * HOUR)


async def test_a_step_no_worker_has_a_handler_for_does_not_run_the_clock_on(kit: Kit) -> None:
    """A deploy tested in the kit: the worker without the old version's step gives it back
    (docs/semantics.md#mixed-fleets), again and again. Those releases are not moments to jump to:
    virtual time stays put (another instance's two-minute deadline holds), and the timeout says
    why. Before, each release's 200 ms was a jump, and minutes of virtual time ran by a second."""

    def first(ctx):
        return {**ctx, "first": True}

    def gone(ctx):
        return ctx

    old = kit.define("deploy").step(first).step(gone).build()
    asking = kit.define("asking").user_task("sign", timeout=timedelta(minutes=2)).build()
    new = Workflow.define(old.name).execution(kit.mode).step(first).build()  # v2: 'gone' removed
    async with kit.env([old, asking], workers=0) as env:
        waiting = await env.start_workflow(asking, {})
        stranded = await env.start_workflow(old, {})  # no worker yet: it waits at 'first'
        worker = await env.start_worker([new, asking])  # v2 only: runs 'first' by name, not 'gone'
        t0 = env.now_millis()
        with pytest.raises(TimeoutError) as caught:
            await env.result(stranded, timeout=3)
        moved = env.now_millis() - t0
        still = await env.client.get(waiting.instance_id)
        await env.stop_worker(worker)
    assert moved == 0, f"virtual time ran on {moved / 1000:.1f} s while only releases were due"
    assert still.status == "RUNNING", still
    assert "(last error: worker test-worker-1 has no handler for node 'gone'" in str(caught.value), (
        caught.value
    )


async def test_a_wait_for_a_workflow_no_worker_serves_says_so(kit: Kit) -> None:
    served = kit.define("served").step(lambda ctx: ctx, name="one").build()
    forgotten = kit.define("forgotten").step(lambda ctx: ctx, name="other").build()
    async with kit.env([served]) as env:  # `forgotten` is not in workflows=[...]: no worker runs it
        started = await env.start_workflow(forgotten, {})
        with pytest.raises(TimeoutError) as caught:
            await env.result(started, timeout=1)
    assert f"no worker of this environment serves queue {forgotten.name!r}" in str(caught.value), caught.value


async def test_a_wait_gives_up_soon_when_nothing_serves_a_step_s_queue(kit: Kit) -> None:
    """Such a wait once took its whole timeout (30 s by default) to say what the mistake was."""
    served = kit.define("served-early").step(lambda ctx: ctx, name="one").build()
    forgotten = kit.define("forgotten-early").step(lambda ctx: ctx, name="other").build()
    async with kit.env([served]) as env:
        started = await env.start_workflow(forgotten, {})
        with pytest.raises(TimeoutError) as caught:
            await env.result(started)  # the default timeout
    text = str(caught.value)
    assert "a step waited 2 s on a queue nothing serves" in text, text
    assert f"no worker of this environment serves queue {forgotten.name!r}" in text, text


async def test_a_stopped_worker_s_cut_step_is_handed_back_at_once(kit: Kit) -> None:
    """``stop_worker`` without ``crash``: as ``Worker.close``, the step it cuts is READY again at
    once for the next worker, attempt unspent, no lease waited out."""
    hanging = asyncio.Event()

    async def work(ctx):
        from wiggle import Step

        if Step.current().worker_id == "test-worker-1":
            hanging.set()
            await asyncio.sleep(60)
        return {"done_by": Step.current().worker_id}

    bp = kit.define("handed-back").retry(RetryPolicy.fixed(3, 0)).step(work).build()
    async with kit.env([bp], workers=0, lease_millis=90_000) as env:
        first = await env.start_worker([bp], WorkerOptions(worker_id="test-worker-1", poll_wait_seconds=1.0))
        info = await env.start_workflow(bp, {})
        await asyncio.wait_for(hanging.wait(), 10)
        await env.stop_worker(first, timeout=0.01)
        await env.start_worker([bp], WorkerOptions(worker_id="test-worker-2", poll_wait_seconds=1.0))
        done = await env.result(info)
        history = await env.history(done)
    assert done.context == {"done_by": "test-worker-2"}
    assert [(e.attempt, e.outcome, e.worker_id) for e in _entries(history, "work")] == [
        (1, "RELEASED", "test-worker-1"),  # the cut run (handback CUT), same attempt
        (1, "COMPLETED", "test-worker-2"),
    ]
