"""After SIGTERM a server logged "stopped in 0.01 s" and, by an outside trial's measure, ended
1.7 s later. The measure was ``kill -0`` on a server started in the background of a subshell:
it had exited within 0.1 s and stayed a zombie until init reaped it (docs/operations.md, "Stopping
a server"). What would keep the process after its last line is a thread Python waits for at
exit: this holds that none is left once ``wiggle server`` returns, with its HTTP port (the
dashboard's own event loop thread) and on PostgreSQL (the pool's workers), no timing asserted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL, temp_schema
from ports import free_port

#: Runs ``wiggle server ARGS``; after it returns, prints the threads Python's exit would wait for.
SCRIPT = """
import sys, threading
from wiggle import cli
code = cli.main(sys.argv[1:])
left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
print("threads left:", left, flush=True)
sys.exit(code)
"""


def _stop_and_read(args: list[str], env: dict[str, str], log: Path) -> str:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "wiggle server listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return log.read_text()


@pytest.mark.parametrize("store", ["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_nothing_is_left_to_wait_for_after_the_server_stops(store: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    args = ["server", "--host", "127.0.0.1", "--port", str(free_port()), "--http-port", str(free_port())]
    if store == "memory":
        text = _stop_and_read(args, env, tmp_path / "server.log")
    else:
        with temp_schema() as schema:
            args += ["--database-url", TEST_DATABASE_URL, "--database-schema", schema]
            text = _stop_and_read(args, env, tmp_path / "server.log")
    assert "stopped in" in text and "threads left: []" in text, text
    assert text.index("stopped in") < text.index("threads left: []"), text
