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


def _instance(t: float, reports: int) -> list[tuple[float, str, int]]:
    """One instance's marks from ``t`` on (ms offsets): a 2 ms start call whose handler runs from
    0.5 to 1.5, the step at the worker at 2.5, first report sent at 3.0, each report 1.5 ms with
    0.25 ms of the worker's between them, the result at the client 0.5 ms after the last one."""
    ms = 0.001
    out = [
        (t, "c_start0", 0),
        (t + 0.5 * ms, "s_start0", 0),
        (t + 1.5 * ms, "s_start1", 0),
        (t + 2.0 * ms, "c_start1", 0),
        (t + 2.5 * ms, "w_task", 0),
    ]
    at = t + 3.0 * ms
    for r in range(reports):
        out += [(at, "w_call0:AdvanceRun", r + 1), (at + 1.5 * ms, "w_call1:AdvanceRun", r + 1)]
        out.append((at + 1.5 * ms, "w_task", 0))  # (a later one inside the instance: not its first)
        at += 1.75 * ms
    return [*out, (at - 0.25 * ms + 0.5 * ms, "c_wait1", 0)]


def test_the_timeline_follows_each_instance_from_start_to_result() -> None:
    timeline = _module().timeline
    events: list[tuple[float, str, int]] = []
    for i in range(12):
        events += _instance(i * 1.0, 5)
    # a poll outside every instance: not counted
    events += [(11.9, "w_call0:PollTasks", 99), (11.95, "w_call1:PollTasks", 99)]
    parts = timeline(events, "AdvanceRun", warmup=2)
    assert parts["instances"] == 10
    assert parts["start call (client)"] == pytest.approx(2.0)
    assert parts["  client -> server's start handler"] == pytest.approx(0.5)
    assert parts["  server's start handler"] == pytest.approx(1.0)
    assert parts["  handler -> client has the answer"] == pytest.approx(0.5)
    assert parts["start called -> worker has the step"] == pytest.approx(2.5)
    assert parts["worker has the step -> first report sent"] == pytest.approx(0.5)
    assert parts["reports' round trips, summed"] == pytest.approx(7.5)
    assert parts["worker between reports, summed"] == pytest.approx(1.0)
    assert parts["last report answered -> result at the client"] == pytest.approx(0.5)
    assert parts["start called -> result (Client.wait)"] == pytest.approx(12.0)
    assert parts["reports per instance"] == 5
    assert timeline(events, "CompleteTask", warmup=2) == {"instances": 0.0}


@pytest.mark.parametrize("store", STORES)
def test_the_script_follows_every_report_on_each_store(store: str) -> None:
    database = ["--database-url", TEST_DATABASE_URL] if store == "postgres" else []
    ids = ["--request-ids"] if store == "postgres" else []  # (each start's request id claimed too)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--instances", "20", "--steps", "3", "--json", *database, *ids],
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
    assert figures["request_ids"] == (store == "postgres")
    # the instance's timeline: every measured instance followed, its stretches inside its span
    line = figures["timeline_ms"]
    assert line["instances"] == 20 and line["reports per instance"] == 3
    assert 0 < line["  server's start handler"] < line["start call (client)"]
    assert line["reports' round trips, summed"] < line["start called -> result (Client.wait)"]
