"""Processes a test runs as an operator would (`wiggle server`, `wiggle worker`): wait for a line
in a process's log, and stop what is still running at the end (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

__all__ = ["wait_for_text", "stop_all"]


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
