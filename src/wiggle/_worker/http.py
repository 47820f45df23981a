"""The worker's HTTP port (``WorkerOptions.metrics_port``, ``WIGGLE_WORKER_METRICS_PORT``):
``/healthz`` and ``/readyz`` for probes, and ``/metrics`` with the ``metrics`` extra.

A WSGI app on the standard library's server, in a thread of its own (as prometheus-client serves
its own port), so a probe is answered even while the worker's event loop is stuck, which is what
``/healthz`` is there to tell:

- ``/healthz`` (liveness): 200 while the worker's event loop turns. A task of the loop marks the
  time every second (``Pulse``); a loop that has not done so for ``STALLED_AFTER`` seconds (a
  handler blocking it: an ``inline`` sync handler that sleeps, a CPU-bound async one) answers 503.
- ``/readyz`` (readiness): 200 while the worker serves its queues and its server answers its
  polls; 503 while it waits for its server at start, after its polls failed (the server away, or
  refusing them), while it drains, and once it stopped. The body says which. After failed polls
  it is 200 again with the first poll a server answers (wiggle/_worker/poller.py polls without
  waiting for work until then).

Each answer is one line of text. Nothing here reaches the event loop: the handlers read plain
attributes (``Worker.readiness``, ``Pulse.last``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .._env import env_int, env_str
from ..errors import FailedPrecondition

__all__ = ["WorkerHttp", "Pulse", "start_worker_http", "STALLED_AFTER"]

log = logging.getLogger("wiggle.worker")

#: seconds without a turn of the event loop after which /healthz answers 503
STALLED_AFTER = 10.0

Respond = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], Respond], Iterable[bytes]]


class Pulse:
    """Marks, every second, that the event loop turns (``last``, monotonic seconds)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.last = time.monotonic()
        self._task = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(1.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def check(self) -> tuple[bool, str]:
        """(alive, why) for /healthz."""
        if self._task is None:
            return False, "the worker is not running"
        quiet = time.monotonic() - self.last
        if quiet > STALLED_AFTER:
            return False, (
                f"the worker's event loop has not turned for {quiet:.1f} s: something blocks it "
                "(a sync handler run inline, a CPU-bound async handler)"
            )
        return True, "ok"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a probe in flight never holds the worker's exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        """Probes every few seconds are not worth a line each."""


class WorkerHttp:
    """The running HTTP port of a worker; ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_address[1]

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def start_worker_http(worker: Any, pulse: Pulse, port: int, host: str = "") -> WorkerHttp | None:
    """Serve ``worker``'s probes and metrics on ``host:port`` (port 0: WIGGLE_WORKER_METRICS_PORT,
    unset: off; host "": WIGGLE_WORKER_METRICS_HOST, unset: 0.0.0.0), and start ``pulse`` for
    /healthz (on the running loop). Without prometheus-client, /metrics answers 404 saying which
    extra to install. An address that cannot be had is FailedPrecondition naming it and the settings."""
    port = port or env_int("WIGGLE_WORKER_METRICS_PORT", 0)
    if not port:
        return None
    host = host or env_str("WIGGLE_WORKER_METRICS_HOST", "0.0.0.0")  # noqa: S104 (probes come from outside)
    metrics: App | None = None
    try:
        from prometheus_client import make_wsgi_app
        from prometheus_client.registry import CollectorRegistry

        from .metrics import WorkerCollector
    except ImportError:
        log.warning(
            "worker metrics need prometheus-client: pip install 'wiggle-workflows[metrics]' "
            "(serving /healthz and /readyz only)"
        )
    else:
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker))
        metrics = make_wsgi_app(registry)
    app = _app(worker, pulse, metrics)
    try:
        server = make_server(host, port, app, _Server6 if ":" in host else _Server, _QuietHandler)
    except OSError as exc:  # in use, or not an address of this host
        raise FailedPrecondition(
            f"the worker's HTTP port cannot listen on {host} port {port} ({exc.strerror or exc}); choose "
            "another (--metrics-port, WIGGLE_WORKER_METRICS_PORT; --metrics-host, WIGGLE_WORKER_METRICS_HOST)"
        ) from None
    pulse.start()  # before the port serves: its first /healthz is alive
    thread = threading.Thread(target=server.serve_forever, name="wiggle-worker-http", daemon=True)
    thread.start()
    return WorkerHttp(server, thread)


def _app(worker: Any, pulse: Pulse, metrics: App | None) -> App:
    def app(environ: dict[str, Any], respond: Respond) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _text(respond, *pulse.check())
        if path == "/readyz":
            return _text(respond, *worker.readiness())
        if path == "/metrics":
            if metrics is None:
                return _text(respond, False, "no metrics: pip install 'wiggle-workflows[metrics]'", 404)
            return metrics(environ, respond)
        return _text(respond, False, f"no page {path}: /healthz, /readyz, /metrics", 404)

    return app


def _text(respond: Respond, ok: bool, text: str, failure: int = 503) -> list[bytes]:
    status = "200 OK" if ok else ("404 Not Found" if failure == 404 else "503 Service Unavailable")
    body = (text + "\n").encode()
    respond(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]
