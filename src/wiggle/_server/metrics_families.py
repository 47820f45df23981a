"""The /metrics families added for the pager (issue #26; the table is docs/metrics.md).

Read at scrape time from what the server keeps: the step outcomes of every committed transition
(wiggle/_server/timings.py), the dispatcher's RPC latency (wiggle/_server/routes.py), the
PostgreSQL pool's own statistics, the workers seen polling (wiggle/_server/pollers.py), the
background sample of the store (wiggle/_server/metrics_sampler.py), and the build. Labels are
bounded: workflow, node, queue, outcome, method, status, source; never an instance or worker id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from .. import _fast
from .._version import __version__

__all__ = ["pager_families", "WORKER_SEEN_SECONDS", "worker_queues"]

#: A worker counts as connected while it polled within this long (a long poll waits up to 60 s).
WORKER_SEEN_SECONDS = 90.0


def pager_families(server: Any) -> Iterator[Any]:
    """Every family of this module, for ``WiggleCollector`` (wiggle/_server/metrics_http.py)."""
    yield from step_families(server.instances.timings)
    yield from instance_families(server)
    yield from rpc_latency(server.metrics)
    yield from worker_families(server)
    yield from pool_families(server.store)
    info = GaugeMetricFamily(
        "wiggle_build_info",
        "always 1: the server's version and hot-path implementation",
        labels=["version", "impl"],
    )
    info.add_metric([__version__, _fast.IMPL], 1)
    yield info


def step_families(timings: Any) -> Iterator[Any]:
    """Step attempts by outcome with their duration, retries, final failures."""
    attempts = CounterMetricFamily(
        "wiggle_step_attempts",
        "step attempts ended, by workflow, node and outcome",
        labels=["workflow", "node", "outcome"],
    )
    duration = HistogramMetricFamily(
        "wiggle_step_duration_seconds",
        "how long a step attempt took (claimed or reached -> ended), by workflow, node and outcome",
        labels=["workflow", "node", "outcome"],
    )
    series = {labels: (buckets, total) for labels, buckets, total in timings.step_duration.series()}
    for labels, step in timings.step_series():
        attempts.add_metric(list(labels), step.attempts)
        buckets, total = series[labels]
        duration.add_metric(list(labels), buckets, sum_value=total)
    yield attempts
    yield duration
    for name, text, counter in (
        ("wiggle_step_retries", "step attempts followed by another attempt (any cause)", timings.retries),
        (
            "wiggle_step_failures",
            "steps failed for good (their instance failed there)",
            timings.step_failures,
        ),
    ):
        family = CounterMetricFamily(name, text, labels=["workflow", "node"])
        for (workflow, node), n in sorted(counter.items()):
            family.add_metric([workflow, node], n)
        yield family


def instance_families(server: Any) -> Iterator[Any]:
    """Instances started (per source) and running; schedule ticks."""
    timings = server.instances.timings
    started = CounterMetricFamily(
        "wiggle_instances_started",
        "instances started on this node, by workflow and source (client, schedule, sub_workflow)",
        labels=["workflow", "source"],
    )
    for (workflow, source), n in sorted(timings.started.items()):
        started.add_metric([workflow, source], n)
    yield started
    ticks = CounterMetricFamily(
        "wiggle_schedule_ticks",
        "schedule ticks by workflow and outcome (fired, skipped, buffered, triggered)",
        labels=["workflow", "outcome"],
    )
    for (workflow, outcome), n in sorted(timings.schedule_ticks.items()):
        ticks.add_metric([workflow, outcome], n)
    yield ticks
    sampler = getattr(server, "sampler", None)
    if sampler is None:
        return
    sampler.wanted()
    running = GaugeMetricFamily(
        "wiggle_instances_running", "instances RUNNING, by workflow (the store, sampled)", labels=["workflow"]
    )
    for workflow, n in sorted(sampler.running.items()):
        running.add_metric([workflow], n)
    yield running
    waiting = GaugeMetricFamily(
        "wiggle_workflow_concurrency_waiting_instances",
        "instances SCHEDULED waiting for a slot of their workflow's concurrency limit, by workflow (sampled)",
        labels=["workflow"],
    )
    for workflow, n in sorted(sampler.concurrency_waiting.items()):
        waiting.add_metric([workflow], n)
    yield waiting


def rpc_latency(metrics: Any) -> Iterator[Any]:
    """Server-side RPC latency by method, timed by the one dispatcher."""
    family = HistogramMetricFamily(
        "wiggle_rpc_duration_seconds",
        "server-side RPC latency by method (a long poll's wait included); a stream's messages as their RPC",
        labels=["method"],
    )
    for labels, buckets, total in metrics.rpc_seconds.series():
        family.add_metric(list(labels), buckets, sum_value=total)
    yield family


def worker_queues(server: Any) -> dict[str, int]:
    """queue -> workers that polled it within WORKER_SEEN_SECONDS (on this node)."""
    pollers = server.service.pollers
    since = pollers.now() - WORKER_SEEN_SECONDS * 1000
    out: dict[str, int] = {}
    for poller in pollers.snapshot():
        if poller.last_seen >= since:
            for queue in poller.queues:
                out[queue] = out.get(queue, 0) + 1
    return out


def worker_families(server: Any) -> Iterator[Any]:
    """Workers connected (seen polling), WorkerSession and ClientSession streams open."""
    pollers = server.service.pollers
    since = pollers.now() - WORKER_SEEN_SECONDS * 1000
    connected = GaugeMetricFamily(
        "wiggle_workers_connected", f"workers that polled this node within {WORKER_SEEN_SECONDS:g} s"
    )
    connected.add_metric([], sum(1 for p in pollers.snapshot() if p.last_seen >= since))
    yield connected
    sessions = GaugeMetricFamily("wiggle_worker_sessions_open", "WorkerSession streams open on this node")
    sessions.add_metric([], server.metrics.sessions_open)
    yield sessions
    clients = GaugeMetricFamily(
        "wiggle_client_sessions_open", "ClientSession streams (clients' starts) open on this node"
    )
    clients.add_metric([], server.metrics.client_sessions_open)
    yield clients


def pool_families(store: Any) -> Iterator[Any]:
    """The PostgreSQL connection pool (psycopg_pool's get_stats); nothing for the memory store."""
    db = getattr(store, "db", None)
    pool = getattr(db, "pool", None)
    if pool is None:
        return
    stats = pool.get_stats()
    for name, text, key in (
        ("wiggle_db_pool_connections", "connections the pool holds (busy and idle)", "pool_size"),
        ("wiggle_db_pool_connections_idle", "connections idle in the pool", "pool_available"),
        ("wiggle_db_pool_max_connections", "the most connections the pool may open", "pool_max"),
        ("wiggle_db_pool_requests_waiting", "callers waiting for a connection", "requests_waiting"),
    ):
        gauge = GaugeMetricFamily(name, text)
        gauge.add_metric([], stats.get(key, 0))
        yield gauge
    errors = CounterMetricFamily(
        "wiggle_db_pool_acquire_errors", "requests for a connection that failed (timed out, refused)"
    )
    errors.add_metric([], stats.get("requests_errors", 0))
    yield errors
