"""`wiggle schedule update` keeps what no flag changes; `wiggle ready` asks a real server's /readyz."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from ports import free_port
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle import Workflow, cli
from wiggle.testing import EmbeddedServer


def _noop(ctx: dict) -> dict:
    return ctx


REPORT = Workflow.define("cli-verbs-report").step(_noop, queue="cli-verbs-nobody").build()
REPORT_V2 = Workflow.define("cli-verbs-report-v2").step(_noop, queue="cli-verbs-nobody").build()


async def test_schedule_update_without_restating_the_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    async with EmbeddedServer() as server:
        await server.client.register(REPORT)
        await server.client.register(REPORT_V2)

        async def wiggle(*argv: str) -> dict:
            code = await asyncio.to_thread(cli.main, ["--target", server.target, "--json", *argv])
            captured = capsys.readouterr()
            assert code == 0, captured.err
            return dict(json.loads(captured.out))

        made = await wiggle(
            "schedule", "create", "nightly", REPORT.name, "--cron", "0 3 * * *", "--timezone", "Europe/Paris",
            "--context", '{"region": "eu"}', "--overlap", "allow", "--catchup", "all", "--catchup-limit", "3",
        )  # fmt: skip
        # one flag: the rest of the spec is kept
        changed = await wiggle("schedule", "update", "nightly", "--cron", "30 2 * * *")
        assert changed["cron"] == "30 2 * * *"
        kept = ("workflow", "timezone", "context", "overlap", "catchup", "catchup_limit", "version", "fired")
        assert {k: changed[k] for k in kept} == {k: made[k] for k in kept}
        assert changed["context"] == {"region": "eu"} and changed["overlap"] == "ALLOW"
        # --every replaces the cron; the context given replaces the old one
        changed = await wiggle("schedule", "update", "nightly", "--every", "60", "--context", "{}")
        assert changed["interval_seconds"] == 60 and changed["cron"] == "" and changed["context"] == {}
        # the cron's zone is not carried to the interval, which has none (the server refuses one)
        assert changed["timezone"] == "UTC" and changed["catchup"] == "ALL"
        # a new workflow, as a flag or as the second argument (the older form)
        assert (await wiggle("schedule", "update", "nightly", "--workflow", REPORT_V2.name))[
            "workflow"
        ] == REPORT_V2.name
        assert (await wiggle("schedule", "update", "nightly", REPORT.name))["workflow"] == REPORT.name
        stored = await server.client.get_schedule("nightly")
        assert stored.workflow == REPORT.name and stored.interval_seconds == 60 and stored.overlap == "ALLOW"


def test_ready_asks_a_real_servers_readyz(tmp_path: Path) -> None:
    port = free_port()
    server = ServerProcess(tmp_path / "server.log", server_env(WIGGLE_HTTP_PORT=str(port)))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}

        def ready(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*WIGGLE, "ready", *argv], capture_output=True, text=True, env={**env, **extra}, timeout=60
            )

        done = ready("--http-port", str(port))
        assert done.returncode == 0 and done.stdout.strip() == f"http://127.0.0.1:{port}/readyz: ready", done
        # the server's own variable, as a container's HEALTHCHECK sees it
        assert ready(WIGGLE_HTTP_PORT=str(port)).returncode == 0
        done = ready("--url", f"http://127.0.0.1:{port}/readyz", "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["ready"] is True
        # a path that is not a readiness answer: not ready, one line naming the URL and the status
        done = ready("--url", f"http://127.0.0.1:{port}/no-such-page")
        assert done.returncode == 1 and "HTTP 404" in done.stderr and len(done.stderr.splitlines()) == 1
    finally:
        server.stop()


def test_ready_over_tls_with_a_token(tmp_path: Path) -> None:
    """The HEALTHCHECK beside a server with TLS and an identity file: `wiggle ready` with the
    server's own variables asks over HTTPS, checks the certificate, sends the token."""
    from security.certs import Authority
    from security.conftest import write_identities

    ca = Authority(tmp_path)
    cert, key = ca.issue("localhost", server=True)
    auth = tmp_path / "identities.json"
    write_identities(auth)
    port = free_port()
    server_vars = {
        "WIGGLE_HTTP_PORT": str(port),
        "WIGGLE_TLS_CERT": str(cert),
        "WIGGLE_TLS_KEY": str(key),
        "WIGGLE_AUTH_FILE": str(auth),
    }
    server = ServerProcess(tmp_path / "server.log", server_env(**server_vars))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}

        def ready(**extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*WIGGLE, "ready"],
                capture_output=True,
                text=True,
                env={**env, **server_vars, **extra},
                timeout=60,
            )

        done = ready(WIGGLE_TLS_CA=str(ca.ca_file), WIGGLE_TOKEN="tok-watcher")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"https://127.0.0.1:{port}/readyz: ready"
        # no token: the server refuses; not ready, said in one line
        done = ready(WIGGLE_TLS_CA=str(ca.ca_file))
        assert done.returncode == 1 and "HTTP 401" in done.stderr and len(done.stderr.splitlines()) == 1
        # a certificate nobody vouched for: no answer worth trusting
        done = ready(WIGGLE_TOKEN="tok-watcher")
        assert done.returncode == 5 and "CERTIFICATE_VERIFY_FAILED" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1
    finally:
        server.stop()


async def test_schedule_flags_a_server_would_take_silently_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty --timezone (it read as UTC) and a --timezone beside --every (an interval has no
    zone: it was dropped) are refused by name, and nothing is stored."""
    async with EmbeddedServer() as server:
        await server.client.register(REPORT)

        def wiggle(*argv: str) -> tuple[int, str]:
            code = cli.main(["--target", server.target, *argv])
            return code, capsys.readouterr().err

        for argv, words in [
            (["--cron", "0 3 * * *", "--timezone", ""], "--timezone is empty"),
            (["--every", "60", "--timezone", "Europe/Paris"], "applies to a --cron schedule only"),
        ]:
            code, err = await asyncio.to_thread(wiggle, "schedule", "create", "s1", REPORT.name, *argv)
            assert code != 0 and words in err, err
        assert await server.client.list_schedules() == []
        code, err = await asyncio.to_thread(wiggle, "schedule", "create", "s1", REPORT.name, "--every", "60")
        assert code == 0, err
        # --every takes a duration as --start-delay does (it took seconds only: "5m" was refused)
        code, err = await asyncio.to_thread(wiggle, "schedule", "create", "s5", REPORT.name, "--every", "5m")
        assert code == 0, err
        assert (await server.client.get_schedule("s5")).interval_seconds == 300
        code, err = await asyncio.to_thread(
            wiggle, "schedule", "create", "s6", REPORT.name, "--every", "often"
        )
        assert code != 0 and "--every 'often' is not a duration" in err, err
        code, err = await asyncio.to_thread(wiggle, "schedule", "update", "s1", "--timezone", "Asia/Tokyo")
        assert code != 0 and "applies to a --cron schedule only" in err, err
        code, err = await asyncio.to_thread(
            wiggle, "schedule", "update", "s1", "--cron", "0 3 * * *", "--timezone", "Asia/Tokyo"
        )
        assert code == 0, err
        assert (await server.client.get_schedule("s1")).timezone == "Asia/Tokyo"


def test_schedule_shows_long_intervals_in_plain_digits_and_a_held_tick(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from wiggle._cli.schedules import interval, show
    from wiggle._client.types import ScheduleInfo

    assert interval(30) == "30 s" and interval(0.25) == "0.25 s" and interval(90.5) == "90.5 s"
    assert interval(31_622_400) == "31622400 s (366 d)"
    assert interval(5_400) == "5400 s (1 h 30 min)"
    info = ScheduleInfo(
        schedule_id="yearly", workflow="report", version="", interval_seconds=31_622_400.0, cron="",
        timezone="UTC", context={}, overlap="BUFFER_ONE", catchup="NONE", catchup_limit=0, paused=False,
        created_at=0, updated_at=0, next_tick_at=0, last_tick_at=0, last_instance_id="i-1",
        buffered_tick_at=1_700_000_000_000, fired=1, skipped=0,
    )  # fmt: skip
    show(info)
    out = capsys.readouterr().out
    assert "every 31622400 s (366 d)" in out and "e+07" not in out
    assert "held       the tick of 2023-11-14" in out, out
