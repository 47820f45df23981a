"""A wait that times out because another instance holds the virtual clock says so, naming the
instance and its step and what to do (wiggle/_testing/diagnosis.py, ``Diagnosis.holding``). A
due READY step counts as busy for every instance (skipping.py), so one on a queue nothing
serves, left by an earlier test on a module's environment, kept the clock still, and the next
test's 30-day sleep failed with only "still RUNNING after 30.0 s (real) at net30 WAITING" (an
outside trial)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from wiggle import Workflow
from wiggle.testing import WorkflowEnvironment


def refund(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def done(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "done": True}


REFUNDS = Workflow.define("held-refunds").step(refund, queue="refunds").build()
NET30 = Workflow.define("held-net30").sleep("net30", timedelta(days=30)).step(done).build()


async def test_a_wait_names_the_instance_that_holds_the_clock() -> None:
    async with WorkflowEnvironment([NET30]) as env:  # nothing serves queue 'refunds'
        stuck = await env.start_workflow(REFUNDS, {})
        held = (
            rf"the clock is held by instance {stuck.instance_id}: its step 'refund' is READY on queue "
            r"'refunds', which no worker of this environment serves, and time does not jump for any "
            rf"instance while a step is due; cancel it \(env.cancel\('{stuck.instance_id}'\)\) or serve "
            r"its queue \(start_worker\(\[...\]\)\)"
        )
        info = await env.start_workflow(NET30, {})
        with pytest.raises(TimeoutError, match=r"at net30 WAITING; " + held):
            await env.wait(info, timeout=0.5)
        with pytest.raises(TimeoutError, match=r"did not reach 'done' .*; " + held):
            await env.wait_for(info, "done", timeout=0.5)
        with pytest.raises(TimeoutError, match=r"sleep: instances stayed busy .*; " + held):
            await env.sleep(timedelta(days=1), timeout=0.5)
        await env.cancel(stuck)  # as the message says: then the clock moves again
        assert (await env.result(info)).context == {"done": True}


async def test_a_wait_on_time_held_for_good_gives_up_early() -> None:
    """A wait whose instance waits only on time while another instance's due step sits on a queue
    nothing serves cannot end: it lasted its whole timeout (30 s by default). It now gives up as
    for its own instance's unserved step, saying which instance holds the clock."""
    async with WorkflowEnvironment([NET30]) as env:
        stuck = await env.start_workflow(REFUNDS, {})
        info = await env.start_workflow(NET30, {})
        with pytest.raises(TimeoutError) as raised:
            await env.wait(info)  # the default timeout, 30 s
        said = str(raised.value)
        assert "a step waited 2 s on a queue nothing serves" in said, said
        assert f"the clock is held by instance {stuck.instance_id}" in said, said


def slow(ctx: dict[str, Any]) -> dict[str, Any]:
    import time

    time.sleep(2.5)  # real time, longer than a wait's give-up on an unserved queue (2 s)
    return {**ctx, "slow": True}


SLOW = Workflow.define("held-slow").step(slow).build()


async def test_a_wait_on_a_running_step_is_not_given_up_while_the_clock_is_held() -> None:
    """The early give-up is for an instance that waits on time only: one whose step runs on a
    worker moves on in real time, whatever holds the clock."""
    async with WorkflowEnvironment([SLOW]) as env:
        await env.start_workflow(REFUNDS, {})  # holds the clock: nothing serves 'refunds'
        info = await env.start_workflow(SLOW, {})
        assert (await env.result(info, timeout=20)).context == {"slow": True}
