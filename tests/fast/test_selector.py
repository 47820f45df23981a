"""The selector (``wiggle._fast``): one env var, read once, strict when asked, and the twins' surface.

Each selector case runs in a fresh interpreter, because the choice is made once at import.
With ``WIGGLE_REQUIRE_CYTHON=1`` (set by CI) the default must pick the compiled twins: a build
that silently fell back to pure Python fails here instead of passing slower.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import wiggle._fast

from .conftest import AREAS, Impl

REQUIRE_CYTHON = os.environ.get("WIGGLE_REQUIRE_CYTHON") == "1"
# The directory holding the ``wiggle`` package under test (a checkout's src/ or site-packages).
PACKAGE_ROOT = Path(wiggle._fast.__file__).resolve().parents[2]
PROBE = "import json, wiggle._fast as f; print(json.dumps([f.IMPL, f.IMPL_REASON, f.diff.__module__]))"


def compiled_twins_present() -> bool:
    """Whether the three extension modules exist (found, not imported)."""
    return all(importlib.util.find_spec(f"wiggle._fast.{area}_c") is not None for area in AREAS)


def select(wiggle_impl: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WIGGLE_IMPL"}
    if wiggle_impl is not None:
        env["WIGGLE_IMPL"] = wiggle_impl
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def selected(wiggle_impl: str | None) -> list[str]:
    proc = select(wiggle_impl)
    assert proc.returncode == 0, proc.stderr
    result: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_an_unknown_value_is_an_import_error_listing_the_choices() -> None:
    proc = select("bogus")
    assert proc.returncode != 0
    assert "ImportError: WIGGLE_IMPL='bogus' is not one of auto, cython, python" in proc.stderr


def test_python_selects_the_pure_twins() -> None:
    impl, reason, module = selected("python")
    assert (impl, reason, module) == ("python", "WIGGLE_IMPL=python", "wiggle._fast.merge_py")


def test_the_value_is_trimmed_and_case_insensitive() -> None:
    assert selected(" Python ")[0] == "python"


def test_the_default_selects_the_compiled_twins_when_built() -> None:
    for value in (None, "", "auto"):
        impl, reason, module = selected(value)
        if REQUIRE_CYTHON or compiled_twins_present():
            assert impl == "cython", f"WIGGLE_IMPL={value!r} fell back to the pure twins: {reason}"
            assert module == "wiggle._fast.merge_c"
        else:
            assert impl == "python" and reason.startswith("compiled extensions not importable")


def test_cython_is_strict() -> None:
    if REQUIRE_CYTHON or compiled_twins_present():
        impl, reason, module = selected("cython")
        assert (impl, module) == ("cython", "wiggle._fast.merge_c")
        assert reason == "compiled extensions imported (WIGGLE_IMPL=cython)"
    else:
        proc = select("cython")
        assert proc.returncode != 0
        assert "WIGGLE_IMPL=cython but the compiled extensions do not import" in proc.stderr


def test_this_process_runs_what_was_asked_for() -> None:
    wanted = os.environ.get("WIGGLE_IMPL", "auto").strip().lower() or "auto"
    if wanted == "python":
        assert wiggle._fast.IMPL == "python"
    elif REQUIRE_CYTHON or wanted == "cython":
        assert wiggle._fast.IMPL == "cython", wiggle._fast.IMPL_REASON


def test_the_selector_exports_one_implementation() -> None:
    suffix = {"python": "py", "cython": "c"}[wiggle._fast.IMPL]
    for name in wiggle._fast.__all__:
        if name in ("IMPL", "IMPL_REASON"):
            continue
        obj = getattr(wiggle._fast, name)
        assert obj.__module__.endswith(f"_{suffix}"), (name, obj.__module__)


# the twins' surface -----------------------------------------------------------------------------

CONSTANTS = {
    "merge": (),
    "traversal": ("TASK", "PREDICATE", "SLEEP", "FORK", "JOIN", "USER_TASK", "END", "SIGNAL"),
    "batch": ("MAX_BATCH_STEPS",),
}


@pytest.mark.parametrize("area", AREAS)
def test_twins_export_the_same_names_and_docstrings(impl: Impl, reference: Impl, area: str) -> None:
    mine: Any = getattr(impl, area)
    ref: Any = getattr(reference, area)
    assert mine.__all__ == ref.__all__
    for name in ref.__all__:
        if callable(getattr(ref, name)):
            # getdoc: CPython 3.13 dedents docstrings at compile time, Cython does not
            assert inspect.getdoc(getattr(mine, name)) == inspect.getdoc(getattr(ref, name)), name
        else:
            assert getattr(mine, name) == getattr(ref, name), name
    for name in CONSTANTS[area]:
        assert getattr(mine, name) == getattr(ref, name), name


def test_no_store_calls_a_twin() -> None:
    """The stores never import the twins: .ci/run runs the pure twins on the in-memory store only
    (the PostgreSQL variants of the same tests run with the compiled twins), which is a full check
    only while the store a test uses cannot change which twin code runs."""
    storage = PACKAGE_ROOT / "wiggle" / "_storage"
    importers = [
        path.relative_to(PACKAGE_ROOT).as_posix()
        for path in sorted(storage.rglob("*.py"))
        if "_fast" in path.read_text()
    ]
    assert list(storage.rglob("*.py")) and importers == []
