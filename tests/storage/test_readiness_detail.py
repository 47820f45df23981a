"""``wiggle ready`` against a server whose database was away printed "(HTTP 503): database
unavailable: database unavailable: no connection within 5 s": the store's ``Unavailable`` says
"database unavailable" itself and readiness added it again (wiggle/_storage/postgres/ops.py)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from wiggle._storage.postgres.ops import readiness
from wiggle.errors import Unavailable


class _Away:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def fetch(self, *_args: Any, **_kwargs: Any) -> list[Any]:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "detail"),
    [
        (
            Unavailable("database unavailable: no connection within 5 s"),
            "database unavailable: no connection within 5 s",
        ),
        (psycopg.OperationalError("connection refused\nmore"), "database unavailable: connection refused"),
    ],
)
async def test_the_reason_says_database_unavailable_once(exc: BaseException, detail: str) -> None:
    ready = await readiness(_Away(exc), "s")  # type: ignore[arg-type]
    assert ready.ready is False
    assert ready.detail == detail
