"""Server histograms and outcome counters, fed by the instance layer (exported by metrics_http).

Step schedule-to-start (READY and due → claimed) and run time (claimed → reported, from the
history entries a transition writes) per workflow and queue; instance outcomes per workflow and
status; the latency of a store mutation (lock, load, transition, persist, commit) per operation.
Plain counters: prometheus-client is needed only to export them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, InstanceState, Token
from .._histogram import Histogram, Series

__all__ = ["Timings", "STEP_BUCKETS", "STORE_BUCKETS"]

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
_WORKER_KINDS = frozenset({"TASK", "PREDICATE"})
_REPORTED = frozenset({"COMPLETED", "RETRY", "FAILED"})


class Timings:
    """Everything the instance layer observes for /metrics.

    Called on every claim and every transition, so each keeps the ``Series`` of the labels it
    observes (by workflow name, then queue or definition version and node) and updates it in place,
    instead of building a label tuple and looking it up per step.
    """

    def __init__(self) -> None:
        self.schedule_to_start = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.run_time = Histogram(STEP_BUCKETS)  # (workflow, queue)
        self.mutation = Histogram(STORE_BUCKETS)  # (operation,)
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (workflow, status)
        self.mutate_seconds = self.mutation.labels(("mutate",))
        # workflow -> queue -> its schedule-to-start series
        self._waits: dict[str, dict[str, Series]] = {}
        # workflow -> definition version -> node -> its run-time series (a node's queue may differ
        # between versions)
        self._runs: dict[str, dict[str, dict[str, Series]]] = {}

    def claimed(self, loaded: LoadedDefinition, token: Token, now: int) -> None:
        """A due READY token is being claimed at ``now``: how long it waited."""
        available = token.available_at
        waited = now - available if available and now > available else 0
        name = loaded.definition.name
        by_queue = self._waits.get(name)
        if by_queue is None:
            by_queue = self._waits[name] = {}
        series = by_queue.get(token.queue)
        if series is None:
            series = by_queue[token.queue] = self.schedule_to_start.labels((name, token.queue))
        seconds = waited / 1000  # Series.observe written out (once per claimed step)
        series.counts[bisect_left(series.buckets, seconds)] += 1
        series.sum += seconds

    def changed(self, loaded: LoadedDefinition, state: InstanceState, changes: Changes | None) -> None:
        """A transition's changes: the step attempts it reported, the outcome if it finished."""
        if changes is None:
            return
        workflow = state.instance.workflow
        nodes: dict[str, Series] | None = None
        for entry in changes.history:  # a local run's batch: one entry per step
            if entry.kind in _WORKER_KINDS and entry.outcome in _REPORTED and entry.started_at:
                if nodes is None:
                    nodes = self._run_series(workflow, loaded)
                series = nodes.get(entry.node_id)
                if series is None:
                    node = loaded.nodes.get(entry.node_id)
                    queue = loaded.queue_of(node) if node is not None else ""
                    series = nodes[entry.node_id] = self.run_time.labels((workflow, queue))
                ran = entry.ended_at - entry.started_at
                if ran > 0:  # Series.observe written out (once per reported step)
                    seconds = ran / 1000
                    series.counts[bisect_left(series.buckets, seconds)] += 1
                    series.sum += seconds
                else:  # every step of a batch after its first (wiggle/_engine/local_runs.py)
                    series.counts[series.zero] += 1
        if changes.finished:
            self.outcomes[(workflow, str(state.instance.status))] += 1

    def _run_series(self, workflow: str, loaded: LoadedDefinition) -> dict[str, Series]:
        by_version = self._runs.get(workflow)
        if by_version is None:
            by_version = self._runs[workflow] = {}
        nodes = by_version.get(loaded.version)
        if nodes is None:
            nodes = by_version[loaded.version] = {}
        return nodes
