"""The Prometheus /metrics endpoint (the ``metrics`` extra: prometheus-client).

Exposes RPC calls and errors by method, local-run lengths and handback reasons (design doc §12),
and the store's committed transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
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
        yield from queue_gauges(self.server)
        yield from timing_metrics(self.server)


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


def queue_gauges(server: Any) -> Iterator[Any]:
    """The queue-lag monitor's last look (wiggle/_server/lag.py), one series per queue."""
    lag = getattr(server, "lag", None)
    if lag is None:
        return
    queues = sorted(lag.queues.values(), key=lambda q: q.queue)
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
    ]
    for name, text, value in families:
        gauge = GaugeMetricFamily(name, text, labels=["queue"])
        for q in queues:
            gauge.add_metric([q.queue], value(q))
        yield gauge
    warnings = CounterMetricFamily("wiggle_queue_lag_warnings", "queue-lag warnings logged by this node")
    warnings.add_metric([], lag.warnings)
    yield warnings


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
