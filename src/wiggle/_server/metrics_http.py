"""The Prometheus /metrics endpoint (the ``metrics`` extra: prometheus-client).

Exposes RPC calls and errors by method, local-run lengths and handback reasons (design doc §12),
and the store's committed transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["start_metrics_server", "WiggleCollector", "metrics_text"]


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


def start_metrics_server(host: str, port: int, server: Any) -> Any:
    """Serve /metrics on host:port in a background thread; returns the HTTP server (``shutdown()``)."""
    registry = CollectorRegistry()
    registry.register(WiggleCollector(server))
    http_server, _thread = start_http_server(port, addr=host, registry=registry)
    return http_server


def metrics_text(server: Any) -> Callable[[], bytes]:
    """A function answering the Prometheus text format of ``server``'s metrics (for /metrics)."""
    registry = CollectorRegistry()
    registry.register(WiggleCollector(server))

    def text() -> bytes:
        return generate_latest(registry)

    return text
