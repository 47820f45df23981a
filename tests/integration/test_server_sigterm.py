"""A rolling restart as an operator does it (docs/operations.md#stopping-a-server): `wiggle server`
on PostgreSQL with a `wiggle worker` attached and a step running, SIGTERM to the server, the
server started again on its port. The stop does not wait out its grace, the step's report lands
on the new server, and the instance finishes with one attempt per step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL
from ports import free_port
from processes import stop_all
from upstream.servers import LISTENING, WIGGLE, server_env

from wiggle import Client

FLOWS = textwrap.dedent(
    """
    import pathlib
    import time
    from wiggle import Workflow

    def nap(ctx):
        pathlib.Path("napping").touch()  # the handler runs
        while not pathlib.Path("wake").exists():
            time.sleep(0.02)
        return {**ctx, "napped": True}

    def after(ctx):
        return {**ctx, "after": True}

    rolling = Workflow.define("rolling-cli").step(nap).step(after).build()
    """
)


def spawn_server(app: Path, port: int, schema: str, log_name: str) -> subprocess.Popen[bytes]:
    env = server_env(
        WIGGLE_DATABASE_URL=TEST_DATABASE_URL,
        WIGGLE_DATABASE_SCHEMA=schema,
        WIGGLE_PORT=str(port),
        WIGGLE_STOP_GRACE_SECONDS="60",  # the step runs on: only a stop that lets go ends in time
    )
    with open(app / log_name, "wb") as out:
        proc = subprocess.Popen([*WIGGLE, "server"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=app)
    deadline = time.monotonic() + 60
    while not LISTENING.search((app / log_name).read_text(errors="replace")):
        assert proc.poll() is None and time.monotonic() < deadline, (app / log_name).read_text()
        time.sleep(0.05)
    return proc


@pytest.mark.timeout(150)
def test_sigterm_with_a_step_running_stops_at_once_and_the_restart_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    (tmp_path / "rolling_flows.py").write_text(FLOWS)
    monkeypatch.chdir(tmp_path)
    port = free_port()
    target = f"127.0.0.1:{port}"
    server = spawn_server(tmp_path, port, pg_schema, "server-1.log")
    restarted: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    try:
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [*WIGGLE, "--target", target, "worker", "rolling_flows:rolling"],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(tmp_path), "WIGGLE_WORKER_POLL_WAIT_SECONDS": "30"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with Client(target) as client:
            sys.path.insert(0, str(tmp_path))
            try:
                import rolling_flows
            finally:
                sys.path.remove(str(tmp_path))
            client.register(rolling_flows.rolling)
            instance_id = client.start("rolling-cli", {}).instance_id
            deadline = time.monotonic() + 60
            while not (tmp_path / "napping").exists():
                assert worker.poll() is None and time.monotonic() < deadline, "the worker never ran the step"
                time.sleep(0.02)
            signalled = time.monotonic()
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0, (tmp_path / "server-1.log").read_text()
            print(f"wiggle server exited {time.monotonic() - signalled:.2f} s after SIGTERM")
            assert "stopped in" in (tmp_path / "server-1.log").read_text()
            restarted = spawn_server(tmp_path, port, pg_schema, "server-2.log")
            (tmp_path / "wake").touch()
            info = client.wait(instance_id, timeout=60)
            assert info.status == "COMPLETED", (info, (tmp_path / "worker.log").read_text())
            assert info.context == {"napped": True, "after": True}
            history = client.history(instance_id)
        assert [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"] == [
            ("nap", "COMPLETED", 1),
            ("after", "COMPLETED", 1),
        ], history
        assert not [h for h in history if "lease" in h.error], history
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()  # it rode through the restart
    finally:
        stop_all(worker, server, restarted)
        sys.modules.pop("rolling_flows", None)
