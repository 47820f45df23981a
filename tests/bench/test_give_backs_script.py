"""bench/give_backs.py runs (small, on the in-memory store and on PostgreSQL): the old worker gives
the new step back about once per claimed step of its first claims, not on every poll, and the new
worker then runs every waiting step (the script checks each context). The PostgreSQL case always
runs: PostgreSQL being unreachable fails it (tests/pg.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "give_backs.py"


@pytest.mark.parametrize(("store", "keep"), [("memory", False), ("postgres", False), ("memory", True)])
def test_the_old_worker_gives_back_a_few_steps_and_the_new_one_runs_them_all(store: str, keep: bool) -> None:
    database = ["--database-url", TEST_DATABASE_URL] if store == "postgres" else []
    kept = ["--keep-old"] if keep else []
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--instances", "40", "--seconds", "1", *database, *kept],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    found = re.search(r"(\d+) give-backs in all", result.stdout)
    assert found, result.stdout
    # at most the steps of its first claims (16 slots): before the holds, thousands in a second
    assert 1 <= int(found.group(1)) <= 40, result.stdout
    assert "ran the 40 waiting steps" in result.stdout and "every context checked" in result.stdout
    assert ("the old worker still up" in result.stdout) == keep, result.stdout
