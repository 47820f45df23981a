"""``wiggle server`` as an operator runs it: ``--processes N`` with an HTTP port, a group whose
process cannot start, ``migrate --json``, and the warnings of older names in the log's format
(found by an outside operator trial; wiggle/_cli/server.py).

PostgreSQL being unreachable fails the PostgreSQL cases, never skips them (tests/pg.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pg import TEST_DATABASE_URL, temp_schema
from ports import free_port
from processes import children_of, gone

from wiggle._server.config import SETTINGS

WIGGLE = [sys.executable, "-m", "wiggle.cli"]


def _env(**settings: str) -> dict[str, str]:
    """This process's environment minus every WIGGLE_* server setting, plus ``settings``."""
    ours = {var for _, var, _ in SETTINGS}
    env = {k: v for k, v in os.environ.items() if k not in ours and not k.startswith("WIGGLE_")}
    env.update(WIGGLE_HOST="127.0.0.1", PYTHONUNBUFFERED="1", **settings)
    return env


def _ready(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
        return json.loads(answer.read())


def _until_listening(proc: subprocess.Popen[bytes], log: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count("wiggle server listening on") < count:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{count} processes never listened:\n{log.read_text()}"
        time.sleep(0.05)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to ``proc``'s session (it was started with start_new_session): a parent killed
    alone leaves its server processes running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _group(log: Path, schema: str, *flags: str) -> subprocess.Popen[bytes]:
    """``wiggle server --processes 2`` on ``schema`` with ``flags``, logging to ``log``, in a
    session of its own (``_kill_group`` kills its children too, should the test fail)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [*WIGGLE, "server", "--port", str(free_port()), *flags, "--processes", "2"],
            env=_env(WIGGLE_DATABASE_URL=TEST_DATABASE_URL, WIGGLE_DATABASE_SCHEMA=schema),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _http_port_pair() -> int:
    """A port p with p and p + 1 free."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free ports in a row")


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_processes_with_an_http_port_each_serve_http_on_the_port_plus_i(tmp_path: Path) -> None:
    """The second process died at once ("the HTTP port cannot listen ... in use") and the group
    ran on one process unnoticed; after a clean stop the parent exited 4."""
    http = _http_port_pair()
    with temp_schema() as schema:
        log = tmp_path / "server.log"
        parent = _group(log, schema, "--http-port", str(http))
        try:
            _until_listening(parent, log, 2)
            assert _ready(http)["ready"] is True
            assert _ready(http + 1)["ready"] is True
            parent.send_signal(signal.SIGTERM)
            assert parent.wait(30) == 0, log.read_text()
        finally:
            _kill_group(parent)
    text = log.read_text()
    assert f"on http://127.0.0.1:{http}/" in text and f"on http://127.0.0.1:{http + 1}/" in text, text
    assert "cannot listen" not in text and "ended with status" not in text, text


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_process_of_the_group_that_cannot_start_stops_the_group(tmp_path: Path) -> None:
    http = _http_port_pair()
    with temp_schema() as schema, socket.socket() as taken:
        taken.bind(("127.0.0.1", http + 1))  # the second process's HTTP port
        taken.listen()
        parent = subprocess.Popen(
            [*WIGGLE, "server", "--port", str(free_port()), "--http-port", str(http), "--processes", "2"],
            env=_env(WIGGLE_DATABASE_URL=TEST_DATABASE_URL, WIGGLE_DATABASE_SCHEMA=schema),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the group lasted until killed: its children too, then
        )
        try:
            stdout, stderr = parent.communicate(timeout=90)
        finally:
            _kill_group(parent)
    assert parent.returncode == 4, stdout + stderr  # the child's: a port in use
    assert f"the HTTP port cannot listen on 127.0.0.1:{http + 1}" in stderr, stderr
    assert "server process 2 of 2 ended with status 4; stopping the others" in stderr, stderr


@pytest.mark.postgres
def test_migrate_json_prints_json() -> None:
    with temp_schema() as schema:
        done = subprocess.run(
            [*WIGGLE, "--json", "migrate", "--database-url", TEST_DATABASE_URL, "--database-schema", schema],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr
        first = json.loads(done.stdout)
        again = subprocess.run(
            [*WIGGLE, "migrate", "--json", "--database-url", TEST_DATABASE_URL, "--database-schema", schema],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert first["schema"] == schema and first["applied"] > 0 and first["up_to_date"] is True
    assert json.loads(again.stdout) == {"schema": schema, "applied": 0, "up_to_date": True}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reuse-port"], "--reuse-port (WIGGLE_REUSE_PORT) needs a PostgreSQL database (--database-url)"),
        (["--processes", "2"], "--processes > 1 (WIGGLE_PROCESSES) needs a PostgreSQL database"),
        (
            [
                "--database-url",
                "postgresql://nobody@127.0.0.1:1/x",
                "--pool-size",
                "3",
                "--group-commits",
                "4",
            ],
            "--group-commits (4) must be at most --pool-size - 2 (1)",
        ),
        (
            [
                "--database-url",
                "postgresql://nobody@127.0.0.1:1/x",
                "--processes",
                "4",
                "--http-port",
                "65534",
            ],
            "process i serves HTTP on the port + i, past 65535 here",
        ),
    ],
)
def test_settings_that_cannot_work_together_are_refused(args: list[str], message: str) -> None:
    """In-memory servers sharing a port split the workflows and instances between them (a start
    "not registered" every other time); a group-commit count over the pool was clamped silently."""
    done = subprocess.run(
        [*WIGGLE, "server", "--port", str(free_port()), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_older_names_are_warned_of_in_the_logs_format(tmp_path: Path) -> None:
    """With WIGGLE_LOG_FORMAT=json, "WIGGLE_RETENTION is deprecated" and "--metrics-port is
    deprecated" were plain lines on stderr, before logging was set up."""
    log = tmp_path / "server.err"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [*WIGGLE, "server", "--port", str(free_port()), "--metrics-port", str(free_port())],
            env=_env(WIGGLE_LOG_FORMAT="json", WIGGLE_RETENTION="5"),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        assert b"wiggle server listening" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    records = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    warned = {r["message"] for r in records if r["level"] == "WARNING"}
    assert "--metrics-port is deprecated: use --http-port" in warned, warned
    assert "WIGGLE_RETENTION is deprecated: set WIGGLE_RETENTION_SECONDS instead" in warned, warned


@pytest.mark.postgres
@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_parent_killed_outright_takes_its_server_processes_with_it(tmp_path: Path) -> None:
    """SIGKILL to the parent passes nothing on: its processes ran on, re-parented to init, holding
    the gRPC port and the group's leases (wiggle/_cli/parent.py). Now each stops gracefully."""
    with temp_schema() as schema:
        log = tmp_path / "server.log"
        parent = _group(log, schema)
        children: list[int] = []
        try:
            _until_listening(parent, log, 2)
            children = children_of(parent.pid)
            assert len(children) == 2, children
            parent.kill()
            parent.wait(10)
            deadline = time.monotonic() + 30
            while not all(gone(pid) for pid in children):
                assert time.monotonic() < deadline, (
                    f"still running after their parent: {children}\n{log.read_text()}"
                )
                time.sleep(0.1)
        finally:
            for pid in children:  # re-parented to init once the parent is gone: killed by pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _kill_group(parent)
    assert log.read_text().count("stopped in ") == 2, log.read_text()  # each stopped gracefully


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_process_of_the_group_killed_by_a_signal_gives_128_plus_n(tmp_path: Path) -> None:
    """An outside trial: ``kill -9`` of one process logged "ended with status -9" and the parent
    exited 9, which reads as the child's exit(9); the shell's way is 128 + 9."""
    with temp_schema() as schema:
        log = tmp_path / "server.log"
        parent = _group(log, schema)
        try:
            _until_listening(parent, log, 2)
            children = children_of(parent.pid)
            assert len(children) == 2, children
            os.kill(children[1], signal.SIGKILL)
            assert parent.wait(60) == 128 + signal.SIGKILL, log.read_text()
        finally:
            _kill_group(parent)
    text = log.read_text()
    assert "was killed by signal 9 (SIGKILL); stopping the others" in text, text
    assert "status -9" not in text, text
