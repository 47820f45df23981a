"""The wiggle command, as a user runs it."""

import subprocess
import sys


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
