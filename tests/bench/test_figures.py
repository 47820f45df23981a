"""The drain's figures and the verification, from made-up measurements (no processes)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from wiggle import HistoryEntry, InstanceInfo
from wiggle._bench.errors import BenchError
from wiggle._bench.figures import (
    Snapshot,
    cpu_delta,
    drain_figures,
    latency_figures,
    percentile,
    start_figures,
    step_gaps,
)
from wiggle._bench.submit import StartLog
from wiggle._bench.verify import verify
from wiggle._bench.worker import expected_context


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 90) == 90
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0  # unsorted input
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0], 0) == 1.0
    assert math.isnan(percentile([], 50))


def test_cpu_delta_counts_new_processes_whole_and_never_negative() -> None:
    assert cpu_delta({1: 1.0, 2: 5.0}, {1: 1.5, 2: 4.0, 3: 0.25}) == pytest.approx(0.75)


def info(
    n: int, *, status: str = "COMPLETED", steps: int = 3, created: int = 1000, finished: int = 1100
) -> InstanceInfo:
    return InstanceInfo(
        instance_id=f"i{n}",
        workflow="bench-server-3",
        version="v",
        status=status,
        context=expected_context(n, steps),
        correlation_id="",
        reason="",
        error="",
        created_at=created,
        updated_at=finished,
        finished_at=finished,
    )


def snapshot(
    calls: dict[str, int], tx: int, server: float, workers: float, driver: float, busy: float, irq: float
) -> Snapshot:
    return Snapshot(
        stats={"metrics": {"rpc_calls": calls, "rpc_errors": {}}, "transactions": tx},
        cpu={"server": server, "workers": workers},
        pg_cpu=None,
        driver_cpu=driver,
        machine=(busy, irq),
    )


def test_drain_figures_from_counters() -> None:
    infos = [info(0, created=1000, finished=1500), info(1, created=1000, finished=2000)]
    before = snapshot({"PollTasks": 10, "CompleteTask": 4}, 100, 1.0, 2.0, 0.5, 10.0, 1.0)
    after = snapshot(
        {"PollTasks": 14, "CompleteTask": 10, "ListInstances": 3}, 112, 1.5, 3.0, 0.75, 13.0, 1.5
    )
    worker_stats: list[dict[str, Any]] = [
        {"steps": 4, "calls": {"CompleteTask": 4}, "handbacks": {}},
        {"steps": 2, "calls": {"CompleteTask": 2}, "handbacks": {"slow": 1}},
        {},  # a worker that did not report
    ]
    f = drain_figures(
        infos,
        steps=3,
        t_go=1.0,
        observed=0.9,
        polls=3,
        before=before,
        after=after,
        worker_stats=worker_stats,
        pg_counters=None,
    )
    assert f["instances"] == 2 and f["steps"] == 3
    assert f["elapsed_s"] == 1.0  # t_go 1.0 s -> last finished_at 2000 ms
    assert f["instances_per_s"] == 2.0 and f["steps_per_s"] == 6.0
    assert f["latency_ms"] == {"p50": 500, "p99": 1000, "max": 1000}
    assert f["rpc_total"] == {"CompleteTask": 6, "ListInstances": 3, "PollTasks": 4}
    assert f["worker_rpcs_per_instance"] == 5.0  # the driver's ListInstances excluded
    assert f["store_transactions"] == 12 and f["store_tx_per_instance"] == 6.0
    assert f["pg_xact_commit"] is None and f["pg_xact_per_instance"] is None
    cpu = f["cpu_s"]
    assert (cpu["server"], cpu["workers"], cpu["driver"]) == (0.5, 1.0, 0.25)
    assert cpu["irq"] == 0.5 and cpu["other"] == 0.75  # busy 3.0 - irq 0.5 - ours 1.75
    assert "postgres_backends" not in cpu
    assert f["cpu_ms_per_instance"] == 875.0
    assert f["handler_executions"] == 6
    assert f["worker_calls"] == {"CompleteTask": 6} and f["handbacks"] == {"slow": 1}


def test_drain_figures_with_postgres_and_a_vanished_process() -> None:
    before = Snapshot(
        {"metrics": {"rpc_calls": {}}, "transactions": 0},
        {"server": 1.0, "workers": None},
        ({1: 1.0}, {9: 2.0}),
        0.0,
        None,
    )
    after = Snapshot(
        {"metrics": {"rpc_calls": {}}, "transactions": 4},
        {"server": 2.0, "workers": 3.0},
        ({1: 1.5, 2: 0.5}, {9: 2.25}),
        0.0,
        None,
    )
    f = drain_figures(
        [info(0)],
        steps=3,
        t_go=0.5,
        observed=0.6,
        polls=1,
        before=before,
        after=after,
        worker_stats=[],
        pg_counters={"xact_commit": 8, "tup_updated": 4},
    )
    assert f["cpu_s"]["workers"] is None
    assert f["cpu_s"]["postgres_backends"] == 1.0 and f["cpu_s"]["postgres_background"] == 0.25
    assert "irq" not in f["cpu_s"]
    assert f["pg_xact_commit"] == 8 and f["pg_xact_per_instance"] == 8.0
    assert f["pg_per_instance"] == {"xact_commit": 8.0, "tup_updated": 4.0}
    assert f["store_per_instance"] == {}  # a server without the store probe's counts


def test_drain_figures_count_the_store_probe_inside_the_window() -> None:
    def stats(claims: int, empty: int, notifies: int) -> dict[str, Any]:
        store = {"claims": claims, "empty_claims": empty, "notifies": notifies}
        return {"metrics": {"rpc_calls": {}}, "transactions": 0, "store": store}

    before = Snapshot(stats(10, 2, 0), {"server": 0.0, "workers": 0.0}, None, 0.0, None)
    after = Snapshot(stats(14, 3, 6), {"server": 0.0, "workers": 0.0}, None, 0.0, None)
    f = drain_figures(
        [info(0), info(1)],
        steps=3,
        t_go=0.5,
        observed=0.6,
        polls=1,
        before=before,
        after=after,
        worker_stats=[],
        pg_counters=None,
    )
    assert f["store_per_instance"] == {"claims": 2.0, "empty_claims": 0.5, "notifies": 3.0}


def test_drain_figures_refuse_a_clock_that_runs_backwards() -> None:
    s = snapshot({}, 0, 0, 0, 0, 0, 0)
    with pytest.raises(BenchError, match="clocks disagree"):
        drain_figures(
            [info(0)],
            steps=3,
            t_go=5.0,
            observed=1.0,
            polls=0,
            before=s,
            after=s,
            worker_stats=[],
            pg_counters=None,
        )


def test_verify_accepts_exactly_the_expected_results() -> None:
    ids = {"i0": 0, "i1": 1}
    assert verify([info(0), info(1)], ids, "wf", 3, expected_context) == []


def test_verify_names_every_kind_of_problem() -> None:
    wrong = InstanceInfo(
        **{
            **{f: getattr(info(1), f) for f in InstanceInfo.__struct_fields__},
            "context": {"n": 1, "count": 2},
        }
    )
    failed = info(2, status="FAILED")
    ids = {"i0": 0, "i1": 1, "i2": 2, "i9": 9}
    problems = verify([info(0), wrong, failed, info(5), info(0)], ids, "wf", 3, expected_context)
    text = " || ".join(problems)
    assert "ListInstances returned 5 rows for 4 distinct instances" in text
    assert "1 submitted instance(s) not listed, e.g. ['i9']" in text
    assert "1 unexpected instance(s) of wf, e.g. ['i5']" in text
    assert "i2 (n=2) is FAILED" in text
    assert "wrong final context: i1 (n=1): count=2 (expected 3)" in text
    assert "s1='<missing>' (expected 1)" in text


def test_verify_rejects_a_completion_before_creation() -> None:
    assert verify([info(0, created=2000, finished=1000)], {"i0": 0}, "wf", 3, expected_context) == [
        "1 instance(s) not COMPLETED: i0 (n=0) COMPLETED with finished_at=1000"
    ]


def test_start_figures_rate_over_the_span_and_latency_in_ms() -> None:
    latencies = [0.001 * k for k in range(1, 101)]  # 1..100 ms
    st = start_figures(latencies, span=0.5, clients="8 threads")
    assert st["count"] == 100 and st["clients"] == "8 threads"
    assert st["per_s"] == 200.0 and st["span_s"] == 0.5
    assert st["latency_ms"] == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}
    assert start_figures([0.002], span=0.0, clients="x")["per_s"] is None


def test_start_log_records_ids_latencies_and_span() -> None:
    log = StartLog()
    assert log.span == 0.0
    a = log.began()
    b = log.began()
    log.ended("i1", 1, b)
    log.ended("i0", 0, a)
    assert log.instance_ids == {"i1": 1, "i0": 0}
    assert len(log.latencies) == 2 and all(x >= 0 for x in log.latencies)
    assert log.first is not None and log.last is not None and log.span >= 0


def entry(node: str, started: int, ended: int, kind: str = "TASK") -> HistoryEntry:
    return HistoryEntry(
        token_id="t",
        node_id=node,
        kind=kind,
        attempt=1,
        worker_id="w",
        started_at=started,
        ended_at=ended,
        outcome="COMPLETED",
        error="",
    )


def test_step_gaps_run_from_a_steps_end_to_the_next_claim_in_time_order() -> None:
    history = [
        entry("s3", 130, 131),
        entry("s1", 100, 102),
        entry("end", 131, 131, kind="END"),  # not a step
        entry("s2", 105, 110),
    ]
    assert step_gaps(history) == [(3, "s1", "s2"), (20, "s2", "s3")]
    assert step_gaps([entry("s1", 1, 2)]) == []


def test_latency_figures_percentiles_gaps_and_the_worst_instance() -> None:
    latencies = [0.001 * k for k in range(1, 11)]  # 1..10 ms
    histories = {
        "a": [entry("s1", 0, 1), entry("s2", 2, 3), entry("s3", 3, 4)],  # gaps 1, 0
        "b": [entry("s1", 0, 1), entry("s2", 61, 62), entry("s3", 62, 63)],  # gaps 60, 0
        "c": [entry("s1", 0, 1), entry("s2", 10_001, 10_002)],  # the lost wake-up: 10,000
        "d": [entry("s1", 0, 1)],  # one step: no gap
    }
    f = latency_figures(latencies, histories, elapsed=0.25, gap_limit=50)
    assert f["instances"] == 10 and f["elapsed_s"] == 0.25
    assert f["latency_ms"] == {"p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0}
    assert f["gap_ms"] == {"p50": 1, "p99": 10_000, "max": 10_000}
    assert f["gap_limit_ms"] == 50 and f["instances_over_gap_limit"] == 2
    assert f["worst_gap"] == {"ms": 10_000, "instance_id": "c", "after": "s1", "before": "s2"}


def test_latency_figures_without_any_gap() -> None:
    f = latency_figures([0.002], {"a": [entry("s1", 0, 1)]}, elapsed=0.01, gap_limit=50)
    assert f["gap_ms"] == {"p50": None, "p99": None, "max": None}
    assert f["worst_gap"] is None and f["instances_over_gap_limit"] == 0


def test_latency_figures_carry_the_unary_rpc_yardstick() -> None:
    latencies = [0.010, 0.012, 0.020]  # p50 12 ms
    rpcs = [0.0005, 0.0006, 0.004]  # p50 0.6 ms
    f = latency_figures(latencies, {}, elapsed=0.1, gap_limit=50, rpc_latencies=rpcs)
    assert f["rpc_p50_ms"] == 0.6 and f["p50_in_rpcs"] == 20.0
    without = latency_figures(latencies, {}, elapsed=0.1, gap_limit=50)
    assert without["rpc_p50_ms"] is None and without["p50_in_rpcs"] is None
