"""Logging settings end to end: WIGGLE_LOG_FORMAT=json from a real worker process and a real
server process; WIGGLE_LOG_LEVEL; bad values refused; payloads never logged."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wiggle import ExecutionMode
from wiggle._env import EnvError
from wiggle._logging import JsonFormatter, configure_logging, log_settings, step_fields
from wiggle.testing import EmbeddedServer

WORKERS = Path(__file__).resolve().parent / "workers"
SECRET = "4111-1111-1111-1111"  # in the context: must never appear in a log line


@pytest.mark.parametrize("mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_ASYNC], ids=lambda m: m.value)
async def test_a_worker_logs_json_lines_with_the_step_fields_and_no_payload(mode: ExecutionMode) -> None:
    async with EmbeddedServer() as server:
        env = dict(os.environ, WIGGLE_LOG_FORMAT="json", WIGGLE_LOG_LEVEL="info")
        worker = subprocess.Popen(
            [sys.executable, str(WORKERS / "log_worker.py"), server.target, mode.value],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            info = None
            for _ in range(200):  # the worker registers its workflow when it starts
                try:
                    info = await server.client.start("log-flow", {"card": SECRET})
                    break
                except Exception:
                    if worker.poll() is not None:
                        break
                    await asyncio.sleep(0.1)
            assert info is not None, "the worker never registered log-flow"
            done = await server.client.wait(info.instance_id, timeout=30)
            assert done.status == "FAILED"
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = await asyncio.to_thread(worker.communicate, timeout=30)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert SECRET not in err and SECRET not in out
    failures = [r for r in records if r["logger"] == "wiggle.worker" and "failed" in r["message"]]
    assert [(r["attempt"], r["level"]) for r in failures] == [(1, "WARNING"), (2, "WARNING")]
    for r in failures:
        assert r["instance_id"] == info.instance_id and r["node_id"] == "charge"
        assert r["worker_id"] == "log-worker-1" and r["workflow"] == "log-flow"
        assert "Traceback (most recent call last)" in r["message"] and "in charge" in r["message"]
    own = [r for r in records if r["logger"] == "shop"]
    assert len(own) == 1 and own[0]["message"] == "greeting a customer"
    assert own[0]["instance_id"] == info.instance_id and own[0]["node_id"] == "greet"
    assert own[0]["attempt"] == 1 and own[0]["worker_id"] == "log-worker-1"
    # INFO is on: the worker's start line is there, as JSON, without step fields
    assert any(r["logger"] == "wiggle.worker" and "serving" in r["message"] for r in records)


def test_the_server_process_logs_json_and_refuses_a_bad_level(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "wiggle.cli", "server", "--port", "0"]
    bad = subprocess.run(
        base, env=dict(os.environ, WIGGLE_LOG_LEVEL="loud"), capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert "WIGGLE_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD'" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad_format = subprocess.run(
        base, env=dict(os.environ, WIGGLE_LOG_FORMAT="xml"), capture_output=True, text=True, timeout=60
    )
    assert (
        bad_format.returncode == 2
        and "WIGGLE_LOG_FORMAT must be 'text' or 'json', got 'xml'" in bad_format.stderr
    )

    proc = subprocess.Popen(
        base,
        env=dict(os.environ, WIGGLE_LOG_FORMAT="json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    records = [json.loads(ln) for ln in err.splitlines() if ln.strip()]
    assert records and all(r["logger"].startswith("wiggle") for r in records)
    assert any(r["level"] == "INFO" and "wiggle server on" in r["message"] for r in records)
    assert any(r["level"] == "INFO" and "stopping" in r["message"] for r in records)


def test_settings_levels_and_the_json_fields() -> None:
    assert log_settings({}) == (logging.INFO, "text")
    assert log_settings({"WIGGLE_LOG_LEVEL": " debug ", "WIGGLE_LOG_FORMAT": "JSON"}) == (
        logging.DEBUG,
        "json",
    )
    with pytest.raises(EnvError, match="WIGGLE_LOG_LEVEL"):
        log_settings({"WIGGLE_LOG_LEVEL": "7"})
    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        assert configure_logging({"WIGGLE_LOG_FORMAT": "json", "WIGGLE_LOG_LEVEL": "WARNING"}, stream)
        # a second call replaces Wiggle's handler instead of adding one
        assert configure_logging({"WIGGLE_LOG_FORMAT": "json", "WIGGLE_LOG_LEVEL": "WARNING"}, stream)
        logging.getLogger("x").info("not shown")
        with step_fields({"instance_id": "wi-1", "node_id": "a", "attempt": 2}):
            logging.getLogger("x").warning("inside %s", "a step")
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("x").error("with extra", exc_info=True, extra={"worker_id": "w-9"})
    finally:
        for h in list(root.handlers):
            if h not in before[0]:
                root.removeHandler(h)
        root.setLevel(before[1])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(ln) for ln in lines)
    assert first["message"] == "inside a step" and first["level"] == "WARNING"
    assert (first["instance_id"], first["node_id"], first["attempt"]) == ("wi-1", "a", 2)
    assert second["worker_id"] == "w-9" and "instance_id" not in second
    assert second["exception"].endswith("ValueError: bad")
    assert isinstance(JsonFormatter().format(logging.makeLogRecord({"msg": "m"})), str)
