"""`wiggle worker --drain-seconds N`: SIGTERM gives running steps N seconds; a step still running
then is cut, the log says so, the process exits 0 at once (not when the handler's thread returns),
and the step runs again elsewhere once its lease expires. Processes, as an operator runs them."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from ports import free_port
from processes import spawn, stop_all, wait_for_text

from wiggle import Client

FLOWS = textwrap.dedent(
    """
    import pathlib
    import time
    from wiggle import Workflow

    def long(ctx):
        first = pathlib.Path("first-run")
        if not first.exists():  # the first attempt outlasts any drain here
            first.touch()
            time.sleep(60)
        return {**ctx, "done": True}

    flow = Workflow.define("drained").step(long).build()
    """
)


def worker(app: Path, target: str, log: str, *more: str) -> subprocess.Popen[bytes]:
    return spawn(app, log, "--target", target, "worker", "drain_flows:flow", *more)


@pytest.mark.timeout(150)
def test_a_step_outlasting_the_drain_is_cut_and_runs_again_after_its_lease(tmp_path: Path) -> None:
    (tmp_path / "drain_flows.py").write_text(FLOWS)
    port = free_port()
    target = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # leases of 5 s (server_env)
        server = spawn(tmp_path, "server.log", "server", WIGGLE_PORT=str(port), WIGGLE_HTTP_PORT="0")
        procs.append(server)
        wait_for_text(tmp_path / "server.log", "wiggle server listening", server)
        first = worker(tmp_path, target, "first.log", "--drain-seconds", "1")
        procs.append(first)
        with Client(target) as client:
            wait_for_text(tmp_path / "first.log", "serving drained", first)
            deadline = time.monotonic() + 60
            instance_id = client.start("drained", {}).instance_id
            while not (tmp_path / "first-run").exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            signalled = time.monotonic()
            first.send_signal(signal.SIGTERM)
            assert first.wait(30) == 0, (tmp_path / "first.log").read_text()
            took = time.monotonic() - signalled
            log = (tmp_path / "first.log").read_text()
            assert took < 15, f"exited {took:.1f} s after SIGTERM: {log}"  # not the handler's 60 s
            assert "1 step(s) still running after the 1 s drain were cut" in log and "Traceback" not in log, (
                log
            )
            procs.append(worker(tmp_path, target, "second.log"))
            info = client.wait(instance_id, timeout=60)
            assert info.status == "COMPLETED" and info.context == {"done": True}, info
            attempts = [(h.attempt, h.outcome) for h in client.history(instance_id) if h.kind == "TASK"]
        assert attempts[-1] == (2, "COMPLETED") and len(attempts) == 2, attempts
    finally:
        stop_all(*procs)


@pytest.mark.timeout(120)
def test_a_second_sigterm_cuts_the_drain_short(tmp_path: Path) -> None:
    # Ctrl-C twice: the first drains (30 s by default), the second cuts what still runs at once
    (tmp_path / "drain_flows.py").write_text(FLOWS)
    port = free_port()
    target = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        server = spawn(tmp_path, "server.log", "server", WIGGLE_PORT=str(port), WIGGLE_HTTP_PORT="0")
        procs.append(server)
        wait_for_text(tmp_path / "server.log", "wiggle server listening", server)
        first = worker(tmp_path, target, "first.log")
        procs.append(first)
        with Client(target) as client:
            wait_for_text(tmp_path / "first.log", "serving drained", first)
            client.start("drained", {})
            deadline = time.monotonic() + 60
            while not (tmp_path / "first-run").exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            first.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert first.poll() is None, "the first signal drains: the step still runs"
            signalled = time.monotonic()
            first.send_signal(signal.SIGTERM)
            assert first.wait(30) == 0, (tmp_path / "first.log").read_text()
            took = time.monotonic() - signalled
        log = (tmp_path / "first.log").read_text()
        assert took < 10, f"exited {took:.1f} s after the second SIGTERM: {log}"
        assert (
            "a second stop signal" in log
            and "1 step(s) still running at a second stop signal were cut" in log
        ), log
    finally:
        stop_all(*procs)
