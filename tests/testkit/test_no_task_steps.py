"""A workflow without worker steps (only sleeps, signal waits, user tasks) runs in the test kit.

No worker is needed for it, so the kit starts none (a Worker with nothing to serve refuses to
start: "the worker serves no queues"), through WorkflowEnvironment, SyncWorkflowEnvironment and
the ``wiggle_env`` pytest fixture alike.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from wiggle import Workflow
from wiggle.testing import SyncWorkflowEnvironment

from .conftest import Kit

HOUR = 3_600_000


def _stepless(kit: Kit) -> Any:
    return (
        kit.define("stepless")
        .sleep("nap", timedelta(hours=3))
        .wait_signal("go", name="await_go")
        .user_task("approve")
        .build()
    )


async def test_a_workflow_without_task_steps_runs_in_the_environment(kit: Kit) -> None:
    bp = _stepless(kit)
    assert not bp.queues()
    async with kit.env([bp]) as env:
        assert env.workers == []  # nothing to serve: no worker started
        t0 = env.now_millis()
        info = await env.start_workflow(bp, {"n": 1})
        await env.wait_for(info, "await_go")  # skips the sleep
        assert env.now_millis() - t0 == 3 * HOUR
        sent = await env.signal(info, "go", {"by": "test"})
        await env.complete_user_task(info, "approve", {"ok": True})
        done = await env.result(info)
        path = await env.path(done)
    assert sent.outcome == "DELIVERED"
    assert done.status == "COMPLETED"
    assert done.context == {"n": 1, "by": "test", "ok": True}
    assert path == ["nap", "await_go", "approve", "end"]


def test_a_workflow_without_task_steps_runs_in_the_sync_environment() -> None:
    bp = Workflow.define(f"stepless-sync-{uuid.uuid4().hex[:8]}").sleep("nap", 60).wait_signal("go").build()
    with SyncWorkflowEnvironment([bp]) as env:
        assert env.env.workers == []
        info = env.start_workflow(bp, {})
        env.wait_for(info, "go")
        env.signal(info, "go", {"went": True})
        assert env.result(info).context == {"went": True}


async def test_workers_start_for_the_blueprints_that_have_task_steps(kit: Kit) -> None:
    stepless = _stepless(kit)
    stepped = kit.define("stepped").step(lambda ctx: {**ctx, "done": True}, name="work").build()
    async with kit.env([stepless, stepped], workers=2) as env:
        assert len(env.workers) == 2
        assert all({b.name for b in w.blueprints} == {stepless.name, stepped.name} for w in env.workers)
        info = await env.start_workflow(stepless, {})
        await env.signal(info, "go")
        await env.complete_user_task(info, "approve")
        assert (await env.result(info)).status == "COMPLETED"
        assert (await env.run(stepped, {})).context == {"done": True}


def test_a_user_worker_with_nothing_to_serve_is_still_refused() -> None:
    from wiggle.worker import Worker

    bp = Workflow.define("stepless-worker").sleep("nap", 1).build()
    with pytest.raises(ValueError, match="serves no queues"):
        Worker("127.0.0.1:1", [bp])


USER_TESTS = """
from datetime import timedelta

import pytest

from wiggle import Workflow

flow = Workflow.define("stepless-plugin").sleep("nap", timedelta(days=2)).wait_signal("go").build()


@pytest.mark.wiggle(workflows=[flow])
def test_sync(wiggle_env):
    info = wiggle_env.start_workflow(flow, {})
    wiggle_env.wait_for(info, "go")
    wiggle_env.signal(info, "go", {"went": True})
    assert wiggle_env.result(info).context == {"went": True}


@pytest.mark.wiggle(workflows=[flow])
async def test_async(wiggle_env):
    info = await wiggle_env.aio.start_workflow(flow, {})
    await wiggle_env.aio.wait_for(info, "go")
    await wiggle_env.aio.signal(info, "go", {"went": 1})
    assert (await wiggle_env.aio.result(info)).context == {"went": 1}
"""


def test_the_wiggle_env_fixture_runs_a_workflow_without_task_steps(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "test_user.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, run.stdout
