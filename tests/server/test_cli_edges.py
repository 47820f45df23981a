"""The CLI without rough edges: global options after the subcommand, a closed pipe, exit 2 on bad
input, table headers, the workflows / describe verbs, doctor, server flags validated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from pg import TEST_DATABASE_URL

from wiggle import Workflow, cli
from wiggle.testing import EmbeddedServer


def bump(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx.get("n", 0) + 1}


def is_big(ctx: dict[str, Any]) -> bool:
    return ctx.get("n", 0) > 10


FLOW = Workflow.define("cli-edges").step(bump).gate(is_big).step(bump, name="big").build()


async def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wiggle.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


async def test_global_options_after_the_subcommand_and_headers() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(FLOW)
        for _ in range(3):
            await server.client.start(FLOW, {"n": 1})
        before = await run("--target", server.target, "--json", "list")
        after = await run("list", "--target", server.target, "--json")
        assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
        assert len(json.loads(after.stdout)["instances"]) == 3
        assert json.loads(before.stdout).keys() == json.loads(after.stdout).keys()
        table = await run("list", "--target", server.target)
        header, *rows = table.stdout.splitlines()
        assert header.split() == ["INSTANCE", "WORKFLOW", "STATUS", "CREATED", "CORRELATION"]
        assert len(rows) == 3 and all("cli-edges" in r for r in rows)

        flows = await run("workflows", "--target", server.target)
        assert flows.returncode == 0, flows.stderr
        header, row = flows.stdout.splitlines()
        assert header.split() == ["NAME", "VERSION", "MODE", "NODES", "REGISTERED"]
        assert row.split()[:4] == ["cli-edges", FLOW.version, "DEFAULT", str(len(FLOW.definition.nodes))]
        as_json = json.loads((await run("workflows", "--json", "--target", server.target)).stdout)
        assert [w["version"] for w in as_json] == [FLOW.version]

        described = await run("describe", "cli-edges", "--target", server.target)
        assert described.returncode == 0, described.stderr
        text = described.stdout
        assert f"workflow   cli-edges (version {FLOW.version})" in text
        lines = {ln.split()[1] if ln.startswith(">") else ln.split()[0]: ln for ln in text.splitlines()[3:]}
        assert lines["bump"].startswith("> bump") and "TASK" in lines["bump"]
        assert "true -> big, false -> " in lines["is_big"] and "PREDICATE" in lines["is_big"]
        assert any("END" in ln and "ends the instance COMPLETED" in ln for ln in lines.values())
        missing = await run("describe", "nope", "--target", server.target)
        assert missing.returncode == 3 and "NOT_FOUND" in missing.stderr


async def test_a_closed_pipe_is_not_a_traceback() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(FLOW)
        for _ in range(200):
            await server.client.start(FLOW, {})

        def piped() -> tuple[int, str, int]:
            cmd = f"{sys.executable} -m wiggle.cli --target {server.target} list --page-size 200 | head -1"
            proc = subprocess.run(
                [
                    "bash",
                    "-c",
                    f"set -o pipefail; {cmd} 2>/tmp/wiggle-pipe-$$.err; echo $? >&2; cat /tmp/wiggle-pipe-$$.err >&2; rm -f /tmp/wiggle-pipe-$$.err",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            code, _, err = proc.stderr.partition("\n")
            return int(code), err, len(proc.stdout.splitlines())

        code, err, lines = await asyncio.to_thread(piped)
    assert lines == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code in (0, 141)  # 141: like a process SIGPIPE ended; 0 if the output fit the pipe


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["start", "wf", "--context", "{nope"], "--context is not valid JSON"),
        (["complete-task", "wi-1", "t", "--data", "[1,"], "--data is not valid JSON"),
        (["demo", "--mode", "fast"], "invalid choice: 'FAST'"),
        (["server", "--lease-millis", "-5"], "--lease-millis (WIGGLE_LEASE_MILLIS) must be between 100 and"),
        (
            ["server", "--max-payload-bytes", "0"],
            "--max-payload-bytes (WIGGLE_MAX_PAYLOAD_BYTES) must be between 1024",
        ),
        (["server", "--port", "70000"], "--port (WIGGLE_PORT) must be between 0 and 65535, got 70000"),
        (["server", "--pool-size", "zero"], "--pool-size (WIGGLE_POOL_SIZE) must be an integer, got 'zero'"),
        (["server", "--processes", "2"], "--processes > 1 (WIGGLE_PROCESSES) needs a PostgreSQL database"),
        (["migrate"], "migrate needs --database-url"),
        (["list", "--page-size", "x"], "invalid int value: 'x'"),
        # 0 was taken and meant the server's default page, while 1001 was refused
        (["list", "--page-size", "0"], "--page-size: must be from 1 to 1000 instances per page"),
        (["list", "--page-size", "1001"], "--page-size: must be from 1 to 1000 instances per page"),
        # refused before anything is started (it used to wait no time and exit 6)
        (
            ["start", "wf", "--wait", "--timeout", "-5"],
            "--timeout: must be a finite number of seconds, 0 or more",
        ),
        (["start", "wf", "--wait", "--timeout=nan"], "--timeout: must be a finite number of seconds"),
        (["retry", "wi-1", "--wait", "--timeout", "-1"], "--timeout: must be a finite number of seconds"),
        (["ready", "--timeout", "0"], "--timeout: must be more than 0 seconds"),
        # --timeout is how long --wait waits: without --wait it was taken and ignored
        (["start", "wf", "--context", "{}", "--timeout", "5"], "--timeout 5 goes with --wait"),
        (["retry", "wi-1", "--timeout", "5"], "--timeout 5 goes with --wait"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WIGGLE_DATABASE_URL", raising=False)
    with pytest.raises(SystemExit) as raised:  # argparse's own errors exit 2 by SystemExit
        raise SystemExit(cli.main(["--target", "127.0.0.1:1", *args]))
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


async def test_doctor_checks_the_server_schema_extras_and_hot_paths(pg_schema: str) -> None:  # noqa: F811
    from wiggle import _fast

    async with EmbeddedServer(database_url=TEST_DATABASE_URL, database_schema=pg_schema) as server:
        ok = await run(
            "doctor",
            "--json",
            "--target",
            server.target,
            "--database-url",
            TEST_DATABASE_URL,
            "--database-schema",
            pg_schema,
        )
    checks = {c["check"]: c for c in json.loads(ok.stdout)}
    # the database's own autovacuum setting decides that row (this machine's test cluster may run without)
    with psycopg.connect(TEST_DATABASE_URL) as conn:
        vacuuming = conn.execute("SELECT current_setting('autovacuum') = 'on'").fetchone()[0]
    assert checks["autovacuum"]["ok"] is vacuuming, checks["autovacuum"]
    if not vacuuming:
        assert "autovacuum off on this database server" in checks["autovacuum"]["detail"]
    assert ok.returncode == (0 if vacuuming else 1), ok.stdout + ok.stderr
    assert checks["server"]["ok"] and server.target in checks["server"]["detail"]
    assert checks["schema"]["ok"] and "current" in checks["schema"]["detail"]
    assert checks["hot paths"]["detail"].startswith(_fast.IMPL)
    assert checks["extra postgres"]["detail"].startswith("installed")
    assert {"extra metrics", "extra dashboard", "extra otel"} <= checks.keys()

    down = await run(
        "doctor",
        "--target",
        "127.0.0.1:1",
        "--database-url",
        TEST_DATABASE_URL,
        "--database-schema",
        "wiggle_doctor_missing",
    )
    assert down.returncode == 1
    rows = {ln.split()[0]: ln for ln in down.stdout.splitlines()}
    assert rows["CHECK"].split() == ["CHECK", "OK", "DETAIL"]
    assert "NO" in rows["server"] and "unreachable" in rows["server"]
    assert "NO" in rows["schema"] and "wiggle migrate" in rows["schema"]


def test_a_bad_environment_value_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    env = dict(os.environ, WIGGLE_LEASE_MILLIS="-1")
    proc = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "server"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "--lease-millis (WIGGLE_LEASE_MILLIS) must be between 100 and 86400000, got -1" in proc.stderr


async def test_queues_lists_depth_and_workers() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(FLOW)
        for _ in range(4):
            await server.client.start(FLOW, {})
        table = await run("queues", "--target", server.target)
        assert table.returncode == 0, table.stderr
        header, row = table.stdout.splitlines()
        assert header.split() == ["QUEUE", "READY", "DELAYED", "OLDEST", "RUNNING", "LOCAL", "WORKERS"]
        assert row.split()[:3] == ["cli-edges", "4", "0"] and row.split()[-1] == "0"
        async with server.worker([FLOW]):
            while (await server.client.queues())[0].ready:
                await asyncio.sleep(0.05)
            as_json = json.loads((await run("queues", "--json", "--target", server.target)).stdout)
        (queue,) = as_json
        assert queue["queue"] == "cli-edges" and queue["ready"] == 0
        assert len(queue["workers"]) == 1 and queue["workers"][0]["last_seen"] > 0


def test_demo_names_its_dashboard_port_when_the_port_is_taken() -> None:
    """``wiggle demo --dashboard-port P`` with P in use said "choose another (--http-port,
    WIGGLE_HTTP_PORT; --host, WIGGLE_HOST)", flags the demo does not have."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "wiggle.cli", "demo", "--dashboard-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 4, done.stderr
    assert "the dashboard port cannot listen on 127.0.0.1:" in done.stderr, done.stderr
    assert "choose another (--dashboard-port)" in done.stderr and "--http-port" not in done.stderr
