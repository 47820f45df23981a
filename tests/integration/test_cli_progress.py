"""Progress on `start --wait` and on `start --from-file`: shown on a terminal (a pty here), never
with --json or when stderr is piped."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from wiggle import Workflow
from wiggle.testing import EmbeddedServer


def _parked(ctx: dict) -> dict:
    return ctx


#: its one step is on a queue nobody serves: an instance stays RUNNING at `_parked`
PARKED = Workflow.define("cli-progress-parked").step(_parked, queue="cli-progress-nobody").build()


def _run(argv: list[str], stderr_tty: bool) -> tuple[int, str, str]:
    """Run `wiggle ARGV`; stderr on a pty (a terminal) or a pipe. (exit code, stdout, stderr)."""
    command = [sys.executable, "-m", "wiggle.cli", *argv]
    if not stderr_tty:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:  # drain the terminal while the command runs (a full pty would block it)
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: every writer closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        out, _ = proc.communicate(timeout=120)
    finally:
        reader.join(timeout=30)
        os.close(master)
    return proc.returncode, out, b"".join(chunks).decode()


async def test_wait_shows_the_status_on_a_terminal_only() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(PARKED)
        argv = ["--target", server.target, "start", PARKED.name, "--wait", "--timeout", "1"]

        code, out, err = await asyncio.to_thread(_run, argv, True)
        assert code == 6, out + err
        assert "waiting for wi-" in err and "RUNNING at _parked" in err, err
        assert "\r\x1b[K" in err  # rewritten in place, then cleared
        assert err.rstrip().endswith(
            "still RUNNING after --timeout 1 s: step '_parked' is READY on queue 'cli-progress-nobody', "
            "attempt 1 (is a worker serving queue 'cli-progress-nobody'?)"
        ), err
        assert "status     RUNNING" in out  # the result itself is on stdout, as without a terminal

        code, out, err = await asyncio.to_thread(_run, [*argv, "--json"], True)
        assert code == 6 and "waiting for" not in err and '"status": "RUNNING"' in out, err

        code, out, err = await asyncio.to_thread(_run, argv, False)
        assert code == 6 and "waiting for" not in err
        assert err.strip().splitlines() == [err.strip().splitlines()[0]]  # the one timeout line


async def test_from_file_counts_on_a_terminal_only(tmp_path: Path) -> None:
    contexts = tmp_path / "many.jsonl"
    contexts.write_text("".join(f'{{"n": {i}}}\n' for i in range(2500)))
    async with EmbeddedServer() as server:
        await server.client.register(PARKED)
        argv = ["--target", server.target, "start", PARKED.name, "--from-file", str(contexts)]

        code, out, err = await asyncio.to_thread(_run, argv, True)
        assert code == 0, err
        ids = out.split()
        assert len(ids) == 2500 and len(set(ids)) == 2500
        for seen in ("0/2500 sent", "1000/2500 sent", "2000/2500 sent", "2500/2500 sent"):
            assert f"starting {PARKED.name}: {seen}" in err, err
        assert err.endswith("\r\x1b[K")  # the line is cleared once the ids are in

        code, out, err = await asyncio.to_thread(_run, [*argv, "--json"], True)
        assert code == 0 and "sent" not in err and out.lstrip().startswith("[")

        code, out, err = await asyncio.to_thread(_run, argv, False)
        assert code == 0 and err == "" and len(out.split()) == 2500
