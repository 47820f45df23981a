"""``async def`` tests using the wiggle fixtures run without any async configuration.

The plugin runs them itself (on a loop of its own) unless pytest-asyncio took them: a marked test
in strict mode, or any coroutine test in auto mode. A coroutine test that uses no wiggle fixture
is not the plugin's business and fails as pytest says.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_TESTS = """
import asyncio

import pytest

from wiggle import Workflow

flow = Workflow.define("plugin-async").sleep("nap", 60).build()
pytestmark = pytest.mark.wiggle(workflows=[flow])


async def test_plain(wiggle_env):
    assert (await wiggle_env.aio.run(flow, {"a": 1})).context == {"a": 1}


@pytest.mark.asyncio
async def test_marked_for_pytest_asyncio(wiggle_env):
    assert (await wiggle_env.aio.run(flow, {})).status == "COMPLETED"


async def test_module_env(wiggle_module_env):
    assert (await wiggle_module_env.aio.run(flow, {})).status == "COMPLETED"


async def test_without_a_wiggle_fixture():
    await asyncio.sleep(0)
"""


def _pytest(tmp_path: Path, ini: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    (tmp_path / "pytest.ini").write_text(ini)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_coroutine_tests_with_wiggle_fixtures_run_without_asyncio_mode(tmp_path: Path) -> None:
    run = _pytest(tmp_path, "[pytest]\n")
    assert "3 passed" in run.stdout, run.stdout + run.stderr
    assert "1 failed" in run.stdout, run.stdout
    assert "FAILED test_user.py::test_without_a_wiggle_fixture" in run.stdout, run.stdout


@pytest.mark.parametrize("mode", ["auto", "strict"])
def test_pytest_asyncio_keeps_the_tests_it_takes(tmp_path: Path, mode: str) -> None:
    run = _pytest(
        tmp_path, f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = function\n"
    )
    if mode == "auto":
        assert run.returncode == 0, run.stdout + run.stderr
        assert "4 passed" in run.stdout, run.stdout
    else:
        assert "3 passed" in run.stdout and "1 failed" in run.stdout, run.stdout + run.stderr
