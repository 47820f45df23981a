"""The CLI's exit codes follow the ErrorCode of the error (README: 2 bad input, 3 not found, 5 unreachable)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

from wiggle import Workflow, cli
from wiggle.errors import ErrorCode
from wiggle.testing import EmbeddedServer


def test_exit_codes_are_keyed_by_error_code() -> None:
    assert cli.EXIT_CODES == {
        ErrorCode.INVALID_ARGUMENT: 2,
        ErrorCode.NOT_FOUND: 3,
        ErrorCode.FAILED_PRECONDITION: 4,
        ErrorCode.UNAVAILABLE: 5,
        ErrorCode.DEADLINE_EXCEEDED: 5,
    }


async def test_exit_codes_from_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    async with EmbeddedServer() as server:
        # the blocking client runs in a thread so the server's loop keeps serving
        missing = await asyncio.to_thread(
            cli.main, ["--target", server.target, "get", "wi-000000000000000000000000"]
        )
        assert missing == 3
        assert "NOT_FOUND" in capsys.readouterr().err
        empty = await asyncio.to_thread(cli.main, ["--target", server.target, "get", ""])
        assert empty == 2
        assert "INVALID_ARGUMENT" in capsys.readouterr().err


def test_unreachable_server_exits_5(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # a port nobody listens on
    assert cli.main(["--target", f"127.0.0.1:{port}", "get", "wi-000000000000000000000000"]) == 5
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_a_context_file_that_cannot_be_read_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-context.json"
    # refused before any call: the target is never dialled
    assert cli.main(["--target", "127.0.0.1:1", "start", "orders", "--context", f"@{missing}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "INVALID_ARGUMENT" in err and str(missing) in err


def _parked_step(ctx: dict) -> dict:
    return ctx


PARKED = Workflow.define("cli-exit-parked").step(_parked_step, queue="nobody-serves-this").build()


def _one_line(err: str) -> str:
    # gRPC core's own log lines ("E1202 08:12:21.390978 ... add_port.cc:83] ...") are not ours
    lines = [line for line in err.strip().splitlines() if not re.match(r"[EWI]\d{4} \d\d:", line)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


async def test_the_documented_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad_lines = tmp_path / "bad.jsonl"
    bad_lines.write_text('{"n": 1}\n[2]\n')
    async with EmbeddedServer() as server:
        await server.client.register(PARKED)
        target = ["--target", server.target]

        async def wiggle(*argv: str) -> tuple[int, str]:
            code = await asyncio.to_thread(cli.main, [*target, *argv])
            return code, capsys.readouterr().err

        code, err = await wiggle("start", PARKED.name, "--from-file", str(tmp_path / "missing.jsonl"))
        assert code == 2 and "missing.jsonl" in _one_line(err)
        code, err = await wiggle("start", PARKED.name, "--from-file", str(bad_lines))
        assert code == 2 and "line 2 must be a JSON object" in _one_line(err)
        # --wait that times out: 6, and says so
        code, err = await wiggle("start", PARKED.name, "--wait", "--timeout", "0.3", "--json")
        assert code == 6 and "still RUNNING after --timeout 0.3 s" in _one_line(err)
        (running,), _ = await server.client.list(workflow=PARKED.name)
        code, err = await wiggle("cancel", running.instance_id)
        assert code == 0, err
        code, _ = await wiggle("cancel", running.instance_id)  # already CANCELLED: refused by its state
        assert code == 4


def test_an_unreachable_server_says_where_it_looked(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # a port nobody listens on
    assert cli.main(["--target", f"127.0.0.1:{port}", "get", "wi-000000000000000000000000"]) == 5
    line = _one_line(capsys.readouterr().err)
    assert f"wiggle server` running at 127.0.0.1:{port}" in line and "--target" in line


def test_a_server_on_a_port_in_use_is_one_line_and_exit_4() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "wiggle.cli", "server", "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 4, done.stderr
    line = _one_line(done.stderr)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line
