"""The CLI's exit codes follow the ErrorCode of the error (README: 2 bad input, 3 not found, 5 unreachable)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from wiggle import cli
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
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
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
