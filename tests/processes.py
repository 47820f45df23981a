"""Processes a test runs as an operator would (`wiggle server`, `wiggle worker`): wait for a line
in a process's log, and stop what is still running at the end (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from upstream.servers import WIGGLE, server_env

__all__ = ["children_of", "gone", "wait_for_text", "stop_all", "spawn"]


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc: Linux)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def wait_for_text(path: Path, text: str, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    """Until ``text`` is in the log at ``path``; fails if ``proc`` exits or ``seconds`` pass first."""
    deadline = time.monotonic() + seconds
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, path.read_text(errors="replace")
        time.sleep(0.05)


def stop_all(*procs: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM each process still running, SIGKILL one that has not exited 30 s later."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def spawn(app: Path, log: str, *argv: str, **env: str) -> subprocess.Popen[bytes]:
    """``wiggle ARGV`` run in ``app`` (importable there: PYTHONPATH), its output in ``app / log``;
    the environment is this one's without WIGGLE_* variables, then server_env's and ``env``."""
    with open(app / log, "wb") as out:
        return subprocess.Popen(
            [*WIGGLE, *argv],
            cwd=app,
            env=server_env(PYTHONPATH=str(app), **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
