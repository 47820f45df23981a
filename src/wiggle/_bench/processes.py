"""Process supervision: the benchmark's subprocesses (server, workers), their logs and CPU time.

Every child speaks JSON lines on stdout (src/wiggle/_bench/worker.py is the other side); its
stderr goes to a log file whose tail is quoted when it dies. ``Children.shutdown`` and
``kill_all`` leave no process behind, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .errors import BenchError

__all__ = [
    "READY_TIMEOUT",
    "STOP_GRACE",
    "Child",
    "ChildDied",
    "Children",
    "machine_busy",
    "proc_cpu",
    "thread_cpu",
    "self_cpu",
]

WORKER_SCRIPT = Path(__file__).resolve().parent / "worker.py"
READY_TIMEOUT = 60.0
STOP_GRACE = 15.0
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (all its threads), or None if it is gone/unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu(pid: int) -> float | None:
    """CPU seconds of the single-threaded process ``pid`` to the nanosecond (the scheduler's
    ``sum_exec_runtime``, the first field of ``/proc/PID/schedstat``), or None if it is gone.

    For PostgreSQL's backends (pgstats.py): ``proc_cpu`` counts in clock ticks (10 ms) and each
    process's figure is rounded down, so a run over 64 fresh backends that each use a few
    milliseconds read 0 s before and after, and their whole CPU fell into "other" (bench/README.md,
    "Round twenty-four"). A multi-threaded process needs ``proc_cpu``: this counts its first
    thread only. Where schedstat is missing (a kernel without it), ``proc_cpu``."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return proc_cpu(pid)
    except OSError:
        return None
    return int(data.split()[0]) / 1e9


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
        self._log: IO[bytes] | None = None

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

    def died(self, what: str) -> ChildDied:
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
                raise self.died(what)
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
