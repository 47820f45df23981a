"""/readyz's answer, within a second whatever the store does (docs/semantics.md#readiness).

A probe (Kubernetes' default timeout is 1 s) must get an answer, not a timeout: the store's check
runs under its own short limit (``READY_TIMEOUT_SECONDS``), so a database that is away, or a pool
with no free connection (whose own wait is the store's ``acquire_timeout``), is reported as not
ready at once instead of after the pool's wait. The schema version reported is the store's; while the
store does not answer, the last one it reported (``null`` if none yet), never a made-up 0. The
HTTP handler (wiggle/_server/web/http.py ``readyz``) calls ``readiness_answer`` and sends what it
returns.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from .._storage.base import Store
from .._storage.ops import Readiness

__all__ = ["READY_TIMEOUT_SECONDS", "check_store", "readiness_answer"]

READY_TIMEOUT_SECONDS = 0.8

#: store -> the schema version it last reported (kept while the store does not answer)
_last_version: weakref.WeakKeyDictionary[Store, int] = weakref.WeakKeyDictionary()


#: store -> its check in flight: a probe joins it rather than start another (one at a time)
_in_flight: weakref.WeakKeyDictionary[Store, asyncio.Task[Readiness]] = weakref.WeakKeyDictionary()


def _settled(task: asyncio.Task[Readiness]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a check that failed after its probe gave up is not "never retrieved"


async def check_store(store: Store, timeout: float = READY_TIMEOUT_SECONDS) -> Readiness:
    """``store.readiness()``, or not ready once ``timeout`` seconds passed without its answer.

    The check runs as its own task and is not cancelled when the probe gives up: cancelling a
    query on a connection whose server stopped answering waits for the cancellation to reach
    that server (psycopg), which is the wait this module exists to avoid. The next probe joins
    the check still in flight instead of starting another, so a silent database costs one.
    """
    task = _in_flight.get(store)
    if task is None or task.done():
        task = asyncio.ensure_future(store.readiness())
        task.add_done_callback(_settled)
        _in_flight[store] = task
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        return Readiness(ready=False, detail=f"the store did not answer within {timeout:g} s")
    try:
        readiness = task.result()
    except Exception as exc:  # a store error is a not-ready answer, never a 500
        return Readiness(ready=False, detail=f"the store check failed: {exc}")
    if readiness.expected_version and (readiness.schema_version or readiness.ready):
        _last_version[store] = readiness.schema_version
    return readiness


async def readiness_answer(
    store: Store, serving: bool, timeout: float = READY_TIMEOUT_SECONDS
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of /readyz: 200 when ``serving`` and the store is ready, else 503."""
    if not serving:
        return 503, {"ready": False, "detail": "the server is not serving"}
    readiness = await check_store(store, timeout)
    body: dict[str, Any] = {"ready": readiness.ready, "detail": readiness.detail}
    expected = readiness.expected_version or _expected_version(store)
    if expected:  # a store with a schema (PostgreSQL)
        current = readiness.schema_version or _last_version.get(store)
        body["schema_version"] = current
        body["expected_schema_version"] = expected
    return (200 if readiness.ready else 503), body


def _expected_version(store: Store) -> int:
    """The newest migration this server knows, for a store with migrations (PostgreSQL)."""
    module = type(store).__module__
    if ".postgres" not in module:
        return 0
    from .._storage.postgres.migrations import migration_files

    return int(migration_files()[-1][0])
