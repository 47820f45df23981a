"""The Prometheus /metrics endpoint (the ``metrics`` extra: prometheus-client).

Exposes RPC calls and errors by method, local-run lengths and handback reasons (docs/semantics.md#handbacks),
and the store's committed transactions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..errors import WiggleError

__all__ = ["start_metrics_server", "WiggleCollector"]

log = logging.getLogger("wiggle.server")


class WiggleCollector(Collector):
    """Reads the server's counters at scrape time."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def collect(self) -> Iterator[Any]:
        metrics = self.server.metrics
        calls = CounterMetricFamily("wiggle_rpc_calls", "RPCs served, by method", labels=["method"])
        for method, n in sorted(metrics.rpc_calls.items()):
            calls.add_metric([method], n)
        yield calls
        errors = CounterMetricFamily(
            "wiggle_rpc_errors", "RPCs answered with an error, by method", labels=["method"]
        )
        for method, n in sorted(metrics.rpc_errors.items()):
            errors.add_metric([method], n)
        yield errors
        handbacks = CounterMetricFamily(
            "wiggle_local_run_handbacks", "local runs ended, by handback reason", labels=["reason"]
        )
        for reason, n in sorted(metrics.handbacks.items()):
            handbacks.add_metric([reason], n)
        yield handbacks
        buckets = []
        cumulative = 0
        for bound in metrics.RUN_LENGTH_BUCKETS:
            cumulative += metrics.local_run_steps.get(bound, 0)
            buckets.append((str(bound), cumulative))
        cumulative += metrics.local_run_steps.get(0, 0)
        buckets.append(("+Inf", cumulative))
        hist = HistogramMetricFamily("wiggle_local_run_steps", "steps per local run (at handback)")
        hist.add_metric([], buckets, sum_value=metrics.local_steps_total)
        yield hist
        tx = CounterMetricFamily("wiggle_store_transactions", "mutations committed by the store")
        tx.add_metric([], self.server.store.stats.transactions)
        yield tx


def start_metrics_server(host: str, port: int, server: Any, security: Any = None) -> Any:
    """Serve /metrics on host:port in a background thread; returns the HTTP server (``shutdown()``).

    ``security`` (an HttpSecurity, wiggle/_server/http_security.py) adds TLS and access control.
    """
    registry = CollectorRegistry()
    registry.register(WiggleCollector(server))
    if security is not None and (security.tls is not None or security.authenticator is not None):
        return _start_secure(host, port, registry, security)
    http_server, _thread = start_http_server(port, addr=host, registry=registry)
    return http_server


def _start_secure(host: str, port: int, registry: CollectorRegistry, security: Any) -> ThreadingHTTPServer:
    from .http_security import http_status, peer_common_name

    context = security.ssl_context()

    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            if context is not None:  # the handshake runs here, in this connection's thread
                self.request = context.wrap_socket(self.request, server_side=True)
            super().setup()

        def do_GET(self) -> None:  # noqa: N802 - the http.server naming
            path = self.path.split("?", 1)[0]
            peer = self.connection.getpeercert() if context is not None else None
            try:
                security.check(path, self.headers.get("Authorization", ""), peer_common_name(peer))
            except WiggleError as exc:
                code = http_status(exc)
                self._reply(code, str(exc).encode() + b"\n", "text/plain; charset=utf-8")
                return
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._reply(404, b"not found\n", "text/plain; charset=utf-8")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            # a failed handshake (plaintext, untrusted client certificate) is the client's problem
            log.debug("HTTP connection from %s dropped", client_address, exc_info=True)

    http_server = Server((host, port), Handler)
    http_server.daemon_threads = True
    threading.Thread(target=http_server.serve_forever, name="wiggle-metrics", daemon=True).start()
    return http_server
