"""The dashboard tests run on every store (PostgreSQL with WIGGLE_TEST_POSTGRES=1)."""

from __future__ import annotations

import os

import pytest
from pg import pg_schema  # noqa: F401  (a fixture)

STORES = ["memory"] + (["postgres"] if os.environ.get("WIGGLE_TEST_POSTGRES") == "1" else [])


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)
