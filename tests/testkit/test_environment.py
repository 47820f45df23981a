"""The environment's helpers: run, mock a step, the path, errors a test author can act on, sync use."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from wiggle import WorkerOptions, Workflow, WorkflowFailed
from wiggle.errors import ClientClosed, InvalidArgument
from wiggle.testing import SyncWorkflowEnvironment, WorkflowEnvironment, mock_step

from .conftest import Kit


def _charge(ctx):
    raise RuntimeError("the real payment service must not be called in tests")


def _ship(ctx):
    return {**ctx, "shipped": True}


def _orders(kit: Kit):
    return kit.define("orders").step(_charge).sleep("wait", timedelta(days=2)).step(_ship).build()


async def test_mock_step_replaces_one_function_without_editing_the_workflow(kit: Kit) -> None:
    bp = _orders(kit)
    calls: list[dict] = []

    async def fake_charge(ctx):
        calls.append(ctx)
        return {**ctx, "charged": 42}

    mocked = mock_step(bp, "_charge", fake_charge)
    assert mocked.version == bp.version and mocked.definition is bp.definition
    assert bp.handlers["_charge"][1] is _charge  # the original is untouched
    async with kit.env([mocked]) as env:
        done = await env.run(bp, {"order": 7})
        await env.assert_path(done, ["_charge", "wait", "_ship", "end"])
        with pytest.raises(AssertionError, match=r"path taken \['_charge', 'wait', '_ship', 'end'\]"):
            await env.assert_path(done, ["_charge", "_ship"])
    assert calls == [{"order": 7}]
    assert done.context == {"order": 7, "charged": 42, "shipped": True}


def test_mock_step_names_the_steps_when_one_is_unknown() -> None:
    bp = Workflow.define(f"m-{uuid.uuid4().hex[:6]}").step(_charge).step(_ship).build()
    with pytest.raises(KeyError, match="has no step 'charge' to mock; its steps: _charge, _ship"):
        mock_step(bp, "charge", _ship)
    with pytest.raises(TypeError, match="must be callable"):
        mock_step(bp, "_charge", 3)  # type: ignore[arg-type]


def test_mock_step_checks_the_mock_as_the_dsl_checks_a_handler() -> None:
    # Unchecked, a mock taking two arguments or a generator function was taken and every
    # attempt of the step failed; a workflow's name met "'str' object has no attribute 'handlers'".
    def charge_twice(ctx):
        yield ctx

    def combine_all(base, branches):
        yield base

    bp = Workflow.define(f"m-{uuid.uuid4().hex[:6]}").step(_charge).step(_ship).build()
    with pytest.raises(
        InvalidArgument,
        match=r"step '_charge': its handler .*\(ctx, amount\) cannot be called with one argument",
    ):
        mock_step(bp, "_charge", lambda ctx, amount: ctx)
    with pytest.raises(
        InvalidArgument, match=r"step '_charge': its handler .*charge_twice is a generator function"
    ):
        mock_step(bp, "_charge", charge_twice)
    with pytest.raises(
        TypeError, match=r"mock_step takes a Blueprint, got str 'orders' \(the workflow's name\)"
    ):
        mock_step("orders", "_charge", _ship)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got Workflow .*: call .build\(\) on it"):
        mock_step(Workflow.define("unbuilt").step(_charge), "_charge", _ship)  # type: ignore[arg-type]
    forked = (
        Workflow.define(f"j-{uuid.uuid4().hex[:6]}")
        .fork(lambda b: b.step(_ship))
        .join(lambda base, bs: base)
        .build()
    )
    with pytest.raises(
        InvalidArgument, match="join 'join': its handler .*combine_all is a generator function"
    ):
        mock_step(forked, "join", combine_all)
    assert mock_step(forked, "join", lambda base, branches: base).handlers["join"][1] is not None
    assert mock_step(bp, "_charge", lambda ctx, amount=0: ctx).name == bp.name  # one argument will do


async def test_result_raises_for_a_failed_instance_and_wait_returns_it() -> None:
    bp = Workflow.define(f"fail-{uuid.uuid4().hex[:6]}").step(_charge).build()
    async with WorkflowEnvironment([bp]) as env:
        with pytest.raises(WorkflowFailed, match="FAILED: _charge: RuntimeError"):
            await env.run(bp, {})
        info = await env.start_workflow(bp, {})
        done = await env.wait(info)
    assert done.status == "FAILED"


async def test_a_wait_that_cannot_end_says_what_the_instance_waits_on() -> None:
    bp = Workflow.define(f"stuck-{uuid.uuid4().hex[:6]}").user_task("sign").step(_ship).build()
    async with WorkflowEnvironment([bp]) as env:
        info = await env.start_workflow(bp, {})
        with pytest.raises(TimeoutError, match=r"waits on user task 'sign' \(no deadline\)"):
            await env.result(info, timeout=0.3)
        nap = Workflow.define(f"nap-{uuid.uuid4().hex[:6]}").sleep("nap", 3600).step(_ship).build()
        async with WorkflowEnvironment([nap], time_skipping=False) as manual:
            sleeping = await manual.start_workflow(nap, {})
            with pytest.raises(TimeoutError, match="time skipping is off: move the clock with advance"):
                await manual.wait(sleeping, timeout=0.3)
            assert (await manual.wait(sleeping, skip=True)).status == "COMPLETED"


async def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="naive"):
        WorkflowEnvironment(start=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="workers must be >= 0"):
        WorkflowEnvironment(workers=-1)
    with pytest.raises(ValueError, match="would name all 2 workers alike"):
        WorkflowEnvironment(workers=2, worker_options=WorkerOptions(worker_id="w"))
    async with WorkflowEnvironment(start=datetime(2030, 1, 1, tzinfo=timezone.utc)) as env:
        assert env.now() == datetime(2030, 1, 1, tzinfo=timezone.utc)
        with pytest.raises(ValueError, match="must not be negative"):
            await env.advance(timedelta(seconds=-1))
        with pytest.raises(TypeError, match="a timedelta or seconds"):
            await env.advance("1h")  # type: ignore[arg-type]
        assert await env.advance(timedelta(days=1)) == datetime(2030, 1, 2, tzinfo=timezone.utc)


def test_the_sync_environment_from_plain_code() -> None:
    bp = (
        Workflow.define(f"sync-{uuid.uuid4().hex[:6]}")
        .user_task(
            "approve", timeout=timedelta(hours=24), on_timeout=lambda b: b.end("expired", success=False)
        )
        .step(_ship)
        .build()
    )
    with SyncWorkflowEnvironment([bp], start=datetime(2030, 1, 1, tzinfo=timezone.utc)) as env:
        info = env.start_workflow(bp, {})
        env.complete_user_task(info, "approve", {"by": "ann"})
        done = env.result(info)
        assert env.path(done) == ["approve", "_ship", "end"]
        late = env.wait(env.start_workflow(bp, {}))
        assert late.status == "FAILED" and late.reason == "expired"
        assert env.now() == datetime(2030, 1, 2, tzinfo=timezone.utc)
        assert env.client.get(info.instance_id).status == "COMPLETED"
    assert done.context == {"by": "ann", "shipped": True}


async def test_the_sync_environment_awaited_from_another_loop() -> None:
    bp = Workflow.define(f"aio-{uuid.uuid4().hex[:6]}").sleep("nap", timedelta(days=3)).step(_ship).build()
    with SyncWorkflowEnvironment([bp]) as env:
        t0 = env.now_millis()
        done = await env.aio.run(bp, {})
        history = await env.aio.history(done)
    assert done.context == {"shipped": True}
    assert history[-1].ended_at - t0 == 3 * 86_400_000


async def test_instances_of_other_workflows_do_not_stop_the_skipping(kit: Kit) -> None:
    stranger = kit.define("stranger").step(_ship).build()  # nobody serves it: READY for ever
    bp = kit.define("napper").sleep("nap", timedelta(days=1)).step(_ship).build()
    async with kit.env([bp]) as env:
        await env.client.register(stranger)
        await env.client.start(stranger, {})
        t0 = env.now_millis()
        done = await env.run(bp, {})
        assert env.now_millis() - t0 == 86_400_000
    assert done.context == {"shipped": True}


async def test_a_virtual_clock_leaves_the_ids_of_wall_clock_servers_alone() -> None:
    from wiggle._engine.state import new_instance_id

    bp = Workflow.define(f"ids-{uuid.uuid4().hex[:6]}").sleep("nap", timedelta(days=400)).step(_ship).build()
    async with WorkflowEnvironment([bp]) as env:
        done = await env.run(bp, {})
    assert int(done.instance_id[3:15], 16) == done.created_at  # the id carries the virtual time
    wall = new_instance_id()  # the wall clock's ids do not jump 400 days ahead with it
    assert int(wall[3:15], 16) < env.now_millis() - 399 * 86_400_000


async def test_a_virtual_clock_s_children_and_schedule_ticks_leave_wall_clock_ids_alone() -> None:
    # A sub-workflow's child and a schedule's tick get their ids in the engine and the schedule
    # duty, not in a start: they took the process-wide ids, and 400 virtual days dragged the ids
    # of every wall-clock server in the process ahead with them (their list queries by creation
    # time then missed their own instances: tests/storage/test_postgres_store.py failed after a
    # test kit's schedules had run in the same process).
    from wiggle._engine.state import new_instance_id, now_millis

    tag = uuid.uuid4().hex[:6]
    child = Workflow.define(f"ids-child-{tag}").step(_ship).build()
    parent = (
        Workflow.define(f"ids-parent-{tag}")
        .sleep("nap", timedelta(days=400))
        .sub_workflow("sub", child)
        .build()
    )
    async with WorkflowEnvironment([child, parent]) as env:
        done = await env.run(parent, {})
        schedule = await env.create_schedule(f"ids-{tag}", child, {}, every=timedelta(days=1))
        await env.sleep(timedelta(milliseconds=schedule.next_tick_at - env.now_millis()))
        page, _ = await env.client.list(workflow=child.name)
    assert done.status == "COMPLETED" and len(page) == 2  # the parent's child and the tick's instance
    assert all(int(i.instance_id[3:15], 16) >= i.created_at for i in page)  # virtual-time ids
    wall = new_instance_id()
    assert abs(int(wall[3:15], 16) - now_millis()) < 60_000, "wall-clock ids ran ahead with the virtual clock"


async def test_the_waits_take_a_timedelta_or_seconds_as_the_clients_do() -> None:
    # timeout=timedelta(seconds=10) met "unsupported operand type(s) for +: 'float' and
    # 'datetime.timedelta'" in wait, run, wait_for and sleep.
    nap = Workflow.define("timedelta-timeouts").sleep("nap", timedelta(hours=1)).build()
    ten = timedelta(seconds=10)
    async with WorkflowEnvironment([nap]) as env:
        info = await env.start_workflow(nap, {})
        assert (await env.wait_for(info, "nap", timeout=ten)).status == "RUNNING"
        assert (await env.wait(info, timeout=ten)).status == "COMPLETED"
        assert (await env.result(info, timeout=ten)).status == "COMPLETED"
        assert (await env.run(nap, {}, timeout=ten)).status == "COMPLETED"
        await env.sleep(timedelta(minutes=5), timeout=ten)
        for bad, error, message in [
            ("10", TypeError, r"timeout is a timedelta or seconds \(real time\), got '10' \(str\)"),
            (-1, ValueError, r"timeout must be 0 or more seconds \(real time\), got -1"),
            (float("nan"), ValueError, r"timeout must be 0 or more seconds \(real time\), got nan"),
            (timedelta(seconds=-1), ValueError, "timeout must be 0 or more seconds"),
        ]:
            for wait in (
                env.wait(info, timeout=bad),
                env.result(info, timeout=bad),
                env.wait_for(info, "nap", timeout=bad),
                env.sleep(1, timeout=bad),
                env.run(nap, {}, timeout=bad),
            ):
                with pytest.raises(error, match=message):
                    await wait
        instances, _ = await env.client.list(workflow=nap.name)
        assert len(instances) == 2  # a run with a wrong timeout starts nothing


def test_the_blocking_face_s_client_outlives_a_with_block() -> None:
    # `with env.client as client:` closed the environment's client for good: later calls on
    # env.client raised ClientClosed. It is the environment's, as env.aio.client is.
    flow = Workflow.define("owned-client").sleep("nap", timedelta(hours=1)).build()
    with SyncWorkflowEnvironment([flow]) as env:
        info = env.start_workflow(flow, {})
        with env.client as client:
            assert client.get(info.instance_id).status == "RUNNING"
        env.client.close()
        assert env.client.get(info.instance_id).status == "RUNNING"
        assert env.run(flow, {}).status == "COMPLETED"
        kept = env.client
    with pytest.raises(ClientClosed):  # the environment closes it when it stops
        kept.get(info.instance_id)
