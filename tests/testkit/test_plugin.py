"""The pytest plugin, as a user gets it: installed through its entry point, run in a fresh pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import POSTGRES_URL, STORES

USER_TESTS = """
from datetime import timedelta

import pytest

from wiggle import Workflow


def done(ctx):
    return {**ctx, "done": True}


flow = Workflow.define("plugin-flow").sleep("nap", timedelta(days=30)).step(done).build()
pytestmark = pytest.mark.wiggle(workflows=[flow])


def test_sync(wiggle_env):
    start = wiggle_env.now_millis()
    assert wiggle_env.run(flow, {}).context == {"done": True}
    assert wiggle_env.now_millis() - start == 30 * 86_400_000


async def test_async(wiggle_env):
    result = await wiggle_env.aio.run(flow, {"n": 1})
    assert result.context == {"n": 1, "done": True}


@pytest.mark.wiggle(workflows=[flow], execution_mode="LOCAL_SYNC", workers=2)
def test_marker_on_the_test(wiggle_env):
    assert len(wiggle_env.env.workers) == 2
    assert wiggle_env.run(flow, {}).status == "COMPLETED"


def test_module_env_first(wiggle_module_env):
    wiggle_module_env.run(flow, {})


def test_module_env_is_shared(wiggle_module_env):
    instances, _ = wiggle_module_env.client.list(workflow="plugin-flow")
    assert len(instances) == 1  # the instance the previous test ran
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("store", STORES)
def test_the_fixtures_work_in_sync_and_async_tests_without_configuration(tmp_path: Path, store: str) -> None:
    run = _pytest(tmp_path, *([f"--wiggle-database-url={POSTGRES_URL}"] if store == "postgres" else []))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5 passed" in run.stdout, run.stdout


def test_the_plugin_is_registered_by_the_entry_point(tmp_path: Path) -> None:
    run = _pytest(tmp_path, "-p", "no:wiggle")
    assert run.returncode != 0
    assert "fixture 'wiggle_env' not found" in run.stdout, run.stdout
