"""bench/starts.py runs (small, on the in-memory store): the threads' runs, and start_many unless
``--many 0``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "starts.py"


@pytest.mark.parametrize("many", [0, 30])
def test_runs_the_threads_and_start_many_unless_told_none(many: int) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--instances", "20", "--threads", "2", "--clients", "shared"]
        + ["--many", str(many), "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "run 1: start x2 threads (shared clients)" in result.stdout, result.stdout
    assert ("start_many(30)" in result.stdout) == (many == 30), result.stdout
