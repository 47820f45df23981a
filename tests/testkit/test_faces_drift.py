"""The test kit's blocking face and its AsyncView are generated from WorkflowEnvironment and stay so.

Regenerate with python scripts/gen_testkit_faces.py after changing a public method of
wiggle/_testing/environment.py (tests/testkit/test_api_parity.py checks the three faces' shapes).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_testkit_faces.py"


def _generator():  # the script is not a package module; load it by path
    spec = importlib.util.spec_from_file_location("gen_testkit_faces", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_faces_match_the_environment() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_changed_environment_method_shows_in_both_faces() -> None:
    gen = _generator()
    source = gen.SOURCE.read_text()
    changed = source.replace(
        '    async def cancel(self, instance_id: str | InstanceInfo, reason: str = "cancelled") -> InstanceInfo:',
        '    async def cancel(self, instance_id: str | InstanceInfo, reason: str = "stop") -> InstanceInfo:',
    )
    assert changed != source, "the test's anchor moved: update it"
    made = gen.generate(changed, gen.TARGET.read_text())
    assert made.count('def cancel(self, instance_id: str | InstanceInfo, reason: str = "stop")') == 2
    assert gen.TARGET.read_text() != made  # so --check would fail


def test_a_section_hand_edited_away_is_refused() -> None:
    gen = _generator()
    with pytest.raises(SystemExit, match="must hold two sections"):
        gen.generate(gen.SOURCE.read_text(), gen.TARGET.read_text().replace(gen.END, "", 1))
