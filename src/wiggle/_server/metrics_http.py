"""The Prometheus /metrics endpoint (the ``metrics`` extra: prometheus-client).

Exposes RPC calls and errors by method, local-run lengths and handback reasons (docs/semantics.md#handbacks),
the store's committed transactions, the queue gauges, the step and instance figures
(wiggle/_server/timings.py) and the families of wiggle/_server/metrics_families.py. Every family,
with its type, labels and what to alert on, is in docs/metrics.md (tests/server/test_metrics_families.py
checks the two against each other).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..errors import WiggleError
from .lag import QueueLag
from .metrics_families import pager_families, worker_queues

__all__ = ["start_metrics_server", "WiggleCollector", "metrics_text"]

log = logging.getLogger("wiggle.server")


def _by_label(name: str, text: str, label: str, counts: dict[str, int]) -> CounterMetricFamily:
    """A counter family with one series per ``counts`` key (under ``label``), in key order."""
    family = CounterMetricFamily(name, text, labels=[label])
    for value, n in sorted(counts.items()):
        family.add_metric([value], n)
    return family


class WiggleCollector(Collector):
    """Reads the server's counters at scrape time."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def collect(self) -> Iterator[Any]:
        metrics = self.server.metrics
        yield _by_label("wiggle_rpc_calls", "RPCs served, by method", "method", metrics.rpc_calls)
        yield _by_label(
            "wiggle_rpc_errors", "RPCs answered with an error, by method", "method", metrics.rpc_errors
        )
        yield _by_label(
            "wiggle_local_run_handbacks", "local runs ended, by handback reason", "reason", metrics.handbacks
        )
        yield _by_label(
            "wiggle_step_handbacks",
            "SERVER-mode steps their worker handed back, by handback reason",
            "reason",
            metrics.step_handbacks,
        )
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
        handed = CounterMetricFamily(
            "wiggle_steps_handed_off", "steps leased to a waiting poller by the commit that made them READY"
        )
        handed.add_metric([], self.server.instances.handed_off)
        yield handed
        chained = CounterMetricFamily(
            "wiggle_steps_chained", "steps leased to the reporting worker in its report's commit"
        )
        chained.add_metric([], self.server.instances.chained)
        yield chained
        again = CounterMetricFamily(
            "wiggle_steps_chained_again",
            "chained steps given again to a report resent after its answer was lost",
        )
        again.add_metric([], self.server.instances.chained_again)
        yield again
        unrunnable = self.server.instances.delivery.unrunnable  # wiggle/_server/unrunnable.py
        given_back = CounterMetricFamily(
            "wiggle_steps_given_back_no_handler",
            "steps a worker gave back for lack of a handler (a mixed fleet: docs/semantics.md)",
        )
        given_back.add_metric([], unrunnable.noted)
        yield given_back
        holds = GaugeMetricFamily(
            "wiggle_worker_node_holds", "nodes passed over in a worker's claims now, over every worker"
        )
        holds.add_metric([], unrunnable.held())
        yield holds
        yield from queue_gauges(self.server)
        yield from timing_metrics(self.server)
        yield from pager_families(self.server)


def timing_metrics(server: Any) -> Iterator[Any]:
    """Step and store histograms, instance outcomes (wiggle/_server/timings.py)."""
    timings = server.instances.timings
    for name, text, hist, labels in (
        (
            "wiggle_step_schedule_to_start_seconds",
            "how long a due step waited for a worker to claim it",
            timings.schedule_to_start,
            ["workflow", "queue"],
        ),
        (
            "wiggle_step_run_seconds",
            "claim to report of a step attempt",
            timings.run_time,
            ["workflow", "queue"],
        ),
        (
            "wiggle_store_mutation_seconds",
            "one store mutation: lock, load, transition, persist, commit",
            timings.mutation,
            ["operation"],
        ),
    ):
        family = HistogramMetricFamily(name, text, labels=labels)
        for label_values, buckets, total in hist.series():
            family.add_metric(list(label_values), buckets, sum_value=total)
        yield family
    outcomes = CounterMetricFamily(
        "wiggle_instances_finished",
        "instances that finished, by workflow and status",
        labels=["workflow", "status"],
    )
    for (workflow, status), n in sorted(timings.outcomes.items()):
        outcomes.add_metric([workflow, status], n)
    yield outcomes


def _idle(queue: str) -> QueueLag:
    return QueueLag(
        queue=queue,
        ready=0,
        delayed=0,
        running=0,
        in_local_run=0,
        oldest_ready_age_ms=0,
        rate_per_second=0.0,
        lagging=False,
    )


def queue_gauges(server: Any) -> Iterator[Any]:
    """The queue-lag monitor's last look (wiggle/_server/lag.py), one series per queue known: a
    queue with nothing in it (named by a definition, or polled by a worker) reads 0, not absent."""
    lag = getattr(server, "lag", None)
    if lag is None:
        return
    seen = dict(lag.queues)
    workers = worker_queues(server)
    sampler = getattr(server, "sampler", None)
    known = set(workers) | (sampler.known_queues if sampler is not None else set())
    for queue in known - set(seen):
        seen[queue] = _idle(queue)
    queues = sorted(seen.values(), key=lambda q: q.queue)
    families: list[tuple[str, str, Callable[[Any], float]]] = [
        ("wiggle_queue_ready_steps", "steps READY and due, waiting for a worker", lambda q: q.ready),
        ("wiggle_queue_delayed_steps", "steps READY in a retry backoff", lambda q: q.delayed),
        ("wiggle_queue_running_steps", "steps leased to workers", lambda q: q.running),
        (
            "wiggle_queue_local_run_steps",
            "of the running steps: tokens in a local run",
            lambda q: q.in_local_run,
        ),
        (
            "wiggle_queue_oldest_ready_age_seconds",
            "how long the oldest due READY step has waited",
            lambda q: q.oldest_ready_age_ms / 1000,
        ),
        (
            "wiggle_queue_lagging",
            "1 while the queue lags (hysteresis: see docs)",
            lambda q: 1 if q.lagging else 0,
        ),
        (
            "wiggle_queue_dispatch_rate_per_second",
            "steps handed to workers per second (between two looks)",
            lambda q: q.rate_per_second or 0.0,
        ),
        (
            "wiggle_queue_limit_waiting_steps",
            "due steps waiting for a slot of their concurrency-limit key",
            lambda q: q.limit_waiting,
        ),
        (
            "wiggle_queue_limit_held_steps",
            "running steps counted against a concurrency-limit key",
            lambda q: q.limit_held,
        ),
        (
            "wiggle_queue_rate_limited_seconds",
            "how long the queue's rate limit holds its due steps back (0: it does not)",
            lambda q: q.rate_limited_ms / 1000,
        ),
        (
            "wiggle_queue_rate_waiting_steps",
            "due steps waiting for their key's rate (a step's per-key rate limit)",
            lambda q: q.rate_waiting,
        ),
    ]
    for name, text, value in families:
        gauge = GaugeMetricFamily(name, text, labels=["queue"])
        for q in queues:
            gauge.add_metric([q.queue], value(q))
        yield gauge
    polling = GaugeMetricFamily(
        "wiggle_queue_workers", "workers that polled the queue recently (on this node)", labels=["queue"]
    )
    for q in queues:
        polling.add_metric([q.queue], workers.get(q.queue, 0))
    yield polling
    warnings = CounterMetricFamily("wiggle_queue_lag_warnings", "queue-lag warnings logged by this node")
    warnings.add_metric([], lag.warnings)
    yield warnings


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
                authorization = self.headers.get("Authorization", "")
                security.check(path, authorization, peer_common_name(peer), self.client_address[0])
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


def metrics_text(server: Any) -> Callable[[], bytes]:
    """A function answering the Prometheus text format of ``server``'s metrics (for /metrics)."""
    registry = CollectorRegistry()
    registry.register(WiggleCollector(server))

    def text() -> bytes:
        return generate_latest(registry)

    return text
