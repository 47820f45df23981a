"""The test runs' own PostgreSQL hygiene (tests/pg.py): a schema left by a run whose process is
gone (killed, or its drop failed) is dropped when a later run starts; the schemas of a run going
on at the same time are kept."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from pg import TEST_DATABASE_URL, create_schema, drop_schema, drop_stale_schemas

pytestmark = pytest.mark.postgres


def _gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


def _schemas() -> set[str]:
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'wiggle%'")}


def test_a_gone_runs_schemas_are_dropped_and_a_live_runs_are_kept() -> None:
    gone = _gone_pid()
    stale = [create_schema(f"wiggle_test_{gone}_0badc0de"), create_schema(f"wiggle_conf_{gone}_0badc0de")]
    live = [
        create_schema(f"wiggle_test_{os.getpid()}_0badc0de"),
        create_schema(f"wiggle_conf_{os.getppid()}_0badc0de"),
    ]
    other = create_schema(f"wiggle_bench_{gone}")  # not a test run's name: never touched
    try:
        dropped = drop_stale_schemas()
        assert set(stale) <= set(dropped)
        left = _schemas()
        assert not set(stale) & left
        assert set(live) <= left and other in left
    finally:
        for name in (*stale, *live, other):
            drop_schema(name)
