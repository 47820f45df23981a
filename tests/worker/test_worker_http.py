"""The worker's HTTP port (wiggle/_worker/http.py): /healthz while its event loop turns, /readyz
while it serves with its server answering, /metrics with the extra; against a real server that
goes away and comes back, and a handler that blocks the loop."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ports import free_port
from upstream.servers import WIGGLE

from wiggle import Worker, WorkerOptions, Workflow
from wiggle._server.config import ServerConfig
from wiggle._worker import http as worker_http
from wiggle.errors import FailedPrecondition
from wiggle.testing import EmbeddedServer


def one(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "one": True}


FLOW = Workflow.define("probed").step(one, queue="probed-q").build()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def aget(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


async def until(port: int, path: str, status: int, seconds: float = 15) -> str:
    deadline = time.monotonic() + seconds
    while True:
        try:
            code, body = await aget(port, path)
        except urllib.error.URLError as exc:  # the port is not open yet (the worker is starting)
            code, body = 0, str(exc)
        if code == status:
            return body
        assert time.monotonic() < deadline, f"{path}: {code} {body}"
        await asyncio.sleep(0.1)


async def test_probes_follow_the_server_away_and_back() -> None:
    server_port, http_port = free_port(), free_port()
    server = await EmbeddedServer(ServerConfig(port=server_port)).start()
    back: EmbeddedServer | None = None
    options = WorkerOptions(metrics_port=http_port, poll_wait_seconds=0.5, worker_id="probed-1")
    worker = Worker(f"127.0.0.1:{server_port}", [FLOW], options)
    try:
        await worker.start()
        assert await aget(http_port, "/healthz") == (200, "ok\n")
        assert await aget(http_port, "/readyz") == (200, "serving probed-q\n")
        code, body = await aget(http_port, "/metrics")
        assert code == 200 and 'wiggle_worker_slots{worker_id="probed-1"} 16.0' in body
        assert (await aget(http_port, "/nothing"))[0] == 404

        await server.stop()
        why = await until(http_port, "/readyz", 503)
        assert why.startswith("its polls have failed for ") and "UNAVAILABLE" in why, why
        assert await aget(http_port, "/healthz") == (200, "ok\n")  # alive all the same

        back = await EmbeddedServer(ServerConfig(port=server_port)).start()
        assert await until(http_port, "/readyz", 200) == "serving probed-q\n"
        await back.client.register(FLOW)  # a new in-memory server: the worker registered on the old
        info = await back.client.result((await back.client.start(FLOW, {})).instance_id, timeout=30)
        assert info.context == {"one": True}
    finally:
        await worker.close()
        if back is not None:
            await back.stop()
    with pytest.raises(urllib.error.URLError):  # the port is closed with the worker
        get(http_port, "/healthz")


async def test_a_worker_is_ready_again_as_soon_as_its_server_answers_not_after_a_long_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outside trial's /readyz stayed 503 ("its polls have failed for 13.0 s") for up to
    ``poll_wait_seconds`` after the server was back: the trouble ended only when a long poll
    returned. Here a long poll waits 30 s and the test waits 10 s at most for 200: a worker that
    polls without waiting while in trouble is ready at its first poll the server answers."""
    server_port, http_port = free_port(), free_port()
    server = await EmbeddedServer(ServerConfig(port=server_port)).start()
    back: EmbeddedServer | None = None
    options = WorkerOptions(metrics_port=http_port, poll_wait_seconds=30, worker_id="probed-2")
    worker = Worker(f"127.0.0.1:{server_port}", [FLOW], options)
    try:
        await worker.start()
        assert await until(http_port, "/readyz", 200) == "serving probed-q\n"
        await server.stop()
        why = await until(http_port, "/readyz", 503)
        assert why.startswith("its polls have failed for ") and "UNAVAILABLE" in why, why

        with caplog.at_level(logging.INFO, logger="wiggle.worker"):
            back = await EmbeddedServer(ServerConfig(port=server_port)).start()
            assert await until(http_port, "/readyz", 200, seconds=10) == "serving probed-q\n"
        assert any(r.getMessage().startswith("reached a server again after ") for r in caplog.records)
        # the long polls resume: a step started now is claimed and run
        await back.client.register(FLOW)
        info = await back.client.result((await back.client.start(FLOW, {})).instance_id, timeout=30)
        assert info.context == {"one": True}
    finally:
        await worker.close()
        if back is not None:
            await back.stop()


async def test_a_worker_waiting_for_its_server_is_alive_but_not_ready() -> None:
    http_port = free_port()
    target = f"127.0.0.1:{free_port()}"  # a closed local port
    worker = Worker(target, [FLOW], WorkerOptions(metrics_port=http_port, connect_seconds=60))
    starting = asyncio.ensure_future(worker.start())
    try:
        body = await until(http_port, "/readyz", 503)
        assert body == f"waiting for its server at {target}\n"
        assert await aget(http_port, "/healthz") == (200, "ok\n")
    finally:
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
    with pytest.raises(urllib.error.URLError):  # a start given up lets go of the port
        get(http_port, "/healthz")


def blocking(ctx: dict[str, Any]) -> dict[str, Any]:
    time.sleep(2.5)  # on the event loop (sync_handlers="inline"): nothing else runs meanwhile
    return ctx


async def test_a_handler_blocking_the_event_loop_fails_healthz_until_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_http, "STALLED_AFTER", 1.0)
    flow = Workflow.define("blocked").step(blocking).build()
    http_port = free_port()
    seen: list[tuple[int, str]] = []
    stop = threading.Event()

    def probe() -> None:  # from a thread: the test's own loop is the one blocked
        while not stop.is_set():
            seen.append(get(http_port, "/healthz"))
            time.sleep(0.1)

    async with EmbeddedServer() as server:
        options = WorkerOptions(metrics_port=http_port, sync_handlers="inline")
        async with server.worker([flow], options):
            prober = threading.Thread(target=probe, daemon=True)
            prober.start()
            try:
                info = await server.client.result(
                    (await server.client.start(flow, {})).instance_id, timeout=30
                )
                assert info.status == "COMPLETED"
                await asyncio.sleep(1.5)  # the loop turns again
            finally:
                stop.set()
                await asyncio.to_thread(prober.join, 10)
    stalled = [body for code, body in seen if code == 503]
    assert stalled and "event loop has not turned for" in stalled[0], seen
    assert seen[-1] == (200, "ok\n"), seen[-5:]


async def test_without_prometheus_client_the_probes_are_served_and_metrics_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails: no extra
    http_port = free_port()
    async with EmbeddedServer() as server:
        async with server.worker([FLOW], WorkerOptions(metrics_port=http_port)):
            assert await aget(http_port, "/readyz") == (200, "serving probed-q\n")
            code, body = await aget(http_port, "/metrics")
            assert code == 404 and "pip install 'wiggle-workflows[metrics]'" in body
    assert "serving /healthz and /readyz only" in caplog.text


def test_processes_past_the_last_port_are_refused_before_any_starts(tmp_path: Path) -> None:
    # `--processes N` serves process i on the port + i: 65535 and two processes cannot be
    (tmp_path / "probed_flows.py").write_text(
        "from wiggle import Workflow\n"
        "def one(ctx):\n    return ctx\n"
        "flow = Workflow.define('probed').step(one).build()\n"
    )
    argv = ["--target", f"127.0.0.1:{free_port()}", "worker", "probed_flows:flow", "--processes", "2"]
    done = subprocess.run(
        [*WIGGLE, *argv, "--metrics-port", "65535"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--metrics-port 65535 with --processes 2" in done.stderr and "Traceback" not in done.stderr, (
        done.stderr
    )


def get_from(host: str, port: int, path: str) -> tuple[int, str]:
    url_host = f"[{host}]" if ":" in host else host
    with urllib.request.urlopen(f"http://{url_host}:{port}{path}", timeout=10) as answer:
        return answer.status, answer.read().decode()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_the_port_binds_the_address_given(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with EmbeddedServer() as server:
        http_port = free_port()
        async with server.worker([FLOW], WorkerOptions(metrics_port=http_port, metrics_host=host)) as worker:
            assert worker._http is not None and worker._http._server.server_address[0] == host
            assert await asyncio.to_thread(get_from, host, http_port, "/readyz") == (
                200,
                "serving probed-q\n",
            )
        # the same from the variable, which `wiggle worker` and a container set
        monkeypatch.setenv("WIGGLE_WORKER_METRICS_HOST", host)
        http_port = free_port()
        async with server.worker([FLOW], WorkerOptions(metrics_port=http_port)) as worker:
            assert worker._http is not None and worker._http._server.server_address[0] == host
            assert await asyncio.to_thread(get_from, host, http_port, "/healthz") == (200, "ok\n")


async def test_a_port_in_use_fails_the_start_naming_it_and_what_sets_it() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        async with EmbeddedServer() as server:
            worker = Worker(server.target, [FLOW], WorkerOptions(metrics_port=port, metrics_host="127.0.0.1"))
            with pytest.raises(FailedPrecondition) as caught:
                await worker.start()
            message = str(caught.value)
            assert f"cannot listen on 127.0.0.1 port {port}" in message and "--metrics-port" in message
            assert worker.readiness() == (False, "the worker is not started")
            await worker.close()
            assert await server.client.list_workflows() == []  # it never registered: it never started
    finally:
        taken.close()


def test_the_command_says_which_port_it_could_not_have(tmp_path: Path) -> None:
    (tmp_path / "probed_flows.py").write_text(
        "from wiggle import Workflow\n"
        "def one(ctx):\n    return ctx\n"
        "flow = Workflow.define('probed').step(one).build()\n"
    )
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    argv = [
        "--target",
        f"127.0.0.1:{free_port()}",
        "worker",
        "probed_flows:flow",
        "--metrics-host",
        "127.0.0.1",
    ]
    try:
        done = subprocess.run(
            [*WIGGLE, *argv, "--metrics-port", str(port)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert done.returncode == 4, done.stderr  # FAILED_PRECONDITION, at once: no wait for a server
    assert done.stderr.startswith(
        f"wiggle: FAILED_PRECONDITION: the worker's HTTP port cannot listen on 127.0.0.1 port {port}"
    ), done.stderr
