"""The wiggle command, as a user runs it."""

import subprocess
import sys

from ports import free_port


def test_demo_completes_every_instance() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "demo", "--instances", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all instances COMPLETED" in result.stdout
    assert "gated:check_stock" in result.stdout


def test_version_names_the_implementation() -> None:
    result = subprocess.run([sys.executable, "-m", "wiggle.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "hot paths:" in result.stdout


def test_unreachable_server_exits_5() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "--target", "127.0.0.1:1", "get", "wi-x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert "UNAVAILABLE" in result.stderr


def test_demo_with_the_dashboard_shows_the_retried_step_and_its_traceback() -> None:
    import json
    import signal
    import urllib.request

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wiggle.cli", "demo", "--instances", "2", "--dashboard-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("dashboard on "):
                break
        assert lines and lines[-1].startswith(f"dashboard on http://127.0.0.1:{port}/"), lines

        def get(path: str) -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                return dict(json.loads(answer.read()))

        page = get("/api/instances?workflow=demo-orders")
        assert len(page["instances"]) == 2 and page["counts"]["COMPLETED"] == 2
        detail = get(f"/api/instances/{page['instances'][0]['instance_id']}")
        assert detail["node_states"]["charge"] == "done" and detail["node_states"]["ship"] == "done"
        (retry,) = [e for e in detail["history"] if e["node_id"] == "charge" and e["outcome"] == "RETRY"]
        assert "RetryableError: payment gateway timed out" in retry["traceback"]
        assert "in charge" in retry["traceback"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
