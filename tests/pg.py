"""PostgreSQL for the tests: a fresh, uniquely named schema per use, dropped afterwards.

Every test run (and every test) gets its own schema ``wiggle_test_<pid>_<random>`` in database
``test``, so two runs at once never see each other's rows, locks or notifications. PostgreSQL
being unreachable is a failure, never a skip: a green suite must mean the Postgres store was tested.
A run that was killed, or whose drop failed, leaves its schemas behind: ``drop_stale_schemas``
(called when a run starts, tests/conftest.py) drops those whose process is gone.

Override the server with WIGGLE_TEST_DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
import pytest
from ports import free_port
from psycopg import sql

__all__ = [
    "TEST_DATABASE_URL",
    "STORES",
    "new_schema_name",
    "create_schema",
    "drop_schema",
    "drop_stale_schemas",
    "temp_schema",
    "async_temp_schema",
    "pg_schema",
    "PrivatePostgres",
]

TEST_DATABASE_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

#: The stores the store-parametrized tests run on: "memory" always, "postgres" with
#: WIGGLE_TEST_POSTGRES=1 (as CI sets: PostgreSQL then fails, never skips, when unreachable).
STORES = ["memory"] + (["postgres"] if os.environ.get("WIGGLE_TEST_POSTGRES") == "1" else [])


def new_schema_name(prefix: str = "wiggle_test") -> str:
    """A schema name no other test run uses: ``prefix``, this process's pid, a random part (the
    pid is how drop_stale_schemas tells a finished run's schemas)."""
    return f"{prefix}_{os.getpid()}_{os.urandom(4).hex()}"


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
        _drop(conn, name)


def _drop(conn: psycopg.Connection, name: str) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


#: A test run's schema (new_schema_name): ``wiggle_test_``, or ``wiggle_conf_`` (the conformance
#: harness, tests/conformance/conftest.py), the creating process's pid, a random part.
RUN_SCHEMA = re.compile(r"^wiggle_(?:test|conf)_(\d+)_[0-9a-f]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def drop_stale_schemas(url: str = TEST_DATABASE_URL) -> list[str]:
    """Drop the schemas of test runs whose process is no longer alive on this machine; the
    names dropped. A run going on at the same time keeps its schemas (its processes are alive)."""
    with _connect(url) as conn:
        names = [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'wiggle%'")]
        stale = [name for name in names if (m := RUN_SCHEMA.match(name)) and not _alive(int(m.group(1)))]
        for name in stale:
            _drop(conn, name)
    return stale


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
    free loopback port. For tests that stop, restart, kill or fail over their database: the shared
    server (and so every other test, and another run at once) is never touched.

    ``settings`` are server settings given on the command line of this server only (``-c
    name=value``): a standby made from it by ``standby()`` copies its data folder, configuration
    files included, but not these. ``name`` is its ``cluster_name``, which a standby also reports
    as its ``application_name`` to the primary (what ``synchronous_standby_names`` lists).

    The binaries are those of ``pg_config --bindir`` (Debian's postgresql-15); as root, they run
    as the ``postgres`` user (initdb refuses root).
    """

    def __init__(
        self, settings: Mapping[str, str] | None = None, name: str = "primary", *, _standby_of: int = 0
    ) -> None:
        self.bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        self.pg_ctl = os.path.join(self.bindir, "pg_ctl")
        self.name = name
        self.settings = dict(settings or {})
        self.folder = tempfile.mkdtemp(prefix=f"wiggle-pg-{name}-")
        self.data = os.path.join(self.folder, "data")
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.folder, "postgres", "postgres")
        self.port = free_port()
        if _standby_of:
            # A copy of the primary's data folder, streaming from it from then on: -R writes
            # primary_conninfo and standby.signal; -X stream copies the WAL written meanwhile.
            self._run(
                os.path.join(self.bindir, "pg_basebackup"),
                *("-D", self.data, "-h", "127.0.0.1", "-p", str(_standby_of), "-U", "postgres"),
                *("-R", "-X", "stream", "-c", "fast"),
            )
        else:
            self._run(
                os.path.join(self.bindir, "initdb"),
                *("-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"),
            )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            self.start(wait=not _standby_of)  # a standby waits for its primary (standby())
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self._as, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    @property
    def log(self) -> str:
        """The server's log file."""
        return os.path.join(self.folder, "postgres.log")

    def start(self, wait: bool = True) -> None:
        """Start the server and (``wait``) wait until it accepts connections."""
        options = [f"-p {self.port}", f"-k {self.folder}", "-c listen_addresses=127.0.0.1", "-c fsync=off"]
        options += [f"-c cluster_name={self.name}"]
        options += [f"-c {key}={value}" for key, value in self.settings.items()]
        waiting = ["-w", "-t", "60"] if wait else ["-W"]
        self._run(self.pg_ctl, "-D", self.data, "-o", " ".join(options), "-l", self.log, *waiting, "start")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the server accepts connections (a standby: read-only ones, in hot standby)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL {self.name} not ready after {timeout} s: {exc}") from exc
                time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions ended, a clean shutdown; ``immediate``: a crash)."""
        self._run(self.pg_ctl, "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")

    # ------------------------------------------------------------------ replication

    @classmethod
    def primary(cls, standby_names: Sequence[str] = (), name: str = "primary") -> PrivatePostgres:
        """A server ready to stream to standbys; with ``standby_names``, a commit is acknowledged
        only once the first of them that is connected has flushed it (synchronous replication:
        ``synchronous_standby_names = 'FIRST 1 (...)'``, ``synchronous_commit = on``)."""
        settings = {"wal_level": "replica", "max_wal_senders": "5", "wal_keep_size": "64MB"}
        if standby_names:
            settings["synchronous_standby_names"] = f"'FIRST 1 ({','.join(standby_names)})'"
            settings["synchronous_commit"] = "on"
        return cls(settings, name)

    def standby(self, name: str = "standby") -> PrivatePostgres:
        """A streaming hot standby of this server (``pg_basebackup -R``), named ``name``.

        It has none of this server's ``settings``: promoted, it does not wait for a synchronous
        standby of its own (which would block every commit until one connects).
        """
        standby = PrivatePostgres({"hot_standby": "on"}, name, _standby_of=self.port)
        try:
            # A hot standby opens for reads once it has replayed a snapshot of the running
            # transactions, which a checkpoint writes (else the next comes within 15 s).
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("CHECKPOINT")
            standby.wait_ready()
        except BaseException:
            standby.close()
            raise
        return standby

    def streaming_to(self) -> list[tuple[str, str, str]]:
        """(application_name, state, sync_state) of each standby streaming from this server."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute("SELECT application_name, state, sync_state FROM pg_stat_replication")
            return [(str(a), str(b), str(c)) for a, b, c in rows.fetchall()]

    def in_recovery(self) -> bool:
        """True while this server is a standby."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            return bool(row and row[0])

    def promote(self) -> None:
        """Make this standby a primary (``pg_ctl promote``), waiting until it accepts writes."""
        self._run(self.pg_ctl, "-D", self.data, "-w", "-t", "60", "promote")

    def pids(self) -> list[int]:
        """The postmaster's pid and those of its children (backends, WAL sender, ...); [] if down."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                postmaster = int(f.readline().strip())
        except (OSError, ValueError):
            return []
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            if int(fields[1]) == postmaster:  # the field after the state is the parent's pid
                children.append(int(entry))
        return [postmaster, *children] if os.path.exists(f"/proc/{postmaster}") else []

    def kill(self) -> None:
        """The machine dies: SIGKILL to the postmaster and every process of it, at once (no
        shutdown, no goodbye to clients or standbys; their connections see a reset)."""
        pids = self.pids()
        if not pids:
            raise RuntimeError(f"PostgreSQL {self.name} is not running")
        for pid in pids:  # the postmaster first: it cannot restart children it has lost
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

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


@contextlib.asynccontextmanager
async def opened_stores(make: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    """A factory of opened stores: each call makes one with ``make(**kwargs)`` and opens it; every
    one made is closed when the block ends (a fixture's several servers on one schema)."""
    stores: list[Any] = []

    async def factory(**kwargs: Any) -> Any:
        store = make(**kwargs)
        await store.open()
        stores.append(store)
        return store

    try:
        yield factory
    finally:
        for store in stores:
            await store.close()


@contextlib.asynccontextmanager
async def wanting(store: Any, kind: str, subjects: Sequence[str]) -> AsyncIterator[None]:
    """While the block runs, the PostgreSQL store ``store``'s node waits for wake-ups of ``kind``
    about ``subjects``, as a waiting poll (``"work"``, queues) or instance wait (``"finished"``,
    ``[""]``) does, its rows in the wakeups table written before the block begins
    (wiggle/_storage/postgres/wakeups.py): the other nodes send it those NOTIFYs."""
    with store.waiting_for(kind, subjects):
        for _ in range(500):
            if {(kind, s) for s in subjects} <= store.cluster.wakeups.written():
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"the wakeups rows of {kind} {list(subjects)} were not written")
        yield


@contextlib.asynccontextmanager
async def listening(*channels: str) -> AsyncIterator[Callable[..., Any]]:
    """A plain LISTEN connection on ``channels`` (not a Wiggle node); yields ``drain(expect=0)``:
    the payloads that came, waiting up to 10 s for the first ``expect`` of them, then 0.3 s more
    for any others (so an extra one still shows). A node sends its NOTIFYs from a task of its own
    after the change that asks for them (cluster.py ``_send``), so on a loaded machine one can come
    later than a fixed window: a test that expects one says so and waits for it."""
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        for channel in channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

        async def drain(expect: int = 0) -> list[str]:
            payloads: list[str] = []
            if expect:
                async with contextlib.aclosing(conn.notifies(timeout=10.0, stop_after=expect)) as notes:
                    payloads += [n.payload async for n in notes]
            async with contextlib.aclosing(conn.notifies(timeout=0.3)) as notes:
                payloads += [n.payload async for n in notes]
            return payloads

        yield drain


async def terminate_sleeping(application_name: str, what: str) -> None:
    """Terminate the backend of ``application_name``'s connections that sits in ``pg_sleep`` (a
    test's trigger holding a statement or a COMMIT there), as a lost connection would end it;
    AssertionError naming ``what`` if none is seen within 5 s."""
    with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as admin:
        for _ in range(500):
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event = 'PgSleep'",
                (application_name,),
            ).fetchall()
            if rows:
                admin.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{what} was never seen waiting")


@contextlib.contextmanager
def pipelines_opened() -> Iterator[list[int]]:
    """While the block runs, count the psycopg pipelines opened in this process (a transaction of
    the store's is one: wiggle/_storage/postgres/db.py ``transaction``); yields a one-item list
    holding the count."""
    count = [0]
    opened = psycopg.AsyncConnection.pipeline

    def counted(self: psycopg.AsyncConnection[Any]) -> Any:
        count[0] += 1
        return opened(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.AsyncConnection, "pipeline", counted)
        yield count
