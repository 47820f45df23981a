"""The end-to-end benchmark (bench/e2e.py), run small: it finishes, verifies, and counts sensibly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "bench" / "e2e.py"
SMALL = [
    "--steps",
    "5",
    "--instances",
    "20",
    "--workers",
    "2",
    "--concurrency",
    "4",
    "--no-progress",
    "--json",
]
PG_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
needs_postgres = pytest.mark.skipif(
    os.environ.get("WIGGLE_TEST_POSTGRES") != "1", reason="set WIGGLE_TEST_POSTGRES=1 to run on PostgreSQL"
)


def _run(args: list[str], tmp: Path, timeout: float = 240) -> tuple[int, dict[str, Any] | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_BENCH_")}
    env["TMPDIR"] = str(tmp)  # the logs a failed run keeps land in pytest's temporary directory
    env.pop("WIGGLE_DATABASE_URL", None)
    env.pop("WIGGLE_EXECUTION_MODE", None)
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    doc = None
    if result.stdout.strip().startswith("{"):
        doc = json.loads(result.stdout)
    return result.returncode, doc, result.stdout + result.stderr


def _run_one(args: list[str], tmp: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Run a one-mode benchmark that must succeed: its mode's result, the document, the output."""
    code, doc, output = _run(args, tmp)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    (m,) = doc["modes"]
    return m, doc, output


def _by_mode(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mode"]: m for m in doc["modes"]}


def _check_counts(modes: dict[str, dict[str, Any]], steps: int, instances: int) -> None:
    for name, m in modes.items():
        assert m["ok"], (name, m.get("problems"))
        assert m["instances"] == instances
        assert m["instances_per_s"] > 0 and m["steps_per_s"] > 0
        assert 0 <= m["latency_ms"]["p50"] <= m["latency_ms"]["p99"]
        assert m["handler_executions"] >= steps * instances
        assert m["store_transactions"] > 0
        assert m["cpu_s"]["server"] is not None and m["cpu_s"]["workers"] is not None
    server, sync, lasync = modes["SERVER"], modes["LOCAL_SYNC"], modes["LOCAL_ASYNC"]
    rpc = {name: m["rpc_per_instance"] for name, m in modes.items()}
    # SERVER: one CompleteTask per step, no local runs.
    assert rpc["SERVER"].get("CompleteTask", 0) >= steps
    assert rpc["SERVER"].get("AdvanceRun", 0) == 0
    # LOCAL_SYNC: one AdvanceRun per step (plus at most one probe per in-flight slot), no CompleteTask.
    assert rpc["LOCAL_SYNC"].get("CompleteTask", 0) == 0
    assert steps <= rpc["LOCAL_SYNC"]["AdvanceRun"] <= steps + 1
    # LOCAL_ASYNC: the whole run in (about) one AdvanceRun.
    assert rpc["LOCAL_ASYNC"].get("CompleteTask", 0) == 0
    assert rpc["LOCAL_ASYNC"]["AdvanceRun"] <= rpc["SERVER"]["CompleteTask"] / steps + 1
    # SERVER: each report but an instance's last brings the next step (chained steps: the default
    # chain_steps, 16, is more than the steps), so only an instance's first step is polled for.
    assert server["chained_per_instance"] == steps - 1
    for name in ("LOCAL_SYNC", "LOCAL_ASYNC"):
        assert modes[name]["chained_per_instance"] == 0
    # Fewer round trips and commits in LOCAL_ASYNC; LOCAL_SYNC and SERVER both send a report a
    # step and (about) one poll an instance.
    assert lasync["worker_rpcs_per_instance"] < sync["worker_rpcs_per_instance"]
    assert lasync["worker_rpcs_per_instance"] < server["worker_rpcs_per_instance"]
    assert lasync["store_tx_per_instance"] < server["store_tx_per_instance"]


@pytest.mark.timeout(300)
def test_small_benchmark_in_memory_verifies_every_mode(tmp_path: Path) -> None:
    code, doc, output = _run([str(E2E), *SMALL, "--modes", "SERVER,LOCAL_SYNC,LOCAL_ASYNC"], tmp_path)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    assert doc["environment"]["store"] == "memory"
    assert doc["environment"]["probe_ms_before"] > 0 and doc["environment"]["probe_ms_after"] > 0
    assert "machine probe: " in output
    modes = _by_mode(doc)
    assert list(modes) == ["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC"]
    _check_counts(modes, steps=5, instances=20)
    assert all(m["pg_xact_commit"] is None for m in modes.values())
    assert "RESULT: OK - verified all 20 instances COMPLETED" in output


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("fault", "says"), [("context", "wrong final context"), ("fail", "not COMPLETED")])
def test_a_wrong_result_exits_nonzero_without_figures(fault: str, says: str, tmp_path: Path) -> None:
    args = [
        str(E2E),
        "--steps",
        "3",
        "--instances",
        "6",
        "--workers",
        "1",
        "--concurrency",
        "2",
        "--no-progress",
        "--json",
        "--modes",
        "LOCAL_ASYNC",
        "--fault",
        fault,
    ]
    code, doc, output = _run(args, tmp_path)
    assert code == 1, output
    assert doc is not None and doc["ok"] is False
    (mode,) = doc["modes"]
    assert mode["ok"] is False
    assert any(says in p for p in mode["problems"]), mode["problems"]
    assert "(n=0)" in " ".join(mode["problems"])  # names the broken instance
    assert "instances_per_s" not in mode and "inst/s" not in output
    assert "RESULT: WRONG" in output


@pytest.mark.timeout(200)
def test_wiggle_bench_subcommand_runs_the_same_benchmark(tmp_path: Path) -> None:
    # `--` keeps the wiggle parser from reading the benchmark's flags as its own.
    args = [
        "-m",
        "wiggle.cli",
        "bench",
        "--",
        "--steps",
        "2",
        "--instances",
        "5",
        "--workers",
        "1",
        "--concurrency",
        "2",
        "--modes",
        "LOCAL_SYNC",
        "--no-progress",
        "--json",
    ]
    code, doc, output = _run(args, tmp_path)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    assert _by_mode(doc)["LOCAL_SYNC"]["handler_executions"] >= 10


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    code, _, output = _run([str(E2E), "--modes", "DEFAULT"], tmp_path, timeout=60)
    assert code == 2, output
    assert "not one of" in output


@pytest.mark.postgres
@pytest.mark.timeout(400)
@needs_postgres
def test_small_benchmark_on_postgres(tmp_path: Path) -> None:
    code, doc, output = _run(
        [str(E2E), *SMALL, "--modes", "SERVER,LOCAL_SYNC,LOCAL_ASYNC", "--database-url", PG_URL], tmp_path
    )
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    assert doc["environment"]["store"].startswith("postgresql")
    modes = _by_mode(doc)
    _check_counts(modes, steps=5, instances=20)
    for m in modes.values():
        assert m["pg_xact_commit"] is not None and m["pg_xact_commit"] > 0
    assert modes["LOCAL_ASYNC"]["pg_xact_per_instance"] < modes["SERVER"]["pg_xact_per_instance"]
    # The benchmark cleans up: neither its database nor its schemas are left.
    import psycopg

    env = doc["environment"]
    assert len(env["schemas"]) == 3
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        if env["own_database"]:
            row = conn.execute(
                "SELECT count(*) FROM pg_database WHERE datname = %s", (env["database"],)
            ).fetchone()
            assert row is not None and row[0] == 0, env["database"]
        else:
            row = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = ANY(%s)", (env["schemas"],)
            ).fetchone()
            assert row is not None and row[0] == 0, env["schemas"]


def _check_starts(
    m: dict[str, Any], instances: int, threads: int, shared: bool = True, more: str = ""
) -> None:
    st = m["starts"]
    assert st["count"] == instances
    during = f"{threads} threads" + (", 1 client" if shared else "") + more
    assert st["clients"] == (during if m["submit"] == "during" else "64 async calls")
    assert st["per_s"] > 0 and st["span_s"] > 0
    lat = st["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]


@pytest.mark.timeout(200)
def test_submit_during_starts_the_instances_inside_the_window(tmp_path: Path) -> None:
    args = [
        str(E2E),
        "--steps",
        "3",
        "--instances",
        "12",
        "--workers",
        "1",
        "--concurrency",
        "4",
        "--modes",
        "SERVER,LOCAL_ASYNC",
        "--submit",
        "during,before",  # run in the order before, during
        "--submit-threads",
        "3",
        "--no-progress",
        "--json",
    ]
    code, doc, output = _run(args, tmp_path)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    assert doc["settings"]["submit"] == ["before", "during"] and doc["settings"]["submit_threads"] == 3
    runs = [(m["mode"], m["submit"]) for m in doc["modes"]]
    assert runs == [
        ("SERVER", "before"),
        ("SERVER", "during"),
        ("LOCAL_ASYNC", "before"),
        ("LOCAL_ASYNC", "during"),
    ]
    for m in doc["modes"]:
        assert m["ok"] and m["instances"] == 12 and m["handler_executions"] >= 36
        _check_starts(m, 12, 3)
        # The starts are RPCs of the window under "during" only, and never the workers' cost; the
        # threads share one client, so concurrent starts may share a StartInstances call.
        calls = m["rpc_total"].get("StartInstance", 0) + m["rpc_total"].get("StartInstances", 0)
        if m["submit"] == "during":
            assert 1 <= calls <= 12, m["rpc_total"]
        else:
            assert calls == 0, m["rpc_total"]
    server_during = doc["modes"][1]
    driver = ("ListInstances", "StartInstance", "StartInstances")
    assert server_during["worker_rpcs_per_instance"] == pytest.approx(
        sum(v for k, v in server_during["rpc_total"].items() if k not in driver) / 12,
        abs=0.001,
    )
    assert "SERVER during" in output and "8 threads" not in output and "3 threads" in output
    assert "RESULT: OK - verified all 12 instances" in output


@pytest.mark.postgres
@pytest.mark.timeout(300)
@needs_postgres
def test_submit_during_on_postgres(tmp_path: Path) -> None:
    args = [str(E2E), "--steps", "2", "--instances", "10", "--workers", "1", "--concurrency", "4"]
    args += [
        "--modes",
        "LOCAL_SYNC",
        "--submit",
        "during",
        "--submit-client",
        "per-thread",
        "--no-progress",
        "--json",
        "--database-url",
        PG_URL,
    ]
    m, doc, _ = _run_one(args, tmp_path)
    assert m["submit"] == "during" and doc["settings"]["submit_client"] == "per-thread"
    _check_starts(m, 10, 8, shared=False)
    # each thread's own client: one start per call (a message of that client's stream), never coalesced
    assert m["rpc_total"].get("StartInstances") == 10 and "StartInstance" not in m["rpc_total"]
    assert (
        m["pg_xact_commit"] is not None and m["pg_xact_commit"] >= 10
    )  # the starts commit inside the window
    (schema,) = doc["environment"]["schemas"]
    assert schema.endswith("_local_sync_during"), schema


@pytest.mark.timeout(200)
def test_paced_starts_keep_their_due_times(tmp_path: Path) -> None:
    # --submit-rate 40: instance n is due n/40 s into the window, so the last of 16 starts is
    # issued at least 15/40 = 0.375 s in however fast the machine (pacing, not speed, sets it).
    # The span runs from the first start issued, itself up to the worst "behind" after its due
    # time (a thread slow to begin on a busy machine), so that much comes off the lower bound.
    args = [str(E2E), "--steps", "2", "--instances", "16", "--workers", "1", "--concurrency", "4"]
    args += ["--modes", "LOCAL_SYNC", "--submit", "during", "--submit-rate", "40", "--submit-threads", "4"]
    args += ["--no-progress", "--json"]
    m, doc, output = _run_one(args, tmp_path)
    assert doc["settings"]["submit_rate"] == 40.0
    _check_starts(m, 16, 4, more=", 40/s")
    st = m["starts"]
    assert 0 <= st["behind_ms"]["p50"] <= st["behind_ms"]["max"], st
    least = 15 / 40 - st["behind_ms"]["max"] / 1000
    assert st["span_s"] >= least - 0.0015, st  # (span_s is rounded to the millisecond)
    assert least <= 0 or st["per_s"] <= 16 / (least - 0.0015), st  # never faster than the pace
    assert "paced starts issued behind their due time" in output


@pytest.mark.postgres
@pytest.mark.timeout(300)
@needs_postgres
def test_starts_spread_over_the_servers_as_a_load_balancer_would(tmp_path: Path) -> None:
    args = [str(E2E), "--steps", "3", "--instances", "24", "--workers", "2", "--concurrency", "2"]
    args += ["--modes", "SERVER", "--submit", "during", "--servers", "3", "--submit-to", "all"]
    args += ["--no-progress", "--json", "--database-url", PG_URL]
    m, doc, _ = _run_one(args, tmp_path)
    assert doc["settings"]["submit_to"] == "all"
    _check_starts(m, 24, 8, more=", to 3 servers")
    # instance n on server n mod 3: each server's starts are 8 instances, in one call or several
    for calls in m["calls_by_server"]:
        assert calls.get("StartInstance", 0) + calls.get("StartInstances", 0) >= 1, m["calls_by_server"]


@pytest.mark.postgres
@pytest.mark.timeout(300)
@needs_postgres
def test_a_front_server_takes_the_starts_and_the_others_the_steps(tmp_path: Path) -> None:
    args = [str(E2E), "--steps", "3", "--instances", "30", "--workers", "2", "--concurrency", "2"]
    args += ["--modes", "SERVER", "--submit", "during", "--servers", "3", "--front"]
    args += ["--no-progress", "--json", "--database-url", PG_URL]
    m, doc, _ = _run_one(args, tmp_path)
    assert doc["settings"]["front"]
    _check_starts(m, 30, 8, shared=True)
    front, *backs = m["calls_by_server"]
    assert len(backs) == 2, m["calls_by_server"]
    # the first server: the client's starts and the driver's reads, not one worker call
    assert front.get("StartInstance", 0) + front.get("StartInstances", 0) > 0, front
    worker_calls = {"PollTasks", "CompleteTask", "AdvanceRun", "RegisterWorkflow", "WorkerSession"}
    assert not worker_calls & set(front), front
    # worker 0 on the second server, worker 1 on the third: each polls and reports, starts nothing
    for calls in backs:
        assert calls.get("PollTasks", 0) > 0 and calls.get("CompleteTask", 0) > 0, calls
        assert not {"StartInstance", "StartInstances"} & set(calls), calls
    assert sum(c.get("CompleteTask", 0) for c in backs) >= 30 * 3


def _check_latency(m: dict[str, Any], instances: int) -> None:
    assert m["ok"], m.get("problems")
    assert m["kind"] == "latency" and m["instances"] == instances and m["steps"] == 5 and m["warmup"] == 1
    lat = m["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    gap = m["gap_ms"]  # 5 steps: 4 gaps per instance, never negative
    assert gap["max"] is not None and 0 <= gap["p50"] <= gap["p99"] <= gap["max"]
    assert 0 <= m["instances_over_gap_limit"] <= instances
    assert m["worst_gap"]["ms"] == gap["max"]


@pytest.mark.timeout(200)
def test_latency_mode_runs_instances_one_at_a_time(tmp_path: Path) -> None:
    args = [str(E2E), "--latency", "4", "--workers", "1", "--concurrency", "2", "--no-progress", "--json"]
    code, doc, output = _run(args, tmp_path)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    assert doc["settings"]["latency"] == 4 and doc["settings"]["steps"] == 5
    modes = _by_mode(doc)
    assert list(modes) == ["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC"]
    for m in modes.values():
        _check_latency(m, 4)
    assert "wiggle latency benchmark: 4 instances of a 5-step linear workflow" in output
    assert "RESULT: OK - verified all 4 instances COMPLETED" in output


@pytest.mark.timeout(200)
def test_latency_mode_verifies_the_results(tmp_path: Path) -> None:
    args = [str(E2E), "--latency", "3", "--steps", "2", "--workers", "1", "--concurrency", "2"]
    args += ["--modes", "SERVER", "--fault", "context", "--no-progress", "--json"]
    code, doc, output = _run(args, tmp_path)
    assert code == 1, output
    assert doc is not None and doc["ok"] is False
    (m,) = doc["modes"]
    assert any("wrong final context" in p and "(n=0)" in p for p in m["problems"]), m["problems"]
    assert "latency_ms" not in m and "RESULT: WRONG" in output


@pytest.mark.postgres
@pytest.mark.timeout(300)
@needs_postgres
def test_latency_mode_on_postgres(tmp_path: Path) -> None:
    # SERVER is left out: until the lost wake-up of issue #16 is fixed, an instance there may wait
    # out a whole 10 s long poll, which would make this smoke test slow (never wrong).
    args = [
        str(E2E),
        "--latency",
        "3",
        "--workers",
        "1",
        "--concurrency",
        "2",
        "--modes",
        "LOCAL_SYNC,LOCAL_ASYNC",
    ]
    args += ["--no-progress", "--json", "--database-url", PG_URL]
    code, doc, output = _run(args, tmp_path)
    assert code == 0, output
    assert doc is not None and doc["ok"], output
    for m in doc["modes"]:
        _check_latency(m, 3)
    assert [s.rsplit("_", 3)[-3:] for s in doc["environment"]["schemas"]] == [
        ["local", "sync", "latency"],
        ["local", "async", "latency"],
    ]
