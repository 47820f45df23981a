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
        assert changed["timezone"] == "Europe/Paris" and changed["catchup"] == "ALL"
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
