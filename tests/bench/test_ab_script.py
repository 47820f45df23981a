"""bench/ab.py: any two configurations side by side (wiggle/_bench/pairs.py).

Run small on the in-memory store: each variant's variables reach its runs (the benchmark's own
settings show them) and its words reach its command line; the summary's ratios are the runs'.
The variant syntax is checked alone, and a wrong number of variants is refused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import load

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "ab.py"


def test_a_variant_is_its_variables_and_its_bench_arguments() -> None:
    ab = load("ab")
    assert ab.parse_variant("four=WIGGLE_GROUP_COMMITS=4") == ("four", [], {"WIGGLE_GROUP_COMMITS": "4"})
    assert ab.parse_variant("plain=") == ("plain", [], {})
    assert ab.parse_variant('x=--chain-steps 0 WIGGLE_POOL_SIZE=12 "--impl" python') == (
        "x",
        ["--chain-steps", "0", "--impl", "python"],
        {"WIGGLE_POOL_SIZE": "12"},
    )
    for bad in ("no-equals", "=WIGGLE_X=1", "a b=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--variant takes NAME=SPEC"):
            ab.parse_variant(bad)


def test_each_variant_runs_with_its_own_settings_and_the_ratios_are_theirs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--variant",
            "a=",
            "--variant",
            "b=WIGGLE_LOCAL_BATCH_SIZE=8 --handler async",
        ]
        + ["--rounds", "1", "--instances", "200", "--steps", "3", "--workers", "1", "--concurrency", "4"]
        + ["--modes", "LOCAL_ASYNC", "--submit", "during", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (a,), (b,) = report["runs"]["LOCAL_ASYNC"]["a"], report["runs"]["LOCAL_ASYNC"]["b"]
    assert a["ok"] and b["ok"]
    assert (a["settings"]["batch_size"], b["settings"]["batch_size"]) == (64, 8)
    assert (a["settings"]["handler"], b["settings"]["handler"]) == ("sync", "async")
    assert a["settings"]["submit"] == b["settings"]["submit"] == ["during"]
    row = report["medians"]["LOCAL_ASYNC"]
    rate = row["instances_per_s"]
    assert rate["ratio"] == round(rate["second"] / rate["first"], 3)
    assert rate["paired"] == round(b["instances_per_s"] / a["instances_per_s"], 3)
    assert row["start_p50_ms"]["first"] == round(a["start_p50_ms"], 1) > 0
    assert row["rounds"] == 1


def test_two_variants_with_different_names_are_needed() -> None:
    for variants in (["--variant", "a="], ["--variant", "a=", "--variant", "a=WIGGLE_X=1"]):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *variants, "--rounds", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert "give two --variant options with different names" in result.stderr
