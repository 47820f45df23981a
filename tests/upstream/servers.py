"""The server processes and the script runner of the upstream tests (tests/upstream/)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCENARIOS = Path(__file__).parent / "scenarios"
LISTENING = re.compile(r"wiggle server listening on ([\d.]+):(\d+)")
_script = Path(sys.executable).with_name("wiggle")
WIGGLE = [str(_script)] if _script.exists() else [sys.executable, "-m", "wiggle.cli"]


class ServerProcess:
    """A ``wiggle server`` on a free port, its output in a log file."""

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*WIGGLE, "server", "--port", "0"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while True:
            match = LISTENING.search(self.text())
            if match:
                self.target = f"127.0.0.1:{match.group(2)}"
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"wiggle server did not start:\n{self.text()}")
            time.sleep(0.05)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def server_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    env.update(WIGGLE_HOST="127.0.0.1", PYTHONUNBUFFERED="1", WIGGLE_LEASE_MILLIS="5000")
    env.update(settings)
    return env


def run_upstream(python: str, script: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """Run a scenario script with the upstream client's python; its JSON output."""
    result = subprocess.run(
        [python, str(SCENARIOS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=SCENARIOS,  # never the repository root: `import wiggle` must find upstream's package
    )
    assert result.returncode == 0, f"{script} failed:\n{result.stdout}\n{result.stderr}"
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))
