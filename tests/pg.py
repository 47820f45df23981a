"""PostgreSQL for the tests: a fresh, uniquely named schema per use, dropped afterwards.

Every test run (and every test) gets its own schema ``wiggle_test_<pid>_<random>`` in database
``test``, so two runs at once never see each other's rows, locks or notifications. PostgreSQL
being unreachable is a failure, never a skip: a green suite must mean the Postgres store was tested.

Override the server with WIGGLE_TEST_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql

__all__ = [
    "TEST_DATABASE_URL",
    "STORES",
    "new_schema_name",
    "create_schema",
    "drop_schema",
    "temp_schema",
    "async_temp_schema",
    "pg_schema",
    "PrivatePostgres",
]

TEST_DATABASE_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

#: The stores the store-parametrized tests run on: "memory" always, "postgres" with
#: WIGGLE_TEST_POSTGRES=1 (as CI sets: PostgreSQL then fails, never skips, when unreachable).
STORES = ["memory"] + (["postgres"] if os.environ.get("WIGGLE_TEST_POSTGRES") == "1" else [])


def new_schema_name() -> str:
    """A schema name no other test run uses."""
    return f"wiggle_test_{os.getpid()}_{os.urandom(4).hex()}"


def _connect(url: str = TEST_DATABASE_URL) -> psycopg.Connection:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise RuntimeError(
            f"PostgreSQL is unreachable at {url} ({exc}); the postgres tests need it. "
            "Start it (pg_ctlcluster --skip-systemctl-redirect 15 main start) or set WIGGLE_TEST_DATABASE_URL."
        ) from exc


def create_schema(name: str | None = None, url: str = TEST_DATABASE_URL) -> str:
    """Create an empty schema (raises if PostgreSQL is down); returns its name."""
    name = name or new_schema_name()
    with _connect(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


def drop_schema(name: str, url: str = TEST_DATABASE_URL) -> None:
    """Drop a test schema and everything in it."""
    with _connect(url) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextlib.contextmanager
def temp_schema(url: str = TEST_DATABASE_URL) -> Iterator[str]:
    """A fresh schema (on the server at ``url``) for the duration of the block."""
    name = create_schema(url=url)
    try:
        yield name
    finally:
        drop_schema(name, url)


class PrivatePostgres:
    """A PostgreSQL server of the test's own: ``initdb`` in a temporary folder, trust auth, on a
    free loopback port. For tests that stop or restart their database: the shared server (and so
    every other test, and another run at once) is never touched.

    The binaries are those of ``pg_config --bindir`` (Debian's postgresql-15); as root, they run
    as the ``postgres`` user (initdb refuses root).
    """

    def __init__(self) -> None:
        bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        self.pg_ctl = os.path.join(bindir, "pg_ctl")
        self.folder = tempfile.mkdtemp(prefix="wiggle-pg-")
        self.data = os.path.join(self.folder, "data")
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.folder, "postgres", "postgres")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._run(
            os.path.join(bindir, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self._as, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = os.path.join(self.folder, "postgres.log")
        self._run(self.pg_ctl, "-D", self.data, "-o", options, "-l", log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions ended, a clean shutdown; ``immediate``: a crash)."""
        self._run(self.pg_ctl, "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")

    def close(self) -> None:
        """Stop the server if it runs, and delete its folder."""
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.asynccontextmanager
async def async_temp_schema() -> AsyncIterator[str]:
    """``temp_schema`` for async fixtures (the DDL is quick; it runs synchronously)."""
    with temp_schema() as name:
        yield name


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A pytest fixture: the name of a fresh schema, dropped after the test (import it into a test module)."""
    with temp_schema() as name:
        yield name
