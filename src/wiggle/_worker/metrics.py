"""The worker's optional Prometheus /metrics (WorkerOptions.metrics_port or WIGGLE_WORKER_METRICS_PORT).

Served by prometheus-client's own HTTP thread (the ``metrics`` extra): a worker-only install
without it works as before and logs once that metrics are off. Series: slots in use, handler runs
by outcome, handler duration, report latency by RPC, local-run lengths, RPCs sent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from .._env import env_int

__all__ = ["start_worker_metrics", "WorkerMetrics"]

log = logging.getLogger("wiggle.worker")

RUN_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 1000)


class WorkerMetrics:
    """The running metrics endpoint of a worker; ``close()`` stops it."""

    def __init__(self, http_server: Any, port: int) -> None:
        self.http_server = http_server
        self.port = port

    def close(self) -> None:
        """Stop serving."""
        self.http_server.shutdown()


def start_worker_metrics(worker: Any, port: int) -> WorkerMetrics | None:
    """Serve ``worker``'s metrics on ``port`` (0: WIGGLE_WORKER_METRICS_PORT, unset: off)."""
    port = port or env_int("WIGGLE_WORKER_METRICS_PORT", 0)
    if not port:
        return None
    try:
        from prometheus_client import start_http_server
        from prometheus_client.registry import CollectorRegistry
    except ImportError:
        log.warning("worker metrics need prometheus-client: pip install 'wiggle-workflows[metrics]'")
        return None
    registry = CollectorRegistry()
    registry.register(_Collector(worker))
    http_server, _thread = start_http_server(port, addr="0.0.0.0", registry=registry)  # noqa: S104
    return WorkerMetrics(http_server, http_server.server_address[1])


class _Collector:
    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        stats = self.worker.stats
        labels = {"worker_id": self.worker.worker_id}
        slots = GaugeMetricFamily(
            "wiggle_worker_slots_in_use", "steps or local runs executing now", labels=list(labels)
        )
        slots.add_metric(list(labels.values()), stats.in_flight)
        yield slots
        limit = GaugeMetricFamily("wiggle_worker_slots", "the worker's concurrency", labels=list(labels))
        limit.add_metric(list(labels.values()), self.worker.options.concurrency)
        yield limit
        steps = CounterMetricFamily("wiggle_worker_steps", "handler runs by outcome", labels=["outcome"])
        for outcome in ("completed", "failed"):
            steps.add_metric([outcome], stats.outcomes.get(outcome, 0))
        yield steps
        chained = CounterMetricFamily(
            "wiggle_worker_steps_chained", "steps taken from a report's answer, not polled for"
        )
        chained.add_metric([], stats.chained)
        yield chained
        for name, text, hist, label in (
            ("wiggle_worker_handler_seconds", "handler duration", stats.handler_seconds, "workflow"),
            ("wiggle_worker_report_seconds", "report latency (answered)", stats.report_seconds, "rpc"),
        ):
            family = HistogramMetricFamily(name, text, labels=[label])
            for label_values, buckets, total in hist.series():
                family.add_metric(list(label_values), buckets, sum_value=total)
            yield family
        runs = HistogramMetricFamily("wiggle_worker_local_run_steps", "steps per local run")
        lengths = list(stats.local_run_lengths)
        buckets = [(str(b), sum(1 for n in lengths if n <= b)) for b in RUN_LENGTH_BUCKETS]
        buckets.append(("+Inf", len(lengths)))
        runs.add_metric([], buckets, sum_value=sum(lengths))
        yield runs
        calls = CounterMetricFamily("wiggle_worker_rpc_calls", "RPCs sent, by method", labels=["method"])
        for method, n in sorted(stats.calls.items()):
            calls.add_metric([method], n)
        yield calls
