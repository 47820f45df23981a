"""bench/builds.py (the compiled hot paths against the pure ones, end to end) and the pairs
harness it shares with bench/limits.py (wiggle/_bench/pairs.py).

A smoke test runs the script small on the in-memory store: both builds run, each run says it ran
the build asked for, and the summary's ratios are those of the runs. The helpers are checked
alone: a run whose server or workers ran another build is refused, failed runs are left out of
the medians and the pairs.
"""

from __future__ import annotations

import argparse

import pytest
from bench_scripts import load, run_small_pairs

from wiggle._bench import pairs


def test_runs_both_builds_and_reports_their_ratios() -> None:
    report = run_small_pairs("builds", 200)
    runs = report["runs"]["LOCAL_ASYNC"]
    assert [r["ok"] for r in runs["pure"] + runs["compiled"]] == [True, True], runs
    assert runs["pure"][0]["server_impl"] == "python" and runs["pure"][0]["worker_impl"] == ["python"]
    assert runs["compiled"][0]["server_impl"] == "cython" and runs["compiled"][0]["worker_impl"] == ["cython"]
    row = report["medians"]["LOCAL_ASYNC"]
    pure, compiled = runs["pure"][0], runs["compiled"][0]
    assert row["pure"] == round(pure["instances_per_s"], 1) and row["compiled"] == round(
        compiled["instances_per_s"], 1
    )
    assert row["ratio"] == round(row["compiled"] / row["pure"], 3)
    assert row["paired_cpu_ratio"] == round(compiled["cpu_ms_per_instance"] / pure["cpu_ms_per_instance"], 3)
    assert row["rounds"] == 1
    assert row["compiled_faster"] == int(compiled["instances_per_s"] > pure["instances_per_s"])
    assert row["compiled_cheaper"] == int(compiled["cpu_ms_per_instance"] < pure["cpu_ms_per_instance"])


def test_a_run_of_another_build_is_refused_naming_what_ran() -> None:
    builds = load("builds")
    run = {"ok": True, "instances_per_s": 100.0, "server_impl": "cython", "worker_impl": ["cython", "python"]}
    refused = builds.ran_as_asked("compiled", run)
    assert refused["ok"] is False
    assert refused["problems"] == ["asked for cython, ran server 'cython', workers ['cython', 'python']"]
    assert (
        builds.ran_as_asked("pure", {**run, "server_impl": "python", "worker_impl": ["python"]})["ok"] is True
    )
    assert builds.ran_as_asked("pure", {**run, "server_impl": "python", "worker_impl": []})["ok"] is False


def test_failed_runs_are_left_out_of_medians_and_pairs() -> None:
    first = [
        {"ok": True, "x": 10.0},
        {"ok": False, "x": 1.0},
        {"ok": True, "x": 20.0},
        {"ok": True, "x": 30.0},
    ]
    second = [{"ok": True, "x": 12.0}, {"ok": True, "x": 2.0}, {"ok": True, "x": 10.0}, {"ok": False}]
    assert pairs.median(first, "x") == 20.0
    assert pairs.median([{"ok": False, "x": 1.0}], "x") is None
    # rounds 1 and 3 count (round 2's first run failed, round 4's second): ratios 1.2 and 0.5
    assert pairs.paired(first, second, "x") == 0.85
    assert pairs.count_lower(first, second, "x") == (1, 2)


def test_two_variants_alternate_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[tuple[str, tuple[str, ...]]] = []

    def fake_run(
        mode: str, extra: list[str], args: argparse.Namespace, env: dict[str, str] | None = None
    ) -> dict[str, object]:
        order.append((mode, tuple(extra)))
        return {"ok": True, "instances_per_s": 1.0}

    monkeypatch.setattr(pairs, "bench_run", fake_run)
    args = argparse.Namespace(rounds=2)
    runs = pairs.alternate(["SERVER"], {"a": ["-a"], "b": ["-b"]}, args)
    assert order == [("SERVER", ("-a",)), ("SERVER", ("-b",)), ("SERVER", ("-b",)), ("SERVER", ("-a",))]
    assert [len(runs["SERVER"][v]) for v in ("a", "b")] == [2, 2]
    with pytest.raises(ValueError, match="two variants"):
        pairs.alternate(["SERVER"], {"a": []}, args)


def test_the_exit_status_names_the_modes_with_a_failed_run(capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = {"ok": True}, {"ok": False, "problems": ["exit 1"]}
    assert pairs.exit_status({"SERVER": {"a": [good], "b": [good]}}) == 0
    assert (
        pairs.exit_status({"SERVER": {"a": [good], "b": [good]}, "LOCAL_SYNC": {"a": [bad], "b": [good]}})
        == 1
    )
    assert capsys.readouterr().err == "runs that failed: LOCAL_SYNC\n"
