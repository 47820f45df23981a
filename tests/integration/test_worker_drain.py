"""`wiggle worker --drain-seconds N`: SIGTERM gives running steps N seconds; a step still running
then is cut, the log says so, the process exits 0 at once (not when the handler's thread returns),
and the step runs again elsewhere once its lease expires. Processes, as an operator runs them."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

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


class Running(NamedTuple):
    target: str
    worker: subprocess.Popen[bytes]
    instance_id: str
    procs: list[subprocess.Popen[bytes]]


@contextmanager
def a_long_step_running(app: Path, *flags: str) -> Iterator[tuple[Running, Client]]:
    """A `wiggle server` (leases of 5 s: server_env), a `wiggle worker` with ``flags`` (its log:
    first.log) and an instance whose first attempt runs on that worker; every process stopped at
    the end, those added to ``procs`` too."""
    (app / "drain_flows.py").write_text(FLOWS)
    port = free_port()
    target = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        server = spawn(app, "server.log", "server", WIGGLE_PORT=str(port), WIGGLE_HTTP_PORT="0")
        procs.append(server)
        wait_for_text(app / "server.log", "wiggle server listening", server)
        first = worker(app, target, "first.log", *flags)
        procs.append(first)
        with Client(target) as client:
            wait_for_text(app / "first.log", "serving drained", first)
            instance_id = client.start("drained", {}).instance_id
            deadline = time.monotonic() + 60
            while not (app / "first-run").exists():
                assert time.monotonic() < deadline, (app / "first.log").read_text()
                time.sleep(0.05)
            yield Running(target, first, instance_id, procs), client
    finally:
        stop_all(*procs)


@pytest.mark.timeout(150)
def test_a_step_outlasting_the_drain_is_cut_and_handed_back(tmp_path: Path) -> None:
    with a_long_step_running(tmp_path, "--drain-seconds", "1") as (running, client):
        signalled = time.monotonic()
        running.worker.send_signal(signal.SIGTERM)
        assert running.worker.wait(30) == 0, (tmp_path / "first.log").read_text()
        took = time.monotonic() - signalled
        log = (tmp_path / "first.log").read_text()
        assert took < 15, f"exited {took:.1f} s after SIGTERM: {log}"  # not the handler's 60 s
        assert "1 step(s) still running after the 1 s drain were cut" in log and "Traceback" not in log, log
        running.procs.append(worker(tmp_path, running.target, "second.log"))
        info = client.wait(running.instance_id, timeout=60)
        assert info.status == "COMPLETED" and info.context == {"done": True}, info
        history = client.history(running.instance_id)
        attempts = [(h.attempt, h.outcome) for h in history if h.kind == "TASK"]
    # handed back READY, attempt unspent: the next worker ran it at once, not after the lease
    assert attempts == [(1, "RELEASED"), (1, "COMPLETED")], history
    (cut,) = [h for h in history if h.outcome == "RELEASED"]  # the cut run's own entry
    assert cut.error.startswith("cut by the drain of worker"), cut
    assert not [h for h in history if "lease expired" in h.error], history


@pytest.mark.timeout(120)
def test_a_second_sigterm_cuts_the_drain_short(tmp_path: Path) -> None:
    # Ctrl-C twice: the first drains (30 s by default), the second cuts what still runs at once
    with a_long_step_running(tmp_path) as (running, _client):
        running.worker.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert running.worker.poll() is None, "the first signal drains: the step still runs"
        signalled = time.monotonic()
        running.worker.send_signal(signal.SIGTERM)
        assert running.worker.wait(30) == 0, (tmp_path / "first.log").read_text()
        took = time.monotonic() - signalled
    log = (tmp_path / "first.log").read_text()
    assert took < 10, f"exited {took:.1f} s after the second SIGTERM: {log}"
    assert (
        "a second stop signal" in log and "1 step(s) still running at a second stop signal were cut" in log
    ), log
    # the first signal says what it waits for, and how to cut it short
    assert (
        "stopping: 1 step(s) running get up to 30 s to finish" in log
        and "a second stop signal cuts them" in log
    ), log


HUNG_FLOWS = textwrap.dedent(
    """
    import pathlib
    import time
    from wiggle import RetryPolicy, Workflow

    def hang(ctx):
        first = pathlib.Path("first-run")
        if not first.exists():  # past its 1 s limit: abandoned in its thread, which sleeps on
            first.touch()
            time.sleep(3600)
        return {**ctx, "done": True}

    flow = Workflow.define("hung").step(hang, timeout=1, retry=RetryPolicy.fixed(3, 0.1)).build()
    """
)


@pytest.mark.timeout(120)
def test_a_thread_abandoned_at_a_time_limit_does_not_hold_the_exit(tmp_path: Path) -> None:
    # the step timed out and ran again (completed); its first attempt's thread still sleeps, and
    # Python would wait an hour for it at exit
    (tmp_path / "hung_flows.py").write_text(HUNG_FLOWS)
    port = free_port()
    target = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        server = spawn(tmp_path, "server.log", "server", WIGGLE_PORT=str(port), WIGGLE_HTTP_PORT="0")
        procs.append(server)
        wait_for_text(tmp_path / "server.log", "wiggle server listening", server)
        hung = spawn(tmp_path, "worker.log", "--target", target, "worker", "hung_flows:flow")
        procs.append(hung)
        with Client(target) as client:
            wait_for_text(tmp_path / "worker.log", "serving hung", hung)
            info = client.result(client.start("hung", {}).instance_id, timeout=60)
            assert info.context == {"done": True}
        signalled = time.monotonic()
        hung.send_signal(signal.SIGTERM)
        assert hung.wait(30) == 0, (tmp_path / "worker.log").read_text()
        took = time.monotonic() - signalled
    finally:
        stop_all(*procs)
    log = (tmp_path / "worker.log").read_text()
    assert took < 15, f"exited {took:.1f} s after SIGTERM: {log}"
    assert "1 handler thread(s) abandoned at a time limit still run: exiting without them" in log, log
