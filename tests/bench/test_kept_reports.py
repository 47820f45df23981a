"""bench/kept_reports.py, run small on PostgreSQL: every report after an instance's first runs on
the state its server kept, and the script prints the figures it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "kept_reports.py"

pytestmark = pytest.mark.postgres


def test_the_reports_of_a_local_run_after_its_first_run_on_the_kept_state() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--database-url", TEST_DATABASE_URL, "--runs", "2", "--steps", "11"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    figures = dict(line.split() for line in result.stdout.splitlines())
    assert float(figures["reports"]) == 20
    assert float(figures["kept_share"]) == 0.9  # each instance's first report reads it
    assert float(figures["cpu_ms_per_report"]) > 0 and float(figures["group_commit_p50_ms"]) > 0
