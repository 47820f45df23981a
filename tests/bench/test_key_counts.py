"""bench/key_counts.py runs (small) on the test PostgreSQL and prints one row per size."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "key_counts.py"


@pytest.mark.postgres
def test_times_both_forms_of_the_claim() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--database-url", TEST_DATABASE_URL, "--running", "40,200"]
        + ["--rounds", "2", "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["40", "200"], result.stdout
    for row in rows:
        assert re.fullmatch(r"\d+\.\dx", row[-1]), result.stdout
