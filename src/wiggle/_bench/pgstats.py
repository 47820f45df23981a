"""PostgreSQL statistics of a benchmark run: its own database, xact_commit, backend CPU, clean-up.

Also what shows contention between servers on one database: the database's row and lock
counters (``counters``) and what its busy backends wait on, sampled (``WaitSampler``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .processes import thread_cpu

__all__ = ["COUNTERS", "Postgres", "WaitSampler"]

#: pg_stat_database's counters read around the drain (row work, rollbacks, deadlocks, conflicts).
COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_hit",
    "blks_read",
    "deadlocks",
)


class Postgres:
    """The benchmark's database: isolation, pg_stat_database counters, backend CPU."""

    def __init__(self, url: str, keep: bool) -> None:
        import psycopg

        self.psycopg = psycopg
        self.admin_url = url
        self.keep = keep
        self.admin = psycopg.connect(url, autocommit=True, connect_timeout=10)
        parts = urlsplit(url)
        self.admin_db = self.admin.info.dbname
        self.dbname = f"wiggle_bench_{os.getpid()}"
        self.created_db = False
        self.note = ""
        try:
            self.admin.execute(f'CREATE DATABASE "{self.dbname}"')
            self.created_db = True
            self.url = urlunsplit(
                (parts.scheme, parts.netloc, "/" + self.dbname, parts.query, parts.fragment)
            )
        except psycopg.Error as exc:
            self.dbname = self.admin_db
            self.url = url
            self.note = (
                f"could not create a database of its own ({str(exc).strip()}); using {self.admin_db!r}: "
                "pg xact_commit and backend CPU include other sessions on that database"
            )
        row = self.admin.execute("SHOW server_version").fetchone()
        self.version = row[0] if row else "?"
        self.stale = self._stale_databases()

    def _stale_databases(self) -> list[str]:
        """Benchmark databases of runs that died without cleaning up (killed -9): named, never dropped."""
        rows = self.admin.execute(
            "SELECT d.datname FROM pg_database d WHERE d.datname ~ '^wiggle_bench_[0-9]+$' AND d.datname <> %s "
            "AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)",
            (self.dbname,),
        ).fetchall()
        stale = []
        for (name,) in rows:
            pid = int(name.rsplit("_", 1)[1])
            if not Path(f"/proc/{pid}").exists():
                stale.append(name)
        return stale

    def xact_commit(self) -> int:
        return self.counters()["xact_commit"]

    def counters(self) -> dict[str, int]:
        """The benchmark database's pg_stat_database counters (COUNTERS); exact once no backend
        of it is left (wait_no_backends), as each flushes its own when it exits."""
        self.admin.execute("SELECT pg_stat_clear_snapshot()")
        row = self.admin.execute(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = %s", (self.dbname,)
        ).fetchone()
        return (
            dict(zip(COUNTERS, (int(v or 0) for v in row), strict=True))
            if row
            else dict.fromkeys(COUNTERS, 0)
        )

    def wait_no_backends(self, timeout: float = 10.0) -> None:
        """Wait until no connection to the benchmark database is left (their stats are flushed then)."""
        if not self.created_db:
            time.sleep(1.0)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.dbname,),
            ).fetchone()
            if not row or int(row[0]) == 0:
                time.sleep(0.05)
                return
            time.sleep(0.05)

    def cpu_snapshot(self) -> tuple[dict[int, float], dict[int, float]]:
        """(backends of the benchmark database, background processes) -> pid: CPU seconds."""
        rows = self.admin.execute(
            "SELECT pid, datname, backend_type FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        ).fetchall()
        backends: dict[int, float] = {}
        background: dict[int, float] = {}
        for pid, datname, backend_type in rows:
            cpu = thread_cpu(int(pid))  # a backend is one thread: to the nanosecond
            if cpu is None:
                continue
            if backend_type == "client backend":
                if datname == self.dbname:
                    backends[int(pid)] = cpu
            else:
                background[int(pid)] = cpu
        return backends, background

    def drop_schema(self, schema: str) -> None:
        if self.keep:
            return
        with self.psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        try:
            if self.created_db and not self.keep:
                self.admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        finally:
            self.admin.close()


class WaitSampler:
    """Samples, every ``interval`` seconds in a thread of its own, what the benchmark database's
    busy backends wait on (pg_stat_activity, on a connection to the admin database, so the
    sampler is not one of the backends it counts).

    ``result()`` gives the samples taken, the mean number of active backends, and per wait
    (``type:event``, e.g. ``Lock:transactionid``, ``LWLock:NotifyQueue``, ``IO:WALSync``) the mean
    number of active backends waiting on it: lock waits between servers show up here.
    """

    def __init__(self, pg: Postgres, interval: float = 0.05) -> None:
        self.url = pg.admin_url
        self.dbname = pg.dbname
        self.psycopg = pg.psycopg
        self.interval = interval
        self.samples = 0
        self.active = 0
        self.waits: Counter[str] = Counter()
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-pg-waits", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        query = (
            "SELECT wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND backend_type = 'client backend' AND state = 'active'"
        )
        try:
            with self.psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                while not self._stop.wait(self.interval):
                    rows = conn.execute(query, (self.dbname,)).fetchall()
                    self.samples += 1
                    self.active += len(rows)
                    for kind, event in rows:
                        if kind:
                            self.waits[f"{kind}:{event}"] += 1
        except Exception as exc:  # the figures say so; the run itself goes on
            self.error = str(exc).strip()

    def result(self) -> dict[str, object]:
        n = max(self.samples, 1)
        return {
            "samples": self.samples,
            "mean_active": round(self.active / n, 3),
            "mean_waiting": {k: round(v / n, 3) for k, v in self.waits.most_common()},
            **({"error": self.error} if self.error else {}),
        }
