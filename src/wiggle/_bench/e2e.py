"""The end-to-end benchmark of local-execution-design.md: a linear S-step pipeline, I instances.

For each execution mode it starts a fresh server process (in-memory, or PostgreSQL on a fresh
schema), registers a linear workflow of ``--steps`` trivial steps, pre-submits ``--instances``
instances, starts ``--workers`` worker processes of ``--concurrency`` each, and times the drain
from the moment the workers may start pulling until the last instance finished. Then it fetches
every instance and checks it COMPLETED with exactly the expected context; a wrong result is
reported (what was wrong, never a figure) and the exit code is 1.

Reported per mode: instances/s and steps/s over the drain; p50/p99 instance latency
(created_at -> finished_at; the instances are all submitted before the drain, so this includes
their wait in the queue); RPCs served per instance by method (the server's own counters, deltas
around the drain); the store's committed transactions per instance, and on PostgreSQL the
database's xact_commit per instance (pg_stat_database); CPU seconds by role (server, workers,
PostgreSQL backends of the benchmark database and PostgreSQL background processes, this driver).

    python bench/e2e.py --modes SERVER,LOCAL_SYNC,LOCAL_ASYNC
    python bench/e2e.py --database-url postgresql://postgres@127.0.0.1:5432/test --json
    wiggle bench --steps 5 --instances 100

Settings (flag, environment variable, default):

    --modes        WIGGLE_EXECUTION_MODE      SERVER,LOCAL_SYNC,LOCAL_ASYNC (the env var names one mode)
    --steps        WIGGLE_BENCH_STEPS         20
    --instances    WIGGLE_BENCH_INSTANCES     1000
    --workers      WIGGLE_BENCH_WORKERS       4
    --concurrency  WIGGLE_BENCH_CONCURRENCY   16
    --batch-size   WIGGLE_LOCAL_BATCH_SIZE    64   (LOCAL_ASYNC flush size)
    --transport    WIGGLE_BENCH_TRANSPORT     stream (or unary)
    --handler      WIGGLE_BENCH_HANDLER       sync (plain functions, run in the worker's thread pool) or async
    --database-url WIGGLE_DATABASE_URL        unset: the in-memory store
    --impl         WIGGLE_IMPL                hot paths of server and workers: auto, cython, python
    --timeout      WIGGLE_BENCH_TIMEOUT       600 seconds per mode
    --json         print one JSON document on stdout (the tables go to stderr)
    --keep         keep the PostgreSQL database/schemas and the process logs

On PostgreSQL the benchmark creates its own database ``wiggle_bench_<pid>`` next to the one in the
URL (so pg_stat_database counts only the benchmark's transactions; when it may not create
databases it falls back to the URL's database and says the counts may include other sessions),
and one schema ``wiggle_bench_<pid>_<mode>`` per mode. Both are dropped at the end unless --keep.
Registration and submission run on one server process; the drain runs on a second one started on
the same schema after the first has exited, so the database's transaction counters (flushed when a
backend exits) are exact around the drain.

Exit codes: 0 every mode verified; 1 a mode produced a wrong result, failed or timed out; 2 bad
arguments; 130 interrupted. Every subprocess is stopped on the way out, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._env import env_int as worker_env_int

__all__ = ["main", "parse_args"]

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "worker.py"
MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")
SUBMIT_CONCURRENCY = 64
READY_TIMEOUT = 60.0
STOP_GRACE = 15.0
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _load_workload() -> Any:
    """The workload module (the same file the worker subprocesses run as a script)."""
    from . import worker

    return worker


class BenchError(Exception):
    """A mode could not produce a trustworthy result (the message says why)."""


# ---------------------------------------------------------------------- settings


def _env_int(name: str, default: int) -> int:
    try:
        return worker_env_int(name, default)
    except ValueError as exc:
        raise SystemExit(f"e2e: {exc}") from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _modes(text: str) -> list[str]:
    modes = [m.strip().upper() for m in text.split(",") if m.strip()]
    if not modes:
        raise argparse.ArgumentTypeError("no mode given")
    for m in modes:
        if m not in MODES:
            raise argparse.ArgumentTypeError(f"mode {m!r} is not one of {', '.join(MODES)}")
    return modes


def build_parser() -> argparse.ArgumentParser:
    env_mode = os.environ.get("WIGGLE_EXECUTION_MODE", "").strip()
    p = argparse.ArgumentParser(
        prog="wiggle bench",
        description="End-to-end benchmark: a linear S-step workflow, I pre-submitted instances, timed drain.",
        epilog="Environment variables give the defaults: WIGGLE_EXECUTION_MODE, WIGGLE_BENCH_STEPS, "
        "WIGGLE_BENCH_INSTANCES, WIGGLE_BENCH_WORKERS, WIGGLE_BENCH_CONCURRENCY, WIGGLE_LOCAL_BATCH_SIZE, "
        "WIGGLE_BENCH_TRANSPORT, WIGGLE_BENCH_HANDLER, WIGGLE_DATABASE_URL, WIGGLE_IMPL, WIGGLE_BENCH_TIMEOUT.",
    )
    p.add_argument(
        "--modes",
        type=_modes,
        default=env_mode or ",".join(MODES),
        help="comma-separated execution modes, run in turn (default: $WIGGLE_EXECUTION_MODE, else all three)",
    )
    p.add_argument("--steps", type=_positive, default=_env_int("WIGGLE_BENCH_STEPS", 20))
    p.add_argument("--instances", type=_positive, default=_env_int("WIGGLE_BENCH_INSTANCES", 1000))
    p.add_argument(
        "--workers", type=_positive, default=_env_int("WIGGLE_BENCH_WORKERS", 4), help="worker processes"
    )
    p.add_argument(
        "--concurrency", type=_positive, default=_env_int("WIGGLE_BENCH_CONCURRENCY", 16), help="per worker"
    )
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=_env_int("WIGGLE_LOCAL_BATCH_SIZE", 64),
        help="LOCAL_ASYNC flush size",
    )
    p.add_argument(
        "--transport",
        choices=("stream", "unary"),
        default=os.environ.get("WIGGLE_BENCH_TRANSPORT", "stream") or "stream",
    )
    p.add_argument(
        "--handler",
        choices=("sync", "async"),
        default=os.environ.get("WIGGLE_BENCH_HANDLER", "sync") or "sync",
        help="sync: plain functions (run in the worker's thread pool); async: async def",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL", ""),
        help="PostgreSQL URL; unset: in-memory",
    )
    p.add_argument(
        "--impl",
        choices=("auto", "cython", "python"),
        default=None,
        help="WIGGLE_IMPL for server and workers",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("WIGGLE_BENCH_TIMEOUT", "") or 600),
        help="seconds per mode",
    )
    p.add_argument(
        "--json", action="store_true", help="print a JSON document on stdout (tables go to stderr)"
    )
    p.add_argument("--keep", action="store_true", help="keep the PostgreSQL database/schemas and the logs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--fault", choices=("", "context", "fail"), default="", help=argparse.SUPPRESS
    )  # tests the verification
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.timeout <= 0:
        raise SystemExit("e2e: --timeout must be > 0")
    if args.database_url and not args.database_url.startswith(("postgresql://", "postgres://")):
        raise SystemExit("e2e: --database-url must be a postgresql:// URL")
    return args


# ---------------------------------------------------------------------- processes


def proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (all its threads), or None if it is gone/unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy() -> tuple[float, float] | None:
    """(busy, irq + softirq + steal) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / CLK_TCK, (ticks[5] + ticks[6] + ticks[7]) / CLK_TCK


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class ChildDied(BenchError):
    pass


class Child:
    """A benchmark subprocess speaking JSON lines on stdout; its stderr goes to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.steps = 0
        self._reader: asyncio.Task[None] | None = None
        self._log: Any = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            env=self.env,
            limit=1 << 22,
        )
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # stray output
                if event.get("event") == "progress":
                    self.steps = int(event.get("steps", 0))
                else:
                    self.events.put_nowait(event)
        finally:
            self.events.put_nowait(None)

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _died(self, what: str) -> ChildDied:
        code = self.proc.returncode if self.proc is not None else None
        tail = self.tail()
        return ChildDied(
            f"{self.name} (pid {self.pid if self.proc else '?'}) exited (code {code}) while {what}"
            + (f"; last lines of {self.log_path}:\n{tail}" if tail else "")
        )

    async def expect(self, event: str, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{self.name} did not report {event!r} within {timeout:.0f} s while {what}")
            try:
                message = await asyncio.wait_for(self.events.get(), remaining)
            except asyncio.TimeoutError:
                continue
            if message is None:
                if self.proc is not None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.proc.wait(), 5)
                raise self._died(what)
            if message.get("event") == event:
                return message

    def send(self, command: str) -> None:
        if self.alive and self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.write(command.encode() + b"\n")

    def cpu(self) -> float | None:
        return proc_cpu(self.pid) if self.alive else None

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Ask it to stop (stdin 'stop' + EOF); SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.send("stop")
            if self.proc.stdin is not None:
                with contextlib.suppress(Exception):
                    self.proc.stdin.close()
            for sig, wait in ((None, grace), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
                if sig is not None and self.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        self.proc.send_signal(sig)
                try:
                    await asyncio.wait_for(self.proc.wait(), wait)
                    break
                except asyncio.TimeoutError:
                    continue
        self.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def close(self) -> None:
        if self._reader is not None and not self._reader.done() and not self.alive:
            self._reader.cancel()
        if self._log is not None:
            self._log.close()
            self._log = None


class Children:
    """Every subprocess this run started; ``shutdown()`` leaves none behind."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.all: list[Child] = []

    async def spawn(self, name: str, args: list[str]) -> Child:
        child = Child(name, [sys.executable, str(WORKER_SCRIPT), *args], self.env, self.log_dir)
        self.all.append(child)
        await child.start()
        return child

    async def shutdown(self, children: Sequence[Child] | None = None, grace: float = STOP_GRACE) -> None:
        targets = list(children) if children is not None else list(self.all)
        await asyncio.gather(*(c.stop(grace) for c in targets), return_exceptions=True)

    def kill_all(self) -> None:
        for child in self.all:
            child.kill()


# ---------------------------------------------------------------------- PostgreSQL


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
        self.admin.execute("SELECT pg_stat_clear_snapshot()")
        row = self.admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (self.dbname,)
        ).fetchone()
        return int(row[0]) if row else 0

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
            cpu = proc_cpu(int(pid))
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


def _cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(max(cpu - before.get(pid, 0.0), 0.0) for pid, cpu in after.items())


# ---------------------------------------------------------------------- measuring


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Progress:
    """A carriage-return progress line on stderr."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.shown = False

    def show(self, label: str, done: int, total: int, started: float, unit: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < (0.2 if self.tty else 2.0):
            return
        self.last = now
        frac = min(done / total, 1.0) if total else 1.0
        width = 30
        filled = int(frac * width)
        elapsed = now - started
        rate = done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(
            f"\r{label:<24} [{bar}] {frac * 100:5.1f}% {done}/{total} {unit}  {elapsed:6.1f} s  {rate:8.1f} {unit}/s "
        )
        if not self.tty:
            sys.stderr.write("\n")
        sys.stderr.flush()
        self.shown = True

    def end(self) -> None:
        if self.enabled and self.shown and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self.shown = False


class ModeRun:
    """One mode: fresh server (+ schema), submission, timed drain, verification."""

    def __init__(
        self,
        args: argparse.Namespace,
        mode: str,
        children: Children,
        pg: Postgres | None,
        workload: Any,
        progress: Progress,
    ) -> None:
        self.args = args
        self.mode = mode
        self.children = children
        self.pg = pg
        self.workload = workload
        self.progress = progress
        self.name = workload.workflow_name(mode, args.steps)
        self.schema = f"wiggle_bench_{os.getpid()}_{mode.lower()}"
        self.result: dict[str, Any] = {"mode": mode, "ok": False}
        self.server: Child | None = None
        self.workers: list[Child] = []
        self.instance_ids: dict[str, int] = {}
        self.deadline: float = time.monotonic() + float(args.timeout)

    def _remaining(self, what: str) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"timed out after --timeout {self.args.timeout:.0f} s while {what}")
        return remaining

    async def _start_server(self, label: str) -> tuple[Child, dict[str, Any]]:
        server_args = ["server"]
        if self.pg is not None:
            server_args += ["--database-url", self.pg.url, "--schema", self.schema]
        server = await self.children.spawn(f"{self.mode}-server-{label}", server_args)
        ready = await server.expect(
            "ready", min(READY_TIMEOUT, self._remaining("starting the server")), "starting"
        )
        return server, ready

    async def _stats(self, server: Child) -> dict[str, Any]:
        server.send("stats")
        return await server.expect("stats", 30.0, "reading its counters")

    async def run(self) -> dict[str, Any]:
        from wiggle.client import AsyncClient

        args = self.args
        bp = self.workload.blueprint(self.mode, args.steps, args.handler)
        xact_before = 0
        # -- 1. registration and submission (not timed)
        server, ready = await self._start_server("submit")
        self.result["server_impl"] = ready.get("impl")
        self.result["store"] = ready.get("store")
        target = f"127.0.0.1:{ready['port']}"
        async with AsyncClient(target) as client:
            await client.register(bp)
            await self._submit(client)
        if self.pg is not None:
            # Drain on a second server process: the first one's backends exit and flush their
            # statistics, so pg_stat_database's counters are exact from here on.
            await self.children.shutdown([server])
            await asyncio.to_thread(self.pg.wait_no_backends)
            xact_before = await asyncio.to_thread(self.pg.xact_commit)
            server, ready = await self._start_server("drain")
            target = f"127.0.0.1:{ready['port']}"
        self.server = server
        # -- 2. workers: connected and registered, waiting for "go"
        worker_args = [
            "worker",
            "--target",
            target,
            "--mode",
            self.mode,
            "--steps",
            str(args.steps),
            "--concurrency",
            str(args.concurrency),
            "--batch-size",
            str(args.batch_size),
            "--transport",
            args.transport,
            "--handler",
            args.handler,
        ]
        if args.fault:
            worker_args += ["--fault", args.fault]
        self.workers = [
            await self.children.spawn(f"{self.mode}-worker{i}", [*worker_args, "--index", str(i)])
            for i in range(args.workers)
        ]
        readies = await asyncio.gather(
            *(
                w.expect("ready", min(READY_TIMEOUT, self._remaining("starting the workers")), "starting")
                for w in self.workers
            )
        )
        self.result["worker_impl"] = sorted({r.get("impl") for r in readies})
        if any(r.get("version") != bp.version for r in readies):
            raise BenchError("a worker built a different workflow version than the driver")
        # -- 3. the timed drain
        async with AsyncClient(target) as client:
            stats0 = await self._stats(server)
            cpu0 = self._cpu()
            pg_cpu0 = await asyncio.to_thread(self.pg.cpu_snapshot) if self.pg else None
            driver0 = self_cpu()
            busy0 = machine_busy()
            t_go = time.time()
            mono_go = time.monotonic()
            for w in self.workers:
                w.send("go")
            polls = await self._drain(client, mono_go)
            mono_done = time.monotonic()
            driver1 = self_cpu()
            busy1 = machine_busy()
            cpu1 = self._cpu()
            pg_cpu1 = await asyncio.to_thread(self.pg.cpu_snapshot) if self.pg else None
            stats1 = await self._stats(server)
            # -- 4. verification (after the measurements)
            infos = await self._fetch_all(client)
        problems = self._verify(infos)
        # -- 5. stop workers (graceful: they report their own counters), then the server
        worker_stats = await self._stop_workers()
        await self.children.shutdown([server])
        xact = None
        if self.pg is not None:
            await asyncio.to_thread(self.pg.wait_no_backends)
            xact = await asyncio.to_thread(self.pg.xact_commit) - xact_before
        if problems:
            self.result["problems"] = problems
            return self.result
        self._figures(
            infos,
            t_go,
            mono_done - mono_go,
            polls,
            stats0,
            stats1,
            cpu0,
            cpu1,
            pg_cpu0,
            pg_cpu1,
            driver1 - driver0,
            worker_stats,
            xact,
            None if busy0 is None or busy1 is None else (busy1[0] - busy0[0], busy1[1] - busy0[1]),
        )
        self.result["ok"] = True
        return self.result

    # -- submission and drain

    async def _submit(self, client: Any) -> None:
        total = self.args.instances
        next_n = 0
        started = time.monotonic()
        label = f"{self.mode} submit"

        async def submitter() -> None:
            nonlocal next_n
            while next_n < total:
                n = next_n
                next_n += 1
                info = await client.start(self.name, {"n": n, "count": 0})
                self.instance_ids[info.instance_id] = n

        tasks = [asyncio.ensure_future(submitter()) for _ in range(min(SUBMIT_CONCURRENCY, total))]
        try:
            while True:
                done, _ = await asyncio.wait(tasks, timeout=0.2, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    if task.exception() is not None:
                        raise BenchError(f"StartInstance failed: {task.exception()}")
                if len(done) == len(tasks):
                    break
                self._remaining(f"submitting ({len(self.instance_ids)}/{total} submitted)")
                self.progress.show(label, len(self.instance_ids), total, started, "inst")
        finally:
            for task in tasks:
                task.cancel()
        self.progress.show(label, len(self.instance_ids), total, started, "inst", force=True)
        self.progress.end()
        if len(self.instance_ids) != total:
            raise BenchError(f"submitted {len(self.instance_ids)} distinct instances, expected {total}")

    async def _list_one(self, client: Any, status: str) -> list[Any]:
        items, _ = await client.list(workflow=self.name, status=status, page_size=1)
        return list(items)

    async def _drain(self, client: Any, mono_go: float) -> int:
        """Wait until no instance is RUNNING; returns how many ListInstances calls that took."""
        target_steps = self.args.instances * self.args.steps
        label = f"{self.mode} drain"
        polls = 0
        last_running = last_failed = 0.0
        while True:
            for child in [self.server, *self.workers]:
                assert child is not None
                if not child.alive:
                    raise child._died("the drain was running")
            steps = sum(w.steps for w in self.workers)
            now = time.monotonic()
            if now - last_running >= (0.05 if steps >= target_steps else 2.0):
                last_running = now
                polls += 1
                if not await self._list_one(client, "RUNNING"):
                    break
            if now - last_failed >= 2.0:
                last_failed = now
                polls += 1
                if await self._list_one(client, "FAILED"):
                    break  # the verification says what went wrong
            if now > self.deadline:
                self.progress.end()
                raise BenchError(
                    f"timed out after --timeout {self.args.timeout:.0f} s: the workers ran "
                    f"{steps}/{target_steps} steps and instances are still RUNNING"
                )
            self.progress.show(
                label, min(steps, target_steps) // self.args.steps, self.args.instances, mono_go, "inst"
            )
            await asyncio.sleep(0.05)
        steps = sum(w.steps for w in self.workers)
        self.progress.show(
            label,
            min(steps, target_steps) // self.args.steps,
            self.args.instances,
            mono_go,
            "inst",
            force=True,
        )
        self.progress.end()
        return polls

    def _cpu(self) -> dict[str, float | None]:
        assert self.server is not None
        workers = [w.cpu() for w in self.workers]
        return {
            "server": self.server.cpu(),
            "workers": None if any(c is None for c in workers) else sum(c for c in workers if c is not None),
        }

    async def _fetch_all(self, client: Any) -> list[Any]:
        out: list[Any] = []
        token = ""
        while True:
            items, token = await client.list(workflow=self.name, page_size=1000, page_token=token)
            out.extend(items)
            if not token:
                return out

    async def _stop_workers(self) -> list[dict[str, Any]]:
        for w in self.workers:
            w.send("stop")
        stats: list[dict[str, Any]] = []
        for w in self.workers:
            try:
                stats.append(await w.expect("stats", STOP_GRACE, "stopping"))
            except BenchError:
                stats.append({})
        await self.children.shutdown(self.workers)
        return stats

    # -- verification and figures

    def _verify(self, infos: list[Any]) -> list[str]:
        steps = self.args.steps
        problems: list[str] = []
        seen: dict[str, Any] = {}
        for info in infos:
            seen[info.instance_id] = info
        missing = [i for i in self.instance_ids if i not in seen]
        extra = [i for i in seen if i not in self.instance_ids]
        if len(infos) != len(seen):
            problems.append(f"ListInstances returned {len(infos)} rows for {len(seen)} distinct instances")
        if missing:
            problems.append(f"{len(missing)} submitted instance(s) not listed, e.g. {missing[:3]}")
        if extra:
            problems.append(f"{len(extra)} unexpected instance(s) of {self.name}, e.g. {extra[:3]}")
        wrong_status: list[str] = []
        wrong_context: list[str] = []
        for instance_id, n in self.instance_ids.items():
            info = seen.get(instance_id)
            if info is None:
                continue
            if info.status != "COMPLETED":
                detail = "; ".join(x for x in (info.reason, info.error) if x)
                wrong_status.append(
                    f"{instance_id} (n={n}) is {info.status}" + (f": {detail}" if detail else "")
                )
                continue
            expected = self.workload.expected_context(n, steps)
            if info.context != expected:
                diffs = []
                for key in sorted(set(expected) | set(info.context), key=str):
                    if info.context.get(key, "<missing>") != expected.get(key, "<absent>"):
                        diffs.append(
                            f"{key}={info.context.get(key, '<missing>')!r} (expected {expected.get(key, '<absent>')!r})"
                        )
                wrong_context.append(f"{instance_id} (n={n}): " + ", ".join(diffs[:6]))
            elif not info.finished_at or info.finished_at < info.created_at:
                wrong_status.append(f"{instance_id} (n={n}) COMPLETED with finished_at={info.finished_at}")
        if wrong_status:
            problems.append(f"{len(wrong_status)} instance(s) not COMPLETED: " + " | ".join(wrong_status[:5]))
        if wrong_context:
            problems.append(
                f"{len(wrong_context)} instance(s) with a wrong final context: "
                + " | ".join(wrong_context[:5])
            )
        return problems

    def _figures(
        self,
        infos: list[Any],
        t_go: float,
        observed: float,
        polls: int,
        stats0: dict[str, Any],
        stats1: dict[str, Any],
        cpu0: dict[str, float | None],
        cpu1: dict[str, float | None],
        pg_cpu0: Any,
        pg_cpu1: Any,
        driver_cpu: float,
        worker_stats: list[dict[str, Any]],
        xact: int | None,
        machine_cpu: tuple[float, float] | None,
    ) -> None:
        args = self.args
        n = args.instances
        last_finish = max(i.finished_at for i in infos) / 1000
        elapsed = last_finish - t_go
        if elapsed <= 0:
            raise BenchError(
                f"the last instance finished {-elapsed:.3f} s before the drain began: clocks disagree"
            )
        latencies = [i.finished_at - i.created_at for i in infos]
        calls0 = stats0["metrics"]["rpc_calls"]
        calls1 = stats1["metrics"]["rpc_calls"]
        rpc = {m: calls1.get(m, 0) - calls0.get(m, 0) for m in sorted(set(calls1) | set(calls0))}
        rpc = {m: v for m, v in rpc.items() if v}
        err0 = stats0["metrics"].get("rpc_errors", {})
        err1 = stats1["metrics"].get("rpc_errors", {})
        errors = {m: err1.get(m, 0) - err0.get(m, 0) for m in err1 if err1.get(m, 0) - err0.get(m, 0)}
        tx = stats1["transactions"] - stats0["transactions"]
        cpu: dict[str, float | None] = {}
        for role in ("server", "workers"):
            a, b = cpu0.get(role), cpu1.get(role)
            cpu[role] = None if a is None or b is None else round(b - a, 3)
        if self.pg is not None and pg_cpu0 is not None and pg_cpu1 is not None:
            cpu["postgres_backends"] = round(_cpu_delta(pg_cpu0[0], pg_cpu1[0]), 3)
            cpu["postgres_background"] = round(_cpu_delta(pg_cpu0[1], pg_cpu1[1]), 3)
        cpu["driver"] = round(driver_cpu, 3)
        total_cpu = sum(v for v in cpu.values() if v is not None)
        if machine_cpu is not None:
            # The kernel's interrupt work (loopback networking lands partly here), and every
            # other process meanwhile: contention from other work on the machine shows there.
            busy, irq = machine_cpu
            cpu["irq"] = round(irq, 3)
            cpu["other"] = round(max(busy - irq - total_cpu, 0.0), 3)
        executed = sum(s.get("steps", 0) for s in worker_stats)
        worker_calls: dict[str, int] = {}
        handbacks: dict[str, int] = {}
        for s in worker_stats:
            for k, v in s.get("calls", {}).items():
                worker_calls[k] = worker_calls.get(k, 0) + v
            for k, v in s.get("handbacks", {}).items():
                handbacks[k] = handbacks.get(k, 0) + v
        worker_rpcs = sum(v for m, v in rpc.items() if m != "ListInstances")
        self.result.update(
            instances=n,
            steps=args.steps,
            elapsed_s=round(elapsed, 3),
            observed_s=round(observed, 3),
            instances_per_s=round(n / elapsed, 1),
            steps_per_s=round(n * args.steps / elapsed, 1),
            latency_ms={
                "p50": percentile(latencies, 50),
                "p99": percentile(latencies, 99),
                "max": max(latencies),
            },
            rpc_total=rpc,
            rpc_per_instance={m: round(v / n, 3) for m, v in rpc.items()},
            worker_rpcs_per_instance=round(worker_rpcs / n, 3),
            driver_list_calls=polls,
            rpc_errors=errors,
            store_transactions=tx,
            store_tx_per_instance=round(tx / n, 3),
            pg_xact_commit=xact,
            pg_xact_per_instance=None if xact is None else round(xact / n, 3),
            cpu_s=cpu,
            cpu_total_s=round(total_cpu, 3),
            cpu_ms_per_instance=round(total_cpu * 1000 / n, 2),
            handler_executions=executed,
            worker_calls=worker_calls,
            handbacks=handbacks,
        )


# ---------------------------------------------------------------------- reporting


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec)


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    env = doc["environment"]
    lines = [
        f"wiggle e2e benchmark: {s['steps']} steps x {s['instances']} instances, {s['workers']} workers x "
        f"{s['concurrency']} concurrency, transport {s['transport']}, {s['handler']} handlers, batch {s['batch_size']}",
        f"store: {env['store']}; hot paths: server {env.get('server_impl')}, workers {env.get('worker_impl')}; "
        f"python {env['python']} on {env['cpus']} CPU(s)",
    ]
    if env.get("postgres_note"):
        lines.append(f"note: {env['postgres_note']}")
    ok = [m for m in doc["modes"] if m.get("ok")]
    bad = [m for m in doc["modes"] if not m.get("ok")]
    pg = any(m.get("pg_xact_commit") is not None for m in ok)
    if ok:
        head = f"{'mode':<12} {'inst/s':>8} {'steps/s':>9} {'drain s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RPC/inst':>9} {'tx/inst':>8}"
        if pg:
            head += f" {'pg xact/inst':>12}"
        head += f" {'CPU s: server':>13} {'workers':>8}"
        if pg:
            head += f" {'pg back':>8} {'pg bg':>6}"
        head += f" {'driver':>7} {'irq':>5} {'other':>6} {'CPU ms/inst':>11}"
        lines += ["", head, "-" * len(head)]
        for m in ok:
            row = (
                f"{m['mode']:<12} {m['instances_per_s']:>8.1f} {m['steps_per_s']:>9.1f} {m['elapsed_s']:>8.2f} "
                f"{m['latency_ms']['p50']:>8.0f} {m['latency_ms']['p99']:>8.0f} {m['worker_rpcs_per_instance']:>9.2f} "
                f"{m['store_tx_per_instance']:>8.2f}"
            )
            if pg:
                row += f" {_fmt(m['pg_xact_per_instance'], '.2f'):>12}"
            c = m["cpu_s"]
            row += f" {_fmt(c.get('server'), '.2f'):>13} {_fmt(c.get('workers'), '.2f'):>8}"
            if pg:
                row += f" {_fmt(c.get('postgres_backends'), '.2f'):>8} {_fmt(c.get('postgres_background'), '.2f'):>6}"
            row += f" {_fmt(c.get('driver'), '.2f'):>7} {_fmt(c.get('irq'), '.2f'):>5} {_fmt(c.get('other'), '.2f'):>6}"
            row += f" {m['cpu_ms_per_instance']:>11.2f}"
            lines.append(row)
        methods = sorted({k for m in ok for k in m["rpc_per_instance"]})
        head = f"{'RPCs per instance':<24}" + "".join(f" {m['mode']:>12}" for m in ok)
        lines += ["", head, "-" * len(head)]
        for method in methods:
            label = method + (" (driver)" if method == "ListInstances" else "")
            lines.append(
                f"{label:<24}" + "".join(f" {m['rpc_per_instance'].get(method, 0):>12.3f}" for m in ok)
            )
        lines.append(
            f"{'handler runs/inst':<24}"
            + "".join(f" {m['handler_executions'] / m['instances']:>12.2f}" for m in ok)
        )
        if any(m["rpc_errors"] for m in ok):
            lines.append(
                "RPC errors: " + "; ".join(f"{m['mode']}: {m['rpc_errors']}" for m in ok if m["rpc_errors"])
            )
        lines.append(
            "latency = created_at -> finished_at of pre-submitted instances (includes the wait in the queue); "
            "RPC/inst excludes the driver's ListInstances polls; CPU ms/inst = server + workers + postgres + driver; "
            "irq = the kernel's interrupt time, other = every other process on the machine, both during the drain"
        )
    busy = [
        f"{m['mode']} {m['cpu_s']['other']:.1f} s"
        for m in ok
        if (m["cpu_s"].get("other") or 0) > 0.05 * m["elapsed_s"]
    ]
    if busy:
        lines.append(
            "warning: other processes used CPU during the drain ("
            + ", ".join(busy)
            + "): the figures are disturbed"
        )
    for m in bad:
        lines += ["", f"{m['mode']}: FAILED - no figures"]
        lines += [f"  - {p}" for p in m.get("problems", [])]
    lines.append("")
    if bad:
        lines.append(
            f"RESULT: WRONG - {len(bad)} of {len(doc['modes'])} mode(s) failed verification or did not finish"
        )
    else:
        lines.append(
            f"RESULT: OK - verified all {s['instances']} instances COMPLETED with the expected context in every mode "
            f"({', '.join(m['mode'] for m in ok)})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- main


async def amain(args: argparse.Namespace) -> int:
    workload = _load_workload()
    log_dir = Path(tempfile.mkdtemp(prefix="wiggle-bench-"))
    env = dict(os.environ, WIGGLE_BENCH_PARENT=str(os.getpid()), PYTHONUNBUFFERED="1")
    if args.impl:
        env["WIGGLE_IMPL"] = args.impl
    for var in (
        "WIGGLE_DATABASE_URL",
        "WIGGLE_DATABASE_SCHEMA",
        "WIGGLE_METRICS_PORT",
        "WIGGLE_PORT",
        "WIGGLE_PROCESSES",
    ):
        env.pop(var, None)  # the benchmark passes these explicitly
    children = Children(log_dir, env)
    progress = Progress(not args.no_progress)
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, lambda: me.cancel() if me else None)
    pg: Postgres | None = None
    doc: dict[str, Any] = {
        "settings": {
            "modes": args.modes,
            "steps": args.steps,
            "instances": args.instances,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "batch_size": args.batch_size,
            "transport": args.transport,
            "handler": args.handler,
            "timeout_s": args.timeout,
            "impl": args.impl or os.environ.get("WIGGLE_IMPL", "auto"),
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "store": "memory",
        },
        "modes": [],
    }
    failed_logs = False
    try:
        if args.database_url:
            try:
                pg = await asyncio.to_thread(Postgres, args.database_url, args.keep)
            except ImportError:
                raise SystemExit(
                    "e2e: --database-url needs psycopg (pip install 'wiggle-workflows[postgres]')"
                ) from None
            except Exception as exc:
                print(f"e2e: cannot use PostgreSQL at {args.database_url}: {exc}", file=sys.stderr)
                return 1
            doc["environment"]["store"] = f"postgresql {pg.version} (database {pg.dbname})"
            doc["environment"]["database"] = pg.dbname
            doc["environment"]["own_database"] = pg.created_db
            if pg.note:
                doc["environment"]["postgres_note"] = pg.note
            if pg.stale:
                print(
                    f"e2e: note: database(s) left by an earlier, killed benchmark run: {', '.join(pg.stale)} "
                    f"(drop with: DROP DATABASE <name>)",
                    file=sys.stderr,
                )
        for mode in args.modes:
            run = ModeRun(args, mode, children, pg, workload, progress)
            if pg is not None:
                doc["environment"].setdefault("schemas", []).append(run.schema)
            try:
                result = await asyncio.wait_for(run.run(), args.timeout + 3 * READY_TIMEOUT)
            except asyncio.TimeoutError:
                result = dict(
                    run.result,
                    ok=False,
                    problems=[f"did not finish within {args.timeout + 3 * READY_TIMEOUT:.0f} s"],
                )
            except BenchError as exc:
                result = dict(run.result, ok=False, problems=[str(exc)])
            finally:
                progress.end()
                children.kill_all()  # whatever is left of this mode
                await children.shutdown(grace=1.0)
                if pg is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(pg.wait_no_backends)
                        await asyncio.to_thread(pg.drop_schema, run.schema)
            if not result.get("ok"):
                failed_logs = True
            doc["modes"].append(result)
            for key in ("server_impl", "worker_impl"):
                if result.get(key):
                    doc["environment"][key] = result[key]
    except asyncio.CancelledError:
        print("\ne2e: interrupted; stopping every subprocess", file=sys.stderr)
        return 130
    finally:
        children.kill_all()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(children.shutdown(grace=1.0), 15)
        if pg is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(pg.close)
        if args.keep or failed_logs:
            print(f"e2e: process logs kept in {log_dir}", file=sys.stderr)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
    doc["ok"] = all(m.get("ok") for m in doc["modes"])
    text = render(doc)
    if args.json:
        print(text, file=sys.stderr)
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(text)
    return 0 if doc["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default sys.argv[1:]); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `wiggle bench -- --steps 5 ...` passes the separator through
        argv = argv[1:]
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad argument (2)
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            return 2
        return int(code or 0)
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        print("\ne2e: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
