"""``wiggle_module_env`` under pytest-xdist: one environment per module in each xdist worker.

A module scope is per process, and each xdist worker is one: every worker that runs tests of a
module makes its own environment. docs/testing.md says so where it describes the fixture (an
outside trial found it unsaid), and says how to keep a module whose tests build on each other on
one worker; both are checked here, in a fresh pytest as a user runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"

USER_TESTS = """
import pytest

from wiggle import Workflow

flow = Workflow.define("xdist-flow").sleep("nap", 60).build()
pytestmark = pytest.mark.wiggle(workflows=[flow])


def test_first(wiggle_module_env):
    wiggle_module_env.run(flow, {})


def test_second_sees_the_first_s_instance_only(wiggle_module_env):
    instances, _ = wiggle_module_env.client.list(workflow="xdist-flow")
    assert len(instances) == 1
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_xdist_worker_has_its_own_module_environment(tmp_path: Path) -> None:
    # --dist each runs every test on both workers: each worker's environment saw one run only
    run = _pytest(tmp_path, "--dist", "each")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout, run.stdout


def test_loadscope_keeps_a_module_on_one_worker(tmp_path: Path) -> None:
    run = _pytest(tmp_path, "--dist", "loadscope")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, run.stdout


def test_the_fixture_s_description_says_so() -> None:
    fixtures = DOCS.read_text().split("- **Fixtures**", 1)[1].split("\n- **", 1)[0]
    said = re.sub(r"\s+", " ", fixtures)
    assert "under pytest-xdist, one per module *in each xdist worker*" in said, said
    assert "--dist loadscope" in said, said
