"""Fixtures every test module may use.

``eventually`` polls a condition without blocking the event loop (the embedded server runs on
the test's own loop, so a blocking sleep would stall it). ``trace`` records what handlers did.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from wiggle import Step

#: Fixture modules every test may use by name (tests/pg.py: ``pg_schema``).
pytest_plugins = ["pg"]

TESTS = Path(__file__).parent
#: Markers given by where a test is (pyproject.toml declares them): `pytest -m "not slow"` etc.
_BY_FILE = {
    "dashboard/test_browser.py": "browser",
    "dashboard/test_browser_operate.py": "browser",
    "dashboard/test_browser_night.py": "browser",
    "dashboard/test_signin.py": "browser",
    "dashboard/test_csrf.py": "browser",
    "upstream/test_upstream_client.py": "upstream_client",
    "upstream/test_mixed_fleet.py": "upstream_client",
}

# Property tests take no time limit: speed is checked by the benchmarks under bench/, never by a
# timed assertion, and the machines tests run on are shared. A slow draw on a loaded machine is
# not a failure either (HealthCheck.too_slow failed a history round trip once while other work
# ran beside the suite).
settings.register_profile("wiggle", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("wiggle")


#: Where the longest tests are (10-30 s each: whole clusters, process kills, a fail-over, the
#: benchmark harnesses, image builds, browsers). They are handed out first, so that under xdist
#: no worker starts a 30 s test when the others are already done; files keep their own order.
_LONG_FIRST = (
    "bench/",
    "deploy/",
    "integration/test_cluster.py",
    "integration/test_bench_smoke.py",
    "storage/test_failover.py",
    "upstream/test_mixed_fleet.py",
    "dashboard/test_night_shift.py",
    "dashboard/test_browser",
    "docs/test_site.py",
    "integration/",
    "server/test_cli_",
    "upstream/test_service_table.py",
    "upstream/test_upstream_client.py",
    "dashboard/test_signin.py",
    "security/test_malformed_table.py",
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Drop the PostgreSQL schemas that killed or failed earlier runs left (tests/pg.py
    drop_stale_schemas), once a run: in the controller, not in each xdist worker.

    Every group commit of a server in this process that runs on the states it kept of its own
    last writes also reads them, and fails unless they are equal (GroupCommit.verify_kept,
    wiggle/_storage/postgres/state_cache.py): the whole suite checks the copies."""
    from wiggle._storage.postgres.group_commit import GroupCommit

    GroupCommit.verify_kept = True
    if os.environ.get("WIGGLE_TEST_POSTGRES") == "1" and not hasattr(session.config, "workerinput"):
        from pg import drop_stale_schemas

        with contextlib.suppress(RuntimeError):  # unreachable: the PostgreSQL tests fail on it themselves
            drop_stale_schemas()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` starts two xdist workers per core. Most tests spend their time waiting on
    a server, a worker process or PostgreSQL, not on the CPU: on the 2-core CI machine the
    suite took 375 s with 4 workers against about 470 s with 2 (.ci/run prints each stage's
    time). Capped at 16: each worker's tests hold PostgreSQL connections (max_connections is
    100 on a default install)."""
    return max(1, min(16, 2 * (os.cpu_count() or 1)))


def _long_rank(item: pytest.Item) -> int:
    try:
        where = Path(item.path).relative_to(TESTS).as_posix()
    except ValueError:
        return len(_LONG_FIRST)
    return next((i for i, prefix in enumerate(_LONG_FIRST) if where.startswith(prefix)), len(_LONG_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test in one place: ``slow`` (process-level tests, tests/integration/),
    ``browser``, ``upstream_client`` (they run upstream's own client) by file, and ``postgres``
    for every test that talks to PostgreSQL (a ``postgres`` store parameter, the ``pg_schema``
    fixture, or a module that says so). Then the longest tests go first (``_LONG_FIRST``; a
    stable sort, so every xdist worker computes the same order)."""
    items.sort(key=_long_rank)
    for item in items:
        try:
            where = Path(item.path).relative_to(TESTS).as_posix()
        except ValueError:  # a test outside tests/ (pytester's)
            continue
        if where.startswith("integration/"):
            item.add_marker(pytest.mark.slow)
        if where in _BY_FILE:
            item.add_marker(getattr(pytest.mark, _BY_FILE[where]))
        uses_postgres = "pg_schema" in getattr(item, "fixturenames", ()) or any(
            "postgres" in str(v) for v in getattr(getattr(item, "callspec", None), "params", {}).values()
        )
        if uses_postgres and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)


Condition = Callable[[], "bool | Awaitable[bool]"]


async def _eventually(
    condition: Condition, timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        await asyncio.sleep(interval)


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """A test that runs a command in-process (``cli.main(["server", ...])``, ``Worker.run()``)
    leaves Wiggle's handler on the root logger, writing to that test's captured stderr, which is
    closed after it: the root logger's handlers and level are put back after every test, so a
    later test's logging never goes there."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def eventually() -> Callable[..., Awaitable[None]]:
    """``await eventually(lambda: cond, timeout=5, what="...")``; the condition may be async."""
    return _eventually


class Trace:
    """What handlers did, in order: node names, attempts and worker ids (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.steps: list[str] = []
        self.attempts: dict[str, list[int]] = defaultdict(list)
        self.workers: dict[str, list[str]] = defaultdict(list)
        self.runs: Counter[tuple[str, str, int]] = Counter()  # (instance, node, attempt)
        self.times: dict[str, list[float]] = defaultdict(list)

    def hit(self, name: str) -> Step:
        """Record that the handler ``name`` runs now (inside a handler: Step.current() is set)."""
        info = Step.current()
        with self._lock:
            self.steps.append(name)
            self.attempts[name].append(info.attempt)
            self.workers[name].append(info.worker_id)
            self.runs[(info.instance_id, info.node_id, info.attempt)] += 1
            self.times[name].append(time.monotonic())
        return info


@pytest.fixture
def trace() -> Trace:
    """A fresh Trace."""
    return Trace()
