"""bench/limits.py runs (small, on the in-memory store) and reports its figures per variant and
the ratios: medians, paired, CPU in the workers' units."""

from __future__ import annotations

from bench_scripts import run_small_pairs


def test_reports_inst_per_s_and_cpu_per_instance_plain_and_limited() -> None:
    report = run_small_pairs("limits", 300)
    runs = report["runs"]["LOCAL_ASYNC"]
    assert [r["ok"] for r in runs["plain"] + runs["limits"]] == [True, True], runs
    row = report["medians"]["LOCAL_ASYNC"]
    for figure in ("plain", "limits", "cpu_ms_plain", "cpu_ms_limits"):
        assert row[figure] > 0, row
    assert row["ratio"] == round(row["limits"] / row["plain"], 3)
    assert row["cpu_ratio"] == round(row["cpu_ms_limits"] / row["cpu_ms_plain"], 3)
    # one round: its own ratios are the paired medians
    plain, limited = runs["plain"][0], runs["limits"][0]
    assert row["paired_ratio"] == round(limited["instances_per_s"] / plain["instances_per_s"], 3)
    assert row["paired_cpu_ratio"] == round(limited["cpu_ms_per_instance"] / plain["cpu_ms_per_instance"], 3)
    units = limited["cpu_per_worker_cpu"] / plain["cpu_per_worker_cpu"]
    assert row["paired_cpu_in_workers_units"] == round(units, 3)
