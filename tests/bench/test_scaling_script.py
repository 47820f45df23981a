"""bench/scaling.py: CPU per instance by role with 1, 2, ... server processes on one database.

Run small on PostgreSQL: each N's runs verify, the paced form (--per-server-rate) starts N x R a
second for --seconds on every server (so each N's runs start N times the instances), and the
table and its ratios print; bad settings are refused before anything runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "scaling.py"
PG_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WIGGLE_BENCH_", "WIGGLE_EXECUTION_MODE"))
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=280
    )


@pytest.mark.parametrize(
    "args",
    [["--per-server-rate", "-1"], ["--per-server-rate", "5", "--seconds", "0"], ["--servers", "0,2"]],
)
def test_bad_settings_are_refused_before_anything_runs(args: list[str]) -> None:
    result = _run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("scaling: "), result.stderr


@pytest.mark.postgres
@pytest.mark.timeout(300)
@pytest.mark.skipif(os.environ.get("WIGGLE_TEST_POSTGRES") != "1", reason="set WIGGLE_TEST_POSTGRES=1")
def test_paced_runs_give_every_server_the_same_load() -> None:
    result = _run(
        "--servers", "1,2", "--modes", "LOCAL_ASYNC", "--rounds", "1", "--steps", "3",
        "--workers", "2", "--concurrency", "2", "--per-server-rate", "20", "--seconds", "1",
        "--database-url", PG_URL, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["settings"]["per_server_rate"] == 20.0
    runs = {n: r for _, n, r in doc["sequence"]}
    assert runs[1]["ok"] and runs[2]["ok"], runs
    assert (runs[1]["instances"], runs[2]["instances"]) == (20, 40)  # N x 20/s for 1 s
    assert runs[1]["start_p50_ms"] > 0 and runs[2]["start_p50_ms"] > 0
    for n in ("1", "2"):
        cpu = doc["medians"]["LOCAL_ASYNC"][n]["cpu_ms"]
        assert cpu["server"] > 0 and cpu["postgres"] > 0 and cpu["workers"] > 0, cpu
    assert "started during the run at N x 20/s for 1 s" in result.stderr
    assert "N=2 against N=1, CPU per instance: server" in result.stderr
    assert "(costs at 20 inst/s a server, where groups are smaller than at saturation: a lower bound)" in (
        result.stderr
    )
