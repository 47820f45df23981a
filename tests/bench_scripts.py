"""The scripts under bench/, loaded as modules for their tests (they are not a package's), or run
small as a user runs them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    """bench/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_small_pairs(name: str, instances: int) -> dict[str, Any]:
    """bench/<name>.py, a pairs script (wiggle/_bench/pairs.py), run for one round of LOCAL_ASYNC
    on the in-memory store: ``instances`` of 3 steps, one worker of 4 slots; its ``--json``
    document (AssertionError with its stderr if it failed)."""
    result = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--rounds", "1", "--instances", str(instances)]
        + ["--steps", "3", "--workers", "1", "--concurrency", "4", "--modes", "LOCAL_ASYNC", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report
