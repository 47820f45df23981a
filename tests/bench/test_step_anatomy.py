"""bench/step_anatomy.py: the parts of a report followed by request id (pure), and the script run
small on both stores (its hooks must still find what they wrap: a rename in the package fails
here, not silently in a later measurement)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg import STORES, TEST_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "step_anatomy.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("step_anatomy_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(rid: int, t: float, handler: float) -> list[tuple[float, str, int]]:
    """One AdvanceRun's marks from ``t`` on (ms offsets), its handler ``handler`` ms long."""
    ms = 0.001
    return [
        (t, "w_call0:AdvanceRun", rid),
        (t + 0.02 * ms, "w_serialize", rid),
        (t + 0.2 * ms, "s_parse", rid),
        (t + 0.25 * ms, "s_handler0", rid),
        (t + 0.3 * ms, "group0", 0),
        (t + 0.5 * ms, "read_trip0", 0),
        (t + 0.7 * ms, "read_trip1", 0),
        (t + 0.8 * ms, "commit_trip0", 0),
        (t + 1.2 * ms, "commit_trip1", 0),
        (t + 1.22 * ms, "group1", 0),
        (t + (0.25 + handler) * ms, "s_handler1", rid),
        (t + (0.27 + handler) * ms, "s_serialize", rid),
        (t + (0.55 + handler) * ms, "w_parse", rid),
        (t + (0.6 + handler) * ms, "w_call1:AdvanceRun", rid),
    ]


def test_each_part_is_the_median_over_the_reports_after_the_warm_up() -> None:
    anatomy = _module().anatomy
    events = []
    for i in range(20):
        events += _report(i + 1, i * 1.0, 1.0 if i else 50.0)  # the first one slow: warm-up, left out
    # a poll in between, under its own request id: not a report, not counted
    events += [(5.5, "w_call0:PollTasks", 99), (5.6, "w_serialize", 99), (5.7, "w_call1:PollTasks", 99)]
    # a read of another kind outside every report's handler: not counted either
    events += [(5.8, "read_trip0", 0), (5.9, "read_trip1", 0)]
    parts = anatomy(events, "AdvanceRun")
    assert parts["reports"] == 18  # 20, the first tenth left out
    assert parts["report round trip (worker's call)"] == pytest.approx(1.6)
    assert parts["worker -> server"] == pytest.approx(0.18)
    assert parts["server: handler"] == pytest.approx(1.0)
    assert parts["server -> worker"] == pytest.approx(0.28)
    assert parts["    BEGIN + read round trip"] == pytest.approx(0.2)
    assert parts["    writes + COMMIT round trip"] == pytest.approx(0.4)
    assert parts["BEGIN + read round trip per report"] == 1.0
    assert anatomy(events, "CompleteTask") == {"reports": 0.0}


@pytest.mark.parametrize("store", STORES)
def test_the_script_follows_every_report_on_each_store(store: str) -> None:
    database = ["--database-url", TEST_DATABASE_URL] if store == "postgres" else []
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--instances", "20", "--steps", "3", "--json", *database],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    figures = json.loads(result.stdout)
    parts = figures["parts_ms"]
    assert parts["reports"] == 81  # 30 instances (10 of them warm-up) x 3 steps, less the first tenth
    assert 0 < parts["server: handler"] < parts["report round trip (worker's call)"]
    if store == "postgres":
        # a group commit of a kept instance is one statement, no read (state_cache.py); an
        # instance's first report reads it (the counts are of the spans that began inside a
        # report's handler: another transaction of the server's may be counted too)
        assert parts["check + writes, one statement per report"] >= 0.5
        assert parts.get("BEGIN + read round trip per report", 0) <= 0.5
        assert figures["psycopg_transaction_client_cpu_ms"] > 0
    assert figures["grpc_stream_echo_ms"] > 0
