"""The dashboard tests run on every store (PostgreSQL with WIGGLE_TEST_POSTGRES=1)."""

from __future__ import annotations

import pytest
from pg import (
    STORES,
    pg_schema,  # noqa: F401  (a fixture)
)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)
