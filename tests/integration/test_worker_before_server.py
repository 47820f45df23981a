"""A `wiggle worker` started before its server (docs/deployment.md: servers and workers start in
any order) says so once, asks again every second, and serves once the server is there; SIGTERM
while it waits stops it at once with exit 0; after `--connect-seconds` with no server it exits
with the reason. Run as an operator does, each a process of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from ports import free_port
from processes import spawn, stop_all, wait_for_text
from upstream.servers import WIGGLE

from wiggle import Client

FLOWS = textwrap.dedent(
    """
    from wiggle import Workflow

    def one(ctx):
        return {**ctx, "one": True}

    def two(ctx):
        return {**ctx, "two": True}

    early = Workflow.define("early-worker").step(one).step(two).build()
    """
)

WAITING = "no server answers at"


def spawn_worker(app: Path, target: str, *more: str) -> subprocess.Popen[bytes]:
    return spawn(app, "worker.log", "--target", target, "worker", "early_flows:early", *more)


@pytest.mark.timeout(150)
def test_a_worker_started_before_its_server_serves_once_the_server_is_there(tmp_path: Path) -> None:
    (tmp_path / "early_flows.py").write_text(FLOWS)
    port = free_port()
    target = f"127.0.0.1:{port}"
    worker = spawn_worker(tmp_path, target)
    server: subprocess.Popen[bytes] | None = None
    try:
        wait_for_text(tmp_path / "worker.log", WAITING, worker)
        time.sleep(1.5)  # a while without a server: the worker goes on asking
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        server = spawn(tmp_path, "server.log", "server", WIGGLE_PORT=str(port), WIGGLE_HTTP_PORT="0")
        wait_for_text(tmp_path / "server.log", "wiggle server listening", server)
        wait_for_text(tmp_path / "worker.log", "serving early-worker", worker)
        log = (tmp_path / "worker.log").read_text()
        assert log.count(WAITING) == 1 and "answered after" in log, log
        with Client(target) as client:  # the worker registered the workflow: start it by name
            info = client.result(client.start("early-worker", {}).instance_id, timeout=60)
            assert info.context == {"one": True, "two": True}
            history = client.history(info.instance_id)
        assert [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"] == [
            ("one", "COMPLETED", 1),
            ("two", "COMPLETED", 1),
        ], history
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        stop_all(worker, server)


@pytest.mark.timeout(120)
def test_sigterm_while_the_worker_waits_for_its_server_stops_it_at_once(tmp_path: Path) -> None:
    (tmp_path / "early_flows.py").write_text(FLOWS)
    worker = spawn_worker(tmp_path, f"127.0.0.1:{free_port()}")  # a closed local port
    try:
        wait_for_text(tmp_path / "worker.log", WAITING, worker)
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
        assert time.monotonic() - signalled < 10
        log = (tmp_path / "worker.log").read_text()
        assert "stopped before its server answered" in log and "Traceback" not in log, log
    finally:
        stop_all(worker)


@pytest.mark.timeout(120)
def test_a_worker_gives_up_after_connect_seconds_naming_the_target_and_the_setting(tmp_path: Path) -> None:
    (tmp_path / "early_flows.py").write_text(FLOWS)
    target = f"127.0.0.1:{free_port()}"  # a closed local port
    began = time.monotonic()
    worker = spawn_worker(tmp_path, target, "--connect-seconds", "2")
    try:
        code = worker.wait(60)
        log = (tmp_path / "worker.log").read_text()
        assert code != 0, log
        assert f"no server answered at {target} within 2 s" in log and "connect_seconds" in log, log
        assert time.monotonic() - began < 15, log
        assert "Traceback" not in log, log
    finally:
        stop_all(worker)


def test_connect_seconds_is_checked_before_the_worker_starts(tmp_path: Path) -> None:
    (tmp_path / "early_flows.py").write_text(FLOWS)
    proc = subprocess.run(
        [
            *WIGGLE,
            "--target",
            f"127.0.0.1:{free_port()}",
            "worker",
            "early_flows:early",
            "--connect-seconds",
            "-1",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "connect_seconds must be >= 0" in proc.stderr, proc.stderr
