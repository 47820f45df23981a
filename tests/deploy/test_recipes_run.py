"""The recipes' commands run as the recipes run them, on loopback and without Docker or systemd:
the image's server and its HEALTHCHECK, the systemd worker unit's command with its environment
files, and (on PostgreSQL) the compose topology: migrate, two servers on one database, a worker
fleet that knows both. Histories are checked clean: no retry, no lease expiry."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pg import TEST_DATABASE_URL
from ports import free_port

from wiggle import Client, InstanceStatus

from .recipe_files import EXAMPLE, SYSTEMD, WORKER_INSTANCE, compose_commands, dockerfile_commands, env_file
from .test_recipes import WIGGLE

LISTENING = re.compile(r"wiggle server listening on ([\d.]+):(\d+)")


def _clean(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its WIGGLE_* variables, then ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    return {**base, "PYTHONUNBUFFERED": "1", **env}


@contextmanager
def running(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`wiggle ARGV` as a process (output in ``log``), SIGTERMed at the end if still running."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([*WIGGLE, *argv], env=_clean(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _target(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while True:
        match = LISTENING.search(log.read_text(errors="replace"))
        if match:
            return f"127.0.0.1:{match.group(2)}"
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.05)


def _on_loopback(env: dict[str, str]) -> dict[str, str]:
    """A recipe's environment on this machine: bound to loopback, a free gRPC and HTTP port."""
    return {**env, "WIGGLE_HOST": "127.0.0.1", "WIGGLE_PORT": "0", "WIGGLE_HTTP_PORT": str(free_port())}


def _run_orders(targets: list[str], count: int) -> None:
    """Start ``count`` orders and a refund (spread over ``targets``); every one COMPLETED with a
    clean history (each step once, no retry, no lease expiry)."""
    ids = []
    for i in range(count):
        with Client(targets[i % len(targets)]) as client:
            ids.append(client.start("orders", {"order_id": f"o-{i}", "quantity": i + 1}).instance_id)
    with Client(targets[0]) as client:
        ids.append(client.start("refunds", {"order_id": "o-0", "amount_cents": 1250}).instance_id)
        for instance_id in ids:
            info = client.wait(instance_id, timeout=60)
            assert info.status == InstanceStatus.COMPLETED, info
            history = client.history(instance_id)
            steps = [e for e in history if e.kind == "TASK"]
            assert steps and all(e.outcome == "COMPLETED" and e.attempt == 1 for e in steps), steps
            if info.workflow == "orders":
                assert [e.node_id for e in steps] == ["price", "charge", "receipt"]
                assert info.context["receipt"].startswith(info.context["order_id"] + ": ")


def _drained(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text(errors="replace")
    assert "Traceback" not in log.read_text(errors="replace")


def test_the_image_refuses_an_exposed_bind_without_tls_or_insecure(tmp_path: Path) -> None:
    """The Dockerfile's comment holds: its ENV alone (0.0.0.0, no TLS, no identities) is refused
    before anything binds, in one line saying what to set."""
    (server, _) = dockerfile_commands()
    done = subprocess.run(
        [*WIGGLE, *server.argv], env=_clean(server.env), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 4, done.stderr
    lines = [line for line in done.stderr.splitlines() if "refusing" in line or "Traceback" in line]
    assert len(lines) == 1 and "WIGGLE_INSECURE=1" in lines[0] and "'0.0.0.0'" in lines[0], done.stderr


def test_the_image_serves_and_its_healthcheck_passes(tmp_path: Path) -> None:
    server, health = dockerfile_commands()
    env = _on_loopback(server.env)
    log = tmp_path / "server.log"
    with running(server.argv, env, log) as proc:
        _target(proc, log)
        done = subprocess.run(
            [*WIGGLE, *health.argv], env=_clean(env), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and done.stdout.strip().endswith("/readyz: ready"), done
    assert proc.returncode == 0, log.read_text()  # SIGTERM: a graceful stop


def test_the_systemd_worker_unit_serves_the_example_and_drains(tmp_path: Path) -> None:
    (worker,) = [c for c in compose_commands() + _systemd() if c.where.startswith("systemd wiggle-worker")]
    server_log = tmp_path / "server.log"
    with running(["server"], _on_loopback({}), server_log) as server:
        target = _target(server, server_log)
        env = dict(worker.env)
        # this machine's server has no TLS and no identities; the example module is in the checkout
        for var in ("WIGGLE_TLS_CA", "WIGGLE_TOKEN_FILE"):
            assert env.pop(var)
        env.update(WIGGLE_TARGET=target, WIGGLE_WORKER_PATH=str(EXAMPLE))
        assert env["WIGGLE_WORKER_PROCESSES"] == "2" and env["WIGGLE_WORKER_BLUEPRINTS"] == "shop_flows:ALL"
        log = tmp_path / "worker.log"
        with running(worker.argv, env, log) as proc:
            with Client(target) as client:  # the workers register the example's workflows
                deadline = time.monotonic() + 60
                while {w.name for w in client.list_workflows()} != {"orders", "refunds"}:
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.1)
            _run_orders([target], 10)
            _drained(proc, log)


def _systemd() -> list:
    from .recipe_files import systemd_commands

    return systemd_commands()


@pytest.mark.postgres
@pytest.mark.skipif(
    os.environ.get("WIGGLE_TEST_POSTGRES") != "1", reason="set WIGGLE_TEST_POSTGRES=1 to run on PostgreSQL"
)
def test_the_compose_topology_on_postgres(tmp_path: Path, pg_schema: str) -> None:
    """compose.yaml's services as processes: migrate, then two servers on one database, then the
    worker command that knows both; orders started on both servers all complete."""
    commands = {c.where.removeprefix("compose "): c for c in compose_commands()}

    def here(env: dict[str, str]) -> dict[str, str]:
        assert env["WIGGLE_DATABASE_URL"].startswith("postgresql://wiggle:wiggle@postgres:5432/")
        return {**env, "WIGGLE_DATABASE_URL": TEST_DATABASE_URL, "WIGGLE_DATABASE_SCHEMA": pg_schema}

    migrate = commands["migrate"]
    done = subprocess.run(
        [*WIGGLE, *migrate.argv], env=_clean(here(migrate.env)), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and f"schema {pg_schema!r}" in done.stdout, done.stderr

    with running(
        commands["server-1"].argv, _on_loopback(here(commands["server-1"].env)), tmp_path / "s1.log"
    ) as s1:
        with running(
            commands["server-2"].argv, _on_loopback(here(commands["server-2"].env)), tmp_path / "s2.log"
        ) as s2:
            targets = [_target(s1, tmp_path / "s1.log"), _target(s2, tmp_path / "s2.log")]
            worker, health = commands["worker"], commands["worker healthcheck"]
            assert worker.env["WIGGLE_TARGET"] == "server-1:7233,server-2:7233"
            assert worker.env["WIGGLE_WORKER_METRICS_PORT"] == "9466" and "--processes" in worker.argv
            port = free_port()  # the fleet's HTTP ports here: port (process 0) and port + 1
            env = {
                **worker.env,
                "WIGGLE_TARGET": ",".join(targets),
                "WIGGLE_WORKER_PATH": str(EXAMPLE),
                "WIGGLE_WORKER_METRICS_PORT": str(port),
            }
            log = tmp_path / "worker.log"
            with running(worker.argv, env, log) as proc:
                with Client(targets[1]) as client:
                    deadline = time.monotonic() + 60
                    while {w.name for w in client.list_workflows()} != {"orders", "refunds"}:
                        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                        time.sleep(0.1)
                _run_orders(targets, 20)
                # the compose health check, on each process's port (process 0's in the recipe)
                for own in (port, port + 1):
                    argv = [a.replace("9466", str(own)) for a in health.argv]
                    assert argv != health.argv
                    for url_argv in (argv, [a.replace("/healthz", "/readyz") for a in argv]):
                        done = subprocess.run(
                            [*WIGGLE, *url_argv], env=_clean({}), capture_output=True, text=True, timeout=60
                        )
                        assert done.returncode == 0 and ": ready" in done.stdout, done
                _drained(proc, log)


def test_the_worker_env_file_is_the_one_the_template_names() -> None:
    assert (SYSTEMD / f"worker-{WORKER_INSTANCE}.env").exists()
    assert env_file(SYSTEMD / "worker.env")["WIGGLE_TARGET"].count(",") == 1
