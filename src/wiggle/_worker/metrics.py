"""The worker's Prometheus families (the ``metrics`` extra), served on /metrics of its HTTP port
(wiggle/_worker/http.py). Series: slots in use, handler runs by outcome, handler duration, report
latency by RPC, local-run lengths, RPCs sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .stats import RUN_LENGTH_BUCKETS

__all__ = ["WorkerCollector"]


class WorkerCollector:
    """The worker's families, read from its ``stats`` at each scrape (prometheus-client's collector
    protocol); wiggle/_worker/http.py serves them on /metrics."""

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
        local_runs = stats.local_runs.series
        buckets, running = [], 0
        for bound, n in zip((*map(str, RUN_LENGTH_BUCKETS), "+Inf"), list(local_runs.counts), strict=True):
            running += n
            buckets.append((bound, running))
        runs.add_metric([], buckets, sum_value=local_runs.sum)
        yield runs
        calls = CounterMetricFamily("wiggle_worker_rpc_calls", "RPCs sent, by method", labels=["method"])
        for method, n in sorted(stats.calls.items()):
            calls.add_metric([method], n)
        yield calls
