"""Fixtures for the hot-path twins: every test here runs once per implementation.

This conftest and the selector (``wiggle._fast``) are the only places that import a ``*_py`` or
``*_c`` module by name. ``WIGGLE_IMPL=python`` runs the python twins only; otherwise both run,
and a compiled module that does not import is a test error (never a skip): a wheel or checkout
without its extensions must not pass as if it had them.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType

import pytest

AREAS = ("merge", "traversal", "batch")

IMPLS = ["python"] if os.environ.get("WIGGLE_IMPL", "").strip().lower() == "python" else ["python", "cython"]
#: The implementations the parity tests compare with the pure reference: the compiled ones.
COMPILED = [name for name in IMPLS if name != "python"]

# Under WIGGLE_IMPL=python there is nothing to compare the reference with: the parity tests are
# not collected (comparing the pure twin with itself could not fail).
collect_ignore = [] if COMPILED else ["test_parity_hypothesis.py"]


@dataclass(frozen=True)
class Impl:
    """One implementation's three twin modules."""

    name: str
    merge: ModuleType
    traversal: ModuleType
    batch: ModuleType

    def __repr__(self) -> str:
        return f"<impl {self.name}>"


def load(name: str) -> Impl:
    """Import one implementation's twins; ImportError propagates (a test error, not a skip)."""
    suffix = {"python": "py", "cython": "c"}[name]
    modules = {area: importlib.import_module(f"wiggle._fast.{area}_{suffix}") for area in AREAS}
    return Impl(name=name, **modules)


@pytest.fixture(scope="session", params=IMPLS)
def impl(request: pytest.FixtureRequest) -> Impl:
    """The implementation under test (session-scoped: Hypothesis tests may take it)."""
    return load(request.param)


@pytest.fixture(scope="session")
def reference() -> Impl:
    """The pure-Python twins: the reference every implementation is compared against."""
    return load("python")
