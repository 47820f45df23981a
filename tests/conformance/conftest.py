"""The conformance harness: one parametrized fixture over store x execution mode.

Stores: "memory" always; "postgres" when WIGGLE_TEST_POSTGRES=1 (the server at
WIGGLE_TEST_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/test; every run gets its
own schema, dropped at the end).
Modes: SERVER, LOCAL_SYNC and LOCAL_ASYNC, set on each workflow with ``.execution(mode)``:
the rules of docs/semantics.md hold in every mode, so every scenario runs in every mode.

Workflow names are unique per test (``harness.define("linear")``) so tests sharing a PostgreSQL
schema never see each other's queues.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
from pg import STORES, drop_schema, new_schema_name

from wiggle import Blueprint, ExecutionMode, InstanceInfo, Worker, WorkerOptions, Workflow
from wiggle.testing import EmbeddedServer, WorkflowEnvironment

POSTGRES_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
MODES = [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC, ExecutionMode.LOCAL_ASYNC]


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """A schema unique to this test run; dropped when the session ends."""
    schema = new_schema_name("wiggle_conf")
    yield schema
    if "postgres" not in STORES:
        return
    try:
        drop_schema(schema, POSTGRES_URL)
    except Exception as exc:  # said, not raised: a cleanup failure must not hide the tests' results
        # (the next run's drop_stale_schemas drops it: tests/pg.py)
        warnings.warn(f"conformance schema {schema} was not dropped: {exc}", stacklevel=1)


class Harness:
    """How a conformance test builds servers, workflows and workers for its (store, mode)."""

    def __init__(self, store: str, mode: ExecutionMode, schema: str) -> None:
        self.store = store
        self.mode = mode
        self.schema = schema

    def __repr__(self) -> str:
        return f"<Harness {self.store} {self.mode.value}>"

    @property
    def local(self) -> bool:
        """True for LOCAL_SYNC and LOCAL_ASYNC."""
        return self.mode is not ExecutionMode.SERVER

    def server(self, **settings: Any) -> EmbeddedServer:
        """An EmbeddedServer on this harness's store (use ``async with``)."""
        if self.store == "postgres":
            settings.setdefault("database_url", POSTGRES_URL)
            settings.setdefault("database_schema", self.schema)
        return EmbeddedServer(**settings)

    def env(self, blueprints: Iterable[Blueprint[Any]] = (), **settings: Any) -> WorkflowEnvironment:
        """A test-kit WorkflowEnvironment (virtual time) on this harness's store (``async with``).

        For scenarios that wait on time (sleeps, backoff, deadlines, leases): virtual time
        jumps over the wait, and the history's timestamps show exactly when things happened.
        """
        if self.store == "postgres":
            settings.setdefault("database_url", POSTGRES_URL)
            settings.setdefault("database_schema", self.schema)
        settings.setdefault("worker_options", self.options())
        return WorkflowEnvironment(blueprints, **settings)

    def define(self, base: str, context_type: type[Any] = dict) -> Workflow[Any]:
        """``Workflow.define`` with a name unique to this test, in this harness's mode."""
        name = f"{base}-{self.mode.value.lower().replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        return Workflow.define(name, context_type).execution(self.mode)

    @staticmethod
    def options(**overrides: Any) -> WorkerOptions:
        """Worker options for tests: short long-polls so closing is quick."""
        overrides.setdefault("poll_wait_seconds", 1.0)
        return WorkerOptions(**overrides)

    @staticmethod
    async def finish(server: EmbeddedServer, instance_id: str, timeout: float = 15.0) -> InstanceInfo:
        """Wait until the instance is finished; fail the test if it is still running."""
        info = await server.client.wait(instance_id, timeout=timeout)
        assert info.finished, f"instance still {info.status} after {timeout} s: {info}"
        # What the wait was handed (on PostgreSQL, the view of the commit that finished it:
        # wiggle/_storage/postgres/group_commit.py finished_view) is what a read returns.
        assert info == await server.client.get(instance_id)
        return info

    @contextlib.asynccontextmanager
    async def running(
        self, blueprints: Iterable[Blueprint[Any]], options: WorkerOptions | None = None, **settings: Any
    ) -> AsyncIterator[tuple[EmbeddedServer, Worker]]:
        """A server and one started worker for ``blueprints``."""
        async with self.server(**settings) as server:
            async with server.worker(list(blueprints), options or self.options()) as worker:
                yield server, worker


@pytest.fixture(params=[(s, m) for s in STORES for m in MODES], ids=lambda p: f"{p[0]}-{p[1].value}")
def harness(request: pytest.FixtureRequest, postgres_schema: str) -> Harness:
    """One (store, execution mode) combination."""
    store, mode = request.param
    return Harness(store, mode, postgres_schema)


@pytest.fixture(params=STORES)
def server_harness(request: pytest.FixtureRequest, postgres_schema: str) -> Harness:
    """SERVER mode on each store (the tests of reports, fences and chained steps)."""
    return Harness(request.param, ExecutionMode.SERVER, postgres_schema)


@pytest.fixture(
    params=[(s, m) for s in STORES for m in (ExecutionMode.LOCAL_SYNC, ExecutionMode.LOCAL_ASYNC)],
    ids=lambda p: f"{p[0]}-{p[1].value}",
)
def local_harness(request: pytest.FixtureRequest, postgres_schema: str) -> Harness:
    """LOCAL_SYNC and LOCAL_ASYNC on each store."""
    store, mode = request.param
    return Harness(store, mode, postgres_schema)
