"""bench/user_view.py and bench/handwritten.py (issue #28's user view), run small on PostgreSQL.

Smoke tests, not timed assertions: the scripts run, verify every instance, and print the table
with the medians and the ratios. The order and summary helpers are checked alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SMALL = ["--steps", "3", "--instances", "20", "--workers", "1", "--concurrency", "2", "--submit-threads", "2"]
needs_postgres = pytest.mark.skipif(
    os.environ.get("WIGGLE_TEST_POSTGRES") != "1", reason="set WIGGLE_TEST_POSTGRES=1 to run on PostgreSQL"
)


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(script: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_BENCH_")}
    env.pop("WIGGLE_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--database-url", PG_URL],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_rounds_rotate_so_no_run_always_follows_the_same_one() -> None:
    uv = _module("user_view")
    first, second = uv.order(1), uv.order(2)
    assert first == ["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC", "step", "instance"]
    assert second == ["LOCAL_SYNC", "LOCAL_ASYNC", "step", "instance", "SERVER"]
    assert uv.order(6) == first


def test_summary_takes_medians_of_verified_runs_only() -> None:
    uv = _module("user_view")

    def ok(rate: float) -> dict[str, Any]:
        return {
            "ok": True,
            "instances_per_s": rate,
            "cpu_ms_per_instance": 1000 / rate,
            "start_ms": {"p50": 2, "p99": 9},
        }

    runs = {k: [ok(100), ok(300), ok(200)] for k in uv.KINDS}
    runs["step"] = [ok(50), {"ok": False, "problems": ["x"]}, ok(150)]
    runs["instance"] = [ok(400)]
    sm = uv.summary(runs)
    assert sm["medians"]["SERVER"] == 200 and sm["medians"]["step"] == 100
    assert sm["ratios"] == {"SERVER/step": 2.0, "LOCAL_SYNC/step": 2.0, "LOCAL_ASYNC/instance": 0.5}
    assert sm["start_ms"]["SERVER"] == {"p50": 2, "p99": 9}


def test_summary_sets_the_cpu_ratio_and_the_cores_beside_the_throughput_ratio() -> None:
    uv = _module("user_view")

    def run(rate: float, cpu_ms: float) -> dict[str, Any]:
        return {"ok": True, "instances_per_s": rate, "cpu_ms_per_instance": cpu_ms, "start_ms": {}}

    runs = {k: [run(100, 10.0)] for k in uv.KINDS}
    runs["LOCAL_ASYNC"] = [run(800, 2.5), run(600, 3.0), run(700, 2.0)]
    runs["instance"] = [run(1000, 1.5), {"ok": False, "problems": ["x"]}]
    sm = uv.summary(runs)
    assert uv.cores(runs["LOCAL_ASYNC"][0]) == 2.0  # 2.5 ms an instance at 800 a second
    assert uv.cores({"ok": False}) is None
    assert sm["cores"]["LOCAL_ASYNC"] == 1.8 and sm["cores"]["instance"] == 1.5  # 2.0, 1.8, 1.4
    assert sm["ratios"]["LOCAL_ASYNC/instance"] == 0.7
    # the loop's CPU per instance (1.5) over Wiggle's median (2.5)
    assert sm["cpu_ratios"]["LOCAL_ASYNC/instance"] == 0.6
    assert sm["cpu_ratios"]["SERVER/step"] == 1.0


def test_front_runs_wiggle_on_two_servers_and_says_so() -> None:
    uv = _module("user_view")
    plain = uv.build_parser().parse_args([])
    front = uv.build_parser().parse_args(["--front"])
    assert "--servers" not in uv.wiggle_command("SERVER", plain)
    cmd = uv.wiggle_command("SERVER", front)
    assert cmd[cmd.index("--servers") + 1] == "2" and "--front" in cmd
    doc = {"settings": {**vars(front), "rounds": 0}, "sequence": [], "summary": uv.summary({})}
    assert "the submitting client on the first, the workers on the second" in uv.render(doc)
    assert "--front" not in uv.render({**doc, "settings": {**vars(plain), "rounds": 0}})


@pytest.mark.postgres
@pytest.mark.timeout(200)
@needs_postgres
@pytest.mark.parametrize("per", ["step", "instance"])
def test_handwritten_loop_runs_and_verifies(per: str) -> None:
    # 200 instances, not SMALL's 20: the worker's CPU is read in clock ticks (10 ms), and 20
    # instances committed per instance took less than one tick in a CI run (workers 0.0)
    args = [*SMALL[:2], "--instances", "200", *SMALL[4:]]
    result = _run("handwritten.py", ["--per", per, *args, "--json"], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["instances"] == 200
    assert doc["instances_per_s"] > 0 and doc["start_ms"]["p50"] <= doc["start_ms"]["p99"]
    assert doc["synchronous_commit"] in {"on", "off", "local", "remote_write", "remote_apply"}
    assert doc["cpu_s"]["workers"] > 0
    # the backends' CPU is read to the nanosecond (wiggle/_bench/processes.py thread_cpu): in
    # clock ticks, 64 backends of a few milliseconds each added up to 0
    assert doc["cpu_s"]["postgres_backends"] > 0
    # per step: a commit per step and per start at least; per instance: about one per start and one per run
    assert doc["pg_xact_per_instance"] >= (3 + 1 if per == "step" else 2)


@pytest.mark.postgres
@pytest.mark.timeout(600)
@needs_postgres
def test_user_view_alternates_and_prints_the_table() -> None:
    result = _run("user_view.py", ["--rounds", "1", *SMALL], timeout=560)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for kind in (
        "wiggle SERVER",
        "wiggle LOCAL_SYNC",
        "wiggle LOCAL_ASYNC",
        "commit per step",
        "commit per instance",
    ):
        assert out.count(kind) == 2, (kind, out)  # its run and its median
    for ratio in ("SERVER / hand-written per step", "LOCAL_SYNC / hand-written per step"):
        assert ratio in out, out
    assert "LOCAL_ASYNC / hand-written per instance" in out
    # every run verified: no median and no inst/s ratio is missing (the CPU ratio may be: a run
    # this small can take less CPU than one clock tick, 10 ms, in one of its roles)
    for line in out.split("medians of")[1].split("synchronous_commit")[0].splitlines():
        assert "n/a" not in line.split("; CPU per instance")[0], out
    assert out.count("CPU per instance alone would give") == 3, out
    probe = re.search(r"commit probe \(.*\): ([0-9.]+) ms before, ([0-9.]+) ms after", out)
    assert probe is not None, out
    assert all(0 < float(ms) < 1000 for ms in probe.groups()), probe.group(0)
