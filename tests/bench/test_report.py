"""The report: tables from a made-up run document, and the JSON form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wiggle._bench.report import emit, render


def mode(name: str, per_s: float, pg: bool = False) -> dict[str, Any]:
    return {
        "mode": name,
        "ok": True,
        "instances": 10,
        "steps": 3,
        "elapsed_s": 0.5,
        "instances_per_s": per_s,
        "steps_per_s": per_s * 3,
        "latency_ms": {"p50": 12, "p99": 40, "max": 41},
        "worker_rpcs_per_instance": 4.5,
        "store_tx_per_instance": 2.25,
        "pg_xact_per_instance": 2.5 if pg else None,
        "pg_xact_commit": 25 if pg else None,
        "cpu_s": {"server": 0.25, "workers": 0.5, "driver": 0.0, "irq": 0.0, "other": 0.0},
        "cpu_ms_per_instance": 75.0,
        "rpc_per_instance": {"PollTasks": 1.0, "ListInstances": 0.3},
        "rpc_errors": {},
        "handler_executions": 30,
    }


def document(modes: list[dict[str, Any]], store: str = "memory") -> dict[str, Any]:
    return {
        "settings": {
            "steps": 3,
            "instances": 10,
            "workers": 1,
            "concurrency": 2,
            "transport": "stream",
            "handler": "sync",
            "batch_size": 64,
        },
        "environment": {
            "store": store,
            "server_impl": "cython",
            "worker_impl": ["cython"],
            "python": "3.11",
            "cpus": 2,
        },
        "modes": modes,
        "ok": all(m["ok"] for m in modes),
    }


def test_render_a_verified_run() -> None:
    text = render(document([mode("SERVER", 20.0), mode("LOCAL_ASYNC", 200.0)]))
    lines = text.splitlines()
    assert lines[0].startswith("wiggle e2e benchmark: 3 steps x 10 instances, 1 workers x 2 concurrency")
    assert "pg xact/inst" not in text
    row = next(line for line in lines if line.startswith("SERVER "))
    assert row.split()[:8] == ["SERVER", "20.0", "60.0", "0.50", "12", "40", "4.50", "2.25"]
    assert any(line.startswith("ListInstances (driver)") for line in lines)
    assert "handler runs/inst                3.00         3.00" in text
    assert lines[-1] == (
        "RESULT: OK - verified all 10 instances COMPLETED with the expected context in every mode (SERVER, LOCAL_ASYNC)"
    )
    assert "warning" not in text


def test_render_postgres_columns_and_a_disturbed_run() -> None:
    m = mode("SERVER", 20.0, pg=True)
    m["cpu_s"].update(postgres_backends=0.125, postgres_background=0.0, other=0.25)  # 50% of the drain
    text = render(document([m], store="postgresql 15"))
    assert "pg xact/inst" in text and "pg back" in text
    assert "2.50" in next(line for line in text.splitlines() if line.startswith("SERVER "))
    assert "warning: other processes used CPU during the drain (SERVER 0.2 s)" in text


def test_render_a_failed_mode_prints_no_figures() -> None:
    bad = {"mode": "LOCAL_SYNC", "ok": False, "problems": ["1 instance(s) not COMPLETED: i0 (n=0) is FAILED"]}
    text = render(document([bad]))
    assert "inst/s" not in text
    assert "LOCAL_SYNC: FAILED - no figures" in text and "  - 1 instance(s) not COMPLETED" in text
    assert text.splitlines()[-1] == "RESULT: WRONG - 1 of 1 mode(s) failed verification or did not finish"


def test_emit_json_puts_the_document_on_stdout_and_the_tables_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = document([mode("SERVER", 20.0)])
    emit(doc, as_json=True)
    out, err = capsys.readouterr()
    assert json.loads(out) == doc
    assert err.startswith("wiggle e2e benchmark")
    emit(doc, as_json=False)
    out, err = capsys.readouterr()
    assert out.startswith("wiggle e2e benchmark") and err == ""


def test_render_labels_runs_by_submit_mode_and_lists_the_starts() -> None:
    before = dict(mode("SERVER", 20.0), submit="before")
    before["starts"] = {
        "count": 10,
        "clients": "64 async calls",
        "span_s": 0.1,
        "per_s": 100.0,
        "latency_ms": {"p50": 1.5, "p90": 2.0, "p99": 3.0, "max": 3.5},
    }
    during = dict(mode("SERVER", 15.0), submit="during")
    during["starts"] = dict(before["starts"], clients="8 threads", per_s=50.0)
    text = render(document([before, during]))
    lines = text.splitlines()
    assert any(line.startswith("SERVER before ") and " 20.0 " in line for line in lines)
    assert any(line.startswith("SERVER during ") and " 15.0 " in line for line in lines)
    starts = next(line for line in lines if line.startswith("starts "))
    assert starts.split() == [
        "starts",
        "by",
        "starts/s",
        "span",
        "s",
        "p50",
        "ms",
        "p90",
        "ms",
        "p99",
        "ms",
        "max",
        "ms",
    ]
    row = next(line for line in lines if line.startswith("SERVER during") and "8 threads" in line)
    assert row.split()[-6:] == ["50.0", "0.10", "1.5", "2.0", "3.0", "3.5"]
    assert "submit during: the window runs from the first start to the last finish" in text
    assert lines[-1].endswith("(SERVER before, SERVER during)")


def test_render_without_during_keeps_the_plain_mode_labels() -> None:
    text = render(document([dict(mode("SERVER", 20.0), submit="before")]))
    assert "SERVER before" not in text and "submit during" not in text


def latency_mode(name: str, worst: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "mode": name,
        "kind": "latency",
        "ok": True,
        "instances": 20,
        "steps": 5,
        "warmup": 1,
        "elapsed_s": 0.5,
        "latency_ms": {"p50": 3.25, "p90": 5.0, "p99": 9.5, "max": 10001.0},
        "gap_ms": {"p50": 1, "p99": 52, "max": 10000} if worst else {"p50": None, "p99": None, "max": None},
        "rpc_p50_ms": 0.65,
        "p50_in_rpcs": 5.0,
        "gap_limit_ms": 50,
        "instances_over_gap_limit": 2 if worst else 0,
        "worst_gap": worst,
    }


def test_render_latency() -> None:
    doc = document(
        [
            latency_mode("SERVER", {"ms": 10000, "instance_id": "wi-7", "after": "s2", "before": "s3"}),
            latency_mode("LOCAL_SYNC", None),
            {"mode": "LOCAL_ASYNC", "kind": "latency", "ok": False, "problems": ["timed out"]},
        ]
    )
    doc["settings"]["latency"] = 20
    doc["settings"]["steps"] = 5
    text = render(doc)
    lines = text.splitlines()
    assert lines[0].startswith(
        "wiggle latency benchmark: 20 instances of a 5-step linear workflow, one at a time"
    )
    assert "inst gap>50ms" in text and "inst/s" not in text
    server = next(line for line in lines if line.startswith("SERVER "))
    assert server.split() == [
        "SERVER",
        "3.2",
        "5.0",
        "9.5",
        "10001.0",
        "0.65",
        "5.0",
        "1",
        "52",
        "10000",
        "2",
        "s2",
        "->",
        "s3",
        "of",
        "wi-7",
    ]
    local = next(line for line in lines if line.startswith("LOCAL_SYNC "))
    assert local.split()[5:] == ["0.65", "5.0", "n/a", "n/a", "n/a", "0", "-"]
    assert "1 warm-up instance(s) per mode not counted" in text
    assert "LOCAL_ASYNC: FAILED - no figures" in text and "  - timed out" in text
    assert lines[-1] == "RESULT: WRONG - 1 of 3 mode(s) failed verification or did not finish"


def test_render_the_machine_probe_when_the_run_recorded_it() -> None:
    doc = document([mode("SERVER", 20.0)])
    assert "machine probe" not in render(doc)  # documents of older runs have none
    doc["environment"].update(probe_ms_before=98.25, probe_ms_after=141.0)
    line = next(line for line in render(doc).splitlines() if line.startswith("machine probe"))
    assert line.startswith("machine probe: 98.2 ms before, 141.0 ms after (a fixed Python loop")
    del doc["environment"]["probe_ms_after"]  # interrupted before the end
    assert "98.2 ms before, none after" in render(doc)


def test_probe_times_the_fixed_loop() -> None:
    from wiggle._bench import probe

    assert probe._loop(5) == 10
    assert probe.probe_ms(repeats=1) > 0


def test_render_the_groups_committed_on_kept_copies() -> None:
    # the store probe's counts on PostgreSQL (wiggle/_bench/worker.py StoreProbe): the groups run
    # on kept copies and the checks that failed, per instance, in the contention table
    m = mode("SERVER", 20.0, pg=True)
    m["store_per_instance"] = {"claims": 2.0, "kept_groups": 1.8, "kept_stale": 0.05}
    text = render(document([m], store="postgresql 15"))
    assert "groups on kept copies                   1.800" in text, text
    assert "  their checks that failed              0.050" in text, text


def test_the_store_probe_counts_the_kept_copies_where_the_store_keeps_them() -> None:
    from types import SimpleNamespace

    from wiggle._bench.worker import StoreProbe

    async def claim(*args: Any, **kwargs: Any) -> list[Any]:
        return []

    async def next_ready_at(*args: Any, **kwargs: Any) -> None:
        return None

    cache = SimpleNamespace(hits=7, stale=2)
    pg_like = SimpleNamespace(claim=claim, next_ready_at=next_ready_at, group=SimpleNamespace(cache=cache))
    snapshot = StoreProbe(pg_like).snapshot()
    assert (snapshot["kept_groups"], snapshot["kept_stale"]) == (7, 2)
    memory_like = SimpleNamespace(claim=claim, next_ready_at=next_ready_at)
    assert "kept_groups" not in StoreProbe(memory_like).snapshot()
