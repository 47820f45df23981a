"""bench/subworkflow_fanout.py runs as a user runs it (small, on PostgreSQL: the clock duties it
measures start each child there), checks every child's result and prints children per second."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from bench_scripts import BENCH
from pg import STORES, TEST_DATABASE_URL


@pytest.mark.skipif("postgres" not in STORES, reason="needs PostgreSQL (WIGGLE_TEST_POSTGRES=1, as CI sets)")
def test_a_small_fanout_finishes_with_every_result_checked() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "subworkflow_fanout.py"), "--items", "40", "--rounds", "1"]
        + ["--database-url", TEST_DATABASE_URL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"round 1: 40 children in [0-9.]+ s = [0-9]+ children/s\n", done.stdout), done.stdout
