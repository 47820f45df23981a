"""``wiggle_module_env`` reads the module's ``wiggle`` marker only: a test of it that carries a
marker of its own fails at its setup, saying where the marker goes (wiggle/pytest_plugin.py).

An outside trial's ``@pytest.mark.wiggle(workflows=[wf])`` on a test of the module fixture was
silently ignored: the environment had no workflow, and the test's wait ran 2 s before it failed
with "no worker of this environment serves queue 'dflt' (is its workflow in workflows=[...] or
start_worker([...])?)", which did not say that the marker was the trouble.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

USER_TESTS = """
import pytest

from wiggle import Workflow


def a(ctx):
    return {**ctx, "a": True}


wf = Workflow.define("marker-flow").step(a).build()
other = Workflow.define("marker-other").step(a).build()
pytestmark = pytest.mark.wiggle(workflows=[other])


@pytest.mark.wiggle(workflows=[wf])
def test_own_marker(wiggle_module_env):
    wiggle_module_env.run(wf, {})


@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.wiggle(workers=2))])
def test_param_marker(wiggle_module_env, n):
    pass


@pytest.mark.wiggle(workflows=[wf])
class TestOnAClass:
    def test_class_marker(self, wiggle_module_env):
        pass


def test_module_marker(wiggle_module_env):
    assert wiggle_module_env.run(other, {}).context == {"a": True}


@pytest.mark.wiggle(workflows=[wf])
def test_both_fixtures(wiggle_env, wiggle_module_env):  # the test's marker is wiggle_env's
    assert wiggle_env.run(wf, {}).context == {"a": True}
"""


def test_a_test_marker_on_a_module_env_test_fails_at_its_setup(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert "2 passed, 3 errors" in run.stdout, out
    for test, settings in [
        ("test_own_marker", "workflows=..."),
        ("test_param_marker[1]", "workers=..."),
        ("test_class_marker", "workflows=..."),
    ]:
        assert (
            f"{test} uses wiggle_module_env and has a @pytest.mark.wiggle({settings}) of its own, which "
            "that fixture never reads: its environment is made once for the module, from the module's "
            "marker. Put the marker on the module (pytestmark = pytest.mark.wiggle(...)), or use the "
            "wiggle_env fixture (one environment per test, configured by the test's marker)"
        ) in out, out
    assert "no worker of this environment serves" not in out, out
