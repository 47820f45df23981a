"""bench/layer_cost.py, run small: it drives every instance to COMPLETED and prints a figure per mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "layer_cost.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(150)
def test_pure_build_gives_a_cost_per_step_for_both_modes() -> None:
    result = _run("--rounds", "1", "--instances", "10", "--lanes", "3", "--builds", "python")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:3]}
    assert set(rows) == {"SERVER", "LOCAL_SYNC"}
    for figures in rows.values():
        assert len(figures) == 1 and float(figures[0]) > 0  # one build: no ratio column
    assert "10 instances × 20 steps, 3 in flight" in result.stdout


def test_an_unknown_build_is_refused_by_name() -> None:
    result = _run("--builds", "pypy")
    assert result.returncode == 2
    assert "--builds 'pypy': name cython, python or both" in result.stderr
