"""`wiggle server` as a user runs it, secured: TLS and identities from flags, the CLI as a client
with --tls-ca / WIGGLE_TOKEN, `wiggle token`, and SIGHUP reloading the identity file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port

from .conftest import Pki


def _wiggle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wiggle.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_token_command_prints_a_token_and_its_entry() -> None:
    result = _wiggle("token", "pay", "--role", "worker", "--queue", "payments")
    assert result.returncode == 0, result.stderr
    token = result.stdout.split("not stored): ", 1)[1].split()[0]
    entry = json.loads(result.stdout.strip().splitlines()[-1])
    from wiggle._security.tokens import hash_token

    assert entry == {
        "name": "pay",
        "roles": ["worker"],
        "queues": ["payments"],
        "token_sha256": hash_token(token),
    }


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["w", "--role", "worker"],
            'a worker identity lists the queues it may serve ("queues": ["*"] for all) (--queue NAME',
        ),
        (["bad name!"], "name 'bad name!' must be 1-100 of [A-Za-z0-9_.-@]"),
        ([""], "name '' must be 1-100 of"),
    ],
)
def test_token_refuses_an_entry_a_server_would_refuse(argv: list[str], said: str, tmp_path: Path) -> None:
    """``wiggle token`` printed entries the server's --auth-file refuses at start (a worker
    without queues, a name outside the set): the operator learnt it from a server that would
    not start. It is refused here, in one line, exit 2, and no token is printed."""
    result = _wiggle("token", *argv)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("wiggle: INVALID_ARGUMENT: wiggle token ") and said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_every_entry_token_prints_is_one_a_server_loads(tmp_path: Path) -> None:
    from wiggle._security.tokens import IdentityTable

    made = []
    for argv in (["ops", "--role", "admin"], ["svc"], ["pay", "--role", "worker", "--queue", "*"]):
        result = _wiggle("token", *argv, "--json")
        assert result.returncode == 0, result.stderr
        made.append(json.loads(result.stdout))
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"identities": [m["identity"] for m in made]}))
    auth.chmod(0o600)
    table = IdentityTable(str(auth))
    found = [table.by_token(m["token"]) for m in made]
    assert [i.name if i else None for i in found] == ["ops", "svc", "pay"]


def test_secured_server_process_and_sighup_reload(pki: Pki, tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wiggle.cli",
            "server",
            "--port",
            str(port),
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
            "--auth-file",
            str(pki.auth_file),
            "--reload-seconds",
            "3600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        for line in server.stdout:
            if "listening on" in line:
                break
        else:
            raise AssertionError("the server did not start")
        target = f"127.0.0.1:{port}"
        tls = {"WIGGLE_TLS_CA": str(pki.ca.ca_file)}
        ok = _wiggle("--target", target, "list", "--json", env={**tls, "WIGGLE_TOKEN": "tok-watcher"})
        assert ok.returncode == 0, ok.stderr
        plain = _wiggle("--target", target, "list")
        assert plain.returncode == 5, plain.stderr  # a plaintext client cannot even connect
        late = {**tls, "WIGGLE_TOKEN": "tok-late"}
        refused = _wiggle("--target", target, "list", env=late)
        assert "UNAUTHENTICATED" in refused.stderr
        doc = json.loads(pki.auth_file.read_text())
        from wiggle._security.tokens import hash_token

        doc["identities"].append(
            {"name": "late", "roles": ["viewer"], "token_sha256": hash_token("tok-late")}
        )
        pki.auth_file.write_text(json.dumps(doc))
        server.send_signal(signal.SIGHUP)
        for _ in range(300):  # until the server has handled the signal; no duration is asserted
            if _wiggle("--target", target, "list", env=late).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("SIGHUP did not reload the identity file")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
