"""The test environment's arguments are checked before anything starts, each refusal naming the
argument (wiggle/_testing/arguments.py): the blueprints, the server settings' types and ranges, and
the durations that move virtual time. Before, ``lease_millis="x"`` or ``2.5`` started a server whose
starts or polls were internal errors, ``lease_millis=-5`` ran, a lone Blueprint met "'Blueprint'
object is not iterable", and ``sleep(float("inf"))`` an OverflowError."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from wiggle import WorkerOptions, Workflow
from wiggle.errors import InvalidArgument
from wiggle.testing import SyncWorkflowEnvironment, WorkflowEnvironment


def tidy(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "tidy": True}


FLOW = Workflow.define("arguments-flow").step(tidy).build()


@pytest.mark.parametrize(
    "workflows, message",
    [
        (
            FLOW,
            r"workflows is a list of Blueprints, got the Blueprint 'arguments-flow' itself: pass workflows=\[...\]",
        ),
        (
            [Workflow.define("unbuilt").step(tidy)],
            r"workflows\[0\] is the Workflow builder 'unbuilt': call .build\(\) on it",
        ),
        ([FLOW, "arguments-flow"], r"workflows\[1\] is a str, not a Blueprint"),
        (7, "workflows is a list of Blueprints, got int"),
    ],
)
def test_the_blueprints_are_a_list_of_built_ones(workflows: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        WorkflowEnvironment(workflows=workflows)


@pytest.mark.parametrize(
    "settings, error, message",
    [
        (
            {"lease_millis": "x"},
            TypeError,
            "the server setting lease_millis='x' does not fit: Expected `int`, got `str`",
        ),
        (
            {"lease_millis": 2.5},
            TypeError,
            "the server setting lease_millis=2.5 does not fit: Expected `int`, got `float`",
        ),
        (
            {"max_payload_bytes": True},
            TypeError,
            "max_payload_bytes=True does not fit: Expected `int`, got `bool`",
        ),
        (
            {"lease_millis": -5},
            InvalidArgument,
            r"--lease-millis \(WIGGLE_LEASE_MILLIS\) must be between 100 and",
        ),
    ],
)
def test_a_server_setting_of_the_wrong_type_or_range_is_refused(
    settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        WorkflowEnvironment(workflows=[FLOW], **settings)
    with pytest.raises(error, match=message):  # the blocking face makes its environment at its start
        with SyncWorkflowEnvironment(workflows=[FLOW], **settings):
            pass


async def test_settings_that_fit_are_used() -> None:
    async with WorkflowEnvironment(workflows=[FLOW], lease_millis=5000, execution_mode="LOCAL_SYNC") as env:
        assert env.server.config.lease_millis == 5000
        done = await env.run(FLOW, {})
        assert done.context == {"tidy": True}
        assert [e.outcome for e in await env.history(done)] == ["COMPLETED", "END"]


@pytest.mark.parametrize("delta", [float("nan"), float("inf"), 1e300, timedelta(days=365 * 11)])
async def test_the_clock_moves_by_a_finite_duration_of_at_most_ten_years(delta: Any) -> None:
    async with WorkflowEnvironment(workflows=[FLOW]) as env:
        before = env.now_millis()
        for move in (env.advance, env.sleep):
            with pytest.raises(ValueError, match=r"must be a finite duration of at most 315576000 seconds"):
                await move(delta)
        assert env.now_millis() == before
        await env.advance(timedelta(days=365 * 10))  # the longest move is taken
        assert env.now_millis() - before == 365 * 10 * 86_400_000


@pytest.mark.parametrize("value", ["false", 0, None, "off"])
def test_time_skipping_is_a_bool(value: Any) -> None:
    # "false" is truthy: time_skipping="false" (or @pytest.mark.wiggle(time_skipping="false"))
    # left the clock skipping, silently.
    message = rf"time_skipping is True or False, got {value!r} \({type(value).__name__}\)"
    with pytest.raises(TypeError, match=message):
        WorkflowEnvironment(workflows=[FLOW], time_skipping=value)
    with pytest.raises(TypeError, match=message):  # the marker's keywords reach this face
        with SyncWorkflowEnvironment(workflows=[FLOW], time_skipping=value):
            pass


async def test_a_wait_s_skip_is_a_bool() -> None:
    async with WorkflowEnvironment(workflows=[FLOW], time_skipping=False) as env:
        info = await env.start_workflow(FLOW, {})
        for wait in (env.wait(info, skip="yes"), env.wait_for(info, "end", skip="yes")):  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"skip is True or False, got 'yes' \(str\)"):
                await wait


@pytest.mark.parametrize(
    "keywords, error, message",
    [
        (
            {"workers": "2"},
            TypeError,
            r"workers is a number of workers \(an int, 0 or more\), got '2' \(str\)",
        ),
        (
            {"workers": 2.0},
            TypeError,
            r"workers is a number of workers \(an int, 0 or more\), got 2.0 \(float\)",
        ),
        ({"workers": -1}, ValueError, "workers must be >= 0, got -1"),
        (
            {"worker_options": {"concurrency": 4}},
            TypeError,
            r"worker_options is a wiggle.WorkerOptions, got dict .*: pass worker_options=WorkerOptions\(\*\*\{...\}\)",
        ),
        ({"database_url": 5}, TypeError, r"database_url is a str, got 5 \(int\)"),
        ({"database_schema": None}, TypeError, r"database_schema is a str, got None \(NoneType\)"),
        (
            {"start": "2030-01-01"},
            TypeError,
            r"start is an aware datetime \(datetime\(2030, 1, 1, tzinfo=timezone.utc\)\), got '2030-01-01' \(str\)",
        ),
        (
            {"execution_mode": "local_sync"},
            TypeError,
            "execution_mode is an ExecutionMode or one of SERVER, LOCAL_SYNC, LOCAL_ASYNC, DEFAULT, got 'local_sync'",
        ),
        ({"lease_millis": "x"}, TypeError, "the server setting lease_millis='x' does not fit"),
        (
            {"workers": 2, "worker_options": WorkerOptions(worker_id="w")},
            ValueError,
            "worker_options.worker_id='w' would name all 2 workers alike",
        ),
    ],
)
def test_the_environment_s_own_keywords_are_checked_before_anything_starts(
    keywords: dict[str, Any], error: type[Exception], message: str
) -> None:
    # The marker's keywords go to SyncWorkflowEnvironment, which made its environment only at its
    # start, on its loop's thread: each of these met an error naming nothing there.
    with pytest.raises(error, match=message):
        WorkflowEnvironment(workflows=[FLOW], **keywords)
    with pytest.raises(error, match=message):
        SyncWorkflowEnvironment(workflows=[FLOW], **keywords)  # not started: refused at once


def test_the_blocking_face_refuses_a_lone_blueprint_at_once() -> None:
    with pytest.raises(
        TypeError, match=r"workflows is a list of Blueprints, got the Blueprint 'arguments-flow'"
    ):
        SyncWorkflowEnvironment(FLOW)
